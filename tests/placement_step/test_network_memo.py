"""A gang's network, remembered per job (:func:`webhook.placement.network.gang_network`),
is what job_facts + needs compute for every pod, whatever the pod sends.

Why: the memo's key is what :func:`~webhook.placement.network.needs` reads of the pod (its
ports, three env values, both specs' hostNetwork, the explicit hostPorts it came with). A
field needs reads that the key missed would hand one pod another pod's plan (a stale
MASTER_PORT, a host port the gang cannot move): here pods of one job object, generated to
differ in exactly those fields (and in values a review may carry by mistake: True for a
port, a float, a list), each go through the memo right after another pod, and must get
the plain computation's answer.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.placement import network

PORT_VALUES = st.one_of(st.sampled_from([23456, 2222, 23457, 0, True, 1, 1.0, None, "x"]),
                        st.just([1]))
PORT = st.fixed_dictionaries(
    {}, optional={"name": st.sampled_from(["pytorchjob-port", "tfjob-port", "ssh", 5]),
                  "containerPort": PORT_VALUES, "hostPort": PORT_VALUES,
                  "protocol": st.sampled_from(["TCP", "UDP", "", None, True, 1])})
ENV_ITEM = st.fixed_dictionaries(
    {"name": st.sampled_from(["MASTER_PORT", "PET_RDZV_ENDPOINT", "TF_CONFIG", "RANK"])},
    optional={"value": st.sampled_from(
        ["23456", "23500", "abc", "host:29400", '{"cluster":{"worker":["a:2222","b:2222"]}}',
         '{"cluster":{"ps":["p:2222"],"worker":["a:2222"]}}', 5])})
CONTAINER = st.fixed_dictionaries(
    {"name": st.just("c")},
    optional={"ports": st.one_of(st.lists(PORT, max_size=3), st.just("no list")),
              "env": st.lists(ENV_ITEM, max_size=3)})
SPEC = st.fixed_dictionaries(
    {"containers": st.lists(CONTAINER, min_size=1, max_size=2)},
    optional={"initContainers": st.lists(CONTAINER, max_size=1),
              "hostNetwork": st.sampled_from([True, False, 1, None])})

#: Pods that differ in one small field from one another: consecutive pods of one test then
#: often differ only where a key that missed a field would take them for the same.
SMALL_SPEC = st.fixed_dictionaries(
    {"containers": st.tuples(st.fixed_dictionaries(
        {"name": st.just("c")},
        optional={"ports": st.lists(st.fixed_dictionaries(
            {"name": st.just("pytorchjob-port"),
             "containerPort": st.sampled_from([23456, 1, True, 1.0])},
            optional={"hostPort": st.sampled_from([23456, 1, True])}), max_size=1),
            "env": st.lists(st.fixed_dictionaries(
                {"name": st.sampled_from(["MASTER_PORT", "PET_RDZV_ENDPOINT"])},
                optional={"value": st.sampled_from(["23456", "23500", "h:1"])}),
                max_size=1)})).map(list)},
    optional={"hostNetwork": st.just(True)})

#: One edit of a pod: (field, value); each later pod is the first with one edit.
EDIT = st.one_of(
    st.tuples(st.just("hostNetwork"), st.sampled_from([True, None, 1])),
    st.tuples(st.just("env"), st.sampled_from(["23500", "23456", "abc", 5])),
    st.tuples(st.sampled_from(["hostPort", "containerPort"]),
              st.sampled_from([1, True, 1.0, 23456, 23500])))


def _edited(base: dict[str, Any], edit: tuple[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(base)
    field, value = edit
    c = pod["containers"][0]
    if field == "hostNetwork":
        pod["hostNetwork"] = value
    elif field == "env":
        c["env"] = [{"name": "MASTER_PORT", "value": value}]
    else:
        c["ports"] = [{"name": "extra", "containerPort": 23456, field: value}]
    return pod


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


def _plain(api: str, kind: str, specs: dict[str, Any], types: dict[str, int], mode: str,
           pod: dict[str, Any], original: dict[str, Any], pod_type: str
           ) -> network.GangNetwork:
    facts = network.job_facts(api, kind, "j", specs, types)
    return network.GangNetwork(job=facts, need=network.needs(
        facts, mode=mode, pod_spec=pod, original_spec=original, pod_type=pod_type),
        host_ports=(23456, 24000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=st.sampled_from(JOBS), mode=st.sampled_from(network.MODES),
       pods=st.one_of(
           st.lists(st.tuples(SPEC, SPEC, st.sampled_from(["Worker", "Master", "worker"])),
                    min_size=2, max_size=4),
           st.lists(st.tuples(SMALL_SPEC, SMALL_SPEC | st.just({}), st.just("Worker")),
                    min_size=2, max_size=6)))
def test_remembered_network_is_the_plain_one(job: tuple[str, str, str, dict[str, int]],
                                             mode: str,
                                             pods: list[tuple[dict, dict, str]]) -> None:
    api, kind, _, types = job
    specs = _specs(types)  # one job object: the pods share its memo entry
    for pod, original, pod_type in [*pods, pods[0]]:  # pods[0] again: a hit on a fresh key
        want = _plain(api, kind, specs, types, mode, copy.deepcopy(pod),
                      copy.deepcopy(original), pod_type)
        got = network.gang_network(api, kind, "j", specs, types, mode=mode, pod_spec=pod,
                                   original_spec=original, pod_type=pod_type,
                                   host_ports=(23456, 24000))
        assert got == want
        assert got.need.warnings == want.need.warnings  # and the warnings, in order


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=st.sampled_from([JOBS[0], *JOBS]), mode=st.sampled_from(network.MODES),
       base=SMALL_SPEC.map(lambda pod: {**pod, "hostNetwork": True}) | SMALL_SPEC,
       edits=st.lists(EDIT, min_size=1, max_size=5))
def test_pods_one_edit_apart_get_their_own_network(
        job: tuple[str, str, str, dict[str, int]], mode: str, base: dict[str, Any],
        edits: list[tuple[str, Any]]) -> None:
    api, kind, _, types = job
    specs = _specs(types, only="pytorchjob-port")
    for pod in [base, *(_edited(base, e) for e in edits), base]:
        want = _plain(api, kind, specs, types, mode, pod, {}, "Master")
        got = network.gang_network(api, kind, "j", specs, types, mode=mode, pod_spec=pod,
                                   original_spec={}, pod_type="Master",
                                   host_ports=(23456, 24000))
        assert got == want
        assert got.need.warnings == want.need.warnings


def test_a_pod_that_sets_master_port_is_not_given_the_plan_of_one_that_does_not() -> None:
    """The case the key exists for: two pods of one job, one with its own MASTER_PORT."""
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
