"""Rack-packing of whole gangs with the device plugin's GPU choice: what users pick today.

Kueue's topology-aware scheduling (TAS) admits a gang only where all its pods fit, into
the smallest topology domain that holds them (the pod template's
``kueue.x-k8s.io/podset-preferred-topology`` names the rack level); the NVIDIA device
plugin then picks each pod's GPUs with go-gpuallocator's BestEffort policy
(:mod:`bench.baselines.besteffort`). It knows racks and nodes, not GPU links.

Source read: kubernetes-sigs/kueue ``pkg/cache/tas_flavor_snapshot.go`` (since moved to
``pkg/cache/scheduler/tas_flavor_snapshot.go``, re-read at ff69552: ``findTopologyAssignment``,
``findLevelWithFitDomains``, ``findBestFitDomainBy``; the default "BestFit" profile),
levels zone > rack > node:

1. each node's count of pods that fit (free GPUs // GPUs per pod), summed up the levels;
2. at the preferred level (rack), domains sorted by count, most first (ties by name); if
   the largest holds the gang, take the *first domain with the lowest count that still
   holds it* (``findBestFitDomainIdx``); if none holds it, the level above (zone) the same
   way; at the top level, domains most-first with the last one best-fit;
   a *required* level (``podset-required-topology``) has no fallback: the gang does not
   fit (``if state.required { ... return notFitReason }``);
3. down level by level, the chosen domains' children most-first, the last best-fit
   (``updateCountsToMinimum``), to the node counts.

The pods of a node then get GPUs one at a time from BestEffort, as the kubelet asks the
plugin per pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.baselines.besteffort import allocate
from bench.baselines.common import rated
from gputopo.placement.types import GangRequest, NodeState, Placement, ReplicaSlot


@dataclass
class _Domain:
    key: tuple[str, ...]  # level values: (zone,), (zone, rack), (zone, rack, node)
    state: int = 0
    children: list[_Domain] = field(default_factory=list)


def _sorted(domains: list[_Domain]) -> list[_Domain]:
    return sorted(domains, key=lambda d: (-d.state, d.key))


def _best_fit_idx(domains: list[_Domain], count: int) -> int:
    """findBestFitDomainIdx: the first domain with the lowest state >= count (0 if none)."""
    best = 0
    for i, d in enumerate(domains):
        if d.state >= count and d.state != domains[best].state:
            best = i
    return best


def _fit_level(levels: list[list[_Domain]], at: int, count: int, *, required: bool = False
               ) -> list[_Domain] | None:
    """findLevelWithFitDomains: a preferred level falls back to the level above; a required
    one fails when its largest domain does not hold the gang."""
    ordered = _sorted(levels[at])
    if not ordered:
        return None
    top = ordered[0]
    if top.state >= count:
        return [ordered[_best_fit_idx(ordered, count)]]
    if required:
        return None
    if at > 0:
        return _fit_level(levels, at - 1, count)
    out, remaining, i = [], count, 0
    while remaining > 0 and i < len(ordered) and ordered[i].state > 0:
        offset = _best_fit_idx(ordered[i:], remaining) if ordered[i].state >= remaining else 0
        out.append(ordered[i + offset])
        remaining -= ordered[i].state
        i += 1
    return out if remaining <= 0 else None


def _to_minimum(domains: list[_Domain], count: int) -> list[_Domain]:
    """updateCountsToMinimum: take domains in order, the last one best-fit, its state cut
    to what is left."""
    out, remaining = [], count
    for i, d in enumerate(domains):
        if d.state >= remaining:
            d = domains[i + _best_fit_idx(domains[i:], remaining)]
        if d.state >= remaining:
            d.state = remaining
            out.append(d)
            return out
        remaining -= d.state
        out.append(d)
    return out


#: The topology levels of the replay's Kueue Topology object, top down (zone, rack, host).
LEVELS = ("zone", "rack", "hostname")


def place(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
    """The gang with ``podset-preferred-topology`` at the rack level (the naive setup)."""
    return tas_place(nodes, gang, level="rack", required=False)


def tas_place(nodes: Sequence[NodeState], gang: GangRequest, *, level: str,
              required: bool) -> Placement:
    """The gang with ``podset-required-topology`` (``required``) or
    ``podset-preferred-topology`` at ``level`` (one of :data:`LEVELS`)."""
    g = gang.gpus_per_replica
    by_name = {n.name: n for n in nodes}
    zones: dict[str, _Domain] = {}
    racks: dict[tuple[str, str], _Domain] = {}
    for n in nodes:
        zone = zones.setdefault(n.zone or "", _Domain((n.zone or "",)))
        rk = (n.zone or "", n.rack or "")
        rack = racks.get(rk)
        if rack is None:
            rack = racks[rk] = _Domain(rk)
            zone.children.append(rack)
        leaf = _Domain((*rk, n.name), state=len(n.free) // g)
        rack.children.append(leaf)
        rack.state += leaf.state
        zone.state += leaf.state
    levels = [list(zones.values()), list(racks.values()),
              [leaf for r in racks.values() for leaf in r.children]]
    chosen = _fit_level(levels, LEVELS.index(level), gang.replicas, required=required)
    if chosen is None:
        where = f"one {level}" if required else "the cluster"
        return Placement(feasible=False, reason=f"no room for {gang.replicas} pod(s) of "
                                                f"{g} GPU(s) in {where}")
    at = len(chosen[0].key) - 1
    chosen = _to_minimum(chosen, gang.replicas)
    while at < 2:
        chosen = _to_minimum(_sorted([c for d in chosen for c in d.children]), gang.replicas)
        at += 1
    slots: list[ReplicaSlot] = []
    for leaf in sorted(chosen, key=lambda d: d.key):
        node = by_name[leaf.key[-1]]
        free = list(node.free)
        for _ in range(leaf.state):
            gpus = allocate(node.topology, free, g)
            free = [i for i in free if i not in gpus]
            slots.append(ReplicaSlot(len(slots), node.name, tuple(sorted(gpus))))
    return rated(nodes, gang, slots)
