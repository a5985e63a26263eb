"""The gang placement solver: the best placement of a gang by the objective in ``objective.py``.

Why it is built this way: the objective (see :mod:`gputopo.placement.objective`) is
lexicographic, and its first two terms are bottlenecks (a max of per-node costs, a min of
per-node pair speeds), so an exact search can enumerate *thresholds* instead of
assignments. Nodes with the same topology, used GPUs and network are interchangeable, so the
search runs over node *classes* and over how many replicas go to each class, never over
individual nodes; per (topology, free GPUs, k) the Pareto-best k-GPU subsets are cached.

Every solve of a plain list walks the nodes once, grouping them by (topology, used GPUs,
network); a busy cluster of thousands of nodes has a few hundred such groups, and the
feasibility reasons, the one-node search and the scopes' classes all work on groups. The
webhook solves the whole cluster for every new gang, so it keeps the grouping between
solves (:class:`GroupedNodes`: only the nodes a reservation changed are regrouped, and the
tallies and the best one-node share carry over). Only a multi-node search that gets past
its first bound walks the nodes again, once, to split groups by rack.

The search, for ``R`` replicas of ``G`` GPUs (``n = R*G``):

1. One node. For every class with ``n`` free GPUs, its best ``n``-subset by (bus
   bandwidth, slowest pair, blocks kept); the best class wins.
2. Several nodes, inside each *scope*: every NVLink domain (nodes of one NVLink fabric,
   a GB200 NVL72 rack's trays: between them the fabric's rate, cost.domain_gbps, stands
   where the network's does below), every rack (one that is exactly a domain is searched
   as the domain), every zone, the whole cluster (a scope's
   span is an upper bound of the placement's real span; a placement that is narrower is also
   found in the narrower scope, where it is rated exactly). The cost model's gang bandwidth
   for ``m`` nodes is ``f(m, I, N) = min(-I, N x span factor / 8)`` where ``I`` is the worst
   share's cost (minus its bus bandwidth; -inf for one GPU) and ``N`` the slowest effective
   network (line rate x transport share): non-increasing in ``I``, increasing in ``N``,
   the same for every ``m`` (NCCL's rings pipeline; the objective then prefers the fewest
   nodes). Nodes are grouped by their effective network. So:

   a. for every node count m and network threshold N, the smallest intra-cost threshold I
      such that exactly ``m`` nodes with network >= N can hold the ``R`` replicas with every
      share's cost <= I (a reachability DP over classes and replica counts, one big
      integer as the bitset of (nodes, replicas); feasibility only grows with I, so binary
      search). The best ``f(m, I, N)`` is the best bandwidth;
      every feasible triple with the same rounded value ties, and of those only the
      smallest ``m`` (the objective's ``nodes`` term) goes on;
   b. among those, the highest slowest-pair threshold that stays feasible;
   c. among those, a DP over classes that minimises the NVLink domains touched (a class
      is of one domain, and a domain's classes come together: a domain costs once), then
      the free domains opened (a domain with no GPU in use costs once more), then
      maximises the blocks kept, then packing, then fit (fewest GPUs left free on the
      touched nodes).

   Scopes are visited best upper bound first — a bound of the whole objective, term by
   term (``_Search._bound``) — and the search stops at the first that cannot win; scopes
   with the same multiset of classes share one search, and one score per real span.
3. The best candidate by the objective (rated with :func:`objective.score` itself), ties by
   node names and GPU indices.

Exactness is proved against brute force on small clusters
(tests/placement/test_solver_oracle.py); tests/placement/test_solver_reference.py pins every
answer to the solver as it was before the one-pass rework, on clusters of 20-60 nodes.
Known cost: the DPs are polynomial in ``R`` (replicas); gangs of dozens of one-GPU replicas
spread over many nodes are the slow case (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from operator import attrgetter, itemgetter
from typing import Any, overload

from gputopo.errors import InputError
from gputopo.placement.domains import domain_note, trays
from gputopo.placement.objective import (
    BLOCK_SIZES,
    ROUND,
    SPAN_RANK,
    Score,
    blocks_delta,
    min_pair_bandwidth,
    position_mask,
    score_by_name,
    span_of,
    tie_break,
)
from gputopo.placement.types import UNCAPPED, GangRequest, NodeState, Placement, ReplicaSlot
from gputopo.topology.cost import (
    SPAN_FACTOR,
    NodeShare,
    all_to_all,
    domain_gbps,
    gang_bus_bandwidth,
    ring_bus_bandwidth,
)
from gputopo.topology.model import Topology

#: Base of the integer encoding of the blocks vector (order-preserving while every summed
#: component stays within +-BASE/2; 64 touched nodes x 32 blocks is far below).
BASE = 1 << 20
#: Stage c's price of one more NVLink domain, in units of (blocks, packing) before the FIT_BASE
#: scaling: above any sum of encoded blocks (one BASE digit per block size) and packing (one
#: more digit), as the objective ranks ``domains`` before them.
DOMAIN_COST = BASE ** 8
#: Stage c's price of opening an NVLink domain with no GPU in use (the objective's
#: ``domains_opened``), in the same units: above (blocks, packing), below one more domain.
OPEN_COST = BASE ** 7
#: Scale of (blocks, packing) over the fit term (GPUs left free, summed over the touched
#: nodes) in the knapsack's values: order-preserving while that sum stays below half of it.
FIT_BASE = 1 << 32


@dataclass(frozen=True)
class _Option:
    """One candidate share on a node: its GPUs and what they are worth."""

    gpus: tuple[int, ...]
    bw: float  # ring bus bandwidth, GB/s
    intra: float  # -bw: lower is better, as a cost; -inf for one GPU (never limits)
    pair: float  # slowest pair, rounded
    health: int  # encoded blocks delta


def _encode(vec: Iterable[int]) -> int:
    out = 0
    for v in vec:
        out = out * BASE + v
    return out


def _index_by_position(topology: Topology, mask: int) -> tuple[int, ...]:
    idx = topology.indices
    return tuple(sorted(idx[p] for p in range(len(idx)) if mask >> p & 1))


def interchangeable_groups(topology: Topology, gpus: Sequence[int]) -> list[list[int]]:
    """``gpus`` grouped so that any two in a group have the same link to every other GPU.

    Swapping two such GPUs maps the node onto itself, so every term of the objective is the
    same for a set and its swapped twin. Groups keep ascending driver indices, in the order
    of their first GPU in ``gpus``.
    """
    alike = _alike(topology)
    groups: dict[int, list[int]] = {}
    for g in gpus:
        group = groups.get(alike[g])
        if group is None:
            groups[alike[g]] = [g]
        else:
            group.append(g)
    return list(groups.values())


@lru_cache(maxsize=256)
def _alike(topology: Topology) -> dict[int, int]:
    """Driver index -> the first GPU (topology order) it is interchangeable with.

    "Same link to every other GPU" is an equivalence: if g is like h and h like k, g and
    k have the same link to every GPU but g, h, k, and s(g,h) = s(g,k) = s(h,k) (s the
    slower direction: like-ness to k, then to g). So which GPUs are alike is a property of
    the node, worked out once per topology; grouping a free set is then one lookup per GPU.
    Why: comparing every free GPU with every group's first over every third GPU was ~1,600
    bytecodes per new free-GPU pattern (bench/admission_profile.py --opcodes); the result
    is the same (tests/placement/test_alike_gpus.py, against the reference copy).
    """
    def slower(a: int, b: int) -> float:
        return min(topology.bandwidth(a, b), topology.bandwidth(b, a))

    alike: dict[int, int] = {}
    firsts: list[int] = []
    for g in topology.indices:
        for h in firsts:
            if all(slower(g, x) == slower(h, x) for x in topology.indices
                   if x != g and x != h):
                alike[g] = h
                break
        else:
            firsts.append(g)
            alike[g] = g
    return alike


def distinct_subsets(
    topology: Topology, free: Sequence[int], k: int
) -> Iterator[tuple[int, ...]]:
    """The ``k``-subsets of ``free`` up to swapping interchangeable GPUs, each as its
    lexicographically smallest member (the one the tie-break would pick anyway).

    Why: a 16-GPU PCIe node has C(16, 8) = 12,870 subsets of 8 but, with four switches of
    four alike GPUs, only 19 different ones; walking all of them cost seconds per new
    free-GPU pattern.
    """
    groups = interchangeable_groups(topology, free)

    def walk(i: int, left: int) -> Iterator[tuple[int, ...]]:
        if left == 0:
            yield ()
            return
        if i == len(groups) or sum(len(g) for g in groups[i:]) < left:
            return
        for take in range(min(left, len(groups[i])), -1, -1):
            for rest in walk(i + 1, left - take):
                yield (*groups[i][:take], *rest)

    for combo in walk(0, k):
        yield tuple(sorted(combo))


@lru_cache(maxsize=1 << 14)
def _options(topology: Topology, free_mask: int, k: int) -> tuple[_Option, ...]:
    """Pareto-best ``k``-subsets of the free GPUs, best first.

    An option is dropped when another is at least as good in ring bandwidth, slowest pair
    and blocks kept; the survivors are sorted by those (descending), then GPU indices.
    """
    free = _index_by_position(topology, free_mask)
    # NVSwitch: every k-subset has the same ring, pairs and blocks left, so only the first
    # survives the Pareto filter below; skip the C(free, k) walk (DGX-2 has 16 GPUs).
    subsets = [free[:k]] if all_to_all(topology) and topology.measured is None else None
    raw = []
    for combo in subsets or distinct_subsets(topology, free, k):
        bw = ring_bus_bandwidth(topology, combo)
        intra = -bw if k > 1 else -math.inf
        taken = position_mask(topology, combo)
        raw.append(
            _Option(
                gpus=combo,
                bw=bw,
                intra=intra,
                pair=min_pair_bandwidth(topology, combo),
                health=_encode(blocks_delta(topology, free_mask, taken)),
            )
        )
    raw.sort(key=lambda o: (-o.bw, -o.pair, -o.health, o.gpus))
    kept: list[_Option] = []
    for o in raw:
        if not any(q.bw >= o.bw and q.pair >= o.pair and q.health >= o.health for q in kept):
            kept.append(o)
    return tuple(kept)


@dataclass(eq=False)
class _Kind:
    """What every node of one topology with one set of used GPUs shares, whatever its name.

    Why cached across solves (``_KINDS``): a busy cluster has a few hundred such kinds
    for thousands of nodes, and between two admissions most nodes keep theirs, so the free
    mask, its count and the best one-node option are worked out once per kind, not once per
    node and call.
    """

    topology: Topology
    used: frozenset[int]
    free_mask: int
    free: int  # free GPUs
    size: int  # GPUs on the node
    opened: bool  # no GPU in use yet

    def __post_init__(self) -> None:
        #: per gang size n: (one-node key, best n-GPU share), see :meth:`one_node`
        self.rated: dict[int, tuple[tuple[float, float, int, int, int, int], _Option]] = {}
        self._head: tuple[str, tuple[int, ...]] | None = None
        self._bounds: dict[tuple[int, int], tuple[float, int]] = {}
        #: per (gang size, share, node network): a one-node placement's (score, bus
        #: bandwidth), see :meth:`_Search._one_node`
        self.scored: dict[tuple[Any, ...], tuple[Score, float]] = {}

    def share_bounds(self, g: int, jmax: int) -> tuple[float, int]:
        """(best slowest pair, best encoded blocks delta) of any share of 1..``jmax``
        replicas of ``g`` GPUs on such a node: what :meth:`_Search._bound` bounds a
        scope's score with. The Pareto options keep both maxima."""
        got = self._bounds.get((g, jmax))
        if got is None:
            opts = [o for j in range(1, jmax + 1)
                    for o in _options(self.topology, self.free_mask, j * g)]
            got = self._bounds[(g, jmax)] = (max(o.pair for o in opts),
                                             max(o.health for o in opts))
        return got

    def one_node(self, n: int) -> tuple[tuple[float, float, int, int, int, int], _Option]:
        """The best ``n``-GPU share of the free GPUs (the first Pareto option) and its key
        for the one-node search: (ring bandwidth, slowest pair, free NVLink domains opened
        (0 here: it is the node's domain's, not its kind's; :func:`_best_single` sets it),
        blocks kept, packing, fit: minus the GPUs left free)."""
        got = self.rated.get(n)
        if got is None:
            opt = _options(self.topology, self.free_mask, n)[0]
            k1 = 0.0 if n == 1 else round(opt.bw, ROUND)
            got = self.rated[n] = ((k1, opt.pair, 0, opt.health, -int(self.opened),
                                    n - self.free), opt)
        return got

    def head(self) -> tuple[str, tuple[int, ...]]:
        """(topology JSON, sorted used GPUs): the classes' sort key without the network."""
        if self._head is None:
            self._head = (_topology_json(self.topology), tuple(sorted(self.used)))
        return self._head


