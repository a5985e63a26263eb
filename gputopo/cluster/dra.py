"""GPUs handed out by Dynamic Resource Allocation: what a pod's claims ask, which devices a
node has and holds, and the claim that pins a replica's chosen GPUs.

Why a module of its own, at the cluster edge: with DRA (``resource.k8s.io/v1``, GA in
Kubernetes 1.34) a pod asks for GPUs through ResourceClaims, not ``nvidia.com/gpu``, and
the scheduler's allocator takes the first devices that match, in the order a ResourceSlice
lists them, with no idea of NVLink. gputopo still chooses the GPUs (the solver works on
driver indices, as for the device plugin); this module translates at the edge: a pod's
claims into a GPU count, the GPU driver's ResourceSlices into each node's devices by
driver index, every ResourceClaim's allocation into GPUs that are used, and a replica's
slot into a claim that only its chosen devices satisfy. The solver never imports it.

Facts relied on (``../shared/FACTS.md`` "Dynamic Resource Allocation for GPUs"; NVIDIA's
driver, ``cmd/gpu-kubelet-plugin/deviceinfo.go``): one device per whole GPU named
``gpu-<minor>`` (the /dev minor, not the NVML index: hence the tie by ``uuid`` or
``resource.kubernetes.io/pciBusID`` to the index the reporter publishes), attribute
``type: gpu``, pool named after the node; a claim's allocation is
``status.allocation.devices.results[{driver, pool, device}]``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputopo import names
from gputopo.quantity import parse_quantity
from gputopo.topology.gpus import GpuIdentity, normal_bus_id

RESOURCE_API = "resource.k8s.io/v1"
#: NVIDIA's DRA driver for GPUs, and the DeviceClass its chart installs (same name)
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
DEFAULT_GPU_CLASSES: tuple[str, ...] = (NVIDIA_GPU_DRIVER,)
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
#: how a node's GPUs are handed out (``NodeState.gpu_handout``, ``gputopo nodes``)
DEVICE_PLUGIN = "device-plugin"
DRA = "dra"
#: device taint effects that keep new claims off a device (DRADeviceTaints)
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_NAME_MAX = 253


class ClaimUnknown(Exception):
    """A pod names a ResourceClaimTemplate or ResourceClaim the cluster does not hold: its
    GPU count cannot be known (never guessed)."""


# --- what a pod asks -----------------------------------------------------------------------
@dataclass(frozen=True)
class GpuRequest:
    """One request for GPUs in one of the pod's claims."""

    pod_claim: str  # the pod's ``spec.resourceClaims[].name``
    request: str  # the claim's ``spec.devices.requests[].name``
    device_class: str
    count: int


@dataclass(frozen=True)
class DraAsk:
    """What a pod's claims ask of GPUs. ``gpus``: the devices of GPU classes its claims
    request (0: none). ``why_not``: why gputopo cannot pin them (the scheduler then
    chooses, and the placement record says so); None when it can. ``templates``: pod claim
    name -> the ResourceClaimTemplate it names (the claims gputopo replaces); ``sources``:
    pod claim name -> the template's ``spec`` (what the pinned claim is made from)."""

    gpus: int
    requests: tuple[GpuRequest, ...] = ()
    why_not: str | None = None
    templates: Mapping[str, str] = field(default_factory=dict)
    sources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)

    def gpu_claims(self) -> list[str]:
        """The pod claim names that hold GPU requests, in request order."""
        return list(dict.fromkeys(r.pod_claim for r in self.requests))


