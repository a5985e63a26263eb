"""``Admitter.answer_at_once`` (what the server's event loop runs) decides exactly what
``handle_body`` decides, and hands everything in scope to the admitter thread.

Corpus: the seeds' pods (in and out of opted-in namespaces) and fuzzed pods and bodies
(tests/webhook/test_hypothesis.py's strategies).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.yamlio import load_documents
from tests.webhook.conftest import POLICIES, SEED_CASES, body, namespace, review
from tests.webhook.test_hypothesis import JOB, ChaosStep, junk, pods
from webhook.assembly import build_admitter
from webhook.pipeline import InScope
from webhook.review import AdmissionRequest


def both_ways(admitter: Any, raw: bytes) -> tuple[Any, Any, bool]:
    """(answer via answer_at_once [+ handle_request], answer via handle_body, at once?)"""
    quick = admitter.answer_at_once(raw)
    at_once = not isinstance(quick, AdmissionRequest | InScope)
    via_quick = quick if at_once else admitter.handle_request(quick)
    return via_quick, admitter.handle_body(raw), at_once


@pytest.fixture(scope="module")
def admitter():
    a = build_admitter(POLICIES, ClusterSnapshot.from_objects(
        [namespace("team"), namespace("elsewhere", opted_in=False), JOB]),
        placement=ChaosStep(), reload_interval_s=0)
    yield a
    a.close()


@given(pod=pods)
def test_fuzzed_pods_get_the_same_answer(admitter, pod):
    quick, slow, at_once = both_ways(admitter, body(review(pod)))
    assert json.dumps(quick) == json.dumps(slow)
    if at_once and quick[0] == 200:
        assert "patch" not in quick[1]["response"], "a mutation was decided on the loop"


@given(doc=junk, raw=st.binary(max_size=40))
def test_fuzzed_bodies_get_the_same_answer(admitter, doc, raw):
    for payload in (body(doc), raw, body({"apiVersion": "admission.k8s.io/v1",
                                          "kind": "AdmissionReview", "request": doc})):
        quick, slow, _ = both_ways(admitter, payload)
        assert json.dumps(quick) == json.dumps(slow)


@pytest.mark.parametrize("case", ["ack-pytorch", "not-opted-in"])
def test_seed_pods_in_scope_go_to_the_admitter_thread_the_rest_is_answered_at_once(case):
    docs = load_documents(SEED_CASES / case / "resources.yaml")
    cluster = ClusterSnapshot.from_objects([d for d in docs if d["kind"] != "Pod"])
    admitter = build_admitter(POLICIES, cluster, reload_interval_s=0)
    try:
        for i, pod in enumerate(d for d in docs if d["kind"] == "Pod"):
            quick, slow, at_once = both_ways(admitter, body(review(pod, uid=f"u{i}")))
            assert json.dumps(quick) == json.dumps(slow)
            assert at_once == (case == "not-opted-in"), pod["metadata"]["name"]
    finally:
        admitter.close()


def test_a_reader_without_memory_only_sends_everything_to_the_thread():
    class Plain:  # a ClusterReader with no memory_only(): the old path for everything
        def __init__(self, snap: ClusterSnapshot) -> None:
            self.snap = snap

        def namespace(self, name: str) -> Any:
            return self.snap.namespace(name)

        def object(self, **kw: Any) -> Any:
            return self.snap.object(**kw)

        def node_states(self) -> Any:
            return self.snap.node_states()

    admitter = build_admitter(POLICIES, Plain(ClusterSnapshot.from_objects(
        [namespace("elsewhere", opted_in=False)])), reload_interval_s=0)
    try:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "elsewhere"},
               "spec": {"containers": [{"name": "c", "image": "x"}]}}
        assert isinstance(admitter.answer_at_once(body(review(pod))), AdmissionRequest)
        assert admitter.answer_at_once(b"{")[0] == 400  # bad input needs no cluster
    finally:
        admitter.close()
