"""A reservation's stored network plan, read once per stored mapping, and a job's template
host ports, read once per job object, are what reading them again gives.

Why: every GPU pod of a gang reads the plan stored with the gang's reservation, and the
placement step remembers the parsed plan per stored mapping object (a reservation's
mapping is never modified; a changed plan comes as a new mapping). A new mapping must be
read anew, whatever the old one said, and a mapping that is no plan (an older reservation)
must still give the plan the gang would get now.
"""

from __future__ import annotations

from webhook.placement import network
from webhook.placement.network import GangNetwork, Needs, Plan, _stored_plan

STORED = [
    {"plan": "host", "why": "host networking; one rendezvous port per job", "role": "pytorch",
     "ports": {"master/0": 23500}},
    {"plan": "pod", "why": "pod networking"},
    {"plan": "host", "why": "x", "ports": {"worker/0": 23456, "worker/1": True}},
    {"why": "no plan"},
    {},
]


def test_each_mapping_reads_as_from_json_every_time() -> None:
    for stored in STORED:
        want = Plan.from_json(stored)
        assert _stored_plan(stored) == want
        assert _stored_plan(stored) == want  # remembered
        copy = dict(stored)
        assert _stored_plan(copy) == want  # a new object with the same text
    changed = dict(STORED[0], ports={"master/0": 23501})
    assert _stored_plan(changed).ports == {"master/0": 23501}
    assert _stored_plan(STORED[0]).ports == {"master/0": 23500}


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
    """The gang's unmovable host ports include its templates' own hostPorts, remembered
    per replica-specs object: an edited job (a new object) is read anew."""
    def fixed(specs: dict, types: dict) -> frozenset:
        job = network.job_facts("kubeflow.org/v1", "PyTorchJob", "j", specs, types)
        return network.needs(job, mode=network.AUTO, pod_spec={}, original_spec={},
                             pod_type="Worker").fixed

    specs = {"Worker": _template(23456)}
    assert fixed(specs, {"Worker": 1}) == {("TCP", 23456)}
    assert fixed(specs, {"Worker": 1}) == {("TCP", 23456)}  # remembered
    assert fixed(specs, {}) == frozenset()  # no GPU type: no template read
    assert fixed({"Worker": _template(24000)}, {"Worker": 1}) == {("TCP", 24000)}
    assert fixed({"Worker": _template(None)}, {"Worker": 1}) == frozenset()
    assert fixed(specs, {"Worker": 1}) == {("TCP", 23456)}
