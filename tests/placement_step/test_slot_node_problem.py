"""Whether a reserved slot's node can still take a pod (webhook/placement/slot_repair.py):
a node gone, cordoned, newly tainted, or outside the pod's nodeSelector or required node
affinity is a problem; a node the pod may run on is none. Table-driven, the nodes as the
API server returns them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gputopo.cluster.node_fit import NodeFacts
from gputopo.placement.types import NodeState, ReplicaSlot
from gputopo.topology.load import read_topology_file
from webhook.placement.slot_repair import slot_node_problem

TOPO = read_topology_file(str(Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
                              / "dgx1-v100.txt"))
SLOT = ReplicaSlot(0, "n1", (0, 1))
POOL_B = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "pool", "operator": "In", "values": ["b"]}]}]}}}
TAINT = {"taints": [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]}


def _state(node_spec: dict[str, Any]) -> NodeState:
    facts = NodeFacts.of({"metadata": {"name": "n1", "labels": {"pool": "a"}},
                          "spec": node_spec})
    return NodeState(name="n1", topology=TOPO, facts=facts)


@pytest.mark.parametrize("node_spec, pod_spec, problem", [
    ({}, {}, False),
    ({"unschedulable": True}, {}, True),
    (TAINT, {}, True),
    (TAINT, {"tolerations": [{"key": "gpu", "operator": "Exists"}]}, False),
    ({"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}, {}, False),
    ({}, {"nodeSelector": {"pool": "a"}}, False),
    ({}, {"nodeSelector": {"pool": "b"}}, True),
    ({}, {"affinity": POOL_B}, True),
])
def test_the_slot_node_admits_the_pod_or_says_why_not(node_spec: dict[str, Any],
                                                      pod_spec: dict[str, Any],
                                                      problem: bool) -> None:
    said = slot_node_problem(_state(node_spec), pod_spec, SLOT)
    assert bool(said) is problem, said
    if problem:
        assert said.startswith("node n1 no longer admits this pod")


def test_a_gone_node_is_a_problem_and_a_node_without_facts_is_not() -> None:
    assert "gone" in slot_node_problem(None, {}, SLOT)
    assert slot_node_problem(NodeState(name="n1", topology=TOPO), {"nodeSelector": {"x": "y"}},
                             SLOT) == ""
