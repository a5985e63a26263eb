"""A one-node placement scored from the cache kept on its node kind is the placement a cold
solve gives.

Why: the solver keeps a one-node placement's score and bus bandwidth on the node *kind*
(topology and used GPUs), shared by every node of that kind and by later solves, keyed by
the gang size, the share and the node's network fields. Nodes of one kind that differ in
name, rack, zone or network must still get their own answer, whole (slots, bandwidth,
reason, score): solving a stream of clusters with warm caches must give what each solve
gives with every cache emptied first.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from solver_helpers import FIXTURE_FILES, fixture_topology

from gputopo.placement.solver import GroupedNodes, candidate, grouping, options, solve
from gputopo.placement.types import GangRequest, NodeState

GANGS = [GangRequest(1, 1), GangRequest(1, 2), GangRequest(2, 2), GangRequest(1, 4),
         GangRequest(4, 1), GangRequest(1, 8)]


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeState]:
    names = sorted(FIXTURE_FILES)
    tops = [fixture_topology(n) for n in draw(st.lists(st.sampled_from(names), min_size=1,
                                                       max_size=2, unique=True))]
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        topo = draw(st.sampled_from(tops))
        used = draw(st.sampled_from([frozenset(), frozenset(topo.indices[:1]),
                                     frozenset(topo.indices[1:3])]))
        nodes.append(NodeState(
            name=f"n{draw(st.integers(0, 99)):02d}-{i}", topology=topo, used=used,
            zone=draw(st.sampled_from([None, "z1"])), rack=draw(st.sampled_from([None, "r1"])),
            network_gbps=draw(st.sampled_from([25.0, 100.0])),
            network_transport=draw(st.sampled_from(["tcp", "rdma"])),
            network_efficiency=draw(st.sampled_from([None, 0.5])),
            transport_share=draw(st.sampled_from([None, 0.8]))))
    return nodes


def whole(nodes: list[NodeState], gang: GangRequest, grouped: bool) -> tuple[object, ...]:
    got = solve(GroupedNodes(nodes) if grouped else nodes, gang)
    return (got, got.bus_bandwidth_gbps, got.reason, got.details)


def cold() -> None:
    grouping._KINDS.clear()
    for cached in (options._options, candidate._links_between, options._alike):
        cached.cache_clear()


@settings(max_examples=150, deadline=None)
@given(st.lists(clusters(), min_size=1, max_size=3), st.booleans())
def test_warm_solves_answer_as_cold_ones(stream: list[list[NodeState]], grouped: bool) -> None:
    warm = [whole(nodes, gang, grouped) for nodes in stream for gang in GANGS]
    want = []
    for nodes in stream:
        for gang in GANGS:
            cold()
            want.append(whole(nodes, gang, grouped))
    assert warm == want
