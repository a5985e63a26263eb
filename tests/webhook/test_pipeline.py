"""Pipeline decisions on operator-style pods: audit, polite merging, job identity, order."""

from __future__ import annotations

import copy

from prometheus_client import REGISTRY

from gputopo import names
from tests.webhook.conftest import (
    admit,
    body,
    decoded_patch,
    namespace,
    operator_pod,
    pytorch_job,
    review,
    write_policy,
)


def _mutations(kind: str, policy: str, mode: str) -> float:
    return REGISTRY.get_sample_value(
        "gputopo_mutations_total", {"kind": kind, "policy": policy, "mode": mode}) or 0.0


def _requests(outcome: str) -> float:
    return REGISTRY.get_sample_value(
        "gputopo_admission_requests_total", {"outcome": outcome}) or 0.0


def test_audit_changes_nothing_warns_and_counts(make_admitter, tmp_path):
    write_policy(tmp_path, "watch", mode="audit")
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job], tmp_path)
    before = _mutations("host-namespaces", "watch", "audit")
    unchanged_before = _requests("unchanged")
    pod = operator_pod(job, "worker", 0)
    out, resp = admit(admitter, pod)
    assert out == pod
    assert "patch" not in resp["response"]
    warnings = resp["response"]["warnings"]
    assert any("watch (audit): would apply" in w and "host-namespaces" in w
               and "gang-labels" in w for w in warnings)
    assert _mutations("host-namespaces", "watch", "audit") == before + 1
    assert _requests("unchanged") == unchanged_before + 1


def test_user_values_are_kept_with_a_warning(make_admitter, tmp_path):
    write_policy(tmp_path, "p", extra=(
        "    dnsPolicy: ClusterFirstWithHostNet\n"
        "    securityContext: {privileged: true, capabilities: {add: [IPC_LOCK]}}\n"))
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job], tmp_path)
    pod = operator_pod(job, "master", 0)
    pod["spec"]["dnsPolicy"] = "None"
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": False, "runAsUser": 1000}
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    pod["metadata"]["labels"][names.GANG_LABEL] = "my-own-gang"
    out, resp = admit(admitter, pod)
    warnings = " | ".join(resp["response"]["warnings"])
    assert out["spec"]["dnsPolicy"] == "None" and "dnsPolicy" in warnings
    sc = out["spec"]["containers"][0]["securityContext"]
    assert sc == {"privileged": False, "runAsUser": 1000, "capabilities": {"add": ["IPC_LOCK"]}}
    assert "privileged" in warnings
    assert out["metadata"]["labels"][names.GANG_LABEL] == "my-own-gang"
    assert "my-own-gang" in warnings
    assert out["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    # what did not conflict was still applied
    assert out["spec"]["hostNetwork"] is True
    assert out["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "2"


def test_job_not_found_leaves_pod_unchanged_with_warning(make_admitter):
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team")])  # the job is not in the cluster
    pod = operator_pod(job, "worker", 0)
    out, resp = admit(admitter, pod)
    assert out == pod
    assert any("not found" in w and "unchanged" in w for w in resp["response"]["warnings"])


def test_labels_without_owner_are_not_a_job_pod(make_admitter):
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job])
    pod = operator_pod(job, "worker", 0, owner=False)
    out, resp = admit(admitter, pod)
    assert out == pod and "warnings" not in resp["response"]


