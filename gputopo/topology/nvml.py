"""Build a node's :class:`Topology` from NVML, through a small interface.

Why an adapter: the reporter runs on GPU nodes, where NVML (``nvidia-ml-py``) answers; tests
and this machine have no GPU. Everything the topology needs from NVML goes through
:class:`NvmlSource`, which has a real implementation (:class:`PynvmlSource`) and a recorded
one (:class:`RecordedNvml`, fed from JSON captured on a node), so the code that turns NVML's
answers into legend codes is the same in both.

How the legend is rebuilt, as ``nvidia-smi topo -m`` does (and go-gpuallocator):

- NVLink: for every active link of a GPU, NVML gives the PCI bus id at the far end. A bus id
  of another GPU adds one link to that pair (``NV#`` = the count). A bus id that is no GPU
  is an NVSwitch: every pair of GPUs that both reach switches is ``NV#`` with the smaller
  of their switch link counts (DGX A100: 12 links each -> every pair NV12);
- otherwise the common PCIe ancestor level: SINGLE -> PIX, MULTIPLE -> PXB, HOSTBRIDGE ->
  PHB, NODE -> NODE, SYSTEM -> SYS (``nvmlDeviceGetTopologyCommonAncestor``);
- the NVLink generation from the GPU architecture (Pascal nvlink1 ... Blackwell nvlink5).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gputopo.errors import InputError, TopologyError
from gputopo.topology.model import Gpu, Topology

#: NVML_TOPOLOGY_* common-ancestor levels -> legend codes.
ANCESTOR_CODE: dict[int, str] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
#: NVML_DEVICE_ARCH_* -> NVLink generation.
ARCH_GENERATION: dict[int, str] = {
    4: "nvlink1",
    5: "nvlink2",
    7: "nvlink3",
    9: "nvlink4",
    10: "nvlink5",
}


class NvmlSource(Protocol):
    """The NVML questions the topology needs; indices are NVML device indices."""

    def device_count(self) -> int: ...

    def bus_id(self, index: int) -> str: ...

    def common_ancestor(self, a: int, b: int) -> int: ...

    def nvlink_remotes(self, index: int) -> Sequence[str]: ...

    def numa_node(self, index: int) -> int | None: ...

    def architecture(self, index: int) -> int | None: ...

    def uuid(self, index: int) -> str | None:
        """``nvmlDeviceGetUUID`` ("GPU-…"): what a DRA device names (None: unknown)."""
        ...

    def name(self, index: int) -> str | None:
        """``nvmlDeviceGetName`` ("NVIDIA A100-SXM4-80GB"): the GPU model where GPU Feature
        Discovery does not label the node (gputopo.cluster.gpu_facts; None: unknown)."""
        ...

    def memory_mib(self, index: int) -> int | None:
        """``nvmlDeviceGetMemoryInfo().total`` in MiB, as GFD's ``nvidia.com/gpu.memory``
        writes it (None: unknown)."""
        ...

    def fabric(self, index: int) -> Fabric | None:
        """``nvmlDeviceGetGpuFabricInfo``: (cluster UUID, clique id, state, status), None
        where the GPU or driver has no fabric (every GPU before Hopper)."""
        ...


#: (cluster UUID as 8-4-4-4-12 hex, clique id, NVML_GPU_FABRIC_STATE_*, nvmlReturn_t status)
Fabric = tuple[str, int, int, int]


def topology_from_nvml(source: NvmlSource) -> Topology:
    """The node's topology as NVML describes it."""
    n = source.device_count()
    if n < 1:
        raise TopologyError("NVML reports no GPUs")
    bus = [_norm(source.bus_id(i)) for i in range(n)]
    by_bus = {b: i for i, b in enumerate(bus)}
    direct = [[0] * n for _ in range(n)]
    switch = [0] * n
    for i in range(n):
        for remote in source.nvlink_remotes(i):
            j = by_bus.get(_norm(remote))
            if j is None:
                switch[i] += 1
            elif j != i:
                direct[i][j] += 1
    links: list[list[str]] = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append("X")
                continue
            count = max(direct[i][j], direct[j][i]) + min(switch[i], switch[j])
            if count:
                row.append(f"NV{count}")
            else:
                level = source.common_ancestor(i, j)
                if level not in ANCESTOR_CODE:
                    raise TopologyError(f"GPU {i}/{j}: unknown NVML topology level {level}")
                row.append(ANCESTOR_CODE[level])
        links.append(row)
    arch = source.architecture(0)
    return Topology(
        gpus=tuple(Gpu(index=i, numa=source.numa_node(i)) for i in range(n)),
        links=tuple(tuple(r) for r in links),
        generation=ARCH_GENERATION.get(arch) if arch is not None else None,
    )


