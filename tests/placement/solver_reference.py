"""REFERENCE COPY — do not edit, do not import from production code.

A frozen copy of ``gputopo/placement/solver.py`` as of commit b13cbc6, before the solver
was reworked to index nodes in one pass per solve. Why it is kept: the speed-up must not
change a single answer, and the oracle test only pins the *score* (ties by name and GPU are
the solver's own convention), so tests/placement/test_solver_reference.py solves random
clusters with both and asserts equal placements. Delete it together with that test once a
change of answers is intended.

ADAPTED ONCE (issue 11, the channel cost model): the cost model's interface to the search
changed — the multi-node bus bandwidth is min(worst share, effective network) instead of
the additive hierarchical formula, the objective gained "fewest nodes" after bandwidth,
and nodes are grouped by their effective network (line rate x transport). Those four
places were changed here exactly as in the solver (marked "issue 11"), nothing else, so
this copy still pins the one-pass rework's search against the search it replaced.

ADAPTED TWICE (issue 22, best-fit ties): the objective gained ``fit`` after packing (minus
the GPUs left free on the touched nodes). The two places the search ranks by packing were
changed here exactly as in the solver (marked "issue 22"): the one-node key and the
knapsack's unit value. Later (issue 22, the Alibaba trace's stranding) ``solo_fit`` came
before blocks (a one-GPU gang's node by best-fit): the one-node key only, marked "again".

The original module docstring follows.

The gang placement solver: the best placement of a gang by the objective in ``objective.py``.

Why it is built this way: the objective (see :mod:`gputopo.placement.objective`) is
lexicographic, and its first two terms are bottlenecks (a max of per-node costs, a min of
per-node pair speeds), so an exact search can enumerate *thresholds* instead of
assignments. Nodes with the same topology, used GPUs and network are interchangeable, so the
search runs over node *classes* and over how many replicas go to each class, never over
individual nodes; per (topology, free GPUs, k) the Pareto-best k-GPU subsets are cached.

The search, for ``R`` replicas of ``G`` GPUs (``n = R*G``):

1. One node. For every class with ``n`` free GPUs, its best ``n``-subset by (ring bus
   bandwidth, slowest pair, blocks kept); the best class wins.
2. Several nodes, inside each *scope*: every rack, every zone, the whole cluster (a scope's
   span is an upper bound of the placement's real span; a placement that is narrower is also
   found in the narrower scope, where it is rated exactly). The cost model's gang bandwidth
   for ``m`` nodes is ``f(m, I, N) = 2(n-1)/n / (I + 2(m-1)/(m N))`` where ``I`` is the worst
   share's intra-node cost and ``N`` the slowest network: decreasing in ``I`` and ``m``,
   increasing in ``N``. So:

   a. for every node count m and network threshold N, the smallest intra-cost threshold I
      such that exactly ``m`` nodes with network >= N can hold the ``R`` replicas with every
      share's cost <= I (a reachability DP over classes and replica counts; feasibility
      only grows with I, so binary search). The best ``f(m, I, N)`` is the best bandwidth;
      every feasible triple with the same rounded value ties;
   b. among those, the highest slowest-pair threshold that stays feasible;
   c. among those, a DP over classes that maximises the blocks kept and then packing.

   Scopes are visited best upper bound first and skipped once they cannot win; scopes with
   the same multiset of classes share one search.
3. The best candidate by the objective (rated with :func:`objective.score` itself), ties by
   node names and GPU indices.

Exactness is proved against brute force on small clusters
(tests/placement/test_solver_oracle.py).
Known cost: the DPs are polynomial in ``R`` (replicas); gangs of dozens of one-GPU replicas
spread over many nodes are the slow case (docs/benchmarks.md, "Solver latency").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from gputopo.errors import InputError
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
from gputopo.placement.types import GangRequest, NodeState, Placement, ReplicaSlot
from gputopo.topology.bandwidth import is_all_to_all
from gputopo.topology.cost import SPAN_FACTOR, NodeShare, gang_bus_bandwidth, ring_bus_bandwidth
from gputopo.topology.model import Topology

#: Base of the integer encoding of the blocks vector (order-preserving while every summed
#: component stays within +-BASE/2; 64 touched nodes x 32 blocks is far below).
BASE = 1 << 20


@dataclass(frozen=True)
class _Option:
    """One candidate share on a node: its GPUs and what they are worth."""

    gpus: tuple[int, ...]
    bw: float  # ring bus bandwidth, GB/s
    intra: float  # the cost model's per-byte intra-node cost 2(k-1)/(k*bw); 0 for one GPU
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
    same for a set and its swapped twin. Groups keep ascending driver indices.
    """
    groups: list[list[int]] = []
    for g in gpus:
        for group in groups:
            h = group[0]
            if all(
                min(topology.bandwidth(g, x), topology.bandwidth(x, g))
                == min(topology.bandwidth(h, x), topology.bandwidth(x, h))
                for x in topology.indices
                if x != g and x != h
            ):
                group.append(g)
                break
        else:
            groups.append([g])
    return groups


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
    subsets = [free[:k]] if is_all_to_all(topology) and topology.measured is None else None
    raw = []
    for combo in subsets or distinct_subsets(topology, free, k):
        bw = ring_bus_bandwidth(topology, combo)
        intra = -bw if k > 1 else -math.inf  # issue 11
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


