"""The admission webhook as Kubernetes objects: account, RBAC, Deployment, PDB, Service and
the MutatingWebhookConfiguration.

Why these settings (docs/install.md explains them to operators):

- opt-in only: the namespaceSelector needs ``gputopo.io/inject=enabled`` and excludes
  ``kube-system`` and gputopo's own namespace by ``kubernetes.io/metadata.name`` (set by the
  API server on every namespace, so nobody can label their way around it);
- Pod CREATE only, ``sideEffects: NoneOnDryRun`` (the truth: a real admission writes a
  reservation ConfigMap, a review with ``request.dryRun: true`` writes nothing; the API
  server sends dry runs to ``None`` and ``NoneOnDryRun`` webhooks alike),
  ``timeoutSeconds: 5``, ``reinvocationPolicy:
  IfNeeded`` (another webhook may still add a GPU container after us), ``matchPolicy:
  Equivalent``, AdmissionReview ``v1`` only;
- ``failurePolicy`` is a choice: ``Ignore`` by default (if every replica is down, pods are
  created unmutated and the default scheduler runs them, instead of blocking job
  creation), ``Fail`` once the webhook has proven itself;
- the webhook reads the cluster through its own ServiceAccount with read-only access to
  nodes, pods, namespaces and Kubeflow jobs, reads the ACK node reports in ``kube-system``
  only, and writes only reservation ConfigMaps in its own namespace.
"""

from __future__ import annotations

from typing import Any

from generator import k8s
from gputopo.names import (
    ACK_REPORT_NAMESPACE,
    GPUTOPO_NAMESPACE,
    INJECT_LABEL,
    INJECT_VALUE,
    JOBSET_GROUP,
    KUBEFLOW_GROUP,
    POD_GROUP_API_GROUP,
    POD_GROUP_PLURAL,
    POLICIES_CONFIGMAP,
    QUEUE_LEASE,
    TRAINER_GROUP,
    WEBHOOK_NAME,
    WEBHOOK_SERVICE,
    WEBHOOK_TLS_SECRET,
)

COMPONENT = WEBHOOK_NAME
PORT = 8443
SERVICE_PORT = 443
MUTATE_PATH = "/mutate"
CERT_DIR = "/etc/gputopo/certs"
POLICIES_DIR = "/etc/gputopo/policies"
FAILURE_POLICIES = ("Ignore", "Fail")
DEFAULT_FAILURE_POLICY = "Ignore"
TIMEOUT_SECONDS = 5
#: The one webhook of the configuration; a fully qualified name, as the API requires.
WEBHOOK_ENTRY = "pods.gputopo.io"


def rbac(*, ack_reports: bool = True) -> list[dict[str, Any]]:
    """ServiceAccount and the least privilege the webhook needs, rule for rule docs/rbac.md.

    ``ack_reports=False`` leaves out the kube-system Role: RBAC cannot narrow list/watch to
    the report ConfigMaps, so operators who publish topology by node annotation only may
    prefer the webhook to see nothing in kube-system.
    """
    ns = GPUTOPO_NAMESPACE
    cluster_rules = [
        # the live cluster view lists and watches; a cache miss GETs a namespace or job
        k8s.rule([""], ["nodes"], ["list", "watch"]),
        # pods: the view's list+watch; the placement queue reads a gated pod and patches in
        # its slot, then lifts its gate (docs/queue.md)
        k8s.rule([""], ["pods"], ["get", "list", "watch", "patch"]),
        k8s.rule([""], ["namespaces"], ["get", "list", "watch"]),
        k8s.rule([KUBEFLOW_GROUP], ["mpijobs", "pytorchjobs", "tfjobs"], ["get", "list", "watch"]),
        # Kubeflow Trainer v2 and JobSet gangs: the size from the JobSet, the gang's end
        k8s.rule([TRAINER_GROUP], ["trainjobs"], ["get", "list", "watch"]),
        k8s.rule([JOBSET_GROUP], ["jobsets"], ["get", "list", "watch"]),
        # the owner of an MPIJob v2beta1 launcher or a JobSet's pod, on demand
        k8s.rule(["batch"], ["jobs"], ["get"]),
        # the volumes of a pod that mounts claims (node_volumes.py): read on demand, never
        # watched; a bound claim's volume, an unbound claim's storage class
        k8s.rule([""], ["persistentvolumeclaims", "persistentvolumes"], ["get"]),
        k8s.rule(["storage.k8s.io"], ["storageclasses"], ["get"]),
        # the PodGroup a gang label names must exist: watched, created when missing
        k8s.rule([POD_GROUP_API_GROUP], [POD_GROUP_PLURAL], ["list", "watch", "create"]),
        # placement.computeDomain: create: a gang's ComputeDomain (NVIDIA DRA driver), made
        # once per gang; deleted with the job by its ownerReference, never by gputopo
        k8s.rule(["resource.nvidia.com"], ["computedomains"], ["create"]),
        # Dynamic Resource Allocation (gputopo/cluster/dra.py): each node's GPU devices and
        # the claims that hold them are watched; a DRA pod's claim templates are watched
        # (its GPU count); the claims that pin a replica's GPUs are created, read back on a
        # name clash (never deleted: they go with the job)
        k8s.rule(["resource.k8s.io"], ["resourceslices"], ["list", "watch"]),
        k8s.rule(["resource.k8s.io"], ["resourceclaimtemplates"], ["get", "list", "watch"]),
        k8s.rule(["resource.k8s.io"], ["resourceclaims"],
                 ["get", "list", "watch", "create"]),
        # Kubernetes Events of each placement outcome on the pods and jobs (webhook/events.py):
        # created only, one per object and reason per minute at most, never patched
        k8s.rule([""], ["events"], ["create"]),
    ]
    reports_rules = [k8s.rule([""], ["configmaps"], ["list", "watch"])]
    # reservations: full PUTs with resourceVersion (optimistic concurrency); the GPU
    # ledgers and the gang records are also watched (from memory, not LISTs per new gang)
    reservation_rules = [
        k8s.rule([""], ["configmaps"], ["get", "list", "watch", "create", "update",
                                         "delete"]),
        # the placement queue's leader election: its one Lease (create cannot be limited
        # to a name: RBAC checks resourceNames only for requests that name the object)
        k8s.rule(["coordination.k8s.io"], ["leases"], ["create"]),
        k8s.rule(["coordination.k8s.io"], ["leases"], ["get", "update"], [QUEUE_LEASE]),
    ]
    common = {"account": WEBHOOK_NAME, "account_namespace": ns, "component": COMPONENT}
    objs = [
        k8s.service_account(WEBHOOK_NAME, ns, COMPONENT),
        k8s.role("ClusterRole", WEBHOOK_NAME, cluster_rules, component=COMPONENT),
        k8s.binding("ClusterRoleBinding", WEBHOOK_NAME, role_kind="ClusterRole",
                    role=WEBHOOK_NAME, **common),
        k8s.role("Role", f"{WEBHOOK_NAME}-reservations", reservation_rules,
                 component=COMPONENT, namespace=ns),
        k8s.binding("RoleBinding", f"{WEBHOOK_NAME}-reservations", role_kind="Role",
                    role=f"{WEBHOOK_NAME}-reservations", namespace=ns, **common),
    ]
    if ack_reports:
        objs += [
            k8s.role("Role", f"{WEBHOOK_NAME}-node-reports", reports_rules,
                     component=COMPONENT, namespace=ACK_REPORT_NAMESPACE),
            k8s.binding("RoleBinding", f"{WEBHOOK_NAME}-node-reports", role_kind="Role",
                        role=f"{WEBHOOK_NAME}-node-reports", namespace=ACK_REPORT_NAMESPACE,
                        **common),
        ]
    return objs


