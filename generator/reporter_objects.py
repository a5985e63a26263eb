"""The node topology reporter: a DaemonSet on activated GPU nodes, with its own account.

Why: the webhook places gangs by how each node's GPUs are wired; the reporter reads that
from NVML on the node (``gputopo topology report --nvml``) and writes the
``gputopo.io/topology`` annotation on its own Node, with the network transport NCCL will
find there, read from the pod's sysfs (RDMA devices, GPUDirect peer-memory module:
docs/topology.md, "Network transport"). It runs only where the activation
label ``ack.node.gpu.schedule=topology`` is set, needs nothing but patch on nodes, and
requests no GPU: the NVIDIA container runtime exposes the driver library to it through
``NVIDIA_VISIBLE_DEVICES=all`` with the ``utility`` capability only.

``topology report`` reports once and exits, and a node's GPU wiring only changes with the
hardware (a reboot, which restarts the pod). So the report runs as the pod's init
container, and the pause container keeps the pod (and the DaemonSet's view of it) alive;
``kubectl rollout restart daemonset/gputopo-topology-reporter`` re-reports every node.
"""

from __future__ import annotations

from typing import Any

from generator import k8s
from gputopo.names import (
    GPUTOPO_NAMESPACE,
    NODE_ACTIVATION_LABEL,
    NODE_ACTIVATION_VALUE,
    REPORTER_NAME,
    SOURCE_GPU_RESOURCE,
)

COMPONENT = REPORTER_NAME
#: Holds the pod after the report: the Kubernetes pause image (kubeadm's default sandbox
#: image since Kubernetes 1.31), 700 KiB, runs as non-root 65535.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def rbac() -> list[dict[str, Any]]:
    ns = GPUTOPO_NAMESPACE
    return [
        k8s.service_account(REPORTER_NAME, ns, COMPONENT),
        k8s.role("ClusterRole", REPORTER_NAME,
                 # strategic-merge patch of its Node's annotation; it never reads
                 [k8s.rule([""], ["nodes"], ["patch"])], component=COMPONENT),
        k8s.binding("ClusterRoleBinding", REPORTER_NAME, role_kind="ClusterRole",
                    role=REPORTER_NAME, account=REPORTER_NAME, account_namespace=ns,
                    component=COMPONENT),
    ]


def daemon_set(*, image: str, runtime_class: str | None = None) -> dict[str, Any]:
    report = {
        "name": "report",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["topology", "report", "--nvml"],
        "env": k8s.node_agent_env(),
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "256Mi"},
        },
        "securityContext": k8s.container_security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": REPORTER_NAME,
        "securityContext": k8s.pod_security_context(),
        "nodeSelector": {NODE_ACTIVATION_LABEL: NODE_ACTIVATION_VALUE},
        # GPU nodes are often tainted so that only GPU pods land there.
        "tolerations": [{"key": SOURCE_GPU_RESOURCE, "operator": "Exists",
                         "effect": "NoSchedule"}],
        "initContainers": [report],
        "containers": [{
            "name": "pause",
            "image": PAUSE_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "resources": {
                "requests": {"cpu": "1m", "memory": "8Mi"},
                "limits": {"cpu": "10m", "memory": "16Mi"},
            },
            "securityContext": k8s.container_security_context(),
        }],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}],
    }
    return k8s.daemon_set(REPORTER_NAME, COMPONENT, namespace=GPUTOPO_NAMESPACE, pod_spec=pod_spec,
                          max_unavailable="10%", runtime_class=runtime_class)
