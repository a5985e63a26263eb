"""Where the ResourceClaims that pin replicas' GPUs go: the API, or a list for the dry run.

Why one small interface (:class:`ClaimWriter`): the placement step and the placement queue
decide the claims the same way whether they run in the server (which creates them through
the official ``kubernetes`` client) or in ``gputopo mutate`` (which prints them after the
pods, so that a dry run can be applied or checked as it stands). Neither knows which.

Creating is idempotent per name: a claim of that name already there with the same spec
(the same slot: a pod re-created for it, another webhook replica) is success; one with
another spec (the slot moved) is reported, never deleted: gputopo deletes nothing but its
own reservations (docs/rbac.md), and the claim goes with its job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from gputopo.cluster.dra import RESOURCE_API

log = logging.getLogger(__name__)
GROUP, VERSION = RESOURCE_API.split("/")
PLURAL = "resourceclaims"
TIMEOUT_SECONDS = 2.0


class ClaimWriter(Protocol):
    """Makes sure each claim exists as given; returns one problem sentence per claim it
    could not make (empty: all there)."""

    def ensure(self, claims: list[dict[str, Any]]) -> list[str]: ...


class ClaimList:
    """The dry run's writer: keeps every claim (latest per namespace/name), in order."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    def ensure(self, claims: list[dict[str, Any]]) -> list[str]:
        for c in claims:
            meta = c["metadata"]
            self.claims[(meta["namespace"], meta["name"])] = c
        return []


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _owners(obj: Mapping[str, Any]) -> set[str]:
    """The uids an object's ownerReferences name."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    return {str(r.get("uid")) for r in meta.get("ownerReferences") or []
            if isinstance(r, Mapping)}


class KubernetesClaims:
    """The server's writer: ResourceClaims through the official client's CustomObjectsApi
    (``resource.k8s.io/v1`` is served like any group; no typed client needed)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client  # the server's dependency, imported where used

        self._api = client.CustomObjectsApi(api_client)
        self._error = client.ApiException

    def ensure(self, claims: list[dict[str, Any]]) -> list[str]:
        problems = []
        for claim in claims:
            problem = self._one(claim)
            if problem:
                problems.append(problem)
        return problems

    def _one(self, claim: dict[str, Any]) -> str | None:
        ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        try:
            self._api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, claim,
                                                      _request_timeout=TIMEOUT_SECONDS)
            return None
        except self._error as exc:
            if exc.status != 409:
                return f"ResourceClaim {ns}/{name} not created: HTTP {exc.status} {exc.reason}"
        except Exception as exc:
            return f"ResourceClaim {ns}/{name} not created: {exc}"
        try:
            have = self._api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                          _request_timeout=TIMEOUT_SECONDS)
            if _owners(have) != _owners(claim):
                return (f"ResourceClaim {ns}/{name} exists and belongs to another owner "
                        f"({', '.join(sorted(_owners(have))) or 'none'}); not taken over")
            if _same(have.get("spec") or {}, claim["spec"]):
                return None
            return (f"ResourceClaim {ns}/{name} exists with other devices (its slot "
                    f"moved); gputopo does not delete claims: delete it to pin the new GPUs")
        except self._error as exc:
            return f"ResourceClaim {ns}/{name} not made: HTTP {exc.status} {exc.reason}"
        except Exception as exc:
            return f"ResourceClaim {ns}/{name} not made: {exc}"