@dataclass
class _Class:
    """Interchangeable nodes: same topology, same used GPUs, same network."""

    topology: Topology
    free_mask: int
    network_gbps: float
    opened: bool  # no GPU in use yet
    names: list[str]
    canon: tuple[str, tuple[int, ...], float]


@dataclass(frozen=True)
class _Candidate:
    score: Score
    tie: tuple[tuple[str, tuple[int, ...]], ...]
    shares: dict[str, tuple[int, ...]]

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
    reason = _infeasible_reason(nodes, gang, solver.free_count)
    if reason:
        return Placement(feasible=False, reason=reason)
    best = solver.single_node()
    if gang.replicas > 1:
        best = solver.multi_node(best)
    assert best is not None  # _infeasible_reason guarantees one fits
    return _placement(nodes, gang, best)


def _check_input(nodes: Sequence[NodeState], gang: GangRequest) -> None:
    if isinstance(gang.replicas, bool) or not isinstance(gang.replicas, int) or gang.replicas < 1:
        raise InputError(f"replicas must be a positive integer, not {gang.replicas!r}")
    g = gang.gpus_per_replica
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise InputError(f"GPUs per replica must be a positive integer, not {g!r}")
    cap = gang.max_replicas_per_node
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InputError(f"replicas per node must be a positive integer, not {cap!r}")
    seen: set[str] = set()
    for n in nodes:
        if n.name in seen:
            raise InputError(f"node {n.name!r} appears twice")
        seen.add(n.name)


