"""TrainJob (Kubeflow Trainer v2) + its (Cluster)TrainingRuntime -> the JobSet Trainer
creates -> its Jobs and Pods (:mod:`gputopo.operators.jobset`).

Why: a TrainJob carries no pod template; its pods come from the runtime it names, changed
by Trainer's plugins. The webhook sees those pods (owned by batch Jobs of a JobSet the
TrainJob owns), so a dry run must build them as Trainer does. Mirrored (Trainer v2.2-v2.3,
``pkg/runtime/framework/plugins``):

* ``jobset/builder.go``: the JobSet has the TrainJob's name and a controller ownerReference
  to it; the replicated job labelled ``trainjob-ancestor-step: trainer`` gets ``replicas:
  1`` and ``parallelism = completions = numNodes``; the ``node`` containers (and the
  launcher's, with ``runLauncherAsNode``) take ``spec.trainer`` image, command, args,
  ``resourcesPerNode`` and env;
* ``torch/torch.go``: ``numNodes`` from the TrainJob, else ``mlPolicy.numNodes``;
  ``PET_NNODES``, ``PET_NPROC_PER_NODE`` (``auto`` with GPUs), ``PET_NODE_RANK`` (fieldRef
  to the completion index), ``PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>``,
  ``PET_MASTER_PORT=29500`` and ``containerPort: 29500`` on the ``node`` container; a
  TrainJob whose command is ``tune run`` (torchtune) gets ``--rdzv_endpoint`` etc. in its
  args instead of the env;
* ``mpi/mpi.go``: the ``node`` replicated job runs ``numNodes-1`` pods when the launcher
  runs as a node; the ``mpi-ssh-auth`` Secret volume on node and launcher, the
  ``mpi-hostfile`` ConfigMap and the OpenMPI env on the launcher;
* ``coscheduling/coscheduling.go``: with ``podGroupPolicy.coscheduling`` the PodGroup
  ``<trainjob>`` (``minMember`` = every pod of the JobSet) and the pod label
  ``scheduling.x-k8s.io/pod-group``.

* ``spec.runtimePatches`` (Trainer v2.2+, how Kueue hands them now): strategic-merged into
  the runtime's JobSet template before the plugins run
  (:mod:`gputopo.operators.runtime_patches`). The fields it replaced
  (``spec.labels``, ``spec.annotations``, ``spec.podTemplateOverrides`` of v2.0-v2.1) and a
  ``spec.templateOverrides`` no Trainer release has are refused with one line: the API
  server of a v2.2+ cluster would not keep them, so a dry run that applied them would
  show pods the cluster never makes.

Pure: no Kubernetes, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gputopo.errors import InputError
from gputopo.operators import jobset as js
from gputopo.operators.common import JobShape, made_up_uid
from gputopo.operators.runtime_patches import apply_runtime_patches
from gputopo.operators.trainer_runtimes import ANCESTOR_LABEL, SHIPPED, shipped

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
NODE = "node"
LAUNCHER = "launcher"
TORCH_PORT = 29500
TORCHTUNE_ENTRYPOINT = ["tune", "run"]
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
MPI_SSH_VOLUME = "mpi-ssh-auth"
MPI_HOSTFILE_VOLUME = "mpi-hostfile"
MPI_HOSTFILE_DIR = "/etc/mpi"


def is_runtime(obj: object) -> bool:
    return isinstance(obj, Mapping) and obj.get("apiVersion") == API_VERSION and \
        obj.get("kind") in RUNTIME_KINDS


def runtime_name(trainjob: Mapping[str, Any]) -> str:
    """``spec.runtimeRef.name`` ("" when absent)."""
    spec = trainjob.get("spec") if isinstance(trainjob.get("spec"), Mapping) else {}
    ref = spec.get("runtimeRef") if isinstance(spec.get("runtimeRef"), Mapping) else {}
    name = ref.get("name")
    return name if isinstance(name, str) else ""


def find_runtime(shape: JobShape, runtimes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The runtime the TrainJob names: from ``runtimes`` (a namespaced TrainingRuntime in
    the TrainJob's namespace, or a ClusterTrainingRuntime), else one Trainer ships."""
    ref = shape.spec.get("runtimeRef")
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or not ref["name"]:
        raise shape.error("spec.runtimeRef.name must name a (Cluster)TrainingRuntime")
    name = ref["name"]
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    if kind not in RUNTIME_KINDS:
        raise shape.error(f"spec.runtimeRef.kind must be one of {', '.join(RUNTIME_KINDS)}, "
                          f"got {kind!r}")
    for rt in runtimes:
        meta = rt.get("metadata") if isinstance(rt.get("metadata"), Mapping) else {}
        if rt.get("kind") != kind or meta.get("name") != name:
            continue
        if kind == "TrainingRuntime" and (meta.get("namespace") or "default") != shape.namespace:
            continue
        return copy.deepcopy(dict(rt))
    found = shipped(name) if kind == "ClusterTrainingRuntime" else None
    if found is None:
        raise shape.error(f"{kind} {name!r} is neither in the input nor one Trainer ships "
                          f"({', '.join(SHIPPED)})")
    return found


