"""The GETs the cluster view makes for what its watches do not hold.

Why apart from the view: which API call reads which kind (core, batch, storage, the
training-job CRDs at each served version) is a table of its own; the view decides when to
call (its cache, the admission's deadline, backing off a failing API) and these say how.
Both return the raw response (``_preload_content=False``) or raise the client's errors.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gputopo import names
from gputopo.cluster import objects as ob
from gputopo.cluster.dra import RESOURCE_API
from gputopo.cluster.informer import TRANSPORT_ERRORS
from gputopo.cluster.reservations import GangKey


def get_object(api_client: client.ApiClient, api_version: str, kind: str,
               namespace: str | None, name: str, timeout: float) -> Any:
    """One GET of ``kind`` ``namespace/name`` (a raw response), or None for a kind the
    view never reads."""
    t = {"_preload_content": False, "_request_timeout": timeout}
    if (api_version, kind) == ("v1", "Namespace"):
        return client.CoreV1Api(api_client).read_namespace(name, **t)
    if (api_version, kind) == ("batch/v1", "Job") and namespace:
        return client.BatchV1Api(api_client).read_namespaced_job(name, namespace, **t)
    # a pod's volumes (gputopo.cluster.node_volumes): read only for pods that mount claims
    if (api_version, kind) == ("v1", "PersistentVolumeClaim") and namespace:
        return client.CoreV1Api(api_client).read_namespaced_persistent_volume_claim(
            name, namespace, **t)
    if (api_version, kind) == ("v1", "PersistentVolume"):
        return client.CoreV1Api(api_client).read_persistent_volume(name, **t)
    if (api_version, kind) == ("storage.k8s.io/v1", "StorageClass"):
        return client.StorageV1Api(api_client).read_storage_class(name, **t)
    group, _, version = api_version.partition("/")
    # a DRA pod's claim templates and claims (gputopo.cluster.dra), when not watched yet
    plural = {"ResourceClaimTemplate": "resourceclaimtemplates",
              "ResourceClaim": "resourceclaims"}.get(kind)
    if api_version == RESOURCE_API and plural and namespace:
        return client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            group, version, namespace, plural, name, **t)
    if names.GANG_OWNER_RESOURCES.get(kind, ("", ""))[0] == group and namespace:
        plural = names.GANG_OWNER_RESOURCES[kind][1]
        return client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            group, version, namespace, plural, name, **t)
    return None


def job_exists_by_get(api_client: client.ApiClient, key: GangKey, timeout: float
                      ) -> bool | None:
    """Whether the job with this uid exists, by GET; None when the API cannot say."""
    custom = client.CustomObjectsApi(api_client)
    versions = {"MPIJob": ("v1", "v2beta1"), "TrainJob": (names.TRAINER_VERSION,),
                "JobSet": (names.JOBSET_VERSION,)}.get(key.kind, ("v1",))
    group, plural = names.GANG_OWNER_RESOURCES.get(
        key.kind, (names.KUBEFLOW_GROUP, key.kind.lower() + "s"))
    for version in versions:
        try:
            resp = custom.get_namespaced_custom_object(
                group, version, key.namespace, plural,
                key.name, _preload_content=False, _request_timeout=timeout)
        except ApiException as exc:
            if exc.status == 404:
                continue
            return None
        except TRANSPORT_ERRORS:
            return None
        if str(ob.meta(json.loads(resp.data)).get("uid")) == key.uid:
            return True
    return False
