"""The solver on named hardware: the issue's done-when cases and the plain-words reasons."""

from __future__ import annotations

from itertools import combinations

import pytest
from solver_helpers import (
    FIXTURE_FILES,
    a100_pcie_pairs,
    dgx1_v100,
    dgx_a100,
    fixture_topology,
    node,
    pcie_2socket,
)

from gputopo.errors import InputError
from gputopo.placement.objective import (
    best_quality,
    free_blocks,
    position_mask,
    score,
    set_quality,
)
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState, Placement


def gpus_by_node(p: Placement) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for s in p.slots:
        out.setdefault(s.node, []).extend(s.gpus)
    return {k: sorted(v) for k, v in out.items()}


def take(nodes: list[NodeState], p: Placement) -> list[NodeState]:
    """The cluster after the placement's GPUs are bound."""
    got = gpus_by_node(p)
    return [
        node(n.name, n.topology, tuple(n.used | set(got.get(n.name, ()))),
             zone=n.zone, rack=n.rack, network_gbps=n.network_gbps)
        for n in nodes
    ]


def test_four_single_gpu_workers_get_an_nvlink_quad_of_one_dgx1(two_dgx1):
    p = solve(two_dgx1, GangRequest(replicas=4, gpus_per_replica=1))
    assert p.feasible
    placed = gpus_by_node(p)
    assert len(placed) == 1, placed
    (_name, gpus), = placed.items()
    topo = dgx1_v100()
    assert len(gpus) == 4
    for a, b in combinations(gpus, 2):
        assert topo.link(a, b).startswith("NV"), (a, b, topo.link(a, b))
    # the predicted bandwidth is the ring over NVLink, far above the two-node figure
    assert p.bus_bandwidth_gbps > 20


def test_second_identical_gang_takes_the_other_quad_of_the_same_node(two_dgx1):
    gang = GangRequest(replicas=4, gpus_per_replica=1)
    first = solve(two_dgx1, gang)
    second = solve(take(two_dgx1, first), gang)
    (n1, g1), = gpus_by_node(first).items()
    (n2, g2), = gpus_by_node(second).items()
    assert n1 == n2
    assert not set(g1) & set(g2)
    for a, b in combinations(g2, 2):
        assert dgx1_v100().link(a, b).startswith("NV")
    # and the other DGX-1 stays whole
    other = next(n for n in two_dgx1 if n.name != n1)
    assert free_blocks(other.topology, position_mask(other.topology, other.free))[3] == 1


def test_dgx_a100_any_four_are_equal_and_the_rest_stays_one_block():
    nodes = [node("a100", dgx_a100())]
    gang = GangRequest(replicas=1, gpus_per_replica=4)
    firsts = {
        score(nodes, gang, {"a100": c}).bus_bandwidth
        for c in combinations(range(8), 4)
    }
    assert len(firsts) == 1  # NVSwitch: every 4-set is as fast as any other
    p = solve(nodes, gang)
    after = take(nodes, p)[0]
    blocks4 = free_blocks(after.topology, position_mask(after.topology, after.free))[4]
    assert len(after.free) == 4 and blocks4 == 1


def test_one_gpu_job_takes_the_loose_gpu_not_an_nvlink_pair():
    # A100 PCIe with NVLink bridges: pairs (0,1) (2,3) (4,5) (6,7). GPU 3 is in use, so GPU 2
    # is loose; taking 0, 1, 4, ... would break an intact pair.
    nodes = [node("pairs", a100_pcie_pairs(), used=(3,))]
    p = solve(nodes, GangRequest(replicas=1, gpus_per_replica=1))
    assert gpus_by_node(p) == {"pairs": [2]}


def test_one_gpu_job_fills_a_partly_used_node_before_opening_an_empty_one():
    nodes = [node("empty", dgx_a100()), node("busy", dgx_a100(), used=(0, 1, 2))]
    p = solve(nodes, GangRequest(replicas=1, gpus_per_replica=1))
    assert list(gpus_by_node(p)) == ["busy"]


def test_two_gpu_job_on_pcie_server_stays_under_one_switch():
    nodes = [node("pcie", pcie_2socket())]
    p = solve(nodes, GangRequest(replicas=1, gpus_per_replica=2))
    (gpus,) = gpus_by_node(p).values()
    assert pcie_2socket().link(*gpus) == "PIX"


