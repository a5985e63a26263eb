"""What every operator does the same way: identity, owner references, replica specs, and
the API server's defaulting of the pods it creates.

Why one module: the three operators share the kubeflow ``ReplicaSpec`` shape and the
controller-reference rules, and the webhook must see each pod exactly as the API server
hands it over (after defaulting), or a dry run shows a different admission from the real
one. Everything here is data in, data out: no cluster, no I/O.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import Any

from gputopo import names
from gputopo.errors import InputError

#: Namespace of the made-up uids (uuid5): stable across runs, so a dry run's output is.
_UID_NAMESPACE = uuid.UUID("6f1c1d5e-3a53-4f63-9a57-0b8f1e7f4a10")

#: The API server's default for ``spec.schedulerName`` (pkg/apis/core/v1/defaults.go).
DEFAULT_SCHEDULER = "default-scheduler"


def made_up_uid(namespace: str, kind: str, name: str) -> str:
    """A uid for an object that has none yet: uuid5 of ``namespace/kind/name``."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{namespace}/{kind}/{name}"))


class JobShape:
    """The identity of a training job object: what its pods' owner references name."""

    def __init__(self, job: Mapping[str, Any]) -> None:
        kind = job.get("kind")
        meta = job.get("metadata")
        if not isinstance(meta, Mapping):
            raise InputError("metadata must be an object", obj=f"{kind}")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise InputError("missing metadata.name", obj=f"{kind}")
        namespace = meta.get("namespace") or "default"
        if not isinstance(namespace, str):
            raise InputError("metadata.namespace must be a string", obj=f"{kind} {name}")
        self.api_version = str(job.get("apiVersion") or "")
        self.kind = str(kind)
        self.name = name
        self.namespace = namespace
        self.label = f"{self.kind} {namespace}/{name}"
        uid = meta.get("uid")
        self.uid = uid if isinstance(uid, str) and uid else made_up_uid(namespace, self.kind, name)
        spec = job.get("spec")
        self.spec: Mapping[str, Any] = spec if isinstance(spec, Mapping) else {}

    def error(self, reason: str) -> InputError:
        return InputError(reason, obj=self.label)

    def controller_ref(self) -> dict[str, Any]:
        """``metav1.NewControllerRef(job, gvk)``: controller and blockOwnerDeletion true."""
        return controller_ref(self.api_version, self.kind, self.name, self.uid)

    def replica_specs(self, field: str, known: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """``spec.<field>`` with its keys camel-cased as the operators' defaulting does
        (``master`` -> ``Master``), in the order of ``known`` then any other key."""
        raw = self.spec.get(field)
        if not isinstance(raw, Mapping) or not raw:
            raise self.error(f"spec.{field} must be a non-empty object")
        by_lower = {k.lower(): k for k in known}
        out: dict[str, dict[str, Any]] = {}
        for key, value in raw.items():
            if not isinstance(key, str) or not isinstance(value, Mapping):
                raise self.error(f"spec.{field}.{key} must be an object")
            canonical = by_lower.get(key.lower(), key)
            if canonical in out:
                raise self.error(f"spec.{field} names replica type {canonical} twice")
            out[canonical] = dict(value)
            template = value.get("template")
            tspec = template.get("spec") if isinstance(template, Mapping) else None
            containers = tspec.get("containers") if isinstance(tspec, Mapping) else None
            if not isinstance(containers, list) or not containers or not all(
                    isinstance(c, Mapping) for c in containers):
                raise self.error(f"spec.{field}.{key}.template.spec.containers must be a "
                                 f"non-empty list of containers")
        order = [k for k in known if k in out] + [k for k in out if k not in known]
        return {k: out[k] for k in order}


def controller_ref(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def replicas(shape: JobShape, rtype: str, rs: Mapping[str, Any], default: int) -> int:
    raw = rs.get("replicas", default)
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise shape.error(f"replica type {rtype}: replicas must be a non-negative integer, "
                          f"got {raw!r}")
    return raw


def counted_specs(shape: JobShape, field: str, known: tuple[str, ...], container: str
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """training-operator's replica specs (:meth:`JobShape.replica_specs`), each type's
    replica count, and the check its validating webhook makes of every type: the template
    holds the job kind's default ``container``."""
    specs = shape.replica_specs(field, known)
    counts = {rtype: replicas(shape, rtype, rs, 1) for rtype, rs in specs.items()}
    for rtype, rs in specs.items():
        if container_index(rs["template"]["spec"], container) is None:
            raise shape.error(f"replica type {rtype}: no container named {container!r}")
    return specs, counts


def replica_labels(operator: str, job_label: str, rtype: str, index: int, *, master: bool
                   ) -> dict[str, str]:
    """The labels training-operator puts on every replica's pod (``rtype`` lower-case);
    ``master``: the pod its job kind calls the master (``job-role: master``)."""
    labels = {names.OPERATOR_NAME_LABEL: operator, names.JOB_NAME_LABEL: job_label,
              names.REPLICA_TYPE_LABEL: rtype, names.REPLICA_INDEX_LABEL: str(index)}
    if master:
        labels[names.JOB_ROLE_LABEL] = "master"
    return labels


def restart_policy(rs: Mapping[str, Any], default: str) -> str:
    """The pod's restartPolicy from the replica spec (``ExitCode`` -> ``Never``)."""
    policy = rs.get("restartPolicy") or default
    return "Never" if policy == "ExitCode" else str(policy)


def template_of(rs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A deep copy of the replica's pod template: (metadata, spec)."""
    template = copy.deepcopy(dict(rs.get("template") or {}))
    meta = template.get("metadata") if isinstance(template.get("metadata"), Mapping) else {}
    return dict(meta), dict(template.get("spec") or {})


def container_index(spec: Mapping[str, Any], name: str) -> int | None:
    for i, container in enumerate(spec.get("containers") or []):
        if container.get("name") == name:
            return i
    return None


def default_port(spec: dict[str, Any], container: str, port_name: str, port: int) -> None:
    """training-operator's ``setDefaultPort``: the named port on the default container (or
    the first one), unless a port of that name is already declared there."""
    index = container_index(spec, container)
    target = spec["containers"][index if index is not None else 0]
    ports = target.get("ports")
    if not isinstance(ports, list):
        ports = []
    if not any(isinstance(p, Mapping) and p.get("name") == port_name for p in ports):
        ports = [*ports, {"name": port_name, "containerPort": port}]
    target["ports"] = ports


def named_port(spec: Mapping[str, Any], container: str, port_name: str) -> int | None:
    """``getPortFromPyTorchJob`` / ``GetPortFromTFJob``: the port of that name on the
    container of that name, None when there is none."""
    index = container_index(spec, container)
    if index is None:
        return None
    for port in spec["containers"][index].get("ports") or []:
        if isinstance(port, Mapping) and port.get("name") == port_name:
            value = port.get("containerPort")
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def add_env(container: dict[str, Any], *pairs: tuple[str, str]) -> None:
    env = container.get("env")
    env = list(env) if isinstance(env, list) else []
    env.extend({"name": k, "value": v} for k, v in pairs)
    container["env"] = env


def apiserver_defaults(pod: dict[str, Any]) -> dict[str, Any]:
    """The defaults the API server fills before a mutating webhook sees a Pod (the ones the
    webhook reads): restartPolicy, dnsPolicy, schedulerName, port protocol, a fieldRef's
    apiVersion, and requests copied from limits where a container sets only limits
    (``SetDefaults_Pod``)."""
    spec = pod["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", DEFAULT_SCHEDULER)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            for port in container.get("ports") or []:
                if isinstance(port, dict):
                    port.setdefault("protocol", "TCP")
            for item in container.get("env") or []:  # SetDefaults_ObjectFieldSelector
                ref = (item.get("valueFrom") or {}).get("fieldRef") if isinstance(
                    item, dict) else None
                if isinstance(ref, dict):
                    ref.setdefault("apiVersion", "v1")
            resources = container.get("resources")
            if isinstance(resources, dict) and isinstance(resources.get("limits"), Mapping):
                requests = resources.get("requests")
                requests = dict(requests) if isinstance(requests, Mapping) else {}
                for name, value in resources["limits"].items():
                    requests.setdefault(name, value)
                resources["requests"] = requests
    return pod


def new_pod(*, name: str, namespace: str, meta: Mapping[str, Any], labels: Mapping[str, str],
            owner: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A Pod object from a template's metadata (labels and annotations kept, the
    operator's labels win) and spec, owned by ``owner``."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    merged = dict(meta.get("labels") or {})
    merged.update(labels)
    metadata["labels"] = merged
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    metadata["ownerReferences"] = [owner]
    return apiserver_defaults({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                               "spec": spec})
