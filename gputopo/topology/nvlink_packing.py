"""Packing rings into a node's NVLinks: how many NCCL channels fit, exactly.

Why a module of its own: it is plain graph and LP code (Hamiltonian cycles of a small
graph, a greedy packing and an exact simplex) with no topology in it; the cost model
(cost.py, assumption 1a) builds the graph from a node's NVLinks and asks it.
"""

from __future__ import annotations

import math
from itertools import pairwise


def connected(adj: list[list[int]]) -> bool:
    seen, stack = {0}, [0]
    while stack:
        for b in adj[stack.pop()]:
            if b not in seen:
                seen.add(b)
                stack.append(b)
    return len(seen) == len(adj)


def hamiltonian_cycles(
    adj: list[list[int]], edges: dict[tuple[int, int], int]
) -> list[tuple[int, ...]]:
    """Every Hamiltonian cycle once (as edge indices): from vertex 0, second < last."""
    k = len(adj)
    out: list[tuple[int, ...]] = []
    path = [0]

    def walk(v: int, mask: int) -> None:
        if len(path) == k:
            if 0 in adj[v] and path[1] < path[-1]:
                cyc = [*path, 0]
                out.append(
                    tuple(edges[min(a, b), max(a, b)] for a, b in pairwise(cyc))
                )
            return
        for u in adj[v]:
            if not mask >> u & 1:
                path.append(u)
                walk(u, mask | 1 << u)
                path.pop()

    walk(0, 1)
    return out


def greedy_packing(cycles: list[tuple[int, ...]], caps: list[float]) -> float:
    """A feasible packing (a lower bound): take the widest remaining cycle until none."""
    left = list(caps)
    total = 0.0
    while True:
        best, width = None, 0.0
        for c in cycles:
            w = min(left[e] for e in c)
            if w > width:
                best, width = c, w
        if best is None or width <= 1e-12:
            return total
        for e in best:
            left[e] -= width
        total += width


def simplex_packing(cycles: list[tuple[int, ...]], caps: list[float]) -> float:
    """max sum(y) s.t. per link sum(y_H over cycles using it) <= cap, y >= 0.

    Dense tableau simplex with Bland's rule (no cycling); the origin is feasible (caps are
    positive), so no phase one. Sizes: at most 28 links and 2,520 cycles (8 GPUs).
    """
    m, n = len(caps), len(cycles)
    width = n + m
    rows = [[0.0] * width + [caps[i]] for i in range(m)]
    for j, cyc in enumerate(cycles):
        for e in cyc:
            rows[e][j] = 1.0
    for i in range(m):
        rows[i][n + i] = 1.0
    obj = [-1.0] * n + [0.0] * m + [0.0]
    basis = [n + i for i in range(m)]
    eps = 1e-12
    while True:
        enter = next((j for j in range(width) if obj[j] < -eps), None)
        if enter is None:
            return obj[-1]
        leave, ratio = -1, math.inf
        for i in range(m):
            a = rows[i][enter]
            if a > eps:
                r = rows[i][-1] / a
                if r < ratio - eps or (abs(r - ratio) <= eps and basis[i] < basis[leave]):
                    leave, ratio = i, r
        piv = rows[leave]
        p = piv[enter]
        piv = [x / p for x in piv]
        rows[leave] = piv
        for i in range(m):
            f = rows[i][enter]
            if i != leave and f != 0.0:
                row = rows[i]
                rows[i] = [x - f * y for x, y in zip(row, piv, strict=True)]
        f = obj[enter]
        obj = [x - f * y for x, y in zip(obj, piv, strict=True)]
        basis[leave] = enter
