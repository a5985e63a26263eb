"""Kubernetes objects → solver inputs: what a Node and the Pods bound to it say about GPUs.

Why here and only here: the file-backed snapshot and the live API view must agree exactly
on which nodes are activated, which GPUs are taken and how bad node data is treated, so
both call these functions.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from gputopo import names
from gputopo.cluster.dra import DEVICE_PLUGIN, DRA, DraNode
from gputopo.cluster.gpu_facts import gpu_identities_of, gpu_model_of
from gputopo.cluster.node_fit import NodeFacts
from gputopo.cluster.node_resources import GPU_RESOURCES, Requests, node_resources, pod_requests
from gputopo.cluster.nvlink_domain import nvlink_domain_of, topology_with_product, usable_domain
from gputopo.errors import TopologyError
from gputopo.placement.types import NodeState
from gputopo.topology.model import Topology

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata`` of an object, or an empty mapping when absent or malformed."""
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """Labels of an object; never raises on malformed input."""
    lab = meta(obj).get("labels")
    return lab if isinstance(lab, Mapping) else {}


def annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """Annotations of an object; never raises on malformed input."""
    ann = meta(obj).get("annotations")
    return ann if isinstance(ann, Mapping) else {}


def is_activated(node: Mapping[str, Any]) -> bool:
    """True when the node opted in to topology placement (``ack.node.gpu.schedule=topology``)."""
    return labels(node).get(names.NODE_ACTIVATION_LABEL) == names.NODE_ACTIVATION_VALUE


def parse_gpu_list(value: object) -> tuple[int, ...]:
    """``"4,5"`` → ``(4, 5)``; raises ValueError on anything else."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a GPU index list: {value!r}")
    out = tuple(int(part) for part in value.split(","))
    if any(i < 0 for i in out):
        raise ValueError(f"negative GPU index in {value!r}")
    return out


def gpus_held_by_pod(pod: Mapping[str, Any]) -> tuple[str, tuple[int, ...]] | None:
    """(node name, GPU indices) a live pod holds, from its gpu-group annotation.

    A pod counts once bound (``spec.nodeName``) and also while it waits to be bound on the
    node its gputopo placement record pinned it to: a gang can wait in the scheduler's
    queue longer than its reservation lives, and its pinned GPUs must not be handed out
    again meanwhile.
    """
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    if status.get("phase") in TERMINAL_PHASES:
        return None
    node = spec.get("nodeName") or _pinned_node(pod)
    if not node:
        return None
    raw = annotations(pod).get(names.GPU_GROUP_ANNOTATION)
    if raw is None:
        return None
    try:
        return str(node), parse_gpu_list(raw)
    except ValueError:
        return None


Port = tuple[str, int]  # (protocol, port number)


def claimed_ports(spec: Mapping[str, Any], *, host_network: bool,
                  skip: frozenset[str] | set[str] = frozenset()) -> set[Port]:
    """Host ports a pod spec claims on its node: every declared port under hostNetwork
    (init containers too: the API server defaults ``hostPort = containerPort`` on all of
    them, ``defaultHostNetworkPorts``), else the explicit hostPorts. Ports whose name is
    in ``skip`` (those a network plan rewrites) are left out. Any shape of input is read
    without an error (a review may carry anything)."""
    out: set[Port] = set()
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else []:
            ports = c.get("ports") if isinstance(c, Mapping) else None
            for p in ports if isinstance(ports, list) else []:
                if not isinstance(p, Mapping):
                    continue
                name = p.get("name")
                if isinstance(name, str) and name in skip:
                    continue
                number = p.get("hostPort") or (p.get("containerPort") if host_network
                                                else None)
                if isinstance(number, int) and not isinstance(number, bool) and number > 0:
                    out.add((str(p.get("protocol") or "TCP"), number))
    return out


def host_ports_held_by_pod(pod: Mapping[str, Any]) -> tuple[str, frozenset[Port]] | None:
    """(node name, host ports) a live pod holds on its node's network (:func:`claimed_ports`).
    Counted like GPUs: once bound, or while pinned by a placement record."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    if status.get("phase") in TERMINAL_PHASES:
        return None
    ports = claimed_ports(spec, host_network=spec.get("hostNetwork") is True)
    record = placement_record(pod)
    network = record.get("network") if record is not None else None
    if isinstance(network, Mapping):  # listeners its network plan knows it opens
        ports |= plan_listeners(network)
    if not ports:
        return None
    node = spec.get("nodeName") or _pinned_node(pod)
    return (str(node), frozenset(ports)) if node else None


