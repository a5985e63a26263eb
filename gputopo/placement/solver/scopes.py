"""The multi-node search's scopes and their bounds.

Why a module of its own: which sets of nodes a multi-node gang is searched in (every NVLink
domain, rack, zone, and the whole cluster, each with its classes of interchangeable nodes)
and how good the best placement in each can be (:func:`bound`, term by term as the
objective compares) decide how little of the cluster the exact search has to look at;
the search itself (search.py) only plans one scope at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from functools import lru_cache, partial, reduce
from itertools import zip_longest
from operator import itemgetter, or_

from gputopo.placement.objective import ROUND, SPAN_RANK
from gputopo.placement.solver.grouping import _NAME, _Group, _Kind, _Loc
from gputopo.placement.solver.options import _value
from gputopo.placement.solver.racks import RackCounts, of_groups
from gputopo.placement.types import UNCAPPED, GangRequest, NodeState
from gputopo.topology.cost import SPAN_FACTOR, domain_gbps
from gputopo.topology.model import Topology


@dataclass(eq=False)
class _Class:
    """Interchangeable nodes of one scope: same topology, same used GPUs, same network."""

    topology: Topology
    free_mask: int
    network_gbps: float
    opened: bool  # no GPU in use yet
    nodes: list[NodeState]  # any order; :meth:`by_name` sorts them when a plan needs names
    canon: tuple[str, tuple[int, ...], float, int]
    kind: _Kind
    domain: str | None = None  # the NVLink domain of its nodes
    domain_index: int = -1  # its domain's place in the scope's order (-1: none)
    cap: int = UNCAPPED  # most GPUs of the gang one of its nodes may hold
    fresh: bool = False  # its NVLink domain has no GPU in use (objective's domains_opened)

    def __post_init__(self) -> None:
        self._sorted: list[NodeState] | None = None

    def by_name(self) -> list[NodeState]:
        """The nodes by name: a plan's q nodes of this class are the first q."""
        if self._sorted is None:
            self._sorted = sorted(self.nodes, key=_NAME)
        return self._sorted


@dataclass(eq=False)
class Scope:
    """One scope of the multi-node search: its span and its groups, each with its count of
    nodes inside the scope (:attr:`held`: one dict per rack, or one for a scope of whole
    groups, ``locs`` None). Its groups are listed (``listed``), and its nodes
    (:meth:`pieces`) and classes looked up, only when the search needs them: most scopes
    of a busy cluster are ruled out by their first :func:`bound`, which reads only
    :attr:`room` and :attr:`rate`."""

    span: str
    listed: Callable[[], list[dict[_Group, int]]]  # makes :attr:`held`
    locs: list[_Loc] | None  # the rack of each of ``held``; None: whole groups
    free: Container[str]  # the NVLink domains with no GPU in use
    room: dict[int, int]  # nodes per count of the gang's replicas they can hold
    rate: float  # the fastest rate of its nodes to the others, Gbit/s (:func:`_rate`)
    fabric: bool = False  # one NVLink domain (see :func:`_classes`)

    def __post_init__(self) -> None:
        self._classes: list[_Class] | None = None
        self._held: list[dict[_Group, int]] | None = None

    @property
    def held(self) -> list[dict[_Group, int]]:
        """Its groups with room for a replica, each with its count of nodes in the scope:
        one dict per rack of ``locs``, or one of whole groups."""
        if self._held is None:
            self._held = self.listed()
        return self._held

    def pieces(self) -> list[tuple[_Group, list[NodeState]]]:
        """Each group with room with its nodes in the scope."""
        if self.locs is None:
            return [(grp, grp.nodes) for held in self.held for grp in held]
        ours = set(self.locs)
        groups = dict.fromkeys(grp for held in self.held for grp in held)
        return [(grp, grp.within(ours)) for grp in groups]

    def first(self) -> str:
        """The smallest name of its nodes with room for a replica (every node of
        :meth:`pieces` has room)."""
        if self.locs is None:
            return min(grp.first() for held in self.held for grp in held)
        return min(grp.first_at(loc)
                   for loc, held in zip(self.locs, self.held, strict=True) for grp in held)

    def classes(self) -> list[_Class]:
        """The scope's classes, in the search's order (:func:`_classes`)."""
        if self._classes is None:
            self._classes = _classes(self.pieces(), self.free, fabric=self.fabric)
        return self._classes


