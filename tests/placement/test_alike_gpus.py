"""Which GPUs are interchangeable, worked out once per topology, groups a free set exactly
as comparing every GPU with every group did.

Why: ``interchangeable_groups`` looks each GPU up in a per-topology table of alike GPUs
instead of comparing it with the first GPU of every group over every third GPU; that is
right only because "same link to every other GPU" is an equivalence. These tests compare
both ways (the reference copy keeps the comparing one) on random link matrices, with and
without measured figures (ties made likely by drawing from a few values), and on the
fixtures, for any order of any free set.
"""

from __future__ import annotations

import solver_reference as reference
from hypothesis import given, settings
from hypothesis import strategies as st
from solver_helpers import FIXTURE_FILES, fixture_topology

from gputopo.placement.solver import distinct_subsets, interchangeable_groups
from gputopo.topology.model import Gpu, Topology

CODES = ("NV1", "NV2", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS")


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    n = draw(st.integers(1, 8))
    indices = draw(st.lists(st.integers(0, 15), min_size=n, max_size=n, unique=True))
    codes = draw(st.lists(st.sampled_from(CODES), min_size=1, max_size=3, unique=True))
    links = [["X"] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            links[a][b] = links[b][a] = draw(st.sampled_from(codes))
    measured = None
    if draw(st.booleans()):  # per direction, from a few figures: equal and unequal pairs
        figures = draw(st.lists(st.sampled_from([0.0, 20.0, 45.0, 150.0]), min_size=1,
                                max_size=3, unique=True))
        measured = tuple(tuple(0.0 if a == b else draw(st.sampled_from(figures))
                               for b in range(n)) for a in range(n))
    return Topology(gpus=tuple(Gpu(i) for i in indices), links=tuple(map(tuple, links)),
                    measured=measured)


@settings(max_examples=400, deadline=None)
@given(st.one_of(topologies(), st.sampled_from(sorted(FIXTURE_FILES)).map(fixture_topology)),
       st.data())
def test_groups_are_those_of_the_pairwise_comparison(topo: Topology,
                                                     data: st.DataObject) -> None:
    free = data.draw(st.lists(st.sampled_from(topo.indices), max_size=len(topo.indices) + 2))
    assert interchangeable_groups(topo, free) == reference.interchangeable_groups(topo, free)
    ascending = sorted(set(free))
    assert interchangeable_groups(topo, ascending) == reference.interchangeable_groups(
        topo, ascending)
    if ascending:
        k = data.draw(st.integers(1, len(ascending)))
        assert list(distinct_subsets(topo, ascending, k)) == list(
            reference.distinct_subsets(topo, ascending, k))
