"""Random pods and random reviews through the pipeline: it never raises, answers 200 or 400,
its patches always apply cleanly, and re-admitting a mutated pod gives an empty patch."""

from __future__ import annotations

import json

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputopo import names
from tests.webhook.conftest import body, decoded_patch, namespace, pytorch_job, review
from webhook.steps import AdmissionContext

JOB = pytorch_job(ns="team", workers=3)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.text(max_size=6),
                    st.sampled_from(["1", "2", "0", "500m", "8Gi", "x"]))
junk = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)
good_quantity = st.one_of(st.integers(0, 8), st.sampled_from(["1", "2", "4", "0", "1Gi", "50Gi"]))
resource_names = st.sampled_from([names.SOURCE_GPU_RESOURCE, names.TOPOLOGY_GPU_RESOURCE,
                                  "cpu", "memory", "hugepages-1Gi"])


def pod_strategy(bad: st.SearchStrategy) -> st.SearchStrategy:
    """Pods shaped like the operators' (``bad`` = st.nothing()) or with junk mixed in."""

    def maybe(strategy):
        return st.one_of(st.just(None), strategy, bad)

    quantity = st.one_of(good_quantity, bad)
    containers = st.lists(st.fixed_dictionaries({
        "name": st.one_of(st.text(min_size=1, max_size=5), bad),
        "resources": maybe(st.fixed_dictionaries({
            "limits": maybe(st.dictionaries(resource_names, quantity, max_size=3)),
            "requests": maybe(st.dictionaries(resource_names, quantity, max_size=3)),
        })),
        "securityContext": maybe(st.dictionaries(
            st.sampled_from(["privileged", "runAsUser"]), scalars, max_size=2)),
        "volumeMounts": maybe(st.lists(st.fixed_dictionaries({
            "name": st.sampled_from(["sys", "data"]),
            "mountPath": st.sampled_from(["/sys", "/sys/", "/data"])}), max_size=2)),
    }), max_size=3)
    owner = st.fixed_dictionaries({
        "apiVersion": st.sampled_from(["kubeflow.org/v1"] * 4 + ["batch/v1"]),
        "kind": st.sampled_from(["PyTorchJob"] * 4 + ["Job", "ReplicaSet"]),
        "name": st.sampled_from(["pt"] * 4 + ["other"]),
        "uid": st.just("uid-pt"),
        "controller": st.one_of(st.just(True), st.booleans(), bad),
    })
    return st.fixed_dictionaries({
        "apiVersion": st.one_of(st.just("v1"), bad),
        "kind": st.one_of(st.just("Pod"), bad),
        "metadata": st.one_of(st.fixed_dictionaries({
            "name": st.text(min_size=1, max_size=5),
            "namespace": st.sampled_from(["team", "team", "elsewhere"]),
            "labels": maybe(st.builds(
                lambda role, extra: {names.REPLICA_TYPE_LABEL: role, **extra},
                st.sampled_from(["worker", "master", "ps"]),
                st.dictionaries(st.sampled_from([names.GANG_LABEL, names.GANG_REPLICA_LABEL,
                                                 "x"]),
                                st.sampled_from(["pt", "3", "2"]), max_size=2))),
            "ownerReferences": maybe(st.lists(owner, min_size=1, max_size=2)),
        }), bad),
        "spec": st.one_of(st.fixed_dictionaries({
            "containers": containers,
            "initContainers": maybe(containers),
            "hostNetwork": maybe(st.booleans()),
            "dnsPolicy": maybe(st.sampled_from(["ClusterFirst", "None", "Default"])),
            "schedulerName": maybe(st.sampled_from(["default-scheduler", "volcano"])),
            "volumes": maybe(st.lists(st.fixed_dictionaries({
                "name": st.sampled_from(["sys", "data"]), "emptyDir": st.just({})}),
                max_size=2)),
        }), bad),
    })


def as_job_pod(pod: dict, gpus: int, role: str) -> dict:
    """Force the parts that make a pod a GPU pod of JOB (so most examples get mutated)."""
    meta = pod["metadata"]
    meta["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                "name": "pt", "uid": "uid-pt", "controller": True}]
    meta["namespace"] = "team"
    meta["labels"] = {**(meta.get("labels") or {}), names.REPLICA_TYPE_LABEL: role}
    spec = pod["spec"]
    first = {"name": "gpu", "resources": {"limits": {names.SOURCE_GPU_RESOURCE: gpus}}}
    spec["containers"] = [first, *spec["containers"]]
    return pod


pods = st.one_of(
    pod_strategy(st.nothing()),
    pod_strategy(junk),
    st.builds(as_job_pod, pod_strategy(st.nothing()), st.integers(1, 8),
              st.sampled_from(["master", "worker"])),
)


class ChaosStep:
    """A placement-like step that writes an annotation, to exercise the steps path."""

    name = "chaos"

    def apply(self, ctx: AdmissionContext) -> None:
        meta = ctx.pod.setdefault("metadata", {})
        meta.setdefault("annotations", {})[names.PLACEMENT_ANNOTATION] = "{}"


@pytest.fixture(scope="module")
def admitter():
    from gputopo.cluster.snapshot import ClusterSnapshot
    from tests.webhook.conftest import POLICIES
    from webhook.assembly import build_admitter

    a = build_admitter(POLICIES, ClusterSnapshot.from_objects([namespace("team"), JOB]),
                       placement=ChaosStep(), reload_interval_s=0)
    yield a
    a.close()


@given(pod=pods)
def test_random_pods_never_raise_and_patches_apply(admitter, pod):
    status, answer = admitter.handle_body(body(review(pod)))
    assert status in (200, 400)
    if status == 400:
        assert isinstance(answer["error"], str) and answer["error"]
        return
    patch = decoded_patch(answer)
    mutated = jsonpatch.apply_patch(pod, patch)
    json.dumps(mutated)
    status, again = admitter.handle_body(body(review(mutated)))
    assert status == 200
    assert decoded_patch(again) == []


@given(doc=junk, raw=st.binary(max_size=40))
def test_random_bodies_never_raise(admitter, doc, raw):
    for payload in (body(doc), raw, body({"apiVersion": "admission.k8s.io/v1",
                                          "kind": "AdmissionReview", "request": doc})):
        status, _ = admitter.handle_body(payload)
        assert status in (200, 400)
