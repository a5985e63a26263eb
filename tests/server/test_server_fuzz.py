"""Hypothesis-made bad input over real HTTPS: the server answers 200 or 400, never 500, and
keeps answering. The real pipeline is behind it, so a crash anywhere on the path shows up."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st
from serverkit import admission_review, requests_total, scrape

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["", "1", "0", "-1", "500m", "8Gi", "CREATE", "Pod", "v1", "nvidia.com/gpu"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON value (dict keys and list indexes)."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, (*prefix, index))


def broken(review: dict[str, Any], path: tuple[Any, ...], action: str, junk: Any) -> Any:
    """``review`` with the value at ``path`` replaced by ``junk`` or removed."""
    if not path:
        return junk
    doc = copy.deepcopy(review)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if action == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = junk
    return doc


def post(client: httpx.Client, body: bytes) -> httpx.Response:
    answer = client.post("/mutate", content=body, headers={"content-type": "application/json"})
    assert answer.status_code in (200, 400), (answer.status_code, answer.text, body[:300])
    payload = answer.json()
    if answer.status_code == 400:
        assert isinstance(payload["error"], str) and payload["error"]
    else:
        assert isinstance(payload["response"]["allowed"], bool)
    return answer


@pytest.fixture(scope="module", autouse=True)
def no_internal_errors(real_client: httpx.Client) -> Iterator[None]:
    """Whatever the fuzzing sent: zero 500s counted, and the server still answers."""
    before = requests_total(scrape(real_client), "error")
    yield
    assert requests_total(scrape(real_client), "error") == before
    assert real_client.get("/healthz").status_code == 200
    assert real_client.get("/readyz").status_code == 200


@given(body=st.binary(max_size=400))
def test_binary_junk(real_client: httpx.Client, body: bytes) -> None:
    post(real_client, body)


@given(value=json_values)
def test_random_json(real_client: httpx.Client, value: Any) -> None:
    post(real_client, json.dumps(value).encode())


@given(data=st.data())
def test_review_with_one_field_broken(
    real_client: httpx.Client, seed_pods: dict[str, dict[str, Any]], data: st.DataObject
) -> None:
    pod = seed_pods[data.draw(st.sampled_from(sorted(seed_pods)))]
    review = admission_review(pod, "uid-fuzz")
    path = data.draw(st.sampled_from(list(paths(review))))
    action = data.draw(st.sampled_from(["replace", "delete"]) if path else st.just("replace"))
    doc = broken(review, path, action, data.draw(json_values))
    answer = post(real_client, json.dumps(doc).encode())
    if answer.status_code == 200:
        response = answer.json()["response"]
        assert response["uid"] == doc["request"]["uid"]
        if "patch" in response:  # whatever it patched must apply to what it was sent
            patch = json.loads(base64.b64decode(response["patch"]))
            jsonpatch.apply_patch(doc["request"]["object"], patch)


@given(
    api_version=st.one_of(st.text(max_size=20), st.sampled_from(["admission.k8s.io/v1beta1"])),
    kind=st.one_of(st.text(max_size=15), st.sampled_from(["AdmissionReviewList", "Pod"])),
)
def test_wrong_api_version_or_kind(
    real_client: httpx.Client,
    seed_pods: dict[str, dict[str, Any]],
    api_version: str,
    kind: str,
) -> None:
    review = admission_review(seed_pods["pytorch-dist-nccl-worker-0"], "uid-wrong")
    review["apiVersion"], review["kind"] = api_version, kind
    valid = api_version == "admission.k8s.io/v1" and kind == "AdmissionReview"
    assert post(real_client, json.dumps(review).encode()).status_code == (200 if valid else 400)


@given(
    kind=st.sampled_from(["ConfigMap", "Deployment", "Service", "Job", "Namespace"]),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]),
    body=json_values,
)
def test_objects_that_are_not_pods_are_left_alone(
    real_client: httpx.Client, kind: str, operation: str, body: Any
) -> None:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "namespace": "team-a"},
           "spec": body}
    review = admission_review(obj, "uid-other")
    review["request"]["kind"] = {"group": "", "version": "v1", "kind": kind}
    review["request"]["resource"] = {"group": "", "version": "v1", "resource": kind.lower() + "s"}
    review["request"]["operation"] = operation
    answer = post(real_client, json.dumps(review).encode())
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["allowed"] is True and "patch" not in response


@given(labels=st.dictionaries(st.text(max_size=40), st.text(max_size=40), max_size=200))
def test_huge_label_maps_and_unicode(
    real_client: httpx.Client, seed_pods: dict[str, dict[str, Any]], labels: dict[str, str]
) -> None:
    pod = copy.deepcopy(seed_pods["pytorch-dist-nccl-worker-0"])
    pod["metadata"]["labels"] = {**pod["metadata"]["labels"], **labels}
    post(real_client, json.dumps(admission_review(pod, "uid-labels")).encode())


@given(
    depth=st.one_of(st.integers(1, 600), st.integers(600, 5000)),
    where=st.sampled_from(["spec", "metadata", "container", "request"]),
)
def test_deep_nesting(
    real_client: httpx.Client, seed_pods: dict[str, dict[str, Any]], depth: int, where: str
) -> None:
    """Nested far deeper than any Kubernetes object (and than Python's recursion limit):
    written as text, since the client's own JSON encoder would refuse it."""
    pod = copy.deepcopy(seed_pods["pytorch-dist-nccl-worker-0"])
    review = admission_review(pod, "uid-deep")
    marker = "@@nested@@"
    if where == "spec":
        pod["spec"]["nested"] = marker
    elif where == "metadata":
        pod["metadata"]["labels"]["nested"] = marker
    elif where == "container":
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = marker
    else:
        review["request"]["nested"] = marker
    nested = '{"a":[' * depth + '"bottom"' + "]}" * depth
    body = json.dumps(review).replace(json.dumps(marker), nested, 1)
    post(real_client, body.encode())