def _kind(topology: Topology, used: frozenset[int]) -> _Kind:
    """A new kind; used indices the topology does not have are ignored, as before."""
    idx = topology.indices
    pos = {g: p for p, g in enumerate(idx)}
    mask = ((1 << len(idx)) - 1) & ~sum(1 << pos[u] for u in used if u in pos)
    return _Kind(topology, used, mask, mask.bit_count(), len(idx), not used)


#: Kinds by topology, then by used set. Two levels, not one lru_cache on (topology, used):
#: a Topology hashes in Python, a frozenset's hash is cached, and the inner lookup runs once
#: per group and solve. Bounded by clearing: losing an entry costs only its recomputation.
_KINDS: dict[Topology, dict[frozenset[int], _Kind]] = {}
_KINDS_TOPOLOGIES = 256
_KINDS_PER_TOPOLOGY = 1 << 13


def _kinds_of(topology: Topology) -> dict[frozenset[int], _Kind]:
    """The cached kinds of one topology (an empty dict to fill for a new one)."""
    kinds = _KINDS.get(topology)
    if kinds is None:
        if len(_KINDS) >= _KINDS_TOPOLOGIES:
            _KINDS.clear()
        kinds = _KINDS[topology] = {}
    elif len(kinds) >= _KINDS_PER_TOPOLOGY:
        kinds.clear()
    return kinds


@lru_cache(maxsize=1 << 10)
def _topology_json(topology: Topology) -> str:
    return topology.to_json()


@dataclass(eq=False)
class _Group:
    """The nodes of one solve that share a kind and a network: one pass over the nodes
    builds these, and everything after it (feasibility, one-node search, scopes) works on
    groups."""

    kind: _Kind
    network_gbps: float
    nodes: list[NodeState]
    domain: str | None = None  # the NVLink domain of every node here (part of the key)
    cap: int = UNCAPPED  # most GPUs of the gang one of its nodes may hold (NodeState.gpu_cap)

    def __post_init__(self) -> None:
        self._canon: tuple[str, tuple[int, ...], float, int] | None = None
        self._first: NodeState | None = None
        self.free = min(self.kind.free, self.cap)  # GPUs the gang may take on one node

    def reach(self) -> float:
        """The fastest rate its nodes can reach another node at: the effective network,
        or inside an NVLink domain the fabric (cost.domain_gbps), whichever is higher."""
        if self.domain is None:
            return self.network_gbps
        return max(self.network_gbps, domain_gbps(self.kind.topology))

    def first(self) -> str:
        """The smallest node name (the one-node search's tie-break; a GroupedNodes keeps
        groups across solves, so it is looked for once)."""
        return self.first_node().name

    def first_node(self) -> NodeState:
        """The node of the smallest name (names are unique: one node)."""
        if self._first is None:
            self._first = min(self.nodes, key=_NAME)
        return self._first

    def carry_first(self, was: _Group, changed: Container[str],
                    came: Iterable[NodeState]) -> None:
        """Know the first node from ``was``, this group before a replacement: when its
        first node is still here unchanged (its name not ``changed``), the first is the
        smaller of it and the nodes that ``came``. Why: the group a gang just took a node
        from is rebuilt for every new gang, and holds hundreds of alike nodes (the empty
        ones); looking for the smallest name among them again is a pass over all of
        them."""
        first = was._first
        if first is not None and first.name not in changed:
            self._first = min((first, *came), key=_NAME)

    def canon(self) -> tuple[str, tuple[int, ...], float, int]:
        """The classes' sort key and memo signature: (topology JSON, used, network, cap)."""
        if self._canon is None:
            self._canon = (*self.kind.head(), self.network_gbps, self.cap)
        return self._canon


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


