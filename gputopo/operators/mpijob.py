"""MPIJob -> the objects its operator creates: kubeflow.org/v1 (training-operator v1.7/v1.8,
``pkg/controller.v1/mpi/``) and kubeflow.org/v2beta1 (mpi-operator v0.4,
``pkg/controller/mpi_job_controller.go``).

Why two shapes: v1 runs MPI over ``kubectl exec`` (workers ``sleep 365d``, the launcher is a
pod owned by the MPIJob with a ``kubectl-delivery`` init container), v2beta1 over SSH
(workers run ``/usr/sbin/sshd -De`` on the image's port, declared as no containerPort; the
launcher is the pod of a ``batch/v1`` Job ``<job>-launcher`` that the MPIJob owns). The
webhook resolves a v2beta1 launcher through that Job, so the Job is expanded too, with the
fields the API server defaults on it (selector and ``controller-uid``/``job-name`` labels).
Workers come first: both operators start the launcher after the workers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gputopo import names
from gputopo.operators.common import (
    JobShape,
    add_env,
    apiserver_defaults,
    controller_ref,
    made_up_uid,
    new_pod,
    replicas,
    restart_policy,
    template_of,
)

TYPES = ("Launcher", "Worker")
CONFIG_VOLUME = "mpi-job-config"
CONFIG_MOUNT = "/etc/mpi"
SCRIPT_MODE = 0o555
HOSTFILE_MODE = 0o444

# kubeflow.org/v1 (training-operator)
V1_OPERATOR_NAME = "mpijob-controller"
V1_RESTART_POLICY = "Never"
#: ``--kubectl-delivery-image`` default of training-operator.
KUBECTL_DELIVERY_IMAGE = "mpioperator/kubectl-delivery:latest"
KUBECTL_VOLUME = "mpi-job-kubectl"
KUBECTL_MOUNT = "/opt/kube"

# kubeflow.org/v2beta1 (mpi-operator)
V2_OPERATOR_NAME = "mpi-operator"
V2_LAUNCHER_RESTART_POLICY = "OnFailure"
V2_WORKER_RESTART_POLICY = "Never"
SSH_VOLUME = "ssh-auth"
ROOT_SSH_PATH = "/root/.ssh"
#: the command of a v2beta1 worker whose template sets neither command nor args
SSHD_COMMAND = ["/usr/sbin/sshd", "-De"]


def _is_gpu_resource(name: str) -> bool:
    return name.endswith(".com/gpu") or "gpu" in name


def _gpu_launcher(launcher: Mapping[str, Any]) -> bool:
    """training-operator's ``isGPULauncher``: a GPU resource in a launcher container's limits."""
    _, spec = template_of(launcher)
    for container in spec.get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        if any(_is_gpu_resource(str(k)) for k in limits):
            return True
    return False


def _mount(container: dict[str, Any], name: str, path: str) -> None:
    container["volumeMounts"] = [*(container.get("volumeMounts") or []),
                                 {"name": name, "mountPath": path}]


def _volume(spec: dict[str, Any], volume: dict[str, Any]) -> None:
    spec["volumes"] = [*(spec.get("volumes") or []), volume]


def _config_volume(job: str, items: list[tuple[str, int]]) -> dict[str, Any]:
    return {"name": CONFIG_VOLUME, "configMap": {
        "name": f"{job}-config",
        "items": [{"key": k, "path": k, "mode": mode} for k, mode in items]}}


def _expand_v1(shape: JobShape, specs: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    job_label = shape.name.replace("/", "-")
    generic = {names.OPERATOR_NAME_LABEL: V1_OPERATOR_NAME, names.JOB_NAME_LABEL: job_label}
    pods: list[dict[str, Any]] = []
    worker = specs.get("Worker")
    for index in range(replicas(shape, "Worker", worker, 0) if worker else 0):
        assert worker is not None
        meta, spec = template_of(worker)
        spec["restartPolicy"] = restart_policy(worker, V1_RESTART_POLICY)
        main = spec["containers"][0]
        if not main.get("command"):
            main["command"], main["args"] = ["sleep"], ["365d"]
        _mount(main, CONFIG_VOLUME, CONFIG_MOUNT)
        _volume(spec, _config_volume(shape.name, [("kubexec.sh", SCRIPT_MODE)]))
        labels = {**generic, names.REPLICA_TYPE_LABEL: "worker",
                  names.REPLICA_INDEX_LABEL: str(index)}
        pods.append(new_pod(name=f"{shape.name}-worker-{index}", namespace=shape.namespace,
                            meta=meta, labels=labels, owner=shape.controller_ref(), spec=spec))
    launcher = specs.get("Launcher")
    if launcher is not None:
        meta, spec = template_of(launcher)
        spec["serviceAccountName"] = f"{shape.name}-launcher"
        spec["initContainers"] = [*(spec.get("initContainers") or []), {
            "name": "kubectl-delivery", "image": KUBECTL_DELIVERY_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "TARGET_DIR", "value": KUBECTL_MOUNT},
                    {"name": "NAMESPACE", "value": shape.namespace}],
            "volumeMounts": [{"name": KUBECTL_VOLUME, "mountPath": KUBECTL_MOUNT},
                             {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT}],
            "resources": {
                "limits": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
                "requests": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}},
        }]
        main = spec["containers"][0]
        add_env(main, ("OMPI_MCA_plm_rsh_agent", f"{CONFIG_MOUNT}/kubexec.sh"),
                ("OMPI_MCA_orte_default_hostfile", f"{CONFIG_MOUNT}/hostfile"))
        if not _gpu_launcher(launcher):
            add_env(main, ("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", ""))
        _mount(main, KUBECTL_VOLUME, KUBECTL_MOUNT)
        _mount(main, CONFIG_VOLUME, CONFIG_MOUNT)
        spec["restartPolicy"] = restart_policy(launcher, V1_RESTART_POLICY)
        _volume(spec, {"name": KUBECTL_VOLUME, "emptyDir": {}})
        _volume(spec, _config_volume(shape.name, [("kubexec.sh", SCRIPT_MODE),
                                                  ("hostfile", HOSTFILE_MODE),
                                                  ("discover_hosts.sh", SCRIPT_MODE)]))
        labels = {**generic, names.REPLICA_TYPE_LABEL: "launcher",
                  names.JOB_ROLE_LABEL: "master"}
        pods.append(new_pod(name=f"{shape.name}-launcher", namespace=shape.namespace,
                            meta=meta, labels=labels, owner=shape.controller_ref(), spec=spec))
    return pods


def _setup_ssh(spec: dict[str, Any], shape: JobShape, mount_path: str) -> None:
    volume: dict[str, Any] = {"secretName": f"{shape.name}-ssh", "items": [
        {"key": "ssh-privatekey", "path": "id_rsa"},
        {"key": "ssh-publickey", "path": "id_rsa.pub"},
        {"key": "ssh-publickey", "path": "authorized_keys"}]}
    if mount_path == ROOT_SSH_PATH:
        volume = {"defaultMode": 0o600, **volume}
    _volume(spec, {"name": SSH_VOLUME, "secret": volume})
    _mount(spec["containers"][0], SSH_VOLUME, mount_path)


def _v2_labels(job: str, role: str) -> dict[str, str]:
    return {names.OPERATOR_NAME_LABEL: V2_OPERATOR_NAME, names.JOB_NAME_LABEL: job,
            names.JOB_ROLE_LABEL: role}


def _expand_v2(shape: JobShape, specs: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    ssh_path = str(shape.spec.get("sshAuthMountPath") or ROOT_SSH_PATH)
    slots = shape.spec.get("slotsPerWorker", 1)
    slots = 1 if slots is None else slots
    implementation = shape.spec.get("mpiImplementation") or "OpenMPI"
    objects: list[dict[str, Any]] = []
    worker = specs.get("Worker")
    for index in range(replicas(shape, "Worker", worker, 0) if worker else 0):
        assert worker is not None
        meta, spec = template_of(worker)
        name = f"{shape.name}-worker-{index}"
        spec["hostname"] = name
        spec["subdomain"] = f"{shape.name}-worker"
        if spec.get("hostNetwork"):
            spec["dnsPolicy"] = "ClusterFirstWithHostNet"
        spec["restartPolicy"] = restart_policy(worker, V2_WORKER_RESTART_POLICY)
        main = spec["containers"][0]
        if not main.get("command") and not main.get("args"):
            main["command"] = list(SSHD_COMMAND)
        add_env(main, ("K_MPI_JOB_ROLE", "worker"))
        _setup_ssh(spec, shape, ssh_path)
        labels = {**_v2_labels(shape.name, "worker"), names.REPLICA_INDEX_LABEL: str(index)}
        objects.append(new_pod(name=name, namespace=shape.namespace, meta=meta, labels=labels,
                               owner=shape.controller_ref(), spec=spec))
    launcher = specs.get("Launcher")
    if launcher is not None:
        objects.extend(_launcher_job_and_pod(shape, launcher, ssh_path, slots,
                                             str(implementation)))
    return objects


def _launcher_job_and_pod(shape: JobShape, launcher: Mapping[str, Any], ssh_path: str,
                          slots: object, implementation: str) -> list[dict[str, Any]]:
    name = f"{shape.name}-launcher"
    meta, spec = template_of(launcher)
    spec["hostname"] = name
    spec["subdomain"] = f"{shape.name}-worker"
    if spec.get("hostNetwork"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    main = spec["containers"][0]
    add_env(main, ("K_MPI_JOB_ROLE", "launcher"))
    if implementation == "OpenMPI":
        add_env(main, ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                ("OMPI_MCA_orte_default_hostfile", f"{CONFIG_MOUNT}/hostfile"),
                ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                ("OMPI_MCA_orte_set_default_slots", str(slots)))
    elif implementation == "Intel":
        add_env(main, ("I_MPI_HYDRA_HOST_FILE", f"{CONFIG_MOUNT}/hostfile"),
                ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-o ConnectionAttempts=10"),
                ("I_MPI_PERHOST", str(slots)))
    main["env"] = [*main["env"], {"name": "NVIDIA_VISIBLE_DEVICES"},
                   {"name": "NVIDIA_DRIVER_CAPABILITIES"}]
    _setup_ssh(spec, shape, ssh_path)
    spec["restartPolicy"] = restart_policy(launcher, V2_LAUNCHER_RESTART_POLICY)
    _volume(spec, _config_volume(shape.name, [("hostfile", HOSTFILE_MODE),
                                              ("discover_hosts.sh", SCRIPT_MODE)]))
    _mount(main, CONFIG_VOLUME, CONFIG_MOUNT)

    job_uid = made_up_uid(shape.namespace, "Job", name)
    labels = {**dict(meta.get("labels") or {}), **_v2_labels(shape.name, "launcher")}
    # what the API server's Job defaulting adds (pkg/apis/batch/v1 + job strategy, 1.27+)
    selector = {"batch.kubernetes.io/controller-uid": job_uid}
    labels.update({"batch.kubernetes.io/controller-uid": job_uid,
                   "batch.kubernetes.io/job-name": name,
                   "controller-uid": job_uid, "job-name": name})
    template_meta: dict[str, Any] = {"labels": labels}
    if meta.get("annotations"):
        template_meta["annotations"] = dict(meta["annotations"])
    job_spec: dict[str, Any] = {}
    run_policy = shape.spec.get("runPolicy") if isinstance(shape.spec.get("runPolicy"),
                                                           Mapping) else {}
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if run_policy.get(key) is not None:
            job_spec[key] = run_policy[key]
    job_spec.setdefault("backoffLimit", 6)
    job_spec.update({"completions": 1, "parallelism": 1, "completionMode": "NonIndexed",
                     "suspend": False, "selector": {"matchLabels": selector},
                     "template": {"metadata": template_meta, "spec": spec}})
    batch_job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": shape.namespace, "uid": job_uid,
                     "labels": {"app": shape.name},
                     "ownerReferences": [shape.controller_ref()]},
        "spec": job_spec,
    }
    # the Job controller's GetPodFromTemplate: generateName "<job>-", the template's
    # labels and annotations, the job-tracking finalizer, owned by the Job
    pod_meta: dict[str, Any] = {"generateName": f"{name}-", "namespace": shape.namespace,
                                "labels": dict(labels)}
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    pod_meta["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    pod_meta["ownerReferences"] = [controller_ref("batch/v1", "Job", name, job_uid)]

    pod = apiserver_defaults({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
                              "spec": copy.deepcopy(spec)})
    return [batch_job, pod]


def expand(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects of an MPIJob: workers, then the launcher (v2beta1: its Job, then its pod)."""
    shape = JobShape(job)
    specs = shape.replica_specs("mpiReplicaSpecs", TYPES)
    for rtype in specs:
        if rtype not in TYPES:
            raise shape.error(f"unknown replica type {rtype!r} (Launcher, Worker)")
    if "Launcher" in specs and replicas(shape, "Launcher", specs["Launcher"], 1) != 1:
        raise shape.error("replica type Launcher: exactly 1 replica")
    if shape.api_version == "kubeflow.org/v2beta1":
        return _expand_v2(shape, specs)
    return _expand_v1(shape, specs)
