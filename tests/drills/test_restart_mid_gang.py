"""Drill: the webhook process is killed (SIGKILL) in the middle of a gang and started again.

``gputopo serve`` runs as a real process with a kubeconfig pointing at the API TEST DOUBLE
(live cluster view, reservations in ConfigMaps) and a certificate directory; pods are sent
over HTTPS. The first process admits two of the four workers of a job and dies without any
clean-up; a fresh process gets the operator's recreation of worker 1 and workers 2 and 3.
Every worker ends up on the GPUs the first process reserved, worker 1 on exactly the slot it
had; nothing is handed out twice, nothing is lost.
"""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
from admitkit import pytorchjob, worker_pod
from drillkit import Ledger, kubeconfig, seed
from k8s_double import api_client
from serverkit import make_pair, project_secret

from gputopo.cluster.k8s_reservations import KubernetesReservationStore

SERVING = re.compile(r"serving https://[^:]+:(\d+)")


def _serve(kube_config: Path, cert_dir: Path) -> tuple[subprocess.Popen[str], int]:
    """Start ``gputopo serve`` on a free port; (process, port) once it says it serves."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(kube_config)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputopo", "serve", "--cert-dir", str(cert_dir),
         "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 15
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        found = SERVING.search(line)
        if found:
            return proc, int(found.group(1))
    proc.kill()
    raise AssertionError(f"gputopo serve did not start: {proc.stderr.read()}")


def _ready(client: httpx.Client) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError("gputopo serve never became ready")


def _client(ca: Path, port: int) -> httpx.Client:
    return httpx.Client(base_url=f"https://127.0.0.1:{port}", timeout=10,
                        verify=ssl.create_default_context(cafile=str(ca)))


def test_a_webhook_killed_mid_gang_is_continued_by_a_fresh_one(kube, tmp_path) -> None:
    (job,) = seed(kube, pytorchjob("survivor", workers=4, gpus=1))
    config = kubeconfig(kube, tmp_path / "kubeconfig")
    project_secret(tmp_path / "secret", make_pair(tmp_path / "made"))
    ca = tmp_path / "made" / "ca.crt"
    ledger = Ledger()

    first, port = _serve(config, tmp_path / "secret")
    try:
        with _client(ca, port) as client:
            _ready(client)
            for index in (0, 1):
                ledger.admit(client, worker_pod(job, index))
    finally:
        first.kill()  # SIGKILL: no clean-up of any kind
        first.wait(timeout=10)
    before = dict(ledger.records)
    assert set(before) == {"survivor-worker-0", "survivor-worker-1"}

    second, port = _serve(config, tmp_path / "secret")
    try:
        with _client(ca, port) as client:
            _ready(client)
            again = worker_pod(job, 1, name="survivor-worker-1-again")  # recreated pod
            ledger.admit(client, again)
            for index in (2, 3):
                ledger.admit(client, worker_pod(job, index))
    finally:
        second.terminate()
        second.wait(timeout=10)

    records = ledger.records
    assert set(records) == {*before, "survivor-worker-1-again", "survivor-worker-2",
                            "survivor-worker-3"}, "every worker placed"
    old, new = before["survivor-worker-1"], records["survivor-worker-1-again"]
    assert (new["node"], new["gpus"]) == (old["node"], old["gpus"])  # the same slot
    gpus = {g for r in records.values() for g in r["gpus"]}
    assert len({r["node"] for r in records.values()}) == 1 and len(gpus) == 4
    assert all(r["gpuVisible"] == before["survivor-worker-0"]["gpuVisible"]
               for r in records.values())  # all inside what the first process reserved
    store = KubernetesReservationStore(api_client(kube.url))
    assert ledger.double_allocated() == 0
    assert ledger.lost(store) == 0
    (reservation,) = store.list()
    assert reservation.complete
