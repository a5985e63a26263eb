"""The Dockerfile agrees with the manifests, and kustomize can build manifests/."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from generator import k8s, webhook_objects
from gputopo import yamlio


def test_image_runs_as_the_user_the_manifests_expect(repo):
    text = (repo / "Dockerfile").read_text(encoding="utf-8")
    (user,) = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert user == f"{k8s.NONROOT_ID}:{k8s.NONROOT_ID}"
    assert re.search(r'^ENTRYPOINT \["gputopo"\]', text, flags=re.M)
    # every package the wheel needs is copied into the build stage
    for package in ("gputopo", "webhook", "generator", "policies"):
        assert re.search(rf"^COPY {package} ", text, flags=re.M), package
    # the default command serves from the paths the Deployment mounts
    assert webhook_objects.CERT_DIR in text and webhook_objects.POLICIES_DIR in text


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kustomize_builds_the_manifests(repo):
    built = subprocess.run(["kubectl", "kustomize", str(repo / "manifests")],
                           capture_output=True, text=True, timeout=60, check=False)
    assert built.returncode == 0, built.stderr
    docs = yamlio.load_documents_text(built.stdout)
    expected = [o for p in sorted((repo / "manifests").glob("*.yaml"))
                if p.name != "kustomization.yaml" for o in yamlio.load_documents(p)]
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, docs)) == sorted(map(key, expected))
