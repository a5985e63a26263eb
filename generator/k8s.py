"""Small builders shared by the manifest modules: metadata, labels, hardened containers.

Why: every object gputopo deploys carries the same ``app.kubernetes.io`` labels and every
container the same restricted security context; spelling them once keeps the manifests
consistent and keeps the Pod Security ``restricted`` level of gputopo's namespace true.
"""

from __future__ import annotations

from typing import Any

PART_OF = "gputopo"
VERSION = "0.1.0"
#: Non-root UID/GID used by the gputopo image (Dockerfile) and set on every pod.
NONROOT_ID = 65532


def labels(component: str) -> dict[str, str]:
    """The recommended labels; ``component`` also selects the pods of a workload."""
    return {
        "app.kubernetes.io/name": component,
        "app.kubernetes.io/part-of": PART_OF,
    }


def selector(component: str) -> dict[str, str]:
    """The immutable selector of a workload (a subset of :func:`labels`)."""
    return {"app.kubernetes.io/name": component}


def metadata(
    name: str,
    component: str,
    *,
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``metadata`` with name, optional namespace, labels and annotations, in that order."""
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels(component)
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return meta


def pod_security_context() -> dict[str, Any]:
    """Non-root with the runtime's default seccomp profile (Pod Security ``restricted``)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": NONROOT_ID,
        "runAsGroup": NONROOT_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """No privilege escalation, no capabilities, nothing written outside volumes."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def preferred_anti_affinity(component: str) -> dict[str, Any]:
    """Spread replicas over nodes when possible, without blocking single-node clusters."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": selector(component)},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def rule(api_groups: list[str], resources: list[str], verbs: list[str],
         names: list[str] | None = None) -> dict[str, Any]:
    """One RBAC PolicyRule."""
    out: dict[str, Any] = {"apiGroups": api_groups, "resources": resources}
    if names:
        out["resourceNames"] = names
    out["verbs"] = verbs
    return out


def binding(kind: str, name: str, *, role_kind: str, role: str, account: str,
            account_namespace: str, component: str,
            namespace: str | None = None) -> dict[str, Any]:
    """A RoleBinding or ClusterRoleBinding of one ServiceAccount."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(name, component, namespace=namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
    }


def role(kind: str, name: str, rules: list[dict[str, Any]], *, component: str,
         namespace: str | None = None) -> dict[str, Any]:
    """A Role or ClusterRole."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(name, component, namespace=namespace),
        "rules": rules,
    }


def service_account(name: str, namespace: str, component: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, component, namespace=namespace),
    }


def node_agent_env() -> list[dict[str, Any]]:
    """The env of a container that reads this node's GPUs through NVML: its node's name
    (downward API), every GPU visible with the driver's utility libraries only (no compute
    context), and Python writing no bytecode and no buffered logs."""
    return [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]


def daemon_set(name: str, component: str, *, namespace: str, pod_spec: dict[str, Any],
               max_unavailable: int | str, runtime_class: str | None = None
               ) -> dict[str, Any]:
    """A node agent's DaemonSet: rolling updates at ``max_unavailable`` nodes at a time;
    ``runtime_class`` (e.g. ``nvidia``) where the node's default runtime has no GPUs."""
    if runtime_class:
        pod_spec = {"runtimeClassName": runtime_class, **pod_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(name, component, namespace=namespace),
        "spec": {
            "selector": {"matchLabels": selector(component)},
            "updateStrategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"maxUnavailable": max_unavailable}},
            "template": {
                "metadata": {"labels": labels(component)},
                "spec": pod_spec,
            },
        },
    }
