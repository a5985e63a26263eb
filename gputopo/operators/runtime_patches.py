"""``spec.runtimePatches`` of a TrainJob (Kubeflow Trainer v2.2+), applied as Trainer does.

Why: Kueue admits a TrainJob by adding a runtimePatches entry (manager
``kueue.x-k8s.io/manager``) that gives the replicated jobs' pods the flavor's
``nodeSelector`` and tolerations, Kueue's labels and annotations and, with Topology Aware
Scheduling, the ``kueue.x-k8s.io/topology`` gate. A dry run that left them out would place
the pods on nodes they may not run on.

Read from Trainer's sources (``pkg/apis/trainer/v1alpha1/trainjob_types.go``:
``RuntimePatch`` -> ``trainingRuntimeSpec.template`` (``JobSetTemplatePatch``: metadata,
``spec.replicatedJobs[]`` by name -> ``template`` (``JobTemplatePatch``: metadata,
``spec.template`` (``PodTemplatePatch``: metadata, ``spec`` = ``PodSpecPatch``)));
``pkg/runtime/core/trainingruntime.go``, ``newRuntimeInfo`` / ``mergeRuntimePatches``):
the patches, in list order, are strategic-merge-patched into the runtime's JobSet template
BEFORE Trainer's plugins run; each patch's JobSet-level labels and annotations go onto the
JobSet; a replicated-job name the runtime lacks patches nothing. The strategic merge of the
PodSpecPatch fields follows the core/v1 patch tags: maps (labels, annotations,
``nodeSelector``, ``securityContext``, ``affinity``) merge key by key; ``volumes``,
``imagePullSecrets``, ``schedulingGates``, ``containers``/``initContainers`` (and their
``env``) merge by ``name``, ``volumeMounts`` by ``mountPath``; ``tolerations`` and every
other list are replaced; scalars are replaced. As Trainer's validation does, a container
patch must name a container of the runtime and may not set the env of ``node`` or the
initializers (their env comes from the TrainJob's own fields).

Pure: no Kubernetes, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gputopo.operators.common import JobShape

#: Lists merged by a key (core/v1 ``patchStrategy:"merge"``), by field name.
_MERGE_KEYS = {"volumes": "name", "imagePullSecrets": "name", "schedulingGates": "name",
               "containers": "name", "initContainers": "name", "env": "name",
               "volumeMounts": "mountPath"}


def _merge(base: Any, patch: Any, field: str = "") -> Any:
    """``patch`` strategic-merged into ``base`` (both plain JSON; base is not changed)."""
    if isinstance(patch, Mapping) and isinstance(base, Mapping):
        out = dict(base)
        for key, value in patch.items():
            if value is None:  # a JSON merge patch's delete
                out.pop(key, None)
            else:
                out[key] = _merge(base.get(key), value, str(key))
        return out
    key = _MERGE_KEYS.get(field)
    if key is not None and isinstance(patch, list) and isinstance(base, list):
        out_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = next((i for i, old in enumerate(out_list) if isinstance(old, Mapping)
                       and isinstance(item, Mapping) and old.get(key) == item.get(key)), None)
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = _merge(out_list[at], item, "")
        return out_list
    return copy.deepcopy(patch)


def _object(value: Any, shape: JobShape, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise shape.error(f"{where} must be an object")
    return value


def _metadata(value: Any, shape: JobShape, where: str) -> dict[str, Any]:
    """The labels and annotations of a patch's metadata (the only fields Trainer allows)."""
    meta = _object(value, shape, where)
    out: dict[str, Any] = {}
    for key in ("labels", "annotations"):
        found = _object(meta.get(key), shape, f"{where}.{key}")
        if not all(isinstance(v, str) for v in found.values()):
            raise shape.error(f"{where}.{key} values must be strings")
        if found:
            out[key] = dict(found)
    return out


#: Containers whose env only the TrainJob's trainer and initializer fields may set
#: (``ContainerPatch.env``, trainjob_types.go)
_ENV_BY_TRAINER_ONLY = ("node", "dataset-initializer", "model-initializer")


