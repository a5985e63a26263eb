"""Does the pod fit the node's CPU, memory, pods and extended resources? As the scheduler counts.

Why: the placement step pins every replica to one node. When the node's allocatable CPU or
memory (or an extended resource such as ``rdma/hca``, or its pod slots) cannot hold the pod
beside what is already there, the scheduler's NodeResourcesFit filter keeps the pod off that
node for ever, and under Coscheduling its whole gang with it ("0/2 nodes are available: 1
Insufficient cpu"). So the gang is solved only over placements where every node holds all
the replicas put there, counted the way the scheduler counts:

- a pod's request is ``k8s.io/component-helpers/resource`` ``PodRequests``: the larger of
  the sum of its containers (plus restartable "sidecar" init containers, which run beside
  them) and each plain init container together with the sidecars started before it, plus
  ``spec.overhead``. A container with a limit and no request asks for its limit (the API
  server's defaulting, ``pkg/apis/core/v1/defaults.go``, runs before the scheduler sees it);
- a node's room is ``status.allocatable`` less the requests of every pod on it
  (``pkg/scheduler/framework/plugins/noderesources/fit.go``, ``fitsRequest``): pods bound
  there (those not Succeeded or Failed: the scheduler's pod informer drops terminal pods,
  ``pkg/scheduler/scheduler.go``), and pods gputopo pinned there that are not bound yet
  (they will be);
- ``pods`` counts one per pod against the node's ``allocatable.pods``; a requested
  resource the node does not list is zero there, except those every kubelet reports
  (:data:`KUBELET_RESOURCES`): a cluster file that leaves them out says nothing of them.
  GPU resources are the GPU logic's (the topology decides which GPUs); left out here.

Amounts are integers: CPU in millicores, everything else in its base unit, as the
scheduler's ``Resource`` keeps them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from itertools import compress
from operator import is_not
from typing import Any

from gputopo import names
from gputopo.placement.solver import GroupedNodes
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.quantity import format_quantity, parse_quantity

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
#: Resources every kubelet reports in ``allocatable``. A Node object without one (a
#: hand-written cluster file, the embedded demo, which list GPUs only) says nothing about
#: it, so a request of it is not held against the node; any other resource a node does not
#: list it does not offer (the scheduler's "Insufficient rdma/hca").
KUBELET_RESOURCES = frozenset({CPU, MEMORY, PODS, "ephemeral-storage"})
#: Requests the scheduler reads of every pod but no GPU logic: the rest are extended
#: resources (``vendor/name``) and ``hugepages-*``, compared the same way.
Requests = dict[str, int]
#: GPU resources: the topology's to count (which GPUs), not NodeResourcesFit's here
GPU_RESOURCES = frozenset({names.TOPOLOGY_GPU_RESOURCE, names.SOURCE_GPU_RESOURCE})


def _mapping(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def amount(resource: str, value: object) -> int | None:
    """A quantity as the scheduler keeps it: CPU in millicores (rounded up, as
    ``MilliValue``), anything else in its unit (rounded up, as ``Value``); None when it is
    not a quantity."""
    milli = resource == CPU
    return _amount_of_text(milli, value) if isinstance(value, str) else _amount(milli, value)


def _amount(milli: bool, value: object) -> int | None:
    """:func:`amount`, with CPU's millicores asked for by ``milli``."""
    try:
        q = parse_quantity(value)
    except ValueError:
        return None
    if q < 0:
        return None
    return math.ceil(q * 1000) if milli else math.ceil(q)


#: :func:`_amount` of a quantity text, remembered: the view reads every pod's requests on
#: every change of it, and a cluster uses few distinct texts ("8", "64Gi"); the Fraction
#: arithmetic was most of a pod's ~36 us.
_amount_of_text = lru_cache(maxsize=4096)(_amount)


def _container_requests(container: object, skip: frozenset[str]) -> Requests:
    """A container's requests, a limit standing in for a missing request (API defaulting)."""
    res = _mapping(container, "resources")
    out: Requests = {}
    for source in (_mapping(res, "limits"), _mapping(res, "requests")):  # requests win
        for name, value in source.items():
            if not isinstance(name, str) or name in skip:
                continue
            n = amount(name, value)
            if n is not None:
                out[name] = n
    return out


