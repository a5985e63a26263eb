"""The benchmark's cluster and its AdmissionReviews: 1,000 activated GPU nodes, jobs, pods.

Why generated rather than checked in: a 1,000-node cluster file is megabytes of YAML that
says nothing a reader can review; the generator below says exactly what is in it. Nodes are
built from the real ``nvidia-smi topo -m`` fixtures (DGX-1 V100 hybrid cube-mesh, DGX A100
NVSwitch, 2-socket PCIe servers, A100 PCIe with NVLink bridges), so the solver sees the
topologies it sees in production, and about a quarter of the GPUs are already held by bound
pods (the gpu-group annotation), so free sets are ragged, as in a busy cluster.

The request mix (:func:`request_stream`) is what the API server sends the webhook for the
served resources: GPU pods of Kubeflow jobs of several sizes whose Job objects are in the
cluster (so gang sizes resolve), every job name new (so the solver runs for each new gang,
the later pods of a gang reuse its reservation), and pods the webhook must leave alone:
pods in a namespace that did not opt in, and plain pods in an opted-in one.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputopo import names
from gputopo.topology.nvidia_smi import parse_nvidia_smi
from webhook.dryrun import review_body

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "topologies"

#: (fixture file, share of the nodes): V100 and A100 DGX boxes dominate training fleets.
NODE_KINDS = (
    ("dgx1-v100.txt", 0.4),
    ("dgx-a100.txt", 0.3),
    ("pcie-2socket-phb.txt", 0.2),
    ("a100-pcie-nvlink-pairs.txt", 0.1),
)
OPTED_IN = "training"
NOT_OPTED_IN = "web"
#: Share of GPUs already held by bound pods at start.
USED_SHARE = 0.25
#: (workers, GPUs per worker, weight): single-GPU jobs are the most common, 8-GPU gangs rare.
JOB_SHAPES = ((1, 1, 4), (2, 1, 3), (4, 1, 3), (2, 2, 2), (2, 4, 1), (1, 8, 1))
#: Shares of the request stream that the webhook must leave alone.
OTHER_NAMESPACE_SHARE = 0.2
PLAIN_POD_SHARE = 0.1


def _uid(tag: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gputopo-bench/{tag}"))


def topology_annotations() -> list[tuple[str, float]]:
    """(``gputopo.io/topology`` JSON, share) of each node kind, parsed from the fixtures."""
    out = []
    for file, share in NODE_KINDS:
        topo = parse_nvidia_smi((FIXTURES / file).read_text(), source=file)
        out.append((json.dumps(topo.to_annotation(), separators=(",", ":")), share))
    return out


def cluster_objects(nodes: int = 1000, *, seed: int = 7) -> list[dict[str, Any]]:
    """Nodes (activated, zone and rack labels), bound pods holding GPUs, two namespaces."""
    rng = random.Random(seed)
    kinds = topology_annotations()
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": OPTED_IN, "labels": {names.INJECT_LABEL: names.INJECT_VALUE}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NOT_OPTED_IN}},
    ]
    for n in range(nodes):
        annotation = rng.choices([a for a, _ in kinds], [s for _, s in kinds])[0]
        gpus = len(json.loads(annotation)["gpus"])
        name = f"gpu-node-{n:04d}"
        objs.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE,
                names.ZONE_LABEL: f"zone-{n % 3}", names.RACK_LABEL: f"rack-{n // 20}"},
                "annotations": {names.TOPOLOGY_ANNOTATION: annotation,
                                names.NETWORK_GBPS_ANNOTATION: "100"}},
            "status": {"allocatable": {names.TOPOLOGY_GPU_RESOURCE: str(gpus)}},
        })
        used = [g for g in range(gpus) if rng.random() < USED_SHARE]
        if used:
            objs.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"busy-{n:04d}", "namespace": OPTED_IN,
                             "annotations": {names.GPU_GROUP_ANNOTATION:
                                             ",".join(map(str, used))}},
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running"},
            })
    return objs


def pytorchjob(name: str, workers: int, gpus: int, namespace: str) -> dict[str, Any]:
    """A PyTorchJob of ``workers`` worker pods with ``gpus`` GPUs each (no master: every pod
    of the gang is a Worker, so the gang size is ``workers``)."""
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "uid": _uid(f"{namespace}/{name}")},
        "spec": {"pytorchReplicaSpecs": {"Worker": {
            "replicas": workers, "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [_container(gpus)]}}}}},
    }


def _container(gpus: int) -> dict[str, Any]:
    return {"name": "pytorch", "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
            "command": ["torchrun", "train.py"],
            "resources": {"limits": {names.SOURCE_GPU_RESOURCE: gpus, "cpu": "8",
                                     "memory": "32Gi"}}}


def worker_pod(job: dict[str, Any], index: int) -> dict[str, Any]:
    """Worker ``index`` as training-operator creates it (labels, controller ownerReference)."""
    meta = job["metadata"]
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-worker-{index}", "namespace": meta["namespace"],
            "labels": {names.OPERATOR_NAME_LABEL: "pytorchjob-controller",
                       names.JOB_NAME_LABEL: meta["name"],
                       names.REPLICA_TYPE_LABEL: "worker",
                       names.REPLICA_INDEX_LABEL: str(index)},
            "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                 "name": meta["name"], "uid": meta["uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"containers": [dict(c) for c in spec["containers"]],
                 "restartPolicy": "OnFailure"},
    }


def plain_pod(name: str, namespace: str) -> dict[str, Any]:
    """A web server pod: no owner job, no GPU."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                                     "resources": {"limits": {"cpu": "1"}}}]}}


