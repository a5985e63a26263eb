"""Which training job a pod belongs to, and how many GPU pods that job has.

Why from the owner reference and the job's spec: labels alone can be copied by anyone (a
pod that merely carries ``training.kubeflow.org/job-name`` is not a job pod), and the gang
size must be exact — the scheduler waits for exactly that many pods. The operators set a
controller ownerReference on every pod they create (training-operator: the job itself;
mpi-operator v2beta1: the job for workers, a ``batch/v1`` Job for the launcher, which the
MPIJob owns in turn; JobSet: a ``batch/v1`` Job per replicated job and index, which the
JobSet owns, and a TrainJob may own the JobSet: webhook/jobset_gangs.py). The job object
is read through the ClusterReader.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gputopo import names
from gputopo.cluster import dra
from gputopo.cluster.source import ClusterReader
from gputopo.placement.job_needs import needs_annotations
from gputopo.quantity import parse_quantity
from webhook import jobset_gangs
from webhook.policy.schema import OWNER_KINDS
from webhook.steps import JobInfo

BATCH_JOB = ("batch/v1", "Job")


@dataclass(frozen=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str


class JobNotFound(Exception):
    """The pod is owned by a training job the cluster view does not (yet) hold."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadGpuCount(JobNotFound):
    """A GPU request or limit the API server will refuse, or one that is not a whole number
    of GPUs: the pod is neither placed nor renamed (never placed on a rounded count)."""


def gpu_count_problems(spec: Mapping[str, Any], gpu_resources: Iterable[str]) -> list[str]:
    """What is wrong with the GPU counts of a pod spec, each naming the container and the
    field: negative, fractional or non-numeric values, requests without limits, and
    requests that differ from limits (the API server requires them equal for GPUs)."""
    return checked_pod_gpus(spec, gpu_resources)[1]


def checked_pod_gpus(spec: Mapping[str, Any], gpu_resources: Iterable[str]
                     ) -> tuple[int, list[str]]:
    """GPUs a pod spec asks for, as the scheduler counts them (max of the containers' sum
    and the largest init container), and :func:`gpu_count_problems`; the count means
    nothing when there are problems. One pass, each value parsed once: the admission of a
    job's pod asks both of the pod and of every replica template of its job."""
    problems: list[str] = []
    wanted = sorted(set(gpu_resources))
    total = largest_init = 0
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else []:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
            requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
            gpus = 0
            for name in wanted:
                if name in limits or name in requests:
                    count, problem = _gpu_count(key, c, name, limits, requests)
                    if problem is not None:
                        problems.append(problem)
                    gpus += count
            if key == "containers":
                total += gpus
            else:
                largest_init = max(largest_init, gpus)
    return max(total, largest_init), problems


def _gpu_count(key: str, container: Mapping[str, Any], name: str, limits: Mapping[str, Any],
               requests: Mapping[str, Any]) -> tuple[int, str | None]:
    """The count of GPU resource ``name`` in one container (of ``key``: ``containers`` or
    ``initContainers``) and the problem with it, if any: the first field the user wrote
    that is not a whole, non-negative number; else a request without a limit, or one that
    differs from its limit. Messages are worded only for a problem: every GPU value of
    every job pod and replica template passes here."""
    values = {}
    for part, written in (("limits", limits), ("requests", requests)):
        if name not in written:
            continue
        raw = written[name]
        try:
            value = parse_quantity(raw)
        except ValueError:
            return 0, f"{_where(key, container)}: resources.{part}[{name}] is {raw!r}, not a number"
        if value < 0 or value.denominator != 1:
            what = "a negative GPU count" if value < 0 else "not a whole number of GPUs"
            return 0, f"{_where(key, container)}: resources.{part}[{name}] is {raw!r}, {what}"
        values[part] = value
    if "limits" not in values:
        return 0, (f"{_where(key, container)}: resources.requests[{name}] without a limit "
                   f"(the API server requires limits for GPUs)")
    if "requests" in values and values["requests"] != values["limits"]:
        return 0, (f"{_where(key, container)}: resources.requests[{name}] {requests[name]!r} "
                   f"differs from resources.limits[{name}] {limits[name]!r} (the API server "
                   f"requires them equal for GPUs)")
    return int(values["limits"]), None


