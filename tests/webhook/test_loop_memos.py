"""What the event loop's share keeps between reviews goes stale with nothing it depends on:
the snapshot's opt-in answer per namespace (a namespace relabelled, the snapshot rebuilt),
the policy store's set in force (reloaded), the facts resolve_job keeps per job object (the
job replaced: new size, labels, uid), the OwnerRef handed out per owner. Each through the
public interfaces, answers compared with what a fresh admitter (nothing kept) says."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gputopo import names
from gputopo.cluster.snapshot import ClusterSnapshot
from tests.webhook.conftest import (
    POLICIES,
    body,
    namespace,
    operator_pod,
    pytorch_job,
    review,
    write_policy,
)
from webhook.assembly import build_admitter
from webhook.jobs import JobNotFound, controller_ref, resolve_job
from webhook.pipeline import Admitter, InScope
from webhook.review import AdmissionRequest

GPUS = frozenset({names.SOURCE_GPU_RESOURCE})


def split(admitter: Admitter, pod: dict[str, Any], uid: str = "u") -> tuple[bool, Any]:
    """(answered on the loop?, the answer as the server gives it)."""
    raw = body(review(pod, uid=uid))
    quick = admitter.answer_at_once(raw)
    at_once = not isinstance(quick, AdmissionRequest | InScope)
    return at_once, quick if at_once else admitter.handle_request(quick)


def fresh_answer(objects: list[dict[str, Any]], pod: dict[str, Any], uid: str = "u",
                 policies: Path = POLICIES) -> Any:
    a = build_admitter(policies, ClusterSnapshot.from_objects(copy.deepcopy(objects)),
                       reload_interval_s=0)
    try:
        return a.handle_body(body(review(pod, uid=uid)))
    finally:
        a.close()


@pytest.fixture
def admitter_over():
    made: list[Admitter] = []

    def make(cluster: ClusterSnapshot, policies: Path = POLICIES) -> Admitter:
        a = build_admitter(policies, cluster, reload_interval_s=0)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()


def test_a_namespace_relabelled_in_the_snapshot_changes_the_answer(admitter_over) -> None:
    job = pytorch_job(ns="team", workers=2)
    pod, plain = operator_pod(job, "Worker", 0), operator_pod(job, "Worker", 1, owner=False)
    cluster = ClusterSnapshot.from_objects([namespace("team", opted_in=False), job])
    a = admitter_over(cluster)
    assert split(a, pod) == (True, fresh_answer([namespace("team", opted_in=False), job], pod))
    cluster.add(namespace("team"))  # opted in now
    at_once, answer = split(a, pod)
    assert not at_once and answer == fresh_answer([namespace("team"), job], pod)
    assert "patch" in answer[1]["response"]
    assert split(a, plain) == (True, fresh_answer([namespace("team"), job], plain))
    cluster.add(namespace("team", opted_in=False))  # and out again
    at_once, answer = split(a, pod)
    assert at_once and "patch" not in answer[1]["response"]


def test_a_rebuilt_snapshot_is_read_afresh(admitter_over) -> None:
    job = pytorch_job(ns="team")
    pod = operator_pod(job, "Worker", 0)
    a = admitter_over(ClusterSnapshot.from_objects([namespace("team", opted_in=False), job]))
    assert split(a, pod)[0]
    a.cluster = ClusterSnapshot.from_objects([namespace("team"), job])  # a new reader
    at_once, answer = split(a, pod)
    assert not at_once and "patch" in answer[1]["response"]


def test_a_namespace_not_in_the_snapshot_is_skipped_as_before(admitter_over) -> None:
    job = pytorch_job(ns="ghost")
    pod = operator_pod(job, "Worker", 0)
    a = admitter_over(ClusterSnapshot.from_objects([job]))
    assert split(a, pod) == (True, fresh_answer([job], pod))


def test_reloaded_policies_are_the_ones_in_force(tmp_path, admitter_over) -> None:
    job = pytorch_job(ns="team")
    pod = operator_pod(job, "Worker", 0)
    objects = [namespace("team"), job]
    write_policy(tmp_path, "first", extra="  match:\n    roles: [master]\n")
    a = admitter_over(ClusterSnapshot.from_objects(copy.deepcopy(objects)), tmp_path)
    before = a.store.in_force
    assert split(a, pod) == (True, fresh_answer(objects, pod, policies=tmp_path))  # a worker
    write_policy(tmp_path, "first", extra="  match:\n    roles: [worker]\n")
    assert a.store.reload()
    assert a.store.in_force is not before and list(a.store.in_force) == a.store.policies()
    at_once, answer = split(a, pod)
    assert not at_once and answer == fresh_answer(objects, pod, policies=tmp_path)
    assert "patch" in answer[1]["response"]
    (tmp_path / "first.yaml").write_text("not: [a policy", encoding="utf-8")
    assert not a.store.reload()  # a bad reload keeps the last good set in force
    assert split(a, pod)[1] == answer


def test_a_replaced_job_is_resolved_afresh() -> None:
    job = pytorch_job(ns="team", workers=2)
    cluster = ClusterSnapshot.from_objects([namespace("team"), job])
    first = resolve_job(operator_pod(job, "Worker", 0), "team", cluster, GPUS)
    again = resolve_job(operator_pod(job, "Worker", 1), "team", cluster, GPUS)
    assert first is not None and again is not None
    assert (again.gang_size, again.replica_type, again.replica_index) == (3, "Worker", 1)
    assert again.labels == first.labels and again.labels is not first.labels  # copies

    bigger = copy.deepcopy(job)  # replaced: more workers, a label, GPUs in the master only
    bigger["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 5
    bigger["metadata"]["labels"] = {"team": "vision"}
    cluster.add(bigger)
    info = resolve_job(operator_pod(job, "Worker", 1), "team", cluster, GPUS)
    assert info is not None
    assert (info.gang_size, info.labels) == (6, {"team": "vision"})
    assert info == resolve_job(operator_pod(job, "Worker", 1), "team",
                               ClusterSnapshot.from_objects([copy.deepcopy(bigger)]), GPUS)

    renewed = copy.deepcopy(bigger)  # deleted and re-created: a new uid
    renewed["metadata"]["uid"] = "uid-new"
    cluster.add(renewed)
    with pytest.raises(JobNotFound, match="has uid uid-new, the pod names uid-pt"):
        resolve_job(operator_pod(job, "Worker", 1), "team", cluster, GPUS)


def test_remembered_job_facts_give_what_a_first_look_gives() -> None:
    job = pytorch_job(ns="team", workers=3)
    job["spec"]["pytorchReplicaSpecs"]["worker"] = job["spec"]["pytorchReplicaSpecs"].pop(
        "Worker")  # a lower-case key: the pods' "Worker" label still finds it
    cluster = ClusterSnapshot.from_objects([namespace("team"), job])
    pods = [operator_pod(job, "Worker", i) for i in range(3)] + [
        operator_pod(job, "Master", 0)]
    legacy = operator_pod(job, "Worker", 2)
    labels = legacy["metadata"]["labels"]
    labels["replica-type"] = labels.pop(names.REPLICA_TYPE_LABEL)
    labels["replica-index"] = labels.pop(names.REPLICA_INDEX_LABEL)
    for pod in [*pods, legacy]:
        kept = resolve_job(pod, "team", cluster, GPUS)  # the job's facts kept by now
        alone = resolve_job(pod, "team", ClusterSnapshot.from_objects([copy.deepcopy(job)]),
                            GPUS)
        assert kept == alone and kept is not None
        assert json.dumps(vars(kept), sort_keys=True, default=str) == json.dumps(
            vars(alone), sort_keys=True, default=str)


def test_one_owner_ref_per_owner() -> None:
    job = pytorch_job(ns="team", workers=2)
    a, b = operator_pod(job, "Worker", 0), operator_pod(job, "Worker", 1)
    assert controller_ref(a) is controller_ref(b)
    other = copy.deepcopy(b)
    other["metadata"]["ownerReferences"][0]["uid"] = "uid-other"
    ref = controller_ref(other)
    assert ref is not None and ref.uid == "uid-other" and ref != controller_ref(a)