def _f(n: int, m: int, intra: float, net_gbps: float, factor: float) -> float:
    """The cost model's multi-node bus bandwidth (cost.multi_node_bus_bandwidth, the same
    operations, so the same float): the worst share (``-intra``) or the slowest effective
    network, whichever is lower. ``n`` and ``m`` do not enter it (NCCL's rings pipeline);
    fewer nodes win through the objective's ``nodes`` term instead."""
    return min(-intra, net_gbps / 8.0 * factor)


#: (bus bandwidth, -nodes, slowest pair, locality, -domains, -free domains opened, then
#: blocks, packing and fit as one integer, options._value): Score's order
_Bound = tuple[float, int, float, int, int, int, int | float]


def _rate(grp: _Group, fabric: bool) -> float:
    """The rate a node of ``grp`` reaches the scope's other nodes at, in Gbit/s: inside one
    NVLink domain (``fabric``) the fabric's (cost.domain_gbps), else its network's."""
    return domain_gbps(grp.kind.topology) if fabric else grp.network_gbps


def _fresh(grp: _Group, free: Container[str]) -> bool:
    """The nodes of ``grp`` are in an NVLink domain with no GPU in use (one of ``free``)."""
    return grp.domain is not None and grp.domain in free


def _classes(pieces: Iterable[tuple[_Group, list[NodeState]]], free: Container[str], *,
             fabric: bool = False) -> list[_Class]:
    """One scope's classes from its pieces of groups, in the search's order (by canon).

    ``fabric``: the scope is one NVLink domain, so nodes reach each other over NVLink: a
    class's rate between nodes is the fabric's (cost.domain_gbps), not its network.
    Classes of one NVLink domain come together (the domain term of stage c counts a
    domain once, when its first class is used), domains in an order of their classes'
    canons (so that scopes alike up to domain names share one plan), then by name.
    ``free``: the NVLink domains with no GPU in use (a class there is ``fresh``)."""
    # inside one domain the network does not matter: groups of one kind are one class
    merged: dict[object, tuple[_Group, list[NodeState]]] = {}
    for grp, members in pieces:
        at = (grp.kind, grp.cap) if fabric else grp
        have = merged.get(at)
        merged[at] = (grp, members if have is None else have[1] + members)
    out = []
    for grp, members in merged.values():
        net = _rate(grp, fabric)
        canon = grp.canon() if not fabric else (*grp.kind.head(), net, grp.cap)
        out.append(_Class(topology=grp.kind.topology, free_mask=grp.kind.free_mask,
                          network_gbps=net, opened=grp.kind.opened, nodes=members,
                          canon=canon, kind=grp.kind, domain=grp.domain, cap=grp.cap,
                          fresh=_fresh(grp, free)))
    if all(c.domain is None for c in out):
        out.sort(key=lambda c: c.canon)
        return out
    by_domain: dict[str, list[tuple[str, tuple[int, ...], float, int]]] = {}
    for c in out:
        if c.domain is not None:
            by_domain.setdefault(c.domain, []).append(c.canon)
    order = {d: i for i, d in enumerate(sorted(by_domain, key=lambda d: (sorted(by_domain[d]), d)))}
    out.sort(key=lambda c: (-1 if c.domain is None else order[c.domain], c.canon))
    for c in out:
        c.domain_index = -1 if c.domain is None else order[c.domain]
    return out


def _merged(rooms: Iterable[dict[int, int]]) -> dict[int, int]:
    """The sum of some scopes' :attr:`Scope.room` (count -> nodes)."""
    out: dict[int, int] = {}
    for room in rooms:
        for j, k in room.items():
            out[j] = out.get(j, 0) + k
    return out


