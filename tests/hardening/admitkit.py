"""Helpers shared by the hardening tests and the failure drills: the REAL admission pipeline
behind the REAL HTTPS server, and AdmissionReviews as the API server sends them.

Why the real thing end to end: these tests make claims about what a client on the network
can and cannot do to the webhook (crash it, make it mutate a pod it must leave alone, take
another job's GPUs). Only bytes over TLS to the server that ``gputopo serve`` runs, through
the shipped policies and the placement step, can back such claims. The server is started by
``tests/server/serverkit.py`` (certificates laid out as a mounted Secret, a thread with its
own event loop); nothing of ours is mocked.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
from serverkit import RunningServer, make_pair, project_secret, start_server

from gputopo import names
from gputopo.cluster.demo import demo_snapshot
from gputopo.cluster.snapshot import ClusterSnapshot
from webhook.assembly import build_admitter
from webhook.placement.step import placement_step_for

OPTED_IN = "team-a"
NOT_OPTED_IN = "team-b"
PYTORCH = "kubeflow.org/v1"


def uid(tag: str) -> str:
    """A stable uid for a test object (jobs are found by uid, so tests name them)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gputopo-hardening/{tag}"))


def namespaces() -> list[dict[str, Any]]:
    """One namespace that opted in, one that did not."""
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": OPTED_IN, "labels": {names.INJECT_LABEL: names.INJECT_VALUE}}},
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": NOT_OPTED_IN, "labels": {"team": "b"}}},
    ]


def pytorchjob(name: str, *, workers: int = 2, gpus: int = 1, namespace: str = OPTED_IN,
               job_uid: str | None = None) -> dict[str, Any]:
    """A PyTorchJob of ``workers`` GPU workers (the gang), as training-operator stores it."""
    return {
        "apiVersion": PYTORCH, "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace,
                     "uid": job_uid or uid(f"{namespace}/{name}")},
        "spec": {"pytorchReplicaSpecs": {"Worker": {
            "replicas": workers, "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [{
                "name": "pytorch", "image": "pytorch/pytorch:2.3.0",
                "resources": {"limits": {names.SOURCE_GPU_RESOURCE: gpus}}}]}}}}},
    }


def worker_pod(job: dict[str, Any], index: int, *, name: str | None = None) -> dict[str, Any]:
    """Worker ``index`` of ``job`` as training-operator creates it."""
    meta = job["metadata"]
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name or f"{meta['name']}-worker-{index}", "namespace": meta["namespace"],
            "labels": {names.OPERATOR_NAME_LABEL: "pytorchjob-controller",
                       names.JOB_NAME_LABEL: meta["name"],
                       names.REPLICA_TYPE_LABEL: "worker",
                       names.REPLICA_INDEX_LABEL: str(index)},
            "ownerReferences": [{"apiVersion": PYTORCH, "kind": "PyTorchJob",
                                 "name": meta["name"], "uid": meta["uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": copy.deepcopy(template),
    }


def review(pod: Any, *, request_uid: str | None = None, dry_run: bool = False,
           namespace: str | None = None, operation: str = "CREATE") -> dict[str, Any]:
    """The AdmissionReview the API server sends for creating ``pod``."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    ns = namespace or (meta.get("namespace") if isinstance(meta, dict) else None) or OPTED_IN
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": request_uid or str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": (meta.get("name") if isinstance(meta, dict) else None) or "",
            "namespace": ns, "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kubeflow:training-operator"},
            "object": pod, "oldObject": None, "dryRun": dry_run,
        },
    }


#: Jobs the fuzzed pods name, so that fuzzed pods reach policy matching and placement.
FUZZ_JOBS = [pytorchjob("fuzz-a", workers=2, gpus=1), pytorchjob("fuzz-b", workers=4, gpus=2)]


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch of an answer (empty when none)."""
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


def admitted(pod: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the API server stores it after applying the answer's patch."""
    return jsonpatch.apply_patch(pod, patch_of(answer)) if patch_of(answer) else pod


def placement(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The placement record a mutated pod carries, if any."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        names.PLACEMENT_ANNOTATION)
    return json.loads(raw) if raw else None


def post(client: httpx.Client, body: dict[str, Any] | bytes, path: str = "/mutate"
         ) -> httpx.Response:
    """POST a review (a dict is sent as JSON, bytes as they are)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=content, headers={"content-type": "application/json"})


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """The value of one sample of ``/metrics`` (0 when absent), as Prometheus reads it."""
    total = 0.0
    for line in client.get("/metrics").text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        if series.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


def cluster_with(*objects: dict[str, Any]) -> ClusterSnapshot:
    """The demo cluster (two DGX-1 V100 nodes) plus the test namespaces and ``objects``."""
    snap = demo_snapshot()
    for obj in (*namespaces(), *objects):
        snap.add(copy.deepcopy(obj))
    return snap


def client_for(server: RunningServer) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    return httpx.Client(base_url=server.base_url, verify=context, timeout=10)


@contextmanager
def real_server(cluster: Any, work: Path, *, policies: Path | None = None,
                reload_interval_s: float = 0.0, admitter: Any = None
                ) -> Iterator[RunningServer]:
    """The real pipeline (``build_admitter`` + ``placement_step_for``, as ``gputopo serve``
    builds it) behind the real HTTPS server, on a free loopback port."""
    made = work / "made"
    project_secret(work / "secret", make_pair(made))
    if admitter is None:
        admitter = build_admitter(policies, cluster, placement=placement_step_for(cluster),
                                  reload_interval_s=reload_interval_s)
    server = start_server(admitter, work / "secret", made / "ca.crt", enable_noop=True)
    try:
        yield server
    finally:
        server.stop()
        admitter.close()
