"""The gputopo device plugin: a DaemonSet on activated GPU nodes, its account and its RBAC.

Why these objects: ``gputopo device-plugin`` registers the GPU resource with each node's
kubelet through a UNIX socket in ``/var/lib/kubelet/device-plugins`` (a hostPath: the only
way in), reads the kubelet's PodResources API (``/var/lib/kubelet/pod-resources``, read
only) to check which pod really holds which GPU, and reads NVML (the NVIDIA container
runtime exposes the driver library with ``NVIDIA_VISIBLE_DEVICES=all`` and the ``utility``
capability). It must find which pod an
allocation is for and write back what the kubelet gave, so it may read pods, patch them
(annotations) and create events — nothing else (docs/rbac.md).

The hostPath makes the pod fail Pod Security ``baseline``; it belongs in a namespace that
admits node agents (``kube-system`` on most clusters, where NVIDIA's plugin runs too), not
in ``gputopo-system`` which is ``restricted``. It writes a root-owned directory, so it runs
as UID 0, but with no capability, no privilege escalation and a read-only root.
"""

from __future__ import annotations

from typing import Any

from generator import k8s
from gputopo.names import (
    DEVICE_PLUGIN_NAME,
    NODE_ACTIVATION_LABEL,
    NODE_ACTIVATION_VALUE,
    SOURCE_GPU_RESOURCE,
)

COMPONENT = DEVICE_PLUGIN_NAME
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"


def rules() -> list[dict[str, Any]]:
    """Exactly what the plugin calls: LIST pods (field selector spec.nodeName: its node),
    PATCH a pod's annotations, CREATE an Event on it."""
    return [
        k8s.rule([""], ["pods"], ["list", "patch"]),
        k8s.rule([""], ["events"], ["create"]),
    ]


def device_plugin_objects(*, image: str, resource: str, namespace: str,
                          runtime_class: str | None = None) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole, ClusterRoleBinding and the DaemonSet, in apply order."""
    return [
        k8s.service_account(DEVICE_PLUGIN_NAME, namespace, COMPONENT),
        k8s.role("ClusterRole", DEVICE_PLUGIN_NAME, rules(), component=COMPONENT),
        k8s.binding("ClusterRoleBinding", DEVICE_PLUGIN_NAME, role_kind="ClusterRole",
                    role=DEVICE_PLUGIN_NAME, account=DEVICE_PLUGIN_NAME,
                    account_namespace=namespace, component=COMPONENT),
        daemon_set(image=image, resource=resource, namespace=namespace,
                   runtime_class=runtime_class),
    ]


def daemon_set(*, image: str, resource: str, namespace: str,
               runtime_class: str | None = None) -> dict[str, Any]:
    plugin = {
        "name": "device-plugin",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["device-plugin", "--resource", resource, "--metrics-port", "9402"],
        "env": k8s.node_agent_env(),
        "ports": [{"name": "metrics", "containerPort": 9402, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "20m", "memory": "96Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,  # the kubelet's socket directory is root's
            "runAsNonRoot": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "device-plugins", "mountPath": DEVICE_PLUGIN_DIR},
            # the kubelet's own record of which pod holds which device (read only)
            {"name": "pod-resources", "mountPath": POD_RESOURCES_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": DEVICE_PLUGIN_NAME,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        # evicted last: without it no GPU pod on the node can start
        "priorityClassName": "system-node-critical",
        "nodeSelector": {NODE_ACTIVATION_LABEL: NODE_ACTIVATION_VALUE},
        # GPU nodes are often tainted so that only GPU pods land there
        "tolerations": [
            *({"key": key, "operator": "Exists", "effect": "NoSchedule"}
              for key in dict.fromkeys((SOURCE_GPU_RESOURCE, resource))),
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
        ],
        "containers": [plugin],
        "volumes": [
            {"name": "device-plugins",
             "hostPath": {"path": DEVICE_PLUGIN_DIR, "type": "Directory"}},
            {"name": "pod-resources",
             "hostPath": {"path": POD_RESOURCES_DIR, "type": "Directory"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
        ],
    }
    # one node at a time: a node without its plugin admits no GPU pod
    return k8s.daemon_set(DEVICE_PLUGIN_NAME, COMPONENT, namespace=namespace, pod_spec=pod_spec,
                          max_unavailable=1, runtime_class=runtime_class)
