"""``spec.runtimePatches`` (Trainer v2.2+): what Kueue adds on admission reaches the pods,
merged as Trainer's ``mergeRuntimePatches`` does (strategic merge into the runtime's JobSet
template, before the plugins), and the placement only uses the nodes the pods may run on.

The patch is the shape Kueue writes (``trainjob_types.go``: ``RuntimePatch`` ->
``trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec.template``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gputopo import names
from gputopo.cli import main
from gputopo.errors import InputError
from gputopo.operators import expand, with_identity
from gputopo.yamlio import dump_documents, load_documents_text

KUEUE = "kueue.x-k8s.io/manager"
NODES = ("cn-shanghai.192.168.16.172", "cn-shanghai.192.168.16.173")


def trainjob(nodes: int = 2, gpus: int = 4, *, patches: Any = None) -> dict[str, Any]:
    job = with_identity({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": nodes,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}}}}})
    if patches is not None:
        job["spec"]["runtimePatches"] = patches
    return job


def kueue_patch(pod_spec: dict[str, Any], *, target: str = "node",
                pod_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"manager": KUEUE, "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-queue"}},
        "spec": {"replicatedJobs": [{"name": target, "template": {"spec": {"template": {
            "metadata": pod_meta or {"labels": {"kueue.x-k8s.io/podset": target}},
            "spec": pod_spec}}}}]}}}}


def _pods(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == "Pod"]


def test_kueues_patch_reaches_the_node_pods_merged_as_trainer_merges_it() -> None:
    gates = [{"name": "kueue.x-k8s.io/admission"}]
    patch = kueue_patch({"nodeSelector": {"instance-type": "dgx1"},
                         "tolerations": [{"key": "gpu", "operator": "Exists"}],
                         "schedulingGates": gates,
                         "containers": [{"name": "node", "volumeMounts": [
                             {"name": "data", "mountPath": "/data"}]}],
                         "volumes": [{"name": "data", "emptyDir": {}}]})
    objs = expand(trainjob(patches=[patch]))
    (jobset,) = [o for o in objs if o["kind"] == "JobSet"]
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
    pods = _pods(objs)
    assert len(pods) == 2
    for pod in pods:
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"instance-type": "dgx1"}
        assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
        assert spec["schedulingGates"] == gates
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "node"
        (node,) = spec["containers"]
        # merged by name into the runtime's container: Trainer's own fields are still there
        assert {"name": "data", "mountPath": "/data"} in node["volumeMounts"]
        assert {"name": "data", "emptyDir": {}} in spec["volumes"]
        env = {e["name"]: e.get("value") for e in node["env"]}
        assert env["PET_MASTER_PORT"] == "29500"
        assert node["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_patches_apply_in_order_and_a_missing_replicated_job_patches_nothing() -> None:
    first = kueue_patch({"nodeSelector": {"a": "1"}, "tolerations": [{"key": "x"}]})
    second = {"manager": "someone-else", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"b": "2"}, "tolerations": [{"key": "y"}]}}}}},
            {"name": "ghost", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"c": "3"}}}}}}]}}}}
    pods = _pods(expand(trainjob(patches=[first, second])))
    for pod in pods:
        assert pod["spec"]["nodeSelector"] == {"a": "1", "b": "2"}, "maps merge"
        assert pod["spec"]["tolerations"] == [{"key": "y"}], "tolerations are replaced"


@pytest.mark.parametrize("patches, message", [
    ({"manager": KUEUE}, "spec.runtimePatches must be a list"),
    ([{"trainingRuntimeSpec": {}}], r"spec.runtimePatches\[0\].manager"),
    ([{"manager": KUEUE, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": {"name": "node"}}}}}], "replicatedJobs must be a list"),
    ([kueue_patch({}, pod_meta={"labels": {"n": 1}})], "labels values must be strings"),
    ([kueue_patch({"containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]})],
     "the env of container 'node' is set through spec.trainer"),
    ([kueue_patch({"containers": [{"name": "sidecar"}]})], "the runtime has no container"),
])
def test_a_malformed_runtime_patch_is_one_clear_error(patches: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        expand(trainjob(patches=patches))


def test_mutate_places_a_kueue_patched_trainjob_only_on_the_flavors_node(tmp_path, capsys):
    """Kueue's flavor names one DGX-1 (by hostname): gputopo pins both pods there, and the
    gate Kueue's patch adds stays on the pods."""
    patch = kueue_patch({"nodeSelector": {"kubernetes.io/hostname": NODES[1]}})
    path = tmp_path / "trainjob.yaml"
    path.write_text(dump_documents([trainjob(2, 4, patches=[patch])]))
    assert main(["mutate", str(path)]) == 0
    pods = [d for d in load_documents_text(capsys.readouterr().out)
            if isinstance(d, dict) and d.get("kind") == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        rec = json.loads(pod["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
        assert rec["placed"] is True and rec["node"] == NODES[1]
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODES[1]}
    # control: without the patch the same TrainJob goes to the first node
    path.write_text(dump_documents([trainjob(2, 4)]))
    assert main(["mutate", str(path)]) == 0
    pods = [d for d in load_documents_text(capsys.readouterr().out)
            if isinstance(d, dict) and d.get("kind") == "Pod"]
    assert {json.loads(p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])["node"]
            for p in pods} == {NODES[0]}


@pytest.mark.parametrize("field", ["podTemplateOverrides", "templateOverrides", "labels"])
def test_fields_trainer_v22_does_not_keep_are_one_clear_error(field: str) -> None:
    job = trainjob()
    job["spec"][field] = []
    with pytest.raises(InputError, match=f"spec.{field} is not a TrainJob field in Trainer "
                                         f"v2.2"):
        expand(job)


def test_mutate_leaves_a_kueue_tas_trainjob_s_node_to_kueue(tmp_path, capsys):
    """Kueue's patch with Topology Aware Scheduling (the topology gate, the podset's
    required-topology annotation): no pin outside Kueue's domain, the record says why."""
    patch = kueue_patch(
        {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]},
        pod_meta={"annotations": {
            "kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}})
    path = tmp_path / "trainjob.yaml"
    path.write_text(dump_documents([trainjob(2, 4, patches=[patch])]))
    assert main(["mutate", str(path)]) == 0
    pods = [d for d in load_documents_text(capsys.readouterr().out)
            if isinstance(d, dict) and d.get("kind") == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        assert not (pod["spec"].get("affinity") or {}).get("nodeAffinity")
        rec = json.loads(pod["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
        assert rec["placed"] is False and "Kueue Topology Aware Scheduling" in rec["reason"]


def test_mutate_on_a_malformed_runtime_patch_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "trainjob.yaml"
    path.write_text(dump_documents([trainjob(patches=[{"manager": ""}])]))
    assert main(["mutate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "spec.runtimePatches[0].manager" in err[0], err
