"""The objective's parts on named hardware: block census, span, and one-GPU jobs."""

from __future__ import annotations

import pytest
from solver_helpers import a100_pcie_pairs, dgx1_v100, dgx_a100, node, pcie_2socket

from gputopo.errors import InputError
from gputopo.placement.objective import BLOCK_SIZES, free_blocks, position_mask, score, span_of
from gputopo.placement.types import GangRequest


def census(topo, free) -> dict[int, int]:
    return dict(zip(BLOCK_SIZES, free_blocks(topo, position_mask(topo, free)), strict=True))


def test_block_census_of_an_empty_dgx1_is_one_eight_two_quads_four_nv2_pairs():
    c = census(dgx1_v100(), range(8))
    assert (c[8], c[4], c[2]) == (1, 2, 4)


def test_block_census_counts_only_the_best_blocks():
    # A100 PCIe: the NVLink pairs are the only well-connected pairs; with GPU 1 gone,
    # GPU 0 is loose and three pairs remain.
    c = census(a100_pcie_pairs(), [0, 2, 3, 4, 5, 6, 7])
    assert c[2] == 3
    # PCIe 2-socket: best pairs are the PIX pairs (0,1) (2,3) (4,5) (6,7)
    assert census(pcie_2socket(), [1, 2, 3, 4, 6])[2] == 1


def test_nvswitch_census_is_just_counting():
    c = census(dgx_a100(), [0, 3, 5, 6, 7])
    assert (c[8], c[4], c[2]) == (0, 1, 2)


def test_span_is_node_rack_zone_or_cluster():
    t = dgx1_v100()
    a = node("a", t, zone="z1", rack="r1")
    b = node("b", t, zone="z1", rack="r1")
    c = node("c", t, zone="z1", rack="r2")
    d = node("d", t, zone="z2", rack="r1")  # same rack name, other zone: another rack
    e = node("e", t, zone=None, rack=None)
    assert span_of([a]) == "node"
    assert span_of([a, b]) == "rack"
    assert span_of([a, c]) == "zone"
    assert span_of([a, d]) == "cluster"
    assert span_of([e, node("f", t, zone=None, rack=None)]) == "cluster"


def test_one_gpu_jobs_have_no_bandwidth_term():
    nodes = [node("a", dgx_a100()), node("b", pcie_2socket())]
    gang = GangRequest(1, 1)
    assert score(nodes, gang, {"a": (0,)}).bus_bandwidth == 0.0
    assert score(nodes, gang, {"b": (0,)}).bus_bandwidth == 0.0


def test_score_rejects_invalid_shares():
    nodes = [node("a", dgx1_v100(), used=(0,))]
    with pytest.raises(InputError, match="not free"):
        score(nodes, GangRequest(1, 2), {"a": (0, 1)})
    with pytest.raises(InputError, match="multiple"):
        score(nodes, GangRequest(1, 2), {"a": (1, 2, 3)})
    with pytest.raises(InputError, match="needs 4"):
        score(nodes, GangRequest(2, 2), {"a": (1, 2)})