def _containers_named(pod_spec: Mapping[str, Any], *names: str) -> list[dict[str, Any]]:
    return [c for c in pod_spec.get("containers") or [] if c.get("name") in names]


def _upsert_env(container: dict[str, Any], items: Iterable[Mapping[str, Any]]) -> None:
    env = [dict(e) for e in container.get("env") or []]
    for item in items:
        env = [e for e in env if e.get("name") != item.get("name")] + [dict(item)]
    container["env"] = env


def _ancestor(rjob: Mapping[str, Any]) -> str | None:
    meta = (rjob.get("template") or {}).get("metadata") or {}
    return (meta.get("labels") or {}).get(ANCESTOR_LABEL)


def _count(value: object, what: str, shape: JobShape) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise shape.error(f"{what} must be a positive integer, got {value!r}")
    return value


def _check_replicated_job(shape: JobShape, rjob: object, where: str) -> None:
    """The shape the plugins below rely on: a name, a Job template with a pod template
    whose containers are objects (anything else: one clear error, no traceback)."""
    named = isinstance(rjob, dict) and isinstance(rjob.get("name"), str) and rjob["name"]
    template = rjob.get("template") if named and isinstance(rjob, dict) else None
    jspec = template.get("spec") if isinstance(template, dict) else None
    pod = jspec.get("template") if isinstance(jspec, dict) else None
    pspec = pod.get("spec") if isinstance(pod, dict) else None
    containers = pspec.get("containers") if isinstance(pspec, dict) else None
    if not isinstance(template, dict) or not isinstance(pod, dict) or not isinstance(
            containers, list) or not containers or not all(isinstance(c, dict)
                                                           for c in containers):
        raise shape.error(f"{where} needs a name and template.spec.template.spec.containers "
                          f"(a non-empty list of containers)")
    js.template_metadata(template, f"{where}.template", shape.label)
    js.template_metadata(pod, f"{where}.template.spec.template", shape.label)


def _check_trainer(shape: JobShape, trainer: Mapping[str, Any]) -> None:
    """``spec.trainer`` as the TrainJob CRD types it (what the API server would refuse is
    one clear error here, never a wrong pod)."""
    def strings(value: object) -> bool:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)

    if trainer.get("image") is not None and not isinstance(trainer["image"], str):
        raise shape.error("spec.trainer.image must be a string")
    for key in ("command", "args"):
        if trainer.get(key) is not None and not strings(trainer[key]):
            raise shape.error(f"spec.trainer.{key} must be a list of strings")
    env = trainer.get("env")
    if env is not None and not (isinstance(env, list) and all(
            isinstance(e, Mapping) and isinstance(e.get("name"), str) for e in env)):
        raise shape.error("spec.trainer.env must be a list of {name, value} objects")
    res = trainer.get("resourcesPerNode")
    if res is not None and not isinstance(res, Mapping):
        raise shape.error("spec.trainer.resourcesPerNode must be an object")
    for gone in _NOT_IN_V22:
        if gone in shape.spec:
            raise shape.error(f"spec.{gone} is not a TrainJob field in Trainer v2.2+ (the "
                              f"versions mirrored); use spec.runtimePatches")