def _where(key: str, container: Mapping[str, Any]) -> str:
    """How a problem names its container: ``container 'pytorch'``, ``initContainer 'x'``."""
    return f"{key[:-1]} {container.get('name')!r}"


def controller_ref(obj: Mapping[str, Any]) -> OwnerRef | None:
    """The ownerReference with ``controller: true``, if any."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            try:
                key = (str(ref["apiVersion"]), str(ref["kind"]), str(ref["name"]),
                       str(ref.get("uid") or ""))
            except KeyError:
                return None
            return OwnerRef(api_version=key[0], kind=key[1], name=key[2], uid=key[3])
    return None


def is_job_owner(ref: OwnerRef) -> bool:
    """True for the owner kinds the pipeline understands (training jobs, batch/v1 Jobs)."""
    return (ref.api_version, ref.kind) in OWNER_KINDS or (ref.api_version, ref.kind) == BATCH_JOB


def container_gpus(container: Mapping[str, Any], gpu_resources: Iterable[str]) -> int:
    """GPUs one container asks for: its limit (else request) of any GPU resource name."""
    res = container.get("resources")
    if not isinstance(res, dict):
        return 0
    limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    total = 0
    for name in set(gpu_resources):
        raw = limits.get(name, requests.get(name))
        if raw is not None:
            total += _whole_gpus(raw)
    return total


def _whole_gpus(raw: object) -> int:
    """GPUs a limit or request value stands for: a positive quantity rounded up, else 0."""
    try:
        value = parse_quantity(raw)
    except ValueError:
        return 0
    return math.ceil(value) if value > 0 else 0


def pod_gpus(spec: Mapping[str, Any], gpu_resources: Iterable[str]) -> int:
    """GPUs a pod spec asks for, as the scheduler counts them: max(sum of containers,
    largest init container)."""
    names_ = frozenset(gpu_resources)
    total = largest_init = 0
    items = spec.get("containers")
    if isinstance(items, list):
        for c in items:
            if isinstance(c, dict):
                total += container_gpus(c, names_)
    items = spec.get("initContainers")
    if isinstance(items, list):
        for c in items:
            if isinstance(c, dict):
                largest_init = max(largest_init, container_gpus(c, names_))
    return max(total, largest_init)


def _label(labels: Mapping[str, str], primary: str, legacy: tuple[str, ...]) -> str | None:
    value = labels.get(primary)
    if isinstance(value, str) and value:
        return value
    for key in legacy:
        if isinstance(labels.get(key), str) and labels[key]:
            return labels[key]
    return None


def _replica_type(labels: Mapping[str, str], specs: Mapping[str, Any],
                  launcher_via_batch: bool) -> str | None:
    """The replica-spec key of the pod, from the operators' labels (case-insensitive)."""
    if launcher_via_batch:
        wanted = "launcher"
    else:
        wanted = (_label(labels, names.REPLICA_TYPE_LABEL, names.LEGACY_REPLICA_TYPE_LABELS)
                  or "")
        if not wanted:  # mpi-operator v2beta1 marks workers/launcher only with job-role
            role = _label(labels, names.JOB_ROLE_LABEL, names.LEGACY_JOB_ROLE_LABELS) or ""
            wanted = role if role in ("launcher", "worker") else ""
    for key in specs:
        if isinstance(key, str) and key.lower() == wanted.lower() and wanted:
            return key
    return None


def _replicas(spec: Mapping[str, Any]) -> int:
    raw = spec.get("replicas", 1)
    if raw is None:
        return 1
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError(f"replicas must be a non-negative integer, got {raw!r}")
    return raw


