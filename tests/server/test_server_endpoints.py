"""The server's own behaviour over real HTTPS: probes, metrics, body limit, error paths."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
from serverkit import TEST_MAX_BODY, RunningServer, requests_total, scrape


def review(uid: str = "3f1c0d9e-0000-4000-8000-000000000001") -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "operation": "CREATE", "object": {"kind": "Pod"}},
    }


def test_healthz_answers(standin_client: httpx.Client) -> None:
    response = standin_client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_follows_the_admitter(
    standin_server: RunningServer, standin_client: httpx.Client
) -> None:
    admitter = standin_server.admitter
    try:
        admitter.ready = False
        not_ready = standin_client.get("/readyz")
        assert not_ready.status_code == 503
        assert "not ready" in not_ready.json()["status"]
        admitter.ready = True
        assert standin_client.get("/readyz").status_code == 200
    finally:
        admitter.ready = True


def test_answers_are_timed(standin_client: httpx.Client) -> None:
    count = ("gputopo_admission_duration_seconds_count", ())
    before = scrape(standin_client).get(count, 0.0)
    response = standin_client.post("/mutate", json=review("abc-123"))
    assert response.status_code == 200
    assert response.json()["response"] == {"uid": "abc-123", "allowed": True}
    assert scrape(standin_client)[count] == before + 1


def test_oversized_body_with_content_length_is_refused(
    standin_server: RunningServer, standin_client: httpx.Client
) -> None:
    calls = standin_server.admitter.calls
    before = requests_total(scrape(standin_client), "bad_request")
    response = standin_client.post("/mutate", content=b"x" * (TEST_MAX_BODY + 1))
    assert response.status_code == 400
    assert "exceeds the limit" in response.json()["error"]
    assert standin_server.admitter.calls == calls  # never handed to the pipeline
    assert requests_total(scrape(standin_client), "bad_request") == before + 1
    assert standin_client.get("/healthz").status_code == 200


def test_body_at_the_limit_is_read(standin_client: httpx.Client) -> None:
    body = json.dumps(review()).encode()
    padded = body[:-1] + b" " * (TEST_MAX_BODY - len(body)) + b"}"
    assert len(padded) == TEST_MAX_BODY
    assert standin_client.post("/mutate", content=padded).status_code == 200


def test_streamed_body_is_cut_off_without_reading_it_all(
    standin_server: RunningServer,
) -> None:
    """A chunked body with no Content-Length that never ends (well, 64 MiB): the server must
    answer 400 while the client is still sending, so the client never sends it all."""
    sent = 0
    total_chunks = 1024

    def endless() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(total_chunks):
            sent += 64 * 1024
            yield b"y" * (64 * 1024)

    with standin_server.client() as client:
        response = client.post("/mutate", content=endless())
        assert response.status_code == 400
        assert "exceeds the limit" in response.json()["error"]
    assert sent < total_chunks * 64 * 1024 // 4
    with standin_server.client() as client:
        assert client.get("/healthz").status_code == 200


def test_internal_error_is_a_logged_json_500_and_the_server_lives(
    standin_client: httpx.Client,
) -> None:
    before = scrape(standin_client)
    response = standin_client.post("/mutate", json={"boom": True})
    assert response.status_code == 500
    assert "internal error" in response.json()["error"]
    assert requests_total(scrape(standin_client), "error") == requests_total(before, "error") + 1
    assert standin_client.post("/mutate", json=review()).status_code == 200


def test_noop_echoes_the_uid(standin_client: httpx.Client) -> None:
    response = standin_client.post("/noop", json=review("floor-1"))
    assert response.status_code == 200
    assert response.json() == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "floor-1", "allowed": True},
    }
    assert standin_client.post("/noop", content=b"[]").status_code == 400


def test_other_methods_and_paths(standin_client: httpx.Client) -> None:
    assert standin_client.get("/mutate").status_code == 405
    assert standin_client.post("/healthz").status_code == 405
    assert standin_client.get("/nope").status_code == 404
    assert standin_client.get("/docs").status_code == 404  # no API docs exposed


def test_many_requests_on_one_keep_alive_connection(standin_client: httpx.Client) -> None:
    for index in range(50):
        uid = f"uid-{index}"
        assert standin_client.post("/mutate", json=review(uid)).json()["response"]["uid"] == uid


def test_probes_answer_while_an_admission_is_slow(standin_server: RunningServer) -> None:
    """Admissions run off the event loop: a slow decision never stalls /healthz, so the
    kubelet does not restart a webhook that is merely busy."""
    slow_done = threading.Event()

    def slow() -> None:
        with standin_server.client() as client:
            client.post("/mutate", json={"sleep": 0.6})
        slow_done.set()

    worker = threading.Thread(target=slow)
    worker.start()
    time.sleep(0.2)  # the slow admission is in progress
    with standin_server.client() as client:
        started = time.monotonic()
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert time.monotonic() - started < 0.5
    assert not slow_done.is_set()
    worker.join(5)
    assert slow_done.is_set()