def build_jobset(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet Trainer creates for ``trainjob`` on ``runtime``."""
    shape = JobShape(trainjob)
    rspec = runtime.get("spec") if isinstance(runtime.get("spec"), Mapping) else {}
    policy = rspec.get("mlPolicy") if isinstance(rspec.get("mlPolicy"), Mapping) else {}
    template = rspec.get("template") if isinstance(rspec.get("template"), Mapping) else {}
    jspec = copy.deepcopy(dict(template.get("spec") or {}))
    rjobs = jspec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise shape.error(f"runtime {runtime_name(trainjob)!r} has no replicatedJobs")
    for i, rjob in enumerate(rjobs):
        _check_replicated_job(shape, rjob, f"runtime {runtime_name(trainjob)!r}: "
                                           f"spec.template.spec.replicatedJobs[{i}]")
    trainer = shape.spec.get("trainer") if isinstance(shape.spec.get("trainer"), Mapping) else {}
    _check_trainer(shape, trainer)
    patched_meta = apply_runtime_patches(shape, rjobs)  # before the plugins, as Trainer does
    num_nodes = _count(trainer.get("numNodes", policy.get("numNodes", 1)),
                       "spec.trainer.numNodes", shape)
    mpi = policy.get("mpi") if isinstance(policy.get("mpi"), Mapping) else None
    torch = policy.get("torch") if isinstance(policy.get("torch"), Mapping) else None
    launcher_as_node = bool(mpi and mpi.get("runLauncherAsNode"))
    for rjob in rjobs:
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        if _ancestor(rjob) == "trainer":
            rjob["replicas"] = 1
        names = (NODE, LAUNCHER) if launcher_as_node else (NODE,)
        for c in _containers_named(pod_spec, *names):
            for key in ("image", "command", "args"):
                if trainer.get(key) is not None:
                    c[key] = copy.deepcopy(trainer[key])
            res = trainer.get("resourcesPerNode")
            if isinstance(res, Mapping) and (res.get("limits") or res.get("requests")):
                c["resources"] = copy.deepcopy(dict(res))
            if trainer.get("env"):
                _upsert_env(c, trainer["env"])
    # the torch and plainml plugins give the trainer pod set numNodes pods; the MPI plugin
    # gives the node pod set numNodes (less the launcher when it runs as a node) and keeps
    # the launcher's count from the runtime (1)
    counts: dict[str, int] = {}
    if mpi is not None:
        _mpi(shape, mpi, rjobs, num_nodes, counts)
    else:
        counts = {str(r.get("name")): num_nodes for r in rjobs if _ancestor(r) == "trainer"}
    for rjob in rjobs:
        if rjob.get("name") in counts:
            spec = rjob["template"]["spec"]
            spec["parallelism"] = spec["completions"] = counts[rjob["name"]]
    if torch is not None:
        _torch(shape, torch, trainer, rjobs, num_nodes)
    if _coscheduling(rspec) is not None:
        for rjob in rjobs:
            tmeta = rjob["template"]["spec"]["template"].setdefault("metadata", {})
            tmeta["labels"] = {**dict(tmeta.get("labels") or {}), POD_GROUP_LABEL: shape.name}
    meta: dict[str, Any] = {"name": shape.name, "namespace": shape.namespace,
                            "uid": made_up_uid(shape.namespace, js.KIND, shape.name),
                            "ownerReferences": [shape.controller_ref()]}
    tmeta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
    for key in ("labels", "annotations"):  # the runtime template's, then the patches'
        values = {**dict(tmeta.get(key) or {}), **patched_meta.get(key, {})}
        if values:
            meta[key] = values
    jspec["suspend"] = shape.spec.get("suspend") is True
    return {"apiVersion": js.API_VERSION, "kind": js.KIND, "metadata": meta, "spec": jspec}


def _torch(shape: JobShape, torch: Mapping[str, Any], trainer: Mapping[str, Any],
           rjobs: list[dict[str, Any]], num_nodes: int) -> None:
    nproc = trainer.get("numProcPerNode", torch.get("numProcPerNode", "auto"))
    master = f"{shape.name}-{NODE}-0-0.{shape.name}"
    for rjob in rjobs:
        if _ancestor(rjob) != "trainer":
            continue
        for c in _containers_named(rjob["template"]["spec"]["template"]["spec"], NODE):
            if trainer.get("command") == TORCHTUNE_ENTRYPOINT:
                old = [str(a) for a in c.get("args") or []]
                recipe = "full_finetune_distributed"
                if num_nodes == 1 and nproc == 1:
                    recipe = "full_finetune_single_device"
                model = next((a.split("=")[1] for a in old if a.startswith("model")),
                             "llama3_2/1B")
                suffix = {"full_finetune_distributed": "_full" if num_nodes == 1
                          else "_full_multinode",
                          "full_finetune_single_device": "_full_single_device"}[recipe]
                c["args"] = [f"--nnodes {num_nodes}", f"--nproc_per_node {nproc}",
                             f"--rdzv_id {shape.name}",
                             f"--rdzv_endpoint {master}:{TORCH_PORT}", recipe,
                             f"--config {model}{suffix}.yaml",
                             *[a for a in old if not a.startswith("model")]]
            else:
                _upsert_env(c, [
                    {"name": "PET_NNODES", "value": str(num_nodes)},
                    {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                    {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
                        "fieldPath": js.COMPLETION_INDEX_FIELD}}},
                    {"name": "PET_MASTER_ADDR", "value": master},
                    {"name": "PET_MASTER_PORT", "value": str(TORCH_PORT)}])
            ports = [p for p in c.get("ports") or [] if p.get("containerPort") != TORCH_PORT]
            c["ports"] = [*ports, {"containerPort": TORCH_PORT}]


def _mpi(shape: JobShape, mpi: Mapping[str, Any], rjobs: list[dict[str, Any]],
         num_nodes: int, counts: dict[str, int]) -> None:
    launcher_as_node = bool(mpi.get("runLauncherAsNode"))
    counts[NODE] = max(num_nodes - 1, 1) if launcher_as_node else num_nodes
    slots = mpi.get("numProcPerNode", 1)
    ssh_path = str(mpi.get("sshAuthMountPath") or "/root/.ssh")
    for rjob in rjobs:
        name = rjob.get("name")
        if name not in (NODE, LAUNCHER):
            continue
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        volumes = [{"name": MPI_SSH_VOLUME, "secret": {
            "secretName": f"{shape.name}-mpi-ssh-auth", "defaultMode": 0o640,
            "items": [{"key": "ssh-privatekey", "path": "id_rsa"},
                      {"key": "ssh-publickey", "path": "id_rsa.pub"},
                      {"key": "ssh-publickey", "path": "authorized_keys"}]}}]
        if name == LAUNCHER:
            volumes.append({"name": MPI_HOSTFILE_VOLUME, "configMap": {
                "name": f"{shape.name}-mpi-hostfile",
                "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}})
        pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), *volumes]
        for c in _containers_named(pod_spec, NODE):
            mounts = [{"name": MPI_SSH_VOLUME, "mountPath": ssh_path}]
            if name == LAUNCHER:
                mounts.append({"name": MPI_HOSTFILE_VOLUME, "mountPath": MPI_HOSTFILE_DIR})
                _upsert_env(c, [
                    {"name": "OMPI_MCA_orte_default_hostfile",
                     "value": f"{MPI_HOSTFILE_DIR}/hostfile"},
                    {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                    {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
                    {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"}])
            c["volumeMounts"] = [*(c.get("volumeMounts") or []), *mounts]


#: TrainJob fields of Trainer v2.0-v2.1 (and one no release has) that v2.2+ does not keep
_NOT_IN_V22 = ("labels", "annotations", "podTemplateOverrides", "templateOverrides")


def _coscheduling(rspec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    pgp = rspec.get("podGroupPolicy") if isinstance(rspec.get("podGroupPolicy"), Mapping) else {}
    found = pgp.get("coscheduling")
    return found if isinstance(found, Mapping) else None


def _pod_group(shape: JobShape, jobset: Mapping[str, Any],
               cosched: Mapping[str, Any]) -> dict[str, Any]:
    """The PodGroup Trainer's coscheduling plugin creates: every pod of the JobSet."""
    spec: dict[str, Any] = {"minMember": js.pod_count(jobset)}
    timeout = cosched.get("scheduleTimeoutSeconds")
    if isinstance(timeout, int) and not isinstance(timeout, bool):
        spec["scheduleTimeoutSeconds"] = timeout
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": shape.name, "namespace": shape.namespace,
                         "ownerReferences": [shape.controller_ref()]},
            "spec": spec}


def expand(trainjob: Mapping[str, Any], *, runtimes: Iterable[Mapping[str, Any]] = ()
           ) -> list[dict[str, Any]]:
    """The objects Trainer and JobSet create for a TrainJob, in order: its JobSet, the
    PodGroup (coscheduling runtimes), then each Job and its Pods."""
    shape = JobShape(trainjob)
    runtime = find_runtime(shape, runtimes)
    jobset = build_jobset(trainjob, runtime)
    out: list[dict[str, Any]] = [jobset]
    cosched = _coscheduling(runtime.get("spec") or {})
    if cosched is not None:
        out.append(_pod_group(shape, jobset, cosched))
    if shape.spec.get("suspend") is True:
        return out
    try:
        out.extend(js.expand(jobset))
    except InputError as exc:
        raise shape.error(f"runtime {runtime_name(trainjob)!r}: {exc.reason}") from None
    return out