def plan_listeners(plan: Mapping[str, Any]) -> set[Port]:
    """The undeclared listeners a host network plan (a placement record's ``network``)
    names: ``{"plan": "host", "listeners": [["TCP", 2222]]}`` (webhook/placement/network.py,
    implicit_listeners); none for any other plan or shape."""
    if plan.get("plan") != "host" or not isinstance(plan.get("listeners"), list):
        return set()
    out: set[Port] = set()
    for item in plan["listeners"]:
        if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], int) and not isinstance(item[1], bool)):
            out.add((item[0], item[1]))
    return out


def placement_record(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's ``gputopo.io/placement`` record, or None (no such annotation, or not a JSON
    object)."""
    raw = annotations(pod).get(names.PLACEMENT_ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def requests_held_by_pod(pod: Mapping[str, Any]) -> tuple[str, Requests] | None:
    """(node name, effective request) of a live pod's CPU, memory, pods and extended
    resources (gputopo.cluster.node_resources). Counted like GPUs: once bound, or while
    pinned by a placement record; never once Succeeded or Failed."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    if status.get("phase") in TERMINAL_PHASES:
        return None
    node = spec.get("nodeName") or _pinned_node(pod)
    return (str(node), pod_requests(spec, skip=GPU_RESOURCES)) if node else None


def _pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node of a placed pod's ``gputopo.io/placement`` record, if it has one."""
    record = placement_record(pod)
    if record is None or record.get("placed") is not True:
        return None
    node = record.get("node")
    return node if isinstance(node, str) and node else None


def node_topology(
    node: Mapping[str, Any], ack_report: Mapping[str, Any] | None = None
) -> Topology:
    """The node's topology: its annotation, else its ACK report ConfigMap; TopologyError if none."""
    raw = annotations(node).get(names.TOPOLOGY_ANNOTATION)
    if isinstance(raw, str):
        return _topology_from_text(raw)
    if raw is not None:
        return Topology.from_annotation(raw)
    if ack_report is not None:
        from gputopo.topology.ack_report import topology_from_report  # arrives with issue 3

        return topology_from_report(ack_report)
    raise TopologyError(
        f"no {names.TOPOLOGY_ANNOTATION} annotation and no "
        f"{names.ACK_REPORT_NAMESPACE}/<node>{names.ACK_REPORT_SUFFIX} ConfigMap"
    )


@functools.lru_cache(maxsize=4096)
def _topology_from_text(raw: str) -> Topology:
    """Parsed once per distinct annotation text: a fleet has a few hardware models, so
    1,000 nodes share a handful of equal Topology objects. Sharing them also makes the
    solver's (topology, used) dictionary lookups identity hits instead of deep compares
    (measured at 1,000 nodes: snapshot node_states 170 -> 9 ms, one solve 68 -> 7 ms).
    Topology is frozen, so sharing is safe; errors are not cached (raised every time)."""
    topo = Topology.from_annotation(raw)
    # The reporter writes each GPU's uuid into the text, so every node's text differs;
    # equal topologies are still handed out as one object (the identity hits above)
    return _SHARED.setdefault(topo, topo)


#: one Topology object per distinct wiring (uuids and bus ids are not part of equality)
_SHARED: dict[Topology, Topology] = {}


def network_gbps(node: Mapping[str, Any]) -> float:
    """Node network in Gbit/s from its annotation; the documented default when absent/bad."""
    raw = annotations(node).get(names.NETWORK_GBPS_ANNOTATION)
    try:
        value = float(raw) if raw is not None else names.DEFAULT_NETWORK_GBPS
    except (TypeError, ValueError):
        return names.DEFAULT_NETWORK_GBPS
    # "inf" and "1e999" parse as floats too; an infinite network made the cost model divide
    # by zero for every gang that could span that node
    return value if 0 < value < math.inf else names.DEFAULT_NETWORK_GBPS


def network_transport(node: Mapping[str, Any]) -> str:
    """Node network transport ("tcp", "rdma" or "gdr") from its annotation; the documented
    default (tcp) when absent or not one of those (a typo must not make a node look faster)."""
    raw = annotations(node).get(names.NETWORK_TRANSPORT_ANNOTATION)
    value = raw.strip().lower() if isinstance(raw, str) else None
    return value if value in names.NETWORK_TRANSPORTS else names.DEFAULT_NETWORK_TRANSPORT


def network_efficiency(node: Mapping[str, Any]) -> float | None:
    """The node's own share of its line rate (``gputopo.io/network-efficiency``), or None
    when absent or not a number in (0, 1] (then the transport's default applies)."""
    raw = annotations(node).get(names.NETWORK_EFFICIENCY_ANNOTATION)
    try:
        value = float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and 0 < value <= 1 else None


