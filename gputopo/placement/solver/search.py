"""The multi-node search: the best placement of a gang over several nodes of one scope.

Why a module of its own: this is the exact part of the solver (stages a-c of the package
docstring): per scope, thresholds on the bottleneck terms found by a reachability DP over
classes and replica counts, then a knapsack over classes for the later terms. It is the
slow case (polynomial in the replicas) and the part the oracle tests prove exact.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from functools import lru_cache

from gputopo.placement.objective import ROUND, SPAN_RANK, Score, score_by_name, span_of, tie_break
from gputopo.placement.solver.candidate import _Candidate
from gputopo.placement.solver.grouped_nodes import GroupedNodes
from gputopo.placement.solver.grouping import _free_domains, _Group, _group_nodes, _Tally
from gputopo.placement.solver.one_node import single_node
from gputopo.placement.solver.options import BASE, FIT_BASE, _encode, _Option, _options, _value
from gputopo.placement.solver.scopes import Scope, _Class, _f, cap, scopes
from gputopo.placement.solver.scopes import bound as scope_bound
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.cost import SPAN_FACTOR

#: Stage c's price of one more NVLink domain, in units of (blocks, packing) before the FIT_BASE
#: scaling: above any sum of encoded blocks (one BASE digit per block size) and packing (one
#: more digit), as the objective ranks ``domains`` before them.
DOMAIN_COST = BASE ** 8
#: Stage c's price of opening an NVLink domain with no GPU in use (the objective's
#: ``domains_opened``), in the same units: above (blocks, packing), below one more domain.
OPEN_COST = BASE ** 7


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


_Opts = list[dict[int, tuple[_Option, ...]]]  # per class: replicas on a node -> options
_Plan = list[tuple[int, int, _Option]]  # per chosen node: (class position, replicas, share)


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

    def single_node(self) -> _Candidate | None:
        """Best placement of the whole gang on one node (one_node.py), or None."""
        return single_node(self.groups, self.grouped, self.gang, self.free)

    def _candidate(
        self, shares: dict[str, tuple[int, ...]], nodes: dict[str, NodeState]
    ) -> _Candidate:
        return _Candidate(score_by_name(nodes, self.gang, shares, free=self.free),
                          tie_break(shares), shares, nodes)

    # --- several nodes --------------------------------------------------------------
    def multi_node(self, best: _Candidate | None) -> _Candidate | None:
        """Best placement over several nodes if it beats ``best``; else ``best``."""
        if best is not None and best.score.good:
            return best  # good enough on one node: nothing over several nodes is (term 0)
        if best is not None:
            # Cheapest bound first: the whole cluster at rack speed, no intra-node cost.
            jmax = min(self.per_node, max(self.tally.frees) // self.g)
            net = max(self.tally.nets)
            m_lb = max(2, math.ceil(self.r / jmax))
            if round(_f(self.n, m_lb, -math.inf, net, 1.0), ROUND) < best.score.bus_bandwidth:
                return best
        # Scopes best bound first, the bound of the whole objective (``scopes.bound``): once
        # the best left is below the best placement found, so is every other. A scope's
        # bound is worked out in levels, each tighter and costlier (scopes.bound): the heap
        # holds every scope with its latest; the top one is bounded at the next level and
        # put back, or at the last level planned. So a scope is planned only when its
        # tightest bound is the highest left, and one whose cheap bound is already below
        # the best found is never bounded further. A scope whose bound only equals the
        # best can still win the tie-break by node names, unless its first name comes after
        # the best's first.
        heap: list[tuple[tuple[float | int, ...], int, int, int, Scope]] = []
        counts = self.grouped.rack_counts() if self.grouped is not None else None
        for seq, scope in enumerate(scopes(self.groups, self.g, self.free, self.per_node,
                                           counts)):
            bound = scope_bound(scope, self.gang, 0)
            if bound is not None:
                heapq.heappush(heap, (_negated(bound), SPAN_RANK[scope.span], seq, 0, scope))
        last = 2 if self.prune_by_score else 0
        while heap:
            key, rank, seq, level, scope = heapq.heappop(heap)
            bound = _negated(key)
            if best is not None:
                top = best.score
                if bound[0] < top.bus_bandwidth:
                    break
                if self.prune_by_score:
                    have = (top.bus_bandwidth, top.nodes, top.bottleneck_pair, top.locality,
                            top.domains, top.domains_opened,
                            _value(_encode(top.blocks), -top.packing, -top.fit))
                    if bound < have:
                        break
                    if bound == have and scope.first() > best.tie[0][0]:
                        continue
            if level < last:
                tighter = scope_bound(scope, self.gang, level + 1)
                if tighter is not None:  # both hold; either may be the lower
                    bound = min(bound, tighter)
                    heapq.heappush(heap, (_negated(bound), rank, seq, level + 1, scope))
                continue
            cand = self._scope(scope.span, scope.classes(),
                               None if best is None else best.score.bus_bandwidth)
            if cand is not None and cand.better_than(best):
                best = cand
        return best

    #: Skip scopes by the bound of the whole objective (off: by bandwidth only, the full
    #: search tests/placement/test_scope_pruning.py compares against).
    prune_by_score = True

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
        """Stages a-c of the package docstring for one scope: [(class, replicas, option)].

        None when nothing in the scope reaches the bandwidth ``floor`` (the best found so
        far elsewhere), which stays true as the floor only rises.
        """
        r, g, n = self.r, self.g, self.n
        factor = SPAN_FACTOR[span]
        counts = [min(len(c.nodes), r) for c in classes]
        opts: _Opts = []
        for c in classes:
            jmax = cap(c.kind, c.cap, self.per_node, self.g)
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
        (:func:`scopes._classes`), so a domain costs once, when the first of its classes gets a
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
                ((j, _value(o.health, int(c.opened), c.kind.free - j * self.g))
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


def _negated(bound: tuple[float | int, ...]) -> tuple[float | int, ...]:
    """A bound with every term negated: the heap pops the smallest, the search wants the
    highest bound first."""
    return tuple(-x for x in bound)


def _rev(gpus: tuple[int, ...]) -> tuple[int, ...]:
    # Larger is better in the comparison above, and smaller GPU indices should win.
    return tuple(-i for i in gpus)
