"""An admitter that has answered reviews answers the next one from the cluster and policies
as they are now: a namespace relabelled, a snapshot rebuilt, policies reloaded, a job
replaced (new size, labels, uid). Each through the public interfaces, answers compared
with what a fresh admitter says."""

from __future__ import annotations

import copy
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
from webhook.jobs import JobNotFound, resolve_job
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
