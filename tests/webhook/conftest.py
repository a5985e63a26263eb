"""Fixtures for the admission pipeline tests: operator-style objects, reviews, admitters.

The objects are built the way the operators build them (labels, controller ownerReference,
API-server defaults), so the tests exercise the same paths a real cluster would.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from gputopo import names
from gputopo.cluster.snapshot import ClusterSnapshot
from webhook.assembly import build_admitter
from webhook.pipeline import Admitter

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
SEED_CASES = POLICIES / "tests"


def namespace(name: str, *, opted_in: bool = True, **labels: str) -> dict[str, Any]:
    lab = dict(labels)
    if opted_in:
        lab[names.INJECT_LABEL] = names.INJECT_VALUE
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": lab}}


def container(name: str = "main", gpus: int | str | None = 1,
              resource: str = names.SOURCE_GPU_RESOURCE) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "example/train:1"}
    if gpus is not None:
        c["resources"] = {"limits": {resource: gpus}}
    return c


def pytorch_job(name: str = "pt", ns: str = "team", *, workers: int = 1, gpus: int = 1,
                uid: str = "uid-pt") -> dict[str, Any]:
    def rs(replicas: int) -> dict[str, Any]:
        return {"replicas": replicas, "template": {"spec": {"containers": [container(
            "pytorch", gpus)]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "spec": {"pytorchReplicaSpecs": {"Master": rs(1), "Worker": rs(workers)}}}


def operator_pod(job: dict[str, Any], replica_type: str, index: int, *,
                 gpus: int | None = 1, owner: bool = True) -> dict[str, Any]:
    """A pod as training-operator creates it for ``job`` (labels + controller owner)."""
    meta = job["metadata"]
    pod_meta: dict[str, Any] = {
        "name": f"{meta['name']}-{replica_type}-{index}", "namespace": meta["namespace"],
        "labels": {
            names.OPERATOR_NAME_LABEL: f"{job['kind'].lower()}-controller",
            names.JOB_NAME_LABEL: meta["name"],
            names.REPLICA_TYPE_LABEL: replica_type,
            names.REPLICA_INDEX_LABEL: str(index),
        },
    }
    if owner:
        pod_meta["ownerReferences"] = [{
            "apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
            "spec": {"dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                     "containers": [container("pytorch", gpus)]}}


def review(obj: dict[str, Any] | None, *, uid: str = "req-1", operation: str = "CREATE",
           kind: str = "Pod", resource: str = "pods", sub: str | None = None,
           namespace: str | None = None) -> dict[str, Any]:
    meta = (obj or {}).get("metadata") if isinstance(obj, dict) else None
    ns = namespace if namespace is not None else (
        meta.get("namespace", "default") if isinstance(meta, dict) else "default")
    request: dict[str, Any] = {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "operation": operation, "namespace": ns, "object": obj,
    }
    if sub:
        request["subResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    r = response["response"]
    if "patch" not in r:
        return []
    assert r["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(r["patch"]))


def admit(admitter: Admitter, pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Admit ``pod``; (mutated pod, response). The patch is applied with jsonpatch."""
    status, resp = admitter.handle_body(body(review(pod)))
    assert status == 200, resp
    patch = decoded_patch(resp)
    return (jsonpatch.apply_patch(pod, patch) if patch else pod), resp


@pytest.fixture
def make_admitter() -> Iterator[Callable[..., Admitter]]:
    """Build admitters over objects (no placement, no watcher); closed after the test."""
    made: list[Admitter] = []

    def make(objects: list[dict[str, Any]], policies: Path = POLICIES) -> Admitter:
        a = build_admitter(policies, ClusterSnapshot.from_objects(objects),
                           reload_interval_s=0)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()


def write_policy(directory: Path, name: str, *, mode: str = "enforce", extra: str = "") -> Path:
    """A minimal valid policy file (renames the GPU, host network, gang labels)."""
    path = directory / f"{name}.yaml"
    path.write_text(
        "apiVersion: gputopo.io/v1alpha1\nkind: TopologyPolicy\n"
        f"metadata: {{name: {name}}}\n"
        f"spec:\n  mode: {mode}\n  mutations:\n    hostNetwork: true\n{extra}",
        encoding="utf-8",
    )
    return path
