"""Over real HTTPS: out-of-scope reviews are answered on the event loop, so they do not queue
behind an admission that holds the one admitter thread; in-scope reviews still go through
that thread, one at a time."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from serverkit import RunningServer, admission_review, make_pair, project_secret, start_server

from gputopo import yamlio
from gputopo.cluster.snapshot import ClusterSnapshot
from tests.server.serverkit import SEED_RESOURCES
from webhook.assembly import build_admitter, default_policies_dir
from webhook.steps import AdmissionContext


class HeldStep:
    """A step that waits until the test lets it go: the admitter thread is busy meanwhile."""

    name = "held"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: set[str] = set()

    def apply(self, ctx: AdmissionContext) -> None:
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        assert self.release.wait(10), "the test never released the step"


@pytest.fixture
def held(tmp_path) -> Iterator[tuple[RunningServer, HeldStep, dict[str, Any]]]:
    docs = yamlio.load_documents(SEED_RESOURCES)
    cluster = ClusterSnapshot.from_objects([d for d in docs if d["kind"] != "Pod"])
    cluster.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}})
    step = HeldStep()
    admitter = build_admitter(default_policies_dir(), cluster, placement=step,
                              reload_interval_s=0)
    project_secret(tmp_path / "secret", make_pair(tmp_path / "made"))
    running = start_server(admitter, tmp_path / "secret", tmp_path / "made" / "ca.crt")
    pods = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Pod"}
    yield running, step, pods
    step.release.set()
    running.stop()
    admitter.close()


def test_out_of_scope_reviews_are_answered_while_the_admitter_thread_is_busy(held):
    server, step, pods = held
    worker = pods["pytorch-dist-nccl-worker-0"]
    answers: dict[str, Any] = {}

    def admit_in_scope() -> None:
        with server.client() as client:
            answers["in"] = client.post("/mutate", json=admission_review(worker, "in-1"))

    busy = threading.Thread(target=admit_in_scope)
    busy.start()
    try:
        assert step.entered.wait(10), "the in-scope review never reached the step"
        elsewhere = copy.deepcopy(worker)
        elsewhere["metadata"]["namespace"] = "web"  # a namespace that did not opt in
        with server.client() as client:
            out = client.post("/mutate", json=admission_review(elsewhere, "out-1"))
            bad = client.post("/mutate", content=b'{"apiVersion": "admission.k8s.io/v1"}')
        assert "in" not in answers, "the in-scope review must still be held"
        assert out.status_code == 200
        assert out.json()["response"] == {"uid": "out-1", "allowed": True}
        assert bad.status_code == 400
    finally:
        step.release.set()
        busy.join(10)
    assert answers["in"].status_code == 200
    assert answers["in"].json()["response"]["uid"] == "in-1"
    assert "patch" in answers["in"].json()["response"]
    assert all(name.startswith("admitter") for name in step.threads), step.threads