def gang_size(specs: Mapping[str, Any], gpu_resources: Iterable[str],
              claims: ClaimGpus | None = None) -> int:
    """Number of GPU-requesting pods of a job: replicas of the specs whose template asks
    for a GPU (an extended resource, or through ``claims``: a template's DRA GPUs).
    ValueError when the spec is malformed or a template's GPU count is not a valid whole
    number (we never guess a size)."""
    names_ = tuple(gpu_resources)
    total = 0
    for key, rs in specs.items():
        if not isinstance(rs, dict):
            raise ValueError(f"replica spec {key!r} is not a mapping")
        template = rs.get("template") if isinstance(rs.get("template"), dict) else {}
        tspec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
        gpus, problems = checked_pod_gpus(tspec, names_)
        if problems:
            raise ValueError(f"replica spec {key}: {problems[0]}")
        if claims is not None and tspec.get("resourceClaims"):
            gpus += claims(tspec)
        if gpus > 0:
            total += _replicas(rs)
    return total


def dra_gpus_by_type(specs: Mapping[str, Any], claims: ClaimGpus) -> dict[str, int]:
    """GPUs per pod each replica spec asks through DRA claims (only the templates that have
    ``resourceClaims`` are read: a device-plugin job costs a look per spec), spec order.

    Why: the network plan and the slots' order go by the job's GPU replica types; a type
    whose pods get their GPUs through claims is one of them (a 2 x 4 DRA PyTorchJob's master
    holds its rendezvous port like any master), which the extended resources alone miss."""
    out: dict[str, int] = {}
    for key, rs in specs.items():
        template = rs.get("template") if isinstance(rs, dict) else None
        tspec = template.get("spec") if isinstance(template, dict) else None
        if isinstance(tspec, dict) and tspec.get("resourceClaims"):
            gpus = claims(tspec)
            if gpus > 0:
                out[str(key)] = gpus
    return out


