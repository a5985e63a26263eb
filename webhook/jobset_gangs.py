"""The gang of a JobSet pod: Pod -> batch Job -> JobSet [-> TrainJob].

Why a module of its own: a JobSet keeps no kubeflow replica specs; its pods are made by
batch Jobs (``<jobset>-<replicatedJob>-<jobIndex>``) and told apart by JobSet's labels and
the Job controller's completion index. The gang is the TrainJob when one owns the JobSet
(Kubeflow Trainer v2), else the JobSet itself. Its size comes from the JobSet's spec: the
sum over the replicated jobs whose pods ask for GPUs of ``replicas x min(parallelism,
completions)`` (initializers and a launcher that asks for no GPU are not in the GPU gang).
A replica is (replicated job, job index, completion index); within its replicated job its
index is ``jobIndex x podsPerJob + completionIndex``.

The pipeline then sees the gang as it sees a kubeflow job: :class:`~webhook.steps.JobInfo`
with the replicated jobs as replica types (``spec["podSets"]``: per replicated job the pod
count as ``replicas`` and its pod template), so placement, the network plan and the gang
labels work unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gputopo.cluster.source import ClusterReader
from gputopo.errors import InputError
from gputopo.operators import jobset as js
from gputopo.operators import trainjob as tj
from gputopo.placement.job_needs import needs_annotations
from webhook.steps import JobInfo

#: Where a JobSet or TrainJob gang keeps its replica specs in ``JobInfo.spec``.
POD_SETS = "podSets"
JOBSET = (js.API_VERSION, js.KIND)
TRAINJOB = (tj.API_VERSION, tj.KIND)


class GangUnknown(Exception):
    """The JobSet (or the TrainJob owning it) cannot be read: the gang size is unknown."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def _same_uid(ref: Mapping[str, Any], obj: Mapping[str, Any], what: str) -> None:
    uid = _meta(obj).get("uid")
    if uid and ref.get("uid") != uid:
        raise GangUnknown(f"owner {what} has uid {uid}, the reference names "
                          f"{ref.get('uid') or 'no uid'}")


def pod_sets(jobset: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per replicated job (spec order): ``replicas`` = its pod count, ``template`` = its pod
    template (the JobSet's own object, read only: a deep copy per pod made resolve_job of a
    TrainJob pod ~186 us against ~40 us without, hot, timeit, load 2-4); ValueError for a
    malformed spec."""
    try:
        rjobs = js.replicated_jobs(jobset)
    except InputError as exc:
        raise ValueError(exc.reason) from None
    return {r.name: {"replicas": r.replicas * r.pods_per_job, "template": r.pod_template_view(),
                     "podsPerJob": r.pods_per_job, "dependsOn": r.depends_on}
            for r in rjobs}


#: Where JobInfo.spec keeps the GPU pods that start together (see :func:`min_member`).
STARTING_GPU_PODS = "startingGpuPods"


def _gpu_pods(specs: Mapping[str, Mapping[str, Any]], gang_size: Any,
              names_: tuple[str, ...]) -> tuple[int, int]:
    """(GPU pods of the JobSet, those of the GPU replicated jobs that depend on no other
    GPU replicated job), one count per replicated job."""
    per = {k: int(gang_size({k: v}, names_)) for k, v in specs.items()}
    gpu = {k for k, n in per.items() if n > 0}
    starting = sum(per[k] for k in gpu if not set(specs[k]["dependsOn"]) & gpu)
    return sum(per.values()), starting


def min_member(job: JobInfo) -> int:
    """The ``minMember`` of the PodGroup gputopo makes for a gang: its GPU pods, less, for a
    JobSet or TrainJob gang, those of replicated jobs that JobSet starts only once another
    GPU replicated job is ready (``dependsOn``: the launcher of Trainer's MPI runtimes).
    Coscheduling holds a group's pods at Permit until ``minMember`` of them are there, and
    pods created only after the others run would never come."""
    if (job.api_version, job.kind) in (JOBSET, TRAINJOB):
        starting = job.spec.get(STARTING_GPU_PODS)
        if isinstance(starting, int) and 0 < starting <= job.gang_size:
            return starting
    return job.gang_size


def resolve(pod: Mapping[str, Any], namespace: str, cluster: ClusterReader,
            jobset_ref: Mapping[str, Any], gpus: int, gang_size: Any,
            gpu_resources: Iterable[str]) -> JobInfo:
    """The JobInfo of a pod whose batch Job a JobSet controls (``jobset_ref``: that
    controller reference). ``gang_size(specs, names)`` counts the GPU pods of replica
    specs (:func:`webhook.jobs.gang_size`). Raises :class:`GangUnknown`."""
    name = str(jobset_ref.get("name") or "")
    jobset = cluster.object(api_version=js.API_VERSION, kind=js.KIND, namespace=namespace,
                            name=name)
    if jobset is None:
        raise GangUnknown(f"owner JobSet {namespace}/{name} not found")
    _same_uid(jobset_ref, jobset, f"JobSet {namespace}/{name}")
    names_ = tuple(gpu_resources)
    try:
        specs = pod_sets(jobset)
        size, starting = _gpu_pods(specs, gang_size, names_)
    except ValueError as exc:
        raise GangUnknown(f"JobSet {namespace}/{name}: {exc}") from None
    gang: Mapping[str, Any] = jobset
    api_version, kind, runtime = js.API_VERSION, js.KIND, ""
    parent = _controller(jobset)
    if parent is not None and (parent.get("apiVersion"), parent.get("kind")) == TRAINJOB:
        trainjob = cluster.object(api_version=tj.API_VERSION, kind=tj.KIND,
                                  namespace=namespace, name=str(parent.get("name")))
        if trainjob is None:
            raise GangUnknown(f"TrainJob {namespace}/{parent.get('name')} owning JobSet "
                              f"{namespace}/{name} not found")
        _same_uid(parent, trainjob, f"TrainJob {namespace}/{parent.get('name')}")
        gang, (api_version, kind), runtime = trainjob, TRAINJOB, tj.runtime_name(trainjob)
    meta = _meta(pod)
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"),
                                                        Mapping) else {}
    rjob = labels.get(js.REPLICATED_JOB_NAME) or annotations.get(js.REPLICATED_JOB_NAME)
    rtype = rjob if isinstance(rjob, str) and rjob in specs else None
    index = None
    job_index = labels.get(js.JOB_INDEX) or annotations.get(js.JOB_INDEX)
    completion = js.completion_index(pod)
    if rtype is not None and isinstance(job_index, str) and job_index.isdigit() and \
            completion is not None:
        index = int(job_index) * specs[rtype]["podsPerJob"] + completion
    gmeta = _meta(gang)
    glabels = gmeta.get("labels") if isinstance(gmeta.get("labels"), Mapping) else {}
    return JobInfo(
        api_version=api_version, kind=kind, name=str(gmeta.get("name") or ""),
        namespace=namespace, uid=str(gmeta.get("uid") or ""), replica_type=rtype,
        replica_index=index, role=rtype.lower() if rtype else None, gang_size=size,
        gpus_per_pod=gpus, requests_gpu=gpus > 0,
        labels={str(k): str(v) for k, v in glabels.items()},
        spec={POD_SETS: specs, STARTING_GPU_PODS: starting}, runtime=runtime,
        annotations=needs_annotations(gmeta))
