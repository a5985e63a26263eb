"""Good-enough one-node placements go best-fit (the objective's term 0, ``good``).

A gang with a bar (``GangRequest.good_gbps``: the waiting rule's ``minShare`` of its typical
reference, set by the reserver) takes, among the one-node placements on its node's best
GPU set at or above the bar, the slowest such set, then the fullest node already in use;
below the bar the bandwidth comes first, as for every gang without one. Nodes read like the
hardware: an empty DGX-1 V100, a DGX A100, two-socket PCIe servers in PIX pairs (0-1, 2-3,
4-5, 6-7; PHB within a socket, SYS across).
"""

from __future__ import annotations

from dataclasses import replace

from solver_helpers import dgx1_v100, dgx_a100, node, pcie_2socket

from gputopo.placement.objective import ROUND, best_quality, score
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, Placement

PIX_PAIRS = ({0, 1}, {2, 3}, {4, 5}, {6, 7})


def bar(topology, size: int, share: float) -> float:
    """``share`` of the best ``size``-GPU set of ``topology``, as the reserver rounds it."""
    best = best_quality(topology, size)
    assert best is not None
    return round(share * best[0], ROUND)


def where(placement: Placement) -> tuple[str, set[int]]:
    """The one node of a one-node placement and its GPUs."""
    assert placement.feasible, placement.reason
    (name,) = {s.node for s in placement.slots}
    return name, {g for s in placement.slots for g in s.gpus}


def test_a_pair_good_enough_on_pcie_fills_the_busy_pcie_server_not_an_empty_dgx1():
    """The Alibaba case: PCIe pairs are good enough for the gang (its bar is 90 % of a PIX
    pair), so it takes the busy PCIe server's free PIX pair; without a bar it opened the
    empty DGX-1 for an NVLink pair."""
    nodes = [node("dgx", dgx1_v100()), node("pcie", pcie_2socket(), used=(0, 2))]
    gang = GangRequest(1, 2, good_gbps=bar(pcie_2socket(), 2, 0.9))
    name, gpus = where(solve(nodes, gang))
    assert name == "pcie" and gpus in PIX_PAIRS
    assert score(nodes, gang, {"pcie": tuple(sorted(gpus))}).good == 1
    # the old rule, bandwidth first
    assert where(solve(nodes, replace(gang, good_gbps=None)))[0] == "dgx"


def test_below_the_bar_the_bandwidth_comes_first():
    """The bar at 90 % of a DGX-1 NVLink pair: a PIX pair is below it, so the gang opens
    the empty DGX-1 for its best pair (none of the PCIe server's sets is good)."""
    nodes = [node("dgx", dgx1_v100()), node("pcie", pcie_2socket(), used=(0, 2))]
    gang = GangRequest(1, 2, good_gbps=bar(dgx1_v100(), 2, 0.9))
    name, gpus = where(solve(nodes, gang))
    assert name == "dgx"
    assert score(nodes, gang, {"dgx": tuple(sorted(gpus))}).good == 1
    assert score(nodes, gang, {"pcie": (4, 5)}).good == 0


def test_the_slowest_good_set_first_the_faster_one_stays_for_who_needs_it():
    """A DGX-1 NVLink quad is good enough for the 4-GPU gang: it takes one on the empty
    DGX-1 rather than four GPUs of the busy DGX A100 (faster, but more than it needs:
    the A100's GPUs stay for the gangs whose bar only they meet)."""
    nodes = [node("a100", dgx_a100(), used=(0,)), node("dgx", dgx1_v100())]
    gang = GangRequest(1, 4, good_gbps=bar(dgx1_v100(), 4, 0.9))
    assert where(solve(nodes, gang))[0] == "dgx"
    assert where(solve(nodes, replace(gang, good_gbps=None)))[0] == "a100"
    # a bar only the A100 meets: the A100
    gang = replace(gang, good_gbps=bar(dgx_a100(), 4, 0.9))
    assert where(solve(nodes, gang))[0] == "a100"


def test_of_equally_good_sets_the_fullest_node_in_use():
    """Three PCIe servers, each with a free PIX pair: the one with the fewest free GPUs
    left gets the pair; the empty one stays whole."""
    nodes = [node("empty", pcie_2socket()),
             node("half", pcie_2socket(), used=(0, 1, 2, 3)),
             node("most", pcie_2socket(), used=(0, 1, 2, 3, 4, 5))]
    gang = GangRequest(2, 1, good_gbps=bar(pcie_2socket(), 2, 0.9))
    assert where(solve(nodes, gang)) == ("most", {6, 7})


def test_a_set_below_its_nodes_best_is_never_good():
    """The busy PCIe server has only PHB pairs left (1-3, 5-7), fast enough for a bar of
    75 % of a PIX pair but not its node's best set: packing must not hand the gang a worse
    set on its node than that node could give, so the empty server's PIX pair wins."""
    nodes = [node("busy", pcie_2socket(), used=(0, 2, 4, 6)), node("empty", pcie_2socket())]
    gang = GangRequest(1, 2, good_gbps=bar(pcie_2socket(), 2, 0.75))
    assert score(nodes, gang, {"busy": (1, 3)}).bus_bandwidth >= gang.good_gbps
    assert score(nodes, gang, {"busy": (1, 3)}).good == 0
    name, gpus = where(solve(nodes, gang))
    assert name == "empty" and gpus in PIX_PAIRS


def test_a_bar_changes_nothing_for_one_gpu_or_over_several_nodes():
    """One GPU has no all-reduce (never good: best-fit packs it already); a gang larger
    than any node is over several nodes, where the bandwidth comes first."""
    nodes = [node("dgx", dgx1_v100()), node("pcie", pcie_2socket(), used=(0,)),
             node("pcie-2", pcie_2socket())]
    for gang in (GangRequest(1, 1), GangRequest(2, 8)):
        placement = solve(nodes, replace(gang, good_gbps=0.0))
        assert placement.feasible and placement.slots == solve(nodes, gang).slots
    assert len({s.node for s in placement.slots}) == 2
