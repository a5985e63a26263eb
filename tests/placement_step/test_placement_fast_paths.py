"""The placement step's small fast paths give what the plain code gives.

Why each exists (cold CPU of a later pod of a gang, docs/benchmarks.md): ``slot_node_problem``
does not build the pod's PodConstraints when nothing can keep the pod off the node (no
nodeSelector, no affinity, no blocking taint); keys and gang requests are made once per
value. Each must answer exactly as the plain construction: a key handed out for a value
must be the one the constructor makes (``True`` equals ``1`` but makes another key),
invalid fields must still raise, and a node with a taint or a pod with a selector must
still be checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo.cluster.node_fit import NodeFacts, PodConstraints
from gputopo.cluster.reservations import GangKey, ReplicaKey
from gputopo.placement.types import GangRequest, NodeState, ReplicaSlot
from gputopo.topology.load import read_topology_file
from webhook.placement.slot_repair import slot_node_problem
from webhook.placement.step import gang_key, gang_request, replica_key

TOPO = read_topology_file(str(Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
                              / "dgx1-v100.txt"))
SLOT = ReplicaSlot(0, "n1", (0, 1))

NODE_SPECS = st.sampled_from([
    {}, {"unschedulable": True},
    {"taints": [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]},
    {"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}])
POD_SPECS = st.fixed_dictionaries({}, optional={
    "nodeSelector": st.sampled_from([{}, {"pool": "a"}, {"pool": "b"}, "not a map"]),
    "affinity": st.sampled_from([{}, {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}]}}}]),
    "tolerations": st.sampled_from([[], [{"operator": "Exists"}],
                                    [{"key": "gpu", "operator": "Exists"}]])})


@settings(max_examples=200, deadline=None)
@given(node_spec=NODE_SPECS, pod_spec=POD_SPECS, with_facts=st.booleans())
def test_slot_node_problem_is_the_plain_check(node_spec: dict[str, Any],
                                              pod_spec: dict[str, Any],
                                              with_facts: bool) -> None:
    facts = NodeFacts.of({"metadata": {"name": "n1", "labels": {"pool": "a"}},
                          "spec": node_spec}) if with_facts else None
    state = NodeState(name="n1", topology=TOPO, facts=facts)
    admits = facts is None or PodConstraints.of(pod_spec).admits(facts)
    assert (slot_node_problem(state, pod_spec, SLOT) == "") == admits
    assert slot_node_problem(None, pod_spec, SLOT) != ""


@settings(max_examples=200, deadline=None)
@given(fields=st.tuples(*[st.sampled_from(["ns", "j", "u", ""])] * 4))
def test_gang_keys_are_the_constructor_s(fields: tuple[str, str, str, str]) -> None:
    try:
        want = GangKey(*fields)
    except ValueError:
        with pytest.raises(ValueError):
            gang_key(*fields)
        return
    for _ in range(2):  # made, then remembered
        got = gang_key(*fields)
        assert got == want and str(got) == str(want)


@settings(max_examples=200, deadline=None)
@given(rtype=st.sampled_from(["worker", "Worker", "", "master"]),
       index=st.sampled_from([0, 1, 3, True, False, -1, 1.0]))
def test_replica_keys_are_the_constructor_s(rtype: str, index: Any) -> None:
    try:
        want = ReplicaKey(rtype, index)
    except ValueError:
        with pytest.raises(ValueError):
            replica_key(rtype, index)
        return
    for _ in range(2):
        got = replica_key(rtype, index)
        assert got == want and got.wire() == want.wire()
    # the other spelling of an equal value gets its own key
    if index in (0, 1) and type(index) is int and rtype:
        assert replica_key(rtype, bool(index)).wire() == ReplicaKey(rtype, bool(index)).wire()


@settings(max_examples=100, deadline=None)
@given(replicas=st.sampled_from([1, 2, True, 4]), gpus=st.sampled_from([1, 8, 1.0]),
       cap=st.sampled_from([None, 1, True]))
def test_gang_requests_are_the_constructor_s(replicas: Any, gpus: Any, cap: Any) -> None:
    want = GangRequest(replicas=replicas, gpus_per_replica=gpus, max_replicas_per_node=cap)
    for _ in range(2):
        got = gang_request(replicas, gpus, cap)
        assert got == want
        assert repr(got) == repr(want)  # True stays True, 1.0 stays 1.0
