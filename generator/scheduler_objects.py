"""The ``gpu-topology-scheduler`` as a second scheduler: account, RBAC, ConfigMap, Deployment.

Why a second scheduler and not a change to the cluster's own: managed control planes (ACK,
EKS, GKE) do not let operators replace kube-scheduler, and a second scheduler only sees
pods whose ``schedulerName`` names it — the pods the webhook mutated.

Image: scheduler-plugins' kube-scheduler build, pinned to a release listed in upstream's
compatibility matrix (kubernetes-sigs/scheduler-plugins README.md): ``v0.34.7``, compiled
with Kubernetes v1.34.7. Use the scheduler-plugins minor that matches the cluster's
Kubernetes minor (``--scheduler-image``).

RBAC follows Kubernetes' "Configure Multiple Schedulers" task: bind the API server's own
``system:kube-scheduler`` and ``system:volume-scheduler`` ClusterRoles (kept in step with
the cluster's version by the API server, DRA included), plus the extension-apiserver
authentication reader in kube-system; add only what those lack: PodGroups for
Coscheduling, and leader election on this scheduler's own Lease.
"""

from __future__ import annotations

from typing import Any

from generator import k8s
from generator.literal import Literal
from gputopo import yamlio
from gputopo.names import GPUTOPO_NAMESPACE, SCHEDULER_CONFIGMAP, SCHEDULER_NAME

COMPONENT = SCHEDULER_NAME
SCHEDULER_IMAGE = "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.34.7"
CONFIG_DIR = "/etc/kubernetes/gputopo"
CONFIG_FILE = "scheduler-config.yaml"
SECURE_PORT = 10259
PODGROUP_GROUP = "scheduling.x-k8s.io"


def rbac() -> list[dict[str, Any]]:
    ns = GPUTOPO_NAMESPACE
    common = {"account": SCHEDULER_NAME, "account_namespace": ns, "component": COMPONENT}
    podgroup_rules = [
        k8s.rule([PODGROUP_GROUP], ["podgroups"], ["get", "list", "watch", "update", "patch"]),
        k8s.rule([PODGROUP_GROUP], ["podgroups/status"], ["get", "update", "patch"]),
    ]
    lease_rules = [
        k8s.rule(["coordination.k8s.io"], ["leases"], ["create"]),
        k8s.rule(["coordination.k8s.io"], ["leases"], ["get", "update"], names=[SCHEDULER_NAME]),
    ]
    return [
        k8s.service_account(SCHEDULER_NAME, ns, COMPONENT),
        k8s.binding("ClusterRoleBinding", f"{SCHEDULER_NAME}-as-kube-scheduler",
                    role_kind="ClusterRole", role="system:kube-scheduler", **common),
        k8s.binding("ClusterRoleBinding", f"{SCHEDULER_NAME}-as-volume-scheduler",
                    role_kind="ClusterRole", role="system:volume-scheduler", **common),
        k8s.role("ClusterRole", f"{SCHEDULER_NAME}-podgroups", podgroup_rules,
                 component=COMPONENT),
        k8s.binding("ClusterRoleBinding", f"{SCHEDULER_NAME}-podgroups", role_kind="ClusterRole",
                    role=f"{SCHEDULER_NAME}-podgroups", **common),
        k8s.role("Role", f"{SCHEDULER_NAME}-leader-election", lease_rules, component=COMPONENT,
                 namespace=ns),
        k8s.binding("RoleBinding", f"{SCHEDULER_NAME}-leader-election", role_kind="Role",
                    role=f"{SCHEDULER_NAME}-leader-election", namespace=ns, **common),
        k8s.binding("RoleBinding", f"{SCHEDULER_NAME}-authentication-reader",
                    role_kind="Role", role="extension-apiserver-authentication-reader",
                    namespace="kube-system", **common),
    ]


def config_map(scheduler_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": k8s.metadata(SCHEDULER_CONFIGMAP, COMPONENT, namespace=GPUTOPO_NAMESPACE),
        "data": {CONFIG_FILE: Literal(yamlio.dump(scheduler_config))},
    }


def deployment(*, image: str, replicas: int) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/healthz", "port": SECURE_PORT, "scheme": "HTTPS"}}
    container = {
        "name": "kube-scheduler",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/kube-scheduler"],
        "args": [f"--config={CONFIG_DIR}/{CONFIG_FILE}", "--v=2"],
        "ports": [{"name": "https", "containerPort": SECURE_PORT, "protocol": "TCP"}],
        "livenessProbe": {**probe, "initialDelaySeconds": 15},
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": SECURE_PORT, "scheme": "HTTPS"},
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "2", "memory": "1Gi"},
        },
        "securityContext": k8s.container_security_context(),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": k8s.metadata(SCHEDULER_NAME, COMPONENT, namespace=GPUTOPO_NAMESPACE),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": k8s.selector(COMPONENT)},
            "template": {
                "metadata": {"labels": k8s.labels(COMPONENT)},
                "spec": {
                    "serviceAccountName": SCHEDULER_NAME,
                    "securityContext": k8s.pod_security_context(),
                    "affinity": k8s.preferred_anti_affinity(COMPONENT),
                    "containers": [container],
                    "volumes": [{"name": "config",
                                 "configMap": {"name": SCHEDULER_CONFIGMAP}}],
                },
            },
        },
    }
