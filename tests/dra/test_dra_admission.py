"""A DRA job's pods through the real 1.36 API server admission (admitcheck136) calling
``gputopo serve`` over HTTPS with the MutatingWebhookConfiguration ``generate manifests
--platform dra`` writes: the pod 1.36 admits names its pinned claim (validation checks that
every container claim names one of ``spec.resourceClaims``) and is pinned to the node."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import dra_cluster as dc
import pytest
import yaml

from gputopo.operators import expand, with_identity

SERVING = re.compile(r"serving https://127\.0\.0\.1:(\d+) ")


def _serve(tmp: Path, cluster: Path, policies: Path, certs: Path) -> tuple[subprocess.Popen,
                                                                             int]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",
                                                             "KUBERNETES_SERVICE_HOST")}
    env.update(HOME=str(tmp), PYTHONPATH=str(dc.REPO))
    proc = subprocess.Popen([sys.executable, "-m", "gputopo", "serve", "--cluster", str(cluster),
                             "--policies", str(policies), "--cert-dir", str(certs), "--host",
                             "127.0.0.1", "--port", "0"], cwd=dc.REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    assert proc.stderr is not None
    stream = proc.stderr
    threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    deadline = time.monotonic() + 30
    while True:
        found = [m for m in map(SERVING.search, list(lines)) if m]
        if found:
            return proc, int(found[0].group(1))
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("gputopo serve did not start:\n" + "".join(lines))
        time.sleep(0.05)


def test_the_136_api_server_admits_the_pinned_dra_pods(tmp_path: Path) -> None:
    bin_dir = dc.k8s_bin()
    job = with_identity(dc.pytorchjob("train", 2, "four-gpus"), namespace="default")
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "default", "labels": {"gputopo.io/inject": "enabled"}}}
    cluster = dc.write(tmp_path / "cluster.yaml", [
        ns, *dc.nodes(), dc.device_class(), dc.resource_slice("dgx-a"),
        dc.resource_slice("dgx-b"), dc.template(), job])
    policies = tmp_path / "policies"
    policies.mkdir()
    shutil.copy(dc.REPO / "policies" / "platforms" / "dra" / "dra-gpu-topology.yaml", policies)
    env = {**os.environ, "PYTHONPATH": str(dc.REPO)}
    for argv in (["generate", "certs", "-o", str(tmp_path / "certs")],
                 ["generate", "manifests", "--platform", "dra", "-o", str(tmp_path / "m")]):
        p = subprocess.run([sys.executable, "-m", "gputopo", *argv], capture_output=True,
                           text=True, cwd=dc.REPO, env=env, timeout=120)
        assert p.returncode == 0, p.stderr
    mwc = [d for d in yaml.safe_load_all((tmp_path / "m" / "webhook-configuration.yaml")
                                         .read_text()) if d]
    ca = base64.b64encode((tmp_path / "certs" / "ca.crt").read_bytes()).decode()
    for d in mwc:
        for hook in d.get("webhooks", []):
            hook["clientConfig"]["caBundle"] = ca
            hook["failurePolicy"] = "Fail"  # a webhook that fails must fail the test
    dc.write(tmp_path / "mwc.yaml", mwc)
    dc.write(tmp_path / "ns.yaml", [ns])
    proc, port = _serve(tmp_path, cluster, policies, tmp_path / "certs")
    try:
        admitted = []
        for pod in (o for o in expand(job) if o["kind"] == "Pod"):
            f = dc.write(tmp_path / f"{pod['metadata']['name']}.yaml", [pod])
            p = subprocess.run([str(bin_dir / "admitcheck136"), "--webhooks",
                                str(tmp_path / "mwc.yaml"), "--namespace",
                                str(tmp_path / "ns.yaml"), "--pod", str(f), "--service-addr",
                                f"127.0.0.1:{port}"], capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0, p.stderr
            admitted.append(yaml.safe_load(p.stdout))
    finally:
        proc.terminate()
        proc.wait(10)
    nodes = set()
    for pod in admitted:
        [entry] = pod["spec"]["resourceClaims"]
        assert entry == {"name": "gpus", "resourceClaimName": f"{pod['metadata']['name']}-gpus"}
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        nodes.add(terms[0]["matchFields"][0]["values"][0])
        env_names = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        assert "NVIDIA_VISIBLE_DEVICES" not in env_names
    assert len(nodes) == 1
