"""The communication cost model: ring search against brute force, NVSwitch, and sanity."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputopo.errors import TopologyError
from gputopo.topology.bandwidth import nvlink_count
from gputopo.topology.cost import (
    LINK_EFFICIENCY,
    SPANS,
    NodeShare,
    allreduce_time_s,
    best_ring_subset,
    gang_bus_bandwidth,
    ring_bus_bandwidth,
    step_time_s,
)
from gputopo.topology.explanation import explain
from gputopo.topology.model import Topology

from .strategies import measured_topologies, topologies


def brute_force_ring(topo: Topology, gpus: tuple[int, ...]) -> float:
    """Best bottleneck over every ring order (the oracle)."""
    if len(gpus) == 2:
        return min(topo.bandwidth(gpus[0], gpus[1]), topo.bandwidth(gpus[1], gpus[0]))
    first, rest = gpus[0], gpus[1:]
    best = 0.0
    for perm in itertools.permutations(rest):
        ring = (first, *perm)
        worst = min(
            min(topo.bandwidth(a, b), topo.bandwidth(b, a))
            for a, b in zip(ring, ring[1:] + ring[:1], strict=True)
        )
        best = max(best, worst)
    return best


@given(topo=st.one_of(topologies(min_gpus=2, max_gpus=7), measured_topologies()), data=st.data())
def test_ring_is_the_best_ring_order(topo: Topology, data: st.DataObject) -> None:
    """The single-ring part is the best ring order; the channels never predict less, and
    without an NVLink between the GPUs it is the whole answer."""
    k = data.draw(st.integers(2, len(topo.gpus)))
    gpus = tuple(data.draw(st.permutations(topo.indices))[:k])
    ring = brute_force_ring(topo, tuple(gpus)) * LINK_EFFICIENCY
    assert explain(topo, gpus)["ringBusBandwidthGBps"] == pytest.approx(ring, abs=1e-3)
    bus = ring_bus_bandwidth(topo, gpus)
    assert bus >= ring * (1 - 1e-9)
    if not any(nvlink_count(topo.link(a, b)) for a, b in itertools.combinations(gpus, 2)):
        assert bus == pytest.approx(ring)


@given(topo=topologies(min_gpus=3, max_gpus=7))
def test_explain_ring_visits_every_gpu_and_its_bottleneck_is_the_answer(topo: Topology) -> None:
    gpus = list(topo.indices)
    r = explain(topo, gpus)
    assert sorted(r["ring"]) == sorted(gpus)
    assert len(r["links"]) == len(gpus)
    assert min(e["bandwidthGBps"] for e in r["links"]) == r["bottleneck"]["bandwidthGBps"]
    assert r["ringBusBandwidthGBps"] == pytest.approx(
        r["bottleneck"]["bandwidthGBps"] * LINK_EFFICIENCY, abs=1e-3
    )
    assert r["busBandwidthGBps"] >= r["ringBusBandwidthGBps"]
    if r["model"] == "nvlink-rings":  # channels x per-channel line rate x efficiency
        assert r["channels"] * r["perChannelGBps"] * LINK_EFFICIENCY == pytest.approx(
            r["busBandwidthGBps"], rel=1e-3
        )


@given(topo=measured_topologies(min_gpus=3, max_gpus=6), data=st.data())
def test_a_faster_link_never_makes_a_ring_slower(topo: Topology, data: st.DataObject) -> None:
    n = len(topo.gpus)
    a, b = data.draw(st.sampled_from([(a, b) for a in range(n) for b in range(a + 1, n)]))
    m = [list(r) for r in topo.measured or ()]
    m[a][b] = m[b][a] = m[a][b] * 2
    faster = Topology(topo.gpus, topo.links, measured=tuple(tuple(r) for r in m))
    assert ring_bus_bandwidth(faster, topo.indices) >= ring_bus_bandwidth(topo, topo.indices)


@pytest.mark.parametrize("fixture", ["dgx_a100", "hopper"])
def test_nvswitch_every_subset_is_equally_good(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    topo: Topology = request.getfixturevalue(fixture)
    for k in range(2, 9):
        values = {ring_bus_bandwidth(topo, c) for c in itertools.combinations(topo.indices, k)}
        assert len(values) == 1


def test_dgx1_quad_beats_every_set_across_the_halves(dgx1: Topology) -> None:
    """Issue 11: a fully NVLink-connected quad (every pair NV1 or NV2) packs two rings each
    way; any 4 GPUs that need the link between the two halves pack at most one."""
    nv1 = dgx1.bandwidth(0, 1)
    quad = ring_bus_bandwidth(dgx1, (0, 1, 2, 3))
    assert quad == pytest.approx(4 * nv1 * LINK_EFFICIENCY)  # 4 channels of one NVLink
    assert ring_bus_bandwidth(dgx1, (4, 5, 6, 7)) == pytest.approx(quad)
    across = [
        c for c in itertools.combinations(dgx1.indices, 4)
        if not set(c) <= {0, 1, 2, 3} and not set(c) <= {4, 5, 6, 7}
    ]
    assert max(ring_bus_bandwidth(dgx1, c) for c in across) == pytest.approx(quad / 2)
    assert ring_bus_bandwidth(dgx1, (0, 1, 5, 4)) == pytest.approx(quad / 2)  # one NVLink ring
    assert ring_bus_bandwidth(dgx1, (0, 1, 2, 5)) < quad / 10  # needs a SYS hop
    assert best_ring_subset(dgx1, 4)[1] == pytest.approx(quad)
    pair = dgx1.bandwidth(0, 3) * LINK_EFFICIENCY  # an NV2 pair
    assert best_ring_subset(dgx1, 2)[1] == pytest.approx(pair)
    assert ring_bus_bandwidth(dgx1, tuple(range(8))) == pytest.approx(6 * nv1 * LINK_EFFICIENCY)


def test_pcie_pairs_a100_third_gpu_falls_to_pcie(a100_pairs: Topology) -> None:
    pair = ring_bus_bandwidth(a100_pairs, (0, 1))
    three = ring_bus_bandwidth(a100_pairs, (0, 1, 2))
    assert pair > 10 * three  # nccl-tests #178: 208 GB/s on the pair, ~20 with a third GPU
    assert 180 <= pair <= 240 and 15 <= three <= 25


def test_one_gpu_is_defined_and_finite(dgx1: Topology, pcie: Topology) -> None:
    for topo in (dgx1, pcie):
        one = ring_bus_bandwidth(topo, (0,))
        assert math.isfinite(one)
        assert one == max(max(r) for r in topo.bandwidth_matrix)
    lone = Topology.from_annotation({"links": [["X"]]})
    assert ring_bus_bandwidth(lone, (0,)) > 0


@pytest.mark.parametrize("gpus", [(), (0, 0), (0, 9)])
def test_bad_gpu_sets_are_errors(dgx1: Topology, gpus: tuple[int, ...]) -> None:
    with pytest.raises(TopologyError):
        ring_bus_bandwidth(dgx1, gpus)


# --- across nodes -----------------------------------------------------------------------
def test_single_share_is_the_ring(dgx1: Topology) -> None:
    share = NodeShare(dgx1, (0, 1, 2, 3), 25.0)
    assert gang_bus_bandwidth([share], span="node") == ring_bus_bandwidth(dgx1, (0, 1, 2, 3))


def test_one_gpu_per_node_is_the_effective_network(dgx1: Topology) -> None:
    shares = [NodeShare(dgx1, (0,), 100.0) for _ in range(4)]  # tcp by default
    assert gang_bus_bandwidth(shares, span="rack") == pytest.approx(100.0 * 0.25 / 8)
    rdma = [NodeShare(dgx1, (0,), 100.0, "rdma") for _ in range(4)]
    assert gang_bus_bandwidth(rdma, span="rack") == pytest.approx(100.0 * 0.50 / 8)
    gdr = [NodeShare(dgx1, (0,), 100.0, "gdr") for _ in range(4)]
    assert gang_bus_bandwidth(gdr, span="rack") == pytest.approx(100.0 * 0.94 / 8)
    # the slowest node decides, transport included
    assert gang_bus_bandwidth([*gdr[:3], shares[0]], span="rack") == pytest.approx(3.125)
    assert gang_bus_bandwidth([*gdr[:3], rdma[0]], span="rack") == pytest.approx(6.25)
    # a node's own share beats the policy's, which beats the default
    policy = [NodeShare(dgx1, (0,), 100.0, "rdma", None, 0.8) for _ in range(2)]
    assert gang_bus_bandwidth(policy, span="rack") == pytest.approx(100.0 * 0.8 / 8)
    own = [NodeShare(dgx1, (0,), 100.0, "rdma", 0.3, 0.8) for _ in range(2)]
    assert gang_bus_bandwidth(own, span="rack") == pytest.approx(100.0 * 0.3 / 8)
    unknown = [NodeShare(dgx1, (0,), 100.0, "carrier-pigeon") for _ in range(2)]
    assert gang_bus_bandwidth(unknown, span="rack") == pytest.approx(100.0 * 0.25 / 8)


def test_the_worst_share_limits_a_fast_network(dgx1: Topology) -> None:
    shares = [NodeShare(dgx1, (0, 1, 2, 5), 800.0, "gdr"), NodeShare(dgx1, (0, 1), 800.0, "gdr")]
    assert gang_bus_bandwidth(shares, span="rack") == pytest.approx(
        ring_bus_bandwidth(dgx1, (0, 1, 2, 5))
    )


def test_seeds_case_one_node_beats_two(dgx1: Topology) -> None:
    one = gang_bus_bandwidth([NodeShare(dgx1, (0, 1, 2, 3), 25.0)], span="node")
    two = gang_bus_bandwidth(
        [NodeShare(dgx1, (0, 1), 25.0), NodeShare(dgx1, (0, 1), 25.0)], span="rack"
    )
    assert one > 50 * two
    assert two == pytest.approx(25.0 * 0.25 / 8)  # TCP sockets: a quarter of the line rate


@given(
    k=st.integers(1, 4),
    m=st.integers(2, 4),
    net=st.sampled_from([10.0, 25.0, 100.0, 400.0]),
)
def test_wider_span_and_slower_network_never_help(k: int, m: int, net: float) -> None:
    from .conftest import load

    topo = load("dgx1-v100.txt")
    shares = [NodeShare(topo, tuple(range(k)), net) for _ in range(m)]
    by_span = [gang_bus_bandwidth(shares, span=s) for s in SPANS[1:]]
    assert by_span == sorted(by_span, reverse=True)
    slower = [NodeShare(topo, tuple(range(k)), net / 2) for _ in range(m)]
    assert gang_bus_bandwidth(slower, span="rack") < gang_bus_bandwidth(shares, span="rack")
    assert (
        gang_bus_bandwidth(shares, span="rack") <= ring_bus_bandwidth(topo, tuple(range(k)))
        or k == 1
    )


def test_gang_argument_errors(dgx1: Topology) -> None:
    share = NodeShare(dgx1, (0,), 25.0)
    with pytest.raises(ValueError):
        gang_bus_bandwidth([share, share], span="node")
    with pytest.raises(ValueError):
        gang_bus_bandwidth([share], span="galaxy")
    with pytest.raises(ValueError):
        gang_bus_bandwidth([], span="rack")


# --- time -------------------------------------------------------------------------------
def test_allreduce_time_matches_the_bus_bandwidth_definition() -> None:
    # 1 GB over 4 GPUs at 10 GB/s bus bandwidth moves 2(n-1)/n = 1.5 GB per GPU: 0.15 s
    assert allreduce_time_s(10.0, 1e9, 4) == pytest.approx(0.15)
    assert allreduce_time_s(10.0, 1e9, 1) == 0.0
    assert allreduce_time_s(20.0, 1e9, 4) == pytest.approx(allreduce_time_s(10.0, 1e9, 4) / 2)


@given(
    compute=st.floats(0.0, 2.0),
    bus=st.floats(0.5, 500.0),
    params=st.floats(1e6, 5e8),
    n=st.integers(1, 64),
    overlap=st.floats(0.0, 1.0),
)
def test_step_time_bounds(
    compute: float, bus: float, params: float, n: int, overlap: float
) -> None:
    comm = allreduce_time_s(bus, params * 4, n)
    step = step_time_s(
        params=params,
        bytes_per_param=4,
        compute_s=compute,
        bus_bw_gbps=bus,
        n_gpus=n,
        overlap=overlap,
    )
    assert max(compute, comm) - 1e-12 <= step <= compute + comm + 1e-12
    more = step_time_s(
        params=params,
        bytes_per_param=4,
        compute_s=compute,
        bus_bw_gbps=bus,
        n_gpus=n,
        overlap=min(1.0, overlap + 0.25),
    )
    assert more <= step + 1e-12


def test_step_time_rejects_bad_overlap() -> None:
    with pytest.raises(ValueError):
        step_time_s(params=1, bytes_per_param=4, compute_s=1, bus_bw_gbps=1, n_gpus=2, overlap=2)