def network_annotation_problems(node: Mapping[str, Any]) -> list[str]:
    """Why a network annotation of ``node`` is not used as written (a misspelt transport
    reads as tcp, a share out of (0, 1] or a line rate that is no positive number is
    ignored), one sentence each; empty when all are used. For the commands that read a
    cluster to say so: the value placement uses is still the documented default."""
    ann = annotations(node)
    out: list[str] = []
    raw = ann.get(names.NETWORK_TRANSPORT_ANNOTATION)
    if raw is not None and network_transport(node) != str(raw).strip().lower():
        out.append(f"{names.NETWORK_TRANSPORT_ANNOTATION} {raw!r} is not one of "
                   f"{', '.join(names.NETWORK_TRANSPORTS)}: read as "
                   f"{names.DEFAULT_NETWORK_TRANSPORT}")
    raw = ann.get(names.NETWORK_EFFICIENCY_ANNOTATION)
    if raw is not None and network_efficiency(node) is None:
        out.append(f"{names.NETWORK_EFFICIENCY_ANNOTATION} {raw!r} is not a share greater "
                   f"than 0 and at most 1: ignored (the transport's share applies)")
    raw = ann.get(names.NETWORK_GBPS_ANNOTATION)
    if raw is not None:
        try:
            ok = 0 < float(raw) < math.inf
        except (TypeError, ValueError):
            ok = False
        if not ok:
            out.append(f"{names.NETWORK_GBPS_ANNOTATION} {raw!r} is not a positive number of "
                       f"Gbit/s: read as {names.DEFAULT_NETWORK_GBPS:g}")
    return out


def allocatable_gpus(node: Mapping[str, Any]) -> int | None:
    """GPUs the device plugin advertises (``aliyun.com/gpu`` after rename, else
    ``nvidia.com/gpu``), or None when the node says nothing (cluster files may omit status)."""
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    alloc = status.get("allocatable") if isinstance(status.get("allocatable"), Mapping) else {}
    counts = []
    for res in (names.TOPOLOGY_GPU_RESOURCE, names.SOURCE_GPU_RESOURCE):
        raw = alloc.get(res)
        try:
            counts.append(int(str(raw)))
        except ValueError:
            continue
    return max(counts) if counts else None


def node_state(
    node: Mapping[str, Any],
    used: Iterable[int] = (),
    ack_report: Mapping[str, Any] | None = None,
    host_ports: Iterable[tuple[str, int]] = (),
    requested: Iterable[Mapping[str, int]] = (),
    dra: DraNode | None = None,
) -> NodeState:
    """A NodeState for an activated node; TopologyError when its data cannot be used.
    ``requested``: the requests of the pods on it (:func:`requests_held_by_pod`); ``dra``:
    its GPU driver's devices when DRA hands its GPUs out (gputopo.cluster.dra)."""
    name = meta(node).get("name")
    if not isinstance(name, str) or not name:
        raise TopologyError("node has no metadata.name")
    topo = topology_with_product(node_topology(node, ack_report), node)
    # A node whose device plugin advertises fewer GPUs than its topology lists has GPUs the
    # scheduler will not hand out (unhealthy, or the plugin is not up): placing a gang
    # there would pin pods to GPUs that never come. Left out, loudly, until they agree.
    advertised = allocatable_gpus(node)
    if advertised is not None and advertised < len(topo.gpus):
        raise TopologyError(
            f"allocatable GPUs ({advertised}) fewer than the {len(topo.gpus)} GPUs of its "
            "topology: device plugin not ready or GPUs unhealthy"
        )
    lab = labels(node)
    known = set(topo.indices)
    held = set(used)
    if dra is not None:
        if dra.unmatched and not dra.devices:
            raise TopologyError(
                f"its {dra.unmatched} DRA GPU device(s) match no GPU of its topology by uuid "
                f"or PCI bus id (the reporter writes both into {names.TOPOLOGY_ANNOTATION})")
        # a GPU of the topology the driver does not publish (or publishes untied) is
        # not handed out: as good as in use
        held |= dra.used | (known - set(dra.devices))
    if ack_report is not None:
        # GPUs the ACK report marks unhealthy are never handed out: as good as in use.
        from gputopo.topology.ack_report import unhealthy_gpus

        with contextlib.suppress(TopologyError):  # unreadable health says nothing
            held |= unhealthy_gpus(ack_report)
    return NodeState(
        name=name,
        topology=topo,
        used=frozenset(i for i in held if i in known),
        zone=lab.get(names.ZONE_LABEL),
        rack=lab.get(names.RACK_LABEL),
        network_gbps=network_gbps(node),
        network_transport=network_transport(node),
        network_efficiency=network_efficiency(node),
        facts=NodeFacts.of(node),
        host_ports=frozenset(host_ports),
        nvlink_domain=usable_domain(topo, nvlink_domain_of(node)),
        resources=node_resources(node, requested, skip=GPU_RESOURCES),
        gpu_model=gpu_model_of(node, dra.published if dra is not None else None),
        gpu_ids=gpu_identities_of(node),
        gpu_handout=DRA if dra is not None else DEVICE_PLUGIN,
        dra_devices=dra.devices if dra is not None else None,
    )
