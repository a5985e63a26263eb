"""Helpers of the server tests: certificates the kubelet way, a stand-in admitter, a real
server over TLS on 127.0.0.1 in a thread.

A server is started in a thread with its own event loop (uvicorn
installs no signal handlers off the main thread) and spoken to with real HTTPS by httpx,
trusting the CA ``gputopo.certs`` made. The certificate directory has the layout the
kubelet gives a mounted ``kubernetes.io/tls`` Secret, so rotation tests swap it the way the
kubelet does.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gputopo.certs import write_serving_certs
from webhook.server import WebhookServer, create_app
from webhook.tls import CertificateReloader

#: Small, so oversized-body tests stay fast; the production default is 3 MiB.
TEST_MAX_BODY = 64 * 1024
#: Certificate polls in tests; production polls every few seconds.
TEST_RELOAD_INTERVAL = 0.1


def project_secret(secret_dir: Path, files: dict[str, bytes]) -> None:
    """Publish ``files`` in ``secret_dir`` the way the kubelet's AtomicWriter does.

    The data goes into a fresh ``..<timestamp>`` directory; ``..data`` is re-pointed to it by
    renaming a new symlink over the old one (one atomic step); the user-visible names are
    symlinks through ``..data``; the previous data directory is removed afterwards.
    """
    secret_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    data_dir = secret_dir / stamp
    data_dir.mkdir()
    for name, content in files.items():
        (data_dir / name).write_bytes(content)
    data_link = secret_dir / "..data"
    old_target = os.readlink(data_link) if data_link.is_symlink() else None
    tmp_link = secret_dir / "..data_tmp"
    os.symlink(stamp, tmp_link)
    os.rename(tmp_link, data_link)
    for name in files:
        visible = secret_dir / name
        if not visible.is_symlink():
            os.symlink(f"..data/{name}", visible)
    if old_target is not None:
        shutil.rmtree(secret_dir / old_target)


def make_pair(work_dir: Path, **kwargs: Any) -> dict[str, bytes]:
    """A fresh CA + serving pair for 127.0.0.1/localhost, as file name -> bytes."""
    write_serving_certs(work_dir, extra_dns=("localhost", "127.0.0.1"), **kwargs)
    return {name: (work_dir / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}


class StandInAdmitter:
    """Test double of ``webhook.pipeline.Admitter``: only the two members the server uses.

    It answers like the pipeline promises to (200 + review response, 400 + error), so the
    server's own behaviour can be tested without policies; ``{"boom": true}`` makes it raise,
    to exercise the server's internal-error path; ``{"sleep": 0.5}`` makes it slow.
    """

    def __init__(self) -> None:
        self.ready = True
        self.calls = 0

    def handle_body(self, body: bytes) -> tuple[int, dict[str, Any]]:
        self.calls += 1
        try:
            review = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return 400, {"error": "body is not JSON"}
        if isinstance(review, dict) and review.get("boom") is True:
            raise RuntimeError("stand-in admitter exploding on purpose")
        if isinstance(review, dict) and isinstance(review.get("sleep"), float):
            time.sleep(review["sleep"])  # a slow decision (a big solve, a slow API read)
            return 400, {"error": "slept"}
        if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
            return 400, {"error": "not an AdmissionReview"}
        request = review.get("request")
        if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
            return 400, {"error": "request.uid missing"}
        return 200, {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": request["uid"], "allowed": True},
        }


@dataclass
class RunningServer:
    """A started server and what a test needs to talk to it."""

    server: WebhookServer
    admitter: Any
    cert_dir: Path
    ca_file: Path
    thread: threading.Thread

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        return httpx.Client(base_url=self.base_url, verify=context, timeout=10, **kwargs)

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(timeout=10)


def start_server(
    admitter: Any, secret_dir: Path, ca_file: Path, *, enable_noop: bool = False
) -> RunningServer:
    """Start the real server on a free port of 127.0.0.1 and wait until it accepts."""
    app = create_app(admitter, max_body_bytes=TEST_MAX_BODY, enable_noop=enable_noop)
    tls = CertificateReloader(secret_dir, interval=TEST_RELOAD_INTERVAL)
    server = WebhookServer(app, tls, host="127.0.0.1", port=0, log_level="warning")
    server.bind()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("webhook server did not start")
        time.sleep(0.01)
    return RunningServer(server, admitter, secret_dir, ca_file, thread)




#: The ACK PyTorch seed as the operator creates it: Namespace, PyTorchJob, master + worker.
SEED_RESOURCES = (
    Path(__file__).resolve().parents[2] / "policies" / "tests" / "ack-pytorch" / "resources.yaml"
)


def admission_review(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionReview the API server sends for the CREATE of ``pod``."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": meta.get("namespace", "default"),
            "name": meta.get("name", ""),
            "userInfo": {"username": "system:serviceaccount:kubeflow:training-operator"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics as (name, sorted labels) -> value."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def requests_total(samples: dict, outcome: str) -> float:
    return samples.get(("gputopo_admission_requests_total", (("outcome", outcome),)), 0.0)
