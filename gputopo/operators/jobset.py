"""JobSet -> the batch Jobs the JobSet controller creates -> the Pods the Job controller
creates, as the webhook receives them.

Why: a JobSet's pods are owned by batch Jobs, not by the JobSet, and carry their identity
in JobSet's labels and the Job controller's completion index; the webhook finds the gang
through that owner chain (Pod -> Job -> JobSet [-> TrainJob]), so a dry run must produce
the Jobs as well as the Pods, each exactly as the controllers make them.

Mirrored (JobSet v0.8-v0.12, Kubernetes 1.30+):

* JobSet's defaulting webhook: ``completionMode: Indexed``, ``replicas: 1``,
  ``network.enableDNSHostnames: true``, pod ``restartPolicy: OnFailure`` when unset;
* ``pkg/controllers/jobset_controller.go`` ``constructJob``: Job ``<jobset>-<rjob>-<i>``,
  the template's labels and annotations plus ``labelAndAnnotateObject`` (the same keys as
  labels and annotations on the Job and its pod template; the exclusive-topology
  annotations as annotations only, with the node-selector strategy's nodeSelector and
  toleration), pod ``subdomain`` = the
  ``network.subdomain`` or the JobSet's name, a controller ownerReference to the JobSet;
  ``jobset-uid`` (v0.9+) as well;
* the API server's Job defaulting (``parallelism`` 1, ``completions`` = parallelism,
  ``backoffLimit`` 6, the ``controller-uid``/``job-name`` selector and labels) and the Job
  controller's pods (``pkg/controller/job/indexed_job_utils.go``): ``generateName
  <job>-<index>-``, ``hostname <job>-<index>``, the completion index as annotation and
  label (PodIndexLabel, GA 1.32), env ``JOB_COMPLETION_INDEX`` from it, the
  job-tracking finalizer, a controller ownerReference to the Job.

Pure: no Kubernetes, no I/O.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from gputopo.errors import InputError
from gputopo.operators.common import apiserver_defaults, controller_ref, made_up_uid

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
BATCH_API_VERSION = "batch/v1"

PREFIX = "jobset.sigs.k8s.io/"
JOBSET_NAME = PREFIX + "jobset-name"
JOBSET_UID = PREFIX + "jobset-uid"
REPLICATED_JOB_NAME = PREFIX + "replicatedjob-name"
REPLICATED_JOB_REPLICAS = PREFIX + "replicatedjob-replicas"
GLOBAL_REPLICAS = PREFIX + "global-replicas"
JOB_INDEX = PREFIX + "job-index"
JOB_GLOBAL_INDEX = PREFIX + "job-global-index"
JOB_KEY = PREFIX + "job-key"
RESTART_ATTEMPT = PREFIX + "restart-attempt"
#: exclusive placement (annotations only): one Job per domain of this node label; with the
#: node-selector strategy, nodes labelled ahead of time per Job
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"
NAMESPACED_JOB = "alpha.jobset.sigs.k8s.io/namespaced-job"
NO_SCHEDULE_TAINT = "alpha.jobset.sigs.k8s.io/no-schedule"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX}']"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


def _int(value: object, default: int, what: str, label: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{what} must be a non-negative integer, got {value!r}", obj=label)
    return value


class ReplicatedJob:
    """One entry of ``spec.replicatedJobs`` after JobSet's defaulting."""

    def __init__(self, raw: object, label: str, where: str) -> None:
        if not isinstance(raw, Mapping):
            raise InputError(f"{where} must be an object", obj=label)
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}.name must be a non-empty string", obj=label)
        self.name = name
        self.replicas = _int(raw.get("replicas"), 1, f"{where}.replicas", label)
        deps = raw.get("dependsOn")
        #: replicated jobs whose Jobs JobSet creates only once these are Ready/Complete
        self.depends_on = tuple(str(d.get("name")) for d in deps if isinstance(d, Mapping)
                                ) if isinstance(deps, list) else ()
        template = raw.get("template")
        if not isinstance(template, Mapping):
            raise InputError(f"{where}.template must be an object (a Job template)", obj=label)
        tmeta = template_metadata(template, f"{where}.template", label)
        self.job_labels = dict(tmeta.get("labels") or {})
        self.job_annotations = dict(tmeta.get("annotations") or {})
        jspec = template.get("spec")
        if not isinstance(jspec, Mapping):
            raise InputError(f"{where}.template.spec must be an object", obj=label)
        self.job_spec = jspec  # read here, copied by whoever changes it (_job)
        self.parallelism = _int(self.job_spec.get("parallelism"), 1,
                                f"{where}.template.spec.parallelism", label)
        self.completions = _int(self.job_spec.get("completions"), self.parallelism,
                                f"{where}.template.spec.completions", label)
        pod = self.job_spec.get("template")
        pspec = pod.get("spec") if isinstance(pod, Mapping) else None
        containers = pspec.get("containers") if isinstance(pspec, Mapping) else None
        if not isinstance(containers, list) or not containers or not all(
                isinstance(c, Mapping) for c in containers):
            raise InputError(f"{where}.template.spec.template.spec.containers must be a "
                             f"non-empty list of containers", obj=label)
        assert isinstance(pod, Mapping) and isinstance(pspec, Mapping)
        template_metadata(pod, f"{where}.template.spec.template", label)
        inits = pspec.get("initContainers")
        if inits is not None and not (isinstance(inits, list) and all(
                isinstance(c, Mapping) for c in inits)):
            raise InputError(f"{where}.template.spec.template.spec.initContainers must be a "
                             f"list of containers", obj=label)

    @property
    def pods_per_job(self) -> int:
        """Pods one Job of it runs at once: min(parallelism, completions)."""
        return min(self.parallelism, self.completions)

    def pod_template(self) -> dict[str, Any]:
        """A copy of the pod template, to change."""
        return copy.deepcopy(dict(self.job_spec["template"]))

    def pod_template_view(self) -> Mapping[str, Any]:
        """The pod template itself, to read only."""
        template: Mapping[str, Any] = self.job_spec["template"]
        return template


