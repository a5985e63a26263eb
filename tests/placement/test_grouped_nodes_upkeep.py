"""What :meth:`GroupedNodes.replaced` carries over instead of working out again is what
working it out again gives.

Why: a replacement keeps, per gang size asked before, the groups tied for the best
one-node key in name order (the winner is the first), a rebuilt group's smallest node from
the group it replaces, and the tallies as one count change per touched bucket; a size's
ties are brought up to date only when it is asked. Each is checked here directly along
random replacement chains (tests/placement/test_grouped_nodes.py checks the placements):
the carried winner against a fresh GroupedNodes of the same nodes, every group's first
node against the smallest name of its nodes, the tallies against a recount, and the NVLink
domains with no GPU in use (kept as counts, they decide the one-node key) against a fresh
count.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st
from solver_helpers import FIXTURE_FILES, fixture_topology

from gputopo.placement.solver import GroupedNodes, grouped_nodes
from gputopo.placement.solver.grouping import _Tally
from gputopo.placement.types import UNCAPPED, NodeState

SIZES = (1, 2, 4, 8)
#: NVLink domains: a group's one-node key depends on whether its domain has a GPU in use
DOMAINS = (None, None, "d1", "d2")


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[NodeState], list[list[tuple[int, dict]]]]:
    tops = [fixture_topology(n) for n in draw(st.lists(
        st.sampled_from(sorted(FIXTURE_FILES)), min_size=1, max_size=2, unique=True))]
    count = draw(st.integers(2, 14))
    # few used sets and networks: big groups and many ties, as on a real cluster
    def used(topo: object) -> frozenset[int]:
        return draw(st.sampled_from([frozenset(), frozenset(topo.indices[:1]),  # type: ignore[attr-defined]
                                     frozenset(topo.indices[:2])]))  # type: ignore[attr-defined]
    nodes = []
    for i in draw(st.permutations(range(count))):
        topo = draw(st.sampled_from(tops))
        nodes.append(NodeState(name=f"n{i:02d}", topology=topo, used=used(topo),
                               network_gbps=draw(st.sampled_from([25.0, 100.0])),
                               nvlink_domain=draw(st.sampled_from(DOMAINS))))
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        step = []
        for at in draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=3)):
            topo = nodes[at].topology
            change: dict = {"used": used(topo)}
            if draw(st.booleans()):
                change["network_gbps"] = draw(st.sampled_from([25.0, 100.0]))
            if draw(st.booleans()):
                change["host_ports"] = frozenset({("TCP", draw(st.integers(1, 3)))})
            if draw(st.booleans()):  # relabelled into another NVLink domain (or none)
                change["nvlink_domain"] = draw(st.sampled_from(DOMAINS))
            if draw(st.booleans()):  # its other resources hold only so many GPUs' pods
                change["gpu_cap"] = draw(st.sampled_from([0, 2, 4, UNCAPPED]))
            step.append((at, change))
        steps.append(step)
    return nodes, steps


def check(grouped: GroupedNodes, nodes: list[NodeState], asked: tuple[int, ...]) -> None:
    fresh = GroupedNodes(nodes)
    for n in asked:
        got, want = grouped.best_single(n), fresh.best_single(n)
        if want is None:
            assert got is None, n
            continue
        assert got is not None, n
        assert got[0].first_node() is want[0].first_node(), n
        assert got[1] == want[1], n
    for grp in grouped.groups():
        assert grp.first_node() is min(grp.nodes, key=lambda x: x.name)
    assert grouped.tally() == _Tally.of(fresh.groups())
    assert grouped.free_domains() == fresh.free_domains()


@settings(max_examples=200, deadline=None)
@given(chains(), st.lists(st.sampled_from(SIZES), min_size=1, max_size=4, unique=True),
       st.sampled_from([1, 3, grouped_nodes._STALE_KEYS]), st.data())
def test_carried_winner_first_nodes_and_tallies_are_fresh_ones(
        chain: tuple[list[NodeState], list[list[tuple[int, dict]]]],
        asked: list[int], stale_keys: int, data: st.DataObject) -> None:
    """Sizes are asked at some steps only (an entry then gathers the keys touched in
    between), and with a small bound on those keys entries are also dropped."""
    nodes, steps = chain
    bound = grouped_nodes._STALE_KEYS
    grouped_nodes._STALE_KEYS = stale_keys
    try:
        grouped = GroupedNodes(nodes)
        check(grouped, nodes, tuple(asked))
        for step in steps:
            nodes = list(nodes)
            changed = []
            for at, change in step:
                nodes[at] = dataclasses.replace(nodes[at], **change)
                changed.append(nodes[at])
            grouped = grouped.replaced(changed)
            now = data.draw(st.lists(st.sampled_from(asked), unique=True))
            check(grouped, nodes, tuple(now))
        check(grouped, nodes, tuple(asked))
    finally:
        grouped_nodes._STALE_KEYS = bound
