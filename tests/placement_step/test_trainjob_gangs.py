"""TrainJob (Kubeflow Trainer v2) and JobSet gangs placed like PyTorchJob gangs (issue 20).

Every pod here is made by ``gputopo.operators.expand`` from a TrainJob and the runtime
Trainer ships (or a plain JobSet), exactly as the Trainer, JobSet and Job controllers make
them (owned by batch Jobs, generateName, completion index), goes through ``gputopo mutate``
on the seeds' two DGX-1 nodes with the shipped policies, and is checked as the API server
would STORE it (``apiserver_rules.stored``) and as the NodePorts filter would judge it.
"""

from __future__ import annotations

import base64
import copy
import json
from collections import defaultdict
from itertools import combinations
from typing import Any

import jsonpatch
import pytest
from apiserver_rules import assert_node_ports_free, host_ports, stored
from placement_checks import gpu_group, pinned_node, record
from placement_jobs import mpijob, worker_pod

from gputopo import names
from gputopo.cluster.demo import demo_cluster_path
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.operators import expand, with_identity
from gputopo.yamlio import load_documents
from webhook.assembly import build_admitter, default_policies_dir
from webhook.dryrun import review_body
from webhook.placement.step import make_placement_step

NODES = ("cn-shanghai.192.168.16.172", "cn-shanghai.192.168.16.173")


def trainjob(name: str, *, nodes: int, gpus: int, runtime: str = "torch-distributed",
             **trainer: Any) -> dict[str, Any]:
    return with_identity({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime},
                 "trainer": {"numNodes": nodes,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}},
                             **trainer}}})


def jobset(name: str, *, rjobs: int, pods: int, gpus: int,
           pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    def rjob(i: int) -> dict[str, Any]:
        return {"name": f"group{i}", "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods, "template": {"spec": {
                **copy.deepcopy(pod_spec or {}),
                "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}
    return with_identity({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                          "metadata": {"name": name},
                          "spec": {"replicatedJobs": [rjob(i) for i in range(rjobs)]}})


def _pods(result: Any, prefix: str) -> list[dict[str, Any]]:
    out = [d for d in result.docs if isinstance(d, dict) and d.get("kind") == "Pod"
           and d["metadata"].get("generateName", "").startswith(prefix)]
    return sorted(out, key=lambda p: p["metadata"]["generateName"])


def _env(pod: dict[str, Any], name: str) -> list[str]:
    return [e.get("value") for c in pod["spec"]["containers"] for e in c.get("env") or []
            if e["name"] == name]


def _by_node(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pods:
        out[pinned_node(p)].append(p)
    return out


def test_torch_trainjob_two_by_four_gpus_takes_one_node_rank0_holds_the_port(mutate):
    result = mutate([trainjob("llm", nodes=2, gpus=4)])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "llm-node-0")
    assert len(pods) == 2
    assert len({pinned_node(p) for p in pods}) == 1, "one node"
    assert sorted(g for p in pods for g in gpu_group(p)) == list(range(8))
    assert_node_ports_free(_by_node(pods))
    rank0 = next(p for p in pods if p["metadata"]["generateName"] == "llm-node-0-0-")
    held = host_ports(rank0)
    assert len(held) == 1
    port = next(iter(held))[1]
    for pod in pods:
        assert stored(pod)["spec"]["hostNetwork"] is True
        assert _env(pod, "PET_MASTER_PORT") == [str(port)], "every pod names rank 0's port"
        assert pod["metadata"]["labels"][names.GANG_LABEL] == "llm"
        assert pod["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "2"
        assert record(pod)["job"] == "TrainJob default/llm"
        assert record(pod)["network"]["plan"] == "host"
    assert not host_ports(pods[1]), "rank 1 does not listen on the rendezvous port"


def test_torch_trainjob_four_by_one_gpu_takes_an_nvlink_quad(mutate, demo_topologies):
    result = mutate([trainjob("quad", nodes=4, gpus=1)])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "quad-node-0")
    assert len(pods) == 4
    (node,) = {pinned_node(p) for p in pods}
    gpus = [gpu_group(p)[0] for p in pods]
    topo = demo_topologies[node]
    assert all(topo.link(a, b).startswith("NV") for a, b in combinations(gpus, 2))
    assert_node_ports_free({node: pods})


def test_two_quad_trainjobs_each_on_one_node_with_different_ports(mutate):
    result = mutate([trainjob("a", nodes=4, gpus=1), trainjob("b", nodes=4, gpus=1)])
    assert result.rc == 0, result.stderr
    ports = set()
    everyone = []
    for name in ("a", "b"):
        pods = _pods(result, f"{name}-node-0")
        assert len(pods) == 4 and len({pinned_node(p) for p in pods}) == 1
        ports |= {v for p in pods for v in _env(p, "PET_MASTER_PORT")}
        everyone += pods
    assert len(ports) == 2
    assert_node_ports_free(_by_node(everyone))


def test_torch_trainjob_two_by_eight_gpus_takes_both_nodes_whole(mutate):
    result = mutate([trainjob("big", nodes=2, gpus=8)])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "big-node-0")
    assert {pinned_node(p) for p in pods} == set(NODES)
    assert all(sorted(gpu_group(p)) == list(range(8)) for p in pods)


def test_plain_jobset_two_jobs_of_two_pods_of_two_gpus_takes_one_node(mutate):
    result = mutate([jobset("js", rjobs=2, pods=2, gpus=2)])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "js-group")
    assert len(pods) == 4
    assert len({pinned_node(p) for p in pods}) == 1
    assert sorted(g for p in pods for g in gpu_group(p)) == list(range(8))
    assert {record(p)["replica"] for p in pods} == {"group0/0", "group0/1", "group1/0",
                                                   "group1/1"}
    assert all(p["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "4" for p in pods)


def test_deepspeed_trainjob_four_by_one_gpu_one_node_no_two_host_network_pods(mutate):
    result = mutate([trainjob("ds", nodes=4, gpus=1, runtime="deepspeed-distributed")])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "ds-node-0") + _pods(result, "ds-launcher-0")
    assert len(pods) == 4, "launcher (runs as a node) + 3 nodes"
    assert len({pinned_node(p) for p in pods}) == 1
    assert sum(stored(p)["spec"].get("hostNetwork") is True for p in pods) <= 1
    assert {record(p)["network"]["plan"] for p in pods} == {"pod"}


def test_kueue_flavor_node_selector_limits_the_nodes(mutate):
    """Kueue writes the flavor's nodeSelector into the JobSet's pod templates on admission
    (for a TrainJob through runtimePatches): only the matching node may be used."""
    selector = {"kubernetes.io/hostname": NODES[1]}
    result = mutate([jobset("kq", rjobs=2, pods=2, gpus=2,
                            pod_spec={"nodeSelector": selector})])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "kq-group")
    assert {pinned_node(p) for p in pods} == {NODES[1]}