def _map(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(obj: object, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def _count(exactly: Mapping[str, Any]) -> int:
    raw = exactly.get("count", 1)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 1


def _claim_requests(spec: Mapping[str, Any], pod_claim: str, classes: frozenset[str],
                    where: str) -> tuple[list[GpuRequest], str | None]:
    """The GPU requests of one claim spec (``{devices: {...}}``) and why they cannot be
    pinned, if so."""
    devices = _map(spec, "devices")
    out: list[GpuRequest] = []
    why: str | None = None
    for req in _list(devices, "requests"):
        if not isinstance(req, Mapping):
            continue
        name = str(req.get("name") or "")
        exactly = req.get("exactly")
        if isinstance(exactly, Mapping):
            cls = exactly.get("deviceClassName")
            if cls not in classes:
                continue
            out.append(GpuRequest(pod_claim, name, str(cls), _count(exactly)))
            if exactly.get("allocationMode") == "All":
                why = why or f"{where} request {name!r} asks for All devices of {cls}"
            elif exactly.get("adminAccess") is True:
                why = why or f"{where} request {name!r} asks for adminAccess"
            elif _list(exactly, "selectors"):
                why = why or (f"{where} request {name!r} has its own selectors, which "
                              f"gputopo cannot evaluate")
            elif exactly.get("capacity"):
                why = why or f"{where} request {name!r} asks for a share of device capacity"
            continue
        subs = [s for s in _list(req, "firstAvailable")
                if isinstance(s, Mapping) and s.get("deviceClassName") in classes]
        if subs:
            out.append(GpuRequest(pod_claim, name, str(subs[0]["deviceClassName"]),
                                  _count(subs[0])))
            why = why or f"{where} request {name!r} is a firstAvailable list"
    if out and _list(devices, "constraints") and why is None:
        why = f"{where} has constraints between its requests"
    return out, why


def pod_dra_gpus(spec: Mapping[str, Any], namespace: str, cluster: Any,
                 classes: Iterable[str] = DEFAULT_GPU_CLASSES, *,
                 ignore: Iterable[str] = ()) -> DraAsk | None:
    """What the pod spec's claims ask of GPUs (device classes ``classes``), None when it
    has no ``spec.resourceClaims`` (the fast path of every device-plugin pod). ``cluster``:
    a ClusterReader (templates and claims are read through it). ``ignore``: pod claim names
    that are never GPUs (the NVLink channel claim gputopo adds itself). Raises
    :class:`ClaimUnknown` for a template or claim the cluster does not hold."""
    entries = spec.get("resourceClaims")
    if not entries or not isinstance(entries, list):
        return None
    wanted = frozenset(classes)
    skip = frozenset(ignore)
    requests: list[GpuRequest] = []
    why: str | None = None
    templates: dict[str, str] = {}
    sources: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("name") in skip:
            continue
        pod_claim = str(entry.get("name") or "")
        template = entry.get("resourceClaimTemplateName")
        claim = entry.get("resourceClaimName")
        if isinstance(template, str) and template:
            obj = cluster.object(api_version=RESOURCE_API, kind="ResourceClaimTemplate",
                                 namespace=namespace, name=template)
            if obj is None:
                raise ClaimUnknown(f"ResourceClaimTemplate {namespace}/{template} (claim "
                                   f"{pod_claim!r}) not found")
            claim_spec = _map(_map(obj, "spec"), "spec")
            where = f"ResourceClaimTemplate {template}"
        elif isinstance(claim, str) and claim:
            obj = cluster.object(api_version=RESOURCE_API, kind="ResourceClaim",
                                 namespace=namespace, name=claim)
            if obj is None:
                raise ClaimUnknown(f"ResourceClaim {namespace}/{claim} (claim {pod_claim!r}) "
                                   f"not found")
            claim_spec = _map(obj, "spec")
            where = f"ResourceClaim {claim}"
        else:
            continue
        found, problem = _claim_requests(claim_spec, pod_claim, wanted, where)
        if not found:
            continue
        requests.extend(found)
        if isinstance(template, str) and template:
            templates[pod_claim] = template
            sources[pod_claim] = claim_spec
        else:
            problem = problem or (f"the pod names its own {where}: its devices are that "
                                  f"claim's to choose")
        why = why or problem
    if not requests:
        return DraAsk(0)
    return DraAsk(sum(r.count for r in requests), tuple(requests), why, templates, sources)


def replaced_templates(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim name -> the template gputopo replaced by a pinned claim, from the pod's
    ``gputopo.io/claim-templates`` annotation (empty when none or unreadable)."""
    raw = _map(_map(pod, "metadata"), "annotations").get(names.CLAIM_TEMPLATES_ANNOTATION)
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str) and v}


def with_templates(spec: Mapping[str, Any], templates: Mapping[str, str]) -> dict[str, Any]:
    """``spec`` with its claims that ``templates`` names read from those templates again:
    what the pod asked before gputopo pointed them at pinned claims (a re-admitted or
    waiting pod is judged as it was first)."""
    out = dict(spec)
    out["resourceClaims"] = [
        {"name": e["name"], "resourceClaimTemplateName": templates[e["name"]]}
        if isinstance(e, Mapping) and e.get("name") in templates else e
        for e in _list(spec, "resourceClaims")]
    return out


def dra_containers(pod: Mapping[str, Any], ask: DraAsk) -> list[dict[str, Any]]:
    """The containers (init containers first, as ``gpu_containers``) that use the pod's
    GPU claims (``resources.claims[].name``)."""
    wanted = set(ask.gpu_claims())
    spec = _map(pod, "spec")
    out: list[dict[str, Any]] = []
    for key in ("initContainers", "containers"):
        for c in _list(spec, key):
            if isinstance(c, dict) and any(isinstance(r, Mapping) and r.get("name") in wanted
                                           for r in _list(_map(c, "resources"), "claims")):
                out.append(c)
    return out


def has_gpu_resource(pod: Mapping[str, Any], gpu_resources: Iterable[str]) -> bool:
    """True when a container asks for a GPU extended resource (the device plugin's)."""
    wanted = frozenset(gpu_resources)
    spec = _map(pod, "spec")
    for key in ("containers", "initContainers"):
        for c in _list(spec, key):
            res = _map(c, "resources")
            if any(k in wanted for k in (*_map(res, "limits"), *_map(res, "requests"))):
                return True
    return False


# --- what nodes have ------------------------------------------------------------------------
@dataclass(frozen=True)
class DraDevice:
    """One GPU as its DRA driver publishes it."""

    driver: str
    pool: str
    name: str
    uuid: str | None = None


@dataclass(frozen=True)
class DraNode:
    """The GPU driver's devices of one node by driver index, and the indices not free
    (allocated in a claim, pinned by an unallocated claim, or tainted). ``unmatched``:
    devices tied to no index of the topology (the node is then not offered: a device the
    solver cannot see could be handed to anyone)."""

    devices: Mapping[int, DraDevice]
    used: frozenset[int] = frozenset()
    unmatched: int = 0
    #: what the driver publishes of the node's GPUs (its first whole GPU tied to an
    #: index): ``productName``, capacity ``memory`` in MiB, ``cudaComputeCapability``; the
    #: last source of a node's GPU model (gputopo.cluster.gpu_facts)
    published: PublishedGpu | None = None


@dataclass(frozen=True)
class PublishedGpu:
    """A GPU's model as its DRA driver publishes it (FACTS.md, NVIDIA's ``deviceinfo.go``)."""

    product: str | None
    memory_mib: int | None
    compute: tuple[int, int] | None


def _published(device: Mapping[str, Any], driver: str) -> PublishedGpu | None:
    """``productName``, capacity ``memory`` and ``cudaComputeCapability`` of one device;
    None when it carries none of them."""
    product = _attr(device, "productName", driver)
    memory = None
    raw = _map(_map(device, "capacity"), "memory").get("value")
    if raw is None:
        raw = _map(_map(device, "capacity"), f"{driver}/memory").get("value")
    if raw is not None:
        try:
            memory = int(parse_quantity(raw) / (1 << 20)) or None
        except ValueError:
            memory = None
    attrs = _map(device, "attributes")
    cc = attrs.get("cudaComputeCapability") or attrs.get(f"{driver}/cudaComputeCapability")
    version = cc.get("version") or cc.get("string") if isinstance(cc, Mapping) else None
    compute = None
    if isinstance(version, str):
        m = re.match(r"^\s*(\d+)\.(\d+)", version)
        compute = (int(m.group(1)), int(m.group(2))) if m else None
    if product is None and memory is None and compute is None:
        return None
    return PublishedGpu(product, memory, compute)


def _attr(device: Mapping[str, Any], name: str, driver: str) -> str | None:
    attrs = _map(device, "attributes")
    raw = attrs.get(name)
    if raw is None and "/" not in name:
        raw = attrs.get(f"{driver}/{name}")
    value = raw.get("string") if isinstance(raw, Mapping) else None
    return value if isinstance(value, str) else None


def _current_slices(slices: Iterable[Mapping[str, Any]], drivers: frozenset[str]
                    ) -> list[Mapping[str, Any]]:
    """Slices of the GPU drivers at their pool's newest generation (older ones are being
    replaced, as the allocator ignores them)."""
    newest: dict[tuple[str, str], int] = {}
    kept = []
    for s in slices:
        spec = _map(s, "spec")
        if spec.get("driver") not in drivers or not isinstance(spec.get("nodeName"), str):
            continue
        pool = _map(spec, "pool")
        key = (str(spec["driver"]), str(pool.get("name") or ""))
        gen = pool.get("generation") if isinstance(pool.get("generation"), int) else 0
        kept.append((key, gen, s))
        newest[key] = max(newest.get(key, gen), gen)
    return [s for key, gen, s in kept if gen == newest[key]]


def pinned_uuids(claim: Mapping[str, Any]) -> list[str]:
    """The uuids an unallocated claim's requests are pinned to by a ``uuid in [...]``
    selector: a user's claim that no pod holds yet still speaks for those GPUs. Not
    gputopo's own claims (annotation ``gputopo.io/gpu-pin``): until they are allocated
    their gang's reservation holds the GPUs, and a pod re-created for its slot must find
    them free to name the same claim again."""
    if names.GPU_PIN_ANNOTATION in _map(_map(claim, "metadata"), "annotations"):
        return []
    out: list[str] = []
    for req in _list(_map(_map(claim, "spec"), "devices"), "requests"):
        for sel in _list(_map(req, "exactly"), "selectors"):
            expr = _map(sel, "cel").get("expression")
            if isinstance(expr, str):
                m = _PIN.search(expr)
                if m:
                    out.extend(re.findall(r"'([^']*)'", m.group(1)))
    return out


_PIN = re.compile(r"\.uuid\s+in\s+\[([^\]]*)\]")


def _tainted(device: Mapping[str, Any]) -> bool:
    """A taint that keeps new claims off the device (DRADeviceTaints)."""
    return any(isinstance(t, Mapping) and t.get("effect") in _BLOCKING_EFFECTS
               for t in _list(device, "taints"))


def gpu_inventory(slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]],
                  identities: Mapping[str, Sequence[GpuIdentity]], *,
                  drivers: Iterable[str] = (NVIDIA_GPU_DRIVER,)) -> dict[str, DraNode]:
    """Per node with GPU-driver devices: its devices by driver index and the used ones.
    ``identities``: node name -> its GPUs' identities (the reporter's uuid / PCI bus id,
    :func:`gputopo.cluster.gpu_facts.gpu_identities_of`)."""
    wanted = frozenset(drivers)
    devices: dict[str, dict[int, DraDevice]] = {}
    used: dict[str, set[int]] = {}
    unmatched: dict[str, int] = {}
    published: dict[str, PublishedGpu] = {}
    where: dict[tuple[str, str, str], tuple[str, int]] = {}
    by_uuid: dict[str, tuple[str, int]] = {}
    for s in _current_slices(slices, wanted):
        spec = _map(s, "spec")
        node, driver = str(spec["nodeName"]), str(spec["driver"])
        pool = str(_map(spec, "pool").get("name") or "")
        ids = identities.get(node) or ()
        uuids = {g.uuid: g.index for g in ids if g.uuid}
        buses = {g.pci_bus_id: g.index for g in ids if g.pci_bus_id}
        mine = devices.setdefault(node, {})
        for d in _list(spec, "devices"):
            if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
                continue
            kind = _attr(d, "type", driver)
            whole = kind is None or kind == "gpu"
            # a part of a GPU (a MIG device: its parent's uuid and PCI bus id) or the GPU
            # passed through (VFIO: its own bus id) is not offered, but given out it
            # makes its GPU not free
            uuid = _attr(d, "uuid" if whole else "parentUUID", driver)
            bus = _attr(d, PCI_BUS_ID_ATTRIBUTE, driver)
            index = uuids.get(uuid) if uuid else None
            if index is None and bus:
                index = buses.get(normal_bus_id(bus))
            if not whole:
                if index is not None:
                    where[(driver, pool, d["name"])] = (node, index)
                    if _tainted(d):
                        used.setdefault(node, set()).add(index)
                continue
            if index is None:
                unmatched[node] = unmatched.get(node, 0) + 1
                continue
            mine[index] = DraDevice(driver, pool, d["name"], uuid)
            if node not in published:
                found = _published(d, driver)
                if found is not None:
                    published[node] = found
            where[(driver, pool, d["name"])] = (node, index)
            if uuid:
                by_uuid[uuid] = (node, index)
            if _tainted(d):
                used.setdefault(node, set()).add(index)
    for claim in claims:
        results = _list(_map(_map(_map(claim, "status"), "allocation"), "devices"), "results")
        if results:
            for r in results:
                if isinstance(r, Mapping):
                    hit = where.get((str(r.get("driver")), str(r.get("pool")),
                                     str(r.get("device"))))
                    if hit is not None:
                        used.setdefault(hit[0], set()).add(hit[1])
            continue
        for uuid in pinned_uuids(claim):
            hit = by_uuid.get(uuid)
            if hit is not None:
                used.setdefault(hit[0], set()).add(hit[1])
    return {node: DraNode(devs, frozenset(used.get(node, ())), unmatched.get(node, 0),
                          published.get(node))
            for node, devs in devices.items() if devs or unmatched.get(node)}


# --- the claim that pins a slot -----------------------------------------------------------
def claim_name(job: str, replica: str, pod_claim: str) -> str:
    """The ResourceClaim of one replica's pod claim: ``<job>-<replica>-<pod claim>``
    (``replica`` as the reservation writes it, ``worker-1``), lower case; a name longer
    than an object name may be is cut and given a hash of the whole. Deterministic: a pod
    re-created for the same slot names the same claim."""
    raw = f"{job}-{replica}-{pod_claim}".lower()
    text = re.sub(r"[^a-z0-9.-]+", "-", raw).strip("-.")
    if len(text) <= _NAME_MAX:
        return text
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return f"{text[:_NAME_MAX - 11].rstrip('-.')}-{digest}"


def uuid_selector(driver: str, uuids: Sequence[str]) -> dict[str, Any]:
    """The CEL selector only the devices with these uuids satisfy."""
    listed = ", ".join(f"'{u}'" for u in uuids)
    return {"cel": {"expression": f"device.attributes['{driver}'].uuid in [{listed}]"}}


def pinned_claims(ask: DraAsk, devices: Sequence[DraDevice], *, namespace: str, job: str,
                  replica: str, owner: Mapping[str, Any] | None,
                  annotations: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Pod claim name -> the ResourceClaim that pins it: each GPU request of the pod's
    templates gets its share of ``devices`` (the slot's, in slot order) as a uuid selector
    with an exact count; everything else of the template (other requests, config,
    tolerations, the template's labels and annotations) is kept as the resourceclaim
    controller would copy it."""
    out: dict[str, dict[str, Any]] = {}
    left = list(devices)
    for pod_claim in ask.gpu_claims():
        template = ask.sources.get(pod_claim, {})
        spec = copy.deepcopy(dict(template))
        reqs = _list(_map(spec, "devices"), "requests")
        for want in (r for r in ask.requests if r.pod_claim == pod_claim):
            mine, left = left[:want.count], left[want.count:]
            for req in reqs:
                if isinstance(req, dict) and req.get("name") == want.request:
                    exactly = req["exactly"]
                    exactly["allocationMode"] = "ExactCount"
                    exactly["count"] = want.count
                    exactly["selectors"] = [uuid_selector(
                        mine[0].driver if mine else NVIDIA_GPU_DRIVER,
                        [d.uuid or "" for d in mine])]
        meta: dict[str, Any] = {"name": claim_name(job, replica, pod_claim),
                                "namespace": namespace}
        if annotations:
            meta["annotations"] = dict(annotations)
        if owner:
            meta["ownerReferences"] = [dict(owner)]
        out[pod_claim] = {"apiVersion": RESOURCE_API, "kind": "ResourceClaim",
                          "metadata": meta, "spec": spec}
    return out


def point_pod_at_claims(pod: dict[str, Any], names_: Mapping[str, str]) -> None:
    """The pod's claims ``names_`` (pod claim -> ResourceClaim name) refer to those claims
    instead of their templates (``spec.resourceClaims`` is immutable after CREATE: this is
    written at admission only)."""
    for entry in _list(_map(pod, "spec"), "resourceClaims"):
        if isinstance(entry, dict) and entry.get("name") in names_:
            entry.pop("resourceClaimTemplateName", None)
            entry["resourceClaimName"] = names_[entry["name"]]


def templates_annotation(ask: DraAsk) -> str:
    """The value of the pod annotation that keeps which template each replaced claim came
    from (the placement queue makes the claim later from it)."""
    return json.dumps(dict(sorted(ask.templates.items())), separators=(",", ":"))