def test_multi_node_gang_prefers_one_rack_then_one_zone():
    t = dgx_a100()
    nodes = [
        node("a-far", t, zone="z2", rack="r9"),
        node("b-zone", t, zone="z1", rack="r2"),
        node("c-rack", t, zone="z1", rack="r1"),
        node("d-rack", t, zone="z1", rack="r1"),
    ]
    p = solve(nodes, GangRequest(replicas=2, gpus_per_replica=8))
    assert sorted(gpus_by_node(p)) == ["c-rack", "d-rack"]
    assert p.details["span"] == "rack"
    nodes[3] = node("d-rack", t, used=(0,), zone="z1", rack="r1")
    p = solve(nodes, GangRequest(replicas=2, gpus_per_replica=8))
    assert p.details["span"] == "zone"
    assert sorted(gpus_by_node(p)) == ["b-zone", "c-rack"]


def test_faster_network_wins_over_locality_when_it_predicts_more_bandwidth():
    t = dgx_a100()
    nodes = [
        node("slow-1", t, zone="z1", rack="r1", network_gbps=25),
        node("slow-2", t, zone="z1", rack="r1", network_gbps=25),
        node("fast-1", t, zone="z1", rack="r2", network_gbps=800),
        node("fast-2", t, zone="z1", rack="r3", network_gbps=800),
    ]
    p = solve(nodes, GangRequest(replicas=2, gpus_per_replica=8))
    assert sorted(gpus_by_node(p)) == ["fast-1", "fast-2"]


def test_same_answer_whatever_the_node_order(two_dgx1):
    nodes = [*two_dgx1, node("pcie", pcie_2socket(), used=(0,)), node("a100", dgx_a100())]
    gang = GangRequest(replicas=3, gpus_per_replica=2)
    assert solve(nodes, gang) == solve(list(reversed(nodes)), gang)


@pytest.mark.parametrize(
    ("nodes", "gang", "words"),
    [
        ([], GangRequest(1, 1), "no node is activated"),
        ([node("a", dgx1_v100())], GangRequest(3, 4), "whole cluster has only 8"),
        ([node("a", dgx1_v100()), node("b", dgx1_v100())], GangRequest(1, 9), "largest node has 8"),
        ([node("a", dgx1_v100(), used=tuple(range(8)))], GangRequest(1, 1), "cluster full"),
        (
            [node("a", dgx1_v100(), used=(0, 1, 2, 3, 4)), node("b", dgx1_v100(), used=(0, 1))],
            GangRequest(1, 8),
            "no node has 8 free GPUs",
        ),
        (
            [node("a", dgx1_v100(), used=(0, 1, 2, 3)), node("b", dgx1_v100(), used=(0, 1))],
            GangRequest(3, 4),
            "only 2 of 3 replicas",
        ),
    ],
)
def test_infeasible_says_why_in_plain_words(nodes, gang, words):
    p = solve(nodes, gang)
    assert not p.feasible and not p.slots
    assert words in p.reason
    assert p.to_json()["feasible"] is False


@pytest.mark.parametrize(
    ("gang", "words"),
    [
        (GangRequest(3, 5), "only 2 of 3 replicas of 5 GPUs fit even with every GPU free"),
        (GangRequest(3, 1, max_replicas_per_node=1), "at most 1 per node"),
    ],
)
def test_infeasible_on_an_empty_cluster_is_not_called_full(gang, words):
    """Nothing is in use: the nodes are too few or too small, and the reason says so."""
    p = solve([node("a", dgx1_v100()), node("b", dgx1_v100())], gang)
    assert not p.feasible
    assert words in p.reason
    assert "cluster full" not in p.reason


@pytest.mark.parametrize("gang", [GangRequest(0, 1), GangRequest(1, 0), GangRequest(-2, 4)])
def test_bad_gang_is_an_input_error(gang):
    with pytest.raises(InputError):
        solve([node("a", dgx1_v100())], gang)


def test_duplicate_node_names_are_an_input_error():
    with pytest.raises(InputError, match="twice"):
        solve([node("a", dgx1_v100()), node("a", dgx_a100())], GangRequest(1, 1))