#: What the reporter adds to each ``gpus[i]`` beside the wiring, by annotation key: the
#: source's answer of that name (CONTRACT.md: uuid and pciBusId tie a DRA device to its
#: index; name and memoryMiB name the GPU model where GFD does not run).
IDENTITY_KEYS = {"uuid": "uuid", "name": "name", "memoryMiB": "memory_mib"}


def gpu_identities(source: NvmlSource) -> list[dict[str, Any]]:
    """Each GPU's ``index``, ``pciBusId`` and, where NVML says them, ``uuid``, ``name`` and
    ``memoryMiB``: what the reporter adds to each ``gpus[i]`` of the topology annotation,
    so that a DRA device (named by uuid and PCI bus id, not by index) can be tied to its
    index and the node's GPU model is known without GPU Feature Discovery."""
    out = []
    for i in range(source.device_count()):
        entry: dict[str, Any] = {"index": i, "pciBusId": source.bus_id(i)}
        entry.update(_optional(source, i))
        out.append(entry)
    return out


def _optional(source: NvmlSource, index: int) -> dict[str, Any]:
    """The answers a source gives of :data:`IDENTITY_KEYS` (older recordings and test
    sources implement none of them, or answer None)."""
    out = {}
    for key, method in IDENTITY_KEYS.items():
        ask = getattr(source, method, None)
        value = ask(index) if ask is not None else None
        if value:
            out[key] = value
    return out


def local_topology(recorded: str | None = None) -> Topology:
    """This node's topology: from a file of recorded NVML answers (``record``) when one is
    named, else from the driver. The reporter and the device plugin both start here."""
    return topology_from_nvml(local_source(recorded))


def local_source(recorded: str | None = None) -> NvmlSource:
    """Recorded NVML answers when a file is named, else the driver's."""
    if recorded:
        try:
            with open(recorded, encoding="utf-8") as fh:
                return RecordedNvml.from_json(fh.read())
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", file=recorded) from exc
    return PynvmlSource()  # pragma: no cover - needs a GPU


def _norm(bus_id: str) -> str:
    # NVML pads the PCI domain to 8 hex digits in some calls and 4 in others.
    s = bus_id.strip().lower()
    domain, _, rest = s.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else s


