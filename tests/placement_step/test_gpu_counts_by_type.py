"""GPUs per replica type of a job's spec (the placement step's gpu_counts_by_replica_type):
launchers without GPUs left out, an edited job read anew, the policy's GPU resource names
deciding what counts as a GPU."""

from __future__ import annotations

import copy
from typing import Any

from gputopo import names
from webhook.placement.step import gpu_counts_by_replica_type
from webhook.steps import JobInfo

GPU = names.SOURCE_GPU_RESOURCE
RESOURCES = frozenset({GPU, names.TOPOLOGY_GPU_RESOURCE})


def replica(gpus: int, replicas: int = 1, resource: str = GPU) -> dict[str, Any]:
    limits = {resource: gpus} if gpus else {"cpu": "1"}
    return {"replicas": replicas, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "x", "resources": {"limits": limits}}]}}}


def job(specs: dict[str, Any]) -> JobInfo:
    return JobInfo(api_version="kubeflow.org/v1", kind="PyTorchJob", name="j",
                   namespace="ns", uid="u", replica_type="Worker", replica_index=0,
                   role="worker", gang_size=3, gpus_per_pod=2, requests_gpu=True,
                   spec={"pytorchReplicaSpecs": specs})


def test_answers_follow_the_objects_and_the_resource_names() -> None:
    specs = {"Master": replica(2), "Worker": replica(2, 2), "Launcher": replica(0)}
    first = gpu_counts_by_replica_type(job(specs), RESOURCES)
    assert first == {"Master": 2, "Worker": 2}
    first["Master"] = 99  # the callers' copies
    again = gpu_counts_by_replica_type(job(specs), RESOURCES)
    again["Worker"] = 99
    assert gpu_counts_by_replica_type(job(specs), RESOURCES) == {"Master": 2, "Worker": 2}

    edited = copy.deepcopy(specs)  # the reader's new object for an edited job
    edited["Worker"] = replica(4, 2)
    assert gpu_counts_by_replica_type(job(edited), RESOURCES) == {"Master": 2, "Worker": 4}
    assert gpu_counts_by_replica_type(job(specs), RESOURCES) == {"Master": 2, "Worker": 2}

    renamed = {"Worker": replica(1, 2, resource="example.com/gpu")}
    assert gpu_counts_by_replica_type(job(renamed), RESOURCES) == {}
    other = frozenset({"example.com/gpu"})
    assert gpu_counts_by_replica_type(job(renamed), other) == {"Worker": 1}
    assert gpu_counts_by_replica_type(job(renamed), RESOURCES) == {}


def test_a_job_without_replica_specs_has_no_gpu_types() -> None:
    info = job({})
    assert gpu_counts_by_replica_type(info, RESOURCES) == {}
    bare = JobInfo(api_version="kubeflow.org/v1", kind="PyTorchJob", name="j",
                   namespace="ns", uid="u", replica_type=None, replica_index=None,
                   role=None, gang_size=0, gpus_per_pod=0, requests_gpu=False)
    assert gpu_counts_by_replica_type(bare, RESOURCES) == {}
