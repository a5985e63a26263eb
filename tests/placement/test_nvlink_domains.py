"""Gangs on NVLink domains that span nodes (GB200 NVL72: 18 trays of 4 GPUs per domain).

The cluster is built as the issue states it: GB200 trays (4 GPUs, every pair NV18 of NVLink
5) in NVL72 domains, each tray with 400 Gbit/s of GPUDirect networking; the answers are the
solver's own, checked for what they must be (one domain, the domain that can take the gang
whole, the fewest domains).
"""

from __future__ import annotations

import pytest
from solver_helpers import gb200_tray, node

from gputopo.placement.objective import span_of
from gputopo.placement.solver import GroupedNodes, solve
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.cost import NodeShare, gang_bus_bandwidth

FULL = (0, 1, 2, 3)


def nvl72(domain: str, *, trays: int = 18, used_trays: int = 0, rack: str | None = None,
          gbps: float = 400.0) -> list[NodeState]:
    """One NVL72 domain: ``trays`` GB200 trays, the first ``used_trays`` fully in use."""
    return [
        node(f"{domain}-tray-{i:02d}", gb200_tray(), FULL if i < used_trays else (),
             zone="zone-a", rack=rack or f"rack-{domain}", network_gbps=gbps,
             network_transport="gdr", nvlink_domain=domain)
        for i in range(trays)
    ]


def domains_of(nodes: list[NodeState], placement) -> dict[str, int]:
    by_name = {n.name: n for n in nodes}
    out: dict[str, int] = {}
    for name in {s.node for s in placement.slots}:
        dom = by_name[name].nvlink_domain
        out[dom] = out.get(dom, 0) + 1
    return out


def test_a_4x4_gang_lands_in_one_domain_at_nvlink_speed() -> None:
    nodes = nvl72("a") + nvl72("b")
    p = solve(nodes, GangRequest(replicas=4, gpus_per_replica=4))
    assert p.feasible
    assert len(domains_of(nodes, p)) == 1
    assert p.details["span"] == "nvlink-domain"
    # NVLink 5: 18 x 53.125 GB/s x 0.78, not the 400 Gbit/s NIC (47 GB/s)
    assert p.bus_bandwidth_gbps == pytest.approx(745.875)
    assert "one NVLink domain (4 trays)" in p.reason


def test_a_gang_goes_whole_to_the_domain_that_can_take_it() -> None:
    """Domain a has 10 free trays, b all 18: a 16 x 4 gang goes to b, none of it to a,
    even though a's trays come first by name."""
    nodes = nvl72("a", used_trays=8) + nvl72("b")
    p = solve(nodes, GangRequest(replicas=16, gpus_per_replica=4))
    assert p.feasible
    assert domains_of(nodes, p) == {"b": 16}
    assert p.bus_bandwidth_gbps == pytest.approx(745.875)


def test_a_gang_larger_than_any_domain_uses_the_fewest_domains() -> None:
    """20 trays with three domains of 6, 6 and 16 free trays: two domains (16 + 4) and not
    three (6 + 6 + 8), which the network rates the same."""
    nodes = nvl72("a", used_trays=12) + nvl72("b", used_trays=12) + nvl72("c", used_trays=2)
    gang = GangRequest(replicas=20, gpus_per_replica=4)
    p = solve(nodes, gang)
    assert p.feasible
    got = domains_of(nodes, p)
    assert len(got) == 2 and got["c"] == 16, got
    assert p.details["score"]["nvlinkDomains"] == 2
    assert "crosses 2 NVLink domains" in p.reason
    # the network bounds it: 400 Gbit/s x 0.94 (gdr) / 8 in one zone (0.5: different racks)
    assert p.bus_bandwidth_gbps == pytest.approx(400 * 0.94 / 8 * 0.5)
    # the webhook's kept grouping gives the same answer
    assert solve(GroupedNodes(nodes), gang) == p


