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
pods in a namespace that did not opt in, and plain pods in an opted-in one. Each pod is
sent as the API server sends it (:func:`as_received`: defaults, managedFields, the
admission plugins' additions), not as its controller wrote it: a webhook parses, copies and
diffs the former, about three times the bytes.
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputopo import names
from gputopo.operators import expand
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
    """Worker ``index`` as training-operator creates it (gputopo.operators: labels, the
    controller ownerReference, its port and env), as the API server sends it
    (:func:`as_received`)."""
    return as_received(expand(job)[index], manager=OPERATOR_MANAGER)


#: The field manager of pods the training operator creates (its user agent's first part).
OPERATOR_MANAGER = "training-operator"
#: The projected service-account volume the ServiceAccount admission plugin adds
#: (``plugin/pkg/admission/serviceaccount/admission.go``: ``kube-api-access-<5 random>``,
#: mode 0644, a token of 3607 s, the root CA, the namespace).
_SA_VOLUME = {"name": "kube-api-access-8w2fz", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}
_SA_MOUNT = {"name": "kube-api-access-8w2fz", "readOnly": True,
             "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
#: ``plugin/pkg/admission/defaulttolerationseconds``: 300 s for not-ready and unreachable.
_TOLERATIONS = [{"key": f"node.kubernetes.io/{taint}", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300}
                for taint in ("not-ready", "unreachable")]
#: List items are keyed in managedFields by their merge key (the Pod's strategic-merge keys).
_MERGE_KEYS = {"containers": ("name",), "initContainers": ("name",), "env": ("name",),
               "volumes": ("name",), "volumeMounts": ("mountPath",),
               "ports": ("containerPort", "protocol"), "ownerReferences": ("uid",)}


def as_received(pod: dict[str, Any], *, manager: str) -> dict[str, Any]:
    """``pod`` as the API server hands it to a mutating webhook on CREATE, so the benchmark
    parses, copies and diffs what a live webhook does (about 3.5 KB instead of 1.3 KB).

    In the API server's order (``k8s.io/apiserver/pkg/endpoints/handlers/create.go``):
    quantities are strings (a ``resource.Quantity`` serialises as one); the scheme's
    defaults (``pkg/apis/core/v1/defaults.go``: requests from limits, termination message,
    pull policy, dnsPolicy, restartPolicy, grace period, scheduler, service links,
    preemption policy, port protocol); then the field manager records every field the
    creator now holds in ``metadata.managedFields``; then the built-in mutating admission
    plugins before the webhooks (ServiceAccount: the account and its token volume;
    DefaultTolerationSeconds; Priority: ``priority: 0``).
    """
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        res = c.setdefault("resources", {})
        for part in ("limits", "requests"):
            if part in res:
                res[part] = {k: str(v) for k, v in res[part].items()}
        if "limits" in res:
            res["requests"] = {**res["limits"], **res.get("requests", {})}
        for port in c.get("ports", []):
            port.setdefault("protocol", "TCP")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("imagePullPolicy", "Always" if c["image"].endswith(":latest")
                     else "IfNotPresent")
    for key, value in (("restartPolicy", "Always"), ("dnsPolicy", "ClusterFirst"),
                       ("terminationGracePeriodSeconds", 30), ("securityContext", {}),
                       ("schedulerName", "default-scheduler"), ("enableServiceLinks", True),
                       ("preemptionPolicy", "PreemptLowerPriority")):
        spec.setdefault(key, value)
    pod["metadata"]["managedFields"] = [{
        "manager": manager, "operation": "Update", "apiVersion": "v1",
        "time": "2026-11-26T10:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": _fields({k: v for k, v in pod.items() if k in ("metadata", "spec")})}]
    spec.update(serviceAccountName="default", serviceAccount="default", priority=0,
                tolerations=[*spec.get("tolerations", []), *copy.deepcopy(_TOLERATIONS)],
                volumes=[*spec.get("volumes", []), copy.deepcopy(_SA_VOLUME)])
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        c["volumeMounts"] = [*c.get("volumeMounts", []), dict(_SA_MOUNT)]
    return pod


_TOP = ("", "metadata", "spec")


def _fields(value: Any, key: str = "") -> dict[str, Any]:
    """The FieldsV1 set of ``value`` (``f:`` for a field, ``k:`` for a keyed list item)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {} if key in _TOP else {".": {}}
        out.update({f"f:{k}": _fields(v, k) for k, v in value.items()
                    if k not in ("managedFields", "name", "namespace")})
        return out
    if isinstance(value, list) and key in _MERGE_KEYS:
        items = {}
        for item in value:
            merge = {k: item.get(k) for k in _MERGE_KEYS[key]}
            items["k:" + json.dumps(merge, separators=(",", ":"))] = _fields(item, "item")
        return {".": {}, **items}
    return {}


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
            bodies.append(review_body(as_received(plain_pod(f"{tag}-web-{n}", OPTED_IN),
                                                  manager="kubectl-create"), uid))
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
