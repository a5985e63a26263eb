"""The one-node search: the whole gang on the best single node.

Why a module of its own: most gangs fit on one node, and this is the webhook's hot path.
Alike nodes have the same best share and key (worked out once per kind and gang size), so
the search compares groups, and names only among the groups tied for the best key; the
score of a one-node share is kept on its kind across solves.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import TYPE_CHECKING

from gputopo.placement.objective import best_quality, score_by_name, tie_break
from gputopo.placement.solver.candidate import _bus, _Candidate
from gputopo.placement.solver.grouping import _Group, _Kind
from gputopo.placement.solver.options import _Option
from gputopo.placement.types import GangRequest, NodeState

if TYPE_CHECKING:
    from gputopo.placement.solver.grouped_nodes import GroupedNodes

_Tied = dict[object, tuple[_Group, _Option]]  # the groups tied for the best one-node key
#: The tied groups' (smallest node name, key), ascending: the one-node winner is the first
_Order = list[tuple[str, object]]


def _best_single(items: Iterable[tuple[object, _Group]], n: int,
                 free: Container[str], good: float | None = None
                 ) -> tuple[tuple | None, _Tied]:
    """The best one-node key for ``n`` GPUs over the groups (by any keys) and the groups
    that reach it, each with its best share; a group in an NVLink domain of ``free`` (no
    GPU in use) opens it (the key's third term). With a bar ``good`` (the gang's
    ``good_gbps``) the key starts with the objective's ``good`` terms: (1, minus the
    bandwidth, packing, fit) for a node whose best share is its best set and reaches the
    bar, else (0, 0, 0, 0)."""
    best_key: tuple | None = None
    tied: _Tied = {}
    for at, grp in items:
        kind = grp.kind
        if grp.free < n:
            continue
        key, opt = kind.rated.get(n) or kind.one_node(n)
        if grp.domain is not None and grp.domain in free:
            key = (key[0], key[1], -1, *key[3:])
        if good is not None:
            # the share is the node's best set iff its (ring, pair) is best_quality's: the
            # first option has the most of both the free GPUs allow
            ok = n > 1 and key[0] >= good and key[:2] == best_quality(kind.topology, n)
            key = (1, -key[0], key[5], key[6], *key) if ok else (0, 0.0, 0, 0, *key)
        if best_key is None or key > best_key:
            best_key, tied = key, {at: (grp, opt)}
        elif key == best_key:
            tied[at] = (grp, opt)
    return best_key, tied


def _first_name(tie: tuple[_Group, _Option]) -> str:
    return tie[0].first()


def single_node(groups: list[_Group], grouped: GroupedNodes | None, gang: GangRequest,
                free: Container[str]) -> _Candidate | None:
    """Best placement of the whole gang on one node, or None if no node has room.

    Alike nodes have the same best share and key, so the key is worked out per group;
    node names are looked at only in the groups that tie for the best key.
    """
    n = gang.total_gpus
    if gang.per_node < gang.replicas:
        return None  # the gang may not share one node
    if grouped is not None:
        won = grouped.best_single(n, gang.good_gbps)
    else:
        tied = _best_single(enumerate(groups), n, free, gang.good_gbps)[1]
        # Names are unique, so the smallest name alone breaks the tie (name, GPUs).
        won = min(tied.values(), key=_first_name, default=None)
    if won is None:
        return None
    grp, opt = won
    return one_node(grp.kind, grp.first_node(), opt, gang, free)


def one_node(kind: _Kind, node: NodeState, opt: _Option, gang: GangRequest,
             free: Container[str]) -> _Candidate:
    """The whole gang on ``node`` (of ``kind``) as ``opt``, scored by the objective.

    The score and bus bandwidth of one share read nothing of the node but its topology
    and used GPUs (the kind), its network fields and the share itself (the node's name
    only breaks ties), so they are kept on the kind per (gang size, share, network,
    whether its NVLink domain is free), across solves: scoring it again (score_by_name)
    was ~1,200 bytecodes per new gang, and the Placement worked the bus bandwidth out
    once more (--opcodes of bench/admission_profile.py)."""
    shares = {node.name: opt.gpus}
    nodes = {node.name: node}
    key = (gang.total_gpus, opt.gpus, node.network_gbps, node.network_transport,
           node.network_efficiency, node.transport_share, node.nvlink_domain in free,
           gang.good_gbps)
    got = kind.scored.get(key)
    if got is None:
        score = score_by_name(nodes, gang, shares, free=free)
        got = kind.scored[key] = (score, _bus(gang, [node], shares, "node"))
    return _Candidate(got[0], tie_break(shares), shares, nodes, got[1])
