"""Hypothesis over AdmissionReviews and pod specs, sent over real HTTPS to the real server.

Claim: whatever a client sends — deep nesting, huge label maps, unicode everywhere, wrong
types, nulls where objects are expected, broken review envelopes — the webhook answers 200
(a well-formed review response whose patch applies to the pod) or 400 (a JSON error), never
500, and stays alive. The pods start from real training-job pods of jobs the cluster holds,
so many examples get through parsing into policy matching, job resolution and placement.
"""

from __future__ import annotations

import copy
import json
import sys
import uuid
from typing import Any

import httpx
import jsonpatch
import pytest
from admitkit import (
    FUZZ_JOBS,
    NOT_OPTED_IN,
    OPTED_IN,
    metric,
    patch_of,
    post,
    review,
    worker_pod,
)
from hypothesis import given
from hypothesis import strategies as st

from gputopo import names

DEEP = "__gputopo_deep__"

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)
label_keys = st.one_of(
    st.sampled_from([names.GANG_LABEL, names.GANG_REPLICA_LABEL, names.POD_GROUP_LABEL,
                     names.JOB_NAME_LABEL, names.REPLICA_INDEX_LABEL, names.REPLICA_TYPE_LABEL,
                     names.INJECT_LABEL, names.GPU_GROUP_ANNOTATION]),
    st.text(min_size=1, max_size=30),
)
#: Where a corruption may land: the fields the pipeline reads.
PATHS = [
    ("metadata",), ("metadata", "labels"), ("metadata", "annotations"),
    ("metadata", "ownerReferences"), ("metadata", "ownerReferences", 0),
    ("metadata", "ownerReferences", 0, "uid"), ("metadata", "ownerReferences", 0, "controller"),
    ("metadata", "ownerReferences", 0, "name"), ("metadata", "namespace"), ("spec",),
    ("spec", "containers"), ("spec", "containers", 0), ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "limits"),
    ("spec", "containers", 0, "resources", "limits", names.SOURCE_GPU_RESOURCE),
    ("spec", "containers", 0, "env"), ("spec", "initContainers"), ("spec", "nodeName"),
    ("spec", "affinity"), ("spec", "hostNetwork"), ("spec", "schedulerName"),
    ("metadata", "labels", names.REPLICA_INDEX_LABEL),
]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    """Put ``value`` at ``path`` if the parents exist with the right shape (else no-op)."""
    node = doc
    for step in path[:-1]:
        if isinstance(step, int):
            if not isinstance(node, list) or len(node) <= step:
                return
        elif not isinstance(node, dict) or step not in node:
            return
        node = node[step]
    last = path[-1]
    if isinstance(last, int):
        if isinstance(node, list) and len(node) > last:
            node[last] = value
    elif isinstance(node, dict):
        node[last] = value


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """A real worker pod of a cluster job, then a few corruptions of the fields we read."""
    job = draw(st.sampled_from(FUZZ_JOBS))
    pod = worker_pod(job, draw(st.integers(0, 5)), name=f"fuzz-{uuid.uuid4().hex[:8]}")
    pod["metadata"]["namespace"] = draw(st.sampled_from([OPTED_IN, OPTED_IN, NOT_OPTED_IN]))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        path = draw(st.sampled_from(PATHS))
        value = draw(st.one_of(json_values, st.just(DEEP)))
        _set(pod, path, value)
    if draw(st.booleans()):  # a big label map of unicode keys and values
        labels = draw(st.dictionaries(label_keys, st.text(max_size=20), max_size=300))
        if isinstance(pod.get("metadata"), dict):
            pod["metadata"]["labels"] = labels
    return pod


@st.composite
def envelopes(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A review of a fuzzed pod, its envelope sometimes broken, and a nesting depth."""
    body = review(draw(pods()), dry_run=draw(st.booleans()))
    request = body["request"]
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        key = draw(st.sampled_from(["uid", "kind", "resource", "operation", "namespace",
                                    "object", "dryRun", "subResource", "name"]))
        request[key] = draw(json_values)
    if draw(st.sampled_from([False] * 9 + [True])):
        body[draw(st.sampled_from(["apiVersion", "kind", "request"]))] = draw(json_values)
    depth = draw(st.sampled_from([0, 50, 900, 5000]))
    return body, depth


def _encode(body: dict[str, Any], depth: int) -> bytes:
    """JSON text of ``body``; the DEEP marker becomes ``depth`` nested objects (written as
    text: the encoder itself would refuse that depth)."""
    text = json.dumps(body)
    nested = '{"a":' * depth + "1" + "}" * depth if depth else "{}"
    return text.replace(json.dumps(DEEP), nested).encode()


def _check(resp: httpx.Response, sent: bytes) -> None:
    """200 with a response for the uid sent and a patch that applies to the pod sent, or a
    JSON 400."""
    assert resp.status_code in (200, 400), resp.text[:300]
    answer = resp.json()
    if resp.status_code == 400:
        assert isinstance(answer.get("error"), str) and answer["error"]
        return
    body = _loads_deep(sent)  # what the server saw (the deep marker expanded)
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    pod = body["request"]["object"]
    patch = patch_of(answer)
    if patch:
        jsonpatch.apply_patch(copy.deepcopy(pod), patch)  # raises if it does not apply


def _loads_deep(sent: bytes) -> dict:
    """``json.loads`` of a body the server answered: the fuzzer nests up to thousands of
    levels, which the server reads but Python's default recursion limit (1,000) does not."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50_000))
    try:
        return json.loads(sent)
    finally:
        sys.setrecursionlimit(limit)


@pytest.fixture(scope="module", autouse=True)
def errors_before(client: httpx.Client) -> float:
    """500s counted before this module ran (the metrics registry is per process)."""
    return metric(client, "gputopo_admission_requests_total", outcome="error")


@given(case=envelopes())
def test_fuzzed_reviews_get_200_or_400_never_500(client: httpx.Client, case) -> None:
    body, depth = case
    sent = _encode(body, depth)
    _check(post(client, sent), sent)


@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                     json_values.map(lambda v: json.dumps(v).encode())))
def test_arbitrary_bytes_get_a_json_400(client: httpx.Client, raw: bytes) -> None:
    resp = post(client, raw)
    assert resp.status_code == 400
    assert resp.json()["error"]


def test_the_server_is_alive_and_counted_no_internal_error(
    client: httpx.Client, errors_before: float
) -> None:
    """Runs after the fuzzing in this module (same server): no 500 was ever answered."""
    assert client.get("/healthz").status_code == 200
    assert metric(client, "gputopo_admission_requests_total", outcome="error") == errors_before
    assert metric(client, "gputopo_admission_requests_total", outcome="bad_request") > 0
