"""A replica is pinned only where the scheduler's NodeResourcesFit lets it run: the node's
allocatable CPU, memory, pods and extended resources, less what the pods already there ask
for, must hold every replica of the gang put on it. Otherwise the pinned pod is Pending for
ever, and under Coscheduling its whole gang ("0/2 nodes are available: 1 Insufficient cpu").

The seed PyTorchJob (examples/ack-pytorch.yaml) on the demo cluster's two DGX-1 nodes (94
allocatable CPUs, 503Gi memory each), through ``gputopo mutate`` and ``gputopo place``:
the job file in, the pods as training-operator makes them, the placement records out.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from apiserver_rules import assert_resources_fit
from placement_checks import pinned_node, record

from gputopo.cli import main
from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import dump_documents, load_documents

FIRST, SECOND = "cn-shanghai.192.168.16.172", "cn-shanghai.192.168.16.173"
SEED = Path(__file__).resolve().parents[2] / "examples" / "ack-pytorch.yaml"
PODS = ("pytorch-dist-nccl-master-0", "pytorch-dist-nccl-worker-0")


def seed_job(requests: dict[str, Any], *, gpus: int = 1) -> dict[str, Any]:
    """The seed's PyTorchJob with ``requests`` added to every replica's container."""
    [job] = [d for d in load_documents(str(SEED)) if d.get("kind") == "PyTorchJob"]
    job = copy.deepcopy(job)
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        for c in rs["template"]["spec"]["containers"]:
            c["resources"]["limits"]["nvidia.com/gpu"] = gpus
            c["resources"].setdefault("requests", {}).update(requests)
    return job


def cluster(tmp_path: Path, *, allocatable: dict[str, dict[str, str]] | None = None,
            pods: list[dict[str, Any]] = ()) -> Path:
    """The demo cluster with extra allocatable resources per node and extra pods."""
    docs = load_documents(demo_cluster_path())
    for doc in docs:
        if doc.get("kind") == "Node":
            doc["status"]["allocatable"].update((allocatable or {}).get(
                doc["metadata"]["name"], {}))
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents([*docs, *pods]))
    return path


def other_pod(name: str, node: str, cpu: str, *, phase: str = "Running") -> dict[str, Any]:
    """A pod without GPUs already bound to ``node`` (a data loader, a DaemonSet, ...)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase}}


def nodes_of(result) -> list[str | None]:
    return [record(result.pods[p])["node"] for p in PODS]


def assert_scheduler_fits(result, resources: tuple[str, ...]) -> None:
    """The pinned pods, as the API server stores them, pass NodeResourcesFit on the demo
    nodes (94 CPUs, 503Gi each)."""
    allocatable = {d["metadata"]["name"]: d["status"]["allocatable"]
                   for d in load_documents(demo_cluster_path()) if d.get("kind") == "Node"}
    by_node: dict[str, list[dict[str, Any]]] = {}
    for p in PODS:
        by_node.setdefault(pinned_node(result.pods[p]), []).append(result.pods[p])
    assert_resources_fit(by_node, allocatable, resources)


def test_two_pods_of_60_cpus_go_one_per_dgx1_node(mutate):
    """Both on one node would be 120 of its 94 CPUs; without the CPUs both pods share
    the first node (the best GPUs), which shows the rule decides."""
    result = mutate([seed_job({})])
    assert nodes_of(result) == [FIRST, FIRST]
    result = mutate([seed_job({"cpu": "60"})])
    assert result.rc == 0, result.stderr
    assert sorted(nodes_of(result)) == [FIRST, SECOND]
    assert {pinned_node(result.pods[p]) for p in PODS} == {FIRST, SECOND}
    assert_scheduler_fits(result, ("cpu", "memory"))
    assert f"{FIRST}: cpu 120 of 94" in record(result.pods[PODS[0]])["reason"]


def test_pods_no_node_has_room_for_are_unplaced_with_the_resource(mutate):
    result = mutate([seed_job({"cpu": "100"})])
    for p in PODS:
        rec = record(result.pods[p])
        assert rec["placed"] is False
        assert f"{FIRST}: cpu 100 of 94" in rec["reason"]
        assert "the GPUs are free" in rec["reason"]


def test_two_pods_of_500gi_memory_go_one_per_node(mutate):
    result = mutate([seed_job({"memory": "500Gi"})])
    assert sorted(nodes_of(result)) == [FIRST, SECOND]
    assert_scheduler_fits(result, ("cpu", "memory"))
    assert f"{FIRST}: memory 1000Gi of 503Gi" in record(result.pods[PODS[0]])["reason"]


