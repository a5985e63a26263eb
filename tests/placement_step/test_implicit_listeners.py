"""Listeners a pod opens without declaring them are claims on its node's host network across
jobs. mpi-operator v2beta1 workers run ``sshd -De`` on the port the image bakes in (2222 in
the operator's base image) and declare no containerPort, so neither the scheduler's
NodePorts filter nor gputopo's port view sees two of them on one node; under host
networking the second cannot bind (mpi-operator#593). Two different single-worker jobs,
each alone on its node as far as its own plan knows, must still never get two host-network
sshd workers on one node."""

from __future__ import annotations

from apiserver_rules import assert_node_ports_free, stored
from placement_checks import record
from placement_jobs import mpijob

from gputopo.cluster.objects import host_ports_held_by_pod


def _worker(result, name):
    return result.pods[f"{name}-worker-0"]


def test_two_single_worker_mpijobs_never_put_two_host_network_sshd_on_one_node(mutate):
    result = mutate([mpijob("one", workers=1, gpus=2), mpijob("two", workers=1, gpus=2)])
    assert result.rc == 0, result.stderr
    one, two = _worker(result, "one"), _worker(result, "two")
    # the first job's worker listens on the host network and says so in its record
    assert one["spec"].get("hostNetwork") is True
    assert record(one)["network"]["listeners"] == [["TCP", 2222]]
    node = record(one)["node"]
    assert host_ports_held_by_pod(one) == (node, frozenset({("TCP", 2222)}))
    # the second, on the same node (best GPUs there), keeps its sshd in its own netns
    assert record(two)["node"] == node
    assert two["spec"].get("hostNetwork") is not True
    assert record(two)["network"]["plan"] == "pod"
    assert "TCP 2222" in record(two)["network"]["why"]
    # as the API server stores them: one host-network pod per node (its sshd, declared
    # nowhere, is the one claim NodePorts cannot see), and no declared host port twice
    kept = [stored(p) for p in (one, two)]
    hosts = [p for p in kept if p["spec"].get("hostNetwork") is True]
    assert len({record(p)["node"] for p in hosts}) == len(hosts) == 1
    assert_node_ports_free({node: kept})


def test_a_listener_is_held_only_under_a_host_plan() -> None:
    pod = {"metadata": {"annotations": {"gputopo.io/placement": (
        '{"placed": true, "node": "n1", "network": {"plan": "pod", '
        '"listeners": [["TCP", 2222]]}}')}}, "spec": {}}
    assert host_ports_held_by_pod(pod) is None
    pod["metadata"]["annotations"]["gputopo.io/placement"] = (
        '{"placed": true, "node": "n1", "network": {"plan": "host", '
        '"listeners": [["TCP", 2222], ["TCP", true], "junk"]}}')
    assert host_ports_held_by_pod(pod) == ("n1", frozenset({("TCP", 2222)}))
    pod["status"] = {"phase": "Succeeded"}
    assert host_ports_held_by_pod(pod) is None


def test_under_network_host_a_node_holding_the_listener_is_left_out() -> None:
    """``network: host`` (or a pod that sets hostNetwork itself) cannot fall back to the pod
    network: the listener becomes a port the gang cannot move, so a node where another
    job's host-network sshd listens is no place for it (GangNetwork.usable)."""
    from gputopo.placement.types import NodeState
    from gputopo.topology.model import Topology
    from webhook.placement import network

    job = network.Job("kubeflow.org/v2beta1", "MPIJob", "forced",
                      {"Worker": {"replicas": 1}}, {"Worker": 1})
    need = network.needs(job, mode=network.HOST, pod_spec={"hostNetwork": True},
                         original_spec={}, pod_type="Worker")
    assert need.kind == network.HOST and ("TCP", 2222) in need.fixed
    topo = Topology.from_annotation({"version": 1, "gpus": [{"index": 0}], "links": [["X"]]})
    busy = NodeState(name="busy", topology=topo, host_ports=frozenset({("TCP", 2222)}))
    free = NodeState(name="free", topology=topo)
    gang = network.GangNetwork(job=job, need=need, host_ports=(30000, 30999))
    assert [n.name for n in gang.usable([busy, free])] == ["free"]
    plan = gang.decide((), {})
    assert isinstance(plan, network.Plan) and plan.listeners == (("TCP", 2222),)