def test_gang_counts_only_gpu_replicas(make_admitter):
    job = pytorch_job(ns="team", workers=3)
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].pop(
        "resources")
    admitter = make_admitter([namespace("team"), job])
    master = operator_pod(job, "master", 0, gpus=None)
    out, _ = admit(admitter, master)
    assert out == master  # no GPU: no mutation
    worker, _ = admit(admitter, operator_pod(job, "worker", 2))
    assert worker["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "3"


def test_a_job_scaled_is_counted_anew(make_admitter):
    """The gang size is remembered per job object (every pod of a job asks it); a job the
    cluster view replaces — scaled from 2 to 4 workers — is counted again."""
    job = pytorch_job(ns="team", workers=2)
    admitter = make_admitter([namespace("team"), job])
    first, _ = admit(admitter, operator_pod(job, "worker", 0))
    assert first["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "3"  # master + 2
    scaled = copy.deepcopy(job)
    scaled["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    admitter.cluster.add(scaled)
    again, _ = admit(admitter, operator_pod(job, "worker", 1))
    assert again["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "5"


def test_mpijob_v2beta1_launcher_via_batch_job(make_admitter):
    """The launcher pod is owned by a batch/v1 Job owned by the MPIJob; with a GPU (some
    users run rank 0 there) it is a job pod with role launcher."""
    mpi = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
           "metadata": {"name": "m", "namespace": "team", "uid": "u-m"},
           "spec": {"mpiReplicaSpecs": {
               r: {"replicas": n, "template": {"spec": {"containers": [
                   {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}
               for r, n in (("Launcher", 1), ("Worker", 2))}}}
    batch = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "m-launcher", "namespace": "team", "uid": "u-b",
                          "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1",
                                               "kind": "MPIJob", "name": "m", "uid": "u-m",
                                               "controller": True}]}}
    admitter = make_admitter([namespace("team"), mpi, batch])
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "m-launcher-x", "namespace": "team",
                        "labels": {names.JOB_ROLE_LABEL: "launcher"},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": "m-launcher", "uid": "u-b",
                                             "controller": True}]},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {
               "nvidia.com/gpu": 1}}}]}}
    out, _ = admit(admitter, pod)
    assert out["metadata"]["labels"][names.GANG_LABEL] == "m"
    assert out["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "3"


def test_first_policy_wins_later_ones_warn(make_admitter, tmp_path):
    write_policy(tmp_path, "early", extra="    dnsPolicy: ClusterFirstWithHostNet\n")
    (tmp_path / "late.yaml").write_text(
        "apiVersion: gputopo.io/v1alpha1\nkind: TopologyPolicy\nmetadata: {name: late}\n"
        "spec:\n  priority: 500\n  mutations:\n    dnsPolicy: Default\n"
        "    hostPID: true\n")
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job], tmp_path)
    out, resp = admit(admitter, operator_pod(job, "worker", 0))
    assert out["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert out["spec"]["hostPID"] is True
    assert any(w.startswith("policy late:") and "dnsPolicy" in w
               for w in resp["response"]["warnings"])


def test_namespace_labels_of_policy_narrow_never_widen(make_admitter, tmp_path):
    write_policy(tmp_path, "p")
    (tmp_path / "p.yaml").write_text((tmp_path / "p.yaml").read_text().replace(
        "spec:\n", "spec:\n  match: {namespaceLabels: {tier: gpu}}\n"))
    job = pytorch_job(ns="team")
    other = copy.deepcopy(job)
    other["metadata"]["namespace"] = "open"
    admitter = make_admitter([namespace("team", tier="gpu"), job,
                              namespace("open", opted_in=False, tier="gpu"), other], tmp_path)
    assert admit(admitter, operator_pod(job, "worker", 0))[1]["response"].get("patch")
    pod = operator_pod(other, "worker", 0)
    assert admit(admitter, pod)[0] == pod


class DenyStep:
    name = "deny-all"

    def apply(self, ctx) -> None:
        ctx.pod.setdefault("metadata", {}).setdefault("annotations", {})["x"] = "y"
        ctx.deny("no room for this gang")


def test_a_step_can_deny_and_audit_turns_denial_into_a_warning(tmp_path):
    from gputopo.cluster.snapshot import ClusterSnapshot
    from webhook.assembly import build_admitter

    write_policy(tmp_path, "p")
    job = pytorch_job(ns="team")
    cluster = ClusterSnapshot.from_objects([namespace("team"), job])
    admitter = build_admitter(tmp_path, cluster, placement=DenyStep(), reload_interval_s=0)
    denied_before = _requests("denied")
    pod = operator_pod(job, "worker", 0)
    status, answer = admitter.handle_body(body(review(pod)))
    r = answer["response"]
    assert status == 200 and r["allowed"] is False and "patch" not in r
    assert r["status"]["message"] == "no room for this gang"
    assert _requests("denied") == denied_before + 1
    admitter.close()

    write_policy(tmp_path, "p", mode="audit")
    admitter = build_admitter(tmp_path, cluster, placement=DenyStep(), reload_interval_s=0)
    out, resp = admit(admitter, pod)
    assert out == pod and resp["response"]["allowed"] is True
    warnings = resp["response"]["warnings"]
    assert any("deny-all (audit): would deny: no room" in w for w in warnings)
    assert any("deny-all (audit): would change /metadata/annotations" in w for w in warnings)
    admitter.close()


def test_owner_uid_must_match_the_job(make_admitter):
    """A namesake job (deleted and re-created, or a forged reference) is not the pod's job."""
    job = pytorch_job(ns="team", uid="uid-new")
    admitter = make_admitter([namespace("team"), job])
    stale = operator_pod(pytorch_job(ns="team", uid="uid-old"), "worker", 0)
    out, resp = admit(admitter, stale)
    assert out == stale
    assert any("uid" in w for w in resp["response"]["warnings"])


def test_hugepages_only_go_where_the_api_server_accepts_them(make_admitter, tmp_path):
    """The API server refuses a container with hugepages but neither cpu nor memory
    ("HugePages require cpu or memory"): such a container gets no hugepages and a warning;
    one with memory gets them."""
    write_policy(tmp_path, "huge", extra=(
        "    resources:\n      limits:\n        hugepages-1Gi: {base: 10Gi, perGPU: 5Gi}\n"))
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job], tmp_path)
    bare = operator_pod(job, "worker", 0)
    out, resp = admit(admitter, bare)
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    assert "hugepages-1Gi" not in limits
    assert any("hugepages-1Gi not added" in w for w in resp["response"]["warnings"])
    assert out["spec"]["hostNetwork"] is True  # the rest of the policy still applies
    with_memory = operator_pod(job, "master", 0)
    with_memory["spec"]["containers"][0]["resources"]["limits"]["memory"] = "100Gi"
    out, _ = admit(admitter, with_memory)
    assert out["spec"]["containers"][0]["resources"]["limits"]["hugepages-1Gi"] == "15Gi"


