"""The candidate shares of one node: every way to give a gang ``k`` of its free GPUs that
can be the best, with what each is worth.

Why a module of its own: every stage of the search (one node, the scopes' bounds, the
multi-node DPs) reads a node's options and nothing else of its GPUs, so the per-GPU work
(alike GPUs, distinct subsets, the Pareto filter) lives here, cached per (topology, free
GPUs, k), and the rest of the solver works on whole nodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gputopo.placement.objective import blocks_delta, min_pair_bandwidth, position_mask
from gputopo.topology.cost import all_to_all, ring_bus_bandwidth
from gputopo.topology.model import Topology

#: Base of the integer encoding of the blocks vector (order-preserving while every summed
#: component stays within +-BASE/2; 64 touched nodes x 32 blocks is far below).
BASE = 1 << 20
#: Scale of (blocks, packing) over the fit term (GPUs left free, summed over the touched
#: nodes) in :func:`_value`: order-preserving while that sum stays below half of it.
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


def _value(health: int, opened: int, left: int) -> int:
    """The objective's last three terms as one integer, larger is better: the encoded
    blocks kept (``health``), minus the empty nodes ``opened``, minus the GPUs ``left``
    free. Sums of node values are the values of the sums (the multi-node knapsack adds
    them node by node, the scopes' bound too)."""
    return (health * BASE - opened) * FIT_BASE - left


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
