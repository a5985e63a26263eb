"""AdmissionReview handling through Admitter.handle_body: 400 with a reason for bad input,
untouched allow for everything that is not a Pod CREATE, uid echoed."""

from __future__ import annotations

import copy

import pytest

from tests.webhook.conftest import body, namespace, operator_pod, pytorch_job, review


@pytest.fixture
def admitter(make_admitter):
    job = pytorch_job(ns="team")
    return make_admitter([namespace("team"), job])


def _pod():
    return operator_pod(pytorch_job(ns="team"), "worker", 0)


def _bad(mutate):
    doc = review(_pod())
    mutate(doc)
    return doc


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "not a JSON object"),
        (body(review(None)).replace(b'"object": null', b'"object": NaN'), "NaN"),
        (b"[" * 100000, "not JSON"),
        (body(_bad(lambda d: d.update(apiVersion="admission.k8s.io/v1beta1"))), "apiVersion"),
        (body(_bad(lambda d: d.update(kind="Review"))), "kind"),
        (body(_bad(lambda d: d.pop("request"))), "missing request"),
        (body(_bad(lambda d: d["request"].pop("uid"))), "request.uid"),
        (body(_bad(lambda d: d["request"].update(uid=7))), "request.uid"),
        (body(_bad(lambda d: d["request"].pop("object"))), "request.object"),
        (body(_bad(lambda d: d["request"]["object"].update(kind="Deployment"))), "not a v1 Pod"),
        (body(_bad(lambda d: d["request"]["object"]["spec"].update(containers={}))),
         "spec.containers"),
        (body(_bad(lambda d: d["request"]["object"]["spec"]["containers"][0]["resources"]
                   ["limits"].update({"nvidia.com/gpu": "lots"}))), "not a quantity"),
        (body(_bad(lambda d: d["request"]["object"]["metadata"].update(labels={"a": 1}))),
         "metadata.labels"),
        (body(_bad(lambda d: d["request"]["object"]["spec"].update(hostNetwork="yes"))),
         "hostNetwork"),
        (body(_bad(lambda d: d["request"].update(dryRun="no"))), "dryRun"),
    ],
)
def test_bad_input_is_400_with_reason(admitter, raw, needle):
    status, answer = admitter.handle_body(raw)
    assert status == 400
    assert needle in answer["error"]


def test_response_echoes_uid_and_patches_a_pod_create(admitter):
    status, answer = admitter.handle_body(body(review(_pod(), uid="abc-123")))
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "abc-123"
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"operation": "UPDATE"},
        {"operation": "DELETE"},
        {"kind": "Deployment", "resource": "deployments"},
        {"sub": "status"},
        {"sub": "ephemeralcontainers"},
    ],
)
def test_everything_but_pod_create_is_allowed_untouched(admitter, kwargs):
    pod = _pod()
    obj = None if kwargs.get("operation") == "DELETE" else copy.deepcopy(pod)
    if kwargs.get("kind") == "Deployment":
        obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    status, answer = admitter.handle_body(body(review(obj, **kwargs)))
    assert status == 200
    assert answer["response"] == {"uid": "req-1", "allowed": True}


@pytest.mark.parametrize("cpu", ["250n", "500u", "1e3m", "0.5", "1k"])
def test_every_kubernetes_quantity_suffix_is_accepted(admitter, cpu):
    """The API server sends canonical quantities with the n and u suffixes too (a cpu
    request of 0.0000005 is "500n"): a valid pod must never be a 400."""
    pod = _pod()
    pod["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = cpu
    status, answer = admitter.handle_body(body(review(pod)))
    assert status == 200, answer
    assert answer["response"]["allowed"] is True


def test_a_pod_let_through_untouched_is_not_read_so_not_refused(make_admitter):
    """The pod's shape is checked once the pipeline will read it (a job's pod in an
    opted-in namespace, above: 400); a plain pod, or a job's pod of a namespace that did
    not opt in, is allowed untouched whatever its body holds."""
    job = pytorch_job(ns="team")
    other = pytorch_job(ns="other")
    admitter = make_admitter([namespace("team"), namespace("other", opted_in=False), job,
                              other])
    plain = operator_pod(job, "worker", 0)
    plain["metadata"].pop("ownerReferences")
    outside = operator_pod(other, "worker", 0)
    for pod in (plain, outside):
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
        status, answer = admitter.handle_body(body(review(pod)))
        assert status == 200
        assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    status, answer = admitter.handle_body(body(review(operator_pod(job, "worker", 1))))
    assert status == 200 and "patch" in answer["response"]  # the sound job pod is mutated
