"""``gputopo mutate`` over its own output, on the same cluster, changes nothing.

docs/placement.md ("Re-admission") and README.md promise it; a dump of a live namespace
whose pods gputopo mutated but that are still Pending is exactly that input. The second run
starts with an empty reservation store, so the gang is solved again from the mutated pods:
the host ports gputopo's own network plan wrote into them (the rendezvous port of rank 0
and ``MASTER_PORT``/``PET_MASTER_PORT``, a TFJob task's port, each also a ``hostPort``)
must read as the plan's, which it moves, not as ports the user fixed. Read as the user's,
a TrainJob's rank-0 port made every replica "claim" it (one pod per node: the gang split
or waited), a PyTorchJob's moved ``MASTER_PORT`` became a pinned port of the user's, and a
written ``hostPort`` kept the gang off every node where another pod holds that number.
Likewise gputopo's own node pin (a gang over two nodes could not be placed again), the
policy's host networking of a spread MPI-over-SSH gang (read as the user's: another plan),
and, with a ``--cluster`` file that holds the pods themselves, their own pinned GPUs.
(webhook/placement/readmission.py)

Every kind is run through the CLI on the seeds' two DGX-1 nodes, on clusters that make
those readings show: empty, GPUs 0-1 held on each node (rendezvous ports derived from
another GPU than 0), and a host port held on one node by a pod that is not the gang's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver_rules import host_ports, stored
from placement_checks import record
from placement_jobs import V1, mpijob
from test_network_plan import pytorchjob, tfjob
from test_trainjob_gangs import NODES, jobset, trainjob

from gputopo.cluster.demo import demo_cluster_path
from gputopo.operators import expand, with_identity
from gputopo.yamlio import load_documents
from webhook.assembly import default_policies_dir

POLICIES = default_policies_dir()


def _running(name: str, node: str, gpus: str | None, ports: list[int]) -> dict[str, Any]:
    """A pod of another workload, bound and running: GPUs it holds, host ports it claims."""
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if gpus:
        n = str(len(gpus.split(",")))
        container["resources"] = {"limits": {"aliyun.com/gpu": n},
                                  "requests": {"aliyun.com/gpu": n}}
    if ports:
        container["ports"] = [{"containerPort": p, "hostPort": p} for p in ports]
    meta: dict[str, Any] = {"name": name, "namespace": "other"}
    if gpus:
        meta["annotations"] = {"topology.kubernetes.io/gpu-group": gpus}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "hostNetwork": bool(ports), "containers": [container]},
            "status": {"phase": "Running"}}


#: cluster name -> pods of other workloads on the demo's nodes
CLUSTERS: dict[str, list[dict[str, Any]]] = {
    "empty": [],
    "gpus-0-1-held": [_running(f"held-{i}", n, "0,1", []) for i, n in enumerate(NODES)],
    # the second node holds the port the plan derives from GPU 0 of the first
    "port-23456-held": [_running("exporter", NODES[1], None, [23456])],
    # a gang of two 4-GPU workers spreads one per node
    "gpus-0-3-held": [_running(f"held-{i}", n, "0,1,2,3", []) for i, n in enumerate(NODES)],
    # what a gang placed on the empty cluster took is another pod's now
    "first-node-0-3-held": [_running("other", NODES[0], "0,1,2,3", [])],
    "first-node-full": [_running("other", NODES[0], "0,1,2,3,4,5,6,7", [])],
}


def _elastic(name: str, *, workers: int, gpus: int) -> dict[str, Any]:
    job = pytorchjob(name, gpus=gpus)
    spec = job["spec"]
    spec["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": workers,
                             "maxReplicas": workers}
    worker = spec["pytorchReplicaSpecs"].pop("Worker")
    worker["replicas"] = workers
    spec["pytorchReplicaSpecs"] = {"Worker": worker}
    return with_identity(job)


#: (case id, the job, the cluster). Failed before the fix: the TrainJob torch cases, the
#: PyTorchJob 2x2/2x8, elastic and own-host-port, TFJob 2x8, MPIJob v2beta1 and deepspeed
#: 2x8; the others (one node, no port of the plan's moved) are guards.
CASES = [
    ("trainjob-torch-2x4", lambda: trainjob("llm", nodes=2, gpus=4), "empty"),
    ("trainjob-torch-4x2", lambda: trainjob("llm", nodes=4, gpus=2), "empty"),
    ("trainjob-torch-2x2", lambda: trainjob("llm", nodes=2, gpus=2), "gpus-0-1-held"),
    ("pytorchjob-2x2", lambda: pytorchjob("pt", gpus=2), "gpus-0-1-held"),
    ("pytorchjob-2x8", lambda: pytorchjob("pt", gpus=8), "port-23456-held"),
    ("pytorchjob-elastic-2x8", lambda: _elastic("pte", workers=2, gpus=8), "port-23456-held"),
    ("tfjob-2x8", lambda: _tfjob_8("tf"), "port-23456-held"),
    ("tfjob-4x1", lambda: tfjob("tf"), "empty"),
    # a user's own host port and MASTER_PORT stay the user's: kept, one replica per node
    ("pytorchjob-own-host-port", lambda: pytorchjob(
        "own", workers=1, ports=[{"containerPort": 8080, "hostPort": 8080}]), "empty"),
    ("pytorchjob-own-master-port", lambda: pytorchjob(
        "mine", gpus=2, env=[{"name": "MASTER_PORT", "value": "29500"}]), "gpus-0-1-held"),
    ("mpijob-v1", lambda: mpijob("mpi", workers=4, version=V1), "empty"),
    ("mpijob-v2beta1", lambda: mpijob("mpi", workers=4, gpus=1), "empty"),
    ("mpijob-v2beta1-2x8", lambda: mpijob("mpi", workers=2, gpus=8), "empty"),
    ("trainjob-deepspeed-2x8", lambda: trainjob("ds", nodes=2, gpus=8,
                                                runtime="deepspeed-distributed"), "empty"),
    ("jobset", lambda: jobset("js", rjobs=2, pods=2, gpus=2), "empty"),
    ("trainjob-deepspeed", lambda: trainjob("ds", nodes=2, gpus=4,
                                            runtime="deepspeed-distributed"), "empty"),
]


def _tfjob_8(name: str) -> dict[str, Any]:
    job = tfjob(name, workers=2)
    limits = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]
    limits["nvidia.com/gpu"] = 8
    return job


def _tfjob_2x2(name: str) -> dict[str, Any]:
    job = tfjob(name, workers=2)
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"]["limits"]["nvidia.com/gpu"] = 2
    return job


def admit_policies(tmp_path: Path) -> Path:
    """The shipped policies with ``whenFull: admit``: a gang takes a spread placement now
    instead of waiting for a packed one."""
    policies = tmp_path / "policies"
    policies.mkdir(exist_ok=True)
    for f in POLICIES.glob("*.yaml"):
        (policies / f.name).write_text(f.read_text().replace("whenFull: wait",
                                                             "whenFull: admit"))
    return policies


def _cluster(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"cluster-{name}.yaml"
    path.write_text(yaml.safe_dump_all([*load_documents(demo_cluster_path()),
                                        *CLUSTERS[name]]))
    return path


def _job_and_pods(job: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the job and what its controllers made but pods, the pods), as a dump holds them."""
    objs = expand(job)
    return [job, *(o for o in objs if o["kind"] != "Pod")], [o for o in objs
                                                              if o["kind"] == "Pod"]