def _check_uid(ref: OwnerRef, obj: Mapping[str, Any], namespace: str) -> None:
    """The object found must be the one the reference names, not a namesake: a job deleted
    and re-created under the same name has a new uid, and its gang is not this pod's."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    uid = meta.get("uid")
    if uid and ref.uid != uid:  # no uid in the reference is no match either
        raise JobNotFound(f"owner {ref.kind} {namespace}/{ref.name} has uid {uid}, "
                          f"the pod names {ref.uid or 'no uid'}")


class ClaimGpus:
    """GPUs a pod spec asks for through its DRA claims (gputopo.cluster.dra), its
    templates and claims read in ``namespace`` of ``cluster``; a template or claim the
    cluster does not hold is :class:`JobNotFound` (the count is never guessed)."""

    def __init__(self, namespace: str, cluster: ClusterReader,
                 classes: Iterable[str] = dra.DEFAULT_GPU_CLASSES) -> None:
        self.namespace, self.cluster, self.classes = namespace, cluster, tuple(classes)

    def ask(self, spec: Mapping[str, Any]) -> dra.DraAsk | None:
        try:
            return dra.pod_dra_gpus(spec, self.namespace, self.cluster, self.classes,
                                    ignore=(CHANNEL_CLAIM,))
        except dra.ClaimUnknown as exc:
            raise JobNotFound(str(exc)) from None

    def __call__(self, spec: Mapping[str, Any]) -> int:
        found = self.ask(spec)
        return found.gpus if found is not None else 0


#: The NVLink channel claim gputopo adds itself (webhook/placement/compute_domain.py)
CHANNEL_CLAIM = "nvlink-imex"


def resolve_job(pod: Mapping[str, Any], namespace: str, cluster: ClusterReader,
                gpu_resources: Iterable[str], *, owner: OwnerRef | None = None,
                device_classes: Iterable[str] = dra.DEFAULT_GPU_CLASSES
                ) -> JobInfo | None:
    """The job of a pod, or None when the pod is not a training-job pod.

    Raises :class:`JobNotFound` when the pod names a job owner the cluster does not hold or
    whose spec cannot be read — the caller must then not guess a gang size. ``owner``: the
    pod's :func:`controller_ref`, when the caller has it already and found it a job owner
    (:func:`is_job_owner`): neither is asked again.
    """
    if owner is None:
        ref = controller_ref(pod)
        if ref is None or not is_job_owner(ref):
            return None
    else:
        ref = owner
    names_ = tuple(gpu_resources)  # read more than once: not an iterator
    pspec = own if isinstance(own := pod.get("spec"), dict) else {}
    gpus, problems = checked_pod_gpus(pspec, names_)
    if problems:
        raise BadGpuCount("; ".join(problems) + ": not placed, GPU resource not renamed")
    claims = ClaimGpus(namespace, cluster, device_classes)
    asked = None
    if pspec.get("resourceClaims"):
        # a pod whose claims gputopo already pointed at pinned claims (re-admitted) is
        # judged by the templates it asked first
        replaced = dra.replaced_templates(pod)
        asked = claims.ask(dra.with_templates(pspec, replaced) if replaced else pspec)
    if asked is not None:
        gpus += asked.gpus
    via_batch = (ref.api_version, ref.kind) == BATCH_JOB
    if via_batch:
        batch = cluster.object(api_version=ref.api_version, kind=ref.kind,
                               namespace=namespace, name=ref.name)
        if batch is None:
            raise JobNotFound(f"owner batch/v1 Job {namespace}/{ref.name} not found")
        _check_uid(ref, batch, namespace)
        parent = controller_ref(batch)
        if parent is not None and (parent.api_version, parent.kind) == jobset_gangs.JOBSET:
            found = _jobset_gang(pod, namespace, cluster, parent, gpus, names_, claims)
            types = dra_gpus_by_type(found.spec.get(jobset_gangs.POD_SETS) or {}, claims)
            return found if asked is None and not types else replace(
                found, dra=asked, dra_types=types)
        if parent is None or (parent.api_version, parent.kind) not in OWNER_KINDS:
            return None  # an ordinary batch Job, not an MPIJob launcher
        ref = parent
    job = cluster.object(api_version=ref.api_version, kind=ref.kind,
                         namespace=namespace, name=ref.name)
    if job is None:
        raise JobNotFound(f"owner {ref.kind} {namespace}/{ref.name} not found")
    _check_uid(ref, job, namespace)
    spec = raw if isinstance(raw := job.get("spec"), dict) else {}
    specs = spec.get(OWNER_KINDS[(ref.api_version, ref.kind)])
    if not isinstance(specs, dict):
        raise JobNotFound(f"{ref.kind} {namespace}/{ref.name} has no replica specs")
    try:
        size = gang_size(specs, names_, claims)
    except ValueError as exc:
        raise JobNotFound(f"{ref.kind} {namespace}/{ref.name}: {exc}") from None
    meta = raw if isinstance(raw := pod.get("metadata"), dict) else {}
    labels = raw if isinstance(raw := meta.get("labels"), dict) else {}
    rtype = _replica_type(labels, specs, via_batch)
    raw_index = _label(labels, names.REPLICA_INDEX_LABEL, names.LEGACY_REPLICA_INDEX_LABELS)
    index = int(raw_index) if raw_index is not None and raw_index.isdigit() else None
    jmeta = raw if isinstance(raw := job.get("metadata"), dict) else {}
    jlabels = raw if isinstance(raw := jmeta.get("labels"), dict) else {}
    job_labels = {str(k): str(v) for k, v in jlabels.items()}
    return JobInfo(
        api_version=ref.api_version, kind=ref.kind, name=ref.name, namespace=namespace,
        uid=ref.uid or str(jmeta.get("uid") or ""), replica_type=rtype, replica_index=index,
        role=rtype.lower() if rtype else None, gang_size=size, gpus_per_pod=gpus,
        requests_gpu=gpus > 0, labels=job_labels, spec=dict(spec), runtime="", dra=asked,
        annotations=needs_annotations(jmeta), dra_types=dra_gpus_by_type(specs, claims),
    )



def _jobset_gang(pod: Mapping[str, Any], namespace: str, cluster: ClusterReader,
                 parent: OwnerRef, gpus: int, gpu_resources: tuple[str, ...],
                 claims: ClaimGpus) -> JobInfo:
    """The gang of a pod whose batch Job a JobSet controls (webhook/jobset_gangs.py)."""
    ref = {"apiVersion": parent.api_version, "kind": parent.kind, "name": parent.name,
           "uid": parent.uid}
    try:
        return jobset_gangs.resolve(pod, namespace, cluster, ref, gpus,
                                    functools.partial(gang_size, claims=claims),
                                    gpu_resources)
    except jobset_gangs.GangUnknown as exc:
        raise JobNotFound(str(exc)) from None
