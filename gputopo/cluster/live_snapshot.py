"""A one-shot ClusterSnapshot of a live cluster, for commands that look once (``gputopo
nodes --live``) rather than watch (the webhook's :mod:`gputopo.cluster.view`).

Why a snapshot and not the view: a table printed once needs one consistent list of Nodes,
Pods and the ConfigMaps gputopo reads (ACK node reports in ``kube-system``, reservations in
``gputopo-system``), not eight watches; the snapshot then answers exactly like a cluster file
would, through the same code. Kubernetes I/O stays here, at the edge.
"""

from __future__ import annotations

import json
from typing import Any

from gputopo import names
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.errors import InputError
from gputopo.kubeaccess import NoClusterAccess, cluster_configuration

#: (CoreV1Api method, its arguments, kind) listed; list items carry no apiVersion nor kind
_LISTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("list_node", (), "Node"),
    ("list_pod_for_all_namespaces", (), "Pod"),
    ("list_namespace", (), "Namespace"),
    ("list_namespaced_config_map", (names.ACK_REPORT_NAMESPACE,), "ConfigMap"),
    ("list_namespaced_config_map", (names.GPUTOPO_NAMESPACE,), "ConfigMap"),
)


def _api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client

    try:
        cfg = cluster_configuration(kubeconfig)
    except NoClusterAccess as exc:
        first = str(exc).splitlines()[0]
        raise InputError(f"no in-cluster account and no usable kubeconfig "
                         f"({kubeconfig or '$KUBECONFIG or ~/.kube/config'}): {first}",
                         obj="--live") from None
    cfg.retries = False
    return client.ApiClient(cfg)


def live_snapshot(kubeconfig: str | None = None, *, timeout_s: float = 10.0
                  ) -> ClusterSnapshot:
    """List what ``nodes`` reads from the API server this process can reach."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    api = _api_client(kubeconfig)
    core = client.CoreV1Api(api)
    objects: list[dict[str, Any]] = []
    try:
        for method, method_args, kind in _LISTS:
            try:
                resp = getattr(core, method)(*method_args, _preload_content=False,
                                             _request_timeout=timeout_s)
            except ApiException as exc:
                if exc.status in (403, 404) and kind == "ConfigMap":
                    continue  # no access to (or no) gputopo's / ACK's namespace: nothing
                raise InputError(f"{method}: {exc.status} {exc.reason}",
                                 obj="--live") from None
            for item in json.loads(resp.data).get("items") or []:
                objects.append({"apiVersion": "v1", "kind": kind, **item})
    except (HTTPError, OSError) as exc:
        raise InputError(f"cannot reach the API server: {exc}", obj="--live") from None
    finally:
        api.close()
    return ClusterSnapshot.from_objects(objects, source="<live cluster>")
