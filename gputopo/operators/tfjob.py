"""TFJob -> the pods training-operator v1.7/v1.8 creates for it.

Mirrors ``pkg/apis/kubeflow.org/v1/tensorflow_defaults.go`` (replicas 1, restartPolicy
Never, port ``tfjob-port`` 2222 on every replica type), ``pkg/controller.v1/tensorflow/
tensorflow.go`` (``TF_CONFIG`` on the ``tensorflow`` container: every task of every replica
type as ``<job>-<type>-<i>.<ns>.svc:<port>``, this task's type and index, environment
``cloud``; not set when the job has exactly one replica) and ``IsMasterRole`` (the Chief or
Master, else worker 0, gets ``job-role: master``). Why TF_CONFIG matters to gputopo: it is
where every task listens, which the network plan rewrites under host networking.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gputopo.operators.common import (
    JobShape,
    add_env,
    container_index,
    counted_specs,
    default_port,
    named_port,
    new_pod,
    replica_labels,
    restart_policy,
    template_of,
)

OPERATOR_NAME = "tfjob-controller"
CONTAINER = "tensorflow"
PORT_NAME = "tfjob-port"
PORT = 2222
RESTART_POLICY = "Never"
TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")


def _cluster_spec(shape: JobShape, specs: Mapping[str, dict[str, Any]],
                  counts: Mapping[str, int]) -> dict[str, list[str]]:
    cluster: dict[str, list[str]] = {}
    for rtype, rs in specs.items():
        _, spec = template_of(rs)
        default_port(spec, CONTAINER, PORT_NAME, PORT)
        port = named_port(spec, CONTAINER, PORT_NAME)
        if port is None:
            raise shape.error(f"replica type {rtype}: no port {PORT_NAME!r} on container "
                              f"{CONTAINER!r}")
        rt = rtype.lower()
        cluster[rt] = [f"{shape.name}-{rt}-{i}.{shape.namespace}.svc:{port}"
                       for i in range(counts[rtype])]
    return dict(sorted(cluster.items()))  # Go's json.Marshal sorts map keys


def expand(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods of a TFJob, Chief/Master first, then PS, Worker, Evaluator."""
    shape = JobShape(job)
    specs, counts = counted_specs(shape, "tfReplicaSpecs", TYPES, CONTAINER)
    for single in ("Chief", "Master", "Evaluator"):
        if counts.get(single, 0) > 1:
            raise shape.error(f"replica type {single}: at most 1 replica")
    if "Chief" in specs and "Master" in specs:
        raise shape.error("Chief and Master cannot both be set")
    distributed = sum(counts.values()) != 1
    cluster = _cluster_spec(shape, specs, counts) if distributed else {}
    has_chief = "Chief" in specs or "Master" in specs
    job_label = shape.name.replace("/", "-")
    pods: list[dict[str, Any]] = []
    for rtype, rs in specs.items():
        rt = rtype.lower()
        for index in range(counts[rtype]):
            meta, spec = template_of(rs)
            default_port(spec, CONTAINER, PORT_NAME, PORT)
            if distributed:
                config = {"cluster": cluster, "task": {"type": rt, "index": index},
                          "environment": "cloud"}
                target = spec["containers"][container_index(spec, CONTAINER) or 0]
                add_env(target, ("TF_CONFIG", json.dumps(config, separators=(",", ":"))))
            spec["restartPolicy"] = restart_policy(rs, RESTART_POLICY)
            labels = replica_labels(OPERATOR_NAME, job_label, rt, index, master=(
                rtype in ("Chief", "Master") if has_chief else rtype == "Worker" and index == 0))
            pods.append(new_pod(name=f"{job_label}-{rt}-{index}", namespace=shape.namespace,
                                meta=meta, labels=labels, owner=shape.controller_ref(),
                                spec=spec))
    return pods