def scopes(groups: list[_Group], g: int, free: Container[str],
           per_node: int = UNCAPPED, counts: RackCounts | None = None) -> list[Scope]:
    """Every NVLink domain, rack, zone and the whole cluster that can hold a multi-node
    gang of replicas of ``g`` GPUs, at most ``per_node`` on a node, each with its count of
    nodes per replicas held and its rate (what :func:`bound` reads first), and its groups
    that have room for a replica (their count of nodes there), listed when first read.

    A scope counts every node for its size (two nodes or more), as the span does; a
    zone that is exactly one rack, and a cluster that is exactly one rack or zone, are
    searched once, in the narrower scope. ``counts``: the racks' counts of these groups'
    nodes (:mod:`racks`; a :class:`GroupedNodes` keeps them between solves), else counted
    here. A rack's room and rate come from its nodes per (free GPUs, network), ~7 numbers
    on a busy cluster; zones and the cluster are unions of racks. Why not from the (group,
    rack) pieces: a busy 10,000-node cluster has ~5,800 of them and ~400 scopes, of which
    the search reads the groups of a few dozen (:attr:`Scope.held`); walking every piece
    was ~40 % of a kept solve of a 16 x 1 gang.
    """
    if counts is None:
        counts = of_groups(groups, g)
    size = counts.size
    room: dict[_Loc, dict[int, int]] = {}  # per rack with room for a replica
    rate: dict[_Loc, float] = {}
    for loc, offers in counts.offers.items():
        here: dict[int, int] = {}
        fastest = -math.inf
        for (grp_free, net), k in offers.items():
            if grp_free >= g:
                j = min(per_node, grp_free // g)
                here[j] = here.get(j, 0) + k
                if net > fastest:
                    fastest = net
        if here:
            room[loc], rate[loc] = here, fastest
    # NVLink domains: their groups with room (a group is of one domain), every node's
    # count, and which (zone, rack) places they cover (a rack that is exactly one
    # domain is searched once, as the domain)
    domains: dict[str, dict[_Group, int]] = {}
    domain_size: dict[str, int] = {}
    loc_domains: dict[_Loc, set[str | None]] = {}
    domain_locs: dict[str, set[_Loc]] = {}
    any_domain = any(grp.domain is not None for grp in groups)
    if any_domain:
        for grp in groups:
            dom = grp.domain
            if dom is not None:
                domain_size[dom] = domain_size.get(dom, 0) + len(grp.nodes)
                if grp.free >= g:
                    domains.setdefault(dom, {})[grp] = len(grp.nodes)
            for loc in grp.racks():
                loc_domains.setdefault(loc, set()).add(dom)
                if dom is not None:
                    domain_locs.setdefault(dom, set()).add(loc)

    zone_size: dict[str, int] = {}
    zone_locs: dict[str, list[_Loc]] = {}
    for loc, count in size.items():
        if loc[0] is not None:
            zone_size[loc[0]] = zone_size.get(loc[0], 0) + count
            zone_locs.setdefault(loc[0], []).append(loc)

    def one_rack(locs: list[_Loc]) -> bool:
        return len(locs) == 1 and locs[0][1] is not None

    scopes: list[Scope] = []
    for dom in sorted(domains):
        if domain_size[dom] >= 2:
            ours = domains[dom]
            scopes.append(Scope(
                "nvlink-domain", partial(_whole, ours), None, free,
                _merged({cap(grp.kind, grp.cap, per_node, g): len(grp.nodes)} for grp in ours),
                max(_rate(grp, True) for grp in ours), fabric=True))

    def one_domain(loc: _Loc) -> bool:
        doms = loc_domains.get(loc)
        if not doms or len(doms) != 1:
            return False
        dom = next(iter(doms))
        return dom is not None and domain_locs[dom] == {loc}

    racks = [loc for loc in size if loc[1] is not None and size[loc] >= 2]
    for loc in sorted(racks, key=lambda k: (k[0] or "", k[1])):
        if any_domain and one_domain(loc):
            continue  # the rack is exactly one NVLink domain, searched as that
        if loc in room:
            scopes.append(Scope("rack", partial(_listed, counts, [loc], g), [loc], free,
                                room[loc], rate[loc]))
        else:
            scopes.append(Scope("rack", list, [], free, {}, 0.0))
    for zone in sorted(zone_size):
        locs = zone_locs[zone]
        if zone_size[zone] >= 2 and not one_rack(locs):
            ours = [loc for loc in locs if loc in room]
            scopes.append(Scope("zone", partial(_listed, counts, ours, g), ours, free,
                                _merged(room[loc] for loc in ours),
                                max((rate[loc] for loc in ours), default=0.0)))
    node_count = sum(size.values())
    everyone_one_zone = len(zone_size) == 1 and next(iter(zone_size.values())) == node_count
    if node_count >= 2 and not everyone_one_zone and not one_rack(list(size)):
        scopes.append(Scope("cluster", partial(_eligible, groups, g), None, free,
                            _merged(room.values()), max(rate.values(), default=0.0)))
    return scopes


def _listed(counts: RackCounts, locs: list[_Loc], g: int) -> list[dict[_Group, int]]:
    """A scope's :attr:`Scope.held` of racks ``locs``: per rack, its groups with room."""
    return [counts.held(loc, g) for loc in locs]


def _eligible(groups: list[_Group], g: int) -> list[dict[_Group, int]]:
    """The cluster's :attr:`Scope.held`: every group with room, whole."""
    return [{grp: len(grp.nodes) for grp in groups if grp.free >= g}]


def _whole(groups: dict[_Group, int]) -> list[dict[_Group, int]]:
    """A scope's :attr:`Scope.held` of whole groups."""
    return [groups]


def cap(kind: _Kind, gpu_cap: int, per_node: int, g: int) -> int:
    """Replicas of ``g`` GPUs one node of ``kind`` can hold, at most ``gpu_cap`` GPUs of
    the gang (the node's) and ``per_node`` replicas (the gang's)."""
    return min(per_node, min(kind.free, gpu_cap) // g)


def _fewest(room: list[tuple[int, int]], r: int) -> tuple[int, int] | None:
    """(m, jmin) for ``r`` replicas on nodes of ``room`` ((replicas a node holds, nodes),
    the most first): the fewest nodes that hold them, two at least (over several nodes),
    and the fewest replicas each of such m nodes then holds (what the m - 1 others of the
    most room leave); None when all of them together hold fewer than ``r``."""
    held = m = 0
    for j, k in room:
        take = min(k, -(-(r - held) // j))  # nodes of this room still needed, at most k
        held += take * j
        m += take
        if held >= r:
            break
    if held < r:
        return None
    m = max(m, 2)
    others = 0  # the replicas the m - 1 roomiest nodes hold
    left = m - 1
    for j, k in room:
        take = min(k, left)
        others += take * j
        left -= take
    return m, max(1, r - others)


#: The bound of a scope whose nodes can hold the gang, before its later terms are looked
#: at: none of them rules it out.
_OPEN = math.inf


def bound(scope: Scope, gang: GangRequest, level: int) -> _Bound | None:
    """An upper bound of the objective of any placement in ``scope``, term by term as
    :class:`Score` compares (blocks, packing and fit as one integer, options._value), or
    None when the scope cannot hold the gang. Three levels, each tighter and
    costlier than the one before; the search asks for the next only of a scope the last
    did not rule out (search.multi_node):

    0. the bandwidth and the fewest nodes, from the scope's :attr:`Scope.room` alone;
    1. every term, from the scope's groups and counts, each node at its best share;
    2. as 1, with the replicas counted: the pair and the last three terms of m nodes that
       hold R replicas between them (:func:`_tight`).

    Why the whole objective and not the bandwidth alone: when the network bounds every
    multi-node placement (a TCP cluster) every rack ties on bandwidth, and a gang that
    fits on no single node searched all of them, ~0.15 ms each, to compare the later
    terms (a 2 x 4 gang on a busy 1,000-node cluster: ~20 ms). Each term's bound holds
    given the terms before it tie: the fewest nodes the scope can use (``m``: only a
    plan of exactly ``m`` nodes ties on the nodes term; the nodes of the most room first)
    and the fewest replicas each of them then holds (``jmin``: what the m - 1 others of
    the most room leave), the ``m``-th best pair of the nodes' best shares of ``jmin`` or
    more replicas (a placement's slowest pair is its worst node's; the Pareto options
    keep each node's best), a rack's locality (the narrowest span of two nodes), the
    ``m`` best blocks deltas of distinct nodes among the shares that reach that pair
    (only they are in a placement that ties on it), the empty nodes opened when fewer
    than m nodes in use reach it, the GPUs left free on the ``m`` fullest of those
    nodes. Why ``jmin``: with 64 one-GPU replicas on 8-GPU nodes, m = 8 and every node
    holds 8, so its share is the whole node, not the one GPU that keeps every block.

    Why levels: a 10,000-node cluster has ~400 scopes (racks, zones, the cluster), and
    level 1 reads every piece of each (for a one-GPU gang about every node three times:
    its rack, its zone, the cluster), 15-35 ms; level 0 rules out the zones and the
    cluster (their network share is lower) and the racks of slower nodes for a few dict
    reads each.

    Level 1 reads the groups' counts, not the classes: nodes of one kind and GPU cap are
    alike to every term (their count is what matters, and only up to ``m``), so a zone's
    hundred groups are a few dozen rows here, and the scope's classes are built only if it
    is planned (on the busy benchmark cluster a 2 x 4 gang's 154 scopes, ~1,000 classes,
    cost 10 ms to build and bound, of which it plans one or two).
    """
    g, r, n = gang.gpus_per_replica, gang.replicas, gang.total_gpus
    fewest = _fewest(sorted(scope.room.items(), reverse=True), r)
    if fewest is None:
        return None
    m, jmin = fewest
    bw = round(_f(n, m, -math.inf, scope.rate, SPAN_FACTOR[scope.span]), ROUND)
    if level == 0:
        return (bw, -m, _OPEN, _OPEN, _OPEN, _OPEN, _OPEN)
    per_node, free = gang.per_node, scope.free
    count: dict[tuple[_Kind, int], int] = {}  # nodes per (kind, GPU cap)
    stale: set[tuple[_Kind, int]] = set()  # rows with a node outside a free NVLink domain
    no_domain = False
    for held in scope.held:  # (_fresh and cap in line: ~20 pieces a rack, ~100 racks)
        for grp, k in held.items():
            row = (grp.kind, grp.cap)
            count[row] = count.get(row, 0) + k
            dom = grp.domain
            if dom is None:
                no_domain = True
                stale.add(row)
            elif dom not in free:
                stale.add(row)
    # the nodes a placement of m nodes can use: (kind, most replicas, nodes up to m)
    rows = []
    all_fresh = True  # every such node in an NVLink domain with no GPU in use
    for row, k in count.items():
        kind, gpu_cap = row
        j = min(per_node, min(kind.free, gpu_cap) // g)
        if j >= jmin:
            rows.append((kind, j, min(k, m)))
            all_fresh = all_fresh and row not in stale
    # a scope's placements of its own span: one NVLink domain, else a rack or wider
    # (narrower ones are found in their own scope); at least one domain unless some
    # node has none
    locality = -SPAN_RANK["nvlink-domain" if scope.span == "nvlink-domain" else "rack"]
    domains = 0 if no_domain else -1
    # every node with room in a free domain: the placement opens one at least
    opened = -1 if all_fresh else 0
    if level == 2:
        pair, tail = _tight(rows, g, r, m, jmin)
        return (bw, -m, pair, locality, domains, opened, tail)
    # a placement that ties on the nodes term uses m nodes of jmin or more replicas, and its
    # slowest pair is at most its nodes' best: the m-th best of the scope's nodes. Only when
    # it ties on that do the later terms count, on nodes whose shares reach it
    # (Kind.best_blocks). Rows, not nodes: a row counts its nodes (up to m) at once.
    rated = sorted([(kind.best_pair(g, jmin, j), kind, j, k) for kind, j, k in rows],
                   key=_FIRST, reverse=True)
    left, pair = m, None
    for p, _, _, k in rated:
        left -= k
        if left <= 0:
            pair = p
            break
    if pair is None:
        return None  # fewer than m nodes with room: no placement over several nodes here
    reach = [(kind, j, k) for p, kind, j, k in rated if p >= pair]
    return (bw, -m, pair, locality, domains, opened, _tail(reach, g, n, m, jmin, pair))


_FIRST = itemgetter(0)


def _tail(reach: list[tuple[_Kind, int, int]], g: int, n: int, m: int, jmin: int,
          pair: float) -> int:
    """The bound of the last three terms (blocks kept, empty nodes opened, GPUs left free:
    options._value) of m of the nodes in ``reach`` ((kind, most replicas, nodes) per row,
    those whose shares reach the ``pair``), each term on its own: the m best blocks
    deltas, the empty nodes that m nodes open when fewer than m are in use, the GPUs the
    m fullest leave (none at the least)."""
    # (never None: every node here has a share of jmin..j replicas that reaches the pair)
    healths = sorted([(kind.best_blocks(g, jmin, j, pair) or 0, k) for kind, j, k in reach],
                     reverse=True)
    in_use = sum(k for kind, _, k in reach if not kind.opened)
    frees = sorted([(kind.free, k) for kind, _, k in reach])
    return _value(_top(healths, m), max(0, m - in_use), max(0, _top(frees, m) - n))


def _top(values: list[tuple[int, int]], m: int) -> int:
    """The sum of the first ``m`` of ``values`` ((value, times): the value that many
    times over), in their order."""
    total = 0
    for v, k in values:
        take = k if k < m else m
        total += v * take
        m -= take
        if not m:
            break
    return total


def _tight(rows: list[tuple[_Kind, int, int]], g: int, r: int, m: int,
           jmin: int) -> tuple[float, int | float]:
    """The bound of the slowest pair and of the last three terms with the replicas
    counted: the m nodes of a placement hold the R replicas between them, ``jmin`` or
    more each, so a node's share is not just its best one. ``rows``: (kind, most
    replicas, nodes) of the nodes with room.

    The pair: the best ``p`` such that m nodes whose shares of j replicas reach ``p``
    can hold R replicas (m counts that add up to R, each a count some node reaches ``p``
    with). The tail: per count j, the best value (blocks, opened, left: options._value)
    of a node's share of j replicas that reaches the pair, then the best sum of m such
    values whose counts add up to R (a knapsack over m slots). A slot may take the best
    node of its count again, so this bounds the placements, and is their best when the
    nodes are many.

    Why: the plain bound takes every node's best share; for 9 one-GPU replicas on two
    8-GPU nodes that is a share of one GPU (no pair, most blocks kept), and every rack
    of a busy 10,000-node cluster stayed above the best found and was planned (~100
    racks, 40-100 ms). Counted, the racks that can only tie are ruled out by their
    names.
    """
    # per node row, its best pair per count from jmin to its most (a column per count)
    pairs = [(kind.count_pairs(g)[jmin - 1:j], k) for kind, j, k in rows]
    # the m-th best pair the nodes reach with any count (there are m nodes: scopes._fewest)
    top = sorted((max(row) for row, k in pairs for _ in range(k)), reverse=True)[m - 1]
    # the best pair m counts that add up to R are reached with (a count at p: some node
    # reaches p with it)
    reach = [max(col) for col in zip_longest(*(row for row, _ in pairs), fillvalue=-math.inf)]
    pair = next((p for p in sorted(set(reach), reverse=True)
                 if _adds_up([jmin + i for i, q in enumerate(reach) if q >= p], m, r)),
                -math.inf)  # (the lowest lets every count in: the m of most room add up)
    pair = min(pair, top)
    # per count, the best value of a node's share of that many replicas that reaches it
    values = [kind.count_values(g, pair)[jmin - 1:j] for kind, j, _ in rows]
    best = tuple((jmin + i, v) for i, v in
                 enumerate(max(col) for col in zip_longest(*values, fillvalue=-math.inf))
                 if v != -math.inf)
    tail = _slots(best, m, r) if best else None
    return pair, -math.inf if tail is None else tail


def _adds_up(counts: list[int], m: int, r: int) -> bool:
    """Some m of ``counts`` (each any number of times) add up to ``r``: the sums are a
    bitmask, one shift per count and slot."""
    sums = 1
    for _ in range(m):
        sums = reduce(or_, (sums << j for j in counts), 0)
    return bool(sums >> r & 1)


@lru_cache(maxsize=1024)
def _slots(best: tuple[tuple[int, int], ...], m: int, r: int) -> int | None:
    """The best sum of m values of ``best`` ((count, value) pairs, a count taken any
    number of times) whose counts add up to ``r``; None if no m counts do.

    Why cached: racks alike in what their nodes offer per count have the same ``best``
    (a 41 x 1 gang on the busy 10,000-node cluster: 104 calls, 6 distinct), and the
    knapsack was a third of that solve (10 of 33 ms)."""
    lo, hi = best[0][0], best[-1][0]
    layer = {0: 0}  # replicas in the slots so far -> best value
    for slot in range(1, m + 1):
        rest = m - slot  # slots still to fill, each with lo..hi replicas
        nxt: dict[int, int] = {}
        for held, v in layer.items():
            for j, u in best:
                t = held + j
                if rest * lo <= r - t <= rest * hi and v + u > nxt.get(t, v + u - 1):
                    nxt[t] = v + u
        layer = nxt
    return layer.get(r)