def template_metadata(template: Mapping[str, Any], where: str, label: str
                      ) -> Mapping[str, Any]:
    """A template's metadata, with labels and annotations as string maps."""
    meta = template.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise InputError(f"{where}.metadata must be an object", obj=label)
    for key in ("labels", "annotations"):
        values = meta.get(key)
        if values is not None and not (isinstance(values, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in values.items())):
            raise InputError(f"{where}.metadata.{key} must map strings to strings", obj=label)
    return meta


def replicated_jobs(jobset: Mapping[str, Any]) -> list[ReplicatedJob]:
    """``spec.replicatedJobs`` of a JobSet, defaulted; InputError when malformed."""
    label = _label(jobset)
    spec = jobset.get("spec")
    raw = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
    if not isinstance(raw, list) or not raw:
        raise InputError("spec.replicatedJobs must be a non-empty list", obj=label)
    out = [ReplicatedJob(r, label, f"spec.replicatedJobs[{i}]") for i, r in enumerate(raw)]
    seen: set[str] = set()
    for r in out:
        if r.name in seen:
            raise InputError(f"spec.replicatedJobs names {r.name!r} twice", obj=label)
        seen.add(r.name)
    return out


def pod_count(jobset: Mapping[str, Any]) -> int:
    """Every pod of the JobSet: the sum of replicas x min(parallelism, completions)."""
    return sum(r.replicas * r.pods_per_job for r in replicated_jobs(jobset))


def _label(jobset: Mapping[str, Any]) -> str:
    meta = jobset.get("metadata") if isinstance(jobset.get("metadata"), Mapping) else {}
    return f"{jobset.get('kind') or KIND} {meta.get('namespace') or 'default'}/{meta.get('name')}"


