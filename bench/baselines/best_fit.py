"""Best-fit packing: each pod on the node with the fewest free GPUs that still hold it.

The packing baseline of the Alibaba trace's paper (Weng et al., ATC 2023, "Beware of
Fragmentation"), and what kube-scheduler's MostAllocated scoring on GPUs approximates: it
keeps emptier nodes whole for larger pods. Its GPUs come from go-gpuallocator BestEffort
(the NVIDIA device plugin's choice on the node picked). Ties: the first node by name.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.baselines.besteffort import allocate
from bench.baselines.common import place_replicas
from gputopo.placement.types import GangRequest, NodeState, Placement


def _fullest(nodes: Sequence[NodeState], free: dict[str, list[int]], g: int) -> str | None:
    best = None
    for n in nodes:
        left = len(free[n.name])
        if left >= g and (best is None or (left, n.name) < best):
            best = (left, n.name)
    return None if best is None else best[1]


def _pick_gpus(node: NodeState, free: list[int], g: int) -> tuple[int, ...]:
    return allocate(node.topology, free, g)


def place(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
    return place_replicas(nodes, gang, _fullest, _pick_gpus)
