"""bench/placement.py and the baselines still run (tiny sizes; the real runs are on demand)."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest
from solver_helpers import dgx1_v100, dgx_a100, node

from bench import placement as bench
from bench.baselines import BASELINES
from bench.baselines.besteffort import allocate, partitions
from gputopo.placement.types import GangRequest, with_transport_shares


def test_besteffort_matches_upstream_partition_counts_and_choices():
    # interconnect.md: 105 partitions of 8 GPUs into pairs; upstream's DGX-1 test picks NV2 pairs
    assert sum(1 for _ in partitions(list(range(8)), 2)) == 105
    topo = dgx1_v100()
    pair = allocate(topo, list(range(8)), 2)
    assert topo.link(*pair) == "NV2"
    assert allocate(topo, [3, 5, 6], 1) == (3,)  # one GPU: first free, topology ignored
    quad = allocate(topo, list(range(8)), 4)
    assert all(topo.link(a, b).startswith("NV") for a, b in combinations(quad, 2))


def test_default_scheduler_spreads_the_seeds_job_over_both_nodes():
    nodes = [node("a", dgx1_v100()), node("b", dgx1_v100())]
    p = BASELINES["default-scheduler"](nodes, GangRequest(4, 1))
    assert {s.node for s in p.slots} == {"a", "b"}
    assert p.bus_bandwidth_gbps < 10


@pytest.mark.parametrize(("efficiency", "shares", "gbps"),
                         [(0.6, (), 0.6 * 25), (None, (("rdma", 0.8),), 0.8 * 25)])
def test_baselines_rate_networks_as_the_solver_does(efficiency, shares, gbps):
    """A node's own network-efficiency and a policy's transport share count for the
    baselines' predicted bandwidth too (they used to fall back to the transport's default,
    so a comparison on such a cluster was not like for like)."""
    nodes = with_transport_shares(
        [replace(node(n, dgx1_v100()), network_transport="rdma", network_efficiency=efficiency)
         for n in ("a", "b")], shares)
    p = BASELINES["default-scheduler"](nodes, GangRequest(4, 1))
    assert {s.node for s in p.slots} == {"a", "b"}
    assert p.bus_bandwidth_gbps == pytest.approx(gbps / 8)


def test_replay_runs_on_a_four_node_cluster():
    cluster = [node(f"n{i}", dgx1_v100() if i % 2 else dgx_a100(), rack=f"r{i // 2}")
               for i in range(4)]
    rows = bench.run_replay(40, seed=1, cluster=cluster)
    assert [r["policy"] for r in rows] == ["gputopo", *BASELINES]
    for r in rows:
        assert r["placed"] == r["jobs"] > 0
        assert 0 < r["meanEfficiency"] <= 1
        assert 0 <= r["bestTopologyShare"] <= 1


def test_seeds_scenario_and_tables():
    rows = bench.seeds_scenario()
    ours = next(r for r in rows if r["policy"] == "gputopo")
    default = next(r for r in rows if r["policy"] == "default-scheduler")
    assert ours["placement"].count("GPUs") == 1  # one node
    assert default["placement"].count("GPUs") == 2  # spread over both
    assert ours["busBandwidthGBps"] > 2 * default["busBandwidthGBps"]
    assert "| policy |" in bench.md_table(rows, [("policy", "policy", "")])
