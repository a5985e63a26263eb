"""Which network transport NCCL will find on this node, read from sysfs, and what the
reporter writes about it on the Node.

Why sysfs: NCCL's IB transport uses the verbs devices the kernel lists under
``/sys/class/infiniband`` (InfiniBand and RoCE alike) with a port in state ACTIVE, and it
registers GPU memory with the NIC (GPUDirect RDMA, ``NET/IB/<n>/GDRDMA`` in its log) when a
peer-memory module is loaded: ``nvidia_peermem`` (the driver's, since R470) or Mellanox's
older ``nv_peer_mem`` (``/sys/module/<name>``; MLNX_OFED's peer-memory client also shows as
``/sys/kernel/mm/memory_peers/nv_mem``). Reading files needs no privilege, no library and
no RDMA tooling in the reporter's image. The root is a parameter so that tests build a
fake tree.

Not seen here (the operator states them by hand or with ``--transport``): GPUDirect over
DMA-BUF (NCCL >= 2.19 with the open kernel modules and a 5.12+ kernel, no peer-memory
module), RDMA devices in an exclusive network namespace (not listed in a pod's sysfs), and
whether NCCL may use the device at all (``NCCL_IB_DISABLE``, ``NCCL_IB_HCA``). Software
RDMA (soft-RoCE ``rxe``, ``siw``) has no PCI device behind it and counts as none: it runs
over the host's TCP/IP stack.

Writing (:func:`transport_annotations`): the reporter sets
``gputopo.io/network-transport-detected`` to what it found and, in ``auto`` mode, sets
``gputopo.io/network-transport`` only when the node has none, still carries the value
the reporter detected last time, or carries one placement cannot read (not tcp, rdma or gdr:
read as tcp); a different valid value was set by an operator and is kept.
``--transport tcp|rdma|gdr`` writes that value whatever the node says; ``off`` writes
nothing about the transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gputopo import names
from gputopo.errors import InputError

#: Kernel modules (``/sys/module/<name>``) and the peer-memory client entry whose presence
#: means a NIC can read and write GPU memory.
PEER_MEMORY = ("module/nvidia_peermem", "module/nv_peer_mem", "kernel/mm/memory_peers/nv_mem")
#: ``--transport`` of ``topology report``: detect, a fixed value, or leave the node alone.
MODES = ("auto", *names.NETWORK_TRANSPORTS, "off")


@dataclass(frozen=True)
class Probe:
    """What was found: the transport, the active RDMA devices (``mlx5_0:1 InfiniBand``)
    and the peer-memory entry seen (None: no GPUDirect)."""

    transport: str
    devices: tuple[str, ...] = ()
    peer_memory: str | None = None
    skipped: tuple[str, ...] = field(default=())  # software RDMA devices left out

    @property
    def why(self) -> str:
        if not self.devices:
            soft = f" (software RDMA ignored: {', '.join(self.skipped)})" if self.skipped else ""
            return f"no RDMA device with an active port{soft}: NCCL uses sockets"
        found = ", ".join(self.devices)
        if self.peer_memory is None:
            return (f"RDMA {found}; no GPUDirect peer-memory module loaded (nvidia_peermem): "
                    f"data is staged through host memory")
        return f"RDMA {found}; GPUDirect via {self.peer_memory}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def probe(sysfs: str | Path = "/sys") -> Probe:
    """The transport NCCL will find under ``sysfs`` (module docstring). InputError when
    ``sysfs`` is not a sysfs root or its RDMA device list cannot be read: guessing "no
    RDMA" there would publish tcp on a node that has RDMA."""
    root = Path(sysfs)
    if not (root / "class").is_dir():
        # every sysfs has class/: a wrong root (a typo, the host's / mounted instead of its
        # /sys) would otherwise read as "no RDMA" and publish tcp on an RDMA node
        raise InputError("not a sysfs mount (no class/ in it), so the network transport "
                         "cannot be told; give the directory sysfs is mounted on",
                         file=str(root))
    devices: list[str] = []
    skipped: list[str] = []
    try:
        hcas = sorted((root / "class" / "infiniband").iterdir())
    except (FileNotFoundError, NotADirectoryError):
        hcas = []  # no RDMA driver loaded: no RDMA device
    except OSError as exc:
        raise InputError(f"cannot read class/infiniband: {exc.strerror}",
                         file=str(root)) from exc
    for hca in hcas:
        if not (hca / "device").exists():  # no PCI device: rxe / siw over TCP/IP
            skipped.append(hca.name)
            continue
        try:
            ports = sorted((hca / "ports").iterdir())
        except OSError:
            continue
        for port in ports:
            if "ACTIVE" in _read(port / "state").upper():
                layer = _read(port / "link_layer") or "unknown link layer"
                devices.append(f"{hca.name}:{port.name} {layer}")
    if not devices:
        return Probe(names.DEFAULT_NETWORK_TRANSPORT, skipped=tuple(skipped))
    peer = next((p for p in PEER_MEMORY if (root / p).exists()), None)
    return Probe("gdr" if peer else "rdma", tuple(devices),
                 peer.rsplit("/", 1)[-1] if peer else None, tuple(skipped))


def transport_annotations(current: Mapping[str, str], detected: str | None, mode: str
                          ) -> tuple[dict[str, str], str]:
    """The annotations the reporter writes about the transport, given the node's
    ``current`` annotations, what it ``detected`` (None: not probed, only with ``off``)
    and its ``--transport`` ``mode``; and a sentence saying what it did. Only changed
    values are returned."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return {}, "transport annotations left alone (--transport off)"
    if detected is None:
        raise ValueError(f"--transport {mode} needs what was detected")
    want = {names.NETWORK_TRANSPORT_DETECTED_ANNOTATION: detected}
    now = current.get(names.NETWORK_TRANSPORT_ANNOTATION)
    if mode != "auto":
        want[names.NETWORK_TRANSPORT_ANNOTATION] = mode
        why = f"transport {mode} (--transport {mode}; detected {detected})"
    elif now is None or now == current.get(names.NETWORK_TRANSPORT_DETECTED_ANNOTATION):
        want[names.NETWORK_TRANSPORT_ANNOTATION] = detected
        why = f"transport {detected} (detected)"
    elif now.strip().lower() not in names.NETWORK_TRANSPORTS:
        # placement reads such a value as tcp: keeping it would protect nothing the
        # operator meant and hide what was found
        want[names.NETWORK_TRANSPORT_ANNOTATION] = detected
        why = (f"transport {detected} (detected; replaced {now!r}, which is not one of "
               f"{', '.join(names.NETWORK_TRANSPORTS)} and read as "
               f"{names.DEFAULT_NETWORK_TRANSPORT})")
    else:
        why = (f"transport {now!r} kept: set by hand (detected {detected}; "
               f"--transport {detected} would replace it)")
    return {k: v for k, v in want.items() if current.get(k) != v}, why
