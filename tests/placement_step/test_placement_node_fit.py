"""A replica is pinned only to a node its own constraints allow: the pod's nodeSelector,
required node affinity and tolerations. A pin to any other node would leave it Pending for
ever (the pin and the pod's own terms must both hold)."""

from __future__ import annotations

import copy

from placement_checks import pinned_node, record
from placement_jobs import gang, mpijob

from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import dump_documents, load_documents

FIRST, SECOND = "cn-shanghai.192.168.16.172", "cn-shanghai.192.168.16.173"


def _cluster(tmp_path, *, labels=None, taints=None):
    """The demo cluster with extra labels / taints on its nodes (by node name)."""
    docs = load_documents(demo_cluster_path())
    for doc in docs:
        if doc.get("kind") == "Node":
            name = doc["metadata"]["name"]
            doc["metadata"]["labels"].update((labels or {}).get(name, {}))
            if name in (taints or {}):
                doc.setdefault("spec", {})["taints"] = taints[name]
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents(docs))
    return path


def _with_worker_spec(job, **fields):
    job = copy.deepcopy(job)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(fields)
    return job


def _workers(result, name, n=4):
    return [result.pods[f"{name}-worker-{i}"] for i in range(n)]


def test_node_selector_keeps_the_gang_off_other_nodes(mutate, tmp_path):
    cluster = _cluster(tmp_path, labels={SECOND: {"gpu-pool": "b"}})
    job = _with_worker_spec(mpijob("sel"), nodeSelector={"gpu-pool": "b"})
    result = mutate(gang(job), cluster=cluster)
    assert result.rc == 0, result.stderr
    assert {pinned_node(w) for w in _workers(result, "sel")} == {SECOND}


def test_untolerated_taint_keeps_the_gang_off_a_node_and_a_toleration_lifts_it(
        mutate, tmp_path):
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    cluster = _cluster(tmp_path, taints={FIRST: [taint]})
    result = mutate(gang(mpijob("plain")), cluster=cluster)
    assert {pinned_node(w) for w in _workers(result, "plain")} == {SECOND}
    tolerant = _with_worker_spec(mpijob("tolerant"), tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    result = mutate(gang(tolerant), cluster=cluster)
    assert {pinned_node(w) for w in _workers(result, "tolerant")} == {FIRST}


def test_kubelet_labels_missing_from_a_cluster_file_are_not_held_against_a_node(mutate):
    """``nodeSelector: {kubernetes.io/os: linux}`` (in countless charts): the demo nodes do
    not spell out the labels every kubelet sets, which says nothing against them."""
    job = _with_worker_spec(mpijob("linux"), nodeSelector={"kubernetes.io/os": "linux"})
    result = mutate(gang(job))
    assert result.rc == 0, result.stderr
    assert all(record(w)["placed"] for w in _workers(result, "linux"))


def test_a_gang_no_node_admits_is_left_unplaced_with_the_reason(mutate):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In",
             "values": ["ecs.gn7-c12g1.3xlarge"]}]}]}}}
    job = _with_worker_spec(mpijob("nowhere"), affinity=affinity)
    result = mutate(gang(job))
    assert result.rc == 0, result.stderr
    for w in _workers(result, "nowhere"):
        rec = record(w)
        assert rec["placed"] is False and "nodeSelector, required node affinity" in rec["reason"]
        assert w["spec"]["affinity"] == affinity, "no pin added to the user's own terms"
