"""Whether a gang can be placed at all, and if not, one line that says why.

Why a module of its own: every solve asks first, most answers are "yes" (a running sum over
a handful of free-GPU counts), and the reasons a user reads in the placement record are
worded here, from the tally of the groups alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputopo.errors import InputError
from gputopo.placement.solver.grouped_nodes import GroupedNodes
from gputopo.placement.solver.grouping import _check_names, _Group, _Tally
from gputopo.placement.types import GangRequest, NodeState


def _check_input(nodes: Sequence[NodeState], gang: GangRequest) -> None:
    if isinstance(gang.replicas, bool) or not isinstance(gang.replicas, int) or gang.replicas < 1:
        raise InputError(f"replicas must be a positive integer, not {gang.replicas!r}")
    g = gang.gpus_per_replica
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise InputError(f"GPUs per replica must be a positive integer, not {g!r}")
    cap = gang.max_replicas_per_node
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InputError(f"replicas per node must be a positive integer, not {cap!r}")
    if not isinstance(nodes, GroupedNodes):  # its names were checked when it was made
        _check_names(nodes)


def _infeasible_reason(groups: list[_Group], tally: _Tally, gang: GangRequest,
                       node_count: int) -> str:
    g, r, total = gang.gpus_per_replica, gang.replicas, gang.total_gpus
    if groups:
        # The common answer first: when the free GPUs hold r replicas (a running sum over
        # a handful of free counts, stopped once it gets there), every check below passes
        # (r x g <= free GPUs <= the cluster's; g <= most free <= largest), so the totals
        # and messages are not worked out: ~250 bytecodes of a new gang's ~400 here.
        per_node = gang.per_node
        room = 0
        for f, count in tally.frees.items():
            room += min(f // g, per_node) * count
            if room >= r:
                return ""
    shape = f"{r} x {g} GPU{'s' if g > 1 else ''}"
    if not groups:
        # the cluster view leaves activated nodes with unusable topology data out, too
        return (
            "no node is activated for topology placement with usable topology data "
            "(label ack.node.gpu.schedule=topology, annotation gputopo.io/topology or an ACK "
            f"report), so {shape} cannot be placed"
        )
    plural = "s" if node_count > 1 else ""
    per_node = gang.per_node
    # Every figure from the tally: a handful of distinct GPU counts, not every group.
    cluster_gpus = sum(size * count for size, count in tally.sizes.items())
    free = sum(f * count for f, count in tally.frees.items())
    fits = sum(min(f // g, per_node) * count for f, count in tally.frees.items())
    largest = max(tally.sizes)
    most_free = max(tally.frees)
    if total > cluster_gpus:
        return (
            f"the gang needs {total} GPUs ({shape}) but the whole cluster has only "
            f"{cluster_gpus} on {node_count} node{plural}"
        )
    if g > largest:
        return f"each replica needs {g} GPUs on one node but the largest node has {largest}"
    if most_free < g:
        if not most_free:
            return f"cluster full: all {cluster_gpus} GPUs are in use"
        most = min(n.name for grp in groups if grp.free == most_free for n in grp.nodes)
        return (
            f"no node has {g} free GPUs for one replica right now "
            f"(most free: {most_free} on {most})"
        )
    if fits < r:
        capped = f", at most {per_node} per node" if per_node < r else ""
        if free == cluster_gpus:  # nothing is in use: the nodes are too few or too small
            return (
                f"only {fits} of {r} replicas of {g} GPUs fit even with every GPU free "
                f"({cluster_gpus} GPUs on {node_count} node{plural}, "
                f"each replica on one node{capped})"
            )
        return (
            f"cluster full: only {fits} of {r} replicas of {g} GPUs fit in the free GPUs "
            f"({free} free of {cluster_gpus}{capped})"
        )
    return ""
