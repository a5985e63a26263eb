"""The ClusterTrainingRuntimes Kubeflow Trainer ships, as data.

Why here: a TrainJob names its runtime (``spec.runtimeRef``) and carries no pod template of
its own; a dry run of a TrainJob whose runtime is not in the input needs the runtime the
cluster most likely has, the one Trainer installs (``manifests/base/runtimes`` of
kubeflow/trainer v2.2-v2.3). Only the fields that shape the pods are kept (images and
commands as shipped; the torchtune runtimes' initializer volumes included).
"""

from __future__ import annotations

import copy
from typing import Any

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


def _rjob(name: str, container: dict[str, Any], *, ancestor: str | None,
          depends_on: str | None = None, status: str = "Complete",
          pod_spec: dict[str, Any] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"template": {"spec": {
        **(pod_spec or {}), "containers": [container]}}}}
    if ancestor is not None:
        template["metadata"] = {"labels": {ANCESTOR_LABEL: ancestor}}
    out: dict[str, Any] = {"name": name, "template": template}
    if depends_on is not None:
        out["dependsOn"] = [{"name": depends_on, "status": status}]
    return out


def _runtime(name: str, ml_policy: dict[str, Any], rjobs: list[dict[str, Any]],
             **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name},
            "spec": {"mlPolicy": ml_policy,
                     "template": {"spec": {**spec, "replicatedJobs": rjobs}}}}


def _torchtune(name: str, model_uri: str, config: str, out_dir: str, model_dir: str,
               gpus: int) -> dict[str, Any]:
    volume = {"volumes": [{"name": "initializer",
                           "persistentVolumeClaim": {"claimName": "initializer"}}]}
    return _runtime(name, {"numNodes": 1, "torch": {"numProcPerNode": gpus}}, [
        _rjob("dataset-initializer", {
            "name": "dataset-initializer", "image": "ghcr.io/kubeflow/trainer/dataset-initializer",
            "env": [{"name": "STORAGE_URI", "value": "hf://tatsu-lab/alpaca"}],
            "volumeMounts": [{"mountPath": "/workspace/dataset", "name": "initializer"}]},
            ancestor="dataset-initializer", pod_spec=volume),
        _rjob("model-initializer", {
            "name": "model-initializer", "image": "ghcr.io/kubeflow/trainer/model-initializer",
            "env": [{"name": "STORAGE_URI", "value": model_uri}],
            "volumeMounts": [{"name": "initializer", "mountPath": "/workspace/model"}]},
            ancestor="model-initializer", depends_on="dataset-initializer", pod_spec=volume),
        _rjob("node", {
            "name": "node", "image": "ghcr.io/kubeflow/trainer/torchtune-trainer",
            "command": ["tune", "run", "full_finetune_distributed", f"--config {config}",
                        f"output_dir=/workspace/model/{out_dir}",
                        f"tokenizer.path=/workspace/model/{model_dir}/original/tokenizer.model",
                        f"checkpointer.checkpoint_dir=/workspace/model/{model_dir}"],
            "resources": {"limits": {"nvidia.com/gpu": gpus}},
            "volumeMounts": [{"mountPath": "/workspace/dataset", "name": "initializer"},
                             {"mountPath": "/workspace/model", "name": "initializer"}]},
            ancestor="trainer", depends_on="model-initializer", pod_spec=volume),
    ])


_SHIPPED: dict[str, dict[str, Any]] = {
    "torch-distributed": _runtime(
        "torch-distributed", {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}, [
            _rjob("node", {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
                           "command": ["/bin/bash", "-c",
                                       'echo "Torch Distributed Runtime"\nenv | grep PET_\n']},
                  ancestor="trainer")]),
    "deepspeed-distributed": _runtime(
        "deepspeed-distributed",
        {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                                "sshAuthMountPath": "/home/mpiuser/.ssh",
                                "runLauncherAsNode": True}},
        [_rjob("node", {"name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
                        "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
                        "command": ["/usr/sbin/sshd"],
                        "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
                        "readinessProbe": {"tcpSocket": {"port": 2222},
                                           "initialDelaySeconds": 5}},
               ancestor=None, pod_spec={"securityContext": {"fsGroup": 1000}}),
         _rjob("launcher", {"name": "node", "image": "ghcr.io/kubeflow/trainer/deepspeed-runtime",
                            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000}},
               ancestor="trainer", depends_on="node", status="Ready",
               pod_spec={"securityContext": {"fsGroup": 1000}})],
        network={"publishNotReadyAddresses": True},
        successPolicy={"operator": "All", "targetReplicatedJobs": ["launcher"]}),
    "torchtune-llama3.2-1b": _torchtune(
        "torchtune-llama3.2-1b", "hf://meta-llama/Llama-3.2-1B-Instruct", "llama3_2/1B_full.yaml",
        "llama3_2/1B", "Llama-3.2-1B-Instruct", 2),
    "torchtune-llama3.2-3b": _torchtune(
        "torchtune-llama3.2-3b", "hf://meta-llama/Llama-3.2-3B-Instruct", "llama3_2/3B_full.yaml",
        "llama3_2/3B", "Llama-3.2-3B-Instruct", 2),
}

#: Names of the runtimes Trainer ships that gputopo knows.
SHIPPED = tuple(_SHIPPED)


def shipped(name: str) -> dict[str, Any] | None:
    """A copy of the shipped ClusterTrainingRuntime ``name``, None when Trainer ships none."""
    found = _SHIPPED.get(name)
    return copy.deepcopy(found) if found is not None else None