def test_small_gangs_keep_whole_domains_free() -> None:
    """A 2 x 4 gang on a cluster with plain 8-GPU H100-class nodes and NVL72 trays: the
    domain's NVLink (746 GB/s) beats any one H100 node's NVSwitch (373 GB/s), so it goes to
    trays; in one domain, not split over two."""
    from solver_helpers import fixture_topology

    plain = [node(f"h100-{i}", fixture_topology("hopper-nv18"), network_gbps=400.0,
                  network_transport="gdr") for i in range(2)]
    nodes = plain + nvl72("a", trays=4) + nvl72("b", trays=4)
    p = solve(nodes, GangRequest(replicas=2, gpus_per_replica=4))
    assert len(domains_of(nodes, p)) == 1
    assert None not in domains_of(nodes, p)


def test_two_trays_in_one_domain_are_at_least_5x_two_trays_across_domains() -> None:
    """Published: ~811 GB/s over MNNVL against ~85 over InfiniBand for 8 GPUs on 2 trays;
    the model's ratio on 400 Gbit/s GPUDirect must be at least 5x."""
    a, b = nvl72("a", trays=1)[0], nvl72("b", trays=1)[0]
    a2 = nvl72("a", trays=2)[1]

    def bus(nodes: list[NodeState]) -> float:
        shares = [NodeShare(n.topology, FULL, n.network_gbps, n.network_transport)
                  for n in nodes]
        return gang_bus_bandwidth(shares, span=span_of(nodes))

    inside, across = bus([a, a2]), bus([a, b])
    assert span_of([a, a2]) == "nvlink-domain"
    assert inside >= 5 * across, (inside, across)
    # and the solver sees the same: with one free tray per domain it must cross
    nodes = nvl72("a", trays=2, used_trays=1) + nvl72("b", trays=2, used_trays=1)
    p = solve(nodes, GangRequest(replicas=2, gpus_per_replica=4))
    assert p.bus_bandwidth_gbps == pytest.approx(across)
    nodes = nvl72("a", trays=2) + nvl72("b", trays=2)
    assert solve(nodes, GangRequest(replicas=2, gpus_per_replica=4)).bus_bandwidth_gbps \
        == pytest.approx(inside)


def test_racks_without_domains_are_placed_as_before() -> None:
    """The same trays without a domain: every node an island, the NIC between them."""
    nodes = [node(n.name, n.topology, zone=n.zone, rack=n.rack, network_gbps=400.0,
                  network_transport="gdr") for n in nvl72("a", trays=4)]
    p = solve(nodes, GangRequest(replicas=2, gpus_per_replica=4))
    assert p.details["span"] == "rack"
    assert p.bus_bandwidth_gbps == pytest.approx(400 * 0.94 / 8)


def test_fewest_domains_comes_before_cluster_health() -> None:
    """Domains a (2 free trays), b (6) and c (2 trays with a GPU in use, 2 free): 31 one-GPU
    replicas fit in b and c (6 x 4 + 2 x 3 + ... = 32 free GPUs) without touching a. Blocks
    kept alone would rather fill c's broken trays and take a whole tray of a."""
    nodes = nvl72("a", trays=2) + nvl72("b", trays=6)
    nodes += [node(f"c-tray-{i:02d}", gb200_tray(), (0,) if i < 2 else (), zone="zone-a",
                   rack="rack-c", network_gbps=400.0, network_transport="gdr",
                   nvlink_domain="c") for i in range(4)]
    p = solve(nodes, GangRequest(replicas=31, gpus_per_replica=1))
    assert set(domains_of(nodes, p)) == {"b", "c"}


def test_a_policys_transport_shares_keep_the_domain() -> None:
    """with_transport_shares copies nodes by hand: the domain must survive the copy, or a
    policy with transport shares would place NVL72 trays as islands."""
    from gputopo.placement.types import with_transport_shares

    nodes = nvl72("a", trays=4)
    shared = with_transport_shares(nodes, {"gdr": 0.5})
    assert all(n is not m for n, m in zip(nodes, shared, strict=True))
    assert [n.nvlink_domain for n in shared] == ["a"] * 4
    p = solve(shared, GangRequest(replicas=2, gpus_per_replica=4))
    assert p.details["span"] == "nvlink-domain"
