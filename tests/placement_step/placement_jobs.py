"""Training jobs and their pods exactly as the operators create them, for placement tests.

Why hand-built to the operators' sources: the placement step keys slots by the job identity
the pipeline derives from real labels and controller ownerReferences, so the pods here carry
what mpi-operator v2beta1 (pkg/controller/mpi_job_controller.go: newWorker,
newLauncherJob) and training-operator's kubeflow.org/v1 MPIJob controller put on them.
"""

from __future__ import annotations

import uuid
from typing import Any

from gputopo import names

V2BETA1 = "kubeflow.org/v2beta1"
V1 = "kubeflow.org/v1"


def _uid(tag: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gputopo-test/{tag}"))


def _owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def _worker_container(version: str, gpus: int) -> dict[str, Any]:
    return {
        "name": "mpi-worker" if version == V2BETA1 else "mpi",
        "image": "registry.cn-hangzhou.aliyuncs.com/kubernetes-image-hub/"
                 "tensorflow-benchmark:tf2.3.0-py3.7-cuda10.1",
        "resources": {"limits": {names.SOURCE_GPU_RESOURCE: gpus}},
    }


def _launcher_container(version: str) -> dict[str, Any]:
    return {
        "name": "mpi-launcher" if version == V2BETA1 else "mpi",
        "image": "registry.cn-hangzhou.aliyuncs.com/kubernetes-image-hub/"
                 "tensorflow-benchmark:tf2.3.0-py3.7-cuda10.1",
        "command": ["mpirun", "--allow-run-as-root", "-np", "4", "python", "train.py"],
    }


def mpijob(
    name: str,
    *,
    version: str = V2BETA1,
    workers: int = 4,
    gpus: int = 1,
    namespace: str = "default",
    worker_affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An MPIJob (launcher + ``workers`` x ``gpus``-GPU workers), the Arena seed's shape."""
    worker_spec: dict[str, Any] = {"containers": [_worker_container(version, gpus)]}
    if worker_affinity is not None:
        worker_spec["affinity"] = worker_affinity
    spec: dict[str, Any] = {
        "slotsPerWorker": gpus,
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {
                "spec": {"containers": [_launcher_container(version)]}}},
            "Worker": {"replicas": workers, "template": {"spec": worker_spec}},
        },
    }
    if version == V2BETA1:
        spec["runPolicy"] = {"cleanPodPolicy": "Running"}
    else:
        spec["cleanPodPolicy"] = "Running"
    return {
        "apiVersion": version, "kind": "MPIJob",
        "metadata": {"name": name, "namespace": namespace, "uid": _uid(f"{namespace}/{name}")},
        "spec": spec,
    }


