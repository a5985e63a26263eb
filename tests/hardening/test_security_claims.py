"""The claims of docs/security.md that a test can check, over real HTTPS to the real pipeline.

- only opted-in namespaces are ever mutated, whatever labels and owners a pod claims;
- a pod cannot take another job's reserved GPUs (copied labels, forged ownerReference);
- dry-run reviews reserve nothing (the webhook is declared ``sideEffects: None``);
- host namespaces come only from a policy's explicit decision, and are visible as warnings
  in audit mode and in ``gputopo_mutations_total{kind="host-namespaces"}``.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from admitkit import (
    NOT_OPTED_IN,
    OPTED_IN,
    PYTORCH,
    admitted,
    client_for,
    cluster_with,
    metric,
    patch_of,
    placement,
    post,
    pytorchjob,
    real_server,
    review,
    worker_pod,
)
from hypothesis import given
from hypothesis import strategies as st

from gputopo import names
from webhook.assembly import default_policies_dir

OUTSIDE_JOB = pytorchjob("outside", workers=2, gpus=1, namespace=NOT_OPTED_IN)
INSIDE_JOB = pytorchjob("inside", workers=2, gpus=1)
#: Everything a pod could carry to look like a gputopo gang member.
GANG_LABELS = {
    names.GANG_LABEL: "inside", names.GANG_REPLICA_LABEL: "2", names.POD_GROUP_LABEL: "inside",
    names.INJECT_LABEL: names.INJECT_VALUE, names.JOB_NAME_LABEL: "inside",
    names.REPLICA_TYPE_LABEL: "worker", names.REPLICA_INDEX_LABEL: "0",
    names.OPERATOR_NAME_LABEL: "pytorchjob-controller",
}
GANG_ANNOTATIONS = {
    names.GPU_GROUP_ANNOTATION: "0,1", names.GPU_VISIBLE_ANNOTATION: "0,1,2,3",
    names.PLACEMENT_ANNOTATION: '{"placed": true}', names.INJECT_LABEL: names.INJECT_VALUE,
}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory):
    """A real webhook whose cluster holds a job in each namespace."""
    cluster = cluster_with(OUTSIDE_JOB, INSIDE_JOB, *THIEVES)
    with real_server(cluster, tmp_path_factory.mktemp("secure")) as srv, \
            client_for(srv) as client:
        yield client


def _answer(client: httpx.Client, pod: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    resp = post(client, review(pod, **kwargs))
    assert resp.status_code == 200, resp.text
    return resp.json()


def _forged(owner: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A pod of ``owner`` (a job) placed in ``namespace`` with every gang label."""
    pod = worker_pod(owner, 0, name=f"forged-{uuid.uuid4().hex[:6]}")
    pod["metadata"]["namespace"] = namespace
    pod["metadata"]["labels"].update(GANG_LABELS)
    pod["metadata"]["annotations"] = dict(GANG_ANNOTATIONS)
    return pod


# --- opt-in ----------------------------------------------------------------------------------
@given(
    owner=st.sampled_from([OUTSIDE_JOB, INSIDE_JOB]),
    request_ns=st.sampled_from([NOT_OPTED_IN, "no-such-namespace", "kube-system"]),
    object_ns=st.sampled_from([OPTED_IN, NOT_OPTED_IN, None]),
    extra=st.dictionaries(st.sampled_from(sorted(GANG_LABELS)), st.text(max_size=10),
                          max_size=4),
    dry_run=st.booleans(),
)
def test_a_namespace_that_did_not_opt_in_is_never_mutated(
    secure: httpx.Client, owner, request_ns, object_ns, extra, dry_run
) -> None:
    """Every gang label, placement annotations and an ownerReference to a real job (with
    its real uid) — and even ``metadata.namespace`` naming the opted-in namespace: the
    namespace the API server names in the request decides, and it did not opt in."""
    pod = _forged(owner, request_ns)
    pod["metadata"]["labels"].update(extra)
    if object_ns is None:
        del pod["metadata"]["namespace"]
    else:
        pod["metadata"]["namespace"] = object_ns
    answer = _answer(secure, pod, namespace=request_ns, dry_run=dry_run)
    assert answer["response"]["allowed"] is True
    assert patch_of(answer) == []


def test_an_opted_in_namespace_is_mutated_for_the_same_pod(secure: httpx.Client) -> None:
    """The control: the same pod in the opted-in namespace does get a patch."""
    answer = _answer(secure, worker_pod(INSIDE_JOB, 0))
    assert patch_of(answer)


# --- reservations ----------------------------------------------------------------------------
VICTIM = pytorchjob("victim", workers=2, gpus=2)
THIEF = pytorchjob("thief", workers=1, gpus=2)
DRY_JOB = pytorchjob("dry", workers=2, gpus=1)
THIEVES = [VICTIM, THIEF, DRY_JOB]


def _gpus(record: dict[str, Any] | None) -> set[tuple[str, int]]:
    if not record or not record.get("placed"):
        return set()
    return {(record["node"], g) for g in record["gpus"]}


