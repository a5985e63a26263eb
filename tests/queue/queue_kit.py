"""The "Done when" cluster of the queue tests, built on the API TEST DOUBLE.

The demo cluster's two DGX-1 nodes (NVLink quads 0-3 and 4-7) with 12 of 16 GPUs busy:
``holder`` (one pod, GPUs 0-3 of node A: a whole NVLink quad), A:4,5 and B:0-5. Free: A:6,7
and B:6,7 — four GPUs, but two per node, so a 4 x 1-GPU gang finds no good placement until
the holder finishes.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jsonpatch
from placement_jobs import mpijob, worker_pod

from gputopo import names
from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import load_documents
from webhook.dryrun import review_body

NODE_A = "cn-shanghai.192.168.16.172"
NODE_B = "cn-shanghai.192.168.16.173"


def wait_for(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def busy_pod(name: str, node: str, gpus: str) -> dict[str, Any]:
    """A running pod holding ``gpus`` of ``node`` (bound, with its gpu-group annotation)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {names.GPU_GROUP_ANNOTATION: gpus}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


def busy_cluster(kube: Any) -> dict[str, Any]:
    """Demo nodes + 12 busy GPUs; returns the holder pod (A:0-3)."""
    for obj in load_documents(demo_cluster_path()):
        kube.apply(obj)
    kube.apply(busy_pod("busy-a", NODE_A, "4,5"))
    kube.apply(busy_pod("busy-b", NODE_B, "0,1,2,3,4,5"))
    return kube.apply(busy_pod("holder", NODE_A, "0,1,2,3"))


def admit_and_create(admitter: Any, kube: Any, pod: dict[str, Any]
                     ) -> tuple[dict[str, Any], list[str]]:
    """Admit ``pod`` as the API server would, then store the mutated pod in the double."""
    status, answer = admitter.handle_body(review_body(pod, "uid-1"))
    assert status == 200
    response = answer["response"]
    assert response["allowed"], response
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return kube.apply(jsonpatch.apply_patch(pod, patch)), response.get("warnings") or []


def waiting_gang(kube: Any, admitter: Any, name: str = "waiter") -> tuple[dict[str, Any],
                                                                         list[dict[str, Any]]]:
    """A 4 x 1-GPU MPIJob whose workers are admitted (gated) and created."""
    job = kube.apply(mpijob(name))
    pods = []
    for i in range(4):
        pod, warnings = admit_and_create(admitter, kube, worker_pod(job, i))
        assert any("waits for a placement" in w for w in warnings), warnings
        pods.append(pod)
    return job, pods


def pods_of(kube: Any, job: str) -> list[dict[str, Any]]:
    return sorted((p for p in kube.objects("v1", "Pod")
                   if p["metadata"]["name"].startswith(f"{job}-worker-")),
                  key=lambda p: p["metadata"]["name"])


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == names.PLACEMENT_GATE
               for g in pod["spec"].get("schedulingGates") or [])
