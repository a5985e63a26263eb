"""``gputopo serve`` as a user runs it: a real process, real HTTPS, clean exit on SIGTERM."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from serverkit import SEED_RESOURCES, admission_review, make_pair, project_secret

from gputopo import names
from gputopo.cli import main
from tests.k8s_double.client import write_kubeconfig

REPO = Path(__file__).resolve().parents[2]
SERVING = re.compile(r"serving https://127\.0\.0\.1:(\d+) ")


@dataclass
class ServeProcess:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture()
def serve(tmp_path: Path) -> Iterator[Any]:
    """Start ``gputopo serve`` with extra args on a free port; wait for its banner."""
    started: list[ServeProcess] = []
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config: the demo fallback must show

    def start(*args: str, extra_env: dict[str, str] | None = None) -> ServeProcess:
        process = subprocess.Popen(
            [sys.executable, "-m", "gputopo", "serve", "--host", "127.0.0.1", "--port", "0",
             *args],
            cwd=REPO, env={**env, **(extra_env or {})}, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        running = ServeProcess(process)
        started.append(running)
        assert process.stderr is not None
        stream = process.stderr

        def drain() -> None:
            for line in stream:
                running.lines.append(line.rstrip("\n"))

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + 30
        while not running.port:
            found = [m for m in map(SERVING.search, list(running.lines)) if m]
            if found:
                running.port = int(found[0].group(1))
            elif process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"gputopo serve did not start:\n{running.stderr}")
            time.sleep(0.05)
        return running

    yield start
    for running in started:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait(10)


def stop(running: ServeProcess) -> int:
    running.process.send_signal(signal.SIGTERM)
    return running.process.wait(timeout=15)


def test_serve_with_nothing_given_says_demo_and_self_made_certs(serve: Any) -> None:
    running = serve()
    assert "EMBEDDED DEMO cluster" in running.stderr
    made = re.search(r"SELF-MADE certificates from (\S+) \(CA: (\S+);", running.stderr)
    assert made, running.stderr
    cert_dir, ca_file = Path(made.group(1)), made.group(2)

    context = ssl.create_default_context(cafile=ca_file)
    with httpx.Client(base_url=f"https://127.0.0.1:{running.port}", verify=context) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "lonely", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        answer = client.post("/mutate", json=admission_review(pod, "uid-serve"))
        assert answer.status_code == 200
        assert answer.json()["response"]["uid"] == "uid-serve"
        assert "gputopo_admission_requests_total" in client.get("/metrics").text

    assert stop(running) == 0
    assert not cert_dir.exists()  # self-made keys do not outlive the process


def test_serve_with_cert_dir_and_cluster_file_mutates_the_seed(
    serve: Any, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    project_secret(secret, make_pair(tmp_path / "made"))
    running = serve("--cert-dir", str(secret), "--cluster", str(SEED_RESOURCES))
    assert "SELF-MADE" not in running.stderr and "EMBEDDED DEMO" not in running.stderr
    assert f"cluster: from file {SEED_RESOURCES}" in running.stderr

    from gputopo import yamlio

    pods = [d for d in yamlio.load_documents(SEED_RESOURCES) if d["kind"] == "Pod"]
    context = ssl.create_default_context(cafile=str(tmp_path / "made" / "ca.crt"))
    with httpx.Client(base_url=f"https://127.0.0.1:{running.port}", verify=context) as client:
        answer = client.post("/mutate", json=admission_review(pods[0], "uid-seed"))
        assert answer.status_code == 200
        assert answer.json()["response"]["patchType"] == "JSONPatch"
    assert stop(running) == 0
    assert (secret / "tls.key").exists()  # a given cert dir is never touched


def test_serve_with_a_broken_cert_dir_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = make_pair(tmp_path / "one"), make_pair(tmp_path / "two")
    secret = tmp_path / "secret"
    project_secret(secret, {"tls.crt": one["tls.crt"], "tls.key": two["tls.key"]})
    code = main(["serve", "--cert-dir", str(secret), "--port", "0", "--host", "127.0.0.1"])
    assert code == 2
    errors = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("gputopo: error:")]
    assert len(errors) == 1 and str(secret) in errors[0]


def test_serve_rejects_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


def test_serve_with_a_kubeconfig_watches_the_cluster_and_is_ready_once_synced(
    serve: Any, tmp_path: Path
) -> None:
    """The live plug-in point: a kubeconfig found means the list+watch view of that API
    server (here the test double), and /readyz stays 503 until the view has listed all."""
    if str(REPO / "tests") not in sys.path:  # the API double is a package under tests/
        sys.path.insert(0, str(REPO / "tests"))
    from k8s_double import KubeApiDouble

    from gputopo import yamlio
    from gputopo.cluster.demo import demo_cluster_path

    kube = KubeApiDouble(bookmark_interval=0.2).start()
    try:
        kube.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "gputopo-system"}})
        for doc in yamlio.load_documents(demo_cluster_path()):
            kube.apply(doc)
        seed = yamlio.load_documents(SEED_RESOURCES)
        job_uid = ""
        for doc in seed:
            if doc["kind"] != "Pod":
                stored = kube.apply(doc)
                if doc["kind"] == "PyTorchJob":
                    job_uid = stored["metadata"]["uid"]  # the API server assigns uids
        kube.forbidden.add("nodes")  # as if RBAC on nodes were missing: no full list yet
        config = tmp_path / "kubeconfig"
        write_kubeconfig(config, kube.url)
        running = serve(extra_env={"KUBECONFIG": str(config)})
        assert f"cluster: live from the API server (kubeconfig {config})" in running.stderr
        assert "EMBEDDED DEMO" not in running.stderr
        ca_file = re.search(r"\(CA: (\S+);", running.stderr).group(1)  # type: ignore[union-attr]
        context = ssl.create_default_context(cafile=ca_file)
        base = f"https://127.0.0.1:{running.port}"
        with httpx.Client(base_url=base, verify=context) as client:
            assert client.get("/readyz").status_code == 503
            kube.forbidden.clear()
            deadline = time.monotonic() + 20
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, running.stderr
                time.sleep(0.1)
            master = next(d for d in seed if d["kind"] == "Pod")
            master["metadata"]["ownerReferences"][0]["uid"] = job_uid
            answer = client.post("/mutate", json=admission_review(master, "uid-live"))
            assert answer.status_code == 200
            response = answer.json()["response"]
            assert "patch" in response, (response, running.stderr[-3000:])
            patch = json.loads(base64.b64decode(response["patch"]))
            labels = jsonpatch.apply_patch(master, patch)["metadata"]["labels"]
            assert labels[names.GANG_REPLICA_LABEL] == "2"
        assert stop(running) == 0
    finally:
        kube.stop()