def _infeasible_reason(
    nodes: Sequence[NodeState], gang: GangRequest, free_count: dict[str, int]
) -> str:
    g, r, total = gang.gpus_per_replica, gang.replicas, gang.total_gpus
    shape = f"{r} x {g} GPU{'s' if g > 1 else ''}"
    if not nodes:
        # the cluster view leaves activated nodes with unusable topology data out, too
        return (
            "no node is activated for topology placement with usable topology data "
            "(label ack.node.gpu.schedule=topology, annotation gputopo.io/topology or an ACK "
            f"report), so {shape} cannot be placed"
        )
    cluster_gpus = sum(len(n.topology.gpus) for n in nodes)
    if total > cluster_gpus:
        return (
            f"the gang needs {total} GPUs ({shape}) but the whole cluster has only "
            f"{cluster_gpus} on {len(nodes)} node{'s' if len(nodes) > 1 else ''}"
        )
    largest = max(len(n.topology.gpus) for n in nodes)
    if g > largest:
        return f"each replica needs {g} GPUs on one node but the largest node has {largest}"
    most = min(nodes, key=lambda n: (-free_count[n.name], n.name))
    if free_count[most.name] < g:
        if not any(free_count.values()):
            return f"cluster full: all {cluster_gpus} GPUs are in use"
        return (
            f"no node has {g} free GPUs for one replica right now "
            f"(most free: {free_count[most.name]} on {most.name})"
        )
    per_node = gang.per_node
    fits = sum(min(c // g, per_node) for c in free_count.values())
    if fits < r:
        free = sum(free_count.values())
        capped = f", at most {per_node} per node" if per_node < r else ""
        if free == cluster_gpus:  # nothing is in use: the nodes are too few or too small
            return (
                f"only {fits} of {r} replicas of {g} GPUs fit even with every GPU free "
                f"({cluster_gpus} GPUs on {len(nodes)} node{'s' if len(nodes) > 1 else ''}, "
                f"each replica on one node{capped})"
            )
        return (
            f"cluster full: only {fits} of {r} replicas of {g} GPUs fit in the free GPUs "
            f"({free} free of {cluster_gpus}{capped})"
        )
    return ""


# --- the search -------------------------------------------------------------------------
def _f(n: int, m: int, intra: float, net_gbps: float, factor: float) -> float:
    """issue 11: cost.multi_node_bus_bandwidth, as in the solver."""
    return min(-intra, net_gbps / 8.0 * factor)


def _sumset(x: int, y: int, full: int) -> int:
    """{a + b : a in x, b in y} over bitmasks, cut to ``full``."""
    low = (y & -y).bit_length() - 1
    run = y >> low
    if run & (run + 1) == 0:  # y is one run of ones: smear x by doubling
        width = run.bit_length()
        out, done = x, 1
        while done < width:
            step = min(done, width - done)
            out |= out << step
            done += step
        return (out << low) & full
    out = 0
    while y:
        low = y & -y
        out |= x << (low.bit_length() - 1)
        y ^= low
    return out & full


_Opts = list[dict[int, tuple[_Option, ...]]]  # per class: replicas on a node -> options
_Plan = list[tuple[int, int, _Option]]  # per chosen node: (class position, replicas, share)


class _Search:
    """One solve: the nodes indexed once, then the one-node and multi-node searches."""

    def __init__(self, nodes: Sequence[NodeState], gang: GangRequest) -> None:
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in nodes}
        # Free-GPU bitmask per node, computed once per distinct (topology, used set).
        positions: dict[Topology, tuple[dict[int, int], int]] = {}
        masks: dict[tuple[Topology, frozenset[int]], int] = {}
        self.free_mask: dict[str, int] = {}
        for n in nodes:
            key = (n.topology, n.used)
            mask = masks.get(key)
            if mask is None:
                if n.topology not in positions:
                    idx = n.topology.indices
                    positions[n.topology] = ({g: p for p, g in enumerate(idx)}, (1 << len(idx)) - 1)
                pos, full = positions[n.topology]
                mask = full & ~sum(1 << pos[u] for u in n.used if u in pos)
                masks[key] = mask
            self.free_mask[n.name] = mask
        self.free_count = {name: m.bit_count() for name, m in self.free_mask.items()}
        self.gang = gang
        self.g = gang.gpus_per_replica
        self.r = gang.replicas
        self.per_node = gang.per_node
        self.n = gang.total_gpus
        self._json: dict[int, str] = {}
        self._memo: dict[tuple, _Plan | None] = {}

    def _canon(self, topology: Topology) -> str:
        key = id(topology)
        if key not in self._json:
            self._json[key] = topology.to_json()
        return self._json[key]

    def _classes(self, members: Iterable[NodeState], *, by_network: bool) -> list[_Class]:
        groups: dict[tuple, _Class] = {}
        for node in members:
            if self.free_count[node.name] < self.g:
                continue
            net = node.effective_gbps if by_network else 0.0  # issue 11
            key = (node.topology, node.used, net)
            cls = groups.get(key)
            if cls is None:
                canon = (self._canon(node.topology), tuple(sorted(node.used)), net)
                cls = _Class(
                    topology=node.topology,
                    free_mask=self.free_mask[node.name],
                    network_gbps=node.effective_gbps,  # issue 11
                    opened=not node.used,
                    names=[],
                    canon=canon,
                )
                groups[key] = cls
            cls.names.append(node.name)
        out = sorted(groups.values(), key=lambda c: c.canon)
        for c in out:
            c.names.sort()
        return out

    def _candidate(self, shares: dict[str, tuple[int, ...]]) -> _Candidate:
        return _Candidate(score_by_name(self.by_name, self.gang, shares), tie_break(shares), shares)

    # --- one node -------------------------------------------------------------------
    def single_node(self) -> _Candidate | None:
        """Best placement of the whole gang on one node, or None if no node has room."""
        if self.per_node < self.r:
            return None  # the gang may not share one node
        best: tuple[tuple, tuple, str, _Option] | None = None
        for cls in self._classes(self.nodes, by_network=False):
            if cls.free_mask.bit_count() < self.n:
                continue
            opt = _options(cls.topology, cls.free_mask, self.n)[0]
            k1 = 0.0 if self.n == 1 else round(opt.bw, ROUND)
            fit = self.n - cls.free_mask.bit_count()  # issue 22: fit
            key = (k1, opt.pair, fit if self.n == 1 else 0,  # issue 22, again: solo_fit
                   opt.health, -int(cls.opened), fit)
            tie = (cls.names[0], opt.gpus)
            if best is None or key > best[0] or (key == best[0] and tie < best[1]):
                best = (key, tie, cls.names[0], opt)
        if best is None:
            return None
        return self._candidate({best[2]: best[3].gpus})

    # --- several nodes --------------------------------------------------------------
    def multi_node(self, best: _Candidate | None) -> _Candidate | None:
        """Best placement over several nodes if it beats ``best``; else ``best``."""
        if best is not None:
            # Cheapest bound first: the whole cluster at rack speed, no intra-node cost.
            jmax = max(min(self.per_node, c // self.g) for c in self.free_count.values())
            net = max(n.effective_gbps for n in self.nodes)  # issue 11
            m_lb = max(2, math.ceil(self.r / jmax))
            if round(_f(self.n, m_lb, -math.inf, net, 1.0), ROUND) < best.score.bus_bandwidth:
                return best
        scopes: list[tuple[str, list[NodeState]]] = []
        racks: dict[tuple[str | None, str], list[NodeState]] = {}
        zones: dict[str, list[NodeState]] = {}
        for node in self.nodes:
            if node.rack is not None:
                racks.setdefault((node.zone, node.rack), []).append(node)
            if node.zone is not None:
                zones.setdefault(node.zone, []).append(node)
        rack_sets = set()
        for key in sorted(racks, key=lambda k: (k[0] or "", k[1])):
            members = racks[key]
            if len(members) >= 2:
                scopes.append(("rack", members))
                rack_sets.add(frozenset(n.name for n in members))
        for zone in sorted(zones):
            members = zones[zone]
            if len(members) >= 2 and frozenset(n.name for n in members) not in rack_sets:
                scopes.append(("zone", members))
        everyone = frozenset(n.name for n in self.nodes)
        narrower = rack_sets | {frozenset(n.name for n in z) for z in zones.values()}
        if len(self.nodes) >= 2 and everyone not in narrower:
            scopes.append(("cluster", self.nodes))

        rated = []
        for span, members in scopes:
            classes = self._classes(members, by_network=True)
            ub = self._upper_bound(classes, span)
            if ub is not None:
                rated.append((-ub, SPAN_RANK[span], span, classes))
        rated.sort(key=lambda t: (t[0], t[1]))
        for neg_ub, _, span, classes in rated:
            if best is not None and -neg_ub < best.score.bus_bandwidth:
                break
            cand = self._scope(span, classes, None if best is None else best.score.bus_bandwidth)
            if cand is not None and cand.better_than(best):
                best = cand
        return best

    def _upper_bound(self, classes: list[_Class], span: str) -> float | None:
        cap = [min(self.per_node, c.free_mask.bit_count() // self.g) for c in classes]
        if sum(min(len(c.names), self.r) * j for c, j in zip(classes, cap, strict=True)) < self.r:
            return None
        jmax = max(cap)
        m_lb = max(2, math.ceil(self.r / jmax))
        net = max(c.network_gbps for c in classes)
        return round(_f(self.n, m_lb, -math.inf, net, SPAN_FACTOR[span]), ROUND)

    def _scope(self, span: str, classes: list[_Class], floor: float | None) -> _Candidate | None:
        sig = (span, tuple((c.canon, min(len(c.names), self.r)) for c in classes))
        if sig not in self._memo:
            self._memo[sig] = self._plan(span, classes, floor)
        plan = self._memo[sig]
        if plan is None:
            return None
        shares: dict[str, tuple[int, ...]] = {}
        used_in_class: dict[int, int] = {}
        for ci, _j, opt in plan:
            pos = used_in_class.get(ci, 0)
            used_in_class[ci] = pos + 1
            shares[classes[ci].names[pos]] = opt.gpus
        return self._candidate(shares)

    def _plan(self, span: str, classes: list[_Class], floor: float | None) -> _Plan | None:
        """Stages a-c of the module docstring for one scope: [(class, replicas, option)].

        None when nothing in the scope reaches the bandwidth ``floor`` (the best found so
        far elsewhere), which stays true as the floor only rises.
        """
        r, g, n = self.r, self.g, self.n
        factor = SPAN_FACTOR[span]
        counts = [min(len(c.names), r) for c in classes]
        opts: _Opts = []
        for c in classes:
            jmax = min(self.per_node, c.free_mask.bit_count() // g)
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
        # issue 11: the objective's next term, fewest nodes among the best bandwidth
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
        # c. blocks kept, then packing
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
            mask = sum(1 << j for j in self._allowed(per, t_i, t_p))
            if mask:
                groups[mask] = groups.get(mask, 0) + k
        reach = [0] * (r + 1)
        reach[0] = 1
        for mask, k in sorted(groups.items()):
            new = reach[:]
            s = 1
            for q in range(1, min(k, r) + 1):
                s = _sumset(s, mask, full)
                if not s:
                    break
                for m0 in range(r - q, -1, -1):
                    if reach[m0]:
                        new[m0 + q] |= _sumset(reach[m0], s, full)
            reach = new
        return sum(1 << m for m in range(r + 1) if reach[m] >> r & 1)

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
        """Max (blocks kept, packing) over plans with exactly m nodes and all R replicas.

        A knapsack over classes: state (nodes used, replicas placed) -> best value, with
        back-pointers (copying partial plans made large one-GPU gangs quadratic).
        """
        r = self.r
        state: dict[tuple[int, int], int] = {(0, 0): 0}
        history: list[tuple[int, dict, dict[tuple[int, int], int], dict[int, _Option]]] = []
        for ci, (c, k, per) in enumerate(zip(classes, counts, opts, strict=True)):
            if c.network_gbps < t_n:
                continue
            allowed = self._allowed(per, t_i, t_p)
            if not allowed:
                continue
            unit = sorted(  # issue 22: fit (GPUs left free) after packing
                ((j, (o.health * BASE - int(c.opened)) * (1 << 32)
                  - (c.free_mask.bit_count() - j * self.g)) for j, o in allowed.items()),
                reverse=True
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
            new = dict(state)
            back: dict[tuple[int, int], tuple[tuple[int, int], int, int]] = {}
            for (m0, r0), v0 in state.items():
                for (q, rr), v in inner.items():
                    if m0 + q > m or r0 + rr > r:
                        continue
                    key = (m0 + q, r0 + rr)
                    if key not in new or v0 + v > new[key]:
                        new[key] = v0 + v
                        back[key] = ((m0, r0), q, rr)
            history.append((ci, back, choice, allowed))
            state = new
        if (m, r) not in state:
            return None
        plan: _Plan = []
        key = (m, r)
        for ci, back, choice, allowed in reversed(history):
            if key not in back:
                continue
            key, q, rr = back[key]
            while q:
                j = choice[(q, rr)]
                plan.append((ci, j, allowed[j]))
                q, rr = q - 1, rr - j
        plan.reverse()
        return state[(m, r)], plan


def _rev(gpus: tuple[int, ...]) -> tuple[int, ...]:
    # Larger is better in the comparison above, and smaller GPU indices should win.
    return tuple(-i for i in gpus)


# --- output -----------------------------------------------------------------------------
def _placement(nodes: Sequence[NodeState], gang: GangRequest, best: _Candidate) -> Placement:
    by_name = {n.name: n for n in nodes}
    g = gang.gpus_per_replica
    slots = []
    for name in sorted(best.shares):
        gpus = sorted(best.shares[name])
        for start in range(0, len(gpus), g):
            slots.append(ReplicaSlot(len(slots), name, tuple(gpus[start : start + g])))
    touched = [by_name[name] for name in sorted(best.shares)]
    span = span_of(touched)
    if gang.total_gpus == 1:
        bus = 0.0
    else:
        shares = [
            NodeShare(  # issue 11
                n.topology, tuple(sorted(best.shares[n.name])), n.network_gbps, n.network_transport
            )
            for n in touched
        ]
        bus = gang_bus_bandwidth(shares, span=span)
    return Placement(
        feasible=True,
        slots=tuple(slots),
        bus_bandwidth_gbps=bus,
        reason=_explain(gang, touched, best, bus, span),
        details={"score": best.score.to_json(), "span": span, "nodes": [n.name for n in touched]},
    )


def _explain(
    gang: GangRequest, touched: list[NodeState], best: _Candidate, bus: float, span: str
) -> str:
    g = gang.gpus_per_replica
    shape = f"{gang.replicas} x {g} GPU{'s' if g > 1 else ''}"
    if gang.total_gpus == 1:
        head = f"{shape} on {touched[0].name}: one GPU does not communicate"
    elif len(touched) == 1:
        node = touched[0]
        gpus = best.shares[node.name]
        links = sorted({node.topology.link(a, b) for a, b in combinations(gpus, 2)})
        head = (
            f"{shape} on one node {node.name}: predicted bus bandwidth {bus:.1f} GB/s "
            f"(links between its GPUs: {', '.join(links)})"
        )
    else:
        head = (
            f"{shape} over {len(touched)} nodes in one {span}"
            if span != "cluster"
            else f"{shape} over {len(touched)} nodes across zones"
        )
        head += f": predicted bus bandwidth {bus:.1f} GB/s (hierarchical all-reduce)"
    lost = [f"{-d} x {k}-GPU" for k, d in zip(BLOCK_SIZES, best.score.blocks, strict=True) if d]
    tail = (
        "; keeps every well-connected free block"
        if not lost
        else f"; well-connected free blocks used up: {', '.join(lost)}"
    )
    return head + tail

