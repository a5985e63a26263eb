"""kube-scheduler's default behaviour for GPU pods, without any topology knowledge.

Every pod of the gang is scheduled on its own: the node with the most free GPUs relative to
its size (LeastAllocated scoring, which spreads pods), then the device plugin hands out the
lowest free device ids. This is the "default scheduling" of the seeds' comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.baselines.common import least_allocated, lowest_ids, place_replicas
from gputopo.placement.types import GangRequest, NodeState, Placement


def place(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
    return place_replicas(nodes, gang, least_allocated, lowest_ids)
