"""PodGroups on a live (test double) API: a pod never leaves admission labelled for a
PodGroup that does not exist (Coscheduling would reject it at Permit for ever).

``gputopo serve``'s wiring (ClusterView + admitter) through the official client against the
Kubernetes API TEST DOUBLE, which serves scheduling.x-k8s.io/v1alpha1 PodGroups.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jsonpatch
from placement_jobs import mpijob, worker_pod
from test_placement_live import _wait, demo_docs, live_admitter

from gputopo import names
from gputopo.yamlio import dump, load_documents
from webhook.assembly import default_policies_dir
from webhook.dryrun import review_body

PG = ("scheduling.x-k8s.io", "v1alpha1", "podgroups", "default")


def _admit(admitter: Any, pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    status, answer = admitter.handle_body(review_body(pod, "uid-1"))
    assert status == 200
    response = answer["response"]
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(pod, patch), response.get("warnings") or []


def _policies(tmp_path: Path, pod_group: str) -> Path:
    (doc,) = load_documents(default_policies_dir() / "ack-gpu-topology.yaml")
    doc["spec"]["placement"]["podGroup"] = pod_group
    out = tmp_path / "policies"
    out.mkdir()
    (out / "policy.yaml").write_text(dump(doc))
    return out


def _groups(kube: Any) -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g
            for g in kube.objects("scheduling.x-k8s.io/v1alpha1", "PodGroup")}


def _no_dangling_label(kube: Any, pods: list[dict[str, Any]]) -> None:
    groups = _groups(kube)
    for pod in pods:
        label = pod["metadata"].get("labels", {}).get(names.POD_GROUP_LABEL)
        assert label is None or label in groups, f"{pod['metadata']['name']} names {label}"


def test_create_makes_one_podgroup_per_gang_owned_by_the_job(kube):
    demo_docs(kube)
    job = kube.apply(mpijob("pg-create"))
    with live_admitter(kube) as (admitter, _view):
        pods = [_admit(admitter, worker_pod(job, i))[0] for i in range(4)]
    groups = _groups(kube)
    assert set(groups) == {"pg-create"}
    pg = groups["pg-create"]
    assert pg["spec"]["minMember"] == 4
    (owner,) = pg["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("MPIJob", "pg-create",
                                                            job["metadata"]["uid"])
    assert all(p["metadata"]["labels"][names.POD_GROUP_LABEL] == "pg-create" for p in pods)
    assert kube.verbs[("create", "scheduling.x-k8s.io", "podgroups", "default")] == 1
    _no_dangling_label(kube, pods)


def test_require_without_a_podgroup_leaves_the_label_off_with_a_warning(kube, tmp_path):
    demo_docs(kube)
    job = kube.apply(mpijob("pg-require"))
    other = kube.apply(mpijob("pg-operator-made"))
    kube.apply({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "pg-operator-made", "namespace": "default"},
                "spec": {"minMember": 4}})
    with live_admitter(kube, policies=_policies(tmp_path, "require")) as (admitter, view):
        assert _wait(lambda: view.pod_group("default", "pg-operator-made")[1] is not None)
        admitted = [_admit(admitter, worker_pod(job, i)) for i in range(2)]
        kept = [_admit(admitter, worker_pod(other, i))[0] for i in range(2)]
    for pod, warnings in admitted:
        assert names.POD_GROUP_LABEL not in pod["metadata"]["labels"]
        assert pod["metadata"]["labels"][names.GANG_LABEL] == "pg-require"  # the rest stays
        assert any("requires one" in w and "pg-require" in w for w in warnings), warnings
    assert all(p["metadata"]["labels"][names.POD_GROUP_LABEL] == "pg-operator-made"
               for p in kept)
    assert set(_groups(kube)) == {"pg-operator-made"}  # require never creates
    _no_dangling_label(kube, [p for p, _ in admitted] + kept)


def test_create_that_cannot_create_leaves_the_label_off(kube):
    demo_docs(kube)
    kube.forbidden.add("podgroups")  # no RBAC / no CRD: list, watch and create answer 403
    job = kube.apply(mpijob("pg-forbidden"))
    with live_admitter(kube) as (admitter, _view):
        admitted = [_admit(admitter, worker_pod(job, i)) for i in range(4)]
    for pod, warnings in admitted:
        assert names.POD_GROUP_LABEL not in pod["metadata"]["labels"]
        assert any("could not be created" in w for w in warnings), warnings
    # one failed POST per gang, not one per pod
    assert kube.verbs[("create", "scheduling.x-k8s.io", "podgroups", "default")] == 1
    kube.forbidden.clear()
    _no_dangling_label(kube, [p for p, _ in admitted])


def test_off_adds_no_pod_group_label(kube, tmp_path):
    demo_docs(kube)
    job = kube.apply(mpijob("pg-off"))
    with live_admitter(kube, policies=_policies(tmp_path, "off")) as (admitter, _view):
        pod, _ = _admit(admitter, worker_pod(job, 0))
    assert names.POD_GROUP_LABEL not in pod["metadata"]["labels"]
    assert _groups(kube) == {}


def _trainjob(name: str, runtime: str = "torch-distributed") -> dict[str, Any]:
    from gputopo.operators import with_identity

    return with_identity({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runtimeRef": {"name": runtime, "kind": "ClusterTrainingRuntime"},
                 "trainer": {"numNodes": 2,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}}})


def test_trainjob_gang_podgroup_is_the_one_trainer_would_make(kube):
    """No coscheduling in the runtime: gputopo makes PodGroup <trainjob>, owned by the
    TrainJob, minMember = its pods (torch-distributed: every pod asks for GPUs)."""
    from k8s_double.owner_chain import apply_chain

    from gputopo.operators import expand

    demo_docs(kube)
    job = _trainjob("tj-create")
    pods = apply_chain(kube, [job, *expand(job)])
    uid = kube.objects("trainer.kubeflow.org/v1alpha1", "TrainJob")[0]["metadata"]["uid"]
    with live_admitter(kube) as (admitter, _view):
        admitted = [_admit(admitter, p)[0] for p in pods]
    groups = _groups(kube)
    assert set(groups) == {"tj-create"}
    assert groups["tj-create"]["spec"]["minMember"] == 2
    (owner,) = groups["tj-create"]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainJob", "tj-create", uid)
    assert {p["metadata"]["labels"][names.POD_GROUP_LABEL] for p in admitted} == {"tj-create"}
    _no_dangling_label(kube, admitted)


def test_trainers_own_podgroup_is_used_never_a_second_one(kube):
    """A coscheduling runtime: Trainer made PodGroup <trainjob> (every pod, initializers
    included) and labelled the pods; gputopo's gang label names the same group and it
    creates none."""
    from k8s_double.owner_chain import apply_chain

    from gputopo.operators import expand

    demo_docs(kube)
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "torch-gang"},
               "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                        "podGroupPolicy": {"coscheduling": {}},
                        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                            "metadata": {"labels": {
                                "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {"template": {"spec": {"containers": [
                                {"name": "node", "image": "train"}]}}}}}]}}}}
    job = _trainjob("tj-trainer", runtime="torch-gang")
    objs = expand(job, runtimes=[runtime])
    assert [o for o in objs if o["kind"] == "PodGroup"]
    pods = apply_chain(kube, [job, *objs])
    with live_admitter(kube) as (admitter, view):
        assert _wait(lambda: view.pod_group("default", "tj-trainer")[1] is not None)
        admitted = [_admit(admitter, p)[0] for p in pods]
    assert set(_groups(kube)) == {"tj-trainer"}
    assert kube.verbs.get(("create", "scheduling.x-k8s.io", "podgroups", "default"), 0) == 0
    for pod in admitted:
        labels = pod["metadata"]["labels"]
        assert labels[names.POD_GROUP_LABEL] == labels[names.GANG_LABEL] == "tj-trainer"


def test_deepspeed_trainjob_podgroup_leaves_out_the_launcher_started_later(kube):
    """deepspeed-distributed: JobSet creates the launcher's Job only once the node pods are
    Ready (dependsOn), so a group waiting for it at Permit would never fill: minMember =
    the 3 node pods; the launcher (also a GPU pod of the gang) joins the placed group."""
    from k8s_double.owner_chain import apply_chain

    from gputopo.operators import expand

    demo_docs(kube)
    job = _trainjob("tj-ds", runtime="deepspeed-distributed")
    job["spec"]["trainer"].update(numNodes=4,
                                  resourcesPerNode={"limits": {"nvidia.com/gpu": 1}})
    pods = apply_chain(kube, [job, *expand(job)])
    nodes = [p for p in pods if p["metadata"]["generateName"].startswith("tj-ds-node-")]
    assert len(nodes) == 3
    with live_admitter(kube) as (admitter, _view):
        admitted = [_admit(admitter, p)[0] for p in nodes]
    groups = _groups(kube)
    assert groups["tj-ds"]["spec"]["minMember"] == 3
    assert {p["metadata"]["labels"][names.GANG_REPLICA_LABEL] for p in admitted} == {"4"}
    _no_dangling_label(kube, admitted)