def _identity(jobset: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = jobset.get("metadata")
    if not isinstance(meta, Mapping):
        raise InputError("metadata must be an object", obj=KIND)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("missing metadata.name", obj=KIND)
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise InputError("metadata.namespace must be a string", obj=f"{KIND} {name}")
    uid = meta.get("uid")
    uid = uid if isinstance(uid, str) and uid else made_up_uid(namespace, KIND, name)
    return name, namespace, uid


def _jobset_keys(*, name: str, uid: str, namespace: str, rjob: ReplicatedJob, index: int,
                 global_replicas: int, global_index: int) -> dict[str, str]:
    """``labelAndAnnotateObject``: the same keys go on as labels and as annotations."""
    job_name = f"{name}-{rjob.name}-{index}"
    return {
        JOBSET_NAME: name, REPLICATED_JOB_NAME: rjob.name, RESTART_ATTEMPT: "0",
        REPLICATED_JOB_REPLICAS: str(rjob.replicas), GLOBAL_REPLICAS: str(global_replicas),
        JOB_INDEX: str(index),
        JOB_KEY: hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),
        JOB_GLOBAL_INDEX: str(global_index), JOBSET_UID: uid,
    }


def expand(jobset: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Jobs of a JobSet and their Pods, in creation order: each Job, then its pods by
    completion index (replicated jobs in spec order)."""
    name, namespace, uid = _identity(jobset)
    rjobs = replicated_jobs(jobset)
    spec = jobset.get("spec") if isinstance(jobset.get("spec"), Mapping) else {}
    network = spec.get("network") if isinstance(spec.get("network"), Mapping) else {}
    dns = network.get("enableDNSHostnames", True) is not False
    subdomain = network.get("subdomain") or name
    suspended = spec.get("suspend") is True
    owner = controller_ref(str(jobset.get("apiVersion") or API_VERSION), KIND, name, uid)
    meta = jobset.get("metadata") if isinstance(jobset.get("metadata"), Mapping) else {}
    js_annotations = meta.get("annotations") if isinstance(meta.get("annotations"),
                                                           Mapping) else {}
    global_replicas = sum(r.replicas for r in rjobs)
    out: list[dict[str, Any]] = []
    global_index = 0
    for rjob in rjobs:
        for index in range(rjob.replicas):
            keys = _jobset_keys(name=name, uid=uid, namespace=namespace, rjob=rjob,
                                index=index, global_replicas=global_replicas,
                                global_index=global_index)
            global_index += 1
            extra = _exclusive(js_annotations, rjob.job_annotations)
            job = _job(rjob, index, keys, extra, name=name, namespace=namespace, owner=owner,
                       subdomain=subdomain if dns else None, suspended=suspended)
            out.append(job)
            if not suspended:
                out.extend(job_pods(job))
    return out


def _exclusive(jobset: Mapping[str, Any], rjob: Mapping[str, Any]) -> dict[str, str]:
    """The exclusive-placement annotations ``labelAndAnnotateObject`` copies (the JobSet's,
    then the replicated job's, which wins), as annotations only."""
    out: dict[str, str] = {}
    for source in (jobset, rjob):
        if isinstance(source.get(EXCLUSIVE_TOPOLOGY), str):
            out[EXCLUSIVE_TOPOLOGY] = source[EXCLUSIVE_TOPOLOGY]
            if isinstance(source.get(NODE_SELECTOR_STRATEGY), str):
                out[NODE_SELECTOR_STRATEGY] = source[NODE_SELECTOR_STRATEGY]
    return out


def _job(rjob: ReplicatedJob, index: int, keys: Mapping[str, str], extra: Mapping[str, str],
         *, name: str, namespace: str, owner: dict[str, Any], subdomain: str | None,
         suspended: bool) -> dict[str, Any]:
    """``constructJob`` and the API server's Job defaulting (``extra``: annotations only)."""
    job_name = f"{name}-{rjob.name}-{index}"
    job_uid = made_up_uid(namespace, "Job", job_name)
    jspec = copy.deepcopy(dict(rjob.job_spec))
    jspec.setdefault("completionMode", "Indexed")
    jspec["parallelism"] = rjob.parallelism
    jspec["completions"] = rjob.completions
    jspec.setdefault("backoffLimit", 6)
    jspec["suspend"] = suspended
    template = rjob.pod_template()
    tmeta = dict(template.get("metadata") or {})
    selector = {"batch.kubernetes.io/controller-uid": job_uid}
    tmeta["labels"] = {**dict(tmeta.get("labels") or {}), **keys,
                       "batch.kubernetes.io/controller-uid": job_uid,
                       "batch.kubernetes.io/job-name": job_name,
                       "controller-uid": job_uid, "job-name": job_name}
    tmeta["annotations"] = {**dict(tmeta.get("annotations") or {}), **keys, **extra}
    template["metadata"] = tmeta
    pspec = dict(template.get("spec") or {})
    pspec.setdefault("restartPolicy", "OnFailure")  # JobSet's webhook
    if subdomain is not None:
        pspec["subdomain"] = subdomain
    if EXCLUSIVE_TOPOLOGY in extra and NODE_SELECTOR_STRATEGY in extra:
        pspec["nodeSelector"] = {**dict(pspec.get("nodeSelector") or {}),
                                 NAMESPACED_JOB: f"{namespace}_{job_name}"}
        pspec["tolerations"] = [*(pspec.get("tolerations") or []), {
            "key": NO_SCHEDULE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    template["spec"] = pspec
    jspec["template"] = template
    jspec["selector"] = {"matchLabels": selector}
    return {
        "apiVersion": BATCH_API_VERSION, "kind": "Job",
        "metadata": {"name": job_name, "namespace": namespace, "uid": job_uid,
                     "labels": {**rjob.job_labels, **keys},
                     "annotations": {**rjob.job_annotations, **keys, **extra},
                     "ownerReferences": [owner]},
        "spec": jspec,
    }


def job_pods(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods the Job controller creates for an Indexed Job, index 0 first."""
    meta = job["metadata"]
    spec = job["spec"]
    count = min(spec["parallelism"], spec["completions"])
    owner = controller_ref(BATCH_API_VERSION, "Job", meta["name"], meta["uid"])
    indexed = spec.get("completionMode") == "Indexed"
    return [_pod(job, index if indexed else None, owner) for index in range(count)]


def _pod(job: Mapping[str, Any], index: int | None, owner: dict[str, Any]
         ) -> dict[str, Any]:
    """One pod of the Job: with its completion index (Indexed), else a plain ``<job>-``."""
    meta = job["metadata"]
    template = copy.deepcopy(job["spec"]["template"])
    tmeta = template.get("metadata") or {}
    spec = template["spec"]
    labels = dict(tmeta.get("labels") or {})
    annotations = dict(tmeta.get("annotations") or {})
    if index is not None:
        labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        if not spec.get("hostname"):
            spec["hostname"] = f"{meta['name']}-{index}"
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                env = list(container.get("env") or [])
                env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                    "apiVersion": "v1", "fieldPath": COMPLETION_INDEX_FIELD}}})
                container["env"] = env
    pod_meta: dict[str, Any] = {
        "generateName": f"{meta['name']}-" + (f"{index}-" if index is not None else ""),
        "namespace": meta["namespace"],
        "labels": labels, "annotations": annotations,
        "finalizers": [JOB_TRACKING_FINALIZER], "ownerReferences": [owner]}
    return apiserver_defaults({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
                               "spec": spec})


def completion_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's completion index (annotation, else label), None when it has none."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    for key in ("annotations", "labels"):
        values = meta.get(key) if isinstance(meta.get(key), Mapping) else {}
        raw = values.get(COMPLETION_INDEX)
        if isinstance(raw, str) and raw.isdigit():
            return int(raw)
    return None


def by_name(rjobs: Sequence[ReplicatedJob]) -> dict[str, ReplicatedJob]:
    return {r.name: r for r in rjobs}