def _check_containers(shape: JobShape, runtime_spec: Mapping[str, Any],
                      patch: Mapping[str, Any], where: str) -> None:
    """A container patch names a container the runtime has, and sets no env of the
    containers whose env comes from the TrainJob's own fields (Trainer refuses both)."""
    for key in ("initContainers", "containers"):
        items = patch.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise shape.error(f"{where}.{key} must be a list")
        have = {c.get("name") for c in runtime_spec.get(key) or [] if isinstance(c, Mapping)}
        for c in items:
            name = c.get("name") if isinstance(c, Mapping) else None
            if name not in have:
                raise shape.error(f"{where}.{key}: the runtime has no container {name!r}")
            if c.get("env") is not None and name in _ENV_BY_TRAINER_ONLY:
                raise shape.error(f"{where}.{key}: the env of container {name!r} is set "
                                  f"through spec.trainer or spec.initializer, not a patch")


def apply_runtime_patches(shape: JobShape, rjobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the TrainJob's ``spec.runtimePatches`` into the runtime's replicated jobs
    (``rjobs``, changed in place); the JobSet-level metadata (labels, annotations) the
    patches give, to put on the JobSet. A malformed patch raises the shape's InputError."""
    patches = shape.spec.get("runtimePatches")
    if patches is None:
        return {}
    if not isinstance(patches, list):
        raise shape.error("spec.runtimePatches must be a list")
    jobset_meta: dict[str, Any] = {}
    by_name = {r.get("name"): r for r in rjobs}
    for i, entry in enumerate(patches):
        where = f"spec.runtimePatches[{i}]"
        entry = _object(entry, shape, where)
        if not isinstance(entry.get("manager"), str) or not entry["manager"]:
            raise shape.error(f"{where}.manager must be a non-empty string")
        spec = _object(entry.get("trainingRuntimeSpec"), shape, f"{where}.trainingRuntimeSpec")
        where += ".trainingRuntimeSpec.template"
        template = _object(spec.get("template"), shape, where)
        jobset_meta = _merge(jobset_meta, _metadata(template.get("metadata"), shape,
                                                    f"{where}.metadata"))
        jspec = _object(template.get("spec"), shape, f"{where}.spec")
        targets = jspec.get("replicatedJobs")
        if targets is None:
            continue
        if not isinstance(targets, list):
            raise shape.error(f"{where}.spec.replicatedJobs must be a list")
        for j, target in enumerate(targets):
            at = f"{where}.spec.replicatedJobs[{j}]"
            target = _object(target, shape, at)
            rjob = by_name.get(target.get("name"))
            job_patch = _object(target.get("template"), shape, f"{at}.template")
            if rjob is None or not job_patch:
                continue  # Trainer patches only the replicated jobs its runtime has
            job_meta = _metadata(job_patch.get("metadata"), shape, f"{at}.template.metadata")
            job_spec = _object(job_patch.get("spec"), shape, f"{at}.template.spec")
            pod_patch = _object(job_spec.get("template"), shape, f"{at}.template.spec.template")
            pod_meta = _metadata(pod_patch.get("metadata"), shape,
                                 f"{at}.template.spec.template.metadata")
            pod_spec = _object(pod_patch.get("spec"), shape,
                               f"{at}.template.spec.template.spec")
            job_template = rjob["template"]
            if job_meta:
                job_template["metadata"] = _merge(job_template.get("metadata") or {}, job_meta)
            pod_template = job_template["spec"]["template"]
            if pod_meta:
                pod_template["metadata"] = _merge(pod_template.get("metadata") or {}, pod_meta)
            if pod_spec:
                _check_containers(shape, pod_template.get("spec") or {}, pod_spec,
                                  f"{at}.template.spec.template.spec")
                pod_template["spec"] = _merge(pod_template.get("spec") or {}, pod_spec)
    return jobset_meta
