"""Small builders shared by the cluster tests: real-looking Kubernetes objects and a
first-fit "solver" that makes concurrent reservers collide on the same GPUs on purpose."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gputopo.placement.types import Placement, ReplicaSlot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"


def dgx1_annotation() -> str:
    """The gputopo.io/topology value of a DGX-1 V100 (the demo cluster's nodes)."""
    from gputopo.cluster.demo import demo_snapshot

    node = demo_snapshot().of_kind("Node")[0]
    return node["metadata"]["annotations"]["gputopo.io/topology"]


def node(name: str, *, topology: str | None = None, activated: bool = True,
         zone: str = "z1", rack: str = "r1", gpus: int = 8) -> dict[str, Any]:
    ann = {"gputopo.io/network-gbps": "100"}
    if topology is not None:
        ann["gputopo.io/topology"] = topology
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": ann, "labels": {
            "ack.node.gpu.schedule": "topology" if activated else "default",
            "topology.kubernetes.io/zone": zone, "gputopo.io/rack": rack}},
        "status": {"allocatable": {"aliyun.com/gpu": str(gpus)}},
    }


def bound_pod(name: str, node_name: str, gpus: str, namespace: str = "default"
              ) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"topology.kubernetes.io/gpu-group": gpus}},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }


def first_fit(nodes: dict[str, int], held: dict[str, set[int]], replicas: int,
              gpus_per_replica: int) -> Placement:
    """Lowest free GPUs first: every concurrent caller picks the same GPUs, so they collide."""
    slots: list[ReplicaSlot] = []
    taken = {n: set(g) for n, g in held.items()}
    for r in range(replicas):
        for n in sorted(nodes):
            free = [g for g in range(nodes[n]) if g not in taken.get(n, set())]
            if len(free) >= gpus_per_replica:
                pick = tuple(free[:gpus_per_replica])
                taken.setdefault(n, set()).update(pick)
                slots.append(ReplicaSlot(r, n, pick))
                break
        else:
            return Placement(False, reason="cluster full")
    return Placement(True, tuple(slots), 10.0, "first fit")


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


def wait_for(predicate: Callable[[], object], timeout: float = 5.0,
             interval: float = 0.02) -> bool:
    """Poll until ``predicate()`` is truthy (watches are asynchronous); False on timeout."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def job(kind: str, name: str, *, version: str = "v1", namespace: str = "default",
        workers: int = 4) -> dict[str, Any]:
    replica = {"replicas": workers, "template": {"spec": {"containers": [
        {"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}
    specs = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs",
             "MPIJob": "mpiReplicaSpecs"}
    return {"apiVersion": f"kubeflow.org/{version}", "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {specs[kind]: {"Worker": replica}}}