def deployment(*, image: str, replicas: int) -> dict[str, Any]:
    """The webhook server: HTTPS on 8443, policies and certificates hot-reloaded from mounts."""
    probe = {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}}
    container = {
        "name": "webhook",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["serve", "--policies", POLICIES_DIR, "--cert-dir", CERT_DIR,
                 "--port", str(PORT)],
        "env": [
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "ports": [{"name": "https", "containerPort": PORT, "protocol": "TCP"}],
        "livenessProbe": {**probe, "initialDelaySeconds": 5, "periodSeconds": 10,
                          "failureThreshold": 3},
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "https", "scheme": "HTTPS"},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        # uvicorn stops accepting the moment SIGTERM arrives; the pause lets endpoints and
        # the API server's connection pool drop this pod first (native sleep: k8s >= 1.30).
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        },
        "securityContext": k8s.container_security_context(),
        "volumeMounts": [
            {"name": "certs", "mountPath": CERT_DIR, "readOnly": True},
            {"name": "policies", "mountPath": POLICIES_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": k8s.metadata(WEBHOOK_NAME, COMPONENT, namespace=GPUTOPO_NAMESPACE),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": k8s.selector(COMPONENT)},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": k8s.labels(COMPONENT)},
                "spec": {
                    "serviceAccountName": WEBHOOK_NAME,
                    "securityContext": k8s.pod_security_context(),
                    "affinity": k8s.preferred_anti_affinity(COMPONENT),
                    "containers": [container],
                    "volumes": [
                        {"name": "certs", "secret": {"secretName": WEBHOOK_TLS_SECRET}},
                        {"name": "policies", "configMap": {"name": POLICIES_CONFIGMAP}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                    ],
                },
            },
        },
    }


def disruption_budget() -> dict[str, Any]:
    """Keep one replica through node drains: admission must not stall during upgrades."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": k8s.metadata(WEBHOOK_NAME, COMPONENT, namespace=GPUTOPO_NAMESPACE),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": k8s.selector(COMPONENT)}},
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": k8s.metadata(WEBHOOK_SERVICE, COMPONENT, namespace=GPUTOPO_NAMESPACE),
        "spec": {
            "selector": k8s.selector(COMPONENT),
            "ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": "https",
                       "protocol": "TCP"}],
        },
    }


def namespace_selector() -> dict[str, Any]:
    """Opted-in namespaces only, and never kube-system or gputopo's own namespace."""
    return {
        "matchExpressions": [
            {"key": INJECT_LABEL, "operator": "In", "values": [INJECT_VALUE]},
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": [GPUTOPO_NAMESPACE, "kube-system"],
            },
        ]
    }


def mutating_webhook_configuration(
    *, failure_policy: str, ca_bundle: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration; the CA comes inline or from cert-manager."""
    client_config: dict[str, Any] = {
        "service": {"name": WEBHOOK_SERVICE, "namespace": GPUTOPO_NAMESPACE,
                    "path": MUTATE_PATH, "port": SERVICE_PORT},
    }
    if ca_bundle is not None:
        client_config["caBundle"] = ca_bundle
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": k8s.metadata(WEBHOOK_NAME, COMPONENT, annotations=annotations),
        "webhooks": [
            {
                "name": WEBHOOK_ENTRY,
                "admissionReviewVersions": ["v1"],
                "clientConfig": client_config,
                "rules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                     "resources": ["pods"], "scope": "Namespaced"}
                ],
                "namespaceSelector": namespace_selector(),
                "failurePolicy": failure_policy,
                "matchPolicy": "Equivalent",
                "reinvocationPolicy": "IfNeeded",
                "sideEffects": "NoneOnDryRun",
                "timeoutSeconds": TIMEOUT_SECONDS,
            }
        ],
    }
