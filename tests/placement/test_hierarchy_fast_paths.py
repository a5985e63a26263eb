"""The shortcuts for hierarchical nodes give exactly what the exhaustive search gives.

On PCIe trees and NVLink-bridged pairs (ultrametric links) the objective counts free
blocks per link class and the solver walks GPU sets up to swapping alike GPUs; these tests
pin both to the exhaustive definitions on random hierarchies, so the speed-up can never
change a placement.
"""

from __future__ import annotations

from itertools import combinations

from hypothesis import given
from hypothesis import strategies as st
from solver_helpers import fixture_topology

from gputopo.placement.objective import (
    BLOCK_SIZES,
    best_quality,
    free_blocks,
    free_blocks_exhaustive,
    position_mask,
    set_quality,
)
from gputopo.placement.solver import distinct_subsets, interchangeable_groups
from gputopo.topology.cost import (
    LINK_EFFICIENCY,
    is_hierarchical,
    is_ultrametric,
    ring_bus_bandwidth,
)
from gputopo.topology.model import Gpu, Topology

# innermost first: each level's links are slower than the one inside it
LEVEL_CODES = (("NV4", "PIX"), ("PXB",), ("PHB", "NODE"), ("SYS",))


@st.composite
def hierarchies(draw: st.DrawFn, max_gpus: int = 8) -> Topology:
    """A random tree of GPUs: pairs/switches/host bridges/sockets, legend codes by the
    innermost level two GPUs share."""
    n = draw(st.integers(2, max_gpus))
    # group ids per level, each level coarsening the one below
    paths = []
    for _ in range(n):
        paths.append([draw(st.integers(0, 1)) for _ in range(len(LEVEL_CODES))])
    codes = [draw(st.sampled_from(c)) for c in LEVEL_CODES]
    links = [["X"] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            # the outermost level where they differ decides the link
            level = max(
                (lvl for lvl in range(len(LEVEL_CODES)) if paths[a][lvl:] != paths[b][lvl:]),
                default=0,
            )
            links[a][b] = links[b][a] = codes[level]
    return Topology(gpus=tuple(Gpu(i) for i in range(n)), links=tuple(map(tuple, links)))


@given(hierarchies())
def test_hierarchy_is_recognised_and_rings_are_the_slowest_pair(topo: Topology) -> None:
    assert is_ultrametric(topo)
    for k in range(3, len(topo.gpus) + 1):
        for combo in combinations(topo.indices, k):
            slowest = min(
                min(topo.bandwidth(a, b), topo.bandwidth(b, a)) for a, b in combinations(combo, 2)
            )
            bus = ring_bus_bandwidth(topo, combo)
            if is_hierarchical(topo):  # no NVLink cycle: the slowest pair decides
                assert bus == slowest * LINK_EFFICIENCY
            else:  # NV4 triangles and up carry NVLink rings both ways: never less
                assert bus >= slowest * LINK_EFFICIENCY


@given(hierarchies(), st.data())
def test_block_counts_match_the_exhaustive_search(topo: Topology, data: st.DataObject) -> None:
    free = data.draw(st.sets(st.sampled_from(topo.indices)))
    mask = position_mask(topo, free)
    assert free_blocks(topo, mask) == free_blocks_exhaustive(topo, mask)
    for k in range(2, len(topo.gpus) + 1):
        best = max(set_quality(topo, c) for c in combinations(topo.indices, k))
        assert best_quality(topo, k) == best


@given(hierarchies(), st.data())
def test_distinct_subsets_cover_every_kind_of_set(topo: Topology, data: st.DataObject) -> None:
    free = sorted(data.draw(st.sets(st.sampled_from(topo.indices), min_size=1)))
    k = data.draw(st.integers(1, len(free)))
    mask = position_mask(topo, free)
    walked = list(distinct_subsets(topo, free, k))
    assert len(walked) == len(set(walked))

    def kind(c: tuple[int, ...]) -> tuple[object, ...]:
        after = free_blocks(topo, mask & ~position_mask(topo, c))
        return (set_quality(topo, c), after)

    # every set is matched by a walked set of the same kind that is no larger, GPU by GPU
    for combo in combinations(free, k):
        assert any(kind(w) == kind(combo) and w <= combo for w in walked)


def test_dgx1_cube_mesh_is_not_a_hierarchy() -> None:
    dgx1 = fixture_topology("dgx1-v100")
    assert not is_ultrametric(dgx1)
    assert not is_hierarchical(dgx1)
    # no two DGX-1 GPUs are alike: every one has its own NVLink neighbours
    assert len(interchangeable_groups(dgx1, dgx1.indices)) == 8


def test_pcie_node_groups_the_gpus_behind_one_switch() -> None:
    pcie = fixture_topology("pcie-2socket-phb")
    assert is_ultrametric(pcie)
    assert interchangeable_groups(pcie, pcie.indices) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert free_blocks(pcie, (1 << 8) - 1) == free_blocks_exhaustive(pcie, (1 << 8) - 1)
    assert BLOCK_SIZES[-1] == 2