def test_kueue_tas_pods_are_never_pinned(mutate):
    """With Topology Aware Scheduling the node is Kueue's: no pin, the record says why."""
    pod_spec = {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]}
    js = jobset("tas", rjobs=1, pods=2, gpus=4, pod_spec=pod_spec)
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["metadata"] = {"annotations": {
        "kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}}
    result = mutate([js])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "tas-group0")
    assert len(pods) == 2
    for pod in pods:
        assert not (pod["spec"].get("affinity") or {}).get("nodeAffinity")
        assert names.GPU_GROUP_ANNOTATION not in pod["metadata"].get("annotations", {})
        rec = record(pod)
        assert rec["placed"] is False and "Kueue Topology Aware Scheduling" in rec["reason"]
        assert stored(pod)["spec"].get("hostNetwork") is not True


def test_torchtune_trainjob_sharing_a_node_takes_the_pod_network(mutate):
    """torchtune's endpoint is in the args, not rewritten: the pod plan keeps 29500 in
    each pod's own network namespace."""
    result = mutate([trainjob("tune", nodes=2, gpus=2, runtime="torchtune-llama3.2-1b",
                              command=["tune", "run"])])
    assert result.rc == 0, result.stderr
    pods = _pods(result, "tune-node-0")
    assert len(pods) == 2 and len({pinned_node(p) for p in pods}) == 1
    for pod in pods:
        assert record(pod)["network"]["plan"] == "pod"
        assert stored(pod)["spec"].get("hostNetwork") is not True
        assert not host_ports(pod)
    initializers = _pods(result, "tune-dataset") + _pods(result, "tune-model")
    assert len(initializers) == 2 and all(record(p) is None for p in initializers)


@pytest.mark.parametrize("runtime", ["torch-distributed", "deepspeed-distributed"])
def test_readmitting_a_mutated_trainjob_pod_gives_an_empty_patch(runtime):
    """The API server's reinvocation: a mutated pod, admitted again, changes no more."""
    job = trainjob("again", nodes=2, gpus=4, runtime=runtime)
    objs = expand(job)
    cluster = ClusterSnapshot.from_objects(
        [*load_documents(demo_cluster_path()), job, *[o for o in objs if o["kind"] != "Pod"]])
    admitter = build_admitter(default_policies_dir(), cluster,
                              placement=make_placement_step(), reload_interval_s=0)
    try:
        for i, pod in enumerate(o for o in objs if o["kind"] == "Pod"):
            status, answer = admitter.handle_body(review_body(pod, f"u{i}"))
            assert status == 200 and "patch" in answer["response"]
            once = jsonpatch.apply_patch(
                pod, json.loads(base64.b64decode(answer["response"]["patch"])))
            status, again = admitter.handle_body(review_body(once, f"r{i}"))
            assert status == 200
            assert "patch" not in again["response"], again
            once["metadata"]["name"] = once["metadata"]["generateName"] + "x1y2z"
            cluster.add(once)
    finally:
        admitter.close()


@pytest.mark.parametrize("runtime", ["torch-distributed", "deepspeed-distributed"])
def test_readmitting_mutated_trainjob_pods_to_a_fresh_store_gives_empty_patches(runtime):
    """The pods mutated by one webhook, admitted again by another with no reservation (an
    in-memory store after a restart; ``gputopo mutate`` over its own output): the gang is
    solved again from the pods, whose rank-0 rendezvous port and node pin gputopo wrote
    itself, so nothing changes (the port was read as one every replica claims: one pod per
    node, and the gang waited)."""
    job = trainjob("again", nodes=2, gpus=4, runtime=runtime)
    objs = expand(job)
    cluster = ClusterSnapshot.from_objects(
        [*load_documents(demo_cluster_path()), job, *[o for o in objs if o["kind"] != "Pod"]])
    first, second = (build_admitter(default_policies_dir(), cluster,
                                    placement=make_placement_step(), reload_interval_s=0)
                     for _ in range(2))
    try:
        mutated = []
        for i, pod in enumerate(o for o in objs if o["kind"] == "Pod"):
            status, answer = first.handle_body(review_body(pod, f"u{i}"))
            assert status == 200 and "patch" in answer["response"]
            mutated.append(jsonpatch.apply_patch(
                pod, json.loads(base64.b64decode(answer["response"]["patch"]))))
        assert len({record(p)["node"] for p in mutated}) == 1
        for i, pod in enumerate(mutated):
            status, again = second.handle_body(review_body(pod, f"r{i}"))
            assert status == 200
            assert "patch" not in again["response"], again["response"].get("warnings")
    finally:
        first.close()
        second.close()


def test_a_jobset_pod_whose_jobset_is_missing_is_admitted_unplaced_with_the_reason(mutate):
    js = jobset("gone", rjobs=1, pods=2, gpus=2)
    objs = expand(js)  # its Jobs and pods, but not the JobSet itself
    result = mutate(objs)
    assert result.rc == 0, result.stderr
    assert "owner JobSet default/gone not found; gang size unknown, pod admitted unplaced" \
        in result.stderr
    pods = _pods(result, "gone-group0")
    given = [o for o in objs if o["kind"] == "Pod"]
    assert len(pods) == len(given) == 2
    for pod, before in zip(pods, given, strict=True):
        rec = record(pod)
        assert rec == {"placed": False, "job": "JobSet default/gone",
                       "jobUid": before["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-uid"],
                       "replica": None, "node": None, "gpus": [],
                       "reason": "owner JobSet default/gone not found; gang size unknown, "
                                 "so the gang cannot be placed"}
        # the record is all that was written: no gang labels, no rename, no pin
        del pod["metadata"]["annotations"][names.PLACEMENT_ANNOTATION]
        assert pod == before


def test_a_pod_of_a_missing_mpijob_is_still_admitted_unchanged(mutate):
    """Only JobSet pods get the record; a kubeflow job's pod keeps the plain warning."""
    pod = worker_pod(mpijob("nojob", workers=2, gpus=2), 0)
    result = mutate([pod])
    assert result.rc == 0, result.stderr
    assert "gang size unknown, pod admitted unchanged" in result.stderr
    assert list(result.pods.values()) == [pod]


def test_jobset_exclusive_placement_pods_are_never_pinned(mutate):
    """JobSet's own webhook keeps each child Job in a domain of its own; gputopo pins none."""
    js = jobset("excl", rjobs=2, pods=2, gpus=2)
    js["metadata"]["annotations"] = {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"}
    objs = expand(js)
    pods = [o for o in objs if o["kind"] == "Pod"]
    assert all(p["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"]
               == "kubernetes.io/hostname" for p in pods), "JobSet copies it onto the pods"
    result = mutate([js])
    assert result.rc == 0, result.stderr
    out = _pods(result, "excl-group")
    assert len(out) == 4
    for pod in out:
        assert not (pod["spec"].get("affinity") or {}).get("nodeAffinity")
        rec = record(pod)
        assert rec["placed"] is False and "JobSet exclusive placement" in rec["reason"]
