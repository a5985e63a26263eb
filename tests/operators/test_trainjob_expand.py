"""TrainJob and JobSet expansion against what Kubeflow Trainer v2.3 (plugins torch, mpi,
jobset, coscheduling), JobSet v0.12 (constructJob, labelAndAnnotateObject) and the Job
controller (indexed pods) do, read from their sources."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from gputopo.cli import main
from gputopo.errors import InputError
from gputopo.operators import expand, with_identity
from gputopo.operators.common import made_up_uid
from gputopo.yamlio import dump_documents

COMPLETION = "batch.kubernetes.io/job-completion-index"


def trainjob(runtime: str = "torch-distributed", *, nodes: int = 2, gpus: int = 4,
             **trainer: Any) -> dict[str, Any]:
    return with_identity({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "team", "uid": "tj-uid"},
        "spec": {"runtimeRef": {"name": runtime},
                 "trainer": {"numNodes": nodes,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}},
                             **trainer}}})


def _of(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def _env(pod: dict[str, Any], container: str = "node") -> dict[str, Any]:
    c = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


def test_torch_trainjob_becomes_a_jobset_one_indexed_job_and_its_pods() -> None:
    objs = expand(trainjob())
    (jobset,) = _of(objs, "JobSet")
    (job,) = _of(objs, "Job")
    pods = _of(objs, "Pod")
    assert [o["kind"] for o in objs] == ["JobSet", "Job", "Pod", "Pod"]
    # the JobSet: the TrainJob's name, controlled by the TrainJob
    assert jobset["metadata"]["name"] == "llm"
    assert jobset["metadata"]["ownerReferences"] == [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "llm",
        "uid": "tj-uid", "controller": True, "blockOwnerDeletion": True}]
    js_uid = jobset["metadata"]["uid"]
    # the Job: <jobset>-<replicatedJob>-<index>, Indexed, parallelism = numNodes
    assert job["metadata"]["name"] == "llm-node-0"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert job["metadata"]["ownerReferences"][0]["uid"] == js_uid
    assert (job["spec"]["completionMode"], job["spec"]["parallelism"],
            job["spec"]["completions"]) == ("Indexed", 2, 2)
    assert job["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == \
        "trainer"
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["generateName"] == f"llm-node-0-{index}-" and "name" not in meta
        assert (spec["hostname"], spec["subdomain"]) == (f"llm-node-0-{index}", "llm")
        assert meta["annotations"][COMPLETION] == meta["labels"][COMPLETION] == str(index)
        assert meta["ownerReferences"] == [{
            "apiVersion": "batch/v1", "kind": "Job", "name": "llm-node-0",
            "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        labels = meta["labels"]
        assert labels["jobset.sigs.k8s.io/jobset-name"] == "llm"
        assert labels["jobset.sigs.k8s.io/jobset-uid"] == js_uid
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert labels["jobset.sigs.k8s.io/job-index"] == "0"
        assert labels["jobset.sigs.k8s.io/job-key"] == hashlib.sha1(
            b"team/llm-node-0").hexdigest()
        assert labels["batch.kubernetes.io/job-name"] == "llm-node-0"
        assert not [k for k in labels if k.startswith("trainer.kubeflow.org/")], \
            "no trainer.kubeflow.org label reaches the pods"
        env = _env(pod)
        assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "auto"
        assert env["PET_MASTER_ADDR"] == "llm-node-0-0.llm"
        assert env["PET_MASTER_PORT"] == "29500"
        rank = {"fieldRef": {"apiVersion": "v1",
                             "fieldPath": f"metadata.annotations['{COMPLETION}']"}}
        assert env["PET_NODE_RANK"] == env["JOB_COMPLETION_INDEX"] == rank
        node = spec["containers"][0]
        assert node["ports"] == [{"containerPort": 29500, "protocol": "TCP"}]
        assert node["resources"]["limits"] == {"nvidia.com/gpu": 4}
        assert spec["restartPolicy"] == "OnFailure"


def test_deepspeed_trainjob_launcher_runs_as_a_node_and_nodes_are_one_fewer() -> None:
    objs = expand(trainjob("deepspeed-distributed", nodes=4, gpus=1))
    jobs = {j["metadata"]["name"]: j for j in _of(objs, "Job")}
    assert {n: j["spec"]["parallelism"] for n, j in jobs.items()} == {
        "llm-node-0": 3, "llm-launcher-0": 1}
    pods = _of(objs, "Pod")
    assert len(pods) == 4
    for pod in pods:
        node = pod["spec"]["containers"][0]
        assert node["resources"]["limits"] == {"nvidia.com/gpu": 1}, "launcher asks too"
        assert "ports" not in node, "sshd's 2222 is declared nowhere"
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert vols["mpi-ssh-auth"]["secret"]["secretName"] == "llm-mpi-ssh-auth"
    launcher = next(p for p in pods if p["metadata"]["generateName"].startswith("llm-launch"))
    assert _env(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert {v["name"] for v in launcher["spec"]["volumes"]} >= {"mpi-hostfile"}


def test_torchtune_trainjob_gets_the_endpoint_in_its_args_not_the_env() -> None:
    objs = expand(trainjob("torchtune-llama3.2-1b", nodes=2, gpus=2,
                           command=["tune", "run"]))
    pods = [p for p in _of(objs, "Pod") if p["metadata"]["generateName"].startswith("llm-node")]
    assert len(pods) == 2
    node = pods[0]["spec"]["containers"][0]
    assert "--rdzv_endpoint llm-node-0-0.llm:29500" in node["args"]
    assert "PET_MASTER_PORT" not in _env(pods[0])
    initializers = [p for p in _of(objs, "Pod") if "initializer" in p["metadata"]["generateName"]]
    assert len(initializers) == 2 and not any(
        "nvidia.com/gpu" in str(p["spec"]["containers"]) for p in initializers)


def test_coscheduling_runtime_makes_the_podgroup_of_every_pod_and_labels_them() -> None:
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
               "metadata": {"name": "gang", "namespace": "team"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                        "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 120}},
                        "template": {"spec": {"replicatedJobs": [
                            {"name": "dataset-initializer", "template": {"spec": {"template": {
                                "spec": {"containers": [{"name": "dataset-initializer",
                                                         "image": "init"}]}}}}},
                            {"name": "node", "template": {
                                "metadata": {"labels": {
                                    "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {"template": {"spec": {"containers": [
                                    {"name": "node", "image": "train"}]}}}}}]}}}}
    job = trainjob(nodes=3, gpus=2)
    job["spec"]["runtimeRef"] = {"name": "gang", "kind": "TrainingRuntime"}
    objs = expand(job, runtimes=[runtime])
    (group,) = _of(objs, "PodGroup")
    assert group["metadata"]["name"] == "llm"
    assert group["spec"] == {"minMember": 4, "scheduleTimeoutSeconds": 120}
    assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
            for p in _of(objs, "Pod")} == {"llm"}


def test_plain_jobset_replicas_and_parallelism_give_indexed_pods_per_job() -> None:
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "ps", "namespace": "team"},
          "spec": {"network": {"subdomain": "svc"}, "replicatedJobs": [{
              "name": "w", "replicas": 2, "template": {"spec": {
                  "parallelism": 3, "completions": 2, "template": {"spec": {
                      "containers": [{"name": "c", "image": "x"}]}}}}}]}}
    objs = expand(js)
    jobs = _of(objs, "Job")
    assert [j["metadata"]["name"] for j in jobs] == ["ps-w-0", "ps-w-1"]
    assert [j["metadata"]["labels"]["jobset.sigs.k8s.io/job-global-index"] for j in jobs] == \
        ["0", "1"]
    pods = _of(objs, "Pod")
    assert [p["metadata"]["generateName"] for p in pods] == [
        "ps-w-0-0-", "ps-w-0-1-", "ps-w-1-0-", "ps-w-1-1-"]
    assert {p["spec"]["subdomain"] for p in pods} == {"svc"}
    assert jobs[0]["metadata"]["ownerReferences"][0]["uid"] == made_up_uid(
        "team", "JobSet", "ps")


def test_unknown_runtime_is_one_clear_error() -> None:
    with pytest.raises(InputError, match="'no-such-runtime' is neither in the input nor"):
        expand(trainjob("no-such-runtime"))


def test_mutate_on_a_trainjob_with_an_unknown_runtime_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "tj.yaml"
    path.write_text(dump_documents([trainjob("no-such-runtime")]))
    assert main(["mutate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("gputopo: error:")]) == 1
    assert "Traceback" not in "\n".join(err)
    assert "TrainJob team/llm" in err[-1] and "no-such-runtime" in err[-1]


def test_a_non_indexed_jobset_job_makes_pods_without_a_completion_index() -> None:
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "ni", "namespace": "team"},
          "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {
              "completionMode": "NonIndexed", "parallelism": 2, "template": {"spec": {
                  "containers": [{"name": "c", "image": "x"}]}}}}}]}}
    pods = _of(expand(js), "Pod")
    assert [p["metadata"]["generateName"] for p in pods] == ["ni-w-0-", "ni-w-0-"]
    for pod in pods:
        assert COMPLETION not in pod["metadata"]["annotations"]
        assert "hostname" not in pod["spec"] and pod["spec"]["subdomain"] == "ni"


def test_mutate_table_on_a_trainjob_file_with_its_runtime_shows_every_pod(tmp_path, capsys):
    """The runtime from the same file wins over the shipped one of that name."""
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "torch-distributed"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                            "metadata": {"labels": {
                                "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {"template": {"spec": {"containers": [
                                {"name": "node", "image": "site/pytorch:own"}]}}}}}]}}}}
    path = tmp_path / "tj.yaml"
    path.write_text(dump_documents([runtime, trainjob(nodes=4, gpus=2)]))
    assert main(["mutate", "-o", "table", str(path)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == [f"team/llm-node-0-{i}-*" for i in range(4)]
    nodes = {r.split()[1] for r in rows}
    assert len(nodes) == 1 and "-" not in nodes
    assert sorted(int(g) for r in rows for g in r.split()[2].split(",")) == list(range(8))
    assert main(["mutate", str(path)]) == 0
    images = {line.strip() for line in capsys.readouterr().out.splitlines()
              if line.strip().startswith("image:")}
    assert images == {"image: site/pytorch:own"}


def test_place_on_a_trainjob_file_answers_for_its_gpu_pods(capsys):
    import json
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "trainjob-torch-distributed.yaml"
    assert main(["place", str(example), "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["feasible"] is True
    assert [len(p["gpus"]) for p in answer["placements"]] == [4, 4]
    assert len({p["node"] for p in answer["placements"]}) == 1


@pytest.mark.parametrize("rjob", [
    "node", {"name": "node"}, {"name": "node", "template": {"spec": {}}},
    {"name": "node", "template": {"spec": {"template": {"spec": {"containers": []}}}}},
    {"name": "node", "template": {"metadata": "x", "spec": {"template": {"spec": {
        "containers": [{"name": "node"}]}}}}},
    {"template": {"spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}},
])
def test_a_malformed_runtime_in_the_input_is_one_clear_error(rjob: Any) -> None:
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "broken"},
               "spec": {"mlPolicy": {"torch": {}}, "template": {"spec": {
                   "replicatedJobs": [rjob]}}}}
    with pytest.raises(InputError, match=r"runtime 'broken': spec.template.spec.replicatedJobs"):
        expand(trainjob("broken"), runtimes=[runtime])


@pytest.mark.parametrize(("field", "value"), [
    ("env", "x"), ("env", ["x"]), ("command", "tune"), ("args", [1]), ("image", 5),
    ("resourcesPerNode", "x")])
def test_a_mistyped_trainer_field_is_one_clear_error(field: str, value: Any) -> None:
    with pytest.raises(InputError, match=f"spec.trainer.{field} must be"):
        expand(trainjob(**{field: value}))


@pytest.mark.parametrize(("where", "value"), [
    (("template", "metadata"), "x"), (("template", "metadata"), {"labels": "x"}),
    (("template", "spec", "template", "metadata"), {"annotations": {"a": 1}}),
    (("template", "spec", "template", "spec", "initContainers"), "x")])
def test_a_malformed_jobset_template_is_one_clear_error(where: tuple[str, ...],
                                                        value: Any) -> None:
    rjob: dict[str, Any] = {"name": "w", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "x"}]}}}}}
    target = rjob
    for key in where[:-1]:
        target = target.setdefault(key, {})
    target[where[-1]] = value
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "bad"}, "spec": {"replicatedJobs": [rjob]}}
    with pytest.raises(InputError, match=r"spec.replicatedJobs\[0\]\.template"):
        expand(js)


def test_jobset_exclusive_placement_annotations_and_node_selector_strategy() -> None:
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "ex", "namespace": "team", "annotations": {
              "alpha.jobset.sigs.k8s.io/exclusive-topology": "gputopo.io/rack",
              "alpha.jobset.sigs.k8s.io/node-selector": "true"}},
          "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {
              "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}}]}}
    (job,) = _of(expand(js), "Job")
    (pod,) = _of(expand(js), "Pod")
    for obj in (job, pod):
        assert obj["metadata"]["annotations"][
            "alpha.jobset.sigs.k8s.io/exclusive-topology"] == "gputopo.io/rack"
        assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in obj["metadata"]["labels"]
    assert pod["spec"]["nodeSelector"] == {"alpha.jobset.sigs.k8s.io/namespaced-job":
                                           "team_ex-w-0"}
    assert pod["spec"]["tolerations"] == [{"key": "alpha.jobset.sigs.k8s.io/no-schedule",
                                           "operator": "Exists", "effect": "NoSchedule"}]