def test_host_pid_is_not_set_beside_a_shared_process_namespace(make_admitter):
    """The API server rejects hostPID together with shareProcessNamespace (a pod with a
    sidecar that inspects the trainer): the shipped policy must not add hostPID there."""
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job])
    pod = operator_pod(job, "worker", 0)
    pod["spec"]["shareProcessNamespace"] = True
    out, resp = admit(admitter, pod)
    assert "hostPID" not in out["spec"] and out["spec"]["shareProcessNamespace"] is True
    assert any("shareProcessNamespace" in w for w in resp["response"]["warnings"])
    assert out["spec"]["hostNetwork"] is True and out["spec"]["hostIPC"] is True
    again, resp = admit(admitter, out)
    assert again == out and "patch" not in resp["response"]


def test_privileged_is_not_added_beside_allow_privilege_escalation_false(make_admitter,
                                                                          tmp_path):
    """The API server rejects privileged: true with allowPrivilegeEscalation: false (a
    hardened worker template): the policy's privileged is not added there, with a warning;
    the rest of its securityContext is."""
    write_policy(tmp_path, "priv", extra=(
        "    securityContext: {privileged: true, capabilities: {add: [IPC_LOCK]}}\n"))
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job], tmp_path)
    pod = operator_pod(job, "worker", 0)
    pod["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False}
    out, resp = admit(admitter, pod)
    sc = out["spec"]["containers"][0]["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}}
    assert any("privileged not set" in w for w in resp["response"]["warnings"])
    again, resp = admit(admitter, out)
    assert again == out and "patch" not in resp["response"]
    plain = operator_pod(job, "worker", 0)  # without the user's setting: privileged added
    out, _ = admit(admitter, plain)
    assert out["spec"]["containers"][0]["securityContext"]["privileged"] is True


def test_host_namespaces_are_not_set_in_a_user_namespace_pod(make_admitter):
    """``hostUsers: false`` (a user-namespaced pod): the API server forbids hostNetwork,
    hostIPC and hostPID there, so the shipped policy sets none of them and says so."""
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job])
    pod = operator_pod(job, "worker", 0)
    pod["spec"]["hostUsers"] = False
    out, resp = admit(admitter, pod)
    assert not {"hostNetwork", "hostIPC", "hostPID"} & set(out["spec"])
    warnings = " | ".join(resp["response"]["warnings"])
    assert all(f"forbids {k}" in warnings for k in ("hostNetwork", "hostIPC", "hostPID"))
    assert out["metadata"]["labels"][names.GANG_LABEL] == job["metadata"]["name"]
    again, resp = admit(admitter, out)
    assert again == out and "patch" not in resp["response"]


def test_managed_fields_are_kept_as_sent_and_never_in_the_patch(make_admitter, tmp_path):
    """The API server sends the pod with ``metadata.managedFields`` (create.go updates it
    before admission). The pipeline works without it (webhook.patch.working_copy): the
    patch must never name it, and the pod the API server stores keeps it as sent — even
    when a policy adds labels and annotations right beside it."""
    write_policy(tmp_path, "p")
    job = pytorch_job(ns="team")
    admitter = make_admitter([namespace("team"), job], tmp_path)
    pod = operator_pod(job, "worker", 0)
    managed = [{"manager": "training-operator", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-26T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": {
                    "f:containers": {'k:{"name":"pytorch"}': {".": {}, "f:image": {}}}}}}]
    pod["metadata"]["managedFields"] = copy.deepcopy(managed)
    out, resp = admit(admitter, pod)
    patch = decoded_patch(resp)
    assert patch, "the policy mutates the pod"
    assert not [op for op in patch if "managedFields" in op["path"]
                or "managedFields" in op.get("from", "")]
    assert out["metadata"]["managedFields"] == managed
    assert out["metadata"]["labels"][names.GANG_REPLICA_LABEL]  # the label beside it landed
    assert out["spec"]["hostNetwork"] is True
    # the same admission of the same pod without managedFields: the same patch
    bare = operator_pod(job, "worker", 0)
    assert decoded_patch(admit(admitter, bare)[1]) == patch
