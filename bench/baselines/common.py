"""What every baseline shares: replica-by-replica placement and the common rating."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gputopo.placement.objective import span_of
from gputopo.placement.types import GangRequest, NodeState, Placement, ReplicaSlot
from gputopo.topology.cost import NodeShare, gang_bus_bandwidth

#: Picks a node for one replica: (nodes, free GPUs per node, G) -> node name or None.
NodePicker = Callable[[Sequence[NodeState], dict[str, list[int]], int], str | None]
#: Picks G GPU ids on a node: (node, its free GPU ids, G) -> ids.
GpuPicker = Callable[[NodeState, list[int], int], tuple[int, ...]]


def lowest_ids(node: NodeState, free: list[int], g: int) -> tuple[int, ...]:
    """The device plugin's default: the first G free device ids."""
    return tuple(sorted(free)[:g])


def place_replicas(
    nodes: Sequence[NodeState], gang: GangRequest, pick_node: NodePicker, pick_gpus: GpuPicker
) -> Placement:
    """Schedule the gang's pods one at a time, as kube-scheduler does, all or nothing.

    All-or-nothing stands in for a gang scheduler (coscheduling): without it, a partly
    placed gang would hold GPUs and wait, which would only make the baselines look worse.
    """
    # n.free walks every GPU of the node: spared for empty and full nodes (most of them)
    free = {n.name: [] if len(n.used) >= len(n.topology.gpus) else
            list(n.free) if n.used else list(n.topology.indices) for n in nodes}
    by_name = {n.name: n for n in nodes}
    slots: list[ReplicaSlot] = []
    for r in range(gang.replicas):
        name = pick_node(nodes, free, gang.gpus_per_replica)
        if name is None:
            return Placement(
                feasible=False,
                reason=f"replica {r}: no node with {gang.gpus_per_replica} free GPUs",
            )
        gpus = pick_gpus(by_name[name], free[name], gang.gpus_per_replica)
        free[name] = [i for i in free[name] if i not in gpus]
        slots.append(ReplicaSlot(r, name, tuple(sorted(gpus))))
    return rated(nodes, gang, slots)


def rated(nodes: Sequence[NodeState], gang: GangRequest, slots: list[ReplicaSlot]) -> Placement:
    """A feasible Placement with the cost model's bus bandwidth for these slots."""
    by_name = {n.name: n for n in nodes}
    shares: dict[str, list[int]] = {}
    for s in slots:
        shares.setdefault(s.node, []).extend(s.gpus)
    touched = [by_name[name] for name in sorted(shares)]
    if gang.total_gpus == 1:
        bus = 0.0
    else:
        bus = gang_bus_bandwidth(
            [
                NodeShare(
                    n.topology, tuple(sorted(shares[n.name])), n.network_gbps, n.network_transport,
                    n.network_efficiency, n.transport_share
                )
                for n in touched
            ],
            span=span_of(touched),
        )
    return Placement(feasible=True, slots=tuple(slots), bus_bandwidth_gbps=bus, reason="baseline")


def least_allocated(
    nodes: Sequence[NodeState], free: dict[str, list[int]], g: int
) -> str | None:
    """kube-scheduler's default scoring (NodeResourcesFit LeastAllocated) on GPUs.

    The node with the largest free share of its GPUs wins; kube-scheduler breaks ties at
    random, we take the first name so runs repeat.
    """
    best = None
    for n in nodes:
        left = len(free[n.name])
        if left < g:
            continue
        key = (-left / len(n.topology.gpus), n.name)
        if best is None or key < best[0]:
            best = (key, n.name)
    return None if best is None else best[1]