@pytest.mark.parametrize(("case", "make", "cluster"), CASES, ids=[c[0] for c in CASES])
def test_mutating_its_own_output_again_changes_no_pod(mutate, tmp_path, case, make, cluster):
    """The pods come out of the second run exactly as out of the first: same node, GPUs,
    ports, record; a user's own MASTER_PORT warned about no more often."""
    job = make()
    owners, pods = _job_and_pods(job)
    where = _cluster(tmp_path, cluster)
    first = mutate([*owners, *pods], cluster=where)
    assert first.rc == 0, first.stderr
    out = [d for d in first.docs if d.get("kind") == "Pod"]
    placed = [p for p in out if (record(p) or {}).get("placed")]
    assert placed, f"{case}: nothing placed the first time, nothing to compare"
    again = mutate([*owners, *out], cluster=where)
    assert again.rc == 0, again.stderr
    assert [d for d in again.docs if d.get("kind") == "Pod"] == out, (
        f"{case}: a pod changed on re-admission\n{again.stderr}")
    kept = "kept the pod's MASTER_PORT"  # the user's own only, never one gputopo wrote
    assert again.stderr.count(kept) == first.stderr.count(kept), again.stderr


def test_a_trainjob_readmitted_where_its_gpus_are_taken_moves_its_rendezvous_port(
        mutate, tmp_path):
    """Re-admitted on a cluster that changed (its GPUs 0-3 now another pod's), the gang is
    placed again and rank 0's port moves with its new GPUs: the container port, its
    hostPort and every pod's PET_MASTER_PORT name the new port, none the old."""
    job = trainjob("llm", nodes=2, gpus=2)
    owners, pods = _job_and_pods(job)
    first = mutate([*owners, *pods], cluster=_cluster(tmp_path, "empty"))
    out = [d for d in first.docs if d.get("kind") == "Pod"]
    assert [record(p)["gpus"] for p in out] == [[0, 1], [2, 3]]
    taken = _cluster(tmp_path, "first-node-0-3-held")
    again = mutate([*owners, *out], cluster=taken)
    assert again.rc == 0, again.stderr
    rank0, rank1 = [d for d in again.docs if d.get("kind") == "Pod"]
    assert record(rank0)["node"] == NODES[0] and record(rank0)["gpus"] == [4, 5]
    assert record(rank0)["network"]["ports"] == {"node/0": 23460}
    assert stored(rank0)["spec"]["containers"][0]["ports"] == [
        {"containerPort": 23460, "hostPort": 23460, "protocol": "TCP"}]
    assert not host_ports(rank1)
    for pod in (rank0, rank1):
        assert [e["value"] for e in pod["spec"]["containers"][0]["env"]
                if e["name"] == "PET_MASTER_PORT"] == ["23460"]


