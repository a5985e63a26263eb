"""Where a slot whose node is gone may go: the gang's own nodes, then its racks and zones,
then anywhere; never past the gang's replicas-per-node cap."""

from __future__ import annotations

from pathlib import Path

from gputopo.cluster.node_fit import NodeFacts
from gputopo.cluster.source import node_state_named
from gputopo.placement.types import NodeState, ReplicaSlot
from gputopo.topology.load import read_topology_file
from webhook.placement.slot_repair import repair_scopes, slot_node_problem

TOPO = read_topology_file(str(Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
                              / "dgx1-v100.txt"))


def _node(name: str, zone: str | None, rack: str | None, **facts) -> NodeState:
    meta = {"name": name, "labels": facts.get("labels", {})}
    return NodeState(name=name, topology=TOPO, zone=zone, rack=rack,
                     facts=NodeFacts.of({"metadata": meta, "spec": facts.get("spec", {})}))


NODES = [_node("a", "z1", "r1"), _node("b", "z1", "r1"), _node("c", "z1", "r2"),
         _node("d", "z2", "r3"), _node("e", None, None)]


def test_scopes_go_from_the_gang_s_nodes_outwards() -> None:
    others = [ReplicaSlot(1, "a", (0,)), ReplicaSlot(2, "gone", (1,))]
    scopes = [[n.name for n in s] for s in repair_scopes(NODES, others, per_node=8)]
    assert scopes == [["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d", "e"]]


def test_the_per_node_cap_keeps_full_nodes_out_of_every_scope() -> None:
    others = [ReplicaSlot(1, "a", (0,))]
    scopes = [[n.name for n in s] for s in repair_scopes(NODES, others, per_node=1)]
    assert scopes == [["b"], ["b", "c"], ["b", "c", "d", "e"]]


def _named(nodes: list[NodeState], name: str) -> NodeState | None:
    return node_state_named(_List(nodes), name)


class _List:
    """A reader that keeps no index by name: node_state_named falls back to a pass."""

    def __init__(self, nodes: list[NodeState]) -> None:
        self.nodes = nodes

    def node_states(self) -> list[NodeState]:
        return list(self.nodes)


def test_the_slot_node_problem_names_a_missing_or_refusing_node() -> None:
    slot = ReplicaSlot(0, "a", (0,))
    assert slot_node_problem(_named(NODES, "a"), {}, slot) == ""
    assert "gone" in slot_node_problem(_named(NODES[1:], "a"), {}, slot)
    cordoned = [_node("a", "z1", "r1", spec={"unschedulable": True})]
    assert "no longer admits" in slot_node_problem(_named(cordoned, "a"), {}, slot)
    tolerated = {"tolerations": [{"key": "node.kubernetes.io/unschedulable",
                                  "operator": "Exists"}]}
    assert slot_node_problem(_named(cordoned, "a"), tolerated, slot) == ""
    assert "no longer admits" in slot_node_problem(_named(NODES, "a"),
                                                   {"nodeSelector": {"pool": "x"}}, slot)


def test_a_moved_slot_stays_on_the_gpu_model_of_its_gang() -> None:
    """A V100 gang's slot moves to another V100 node, not to a free A100 nearer by rack;
    with mixGpuModels it may go anywhere."""
    from dataclasses import replace

    from gputopo.topology.gpus import MODELS

    v100, a100 = MODELS["V100-SXM2-16GB"], MODELS["A100-SXM4-80GB"]
    nodes = [replace(NODES[0], gpu_model=v100), replace(NODES[1], gpu_model=a100),
             replace(NODES[2], gpu_model=a100), replace(NODES[3], gpu_model=v100)]
    others = [ReplicaSlot(1, "a", (0,))]
    scopes = [[n.name for n in s] for s in repair_scopes(nodes, others, per_node=1)]
    assert scopes == [["d"]]
    mixed = [[n.name for n in s] for s in repair_scopes(nodes, others, per_node=1,
                                                        mix_models=True)]
    assert mixed == [["b"], ["b", "c"], ["b", "c", "d"]]
