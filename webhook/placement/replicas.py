"""Which replica of its gang a pod is, and what each replica type of the job asks for.

Why a module of its own: a slot is handed out by (replica type, replica index); the index
comes from the operator's label, else the ``<job>-<type>-<index>`` pod name every Kubeflow
operator gives, and never defaults to a guess (two replicas keyed alike would be handed the
same GPUs). A preview (dry run, audit) shows replica k the slot k of the gang, types in spec
order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from webhook.jobs import pod_gpus
from webhook.policy.schema import OWNER_KINDS
from webhook.steps import JobInfo


def gpu_counts_by_replica_type(job: JobInfo, gpu_resources: frozenset[str]) -> dict[str, int]:
    """GPUs per pod of each GPU-requesting replica type of the job's spec (spec order):
    its extended resources plus what its DRA claims ask (``job.dra_types``)."""
    specs = job.spec.get(OWNER_KINDS.get((job.api_version, job.kind), ""), {})
    out: dict[str, int] = {}
    for rtype, rs in specs.items() if isinstance(specs, dict) else ():
        template = rs.get("template") if isinstance(rs, dict) else None
        tspec = template.get("spec") if isinstance(template, dict) else None
        gpus = pod_gpus(tspec, gpu_resources) if isinstance(tspec, dict) else 0
        gpus += job.dra_types.get(str(rtype), 0)
        if gpus > 0:
            out[str(rtype)] = gpus
    return out


def replica_index(
    pod: dict[str, Any], job_name: str, replica_type: str, labelled: int | None, gang_size: int,
    type_replicas: int | None = None,
) -> int | None:
    """The replica's index: its label, else the ``<job>-<type>-<index>`` pod name every
    Kubeflow operator gives, else 0 for a gang of one or the only replica of its type
    (``type_replicas == 1``: an mpi-operator v2beta1 launcher with GPUs, whose pod its
    batch Job creates from ``generateName`` with no index label); None when it cannot be
    known.

    Why not default to 0: two replicas keyed alike would be handed the same GPUs.
    """
    if labelled is not None:
        return labelled
    name = (pod.get("metadata") or {}).get("name")
    if isinstance(name, str):
        m = re.fullmatch(re.escape(f"{job_name}-{replica_type.lower()}-") + r"(\d{1,6})", name)
        if m:
            return int(m.group(1))
    return 0 if gang_size == 1 or type_replicas == 1 else None


def replica_ordinal(specs: object, gpu_types: Mapping[str, int], replica_type: str,
                    index: int) -> int:
    """Position of replica ``index`` of ``replica_type`` among all GPU replicas of the job
    (types in spec order), so that previews of Master 0 and Worker 0 show different slots."""
    offset = 0
    for rtype in gpu_types:
        if rtype == replica_type:
            return offset + index
        rs = specs.get(rtype) if isinstance(specs, dict) else None
        count = rs.get("replicas", 1) if isinstance(rs, dict) else 1
        offset += count if isinstance(count, int) and count >= 0 else 1
    return index