class RecordedNvml:
    """NVML answers captured as JSON on a node (see ``record``), replayed without a GPU.

    Shape: ``{"devices": [{"busId": str, "numa": int|null, "arch": int|null,
    "nvlinkRemotes": [str, ...]}], "commonAncestor": [[int, ...], ...]}``.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        try:
            self._devices = list(data["devices"])
            self._ancestor = [list(r) for r in data["commonAncestor"]]
        except (KeyError, TypeError) as exc:
            raise TopologyError(f"recorded NVML data: missing {exc}") from exc

    @classmethod
    def from_json(cls, text: str) -> RecordedNvml:
        try:
            return cls(json.loads(text))
        except ValueError as exc:
            raise TopologyError(f"recorded NVML data: not JSON ({exc})") from exc

    def device_count(self) -> int:
        return len(self._devices)

    def bus_id(self, index: int) -> str:
        return str(self._devices[index]["busId"])

    def common_ancestor(self, a: int, b: int) -> int:
        return int(self._ancestor[a][b])

    def nvlink_remotes(self, index: int) -> Sequence[str]:
        return list(self._devices[index].get("nvlinkRemotes", []))

    def numa_node(self, index: int) -> int | None:
        return self._devices[index].get("numa")

    def architecture(self, index: int) -> int | None:
        return self._devices[index].get("arch")

    def uuid(self, index: int) -> str | None:
        raw = self._devices[index].get("uuid")
        return raw if isinstance(raw, str) and raw else None

    def name(self, index: int) -> str | None:
        raw = self._devices[index].get("name")
        return raw if isinstance(raw, str) and raw else None

    def memory_mib(self, index: int) -> int | None:
        raw = self._devices[index].get("memoryMiB")
        return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None

    def fabric(self, index: int) -> Fabric | None:
        raw = self._devices[index].get("fabric")
        if not isinstance(raw, Mapping):
            return None
        try:
            return (str(raw["clusterUuid"]), int(raw["cliqueId"]), int(raw["state"]),
                    int(raw.get("status", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise TopologyError(f"recorded NVML data: bad fabric entry ({exc})") from exc


def record(source: NvmlSource) -> dict[str, Any]:
    """Capture a source's answers in :class:`RecordedNvml`'s JSON shape (run on a GPU node)."""
    n = source.device_count()
    return {
        "devices": [
            {
                "busId": source.bus_id(i),
                "numa": source.numa_node(i),
                "arch": source.architecture(i),
                "nvlinkRemotes": list(source.nvlink_remotes(i)),
                **_optional(source, i),
                **_fabric_record(source.fabric(i)),
            }
            for i in range(n)
        ],
        "commonAncestor": [
            [0 if i == j else source.common_ancestor(i, j) for j in range(n)] for i in range(n)
        ],
    }


def _fabric_record(fabric: Fabric | None) -> dict[str, Any]:
    if fabric is None:
        return {}
    uuid, clique, state, status = fabric
    return {"fabric": {"clusterUuid": uuid, "cliqueId": clique, "state": state,
                       "status": status}}


class PynvmlSource:  # pragma: no cover - needs a GPU and its driver
    """The real NVML through ``nvidia-ml-py`` (import name ``pynvml``)."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise TopologyError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from exc
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise TopologyError(f"cannot initialise NVML: {exc}") from exc
        self._handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]

    def device_count(self) -> int:
        return len(self._handles)

    def bus_id(self, index: int) -> str:
        return _text(self._nvml.nvmlDeviceGetPciInfo(self._handles[index]).busId)

    def uuid(self, index: int) -> str | None:
        try:
            return _text(self._nvml.nvmlDeviceGetUUID(self._handles[index]))
        except self._nvml.NVMLError:
            return None

    def name(self, index: int) -> str | None:
        try:
            return _text(self._nvml.nvmlDeviceGetName(self._handles[index]))
        except self._nvml.NVMLError:
            return None

    def memory_mib(self, index: int) -> int | None:
        try:
            info = self._nvml.nvmlDeviceGetMemoryInfo(self._handles[index])
        except self._nvml.NVMLError:
            return None
        return int(info.total) // (1 << 20)

    def common_ancestor(self, a: int, b: int) -> int:
        return int(
            self._nvml.nvmlDeviceGetTopologyCommonAncestor(self._handles[a], self._handles[b])
        )

    def nvlink_remotes(self, index: int) -> Sequence[str]:
        nvml, handle, out = self._nvml, self._handles[index], []
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                out.append(_text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
            except nvml.NVMLError:
                continue  # link not present on this GPU
        return out

    def numa_node(self, index: int) -> int | None:
        # The host NUMA node(s) nearest the GPU (what nvidia-smi prints as NUMA Affinity);
        # a GPU near several nodes, or an old driver, gives None.
        nvml = self._nvml
        try:
            words = nvml.nvmlDeviceGetMemoryAffinity(
                self._handles[index], 4, nvml.NVML_AFFINITY_SCOPE_NODE
            )
        except (AttributeError, nvml.NVMLError):
            return None
        nodes = [64 * w + b for w, word in enumerate(words) for b in range(64) if word >> b & 1]
        return nodes[0] if len(nodes) == 1 else None

    def architecture(self, index: int) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetArchitecture(self._handles[index]))
        except (AttributeError, self._nvml.NVMLError):
            return None

    def fabric(self, index: int) -> Fabric | None:
        try:
            info = self._nvml.nvmlDeviceGetGpuFabricInfo(self._handles[index])
        except (AttributeError, self._nvml.NVMLError):
            return None  # no fabric on this GPU or driver
        # a ``c_char * 16`` field reads as bytes cut at the first NUL: read the 16 raw bytes
        try:
            import ctypes

            at = ctypes.addressof(info) + type(info).clusterUuid.offset
            raw = ctypes.string_at(at, 16)
        except (AttributeError, TypeError):
            raw = bytes(info.clusterUuid)[:16].ljust(16, b"\0")
        h = raw.hex()
        uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        return uuid, int(info.cliqueId), int(info.state), int(info.status)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
