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

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, NamedTuple

from gputopo import names
from gputopo.cluster.source import ClusterReader
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
    requests that differ from limits (the API server requires them equal for GPUs).

    Why two ways: nearly every spec has nothing wrong, which :func:`_sound_pod_gpus`
    confirms from the GPU names a container really has (~40 bytecodes a container);
    :func:`gpu_count_problems_in_detail` walked every name of every container building
    its messages on the way (~210 bytecodes). Anything the first does not vouch for goes
    to the second, which finds and words the problems, as before."""
    if _sound_pod_gpus(spec, gpu_resources) is not None:
        return []
    return gpu_count_problems_in_detail(spec, gpu_resources)


def _sound_pod_gpus(spec: Mapping[str, Any], gpu_resources: Iterable[str]) -> int | None:
    """``pod_gpus(spec, gpu_resources)`` when :func:`gpu_count_problems` has nothing to
    say about the spec, else None (not vouched for: ask the detailed check). One walk
    for both questions, which the pipeline asks of every job pod and job template."""
    if isinstance(gpu_resources, _REUSABLE):
        try:
            names_ = _str_names(gpu_resources)
            if names_ is not None:
                return _sound_gpus(spec, names_)
        except Exception:  # an unhashable value, say: not vouched for
            pass
    return None


_REUSABLE = (frozenset, tuple)  # hashable, and not an iterator the fast try would use up
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_CONTAINER_LISTS = ("containers", "initContainers")


@lru_cache(maxsize=64)
def _str_names(gpu_resources: Iterable[str]) -> frozenset[str] | None:
    """The names as a set, None unless all are strings (the detailed check sorts them)."""
    names_ = frozenset(gpu_resources)
    return names_ if all(isinstance(n, str) for n in names_) else None


@lru_cache(maxsize=1024, typed=True)  # typed: 1, 1.0 and True are different answers
def _gpu_count(raw: object) -> int | None:
    """The GPU count ``raw`` stands for when gpu_count_problems has nothing to say about
    it (a quantity, not negative, whole), else None. An int, not the whole Fraction:
    equal exactly when the Fractions are, and the caller's ``Fraction.numerator`` was a
    property call (a function of its own, ~5 us of a cold review)."""
    try:
        value = parse_quantity(raw)
    except ValueError:
        return None
    return value.numerator if value >= 0 and value.denominator == 1 else None


def _sound_gpus(spec: Mapping[str, Any], names_: frozenset[str]) -> int | None:
    """GPUs of the spec (as :func:`pod_gpus` counts them) when
    :func:`gpu_count_problems_in_detail` finds no problem in it, else None. With sound
    counts (whole, not negative, requests only where limits are and equal to them), a
    container's GPUs are its limits: what container_gpus reads first. Plain loops over
    the few keys a container has: 0.8 us hot and ~34 us cold against 1.1 and ~44 for set
    intersections (C calls are not free, least of all cold)."""
    total = largest_init = 0
    for key in _CONTAINER_LISTS:
        items = spec.get(key)
        if not isinstance(items, list):
            continue
        for c in items:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            limits, requests = res.get("limits"), res.get("requests")
            if not isinstance(limits, dict):
                limits = _EMPTY
            gpus = 0
            for name, raw in limits.items():
                if name in names_:
                    value = _gpu_count(raw)
                    if value is None:
                        return None
                    gpus += value  # whole: the count
            if isinstance(requests, dict):
                for name, raw in requests.items():
                    if name in names_ and (
                            name not in limits or _gpu_count(raw) != _gpu_count(limits[name])):
                        return None  # without a limit, or not the limit
            if key == "containers":
                total += gpus
            elif gpus > largest_init:
                largest_init = gpus
    return max(total, largest_init)


def gpu_count_problems_in_detail(spec: Mapping[str, Any], gpu_resources: Iterable[str]
                                 ) -> list[str]:
    """:func:`gpu_count_problems`, name by name: the reference the fast check agrees with."""
    problems: list[str] = []
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else []:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            where = f"{key[:-1]} {c.get('name')!r}"
            parts = {part: res.get(part) if isinstance(res.get(part), dict) else {}
                     for part in ("requests", "limits")}
            for name in sorted(set(gpu_resources)):
                values = {}
                for part in ("limits", "requests"):  # one line per field the user wrote
                    if name not in parts[part]:
                        continue
                    raw = parts[part][name]
                    field = f"{where}: resources.{part}[{name}] is {raw!r}"
                    try:
                        value = parse_quantity(raw)
                    except ValueError:
                        problems.append(f"{field}, not a number")
                        break
                    if value < 0:
                        problems.append(f"{field}, a negative GPU count")
                        break
                    if value.denominator != 1:
                        problems.append(f"{field}, not a whole number of GPUs")
                        break
                    values[part] = value
                else:
                    if name in parts["requests"] and name not in parts["limits"]:
                        problems.append(f"{where}: resources.requests[{name}] without a limit "
                                        f"(the API server requires limits for GPUs)")
                    elif len(values) == 2 and values["requests"] != values["limits"]:
                        problems.append(
                            f"{where}: resources.requests[{name}] {parts['requests'][name]!r} "
                            f"differs from resources.limits[{name}] "
                            f"{parts['limits'][name]!r} (the API server requires them "
                            f"equal for GPUs)")
    return problems


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
            owner = _OWNERS.get(key)
            if owner is None:
                owner = _new_object(OwnerRef)  # frozen: fill __dict__ as __init__ would
                owner.__dict__.update(api_version=key[0], kind=key[1], name=key[2],
                                      uid=key[3])
                if len(_OWNERS) >= 4096:
                    _OWNERS.clear()
                _OWNERS[key] = owner
            return owner
    return None


#: One OwnerRef per (apiVersion, kind, name, uid): every pod of a gang names the same
#: owner, and an OwnerRef is frozen (shared safely). Why: making an instance (its
#: ``__dict__``) cost ~10 us of a cold review on the benchmark guest, a dict lookup ~1.
_OWNERS: dict[tuple[str, str, str, str], OwnerRef] = {}


#: Frozen dataclasses this module makes on every job pod's review (OwnerRef twice,
#: JobInfo once) are built by filling their ``__dict__``: the generated ``__init__`` of a
#: frozen dataclass sets each field through ``object.__setattr__``, ~7 bytecodes a field
#: (~120 a review); equality, hashing and repr read the same attributes.
_new_object = object.__new__


def is_job_owner(ref: OwnerRef) -> bool:
    """True for the owner kinds the pipeline understands (training jobs, batch/v1 Jobs)."""
    return (ref.api_version, ref.kind) in OWNER_KINDS or (ref.api_version, ref.kind) == BATCH_JOB


def container_gpus(container: Mapping[str, Any], gpu_resources: Iterable[str]) -> int:
    """GPUs one container asks for: its limit (else request) of any GPU resource name.

    Only the names the container has are looked at (a set intersection, in C): the other
    names add nothing, and asking each of them cost ~12 bytecodes a name."""
    res = container.get("resources")
    if not isinstance(res, dict):
        return 0
    limits, requests = res.get("limits"), res.get("requests")
    if not isinstance(limits, dict):
        limits = _EMPTY
    if not isinstance(requests, dict):
        requests = _EMPTY
    names_ = gpu_resources if isinstance(gpu_resources, (set, frozenset)) else set(
        gpu_resources)
    total = 0
    for name in names_.intersection(limits.keys() | requests.keys() if requests else limits):
        raw = limits.get(name, requests.get(name))
        if raw is not None:
            try:
                total += _whole_gpus(raw)
            except TypeError:  # unhashable: never a quantity
                continue
    return total


@lru_cache(maxsize=1024, typed=True)  # typed: 1, 1.0 and True are different answers
def _whole_gpus(raw: object) -> int:
    """GPUs a limit or request value stands for: a positive quantity rounded up, else 0.
    Remembered: a pod's review asks this of each GPU container several times, and the
    exact Fraction arithmetic behind it cost more than the lookup."""
    try:
        value = parse_quantity(raw)
    except ValueError:
        return 0
    return math.ceil(value) if value > 0 else 0


def pod_gpus(spec: Mapping[str, Any], gpu_resources: Iterable[str]) -> int:
    """GPUs a pod spec asks for, as the scheduler counts them: max(sum of containers,
    largest init container)."""
    names_ = gpu_resources if isinstance(gpu_resources, frozenset) else frozenset(
        gpu_resources)
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


def gang_size(specs: Mapping[str, Any], gpu_resources: Iterable[str]) -> int:
    """Number of GPU-requesting pods of a job: replicas of the specs whose template asks
    for a GPU. ValueError when the spec is malformed or a template's GPU count is not a
    valid whole number (we never guess a size)."""
    names_ = tuple(gpu_resources)
    total = 0
    for key, rs in specs.items():
        if not isinstance(rs, dict):
            raise ValueError(f"replica spec {key!r} is not a mapping")
        template = rs.get("template") if isinstance(rs.get("template"), dict) else {}
        tspec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
        gpus = _sound_pod_gpus(tspec, names_)  # None: sound or not, the detail says
        if gpus is None:
            problems = gpu_count_problems_in_detail(tspec, names_)
            if problems:
                raise ValueError(f"replica spec {key}: {problems[0]}")
            gpus = pod_gpus(tspec, names_)
        if gpus > 0:
            total += _replicas(rs)
    return total


#: gang_size per replica-specs object (held, so its id is not reused meanwhile): every pod
#: of a job asks it of the same job object, which the cluster view replaces, never edits,
#: when the job changes.
_SIZES: dict[int, tuple[Mapping[str, Any], tuple[str, ...], int]] = {}


def _gang_size_of(specs: Mapping[str, Any], names_: tuple[str, ...]) -> int:
    hit = _SIZES.get(id(specs))
    if hit is not None and hit[0] is specs and hit[1] == names_:
        return hit[2]
    size = gang_size(specs, names_)  # ValueError: not remembered, said again next time
    if len(_SIZES) >= 4096:
        _SIZES.clear()
    _SIZES[id(specs)] = (specs, names_, size)
    return size


def _check_uid(ref: OwnerRef, obj: Mapping[str, Any], namespace: str) -> None:
    """The object found must be the one the reference names, not a namesake: a job deleted
    and re-created under the same name has a new uid, and its gang is not this pod's."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    uid = meta.get("uid")
    if uid and ref.uid != uid:  # no uid in the reference is no match either
        raise JobNotFound(f"owner {ref.kind} {namespace}/{ref.name} has uid {uid}, "
                          f"the pod names {ref.uid or 'no uid'}")