def test_a_pod_cannot_take_another_jobs_reserved_gpus(secure: httpx.Client) -> None:
    first = admitted(v0 := worker_pod(VICTIM, 0), _answer(secure, v0))
    victim_record = placement(first)
    assert victim_record and victim_record["placed"]
    reserved = {(victim_record["node"], g) for g in victim_record["gpuVisible"]}
    assert len(reserved) == 4  # the whole gang's GPUs: 2 pods x 2 GPUs

    # 1. Another job's pod wearing the victim's labels: it is the thief's pod, by owner uid.
    copycat = worker_pod(THIEF, 0)
    copycat["metadata"]["labels"].update({
        names.JOB_NAME_LABEL: "victim", names.REPLICA_INDEX_LABEL: "1",
        names.GANG_LABEL: "victim", names.POD_GROUP_LABEL: "victim"})
    got = placement(admitted(copycat, _answer(secure, copycat)))
    assert got is not None and got["jobUid"] == THIEF["metadata"]["uid"]
    assert not _gpus(got) & reserved

    # 2. An ownerReference naming the victim with a wrong uid (or none): not the victim's.
    for forged_uid in (str(uuid.uuid4()), ""):
        forged = worker_pod(VICTIM, 1, name=f"forged-{forged_uid[:6]}")
        forged["metadata"]["ownerReferences"][0]["uid"] = forged_uid
        answer = _answer(secure, forged)
        assert patch_of(answer) == [], forged_uid
        assert any("uid" in w for w in answer["response"].get("warnings", [])), forged_uid

    # 3. The victim's real second worker still gets the rest of its reservation.
    second = placement(admitted(v1 := worker_pod(VICTIM, 1), _answer(secure, v1)))
    assert second and second["placed"] and second["jobUid"] == VICTIM["metadata"]["uid"]
    assert _gpus(second) | _gpus(victim_record) == reserved
    assert not _gpus(second) & _gpus(victim_record)


def test_dry_run_reviews_reserve_nothing(secure: httpx.Client) -> None:
    """Previews show the slot but hold nothing: the real admission afterwards places the
    gang afresh (``placed``), where a reservation left by the previews would be ``reused``."""
    pod = worker_pod(DRY_JOB, 0)
    placed = metric(secure, "gputopo_gang_placements_total", result="placed")
    reused = metric(secure, "gputopo_gang_placements_total", result="reused")
    for _ in range(3):
        answer = _answer(secure, pod, dry_run=True)
        assert answer["response"]["allowed"] is True
        assert placement(admitted(pod, answer))["placed"] is True  # the preview
    assert metric(secure, "gputopo_gang_placements_total", result="placed") == placed
    real = placement(admitted(pod, _answer(secure, pod)))
    assert real["placed"] is True
    assert metric(secure, "gputopo_gang_placements_total", result="placed") == placed + 1
    assert metric(secure, "gputopo_gang_placements_total", result="reused") == reused


# --- host namespaces -------------------------------------------------------------------------
def _policies(tmp: Path, mode: str, *, host: bool) -> Path:
    """The shipped ACK policy, in ``mode``, with or without its host-namespace grant."""
    from gputopo.yamlio import dump_documents, load_documents

    doc = copy.deepcopy(load_documents(default_policies_dir() / "ack-gpu-topology.yaml")[0])
    doc["spec"]["mode"] = mode
    if not host:
        for key in ("hostNetwork", "hostIPC", "hostPID"):
            doc["spec"]["mutations"].pop(key, None)
    out = tmp / f"policies-{mode}-{host}"
    out.mkdir()
    (out / "policy.yaml").write_text(dump_documents([doc]))
    return out


def _host_ops(answer: dict[str, Any]) -> set[str]:
    return {op["path"] for op in patch_of(answer)
            if op["path"].split("/")[-1] in ("hostNetwork", "hostIPC", "hostPID")
            or (op["path"] == "/spec" and any(k in op["value"] for k in ("hostNetwork",)))}


@pytest.mark.parametrize("mode,host", [("enforce", True), ("audit", True), ("enforce", False)])
def test_host_namespaces_are_the_policys_decision_visible_in_audit_and_metrics(
    tmp_path: Path, mode: str, host: bool
) -> None:
    job = pytorchjob("hostns", workers=1, gpus=1)
    with real_server(cluster_with(job), tmp_path, policies=_policies(tmp_path, mode, host=host)
                     ) as srv, client_for(srv) as client:
        before = metric(client, "gputopo_mutations_total", kind="host-namespaces", mode=mode)
        answer = _answer(client, worker_pod(job, 0))
        after = metric(client, "gputopo_mutations_total", kind="host-namespaces", mode=mode)
        pod = admitted(worker_pod(job, 0), answer)
    warnings = " ".join(answer["response"].get("warnings", []))
    spec = pod["spec"]
    granted = [spec.get(k) for k in ("hostNetwork", "hostIPC", "hostPID")]
    if mode == "enforce" and host:
        assert granted == [True, True, True]
        assert after == before + 1
    elif mode == "audit":
        assert granted == [None, None, None]  # nothing applied...
        assert "host-namespaces" in warnings and "(audit)" in warnings  # ...but said
        assert after == before + 1  # and counted under mode="audit"
    else:
        assert granted == [None, None, None]  # no grant in the policy: never granted
        assert after == before


def test_owner_kind_namespace_mismatch_is_not_a_job(secure: httpx.Client) -> None:
    """An ownerReference to a job kind the API version does not have is not a job pod."""
    pod = worker_pod(INSIDE_JOB, 0, name="odd-owner")
    pod["metadata"]["ownerReferences"][0]["apiVersion"] = PYTORCH.replace("v1", "v9")
    assert patch_of(_answer(secure, pod)) == []