_NAME = attrgetter("name")


def _first_name(tie: tuple[_Group, _Option]) -> str:
    return tie[0].first()


@dataclass(frozen=True)
class _Candidate:
    score: Score
    tie: tuple[tuple[str, tuple[int, ...]], ...]
    shares: dict[str, tuple[int, ...]]
    nodes: dict[str, NodeState]  # the touched nodes by name
    bus: float | None = None  # the placement's bus bandwidth when known (one node: cached)

    def better_than(self, other: _Candidate | None) -> bool:
        """Higher score wins; equal scores go to the smaller (node, GPUs) list."""
        if other is None:
            return True
        return self.score > other.score or (self.score == other.score and self.tie < other.tie)


# --- public entry -----------------------------------------------------------------------
def solve(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
    """Place ``gang`` on ``nodes``: the optimum of the objective, or infeasible with a reason.

    Pure and deterministic: the same nodes and gang always give the same placement.
    Raises :class:`InputError` for a malformed request (non-positive sizes, duplicate nodes).
    """
    _check_input(nodes, gang)
    solver = _Search(nodes, gang)
    reason = _infeasible_reason(solver.groups, solver.tally, gang, len(nodes))
    if reason:
        return Placement(feasible=False, reason=reason)
    best = solver.single_node()
    if gang.replicas > 1:
        best = solver.multi_node(best)
    assert best is not None  # _infeasible_reason guarantees one fits
    return _placement(gang, best)


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


def _check_names(nodes: Sequence[NodeState]) -> None:
    names = [n.name for n in nodes]
    if len(set(names)) == len(names):
        return  # the common case, checked at C speed
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputError(f"node {name!r} appears twice")
        seen.add(name)


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


# --- the search -------------------------------------------------------------------------
def _f(n: int, m: int, intra: float, net_gbps: float, factor: float) -> float:
    """The cost model's multi-node bus bandwidth (cost.multi_node_bus_bandwidth, the same
    operations, so the same float): the worst share (``-intra``) or the slowest effective
    network, whichever is lower. ``n`` and ``m`` do not enter it (NCCL's rings pipeline);
    fewer nodes win through the objective's ``nodes`` term instead."""
    return min(-intra, net_gbps / 8.0 * factor)


def _sumset(x: int, y: int) -> int:
    """{a + b : a in x, b in y} over bitmasks (uncut: the caller leaves room)."""
    low = (y & -y).bit_length() - 1
    run = y >> low
    if run & (run + 1) == 0:  # y is one run of ones: smear x by doubling
        width = run.bit_length()
        out, done = x, 1
        while done < width:
            step = done if done < width - done else width - done
            out |= out << step
            done += step
        return out << low
    out = 0
    while y:
        low = y & -y
        out |= x << (low.bit_length() - 1)
        y ^= low
    return out


@lru_cache(maxsize=256)
def _grid(r: int) -> tuple[int, int]:
    """(row width, mask of the cells that count) of the (nodes, replicas) grid for R = r.

    Row m holds the replica counts 0..r reachable with m nodes; a row is 2r + 2 bits wide
    so adding a node's at most r replicas never spills into the next row before the cut.
    """
    width = 2 * r + 2
    row = (1 << (r + 1)) - 1
    return width, sum(row << (m * width) for m in range(r + 1))


#: (bus bandwidth, -nodes, slowest pair, locality, -domains, -free domains opened, encoded
#: blocks, packing, fit): Score's order
_Bound = tuple[float, int, float, int, int, int, int, int, int]
_Opts = list[dict[int, tuple[_Option, ...]]]  # per class: replicas on a node -> options
_Plan = list[tuple[int, int, _Option]]  # per chosen node: (class position, replicas, share)


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
        net = domain_gbps(grp.kind.topology) if fabric else grp.network_gbps
        canon = grp.canon() if not fabric else (*grp.kind.head(), net, grp.cap)
        out.append(_Class(topology=grp.kind.topology, free_mask=grp.kind.free_mask,
                          network_gbps=net, opened=grp.kind.opened, nodes=members,
                          canon=canon, kind=grp.kind, domain=grp.domain, cap=grp.cap,
                          fresh=grp.domain is not None and grp.domain in free))
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


def _free_domains(groups: Iterable[_Group]) -> frozenset[str]:
    """The NVLink domains none of whose groups has a GPU in use (objective.free_domains)."""
    seen: set[str] = set()
    used: set[str] = set()
    for grp in groups:
        if grp.domain is not None:
            seen.add(grp.domain)
            if not grp.kind.opened:
                used.add(grp.domain)
    return frozenset(seen - used)


def _merge_twins(groups: list[_Group]) -> list[_Group]:
    """One group per (topology, used, network) when equal topologies came as several
    objects (nodes whose annotations were parsed one by one). The groups given are left as
    they are (a :class:`GroupedNodes` keeps them for later solves)."""
    merged: dict[tuple[Topology, frozenset[int], float, str | None, int], _Group] = {}
    for grp in groups:
        key = (grp.kind.topology, grp.kind.used, grp.network_gbps, grp.domain, grp.cap)
        have = merged.get(key)
        merged[key] = grp if have is None else _Group(have.kind, have.network_gbps,
                                                      have.nodes + grp.nodes, have.domain,
                                                      have.cap)
    return list(merged.values())


_BucketKey = tuple[int, frozenset[int], float, str | None, int]


def _bucket_key(node: NodeState) -> _BucketKey:
    """What makes nodes alike for the solver: topology (by object: its __hash__ is a Python
    call; equal topologies of different objects are merged later), used GPUs, network,
    NVLink domain (None on nodes without one: their grouping is as before), and the most
    GPUs of this gang the node's other resources let it hold (``gpu_cap``)."""
    return (id(node.topology), node.used, node.effective_gbps, node.nvlink_domain,
            node.gpu_cap)


def _group(key: _BucketKey, members: list[NodeState],
           kinds_by_id: dict[int, dict[frozenset[int], _Kind]]) -> _Group:
    tid, used, net, domain, cap = key
    kinds = kinds_by_id.get(tid)
    if kinds is None:
        kinds = kinds_by_id[tid] = _kinds_of(members[0].topology)
    kind = kinds.get(used)
    if kind is None:
        kind = kinds[used] = _kind(members[0].topology, used)
    return _Group(kind, net, members, domain, cap)


def _group_nodes(nodes: Iterable[NodeState]) -> list[_Group]:
    """The solver's one pass over every node: nodes alike in topology, used GPUs and
    network land in one group (a busy 1,000-node cluster has a few hundred)."""
    buckets: dict[_BucketKey, list[NodeState]] = {}
    for node in nodes:
        key = _bucket_key(node)
        members = buckets.get(key)
        if members is None:
            buckets[key] = [node]
        else:
            members.append(node)
    kinds_by_id: dict[int, dict[frozenset[int], _Kind]] = {}
    groups = [_group(key, members, kinds_by_id) for key, members in buckets.items()]
    if len({id(k) for k in kinds_by_id.values()}) < len(kinds_by_id):
        groups = _merge_twins(groups)
    return groups


_Tied = dict[object, tuple[_Group, _Option]]  # the groups tied for the best one-node key
#: The tied groups' (smallest node name, key), ascending: the one-node winner is the first
_Order = list[tuple[str, object]]
#: Per gang size: (best one-node key, the groups tied for it, their name order or None,
#: the bucket keys touched since the ties were worked out)
_Single = tuple[tuple | None, _Tied, _Order | None, frozenset[_BucketKey]]
#: Touched keys an entry may gather before it is dropped (worked out again when asked)
_STALE_KEYS = 64


def _best_single(items: Iterable[tuple[object, _Group]], n: int,
                 free: Container[str]) -> tuple[tuple | None, _Tied]:
    """The best one-node key for ``n`` GPUs over the groups (by any keys) and the groups
    that reach it, each with its best share; a group in an NVLink domain of ``free`` (no
    GPU in use) opens it (the key's third term)."""
    best_key: tuple | None = None
    tied: _Tied = {}
    for at, grp in items:
        kind = grp.kind
        if grp.free < n:
            continue
        key, opt = kind.rated.get(n) or kind.one_node(n)
        if grp.domain is not None and grp.domain in free:
            key = (key[0], key[1], -1, *key[3:])
        if best_key is None or key > best_key:
            best_key, tied = key, {at: (grp, opt)}
        elif key == best_key:
            tied[at] = (grp, opt)
    return best_key, tied


def _reordered(order: _Order | None, tied: _Tied, gone: Iterable[object],
               fresh: _Tied) -> _Order | None:
    """``order`` (of ``tied``) without the groups ``gone`` and with those of ``fresh``, or
    None (worked out when asked) when there was none.

    Why kept up to date rather than rebuilt: the winner's group is the one a gang just
    took a node of, so it is replaced after almost every one-node gang, and a minimum over
    every tied group (a few hundred for one GPU on the benchmark's cluster) then cost
    ~2,800 bytecodes per new gang (bench/admission_profile.py --opcodes); a removal and an
    insertion by bisection are a few dozen. A copy: the order of ``tied`` stays valid for
    the copy it belongs to."""
    if order is None:
        return None
    if not gone and not fresh:
        return order
    out = list(order)
    for key in gone:
        del out[bisect_left(out, (tied[key][0].first(), key))]
    for key, (grp, _) in fresh.items():
        insort(out, (grp.first(), key))
    return out


@dataclass(frozen=True)
class _Tally:
    """Nodes per GPU count, per free-GPU count and per effective network: all that the
    feasibility reasons and the multi-node search's first bound read of the groups."""

    sizes: dict[int, int]
    frees: dict[int, int]
    nets: dict[float, int]

    @classmethod
    def of(cls, groups: Iterable[_Group]) -> _Tally:
        sizes: dict[int, int] = {}
        frees: dict[int, int] = {}
        nets: dict[float, int] = {}
        for grp in groups:  # one pass, every solve of a plain list: kept plain
            kind, count = grp.kind, len(grp.nodes)
            net = grp.network_gbps if grp.domain is None else grp.reach()
            sizes[kind.size] = sizes.get(kind.size, 0) + count
            frees[grp.free] = frees.get(grp.free, 0) + count
            nets[net] = nets.get(net, 0) + count
        return cls(sizes, frees, nets)

    def copy(self) -> _Tally:
        return _Tally(dict(self.sizes), dict(self.frees), dict(self.nets))

    def add(self, grp: _Group, count: int) -> None:
        """Count ``count`` nodes like those of ``grp`` in (or out, if negative)."""
        _count(self.sizes, grp.kind.size, count)
        _count(self.frees, grp.free, count)
        _count(self.nets, grp.reach(), count)


def _count_in(table: dict[str, tuple[int, int]], node: NodeState, sign: int) -> None:
    """Count ``node`` in (``sign`` 1) or out (-1) of its NVLink domain's (nodes, nodes
    with a GPU in use); a domain left with no node is dropped."""
    domain = node.nvlink_domain
    assert domain is not None
    nodes, used = table.get(domain, (0, 0))
    nodes, used = nodes + sign, used + sign * bool(node.used)
    if nodes:
        table[domain] = (nodes, used)
    else:
        del table[domain]


def _count(table: dict[Any, int], value: Any, count: int) -> None:
    """``table[value] += count``, the entry gone at zero (``max`` reads only the keys)."""
    left = table.get(value, 0) + count
    if left:
        table[value] = left
    else:
        del table[value]


class GroupedNodes(Sequence[NodeState]):
    """A list of nodes with the solver's grouping pass done, kept up to date node by node.

    Why: the webhook solves the whole cluster for every new gang, and between two gangs
    only the few nodes a reservation touched change. The pass that groups 1,000 nodes was
    half of a one-node solve, and the loops over a few hundred groups that follow it (the
    feasibility reasons, the best one-node share) most of the rest (docs/benchmarks.md,
    "Solver state kept across gangs"). :meth:`replaced` redoes the groups of the changed
    nodes only and carries the tallies and the best one-node key per gang size over (with
    the tied groups in name order, brought up to date when the size is asked);
    :func:`solve` given a GroupedNodes starts from them. Answers are the same as for the
    plain list (the search never depends on the order of groups or of their nodes;
    tests/placement/test_grouped_nodes.py, test_grouped_nodes_upkeep.py).

    Read-only: a change is a new GroupedNodes (:meth:`replaced`); the old one stays valid.
    """

    __slots__ = ("_buckets", "_domain_used", "_free", "_groups", "_list", "_nodes", "_single",
                 "_tally", "_tops", "_twins", "_where")

    def __init__(self, nodes: Iterable[NodeState]) -> None:
        self._nodes = list(nodes)
        self._where = {n.name: i for i, n in enumerate(self._nodes)}
        if len(self._where) != len(self._nodes):
            _check_names(self._nodes)
        buckets: dict[_BucketKey, dict[str, NodeState]] = {}
        for node in self._nodes:
            key = _bucket_key(node)
            members = buckets.get(key)
            if members is None:
                buckets[key] = {node.name: node}
            else:
                members[node.name] = node
        self._buckets = buckets
        #: per NVLink domain, (its nodes, those with a GPU in use): a free domain's is (n, 0)
        self._domain_used: dict[str, tuple[int, int]] = {}
        for node in self._nodes:
            if node.nvlink_domain is not None:
                _count_in(self._domain_used, node, 1)
        self._free: frozenset[str] | None = None
        kinds_by_id: dict[int, dict[frozenset[int], _Kind]] = {}
        self._groups = {key: _group(key, list(members.values()), kinds_by_id)
                        for key, members in buckets.items()}
        self._tally = _Tally.of(self._groups.values())
        self._single: dict[int, _Single] = {}
        self._list: list[_Group] | None = None
        # the topologies of the last twin check, by id (held, so no id is reused meanwhile)
        self._tops: dict[int, Topology] = {}
        self._twins = False

    def __len__(self) -> int:
        return len(self._nodes)

    @overload
    def __getitem__(self, i: int) -> NodeState: ...

    @overload
    def __getitem__(self, i: slice) -> list[NodeState]: ...

    def __getitem__(self, i: int | slice) -> NodeState | list[NodeState]:
        return self._nodes[i]

    def __iter__(self) -> Iterator[NodeState]:
        return iter(self._nodes)

    def replaced(self, nodes: Iterable[NodeState]) -> GroupedNodes:
        """A copy with each of ``nodes`` in the place of the node of its name (which must
        be here): the groups of untouched nodes are shared, not rebuilt."""
        final: dict[str, NodeState] = {}
        for node in nodes:
            if node.name not in self._where:
                raise ValueError(f"node {node.name!r} is not one of these nodes")
            final[node.name] = node
        new = object.__new__(GroupedNodes)
        new._nodes = list(self._nodes)
        new._where = self._where  # same names at the same places
        new._buckets = dict(self._buckets)
        new._groups = dict(self._groups)
        new._tally = self._tally.copy()
        new._list = None
        new._tops, new._twins = self._tops, self._twins
        new._domain_used, new._free = self._domain_used, self._free
        # the touched buckets, each with its group before this change (None: new bucket)
        touched: dict[_BucketKey, _Group | None] = {}
        came: dict[_BucketKey, list[NodeState]] = {}  # the nodes each bucket gained
        for name, node in final.items():
            at = self._where[name]
            old = self._nodes[at]
            if old is node:
                continue
            new._nodes[at] = node
            if old.nvlink_domain is not None or node.nvlink_domain is not None:
                if new._domain_used is self._domain_used:
                    new._domain_used, new._free = dict(self._domain_used), None
                for n, sign in ((old, -1), (node, 1)):
                    if n.nvlink_domain is not None:
                        _count_in(new._domain_used, n, sign)
            for key, add in ((_bucket_key(old), False), (_bucket_key(node), True)):
                members = new._buckets.get(key)
                if key not in touched:
                    touched[key] = new._groups.get(key)
                    members = new._buckets[key] = dict(members) if members is not None else {}
                assert members is not None
                if add:
                    members[name] = node
                    came.setdefault(key, []).append(node)
                else:
                    del members[name]
        kinds_by_id: dict[int, dict[frozenset[int], _Kind]] = {}
        for key, was in touched.items():
            # the tally counts by what the key fixes (GPU count, free count, network), so a
            # bucket's change is one count: its new size less its old
            members = new._buckets[key]
            if not members:
                del new._buckets[key]
                if was is not None:
                    del new._groups[key]
                    new._tally.add(was, -len(was.nodes))
                continue
            # overwritten in place, not popped and added: a dict with deleted entries is
            # copied entry by entry (4x slower), and every replacement copies these
            grp = new._groups[key] = _group(key, list(members.values()), kinds_by_id)
            change = len(grp.nodes) - (len(was.nodes) if was is not None else 0)
            if change:
                new._tally.add(grp, change)
            if was is not None:
                grp.carry_first(was, final, came.get(key, ()))
        if any(key[0] not in self._tops for key in touched):
            new._tops = {}  # a topology object not seen yet: look for twins again
        # The best one-node key per gang size is brought up to date when that size is
        # asked (:meth:`best_single`), from the keys touched since: sizes not asked
        # between two gangs cost a set union here, not a pass over their ties.
        # a domain that became free or stopped being free changes the one-node key of
        # every group in it (rare: its first node taken, its last released)
        flipped = (new.free_domains() ^ self.free_domains()) if new._free is None else ()
        touched_keys = set(touched).union(
            key for key in new._groups if key[3] in flipped) if flipped else touched
        new._single = {}
        for n, (best, tied, order, stale) in self._single.items():
            stale = stale.union(touched_keys)
            if len(stale) <= _STALE_KEYS:
                new._single[n] = (best, tied, order, stale)
        return new

    def groups(self) -> list[_Group]:
        """The solver's groups of these nodes (built once per bucket, shared by copies)."""
        if self._list is None:
            out = list(self._groups.values())
            if self._groups and not self._tops:
                # which topologies are equal but not the same object: merged below
                tops = {key[0]: grp.kind.topology for key, grp in self._groups.items()}
                self._tops, self._twins = tops, len(set(tops.values())) < len(tops)
            self._list = _merge_twins(out) if self._twins else out
        return self._list

    def tally(self) -> _Tally:
        """Nodes per GPU count, free-GPU count and network (read, never modify)."""
        return self._tally

    def free_domains(self) -> frozenset[str]:
        """The NVLink domains none of whose nodes has a GPU in use."""
        if self._free is None:
            self._free = frozenset(d for d, (_, used) in self._domain_used.items() if not used)
        return self._free

    def best_single(self, n: int) -> tuple[_Group, _Option] | None:
        """The one-node winner for ``n`` GPUs: of the groups that reach the best one-node
        key, the one holding the smallest node name (names are unique, so that alone
        breaks the tie), with its best share; None when no node has ``n`` free GPUs."""
        got = self._single.get(n)
        if got is not None and got[3]:
            got = self._refreshed(n, *got)
        if got is None:
            best, tied = _best_single(self._groups.items(), n, self.free_domains())
            got = (best, tied, None, frozenset())
        best, tied, order, _ = got
        if tied and order is None:
            order = sorted([(grp.first(), key) for key, (grp, _) in tied.items()])
            got = (best, tied, order, frozenset())
        self._single[n] = got
        return tied[order[0][1]] if tied and order else None

    def _refreshed(self, n: int, best: tuple | None, tied: _Tied, order: _Order | None,
                   stale: frozenset[_BucketKey]) -> _Single | None:
        """The entry for ``n`` GPUs made for an earlier copy, brought up to date: the
        groups of the ``stale`` keys (touched since) leave the ties and are rated again;
        the others are the same groups as then. None when every group at the best changed
        and none reaches it now (worked out again over every group)."""
        gone = tied.keys() & stale  # at C speed: stale is a few keys, tied hundreds
        top, fresh = _best_single(((key, self._groups[key]) for key in stale
                                   if key in self._groups), n, self.free_domains())
        if top is not None and (best is None or top > best):
            return top, fresh, None, frozenset()
        if top is None or top != best:
            fresh = {}  # below the best: not among the ties
            if tied and len(gone) == len(tied):
                return None
        kept = tied
        if gone or fresh:  # one copy of the ties (hundreds), never two
            kept = dict(tied)
            for key in gone - fresh.keys():  # still tied: overwritten in place
                del kept[key]
            kept.update(fresh)
        return best, kept, _reordered(order, tied, gone, fresh), frozenset()


class _Search:
    """One solve: the nodes grouped in one pass, then the one-node and multi-node searches."""

    def __init__(self, nodes: Sequence[NodeState], gang: GangRequest) -> None:
        # The only loop over every node of a one-node gang, unless the caller kept the
        # grouping (GroupedNodes). The groups are read, never changed: a GroupedNodes
        # shares them with later solves.
        self.grouped = nodes if isinstance(nodes, GroupedNodes) else None
        self.groups: list[_Group] = (self.grouped.groups() if self.grouped is not None
                                     else _group_nodes(nodes))
        self.tally = (self.grouped.tally() if self.grouped is not None
                      else _Tally.of(self.groups))
        #: NVLink domains with no GPU in use (the objective's ``domains_opened``)
        self.free = (self.grouped.free_domains() if self.grouped is not None
                     else _free_domains(self.groups))
        self.gang = gang
        self.g = gang.gpus_per_replica
        self.r = gang.replicas
        self.per_node = gang.per_node
        self.n = gang.total_gpus
        self._memo: dict[tuple, _Plan | None] = {}
        self._scores: dict[tuple, Score] = {}

    def _candidate(
        self, shares: dict[str, tuple[int, ...]], nodes: dict[str, NodeState]
    ) -> _Candidate:
        return _Candidate(score_by_name(nodes, self.gang, shares, free=self.free),
                          tie_break(shares), shares, nodes)

    # --- one node -------------------------------------------------------------------
    def single_node(self) -> _Candidate | None:
        """Best placement of the whole gang on one node, or None if no node has room.

        Alike nodes have the same best share and key, so the key is worked out per group;
        node names are looked at only in the groups that tie for the best key.
        """
        if self.per_node < self.r:
            return None  # the gang may not share one node
        if self.grouped is not None:
            won = self.grouped.best_single(self.n)
        else:
            tied = _best_single(enumerate(self.groups), self.n, self.free)[1]
            # Names are unique, so the smallest name alone breaks the tie (name, GPUs).
            won = min(tied.values(), key=_first_name, default=None)
        if won is None:
            return None
        grp, opt = won
        return self._one_node(grp.kind, grp.first_node(), opt)

    def _one_node(self, kind: _Kind, node: NodeState, opt: _Option) -> _Candidate:
        """The whole gang on ``node`` (of ``kind``) as ``opt``, scored by the objective.

        The score and bus bandwidth of one share read nothing of the node but its topology
        and used GPUs (the kind), its network fields and the share itself (the node's name
        only breaks ties), so they are kept on the kind per (gang size, share, network),
        across solves: scoring it again (score_by_name) was ~1,200 bytecodes per new gang,
        and the Placement worked the bus bandwidth out once more (--opcodes of
        bench/admission_profile.py)."""
        shares = {node.name: opt.gpus}
        nodes = {node.name: node}
        key = (self.n, opt.gpus, node.network_gbps, node.network_transport,
               node.network_efficiency, node.transport_share, node.nvlink_domain in self.free)
        got = kind.scored.get(key)
        if got is None:
            score = score_by_name(nodes, self.gang, shares, free=self.free)
            got = kind.scored[key] = (score, _bus(self.gang, [node], shares, "node"))
        return _Candidate(got[0], tie_break(shares), shares, nodes, got[1])

    # --- several nodes --------------------------------------------------------------
    def multi_node(self, best: _Candidate | None) -> _Candidate | None:
        """Best placement over several nodes if it beats ``best``; else ``best``."""
        if best is not None:
            # Cheapest bound first: the whole cluster at rack speed, no intra-node cost.
            jmax = min(self.per_node, max(self.tally.frees) // self.g)
            net = max(self.tally.nets)
            m_lb = max(2, math.ceil(self.r / jmax))
            if round(_f(self.n, m_lb, -math.inf, net, 1.0), ROUND) < best.score.bus_bandwidth:
                return best
        # Scopes best bound first; the bound covers the whole objective (``_bound``), so
        # once one is below the best found, so is every later one. A scope whose bound only
        # equals the best can still win the tie-break by node names, unless its first name
        # comes after the best's first.
        rated = []
        for span, classes in self._scopes():
            bound = self._bound(classes, span)
            if bound is not None:
                rated.append((bound, -SPAN_RANK[span], span, classes))
        rated.sort(key=itemgetter(0, 1), reverse=True)
        for bound, _, span, classes in rated:
            if best is not None:
                top = best.score
                if bound[0] < top.bus_bandwidth:
                    break
                if self.prune_by_score:
                    have = (top.bus_bandwidth, top.nodes, top.bottleneck_pair, top.locality,
                            top.domains, top.domains_opened, _encode(top.blocks), top.packing,
                            top.fit)
                    if bound < have:
                        break
                    if bound == have and min(n.name for c in classes if self._cap(c)
                                             for n in c.nodes) > best.tie[0][0]:
                        continue
            cand = self._scope(span, classes, None if best is None else best.score.bus_bandwidth)
            if cand is not None and cand.better_than(best):
                best = cand
        return best

    def _scopes(self) -> list[tuple[str, list[_Class]]]:
        """Every rack, zone and the whole cluster that can hold a multi-node gang, each with
        its classes of nodes that have room for a replica.

        A scope counts every node for its size (two nodes or more), as the span does; a
        zone that is exactly one rack, and a cluster that is exactly one rack or zone, are
        searched once, in the narrower scope. One pass over the nodes splits the groups by
        (zone, rack); zones and the cluster are unions of those pieces.
        """
        g = self.g
        size: dict[tuple[str | None, str | None], int] = {}
        pieces: dict[tuple[str | None, str | None], list[tuple[_Group, list[NodeState]]]] = {}
        eligible: list[_Group] = []
        # NVLink domains: their eligible groups (a group is of one domain), every node's
        # count, and which (zone, rack) places they cover (a rack that is exactly one
        # domain is searched once, as the domain)
        domains: dict[str, list[tuple[_Group, list[NodeState]]]] = {}
        domain_size: dict[str, int] = {}
        loc_domains: dict[tuple[str | None, str | None], set[str | None]] = {}
        domain_locs: dict[str, set[tuple[str | None, str | None]]] = {}
        any_domain = any(grp.domain is not None for grp in self.groups)
        for grp in self.groups:
            dom = grp.domain
            if dom is not None:
                domain_size[dom] = domain_size.get(dom, 0) + len(grp.nodes)
            if grp.free < g:
                for node in grp.nodes:
                    loc = (node.zone, node.rack)
                    size[loc] = size.get(loc, 0) + 1
                    if any_domain:
                        loc_domains.setdefault(loc, set()).add(dom)
                        if dom is not None:
                            domain_locs.setdefault(dom, set()).add(loc)
                continue
            eligible.append(grp)
            if dom is not None:
                domains.setdefault(dom, []).append((grp, grp.nodes))
            split: dict[tuple[str | None, str | None], list[NodeState]] = {}
            for node in grp.nodes:
                loc = (node.zone, node.rack)
                members = split.get(loc)
                if members is None:
                    split[loc] = [node]
                else:
                    members.append(node)
            for loc, members in split.items():
                size[loc] = size.get(loc, 0) + len(members)
                pieces.setdefault(loc, []).append((grp, members))
                if any_domain:
                    loc_domains.setdefault(loc, set()).add(dom)
                    if dom is not None:
                        domain_locs.setdefault(dom, set()).add(loc)

        zone_size: dict[str, int] = {}
        zone_locs: dict[str, list[tuple[str | None, str | None]]] = {}
        for loc, count in size.items():
            if loc[0] is not None:
                zone_size[loc[0]] = zone_size.get(loc[0], 0) + count
                zone_locs.setdefault(loc[0], []).append(loc)

        def one_rack(locs: list[tuple[str | None, str | None]]) -> bool:
            return len(locs) == 1 and locs[0][1] is not None

        scopes: list[tuple[str, list[_Class]]] = []
        for dom in sorted(domains):
            if domain_size[dom] >= 2:
                scopes.append(("nvlink-domain", _classes(domains[dom], self.free,
                                                         fabric=True)))

        def one_domain(loc: tuple[str | None, str | None]) -> bool:
            doms = loc_domains.get(loc)
            if not doms or len(doms) != 1:
                return False
            dom = next(iter(doms))
            return dom is not None and domain_locs[dom] == {loc}

        racks = [loc for loc in size if loc[1] is not None and size[loc] >= 2]
        for loc in sorted(racks, key=lambda k: (k[0] or "", k[1])):
            if any_domain and one_domain(loc):
                continue  # the rack is exactly one NVLink domain, searched as that
            scopes.append(("rack", _classes(pieces.get(loc, ()), self.free)))
        for zone in sorted(zone_size):
            locs = zone_locs[zone]
            if zone_size[zone] >= 2 and not one_rack(locs):
                scopes.append(("zone", _classes((p for loc in locs for p in pieces.get(loc, ())),
                                                self.free)))
        node_count = sum(size.values())
        everyone_one_zone = len(zone_size) == 1 and next(iter(zone_size.values())) == node_count
        if node_count >= 2 and not everyone_one_zone and not one_rack(list(size)):
            scopes.append(("cluster", _classes(((grp, grp.nodes) for grp in eligible), self.free)))
        return scopes

    #: Skip scopes by the bound of the whole objective (off: by bandwidth only, the full
    #: search tests/placement/test_scope_pruning.py compares against).
    prune_by_score = True

    def _cap(self, c: _Class) -> int:
        """Replicas one node of ``c`` can hold."""
        return min(self.per_node, min(c.free_mask.bit_count(), c.cap) // self.g)

    def _bound(self, classes: list[_Class], span: str) -> _Bound | None:
        """An upper bound of the objective of any placement in a scope, term by term as
        :class:`Score` compares (blocks encoded), or None when the scope cannot hold the
        gang.

        Why the whole objective and not the bandwidth alone: when the network bounds every
        multi-node placement (a TCP cluster) every rack ties on bandwidth, and a gang that
        fits on no single node searched all of them, ~0.15 ms each, to compare the later
        terms (a 2 x 4 gang on a busy 1,000-node cluster: ~20 ms). Each term's bound holds
        given the terms before it tie: the fewest nodes the scope can use (``m``: only a
        plan of exactly ``m`` nodes ties on the nodes term), the best pair of any share
        (the Pareto options keep it), a rack's locality (the narrowest span of two nodes),
        the ``m`` best blocks deltas of distinct nodes, no empty node opened, the GPUs left
        free on the ``m`` fullest nodes that can take a replica.
        """
        caps = [self._cap(c) for c in classes]
        if sum(min(len(c.nodes), self.r) * j for c, j in zip(classes, caps, strict=True)) < self.r:
            return None
        jmax = max(caps)
        m = max(2, math.ceil(self.r / jmax))
        net = max(c.network_gbps for c in classes)
        bw = round(_f(self.n, m, -math.inf, net, SPAN_FACTOR[span]), ROUND)
        pair = -math.inf
        healths: list[int] = []
        frees: list[int] = []
        for c, j in zip(classes, caps, strict=True):
            if j:
                p, h = c.kind.share_bounds(self.g, j)
                pair = max(pair, p)
                healths.extend([h] * min(len(c.nodes), m))
                frees.extend([c.kind.free] * min(len(c.nodes), m))
        healths.sort(reverse=True)
        # a scope's placements of its own span: one NVLink domain, else a rack or wider
        # (narrower ones are found in their own scope); at least one domain unless some
        # node has none
        locality = -SPAN_RANK["nvlink-domain" if span == "nvlink-domain" else "rack"]
        domains = 0 if any(c.domain is None for c in classes) else -1
        # every node with room in a free domain: the placement opens one at least
        opened = -1 if all(c.fresh for c, j in zip(classes, caps, strict=True) if j) else 0
        frees.sort()
        return (bw, -m, pair, locality, domains, opened, sum(healths[:m]), 0,
                self.n - sum(frees[:m]))

    def _scope(self, span: str, classes: list[_Class], floor: float | None) -> _Candidate | None:
        sig = (span, tuple((c.canon, min(len(c.nodes), self.r), c.domain_index, c.fresh)
                           for c in classes))
        if sig not in self._memo:
            self._memo[sig] = self._plan(span, classes, floor)
        plan = self._memo[sig]
        if plan is None:
            return None
        shares: dict[str, tuple[int, ...]] = {}
        touched: dict[str, NodeState] = {}
        used_in_class: dict[int, int] = {}
        for ci, _j, opt in plan:
            pos = used_in_class.get(ci, 0)
            used_in_class[ci] = pos + 1
            node = classes[ci].by_name()[pos]
            shares[node.name] = opt.gpus
            touched[node.name] = node
        # Scopes with one signature share the plan, and so the score, except for the real
        # span (a zone's plan may land in one rack): score it once per (signature, span).
        # Racks that tie on the bound are many; scoring each plan again was most of a
        # multi-node solve.
        key = (sig, span_of(list(touched.values())))
        score = self._scores.get(key)
        if score is None:
            cand = self._candidate(shares, touched)
            self._scores[key] = cand.score
            return cand
        return _Candidate(score, tie_break(shares), shares, touched)

    def _plan(self, span: str, classes: list[_Class], floor: float | None) -> _Plan | None:
        """Stages a-c of the module docstring for one scope: [(class, replicas, option)].

        None when nothing in the scope reaches the bandwidth ``floor`` (the best found so
        far elsewhere), which stays true as the floor only rises.
        """
        r, g, n = self.r, self.g, self.n
        factor = SPAN_FACTOR[span]
        counts = [min(len(c.nodes), r) for c in classes]
        opts: _Opts = []
        for c in classes:
            jmax = self._cap(c)
            opts.append({j: _options(c.topology, c.free_mask, j * g) for j in range(1, jmax + 1)})
        intras = sorted({o.intra for per in opts for os in per.values() for o in os})
        pairs = sorted({o.pair for per in opts for os in per.values() for o in os}, reverse=True)
        nets = sorted({c.network_gbps for c in classes}, reverse=True)

        feas_memo: dict[tuple[float, float, float], int] = {}

        def feasible(m: int, t_i: float, t_n: float, t_p: float) -> bool:
            key = (t_i, t_n, t_p)
            if key not in feas_memo:
                feas_memo[key] = self._reach(classes, counts, opts, t_i, t_n, t_p)
            return bool(feas_memo[key] >> m & 1)

        # a. best bandwidth: per (N, m) the smallest feasible intra threshold (feasibility
        # only grows with the threshold, so binary search), never below ``floor``.
        low_pair = pairs[-1]
        tied: list[tuple[int, float, float]] = []
        target = floor
        found = False
        for t_n in nets:
            eligible = sum(k for c, k in zip(classes, counts, strict=True) if c.network_gbps >= t_n)
            for m in range(2, min(r, eligible) + 1):
                if target is not None and round(_f(n, m, intras[0], t_n, factor), ROUND) < target:
                    continue
                lo, hi = 0, len(intras) - 1
                if not feasible(m, intras[hi], t_n, low_pair):
                    continue
                while lo < hi:
                    mid = (lo + hi) // 2
                    if feasible(m, intras[mid], t_n, low_pair):
                        hi = mid
                    else:
                        lo = mid + 1
                rf = round(_f(n, m, intras[lo], t_n, factor), ROUND)
                if target is not None and rf < target:
                    continue
                if target is None or rf > target or not found:
                    target, tied, found = rf, [], True
                i = lo
                while i < len(intras) and round(_f(n, m, intras[i], t_n, factor), ROUND) == rf:
                    tied.append((m, intras[i], t_n))
                    i += 1
        if not found:
            return None
        # the objective's next term: fewest nodes among the best bandwidth
        fewest = min(m for m, _, _ in tied)
        tied = [t for t in tied if t[0] == fewest]
        # b. highest slowest-pair threshold
        best_pair = None
        stage2 = []
        for m, t_i, t_n in tied:
            for t_p in pairs:
                if best_pair is not None and t_p < best_pair:
                    break
                if feasible(m, t_i, t_n, t_p):
                    if best_pair is None or t_p > best_pair:
                        best_pair, stage2 = t_p, []
                    stage2.append((m, t_i, t_n))
                    break
        assert best_pair is not None
        # c. blocks kept, then packing, then fit
        best_plan = None
        best_value = None
        for m, t_i, t_n in stage2:
            found = self._best_value(classes, counts, opts, m, t_i, t_n, best_pair)
            if found is not None and (best_value is None or found[0] > best_value):
                best_value, best_plan = found
        return best_plan

    def _allowed(
        self, opts: dict[int, tuple[_Option, ...]], t_i: float, t_p: float
    ) -> dict[int, _Option]:
        """Per replica count j, the best option (blocks kept) within the thresholds."""
        out = {}
        for j, os in opts.items():
            best = None
            for o in os:
                if o.intra <= t_i and o.pair >= t_p and (
                    best is None or (o.health, _rev(o.gpus)) > (best.health, _rev(best.gpus))
                ):
                    best = o
            if best is not None:
                out[j] = best
        return out

    def _reach(
        self,
        classes: list[_Class],
        counts: list[int],
        opts: _Opts,
        t_i: float,
        t_n: float,
        t_p: float,
    ) -> int:
        """Bitmask of node counts m for which exactly m nodes can hold all R replicas."""
        r = self.r
        full = (1 << (r + 1)) - 1
        groups: dict[int, int] = {}
        for c, k, per in zip(classes, counts, opts, strict=True):
            if c.network_gbps < t_n:
                continue
            mask = sum(1 << j for j in self._allowed(per, t_i, t_p)) & full
            if mask:
                groups[mask] = groups.get(mask, 0) + k
        # One big integer holds the whole (nodes, replicas) grid (see _grid), so adding a
        # node to every reachable state at once is a shift-or and a cut: a few big-integer
        # operations per node instead of a Python loop over node counts per node (12x on
        # the _reach calls of 64 x 1 at 5,000 nodes).
        width, cells = _grid(r)
        reach = 1  # zero nodes, zero replicas
        for mask, k in groups.items():
            for _ in range(min(k, r)):
                grown = (reach | _sumset(reach, mask) << width) & cells
                if grown == reach:
                    break
                reach = grown
        return sum(1 << m for m in range(r + 1) if reach >> (m * width + r) & 1)

    def _best_value(
        self,
        classes: list[_Class],
        counts: list[int],
        opts: _Opts,
        m: int,
        t_i: float,
        t_n: float,
        t_p: float,
    ) -> tuple[int, _Plan] | None:
        """Max (fewest NVLink domains, blocks kept, packing, fit) over plans with exactly m
        nodes and all R replicas.

        A knapsack over classes: state (nodes used, replicas placed, current domain
        touched) -> best value, with back-pointers (copying partial plans made large
        one-GPU gangs quadratic). Classes of one domain come one after another
        (:func:`_classes`), so a domain costs once, when the first of its classes gets a
        node: the flag says whether that happened since the domain began (classes without
        a domain never cost). The cost outweighs any blocks and packing value (DOMAIN_COST).

        States that the classes still to come cannot complete to exactly (m, R) are dropped
        before they are combined: too many nodes left to fill, or too many or too few
        replicas for them at the most and fewest replicas those classes allow a node. A
        dropped state only ever leads to dropped states, so the values and back-pointers
        of the rest, and the plan, are those of the full knapsack. Why: 64 one-GPU
        replicas on 8 nodes leave one live state per node count out of 585.
        """
        r = self.r
        usable = []
        for ci, (c, k, per) in enumerate(zip(classes, counts, opts, strict=True)):
            if c.network_gbps < t_n:
                continue
            allowed = self._allowed(per, t_i, t_p)
            if allowed:
                usable.append((ci, c, k, allowed))
        # Suffix bounds: nodes the classes from position i on can add, and the fewest and
        # most replicas one of their nodes may hold.
        left_nodes = [0] * (len(usable) + 1)
        left_jmin = [r + 1] * (len(usable) + 1)
        left_jmax = [0] * (len(usable) + 1)
        for i in range(len(usable) - 1, -1, -1):
            _, _, k, allowed = usable[i]
            left_nodes[i] = left_nodes[i + 1] + min(k, m)
            left_jmin[i] = min(left_jmin[i + 1], min(allowed))
            left_jmax[i] = max(left_jmax[i + 1], max(allowed))

        def live(m0: int, r0: int, i: int) -> bool:
            d, e = m - m0, r - r0
            return d <= left_nodes[i] and d * left_jmin[i] <= e <= d * left_jmax[i]

        _Key = tuple[int, int, int]
        state: dict[_Key, int] = {(0, 0, 0): 0}
        history: list[tuple[int, dict, dict[tuple[int, int], int], dict[int, _Option]]] = []
        last_domain: str | None = None
        for i, (ci, c, k, allowed) in enumerate(usable):
            state = {key: v for key, v in state.items() if live(key[0], key[1], i)}
            domain = c.domain
            fresh_domain = domain is None or domain != last_domain
            last_domain = domain
            unit = sorted(
                ((j, (o.health * BASE - int(c.opened)) * FIT_BASE - (c.kind.free - j * self.g))
                 for j, o in allowed.items()), reverse=True
            )
            # inner[(q, rr)]: best value of q nodes of this class holding rr replicas;
            # choice[(q, rr)]: the replica count of the q-th node in that best.
            inner: dict[tuple[int, int], int] = {}
            choice: dict[tuple[int, int], int] = {}
            layer = {(0, 0): 0}
            for q in range(1, min(k, m) + 1):
                nxt: dict[tuple[int, int], int] = {}
                for (_q0, r0), v0 in layer.items():
                    for j, u in unit:
                        if r0 + j > r:
                            continue
                        key = (q, r0 + j)
                        if key not in nxt or v0 + u > nxt[key]:
                            nxt[key] = v0 + u
                            choice[key] = j
                if not nxt:
                    break
                inner.update(nxt)
                layer = nxt
            # first no node of this class (ties keep these), then every combination
            new: dict[_Key, int] = {}
            back: dict[_Key, tuple[_Key, int, int]] = {}
            for key0, v0 in state.items():
                stay = key0 if not fresh_domain else (key0[0], key0[1], 0)
                if stay not in new or v0 > new[stay]:
                    new[stay] = v0
                    back[stay] = (key0, 0, 0)
            for key0, v0 in state.items():
                m0, r0, t0 = key0
                touched = 0 if fresh_domain else t0
                cost = 0
                if domain is not None and not touched:
                    cost = (DOMAIN_COST + OPEN_COST * c.fresh) * FIT_BASE
                flag = 1 if domain is not None else 0
                for (q, rr), v in inner.items():
                    if m0 + q > m or r0 + rr > r or not live(m0 + q, r0 + rr, i + 1):
                        continue
                    key = (m0 + q, r0 + rr, flag)
                    total = v0 + v - cost
                    if key not in new or total > new[key]:
                        new[key] = total
                        back[key] = (key0, q, rr)
            history.append((ci, back, choice, allowed))
            state = new
        ends = [key for key in state if key[0] == m and key[1] == r]
        if not ends:
            return None
        end = max(ends, key=lambda key: (state[key], -key[2]))
        plan: _Plan = []
        at: _Key = end
        for ci, back, choice, allowed in reversed(history):
            at, q, rr = back[at]
            while q:
                j = choice[(q, rr)]
                plan.append((ci, j, allowed[j]))
                q, rr = q - 1, rr - j
        plan.reverse()
        return state[end], plan


def _rev(gpus: tuple[int, ...]) -> tuple[int, ...]:
    # Larger is better in the comparison above, and smaller GPU indices should win.
    return tuple(-i for i in gpus)


# --- output -----------------------------------------------------------------------------
def _placement(gang: GangRequest, best: _Candidate) -> Placement:
    g = gang.gpus_per_replica
    slots = []
    for name in sorted(best.shares):
        gpus = sorted(best.shares[name])
        for start in range(0, len(gpus), g):
            slots.append(ReplicaSlot(len(slots), name, tuple(gpus[start : start + g])))
    touched = [best.nodes[name] for name in sorted(best.shares)]
    span = span_of(touched)
    bus = best.bus if best.bus is not None else _bus(gang, touched, best.shares, span)
    return Placement(
        feasible=True,
        slots=tuple(slots),
        bus_bandwidth_gbps=bus,
        reason=_explain(gang, touched, best, bus, span),
        details={"score": best.score.to_json(), "span": span, "nodes": [n.name for n in touched]},
    )


def _bus(gang: GangRequest, touched: list[NodeState], shares: dict[str, tuple[int, ...]],
         span: str) -> float:
    """The placement's predicted bus bandwidth (unrounded; 0 for one GPU)."""
    if gang.total_gpus == 1:
        return 0.0
    return gang_bus_bandwidth([
        NodeShare(n.topology, tuple(sorted(shares[n.name])), n.network_gbps,
                  n.network_transport, n.network_efficiency, n.transport_share)
        for n in touched
    ], span=span)


@lru_cache(maxsize=1 << 12)
def _links_between(topology: Topology, gpus: tuple[int, ...]) -> str:
    """The legend codes between the GPUs of a one-node share, sorted, for its reason."""
    return ", ".join(sorted({topology.link(a, b) for a, b in combinations(gpus, 2)}))


def _explain(
    gang: GangRequest, touched: list[NodeState], best: _Candidate, bus: float, span: str
) -> str:
    g = gang.gpus_per_replica
    shape = f"{gang.replicas} x {g} GPU{'s' if g > 1 else ''}"
    if gang.total_gpus == 1:
        head = f"{shape} on {touched[0].name}: one GPU does not communicate"
    elif len(touched) == 1:
        node = touched[0]
        links = _links_between(node.topology, tuple(best.shares[node.name]))
        head = (
            f"{shape} on one node {node.name}: predicted bus bandwidth {bus:.1f} GB/s "
            f"(links between its GPUs: {links})"
        )
    elif span == "nvlink-domain":
        head = (f"{shape} over {len(touched)} nodes in one NVLink domain "
                f"({trays(len(touched))}): predicted bus bandwidth {bus:.1f} GB/s (NVLink "
                "across the nodes; its pods need the domain's IMEX channel)")
    else:
        head = (
            f"{shape} over {len(touched)} nodes in one {span}"
            if span != "cluster"
            else f"{shape} over {len(touched)} nodes across zones"
        )
        head += f": predicted bus bandwidth {bus:.1f} GB/s (hierarchical all-reduce)"
        note = domain_note(touched)
        if note is not None:
            head += f"; {note}"
    lost = [f"{-d} x {k}-GPU" for k, d in zip(BLOCK_SIZES, best.score.blocks, strict=True) if d]
    tail = (
        "; keeps every well-connected free block"
        if not lost
        else f"; well-connected free blocks used up: {', '.join(lost)}"
    )
    return head + tail