def resolve_job(pod: Mapping[str, Any], namespace: str, cluster: ClusterReader,
                gpu_resources: Iterable[str], *, owner: OwnerRef | None = None
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
    pspec = own if isinstance(own := pod.get("spec"), dict) else {}
    gpus = None  # _sound_pod_gpus, inline (a function fewer cold): None, the detail says
    if isinstance(gpu_resources, _REUSABLE):
        try:
            names_ = _str_names(gpu_resources)
            if names_ is not None:
                gpus = _sound_gpus(pspec, names_)
        except Exception:  # an unhashable value, say: not vouched for
            pass
    if gpus is None:
        problems = gpu_count_problems_in_detail(pspec, gpu_resources)
        if problems:
            raise BadGpuCount("; ".join(problems) + ": not placed, GPU resource not renamed")
    via_batch = (ref.api_version, ref.kind) == BATCH_JOB
    if via_batch:
        batch = cluster.object(api_version=ref.api_version, kind=ref.kind,
                               namespace=namespace, name=ref.name)
        if batch is None:
            raise JobNotFound(f"owner batch/v1 Job {namespace}/{ref.name} not found")
        _check_uid(ref, batch, namespace)
        parent = controller_ref(batch)
        if parent is not None and (parent.api_version, parent.kind) == jobset_gangs.JOBSET:
            return _jobset_gang(pod, namespace, cluster, parent, pspec, gpus, gpu_resources)
        if parent is None or (parent.api_version, parent.kind) not in OWNER_KINDS:
            return None  # an ordinary batch Job, not an MPIJob launcher
        ref = parent
    job = cluster.object(api_version=ref.api_version, kind=ref.kind,
                         namespace=namespace, name=ref.name)
    if job is None:
        raise JobNotFound(f"owner {ref.kind} {namespace}/{ref.name} not found")
    facts = _JOB_FACTS.get(id(job))
    if (facts is not None and facts.job is job and facts.names is gpu_resources
            and facts.key == (ref.api_version, ref.kind) and not via_batch):
        # every pod of a job after its first (see _JobFacts): the per-pod half only
        if facts.uid and ref.uid != facts.uid:
            _check_uid(ref, job, namespace)  # raises, with its message
        meta = raw if isinstance(raw := pod.get("metadata"), dict) else {}
        labels = raw if isinstance(raw := meta.get("labels"), dict) else {}
        wanted = labels.get(names.REPLICA_TYPE_LABEL)
        if isinstance(wanted, str) and wanted:  # what _replica_type's _label finds first
            rtype = facts.replica_types.get(wanted.lower())
        else:
            rtype = _replica_type(labels, facts.specs, False)
        raw_index = labels.get(names.REPLICA_INDEX_LABEL)
        if not isinstance(raw_index, str) or not raw_index:
            raw_index = _label(labels, names.REPLICA_INDEX_LABEL,
                               names.LEGACY_REPLICA_INDEX_LABELS)
        index = int(raw_index) if raw_index is not None and raw_index.isdigit() else None
        if gpus is None:
            gpus = pod_gpus(pspec, gpu_resources)
        info = _new_object(JobInfo)  # as below, from the remembered facts
        info.__dict__.update(
            api_version=ref.api_version, kind=ref.kind, name=ref.name, namespace=namespace,
            uid=ref.uid or facts.uid_str, replica_type=rtype, replica_index=index,
            role=rtype.lower() if rtype else None, gang_size=facts.size, gpus_per_pod=gpus,
            requests_gpu=gpus > 0, labels=dict(facts.labels), spec=dict(facts.spec),
            runtime="",
        )
        return info
    _check_uid(ref, job, namespace)
    spec = raw if isinstance(raw := job.get("spec"), dict) else {}
    specs = spec.get(OWNER_KINDS[(ref.api_version, ref.kind)])
    if not isinstance(specs, dict):
        raise JobNotFound(f"{ref.kind} {namespace}/{ref.name} has no replica specs")
    names_ = tuple(gpu_resources)
    try:
        size = _gang_size_of(specs, names_)
    except ValueError as exc:
        raise JobNotFound(f"{ref.kind} {namespace}/{ref.name}: {exc}") from None
    meta = raw if isinstance(raw := pod.get("metadata"), dict) else {}
    labels = raw if isinstance(raw := meta.get("labels"), dict) else {}
    rtype = _replica_type(labels, specs, via_batch)
    raw_index = _label(labels, names.REPLICA_INDEX_LABEL, names.LEGACY_REPLICA_INDEX_LABELS)
    index = int(raw_index) if raw_index is not None and raw_index.isdigit() else None
    if gpus is None:
        gpus = pod_gpus(pspec, names_)
    jmeta = raw if isinstance(raw := job.get("metadata"), dict) else {}
    jlabels = raw if isinstance(raw := jmeta.get("labels"), dict) else {}
    job_labels = {str(k): str(v) for k, v in jlabels.items()}
    info = _new_object(JobInfo)  # frozen: fill __dict__ as __init__ would (see _new_object)
    info.__dict__.update(
        api_version=ref.api_version, kind=ref.kind, name=ref.name, namespace=namespace,
        uid=ref.uid or str(jmeta.get("uid") or ""), replica_type=rtype, replica_index=index,
        role=rtype.lower() if rtype else None, gang_size=size, gpus_per_pod=gpus,
        requests_gpu=gpus > 0, labels=job_labels, spec=dict(spec), runtime="",
    )
    if not via_batch:
        _remember_job(job, gpu_resources, (ref.api_version, ref.kind), specs, size,
                      job_labels, spec)
    return info


def _jobset_gang(pod: Mapping[str, Any], namespace: str, cluster: ClusterReader,
                 parent: OwnerRef, pspec: Mapping[str, Any], gpus: int | None,
                 gpu_resources: Iterable[str]) -> JobInfo:
    """The gang of a pod whose batch Job a JobSet controls (webhook/jobset_gangs.py)."""
    if gpus is None:
        gpus = pod_gpus(pspec, gpu_resources)
    ref = {"apiVersion": parent.api_version, "kind": parent.kind, "name": parent.name,
           "uid": parent.uid}
    try:
        return jobset_gangs.resolve(pod, namespace, cluster, ref, gpus, gang_size,
                                    gpu_resources)
    except jobset_gangs.GangUnknown as exc:
        raise JobNotFound(str(exc)) from None


class _JobFacts(NamedTuple):
    """What :func:`resolve_job` reads of one job object that no pod changes: its uid, replica
    specs and gang size, labels (as strings), spec, and its replica-spec keys by lower
    case. Remembered per job object (held, so its id is not reused meanwhile): the cluster
    view replaces a job object when the job changes, never edits it, so a replaced job is a
    new object and a miss. Why: every pod of a gang after its first asks the same; the
    per-job half (uid test, gang size, replica type, the labels' copy) was ~6 functions and
    ~35 us of a cold review's ~130 in resolve_job on the benchmark guest."""

    job: Mapping[str, Any]
    names: Iterable[str]
    key: tuple[str, str]
    uid: Any
    uid_str: str
    specs: Mapping[str, Any]
    size: int
    labels: dict[str, str]
    spec: dict[str, Any]
    replica_types: dict[str, str]


_JOB_FACTS: dict[int, _JobFacts] = {}


def _remember_job(job: Mapping[str, Any], gpu_resources: Iterable[str], key: tuple[str, str],
                  specs: Mapping[str, Any], size: int, job_labels: dict[str, str],
                  spec: dict[str, Any]) -> None:
    """Keep a job's facts (see _JobFacts), when they are all in a form the fast path can
    hand out as the full path would: hashable GPU names (held by identity), a plain uid."""
    if not isinstance(gpu_resources, _REUSABLE):
        return
    meta = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    uid = meta.get("uid")
    replica_types: dict[str, str] = {}
    for k in specs:  # _replica_type's answer: the first key of each lower-case spelling
        if isinstance(k, str):
            replica_types.setdefault(k.lower(), k)
    if len(_JOB_FACTS) >= 4096:
        _JOB_FACTS.clear()
    # _JobFacts(...) without the named tuple's own __new__ (a Python function)
    _JOB_FACTS[id(job)] = _new_tuple(_JobFacts, (job, gpu_resources, key, uid, str(uid or ""),
                                                 specs, size, dict(job_labels), spec,
                                                 replica_types))


_new_tuple = tuple.__new__
