"""PyTorchJob -> the pods training-operator v1.7/v1.8 creates for it.

Mirrors ``pkg/apis/kubeflow.org/v1/pytorch_defaults.go`` (replicas 1, restartPolicy
OnFailure, port ``pytorchjob-port`` 23456 on every replica type, nprocPerNode ``auto``),
``pkg/controller.v1/pytorch/envvar.go`` + ``master.go`` + ``elastic.go`` (the env) and
``initcontainer.go`` (the ``init-pytorch`` container of workers that waits for the
master), and ``pkg/controller.v1/common/pod.go`` (names ``<job>-<type>-<i>``, labels,
controller ownerReference). Why the env matters to gputopo: MASTER_ADDR/MASTER_PORT tell
the network plan which pod listens where.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gputopo.operators.common import (
    JobShape,
    add_env,
    counted_specs,
    default_port,
    named_port,
    new_pod,
    replica_labels,
    replicas,
    restart_policy,
    template_of,
)

OPERATOR_NAME = "pytorchjob-controller"
CONTAINER = "pytorch"
PORT_NAME = "pytorchjob-port"
PORT = 23456
RESTART_POLICY = "OnFailure"
NPROC_PER_NODE = "auto"
#: ``--pytorch-init-container-image`` default of training-operator v1.7/v1.8.
INIT_IMAGE = "alpine:3.10"
TYPES = ("Master", "Worker")


def _init_container(master_addr: str) -> dict[str, Any]:
    return {
        "name": "init-pytorch", "image": INIT_IMAGE, "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"cpu": "100m", "memory": "20Mi"},
                      "requests": {"cpu": "50m", "memory": "10Mi"}},
        "command": ["sh", "-c",
                    f"until nslookup {master_addr}; do echo waiting for master; sleep 2; done;"],
    }


def _elastic_env(shape: JobShape, policy: Mapping[str, Any],
                 specs: Mapping[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """``elastic.go``: the torchrun rendezvous env of an elastic job."""
    worker = specs.get("Worker")
    if worker is None:
        raise shape.error("an elastic PyTorchJob needs a Worker replica spec")
    host = policy.get("rdzvHost") or f"{shape.name}-worker-0"
    port = policy.get("rdzvPort")
    if port is None:
        _, wspec = template_of(worker)
        default_port(wspec, CONTAINER, PORT_NAME, PORT)
        port = named_port(wspec, CONTAINER, PORT_NAME)
        if port is None:
            raise shape.error(f"no container named {CONTAINER!r} in the Worker replica spec")
    env = [("PET_RDZV_ENDPOINT", f"{host}:{port}")]
    if policy.get("rdzvBackend"):
        env.append(("PET_RDZV_BACKEND", str(policy["rdzvBackend"])))
    worker_replicas = replicas(shape, "Worker", worker, 1)
    low = policy.get("minReplicas", policy.get("maxReplicas", worker_replicas))
    high = policy.get("maxReplicas", low)
    env.append(("PET_NNODES", f"{low}:{high}"))
    if policy.get("maxRestarts") is not None:
        env.append(("PET_MAX_RESTARTS", str(policy["maxRestarts"])))
    if policy.get("nProcPerNode") is not None:
        env.append(("PET_NPROC_PER_NODE", str(policy["nProcPerNode"])))
    if policy.get("rdzvId"):
        env.append(("PET_RDZV_ID", str(policy["rdzvId"])))
    conf = policy.get("rdzvConf")
    if isinstance(conf, list) and conf:
        env.append(("PET_RDZV_CONF", ",".join(
            f"{c.get('key')}={c.get('value')}" for c in conf if isinstance(c, Mapping))))
    if policy.get("standalone"):
        env.append(("PET_STANDALONE", ""))
    return env


def expand(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods of a PyTorchJob, Master first, each as the webhook receives it."""
    shape = JobShape(job)
    specs, counts = counted_specs(shape, "pytorchReplicaSpecs", TYPES, CONTAINER)
    if "Master" in specs and counts["Master"] != 1:
        raise shape.error("there must be exactly 1 Master replica")
    master_port: int | None = None
    if "Master" in specs:
        _, mspec = template_of(specs["Master"])
        default_port(mspec, CONTAINER, PORT_NAME, PORT)
        master_port = named_port(mspec, CONTAINER, PORT_NAME)
    master_addr = f"{shape.name}-master-0"
    nproc = shape.spec.get("nprocPerNode") or NPROC_PER_NODE
    nproc_int = int(nproc) if isinstance(nproc, str) and nproc.isdigit() else (
        nproc if isinstance(nproc, int) else 1)
    total = sum(counts.values())
    elastic = shape.spec.get("elasticPolicy")
    elastic_env = (_elastic_env(shape, elastic, specs) if isinstance(elastic, Mapping)
                   else None)
    job_label = shape.name.replace("/", "-")
    pods: list[dict[str, Any]] = []
    for rtype, rs in specs.items():
        rt = rtype.lower()
        for index in range(counts[rtype]):
            meta, spec = template_of(rs)
            default_port(spec, CONTAINER, PORT_NAME, PORT)
            rank = index + 1 if rt == "worker" else index
            for container in spec["containers"]:
                add_env(container, ("PYTHONUNBUFFERED", "0"))
                if master_port is not None:
                    add_env(container,
                            ("MASTER_PORT", str(master_port)),
                            ("PET_MASTER_PORT", str(master_port)),
                            ("MASTER_ADDR", master_addr),
                            ("PET_MASTER_ADDR", master_addr),
                            ("WORLD_SIZE", str(total * nproc_int)),
                            ("RANK", str(rank)),
                            ("PET_NPROC_PER_NODE", str(nproc)),
                            ("PET_NODE_RANK", str(rank)))
                if elastic_env is not None:
                    add_env(container, *elastic_env)
                else:
                    add_env(container, ("PET_NNODES", str(total)))
            if master_port is not None and rt == "worker":
                spec["initContainers"] = [*(spec.get("initContainers") or []),
                                          _init_container(master_addr)]
            spec["restartPolicy"] = restart_policy(rs, RESTART_POLICY)
            labels = replica_labels(OPERATOR_NAME, job_label, rt, index,
                                    master=rtype == "Master")
            pods.append(new_pod(name=f"{job_label}-{rt}-{index}", namespace=shape.namespace,
                                meta=meta, labels=labels, owner=shape.controller_ref(),
                                spec=spec))
    return pods
