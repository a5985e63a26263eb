"""The best ring order over a weight matrix: the slowest link of the best ring.

Why a module of its own: NCCL's one-ring figure is the ring's slowest link, and finding the
ring that maximises it is a search (threshold Hamiltonian cycles, a greedy fallback) over
a matrix of pair speeds, nothing else; the cost model (cost.py, assumption 1b) gives it
the node's matrix.
"""

from __future__ import annotations

#: Largest non-uniform GPU set solved exactly (bitmask DP, 2^(k-1) states); larger sets
#: fall back to a greedy ring, which is a lower bound.
MAX_EXACT_RING = 16


def split_above_slowest_pair(w: list[list[float]]) -> bool:
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


def all_equal(w: list[list[float]]) -> bool:
    first = w[0][1]
    return all(w[a][b] == first for a in range(len(w)) for b in range(len(w)) if a != b)


def best_order(w: list[list[float]]) -> list[int]:
    """Ring order (positions) maximising the slowest edge: a bottleneck Hamiltonian cycle.

    A ring uses two edges at every GPU, so no ring beats the smallest "second-best edge"
    of any GPU; thresholds above it are skipped. Below that, binary search over the distinct
    edge weights with an exact Hamiltonian-cycle test (the complete graph at the smallest
    weight always has one).
    """
    k = len(w)
    if k > MAX_EXACT_RING:
        return greedy_order(w)
    bound = min(sorted(row[:v] + row[v + 1 :])[-2] for v, row in enumerate(w))
    levels = sorted({x for a in range(k) for b in range(a + 1, k) if (x := w[a][b]) <= bound})
    lo, hi = 0, len(levels) - 1
    best = ring_at_least(w, levels[0])
    assert best is not None  # every pair qualifies at the smallest level
    while lo < hi:  # invariant: levels[lo] feasible; find the largest feasible level
        mid = (lo + hi + 1) // 2
        found = ring_at_least(w, levels[mid])
        if found is None:
            hi = mid - 1
        else:
            lo, best = mid, found
    return best


def ring_at_least(w: list[list[float]], threshold: float) -> list[int] | None:
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


def greedy_order(w: list[list[float]]) -> list[int]:
    order, left = [0], set(range(1, len(w)))
    while left:
        last = order[-1]
        nxt = max(sorted(left), key=lambda u: w[last][u])
        order.append(nxt)
        left.remove(nxt)
    return order
