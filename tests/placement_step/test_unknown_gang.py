"""A JobSet pod whose gang cannot be read is admitted unplaced, the record saying why
(issue 20, "Bad input"; webhook/placement/unknown_gang.py).

``gputopo serve``'s wiring on the Kubernetes API TEST DOUBLE: the TrainJob, its JobSet and
Jobs are stored as the controllers create them (``apply_chain``: the double gives the
uids), then the JobSet is deleted (or re-created with a new uid) before its pods come.
"""

from __future__ import annotations

import copy
from typing import Any

from k8s_double.owner_chain import apply_chain
from placement_checks import admit, record
from test_placement_live import _wait, demo_docs, live_admitter

from gputopo import names
from gputopo.operators import expand, with_identity

TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")


def _trainjob(name: str) -> dict[str, Any]:
    return with_identity({
        "apiVersion": TRAINJOB[0], "kind": TRAINJOB[1],
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}}})


def _stored_jobset(kube: Any, name: str) -> dict[str, Any]:
    return next(o for o in kube.objects(*JOBSET) if o["metadata"]["name"] == name)


def test_a_pod_whose_jobset_was_deleted_is_admitted_unplaced_with_the_reason(kube) -> None:
    demo_docs(kube)
    job = _trainjob("orphan")
    pods = apply_chain(kube, [job, *expand(job)])
    kube.remove(_stored_jobset(kube, "orphan"))
    with live_admitter(kube) as (admitter, view):
        assert _wait(lambda: view.object(api_version=JOBSET[0], kind=JOBSET[1],
                                          namespace="default", name="orphan") is None, timeout=8.0)
        out = admit(admitter, pods[0])
    rec = record(out)
    assert rec is not None and rec["placed"] is False
    assert rec["reason"] == ("owner JobSet default/orphan not found; gang size unknown, so "
                             "the gang cannot be placed")
    assert rec["job"] == "JobSet default/orphan" and rec["node"] is None and rec["gpus"] == []
    # nothing else: no gang labels, no rename, no pin
    assert names.GANG_LABEL not in out["metadata"].get("labels", {})
    assert out["spec"] == pods[0]["spec"]


def test_a_pod_of_a_namesake_jobset_is_admitted_unplaced(kube) -> None:
    """The JobSet was deleted and made again under its name: a new uid, not this pod's gang."""
    demo_docs(kube)
    job = _trainjob("again")
    pods = apply_chain(kube, [job, *expand(job)])
    old = _stored_jobset(kube, "again")
    kube.remove(old)
    fresh = copy.deepcopy(old)
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        fresh["metadata"].pop(key, None)
    new_uid = kube.apply(fresh)["metadata"]["uid"]
    assert new_uid != old["metadata"]["uid"]
    with live_admitter(kube) as (admitter, view):
        assert _wait(lambda: (view.object(api_version=JOBSET[0], kind=JOBSET[1],
                                           namespace="default", name="again") or {}
                               ).get("metadata", {}).get("uid") == new_uid, timeout=8.0)
        out = admit(admitter, pods[1])
    rec = record(out)
    assert rec is not None and rec["placed"] is False
    assert rec["reason"].startswith(f"owner JobSet default/again has uid {new_uid}, the "
                                    f"reference names {old['metadata']['uid']}")


def test_the_same_pod_with_its_jobset_present_is_placed(kube) -> None:
    """The control: nothing deleted, the same pod gets its slot (so the tests above can fail)."""
    demo_docs(kube)
    job = _trainjob("whole")
    pods = apply_chain(kube, [job, *expand(job)])
    with live_admitter(kube) as (admitter, view):
        assert _wait(lambda: view.object(api_version=TRAINJOB[0], kind=TRAINJOB[1],
                                          namespace="default", name="whole") is not None,
                     timeout=8.0)
        out = admit(admitter, pods[0])
    rec = record(out)
    assert rec is not None and rec["placed"] is True and rec["job"] == "TrainJob default/whole"