def test_an_extended_resource_only_some_nodes_offer(mutate, tmp_path):
    """``rdma/hca: 1``: only the node that lists it in its allocatable; the limit stands in
    for the request (API defaulting), so a limit alone asks for it too."""
    path = cluster(tmp_path, allocatable={SECOND: {"rdma/hca": "4"}})
    job = seed_job({})
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"]["limits"]["rdma/hca"] = 1
    result = mutate([job], cluster=path)
    assert nodes_of(result) == [SECOND, SECOND]
    path = cluster(tmp_path, allocatable={SECOND: {"rdma/hca": "1"}})
    result = mutate([job], cluster=path)
    rec = record(result.pods[PODS[0]])
    assert rec["placed"] is False
    assert f"{FIRST}: rdma/hca 1 of 0" in rec["reason"]
    assert f"{SECOND}: rdma/hca 2 of 1" in rec["reason"]


def test_a_node_whose_cpus_other_pods_hold_is_not_chosen(mutate, tmp_path):
    """80 of the first node's 94 CPUs go to a pod without GPUs: two 10-CPU replicas fit
    only beside each other on the second. A pod that finished holds nothing (the
    scheduler's pod informer drops Succeeded and Failed pods)."""
    path = cluster(tmp_path, pods=[other_pod("loader", FIRST, "80"),
                                   other_pod("done", SECOND, "90", phase="Succeeded")])
    result = mutate([seed_job({"cpu": "10"})], cluster=path)
    assert nodes_of(result) == [SECOND, SECOND]
    reason = record(result.pods[PODS[0]])["reason"]
    assert reason.endswith(f"(node resources limit the gang: {FIRST}: cpu 100 of 94)")
    # 8 GPUs each: one pod per node, and the first node has no room for 20 more CPUs
    result = mutate([seed_job({"cpu": "20"}, gpus=8)], cluster=path)
    assert nodes_of(result) == [None, None]
    assert f"{FIRST}: cpu 100 of 94" in record(result.pods[PODS[1]])["reason"]


def test_pods_pinned_by_an_earlier_gang_count_before_they_are_bound(mutate):
    """Two jobs in one run: the first's pods are pinned (not bound yet) and their CPUs are
    spoken for; the second job's pods must not land beside them."""
    first = seed_job({"cpu": "60"})
    second = seed_job({"cpu": "40"})
    second["metadata"]["name"] = "second"
    result = mutate([first, second])
    assert sorted(nodes_of(result)) == [FIRST, SECOND]
    rec = record(result.pods["second-master-0"])
    assert rec["placed"] is False
    assert f"{FIRST}: cpu 100 of 94" in rec["reason"]  # 60 there and one of 40


def test_place_says_which_resource_rules_a_node_out(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(dump_documents([seed_job({"cpu": "60"})]))
    assert main(["place", str(path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(p["node"] for p in doc["placements"]) == [FIRST, SECOND]
    assert f"{FIRST}: cpu 120 of 94" in doc["reason"]
    path.write_text(dump_documents([seed_job({"cpu": "95"})]))
    assert main(["place", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{FIRST}: cpu 95 of 94" in out


def with_template(job: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``job`` with ``fields`` in every replica's pod template spec, and label app=trainer."""
    job = copy.deepcopy(job)
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"].setdefault("metadata", {}).setdefault("labels", {})["app"] = "trainer"
        rs["template"]["spec"].update(copy.deepcopy(fields))
    return job


ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "trainer"}},
     "topologyKey": "kubernetes.io/hostname"}]}}


def test_required_anti_affinity_between_the_replicas_puts_one_per_node(mutate):
    """Packed on one node (the best GPUs), the second replica would never pass the
    scheduler's InterPodAffinity filter."""
    result = mutate([with_template(seed_job({}), affinity=ANTI)])
    assert result.rc == 0, result.stderr
    assert sorted(nodes_of(result)) == [FIRST, SECOND]
    # a selector the replicas do not match (another app) limits nothing between them
    other = copy.deepcopy(ANTI)
    other["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "labelSelector"] = {"matchLabels": {"app": "database"}}
    result = mutate([with_template(seed_job({}), affinity=other)])
    assert nodes_of(result) == [FIRST, FIRST]


def test_do_not_schedule_spread_on_the_hostname_caps_replicas_per_node(mutate):
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
               "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchExpressions": [
                   {"key": "app", "operator": "In", "values": ["trainer"]}]}}]
    result = mutate([with_template(seed_job({}), topologySpreadConstraints=spread)])
    assert sorted(nodes_of(result)) == [FIRST, SECOND]
    spread[0]["whenUnsatisfiable"] = "ScheduleAnyway"  # a preference: packing is allowed
    result = mutate([with_template(seed_job({}), topologySpreadConstraints=spread)])
    assert nodes_of(result) == [FIRST, FIRST]


def test_rules_gputopo_cannot_judge_leave_the_gang_to_the_scheduler_with_the_reason(mutate):
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "feature-store"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    result = mutate([with_template(seed_job({}), affinity=affinity)])
    for p in PODS:
        rec = record(result.pods[p])
        assert rec["placed"] is False and "required pod affinity" in rec["reason"]
        assert "affinity" in result.pods[p]["spec"]  # the user's own rule is kept
        assert "nodeAffinity" not in result.pods[p]["spec"]["affinity"]  # no pin