def test_a_gang_readmitted_where_its_node_is_full_moves_with_one_pin_and_the_users_terms(
        mutate, tmp_path):
    """The pin gputopo wrote is its own: re-admitted where its node is now full, the gang
    goes to the other node, pinned there once (no pin to the old node left beside it); the
    user's own node affinity term is kept as it was, with the new pin added to it."""
    mine = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                  "values": list(NODES)}]}
    job = pytorchjob("pt", gpus=2)
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"]["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [mine]}}}
    owners, pods = _job_and_pods(job)
    first = mutate([*owners, *pods], cluster=_cluster(tmp_path, "empty"))
    out = [d for d in first.docs if d.get("kind") == "Pod"]
    assert {record(p)["node"] for p in out} == {NODES[0]}
    full = _cluster(tmp_path, "first-node-full")
    again = mutate([*owners, *out], cluster=full)
    assert again.rc == 0, again.stderr
    assert "already constrains" not in again.stderr
    for pod in (d for d in again.docs if d.get("kind") == "Pod"):
        assert record(pod)["node"] == NODES[1]
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{**mine, "matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [NODES[1]]}]}]


@pytest.mark.parametrize("make", [
    lambda: mpijob("mpi", workers=2, gpus=4),
    lambda: trainjob("ds", nodes=2, gpus=4, runtime="deepspeed-distributed")],
    ids=["mpijob-v2beta1", "trainjob-deepspeed"])
def test_sshd_workers_spread_then_packed_on_readmission_leave_the_host_network(
        mutate, tmp_path, make):
    """MPI over SSH under ``network: auto``: spread one worker per node (each node's GPUs
    0-3 held), the gang took host networking; its pods' ``hostNetwork`` was the policy's.
    Re-admitted on the emptied cluster the workers share a node, so the plan is the pod
    network and the policy's host networking is taken back (two sshd on one node's network
    would collide), not kept as though the user had asked for it."""
    job = make()
    owners, pods = _job_and_pods(job)
    half = _cluster(tmp_path, "gpus-0-3-held")
    policies = admit_policies(tmp_path)
    first = mutate([*owners, *pods], "--policies", str(policies), cluster=half)
    out = [d for d in first.docs if d.get("kind") == "Pod"]
    workers = [p for p in out if (record(p) or {}).get("placed")]
    assert len({record(p)["node"] for p in workers}) == 2
    assert all(record(p)["network"]["plan"] == "host" and p["spec"]["hostNetwork"]
               for p in workers)
    again = mutate([*owners, *out], "--policies", str(policies),
                   cluster=_cluster(tmp_path, "empty"))
    assert again.rc == 0, again.stderr
    packed = [p for p in again.docs if p.get("kind") == "Pod" and (record(p) or {}).get(
        "placed")]
    assert len({record(p)["node"] for p in packed}) == 1
    for pod in packed:
        assert record(pod)["network"]["plan"] == "pod"
        assert "hostNetwork" not in pod["spec"] and "dnsPolicy" not in pod["spec"]
        assert pod["spec"]["hostIPC"] is True


@pytest.mark.parametrize("make", [
    lambda: pytorchjob("pt", gpus=2),
    lambda: _elastic("pte", workers=2, gpus=2),
    lambda: _tfjob_2x2("tf"),
    lambda: trainjob("llm", nodes=2, gpus=2)],
    ids=["pytorchjob", "pytorchjob-elastic", "tfjob", "trainjob-torch"])
def test_ports_move_with_the_gpus_when_a_readmitted_gang_is_placed_elsewhere(
        mutate, tmp_path, make):
    """Placed first on GPUs 0-3 (the rendezvous or first task port 23456), re-admitted
    where those GPUs are another pod's: the gang goes to GPUs 4-7 and every port the plan
    wrote moves with it (a task holds exactly the port its record names; no pod keeps
    23456 anywhere: ports, MASTER_PORT, PET_RDZV_ENDPOINT, TF_CONFIG)."""
    owners, pods = _job_and_pods(make())
    first = mutate([*owners, *pods], cluster=_cluster(tmp_path, "empty"))
    out = [d for d in first.docs if d.get("kind") == "Pod"]
    placed = [p for p in out if (record(p) or {}).get("placed")]
    assert sorted(g for p in placed for g in record(p)["gpus"]) == [0, 1, 2, 3]
    assert "23456" in json.dumps([p["spec"] for p in placed])
    taken = _cluster(tmp_path, "first-node-0-3-held")
    again = mutate([*owners, *out], cluster=taken)
    assert again.rc == 0, again.stderr
    moved = [p for p in again.docs if p.get("kind") == "Pod" and (record(p) or {}).get(
        "placed")]
    assert sorted(g for p in moved for g in record(p)["gpus"]) == [4, 5, 6, 7]
    for pod in moved:
        rec = record(pod)
        assert rec["network"]["plan"] == "host"
        own = rec["network"].get("ports", {}).get(rec["replica"])
        assert host_ports(pod) == ({("TCP", own)} if own else set())
        assert "23456" not in json.dumps(pod["spec"])


def test_a_users_own_pin_to_the_node_is_kept_on_readmission(mutate, tmp_path):
    """The user's template pins the pods to the node gputopo then chose (the same
    ``matchFields`` gputopo writes): that pin is the user's, so a re-admission where the
    node is full never moves the gang to the other node."""
    pin = {"key": "metadata.name", "operator": "In", "values": [NODES[0]]}
    job = pytorchjob("pt", gpus=2)
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"]["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [pin]}]}}}
    owners, pods = _job_and_pods(job)
    first = mutate([*owners, *pods], cluster=_cluster(tmp_path, "empty"))
    out = [d for d in first.docs if d.get("kind") == "Pod"]
    assert {record(p)["node"] for p in out} == {NODES[0]}
    full = _cluster(tmp_path, "first-node-full")
    again = mutate([*owners, *out], cluster=full)
    assert again.rc == 0, again.stderr
    for pod in (d for d in again.docs if d.get("kind") == "Pod"):
        assert record(pod)["node"] != NODES[1]
        assert pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
            {"matchFields": [pin]}]


