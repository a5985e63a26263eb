"""A GroupedNodes kept up to date node by node answers exactly as the plain node list.

Why: the webhook keeps the solver's grouping of the cluster between gangs
(:class:`gputopo.placement.solver.GroupedNodes`, ``GangReserver``) and only redoes the
nodes a reservation changed. The search must not depend on which group comes first or in
what order a group holds its nodes, and a chain of :meth:`GroupedNodes.replaced` must end in
the same groups as grouping the final list from scratch. Hypothesis drives random clusters
(real fixture topologies, twin topology objects, several networks, zones and racks) through
random changes, and after each change compares whole placements for several gang shapes.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from solver_helpers import FIXTURE_FILES, fixture_topology

from gputopo.errors import InputError
from gputopo.placement.solver import GroupedNodes, solve
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.model import Topology

TOPOLOGY_NAMES = sorted(FIXTURE_FILES)
GANGS = [GangRequest(1, 1), GangRequest(1, 4), GangRequest(2, 2), GangRequest(3, 1),
         GangRequest(4, 2), GangRequest(2, 4, max_replicas_per_node=1), GangRequest(1, 8),
         # with a bar for a good one-node placement (GangRequest.good_gbps): the best
         # one-node key is kept per (size, bar); PCIe pairs make ~12 GB/s, NVLink 40-234
         GangRequest(1, 2, good_gbps=10.0), GangRequest(2, 2, good_gbps=30.0),
         GangRequest(1, 4, good_gbps=0.0)]


def twin(topology: Topology) -> Topology:
    """An equal topology that is another object (a node whose annotation was parsed anew)."""
    return dataclasses.replace(topology)


@st.composite
def scenarios(draw: st.DrawFn, twins: bool = True, most: int = 12
              ) -> tuple[list[NodeState], list[tuple[int, dict]]]:
    tops = [fixture_topology(name) for name in
            draw(st.lists(st.sampled_from(TOPOLOGY_NAMES), min_size=1, max_size=2, unique=True))]
    if twins:
        tops += [twin(t) for t in tops]  # equal topologies as other objects
    count = draw(st.integers(2, most))
    nodes = []
    for i in range(count):
        topo = draw(st.sampled_from(tops))
        used = draw(st.frozensets(st.sampled_from(topo.indices), max_size=len(topo.indices)))
        nodes.append(NodeState(
            name=f"n{i:02d}", topology=topo, used=used,
            zone=draw(st.sampled_from([None, "z1", "z2"])),
            rack=draw(st.sampled_from([None, "r1", "r2"])),
            network_gbps=draw(st.sampled_from([25.0, 100.0])),
            network_transport=draw(st.sampled_from(["tcp", "rdma"]))))
    changes = []
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, count - 1))
        topo = draw(st.sampled_from(tops))
        change = {
            "topology": topo,
            "used": draw(st.frozensets(st.sampled_from(topo.indices),
                                       max_size=len(topo.indices))),
        }
        if draw(st.booleans()):
            change["network_gbps"] = draw(st.sampled_from([25.0, 100.0, 200.0]))
        if draw(st.booleans()):
            change["rack"] = draw(st.sampled_from([None, "r1", "r2", "r3"]))
        changes.append((at, change))
    return nodes, changes


@settings(max_examples=120, deadline=None)
@given(scenarios())
def test_a_chain_of_replacements_solves_as_the_plain_list(
        scenario: tuple[list[NodeState], list[tuple[int, dict]]]) -> None:
    nodes, changes = scenario
    grouped = GroupedNodes(nodes)
    for gang in GANGS:  # groups built once, then shared by the copies below
        assert solve(grouped, gang) == solve(nodes, gang)
    for at, change in changes:
        old, old_nodes = grouped, nodes
        nodes = list(nodes)
        nodes[at] = dataclasses.replace(nodes[at], **change)
        grouped = grouped.replaced([nodes[at]])
        assert list(grouped) == nodes and len(grouped) == len(nodes)
        assert all(a is b for a, b in zip(grouped, nodes, strict=True))
        for gang in GANGS:
            assert solve(grouped, gang) == solve(nodes, gang), (gang, at, change)
        assert all(a is b for a, b in zip(old, old_nodes, strict=True))  # old untouched


@settings(max_examples=120, deadline=None)
@given(scenarios(), st.data())
def test_replacements_not_solved_in_between_solve_as_the_plain_list(
        scenario: tuple[list[NodeState], list[tuple[int, dict]]], data: st.DataObject) -> None:
    """A gang size not asked for after some replacements (the webhook sees many gang sizes):
    its kept ties, carried through the whole chain, must still give the plain list's
    answer."""
    nodes, changes = scenario
    grouped = GroupedNodes(nodes)
    for gang in GANGS:
        solve(grouped, gang)
    for at, change in changes:
        nodes = list(nodes)
        nodes[at] = dataclasses.replace(nodes[at], **change)
        grouped = grouped.replaced([nodes[at]])
        for gang in data.draw(st.lists(st.sampled_from(GANGS), max_size=2)):
            assert solve(grouped, gang) == solve(nodes, gang), (gang, at, change)
    for gang in GANGS:
        assert solve(grouped, gang) == solve(nodes, gang), gang


@settings(max_examples=80, deadline=None)
@given(scenarios(twins=False, most=24))
def test_the_racks_counts_kept_node_by_node_solve_as_the_plain_list(
        scenario: tuple[list[NodeState], list[tuple[int, dict]]]) -> None:
    """Without twin topologies a kept grouping's multi-node search reads its racks' counts
    (racks.RackCounts), kept up to date node by node by :meth:`GroupedNodes.replaced` from
    the first multi-node solve on, through changes of used GPUs, network and rack: each
    copy, and the copy it was made from, must answer as its plain list."""
    nodes, changes = scenario
    multi = [gang for gang in GANGS if gang.replicas > 1]
    grouped = GroupedNodes(nodes)
    for gang in multi:
        assert solve(grouped, gang) == solve(nodes, gang)
    for at, change in changes:
        old, old_nodes = grouped, nodes
        nodes = list(nodes)
        nodes[at] = dataclasses.replace(nodes[at], **change)
        grouped = grouped.replaced([nodes[at]])
        for gang in multi:
            assert solve(grouped, gang) == solve(nodes, gang), (gang, at, change)
            assert solve(old, gang) == solve(old_nodes, gang), (gang, at, change)


def test_the_copy_it_was_made_from_keeps_answering_for_its_own_nodes() -> None:
    topo = fixture_topology(TOPOLOGY_NAMES[0])
    nodes = [NodeState(name=f"n{i}", topology=topo) for i in range(3)]
    grouped = GroupedNodes(nodes)
    gang = GangRequest(1, len(topo.indices))
    before = solve(grouped, gang)
    full = [dataclasses.replace(n, used=frozenset(topo.indices)) for n in nodes[:2]]
    after = grouped.replaced(full)
    assert solve(after, gang).slots[0].node == "n2"
    assert solve(grouped, gang) == before  # the old one is untouched
    assert not solve(after.replaced([dataclasses.replace(nodes[2], used=frozenset(
        topo.indices[:1]))]), gang).feasible


def test_duplicate_and_unknown_names_are_refused() -> None:
    topo = fixture_topology(TOPOLOGY_NAMES[0])
    with pytest.raises(InputError, match="appears twice"):
        GroupedNodes([NodeState(name="a", topology=topo), NodeState(name="a", topology=topo)])
    grouped = GroupedNodes([NodeState(name="a", topology=topo)])
    with pytest.raises(ValueError, match="'b' is not one of these nodes"):
        grouped.replaced([NodeState(name="b", topology=topo)])


@pytest.mark.parametrize(("gang", "steps"), [(GangRequest(1, 8), 60), (GangRequest(1, 2), 80),
                                            (GangRequest(2, 4), 40),
                                            (GangRequest(1, 2, good_gbps=0.0), 80)])
def test_gangs_taken_one_after_another_solve_as_the_plain_list(gang: GangRequest,
                                                                steps: int) -> None:
    """As the webhook does: solve, mark the answer's GPUs used, replace those nodes, solve
    again, over 60 alike nodes on three networks (three groups tie for the one-node key,
    their smallest names interleaved): the winner's group is replaced by one without the
    taken node at every step, and the best one-node key and its ties carried by
    :meth:`GroupedNodes.replaced` must still give the plain list's answer. Whole-node gangs
    keep the ties (a taken node leaves them)."""
    topo = fixture_topology("dgx-a100")
    nodes = [NodeState(name=f"n{i:03d}", topology=topo, used=frozenset(),
                       network_gbps=(25.0, 100.0, 200.0)[i % 3]) for i in range(60)]
    grouped = GroupedNodes(nodes)
    for step in range(steps):
        want = solve(nodes, gang)
        got = solve(grouped, gang)
        assert got == want, step
        if not want.slots:
            break
        taken: dict[str, set[int]] = {}
        for slot in want.slots:
            taken.setdefault(slot.node, set()).update(slot.gpus)
        changed = []
        for i, node in enumerate(nodes):
            if node.name in taken:
                used = node.used | frozenset(taken[node.name])
                if step % 9 == 8:  # now and then a node frees up again
                    used = frozenset()
                nodes[i] = dataclasses.replace(node, used=used)
                changed.append(nodes[i])
        grouped = grouped.replaced(changed)
