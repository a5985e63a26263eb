"""Communication cost model: how fast a set of GPUs can all-reduce, and what a step costs.

Why: placement quality has to be a number the solver can maximise and a user can read. The
number is the predicted all-reduce *bus bandwidth* in GB/s, NCCL's definition
(``busbw = algbw * 2(n-1)/n``, nccl-tests PERFORMANCE.md), because it does not depend on
the message size or the GPU count and equals the bottleneck link speed of a ring.

Assumptions (also in docs/topology.md):

1. Within a node, the collective is a ring over the GPUs. Its bus bandwidth is the slowest
   link of the best ring order (a bottleneck Hamiltonian cycle). Link speeds are per
   direction from :mod:`gputopo.topology.bandwidth` or measured values. NCCL also runs
   several rings at once over spare links; the model ignores that, so it under-rates rich
   meshes a little, but it ranks GPU sets the way NCCL's own topology search does.
2. NVSwitch nodes (every pair NV6/NV12/NV18) are all-to-all: any subset of k GPUs is as good
   as any other. The bottleneck rule gives that for free; a fast path skips the search.
3. One GPU needs no communication. So that the solver still has a total order, its "bus
   bandwidth" is defined as the best link of its node (the largest off-diagonal entry; for a
   one-GPU node, the PIX figure of its generation). It never enters a multi-node formula.
4. Across nodes the all-reduce is hierarchical: reduce-scatter inside each node (ring), an
   all-reduce of each shard between nodes over each node's network, then an all-gather
   inside each node. For ``S`` bytes, ``m`` nodes and ``k_i`` GPUs on node ``i``::

       t / S = max_i 2(k_i-1)/(k_i B_i)  +  2(m-1)/(m N)

   with ``B_i`` the node's ring bus bandwidth and ``N`` the slowest node network in GB/s
   (Gbit/s / 8) times the span factor. The gang's bus bandwidth is ``2(n-1)/n / (t/S)``
   with ``n = sum k_i``. One node reduces to ``B``; one GPU per node reduces to ``N``.
5. Span factors for the network (:data:`SPAN_FACTOR`): same rack 1.0 (a non-blocking
   top-of-rack switch), same zone 0.5 (2:1 oversubscribed spine), cluster-wide 0.25
   (cross-zone links). They are assumptions, chosen conservative, not measurements.
6. Time: ``allreduce_time_s = S * 2(n-1)/n / busbw``; no latency term (gradients are large
   messages; for small messages the model is optimistic).
7. Step time: ``compute + comm - hidden``, where ``hidden = min(overlap * comm, compute)``:
   a fraction ``overlap`` of the all-reduce runs under the backward pass (gradient
   bucketing in Horovod/DDP), but never more than the compute time itself.

Everything here is pure and fast: the solver calls :func:`ring_bus_bandwidth` in hot loops,
so results are cached on ``(topology, frozenset(gpus))`` (Topology hashes once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations, permutations
from typing import Any

from gputopo.errors import TopologyError
from gputopo.topology.bandwidth import infer_generation, is_all_to_all, link_bandwidth
from gputopo.topology.model import Topology

#: Network bandwidth multiplier by the widest locality a gang spans (assumption 5).
SPAN_FACTOR: dict[str, float] = {"node": 1.0, "rack": 1.0, "zone": 0.5, "cluster": 0.25}
SPANS: tuple[str, ...] = tuple(SPAN_FACTOR)
#: Largest non-uniform GPU set solved exactly (bitmask DP, 2^(k-1) states); larger sets
#: fall back to a greedy ring, which is a lower bound.
MAX_EXACT_RING = 16


# --- intra-node ring --------------------------------------------------------------------
@dataclass(frozen=True)
class _Ring:
    bus_gbps: float
    order: tuple[int, ...]  # driver indices in ring order
    bottleneck: tuple[int, int] | None  # driver indices of the slowest edge


def ring_bus_bandwidth(topology: Topology, gpus: Sequence[int]) -> float:
    """Predicted all-reduce bus bandwidth (GB/s) of a ring over ``gpus`` of one node.

    ``gpus`` are driver indices; order does not matter (the best ring order is searched).
    Unknown or repeated indices raise :class:`TopologyError`.
    """
    return _ring(topology, _key(topology, gpus)).bus_gbps


def _key(topology: Topology, gpus: Iterable[int]) -> frozenset[int]:
    gpus = list(gpus)
    key = frozenset(gpus)
    if not key:
        raise TopologyError("no GPUs given")
    if len(key) != len(gpus):
        raise TopologyError(f"GPU indices repeat in {sorted(gpus)}")
    if not key <= set(topology.indices):
        missing = sorted(key - set(topology.indices))
        raise TopologyError(
            f"GPU {', '.join(map(str, missing))} not on this node "
            f"(it has {', '.join(map(str, topology.indices))})"
        )
    return key


@lru_cache(maxsize=1024)
def symmetric_weights(
    topology: Topology,
) -> tuple[dict[int, int], tuple[tuple[float, ...], ...]]:
    """(position of each driver index, per-position matrix of min(bw(a,b), bw(b,a))).

    Why: hot loops over thousands of GPU sets read this plain matrix instead of calling
    Topology.bandwidth per pair (a third of the solver's cold time on 16-GPU nodes).
    """
    m = topology.bandwidth_matrix
    n = len(m)
    pos = {g: p for p, g in enumerate(topology.indices)}
    return pos, tuple(tuple(min(m[a][b], m[b][a]) for b in range(n)) for a in range(n))


def _weight(topology: Topology, i: int, j: int) -> float:
    # A ring uses each edge in one direction; with asymmetric measurements take the worse.
    return min(topology.bandwidth(i, j), topology.bandwidth(j, i))


def single_gpu_bandwidth(topology: Topology) -> float:
    """Assumption 3: the "bus bandwidth" of one GPU is the best link of its node."""
    best = max((x for row in topology.bandwidth_matrix for x in row), default=0.0)
    if best > 0:
        return best
    return link_bandwidth("PIX", infer_generation(topology))


@lru_cache(maxsize=1 << 16)
def _ring(topology: Topology, key: frozenset[int]) -> _Ring:
    nodes = sorted(key)
    k = len(nodes)
    if k == 1:
        return _Ring(single_gpu_bandwidth(topology), tuple(nodes), None)
    pos, sym = symmetric_weights(topology)
    ps = [pos[g] for g in nodes]
    w = [[sym[a][b] if a != b else 0.0 for b in ps] for a in ps]
    if k == 2:
        return _Ring(w[0][1], tuple(nodes), (nodes[0], nodes[1]))
    if _uniform(w):
        order = list(range(k))
    elif _split_above_slowest_pair(w):
        # Every ring reaches the set's slowest pair, and none can stay above it: any order is
        # optimal; greedy keeps close GPUs adjacent.
        order = _greedy_order(w)
    else:
        order = _best_order(w)
    bus, edge = math.inf, (0, 1)
    for p in range(k):
        a, b = order[p], order[(p + 1) % k]
        if w[a][b] < bus:
            bus, edge = w[a][b], (a, b)
    return _Ring(bus, tuple(nodes[p] for p in order), (nodes[edge[0]], nodes[edge[1]]))


@lru_cache(maxsize=1024)
def is_ultrametric(topology: Topology) -> bool:
    """True when the node's links form a strict hierarchy: w(i,k) >= min(w(i,j), w(j,k)).

    Why it matters: PCIe trees (PIX < PXB < PHB/NODE < SYS), NVLink-bridged pairs and
    NVSwitch nodes all have this shape. Then "linked at >= t" is an equivalence relation
    for every t, so above a set's slowest pair its GPUs split into classes no ring edge can
    join, and at that pair every edge qualifies: the best ring's bottleneck IS the slowest
    pair. That replaces an exponential Hamiltonian-cycle search with O(k^2) — the
    difference between seconds and microseconds on 16-GPU PCIe nodes. The DGX-1 hybrid
    cube-mesh is not ultrametric and keeps the exact search.
    """
    idx = topology.indices
    w = [[_weight(topology, a, b) if a != b else math.inf for b in idx] for a in idx]
    n = len(idx)
    for j in range(n):
        wj = w[j]
        for i in range(n):
            wij = wj[i]
            wi = w[i]
            for k in range(n):
                if wi[k] < min(wij, wj[k]):
                    return False
    return True


def _split_above_slowest_pair(w: list[list[float]]) -> bool:
    """True when the links faster than the set's slowest pair leave the set disconnected.

    Then no ring can stay above the slowest pair (it must cross the gap twice), and every
    ring reaches it (all pairs are at least that fast): the best ring's bottleneck is the
    slowest pair, with no search. Always true on hierarchical nodes (is_ultrametric), and
    for sets that straddle a socket or board boundary on any node — which is most large
    sets of a 16-GPU node, whose exact search costs milliseconds each.
    """
    k = len(w)
    slowest = min(w[a][b] for a in range(k) for b in range(a + 1, k))
    seen, stack = 1, [0]
    while stack:
        a = stack.pop()
        for b in range(k):
            if not seen >> b & 1 and w[a][b] > slowest:
                seen |= 1 << b
                stack.append(b)
    return seen != (1 << k) - 1


def _uniform(w: list[list[float]]) -> bool:
    first = w[0][1]
    return all(w[a][b] == first for a in range(len(w)) for b in range(len(w)) if a != b)


def _best_order(w: list[list[float]]) -> list[int]:
    """Ring order (positions) maximising the slowest edge: a bottleneck Hamiltonian cycle.

    A ring uses two edges at every GPU, so no ring beats the smallest "second-best edge"
    of any GPU; thresholds above it are skipped. Below that, binary search over the distinct
    edge weights with an exact Hamiltonian-cycle test (the complete graph at the smallest
    weight always has one).
    """
    k = len(w)
    if k > MAX_EXACT_RING:
        return _greedy_order(w)
    bound = min(sorted(row[:v] + row[v + 1 :])[-2] for v, row in enumerate(w))
    levels = sorted({x for a in range(k) for b in range(a + 1, k) if (x := w[a][b]) <= bound})
    lo, hi = 0, len(levels) - 1
    best = _cycle(w, levels[0])
    assert best is not None  # every pair qualifies at the smallest level
    while lo < hi:  # invariant: levels[lo] feasible; find the largest feasible level
        mid = (lo + hi + 1) // 2
        found = _cycle(w, levels[mid])
        if found is None:
            hi = mid - 1
        else:
            lo, best = mid, found
    return best


def _cycle(w: list[list[float]], threshold: float) -> list[int] | None:
    """A Hamiltonian cycle using only edges >= threshold, lexicographically smallest-ish."""
    k = len(w)
    adj = [sum(1 << b for b in range(k) if b != a and w[a][b] >= threshold) for a in range(k)]
    full = (1 << k) - 1
    # reach[mask]: bitmask of end vertices v such that a path 0 -> v visits exactly mask.
    reach = [0] * (1 << k)
    reach[1] = 1
    for mask in range(1, full + 1, 2):  # masks containing vertex 0
        ends = reach[mask]
        while ends:
            v = (ends & -ends).bit_length() - 1
            ends &= ends - 1
            nxt = adj[v] & ~mask
            while nxt:
                u = (nxt & -nxt).bit_length() - 1
                nxt &= nxt - 1
                reach[mask | (1 << u)] |= 1 << u
    closing = reach[full] & adj[0]
    if not closing:
        return None
    # Walk back from the lowest-numbered end vertex that closes the cycle.
    v = (closing & -closing).bit_length() - 1
    path, mask = [v], full
    while mask != 1:
        prev_mask = mask & ~(1 << v)
        cands = reach[prev_mask] & adj[v] if prev_mask != 1 else 1
        u = (cands & -cands).bit_length() - 1
        path.append(u)
        mask, v = prev_mask, u
    path.reverse()
    return path


def _greedy_order(w: list[list[float]]) -> list[int]:
    order, left = [0], set(range(1, len(w)))
    while left:
        last = order[-1]
        nxt = max(sorted(left), key=lambda u: w[last][u])
        order.append(nxt)
        left.remove(nxt)
    return order


def best_ring_subset(
    topology: Topology, size: int, among: Iterable[int] | None = None
) -> tuple[tuple[int, ...], float]:
    """The ``size`` GPUs (of ``among``, default all) with the highest ring bus bandwidth.

    Exhaustive over combinations, ties to the lexicographically smallest set: meant for
    ``topology explain`` ("what a better set would give"), not for the solver's hot loop.
    """
    pool = sorted(among if among is not None else topology.indices)
    if not 1 <= size <= len(pool):
        raise TopologyError(f"cannot choose {size} GPUs out of {len(pool)}")
    if is_all_to_all(topology) and topology.measured is None:
        chosen = tuple(pool[:size])
        return chosen, ring_bus_bandwidth(topology, chosen)
    best: tuple[tuple[int, ...], float] | None = None
    for combo in combinations(pool, size):
        bw = ring_bus_bandwidth(topology, combo)
        if best is None or bw > best[1]:
            best = (combo, bw)
    assert best is not None
    return best


# --- across nodes -----------------------------------------------------------------------
@dataclass(frozen=True)
class NodeShare:
    """The GPUs a gang gets on one node, with that node's network in Gbit/s.

    A gang has at most one share per node: two replicas on one node are one share.
    """

    topology: Topology
    gpus: tuple[int, ...]
    network_gbps: float


def gang_bus_bandwidth(shares: Sequence[NodeShare], *, span: str) -> float:
    """Predicted all-reduce bus bandwidth (GB/s) of a gang spread over ``shares``.

    ``span`` is the widest locality the gang crosses: "node" (exactly one share), "rack",
    "zone" or "cluster". Hierarchical all-reduce, assumptions 4 and 5 of the module docstring.
    """
    if span not in SPAN_FACTOR:
        raise ValueError(f"span must be one of {', '.join(SPANS)}, not {span!r}")
    if not shares:
        raise ValueError("a gang needs at least one node share")
    if len(shares) == 1:
        return ring_bus_bandwidth(shares[0].topology, shares[0].gpus)
    if span == "node":
        raise ValueError(f"span 'node' with {len(shares)} node shares")
    n = sum(len(s.gpus) for s in shares)
    m = len(shares)
    intra = 0.0
    for s in shares:
        k = len(s.gpus)
        if k > 1:
            intra = max(intra, 2 * (k - 1) / (k * ring_bus_bandwidth(s.topology, s.gpus)))
        else:
            _key(s.topology, s.gpus)  # still validate the index
    slowest = min(s.network_gbps for s in shares)
    if slowest <= 0:
        raise ValueError("network_gbps must be positive")
    net_gbytes = slowest / 8.0 * SPAN_FACTOR[span]
    per_byte = intra + 2 * (m - 1) / (m * net_gbytes)
    return 2 * (n - 1) / n / per_byte


# --- time -------------------------------------------------------------------------------
def allreduce_time_s(bus_bw_gbps: float, nbytes: float, n_gpus: int) -> float:
    """Seconds to all-reduce ``nbytes`` over ``n_gpus`` at bus bandwidth ``bus_bw_gbps``.

    ``S * 2(n-1)/n / busbw`` (assumption 6); 0 for one GPU or no data.
    """
    if n_gpus < 1 or nbytes < 0:
        raise ValueError("n_gpus must be >= 1 and nbytes >= 0")
    if n_gpus == 1 or nbytes == 0:
        return 0.0
    if bus_bw_gbps <= 0:
        raise ValueError("bus bandwidth must be positive")
    return nbytes * 2 * (n_gpus - 1) / n_gpus / (bus_bw_gbps * 1e9)


def step_time_s(
    *,
    params: float,
    bytes_per_param: int,
    compute_s: float,
    bus_bw_gbps: float,
    n_gpus: int,
    overlap: float,
) -> float:
    """Predicted data-parallel training step: compute plus the gradient all-reduce not hidden.

    ``compute_s`` is forward+backward of one GPU's batch; gradients are ``params *
    bytes_per_param`` bytes; ``overlap`` in [0, 1] is the share of the all-reduce that can
    run under the backward pass (assumption 7).
    """
    if not 0.0 <= overlap <= 1.0:
        raise ValueError("overlap must be within [0, 1]")
    if compute_s < 0 or params < 0 or bytes_per_param < 0:
        raise ValueError("params, bytes_per_param and compute_s must be >= 0")
    comm = allreduce_time_s(bus_bw_gbps, params * bytes_per_param, n_gpus)
    hidden = min(overlap * comm, compute_s)
    return compute_s + comm - hidden


# --- explanation ------------------------------------------------------------------------
#: Up to this many GPUs, explain() searches every ring order for the most readable one.
_READABLE_MAX = 8


def _readable_order(topology: Topology, order: list[int]) -> list[int]:
    """Among rings with the best bottleneck, the one whose slow links are fewest and fastest.

    Only for explanations (the bus bandwidth is the same): a ring that crosses the slow link
    once reads better than one that crosses it twice. Exhaustive, so small sets only.
    """
    if not 3 < len(order) <= _READABLE_MAX:
        return order
    first, rest = min(order), sorted(set(order) - {min(order)})

    def profile(ring: tuple[int, ...]) -> list[float]:
        return sorted(
            _weight(topology, a, b) for a, b in zip(ring, ring[1:] + ring[:1], strict=True)
        )

    best = max(((first, *perm) for perm in permutations(rest)), key=lambda ring: profile(ring))
    return list(best)


def explain(topology: Topology, gpus: Sequence[int]) -> dict[str, Any]:
    """Why a GPU set gets its bus bandwidth: ring order, every ring link, the bottleneck.

    Plain JSON-able data for ``gputopo topology explain``.
    """
    ring = _ring(topology, _key(topology, gpus))
    order = _readable_order(topology, list(ring.order))
    edges = []
    if len(order) > 1:
        pairs = list(zip(order, order[1:] + order[:1], strict=True))
        if len(order) == 2:
            pairs = pairs[:1]
        for a, b in pairs:
            edges.append(
                {
                    "from": a,
                    "to": b,
                    "link": topology.link(a, b),
                    "bandwidthGBps": round(_weight(topology, a, b), 3),
                }
            )
    bottleneck = None
    if ring.bottleneck is not None:
        a, b = min(
            zip(order, order[1:] + order[:1], strict=True),
            key=lambda e: _weight(topology, e[0], e[1]),
        )
        bottleneck = {
            "from": a,
            "to": b,
            "link": topology.link(a, b),
            "bandwidthGBps": round(_weight(topology, a, b), 3),
        }
    return {
        "gpus": sorted(order),
        "generation": infer_generation(topology),
        "allToAll": is_all_to_all(topology),
        "ring": order,
        "links": edges,
        "bottleneck": bottleneck,
        "busBandwidthGBps": round(ring.bus_gbps, 3),
    }
