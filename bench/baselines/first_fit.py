"""First-fit bin-packing: each replica on the first node (by name) with room, lowest ids.

The simplest packing policy (what a MostAllocated-style scheduler approximates): it keeps
nodes whole for large jobs better than spreading does, but knows nothing of links.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.baselines.common import lowest_ids, place_replicas
from gputopo.placement.types import GangRequest, NodeState, Placement


def _first_node(nodes: Sequence[NodeState], free: dict[str, list[int]], g: int) -> str | None:
    for n in sorted(nodes, key=lambda n: n.name):
        if len(free[n.name]) >= g:
            return n.name
    return None


def place(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
    return place_replicas(nodes, gang, _first_node, lowest_ids)
