"""The job expander against the seeds' operator-made pods and the operators' documented
behaviour (training-operator v1.7/v1.8, mpi-operator v0.4)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from gputopo import names
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.errors import InputError
from gputopo.operators import expand, is_training_job, with_identity
from gputopo.operators.common import made_up_uid
from webhook.assembly import build_admitter
from webhook.dryrun import review_body

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "policies" / "tests"


def _docs(case: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((CASES / case / "resources.yaml").read_text()) if d]


def _job(case: str) -> dict[str, Any]:
    return next(d for d in _docs(case) if is_training_job(d))


def _seed_pods(case: str) -> list[dict[str, Any]]:
    return [d for d in _docs(case) if d["kind"] == "Pod"]


def _env(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def _pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Pod"]


@pytest.mark.parametrize("case", ["ack-pytorch", "arena-mpi-v1", "arena-mpi-v2beta1"])
def test_expanded_pods_carry_what_the_seeds_operator_pods_carry(case: str) -> None:
    seeds = {p["metadata"].get("name"): p for p in _seed_pods(case)}
    ours = _pods(expand(_job(case)))
    assert len(ours) == len(seeds)
    for pod in ours:
        meta = pod["metadata"]
        if meta.get("name") is None:  # the v2beta1 launcher: named by the Job controller
            seed = next(p for n, p in seeds.items() if n.startswith(meta["generateName"]))
        else:
            seed = seeds[meta["name"]]
        for key in (names.OPERATOR_NAME_LABEL, names.JOB_NAME_LABEL,
                    names.REPLICA_TYPE_LABEL, names.JOB_ROLE_LABEL):
            assert meta["labels"].get(key) == seed["metadata"]["labels"].get(key), key
        owner, seed_owner = meta["ownerReferences"][0], seed["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["kind"], owner["name"], owner["controller"]) == (
            seed_owner["apiVersion"], seed_owner["kind"], seed_owner["name"], True)
        if owner["kind"] != "Job":  # the seed's batch Job uid is its own made-up one
            assert owner["uid"] == seed_owner["uid"]
        container, seed_container = pod["spec"]["containers"][0], seed["spec"]["containers"][0]
        assert container.get("resources") == seed_container.get("resources")
        for name, value in _env(seed_container).items():
            assert _env(container)[name] == value, name
        for port in seed_container.get("ports") or []:
            assert port in container["ports"]


def test_pytorch_every_replica_type_gets_the_port_and_ranks_follow_the_master() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "bert", "namespace": "ml"},
           "spec": {"nprocPerNode": "4", "pytorchReplicaSpecs": {
               "master": {"template": {"spec": {"containers": [
                   {"name": "pytorch", "image": "x",
                    "ports": [{"name": "pytorchjob-port", "containerPort": 29500}]}]}}},
               "Worker": {"replicas": 3, "restartPolicy": "ExitCode", "template": {
                   "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}}}
    pods = expand(job)
    assert [p["metadata"]["name"] for p in pods] == [
        "bert-master-0", "bert-worker-0", "bert-worker-1", "bert-worker-2"]
    for rank, pod in enumerate(pods):
        env = _env(pod["spec"]["containers"][0])
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "bert-master-0"
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"  # the master's port
        assert env["RANK"] == env["PET_NODE_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "16" and env["PET_NNODES"] == "4"
        assert env["PYTHONUNBUFFERED"] == "0"
        assert any(p["name"] == "pytorchjob-port" for p in pod["spec"]["containers"][0]["ports"])
    assert pods[1]["spec"]["containers"][0]["ports"][0]["containerPort"] == 23456
    assert pods[0]["spec"]["restartPolicy"] == "OnFailure"
    assert pods[1]["spec"]["restartPolicy"] == "Never"  # ExitCode -> Never
    assert [c["name"] for c in pods[1]["spec"]["initContainers"]] == ["init-pytorch"]
    assert "initContainers" not in pods[0]["spec"]
    assert pods[0]["metadata"]["ownerReferences"][0]["uid"] == made_up_uid(
        "ml", "PyTorchJob", "bert")


def test_pytorch_elastic_job_gets_the_rendezvous_endpoint_on_worker_0() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "el"},
           "spec": {"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1,
                                      "maxReplicas": 4},
                    "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {
                        "containers": [{"name": "pytorch", "image": "x"}]}}}}}}
    pods = expand(job)
    env = _env(pods[0]["spec"]["containers"][0])
    assert env["PET_RDZV_ENDPOINT"] == "el-worker-0:23456"
    assert env["PET_NNODES"] == "1:4" and "MASTER_ADDR" not in env
    assert pods[0]["metadata"]["namespace"] == "default"


def test_tfjob_tf_config_lists_every_task_and_worker_0_is_master_without_chief() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
           "metadata": {"name": "mnist", "namespace": "ml", "uid": "u-1"},
           "spec": {"tfReplicaSpecs": {
               "PS": {"replicas": 1, "template": {"spec": {"containers": [
                   {"name": "tensorflow", "image": "x"}]}}},
               "Worker": {"replicas": 2, "template": {"spec": {"containers": [
                   {"name": "tensorflow", "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}}}}
    pods = expand(job)
    assert [p["metadata"]["name"] for p in pods] == ["mnist-ps-0", "mnist-worker-0",
                                                     "mnist-worker-1"]
    config = json.loads(_env(pods[2]["spec"]["containers"][0])["TF_CONFIG"])
    assert config == {"cluster": {"ps": ["mnist-ps-0.ml.svc:2222"],
                                  "worker": ["mnist-worker-0.ml.svc:2222",
                                             "mnist-worker-1.ml.svc:2222"]},
                      "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    assert [p["metadata"]["labels"].get(names.JOB_ROLE_LABEL) for p in pods] == [
        None, "master", None]
    for pod in pods:
        assert pod["spec"]["containers"][0]["ports"] == [
            {"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}]
        assert pod["spec"]["restartPolicy"] == "Never"
    assert pods[1]["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": 2}


def test_tfjob_with_one_replica_gets_no_tf_config() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "one"},
           "spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
               {"name": "tensorflow", "image": "x"}]}}}}}}
    (pod,) = expand(job)
    assert "TF_CONFIG" not in _env(pod["spec"]["containers"][0])


def test_mpijob_v2beta1_workers_run_sshd_and_the_launcher_is_a_batch_job_pod() -> None:
    objects = expand(_job("arena-mpi-v2beta1"))
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Pod"] * 4 + ["Job", "Pod"]
    worker, batch, launcher = objects[0], objects[4], objects[5]
    assert worker["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    assert "ports" not in worker["spec"]["containers"][0]  # sshd's port is the image's
    assert worker["spec"]["hostname"] == "tensorflow-topo-4-vgg16-worker-0"
    assert batch["metadata"]["name"] == "tensorflow-topo-4-vgg16-launcher"
    assert batch["metadata"]["ownerReferences"][0]["uid"] == "7a1b2c3d-0000-4000-8000-000000000003"
    ref = launcher["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Job", batch["metadata"]["name"],
                                                      batch["metadata"]["uid"])
    assert launcher["metadata"]["generateName"] == "tensorflow-topo-4-vgg16-launcher-"
    env = launcher["spec"]["containers"][0]["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES"} in env
    assert launcher["spec"]["restartPolicy"] == "OnFailure"
    assert worker["spec"]["restartPolicy"] == "Never"


def test_mpijob_v2beta1_host_network_only_changes_the_dns_policy() -> None:
    job = _job("arena-mpi-v2beta1")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["hostNetwork"] = True
    worker = expand(job)[0]
    assert worker["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "ports" not in worker["spec"]["containers"][0]


def test_mpijob_v1_workers_sleep_and_the_launcher_is_owned_by_the_job() -> None:
    objects = expand(_job("arena-mpi-v1"))
    assert [o["metadata"]["name"] for o in objects] == [
        *(f"tensorflow-topo-4-vgg16-worker-{i}" for i in range(4)),
        "tensorflow-topo-4-vgg16-launcher"]
    worker, launcher = objects[0], objects[-1]
    assert worker["spec"]["containers"][0]["command"] == ["sleep"]
    assert worker["metadata"]["labels"][names.REPLICA_INDEX_LABEL] == "0"
    assert launcher["spec"]["serviceAccountName"] == "tensorflow-topo-4-vgg16-launcher"
    assert [c["name"] for c in launcher["spec"]["initContainers"]] == ["kubectl-delivery"]
    assert _env(launcher["spec"]["containers"][0])["NVIDIA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda s: s["Master"]["template"]["spec"]["containers"][0].update(name="main"),
     "no container named 'pytorch'"),
    (lambda s: s["Master"].update(replicas=2), "exactly 1 Master"),
    (lambda s: s["Worker"].update(replicas=-1), "non-negative integer"),
    (lambda s: s["Worker"]["template"]["spec"].update(containers=[]), "non-empty list"),
])
def test_a_job_the_operator_would_refuse_is_one_clear_error(mutate: Any, message: str) -> None:
    job = _job("ack-pytorch")
    mutate(job["spec"]["pytorchReplicaSpecs"])
    with pytest.raises(InputError, match=message):
        expand(job)


def test_uids_are_stable_and_with_identity_matches_the_owner_references() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "a"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {
               "containers": [{"name": "pytorch", "image": "x"}]}}}}}}
    ident = with_identity(job, namespace="team")
    pods = expand(ident)
    assert pods[0]["metadata"]["ownerReferences"][0]["uid"] == ident["metadata"]["uid"]
    assert expand(with_identity(job, namespace="team")) == pods
    assert with_identity(job)["metadata"]["uid"] != ident["metadata"]["uid"]  # other ns


@pytest.mark.parametrize("case", ["ack-pytorch", "arena-mpi-v2beta1", "tke-taco-harp"])
def test_the_webhook_admits_expanded_pods_as_it_admits_the_seeds_operator_pods(
        case: str) -> None:
    """Same gang labels from the real pipeline for our pods and the seed's."""

    def admitted(pods_from_job: bool) -> dict[str, dict[str, str]]:
        docs = _docs(case)
        job = with_identity(_job(case))
        others = [d for d in docs if d["kind"] not in ("Pod",) and not is_training_job(d)
                  and not (pods_from_job and d["kind"] == "Job")]
        cluster = ClusterSnapshot.from_objects([])
        for obj in [*others, job]:
            cluster.add(obj)
        objects = expand(job) if pods_from_job else [
            d for d in docs if d["kind"] == "Pod"
            and d["metadata"]["labels"].get(names.JOB_NAME_LABEL) == job["metadata"]["name"]]
        admitter = build_admitter(None, cluster, placement=None, reload_interval_s=0)
        out: dict[str, dict[str, str]] = {}
        try:
            for i, obj in enumerate(objects):
                if obj["kind"] != "Pod":
                    cluster.add(obj)
                    continue
                status, body = admitter.handle_body(review_body(obj, f"u{i}"))
                assert status == 200
                patch = json.loads(base64.b64decode(body["response"].get("patch", "W10=")))
                pod = jsonpatch.apply_patch(obj, patch)
                meta = pod["metadata"]
                key = meta.get("name") or "launcher"
                out[key] = {k: v for k, v in (meta.get("labels") or {}).items()
                            if k in (names.GANG_LABEL, names.GANG_REPLICA_LABEL)}
        finally:
            admitter.close()
        return out

    ours, seeds = admitted(True), admitted(False)
    assert any(ours.values())
    for name, labels in seeds.items():
        match = name if name in ours else "launcher"
        assert ours[match] == labels, name