@dataclass(frozen=True)
class Workload:
    """The request bodies in send order, the jobs they need in the cluster, and the mix."""

    bodies: list[bytes]
    jobs: list[dict[str, Any]]
    kinds: list[str]  # "gang-first", "gang-next", "out-of-scope" per body


def request_stream(count: int, *, seed: int = 11, tag: str = "run") -> Workload:
    """``count`` AdmissionReview bodies: whole gangs of new jobs interleaved with pods the
    webhook must skip. Job names carry ``tag`` so each run asks for new gangs."""
    rng = random.Random(seed)
    bodies: list[bytes] = []
    jobs: list[dict[str, Any]] = []
    kinds: list[str] = []
    pending: list[dict[str, Any]] = []  # pods of started gangs, sent a few requests later
    shapes = [(w, g) for w, g, _ in JOB_SHAPES]
    weights = [wt for _, _, wt in JOB_SHAPES]
    n = 0
    while len(bodies) < count:
        n += 1
        roll = rng.random()
        uid = f"{tag}-{n}"
        if roll < OTHER_NAMESPACE_SHARE:
            # out of scope however it looks: a job pod in a namespace that did not opt in
            job = pytorchjob(f"{tag}-web-{n}", 2, 1, NOT_OPTED_IN)
            jobs.append(job)
            bodies.append(review_body(worker_pod(job, 0), uid))
            kinds.append("out-of-scope")
        elif roll < OTHER_NAMESPACE_SHARE + PLAIN_POD_SHARE:
            bodies.append(review_body(plain_pod(f"{tag}-web-{n}", OPTED_IN), uid))
            kinds.append("out-of-scope")
        elif pending and rng.random() < 0.6:
            bodies.append(review_body(pending.pop(0), uid))
            kinds.append("gang-next")
        else:
            workers, gpus = rng.choices(shapes, weights)[0]
            job = pytorchjob(f"{tag}-job-{n}", workers, gpus, OPTED_IN)
            jobs.append(job)
            bodies.append(review_body(worker_pod(job, 0), uid))
            kinds.append("gang-first")
            pending.extend(worker_pod(job, i) for i in range(1, workers))
    return Workload(bodies, jobs, kinds)


def noop_stream(count: int, *, seed: int = 11, tag: str = "noop") -> Iterator[bytes]:
    """The same bodies for the no-op floor (same sizes, same parse cost)."""
    yield from request_stream(count, seed=seed, tag=tag).bodies