def add_requests(into: Requests, more: Mapping[str, int]) -> None:
    """``more`` added into ``into`` (in place)."""
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max(into: Requests, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def pod_requests(spec: Mapping[str, Any], *, skip: Iterable[str] = ()) -> Requests:
    """The pod's effective request (component-helpers ``PodRequests``), without the
    resources in ``skip`` (the GPU resources), plus one ``pods``. Zero amounts are left out.
    Any shape of input is read without an error."""
    gone = frozenset(skip)
    reqs: Requests = {}
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else ():
        add_requests(reqs, _container_requests(c, gone))
    sidecars: Requests = {}
    init_max: Requests = {}
    inits = spec.get("initContainers")
    for c in inits if isinstance(inits, list) else ():
        own = _container_requests(c, gone)
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            add_requests(reqs, own)  # a sidecar runs beside the containers
            add_requests(sidecars, own)
            _max(init_max, sidecars)
        else:
            running = dict(own)
            add_requests(running, sidecars)  # the sidecars started before it run meanwhile
            _max(init_max, running)
    _max(reqs, init_max)
    overhead = _mapping(spec, "overhead")
    for name, value in overhead.items():
        n = amount(name, value) if isinstance(name, str) and name not in gone else None
        if n:
            reqs[name] = reqs.get(name, 0) + n
    out = {k: v for k, v in reqs.items() if v > 0}
    out[PODS] = 1
    return out


def pod_demand(pod: Mapping[str, Any]) -> Requests:
    """What one pod of a gang asks of a node besides GPUs (CPU, memory, pods, extended
    resources), counted as the scheduler's NodeResourcesFit counts it."""
    return pod_requests(_mapping(pod, "spec"), skip=GPU_RESOURCES)


def allocatable(node: Mapping[str, Any], *, skip: Iterable[str] = ()) -> Requests | None:
    """The node's ``status.allocatable`` as amounts (GPU resources in ``skip`` left out), or
    None when the object has none (a hand-written cluster file: nothing is known)."""
    alloc = _mapping(_mapping(node, "status"), "allocatable")
    if not alloc:
        return None
    gone = frozenset(skip)
    out: Requests = {}
    for name, value in alloc.items():
        if isinstance(name, str) and name not in gone:
            n = amount(name, value)
            if n is not None:
                out[name] = n
    return out


@dataclass(frozen=True, eq=False)
class NodeResources:
    """What one node offers (``allocatable``) and what its pods ask for (``requested``)."""

    allocatable: Mapping[str, int]
    requested: Mapping[str, int]

    def fits(self, demand: Mapping[str, int], most: int,
             beside: Mapping[str, int] | None = None) -> tuple[int, str]:
        """How many pods asking for ``demand`` fit beside what is requested (and beside
        ``beside``: requests of pods not there yet), at most ``most``; and when fewer than
        ``most``, what rules the next one out, as "cpu 120 of 94" (all those pods' request
        of that resource beside the others, of the node's allocatable)."""
        count, why = most, ""
        for name, want in demand.items():
            if want <= 0:
                continue
            if name not in self.allocatable and name in KUBELET_RESOURCES:
                continue  # not listed: nothing is known against the node
            have = self.allocatable.get(name, 0)
            taken = self.requested.get(name, 0) + (beside.get(name, 0) if beside else 0)
            n = max(0, (have - taken) // want)
            if n < count:
                count = n
                why = f"{name} {show(name, taken + want * (n + 1))} of {show(name, have)}"
        return count, why


def show(resource: str, value: int) -> str:
    """An amount as a person reads it: CPUs as cores ("60", "0.5"), sizes with binary
    units ("500Gi"), counts as numbers."""
    if resource == CPU:
        return format_quantity(Fraction(value, 1000)) if value % 1000 else str(value // 1000)
    return format_quantity(Fraction(value))


def sum_requests(items: Iterable[Mapping[str, int]]) -> Requests:
    """The requests of several pods added up."""
    out: Requests = {}
    for r in items:
        add_requests(out, r)
    return out


def node_resources(node: Mapping[str, Any], requested: Iterable[Mapping[str, int]], *,
                   skip: Iterable[str] = ()) -> NodeResources | None:
    """A node's :class:`NodeResources` from its object and its pods' requests; None when
    the object says nothing of its allocatable resources."""
    alloc = allocatable(node, skip=skip)
    if alloc is None:
        return None
    return NodeResources(allocatable=alloc, requested=sum_requests(requested))


#: How many nodes a reason names before it says "and N more"
NAMED_NODES = 4


#: node name -> (how many of a gang's pods the node's resources hold, what rules the next
#: one out: "cpu 120 of 94"), for the nodes that hold fewer than the gang may put there
Limits = dict[str, tuple[int, str]]


def resource_limits(nodes: Iterable[NodeState], demand: Mapping[str, int],
                    gang: GangRequest) -> Limits:
    """The nodes of ``nodes`` whose resources hold fewer than ``gang.per_node`` pods asking
    for ``demand`` each. Nodes without resource data, and nodes with room for the most the
    gang may put there, are not named (the common case: an empty answer)."""
    most = gang.per_node
    out: Limits = {}
    for n in nodes:
        res = n.resources
        if res is None:
            continue
        count, reason = res.fits(demand, most)
        if count < most:
            out[n.name] = (count, reason)
    return out


def node_lookup(nodes: Sequence[NodeState]) -> Callable[[str], NodeState | None]:
    """Name -> node of ``nodes`` (None when not there): a :class:`GroupedNodes`' own index,
    else one built here. For callers that need a few nodes by name, not a walk over all."""
    return nodes.get if isinstance(nodes, GroupedNodes) else {n.name: n for n in nodes}.get


def capped(nodes: Sequence[NodeState], limits: Mapping[str, tuple[int, str]],
           gang: GangRequest) -> tuple[list[NodeState], dict[str, str]]:
    """Copies of the nodes of ``nodes`` that ``limits`` names, whose ``gpu_cap`` lets the
    solver put no more of the gang there (0: none at all; a node capped tighter already is
    left as it is), and per named node what rules the next pod out. The nodes are found by
    name (a :class:`GroupedNodes` keeps the index)."""
    if not limits:
        return [], {}
    lookup = node_lookup(nodes)
    changed: list[NodeState] = []
    why: dict[str, str] = {}
    for name, (count, reason) in limits.items():
        n = lookup(name)
        if n is None:
            continue
        cap = count * gang.gpus_per_replica
        if cap < n.gpu_cap:
            changed.append(replace(n, gpu_cap=cap))
        why[name] = reason
    return changed, why


def capped_by_resources(nodes: Sequence[NodeState], demand: Mapping[str, int],
                        gang: GangRequest) -> tuple[list[NodeState], dict[str, str]]:
    """:func:`capped` by the :func:`resource_limits` of ``nodes``."""
    return capped(nodes, resource_limits(nodes, demand, gang), gang)


@dataclass
class _Limits:
    """One demand's :func:`resource_limits` for one sequence of node objects."""

    nodes: Sequence[NodeState]
    limits: Limits


class ResourceCaps:
    """:func:`resource_limits`, remembered per (demand, gang shape) for the node objects
    it was worked out on.

    Why: it is a pass over every node of the cluster for each new gang, ~6 ms at 1,000
    nodes for a pod asking for CPU and memory. The placement step asks it of the fitting
    nodes as a reader gave them (``source``, before held GPUs are marked: marks change no
    resources), which stay the same object while no node changes; when some did (a live
    view replaces the objects of the nodes where pods came or went, and keeps the others),
    a pointer walk at C speed finds the nodes to look at again."""

    #: demands remembered (a cluster runs few pod shapes)
    SIZE = 64

    def __init__(self) -> None:
        self._memo: dict[tuple[Any, ...], _Limits] = {}

    def limits(self, nodes: Sequence[NodeState], demand: Mapping[str, int],
               gang: GangRequest) -> Limits:
        """What :func:`resource_limits` answers (read it, never modify it). ``nodes`` is
        remembered, not copied: read it, never modify it, while it may be asked again."""
        key = (tuple(sorted(demand.items())), gang.per_node, gang.gpus_per_replica)
        last = self._memo.get(key)
        if last is not None and last.nodes is nodes:
            return last.limits
        if last is not None and len(last.nodes) == len(nodes):
            at = list(compress(range(len(nodes)), map(is_not, last.nodes, nodes)))
            if len(at) <= len(nodes) // 4 and all(
                    last.nodes[i].name == nodes[i].name for i in at):
                limits = last.limits
                if at:
                    limits = dict(limits)
                    for i in at:
                        limits.pop(nodes[i].name, None)
                    limits.update(resource_limits([nodes[i] for i in at], demand, gang))
                self._memo[key] = _Limits(nodes, limits)
                return limits
        limits = resource_limits(nodes, demand, gang)
        if len(self._memo) >= self.SIZE:
            self._memo.clear()
        self._memo[key] = _Limits(nodes, limits)
        return limits


def empty_nodes(nodes: Sequence[NodeState], demand: Mapping[str, int],
                gang: GangRequest) -> list[NodeState]:
    """``nodes`` with every GPU free and no other pod on them (name, wiring, place and
    network kept): what a gang's best "on an empty cluster" is solved on, by the waiting
    rule's reference (webhook/placement/reserve.py) and ``gputopo place``. ``demand``, one
    pod's non-GPU requests, still caps how many of ``gang`` a node holds: the node's
    allocatable alone limits (two pods of 60 CPUs never share a node of 94, however empty)."""
    out = []
    for n in nodes:
        e = NodeState(name=n.name, topology=n.topology, zone=n.zone, rack=n.rack,
                      network_gbps=n.network_gbps, network_transport=n.network_transport,
                      facts=n.facts, network_efficiency=n.network_efficiency,
                      transport_share=n.transport_share, nvlink_domain=n.nvlink_domain,
                      gpu_model=n.gpu_model, gpu_ids=n.gpu_ids, gpu_handout=n.gpu_handout,
                      dra_devices=n.dra_devices)
        if demand and n.resources is not None:
            count, _ = NodeResources(n.resources.allocatable, {}).fits(demand, gang.per_node)
            if count < gang.per_node:
                e = replace(e, gpu_cap=count * gang.gpus_per_replica)
        out.append(e)
    return out


def with_caps(nodes: Sequence[NodeState], changed: Sequence[NodeState]) -> Sequence[NodeState]:
    """``nodes`` with each of ``changed`` in the place of the node of its name; a
    :class:`GroupedNodes` stays one (only the changed nodes are regrouped)."""
    if not changed:
        return nodes
    if isinstance(nodes, GroupedNodes):
        return nodes.replaced(changed)
    by_name = {n.name: n for n in changed}
    return [by_name.get(n.name, n) for n in nodes]


def resource_note(why: Mapping[str, str]) -> str:
    """The nodes whose CPU, memory or other resources limit the gang, in one clause
    ("cn-172: cpu 120 of 94; cn-173: memory 1000Gi of 503Gi"), the first few by name."""
    names = sorted(why)
    shown = "; ".join(f"{name}: {why[name]}" for name in names[:NAMED_NODES])
    more = len(names) - NAMED_NODES
    return shown + (f"; and {more} more node(s)" if more > 0 else "")


def solve_fitting(solver: Callable[[Sequence[NodeState], GangRequest], Placement],
                  nodes: Sequence[NodeState], gang: GangRequest,
                  demand: Mapping[str, int], caps: ResourceCaps | None = None, *,
                  source: Sequence[NodeState] | None = None,
                  pending: Mapping[str, tuple[int, str]] | None = None,
                  refused: Mapping[str, str] | None = None,
                  notes: Sequence[str] = ()) -> Placement:
    """``solver`` on ``nodes`` where no node gets more of the gang than its CPU, memory and
    other resources hold beside what is there (``demand``: one pod's requests), the nodes
    they limit named in the reason. ``caps`` remembers the limits between gangs, worked out
    on ``source`` (the node objects ``nodes`` were marked from, with the same resources;
    ``nodes`` when not given). ``pending``: the limits of nodes where reserved slots whose
    pods are not there yet hold requests too (gputopo.cluster.reserved_requests), tighter
    than their own. ``refused``: nodes the pods cannot run on at all, and why (their
    volumes: node_volumes); ``notes``: what could not be judged, added to the reason."""
    if caps is not None:
        limits = caps.limits(nodes if source is None else source, demand, gang)
    else:
        limits = resource_limits(nodes, demand, gang)
    if pending:
        limits = {**limits, **pending}
    capped_nodes, why = capped(nodes, limits, gang)
    if refused:
        capped_nodes = [n for n in capped_nodes if n.name not in refused]
        capped_nodes += [replace(n, gpu_cap=0) for n in nodes if n.name in refused]
        why = {**why, **refused}
    placement = solver(with_caps(nodes, capped_nodes), gang)
    if why and not placement.feasible and solver(nodes, gang).feasible:
        # the GPUs are there; the pods' other requests are what does not fit
        placement = replace(placement, reason=f"the GPUs are free, but too few nodes can "
                                              f"take the gang's pods: {resource_note(why)}")
    else:
        placement = explained(placement, why)
    if notes:
        placement = replace(placement, reason=f"{placement.reason}; {'; '.join(notes)}")
    return placement


def explained(placement: Placement, why: Mapping[str, str]) -> Placement:
    """``placement`` with the nodes its pods' resource requests limit named in its reason."""
    if not why:
        return placement
    return replace(placement, reason=f"{placement.reason} (node resources limit the gang: "
                                     f"{resource_note(why)})")