SELF_HELD = [c for c in CASES if c[0] in ("trainjob-torch-2x4", "pytorchjob-2x8", "tfjob-4x1",
                                          "mpijob-v2beta1-2x8", "jobset")]


@pytest.mark.parametrize(("case", "make", "cluster"), SELF_HELD, ids=[c[0] for c in SELF_HELD])
def test_a_cluster_file_holding_the_pods_themselves_changes_nothing(
        mutate, tmp_path, case, make, cluster):
    """``--cluster`` written by ``kubectl get nodes,pods -A -o yaml`` holds the Pending
    pods asked about, pinned by their records: each is admitted as a pod being created
    (not in the cluster yet), so it does not hold the GPUs its own gang is solved for."""
    owners, pods = _job_and_pods(make())
    first = mutate([*owners, *pods], cluster=_cluster(tmp_path, cluster))
    out = [d for d in first.docs if d.get("kind") == "Pod"]
    for i, pod in enumerate(out):  # as the API server names them
        if not pod["metadata"].get("name"):
            pod["metadata"]["name"] = f"{pod['metadata']['generateName']}x{i}"
    held = tmp_path / "held.yaml"
    held.write_text(yaml.safe_dump_all([*load_documents(_cluster(tmp_path, cluster)),
                                        *owners, *out]))
    again = mutate(out, cluster=held)
    assert again.rc == 0, again.stderr
    assert [d for d in again.docs if d.get("kind") == "Pod"] == out, again.stderr
