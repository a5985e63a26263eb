"""What the network plan reads of a job and its pods (webhook/placement/network.py):
the plan stored with a reservation, the templates' own host ports, a pod's own MASTER_PORT,
an edited job object. Plain behaviour tests of gang_network, needs and plan_for."""

from __future__ import annotations

import copy
from typing import Any

from webhook.placement import network
from webhook.placement.network import GangNetwork, Needs, Plan

STORED = [
    {"plan": "host", "why": "host networking; one rendezvous port per job", "role": "pytorch",
     "ports": {"master/0": 23500}},
    {"plan": "pod", "why": "pod networking"},
]


JOBS: list[tuple[str, str, str, dict[str, int]]] = [
    ("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", {"Master": 1, "Worker": 1}),
    ("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", {"Worker": 2}),
    ("kubeflow.org/v1", "TFJob", "tfReplicaSpecs", {"Worker": 1}),
    ("kubeflow.org/v2beta1", "MPIJob", "mpiReplicaSpecs", {"Worker": 1}),
]


def _specs(types: dict[str, int], only: str = "") -> dict[str, Any]:
    port = {n: p for n, p in (("pytorchjob-port", 23456), ("tfjob-port", 2222))
            if not only or n == only}
    return {t: {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "c", "ports": [{"name": n, "containerPort": p} for n, p in port.items()],
         "resources": {"limits": {"nvidia.com/gpu": g}}}]}}}
        for t, g in types.items()}


def test_a_pod_that_sets_master_port_is_not_given_the_plan_of_one_that_does_not() -> None:
    """Two pods of one job, one with its own MASTER_PORT: each gets its own plan."""
    api, kind, _, types = JOBS[0]
    specs = _specs(types, only="pytorchjob-port")
    plain_pod = {"hostNetwork": True, "containers": [{"name": "c", "ports": [
        {"name": "pytorchjob-port", "containerPort": 23456, "hostPort": 23456}]}]}
    own_port = copy.deepcopy(plain_pod)
    own_port["containers"][0]["env"] = [{"name": "MASTER_PORT", "value": "23500"}]
    first = network.gang_network(api, kind, "j", specs, types, mode=network.AUTO,
                                 pod_spec=plain_pod, original_spec={}, pod_type="Worker",
                                 host_ports=(23456, 24000))
    second = network.gang_network(api, kind, "j", specs, types, mode=network.AUTO,
                                  pod_spec=own_port, original_spec={}, pod_type="Worker",
                                  host_ports=(23456, 24000))
    assert first.need.role == "pytorch" and not first.need.pinned
    assert second.need.role == "pytorch-fixed" and second.need.pinned == {"master/0": 23500}
    again = network.gang_network(api, kind, "j", specs, types, mode=network.AUTO,
                                 pod_spec=copy.deepcopy(plain_pod), original_spec={},
                                 pod_type="Worker", host_ports=(23456, 24000))
    assert again == first


def test_an_edited_job_object_is_read_anew() -> None:
    api, kind, _, types = JOBS[1]
    specs = _specs(types)
    pod = {"containers": [{"name": "c"}]}
    before = network.gang_network(api, kind, "j", specs, types, mode=network.AUTO,
                                  pod_spec=pod, original_spec={}, pod_type="Worker",
                                  host_ports=(23456, 24000))
    edited = copy.deepcopy(specs)
    edited["Worker"]["template"]["spec"]["containers"][0]["ports"][0]["hostPort"] = 23456
    after = network.gang_network(api, kind, "j", edited, types, mode=network.AUTO,
                                 pod_spec=pod, original_spec={}, pod_type="Worker",
                                 host_ports=(23456, 24000))
    assert before.need.fixed == frozenset()
    assert after.need.fixed == {("TCP", 23456)}


def test_a_mapping_that_is_no_plan_gets_the_plan_of_now() -> None:
    net = GangNetwork(job=None, need=Needs(network.POD, "pod networking, decided now"),
                      host_ports=(0, 0))
    assert net.plan_for({}, ()) == Plan(network.POD, "pod networking, decided now")
    assert net.plan_for(STORED[1], ()) == Plan(network.POD, "pod networking")


def _template(host_port: int | None) -> dict:
    port = {"name": "pytorchjob-port", "containerPort": 23456}
    if host_port is not None:
        port["hostPort"] = host_port
    return {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "x", "ports": [port]}]}}}


def test_template_host_ports_follow_the_job_object() -> None:
    """The gang's unmovable host ports include its templates' own hostPorts."""
    def fixed(specs: dict, types: dict) -> frozenset:
        job = network.job_facts("kubeflow.org/v1", "PyTorchJob", "j", specs, types)
        return network.needs(job, mode=network.AUTO, pod_spec={}, original_spec={},
                             pod_type="Worker").fixed

    specs = {"Worker": _template(23456)}
    assert fixed(specs, {"Worker": 1}) == {("TCP", 23456)}
    assert fixed(specs, {}) == frozenset()  # no GPU type: no template read
    assert fixed({"Worker": _template(24000)}, {"Worker": 1}) == {("TCP", 24000)}
    assert fixed({"Worker": _template(None)}, {"Worker": 1}) == frozenset()
    assert fixed(specs, {"Worker": 1}) == {("TCP", 23456)}