def launcher_objects(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The launcher: v2beta1 → a batch/v1 Job owned by the MPIJob and its pod; v1 → a pod."""
    meta = job["metadata"]
    name, ns, version = meta["name"], meta["namespace"], job["apiVersion"]
    template = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    if version == V2BETA1:
        batch_uid = _uid(f"{ns}/{name}-launcher/batch")
        batch_job = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-launcher", "namespace": ns, "uid": batch_uid,
                         "labels": {"app": name},
                         "ownerReferences": [_owner(V2BETA1, "MPIJob", name, meta["uid"])]},
            "spec": {"template": {"spec": template}},
        }
        labels = {
            names.OPERATOR_NAME_LABEL: "mpi-operator",
            names.JOB_NAME_LABEL: name,
            names.JOB_ROLE_LABEL: "launcher",
            "batch.kubernetes.io/controller-uid": batch_uid,
            "batch.kubernetes.io/job-name": f"{name}-launcher",
            "controller-uid": batch_uid,
            "job-name": f"{name}-launcher",
        }
        pod = _pod(f"{name}-launcher-lmhjl", ns, labels,
                   _owner("batch/v1", "Job", f"{name}-launcher", batch_uid), template,
                   hostname=f"{name}-launcher", subdomain=f"{name}-worker")
        return [batch_job, pod]
    labels = {
        names.OPERATOR_NAME_LABEL: "mpijob-controller",
        names.JOB_NAME_LABEL: name,
        names.REPLICA_TYPE_LABEL: "launcher",
        names.REPLICA_INDEX_LABEL: "0",
        names.JOB_ROLE_LABEL: "master",
    }
    return [_pod(f"{name}-launcher", ns, labels, _owner(V1, "MPIJob", name, meta["uid"]),
                 template)]


def worker_pod(job: dict[str, Any], index: int, *, pod_uid_tag: str = "") -> dict[str, Any]:
    """Worker ``index`` of the job, as its operator creates it."""
    meta = job["metadata"]
    name, ns, version = meta["name"], meta["namespace"], job["apiVersion"]
    template = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    if version == V2BETA1:
        labels = {
            names.OPERATOR_NAME_LABEL: "mpi-operator",
            names.JOB_NAME_LABEL: name,
            names.JOB_ROLE_LABEL: "worker",
            names.REPLICA_INDEX_LABEL: str(index),
        }
    else:
        labels = {
            names.OPERATOR_NAME_LABEL: "mpijob-controller",
            names.JOB_NAME_LABEL: name,
            names.REPLICA_TYPE_LABEL: "worker",
            names.REPLICA_INDEX_LABEL: str(index),
        }
    pod = _pod(f"{name}-worker-{index}", ns, labels,
               _owner(version, "MPIJob", name, meta["uid"]), template,
               hostname=f"{name}-worker-{index}", subdomain=f"{name}-worker")
    pod["metadata"]["uid"] = _uid(f"pod/{ns}/{name}-worker-{index}/{pod_uid_tag}")
    return pod


def gang(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job, its launcher objects and all its workers, in the order they are created."""
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    return [job, *launcher_objects(job), *(worker_pod(job, i) for i in range(workers))]


def _pod(
    name: str, namespace: str, labels: dict[str, str], owner: dict[str, Any],
    template: dict[str, Any], *, hostname: str | None = None, subdomain: str | None = None,
) -> dict[str, Any]:
    import copy

    spec = copy.deepcopy(template)
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    spec.setdefault("restartPolicy", "Never")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                     "ownerReferences": [owner]},
        "spec": spec,
    }


def pytorchjob(name: str, *, workers: int = 1, gpus: int = 1,
               namespace: str = "default") -> dict[str, Any]:
    """The ACK PyTorch seed's job: one master and ``workers`` workers, ``gpus`` GPUs each."""

    def template() -> dict[str, Any]:
        return {"spec": {"containers": [{
            "name": "pytorch",
            "image": "registry.cn-hangzhou.aliyuncs.com/kubernetes-image-hub/pytorch-dist-nccl",
            "resources": {"limits": {names.SOURCE_GPU_RESOURCE: gpus}}}]}}

    return {
        "apiVersion": V1, "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "uid": _uid(f"{namespace}/{name}")},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template()},
            "Worker": {"replicas": workers, "restartPolicy": "OnFailure",
                       "template": template()},
        }},
    }


def pytorch_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Master and worker pods as training-operator's PyTorchJob controller creates them."""
    meta = job["metadata"]
    name, ns = meta["name"], meta["namespace"]
    pods = []
    for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
        for index in range(spec["replicas"]):
            labels = {
                names.OPERATOR_NAME_LABEL: "pytorchjob-controller",
                names.JOB_NAME_LABEL: name,
                names.REPLICA_TYPE_LABEL: rtype.lower(),
                names.REPLICA_INDEX_LABEL: str(index),
            }
            if rtype == "Master":
                labels[names.JOB_ROLE_LABEL] = "master"
            pods.append(_pod(f"{name}-{rtype.lower()}-{index}", ns, labels,
                             _owner(V1, "PyTorchJob", name, meta["uid"]),
                             spec["template"]["spec"]))
    return pods