@pytest.mark.parametrize("fixture", sorted(FIXTURE_FILES))
@pytest.mark.parametrize("size", [2, 3, 4, 8])
def test_empty_node_of_every_fixture_gets_the_best_set_its_size_allows(fixture, size):
    topo = fixture_topology(fixture)
    p = solve([node("n", topo)], GangRequest(replicas=1, gpus_per_replica=size))
    assert p.feasible, p.reason
    (gpus,) = gpus_by_node(p).values()
    assert set_quality(topo, gpus) == best_quality(topo, size)
    assert p.bus_bandwidth_gbps == pytest.approx(best_quality(topo, size)[0], abs=1e-3)
    assert "predicted bus bandwidth" in p.reason


@pytest.mark.parametrize("cap", [1, 2])
def test_replicas_per_node_cap_spreads_a_gang_whose_pods_collide(cap):
    """Host-network replicas that claim one host port can never share a node: with a cap,
    each node holds at most ``cap`` replicas, on the best GPUs of each node."""
    nodes = [node(f"dgx1-{c}", dgx1_v100()) for c in "abc"]
    gang = GangRequest(replicas=3, gpus_per_replica=2, max_replicas_per_node=cap)
    p = solve(nodes, gang)
    assert p.feasible, p.reason
    per_node = gpus_by_node(p)
    assert max(len(g) for g in per_node.values()) <= cap * 2
    assert len(per_node) == (3 if cap == 1 else 2)
    uncapped = solve(nodes, GangRequest(replicas=3, gpus_per_replica=2))
    assert len(gpus_by_node(uncapped)) == 1, "without the cap the gang packs onto one node"


def test_replicas_per_node_cap_makes_a_small_cluster_infeasible_with_a_reason(two_dgx1):
    p = solve(two_dgx1, GangRequest(replicas=3, gpus_per_replica=1, max_replicas_per_node=1))
    assert not p.feasible
    assert "at most 1 per node" in p.reason


def test_when_the_network_limits_fewer_nodes_win() -> None:
    """Issue 11: NCCL's pipelined rings give 2 and 4 nodes the same bus bandwidth when the
    network is the limit; the objective's ``nodes`` term keeps the gang on 2 nodes (the
    slowest-pair term alone would pick four lone GPUs, which have no pairs at all)."""
    busy = (2, 3, 4, 5, 6, 7)  # GPUs 0,1 (an NV1 pair) free on every node
    nodes = [node(f"n{i}", dgx1_v100(), busy) for i in range(4)]
    p = solve(nodes, GangRequest(4, 1))
    assert p.feasible
    assert len({s.node for s in p.slots}) == 2
    assert p.bus_bandwidth_gbps == pytest.approx(25.0 * 0.25 / 8)


@pytest.mark.parametrize(("transport", "share"), [("rdma", 0.5), ("gdr", 0.94)])
def test_an_rdma_node_pair_beats_a_tcp_pair(transport: str, share: float) -> None:
    """The transport decides between otherwise equal nodes: host-staged rdma carries 2x
    what tcp does, GPUDirect (gdr) 3.8x."""
    busy = tuple(range(1, 8))
    tcp = [node(f"a{i}", dgx1_v100(), busy, network_gbps=100.0) for i in range(2)]
    rdma = [
        NodeState(f"b{i}", dgx1_v100(), frozenset(busy), "zone-a", "rack-1", 100.0, transport)
        for i in range(2)
    ]
    p = solve([*tcp, *rdma], GangRequest(2, 1))
    assert {s.node for s in p.slots} == {"b0", "b1"}
    assert p.bus_bandwidth_gbps == pytest.approx(100 * share / 8)


def test_gdr_beats_host_staged_rdma_on_the_same_line_rate() -> None:
    busy = tuple(range(1, 8))
    staged = [NodeState(f"a{i}", dgx1_v100(), frozenset(busy), "zone-a", "rack-1", 100.0,
                        "rdma") for i in range(2)]
    direct = [NodeState(f"b{i}", dgx1_v100(), frozenset(busy), "zone-a", "rack-1", 100.0,
                        "gdr") for i in range(2)]
    p = solve([*staged, *direct], GangRequest(2, 1))
    assert {s.node for s in p.slots} == {"b0", "b1"}
