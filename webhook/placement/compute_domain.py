"""The IMEX channel a gang over trays of one NVLink domain needs: a ComputeDomain and a claim.

Why: NCCL crosses nodes over NVLink (MNNVL) only through an IMEX channel in the pod; NVIDIA's
DRA driver for GPUs makes one per *ComputeDomain* (``resource.nvidia.com/v1beta1``): it
creates a ResourceClaimTemplate of the name in ``spec.channel.resourceClaimTemplate.name``,
and every pod that references that template in ``spec.resourceClaims`` (and in its
containers' ``resources.claims``) gets the channel. "A ComputeDomain follows the workload":
it does not choose nodes — gputopo does, so gputopo can make it (policy
``placement.computeDomain: create``; ``off``, the default, changes no pod).

What ``create`` does, for a gang the solver placed on two or more nodes that all share one
NVLink domain (``NodeState.nvlink_domain``): each GPU pod gets the claim ``nvlink-imex``
from the template ``<job>-nvlink-imex``, and the ComputeDomain ``<job>-nvlink`` (numNodes
= the gang's nodes, an ownerReference to the job so that it goes with the job) is created
once per gang; 409 AlreadyExists (another replica made it) is success. If it cannot be
created, no claim is added (the pod would wait for ever for a template that never comes)
and the user is warned. A dry run or audit, and ``gputopo mutate`` (no API), add the claim
and say the ComputeDomain would be created. Gangs on one node, across domains or on nodes
without one get nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from gputopo import names
from gputopo.cluster.reservations import GangReservation, admission_deadline
from gputopo.cluster.source import node_state_named
from webhook.steps import AdmissionContext, JobInfo

log = logging.getLogger(__name__)

API_GROUP = "resource.nvidia.com"
API_VERSION = "v1beta1"
PLURAL = "computedomains"
#: The pod's resource claim name (a DNS label, unique in the pod).
CLAIM_NAME = "nvlink-imex"
#: Seconds a creation's outcome is remembered, and the POST's timeout (as for PodGroups).
MEMO_SECONDS = 60.0
CREATE_TIMEOUT_SECONDS = 2.0
RESERVE_SECONDS = 1.0
#: Kubernetes object names are DNS subdomains of at most 253 characters.
_MAX_BASE = 253 - len("-nvlink-imex")


def object_names(job_name: str) -> tuple[str, str]:
    """(ComputeDomain name, ResourceClaimTemplate name) of a job."""
    base = job_name[:_MAX_BASE].rstrip("-.")
    return f"{base}-nvlink", f"{base}-nvlink-imex"


def gang_domain(ctx: AdmissionContext, res: GangReservation) -> tuple[str, int] | None:
    """(NVLink domain, nodes) when the gang's slots span two or more nodes of one domain."""
    nodes = {s.node for s in res.slots}
    if len(nodes) < 2:
        return None
    domains = set()
    for name in nodes:
        state = node_state_named(ctx.cluster, name)
        if state is None or state.nvlink_domain is None:
            return None
        domains.add(state.nvlink_domain)
    return (domains.pop(), len(nodes)) if len(domains) == 1 else None


def compute_domain_body(*, namespace: str, name: str, template: str, num_nodes: int,
                        owner: Mapping[str, str]) -> dict[str, Any]:
    """The ComputeDomain gputopo creates for a gang (NVIDIA DRA driver, v1beta1)."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
                     "ownerReferences": [dict(owner)]},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": template}}},
    }


def add_claim(pod: dict[str, Any], containers: list[dict[str, Any]], template: str) -> str:
    """Give ``pod`` the claim from ``template`` and its GPU ``containers`` a reference to it;
    "" when done (or already there), else why not (a claim of that name from elsewhere)."""
    spec = pod.setdefault("spec", {})
    claims = spec.get("resourceClaims")
    if not isinstance(claims, list):
        claims = spec["resourceClaims"] = []
    mine = {"name": CLAIM_NAME, "resourceClaimTemplateName": template}
    same = [c for c in claims if isinstance(c, Mapping) and c.get("name") == CLAIM_NAME]
    if same and dict(same[0]) != mine:
        return f"the pod already has a resource claim named {CLAIM_NAME} of another source"
    if not same:
        claims.append(mine)
    for c in containers:
        resources = c.get("resources")
        if not isinstance(resources, dict):
            resources = c["resources"] = {}
        refs = resources.get("claims")
        if not isinstance(refs, list):
            refs = resources["claims"] = []
        if not any(isinstance(r, Mapping) and r.get("name") == CLAIM_NAME for r in refs):
            refs.append({"name": CLAIM_NAME})
    return ""


class ComputeDomains:
    """Makes each gang's ComputeDomain once (one per placement step, shared by its pods)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[tuple[str, str], tuple[float, str]] = {}  # -> (when, error or "")

    def apply(self, ctx: AdmissionContext, res: GangReservation,
              containers: list[dict[str, Any]], *, preview: bool) -> list[str]:
        """The claim and the ComputeDomain for this pod's gang (module docstring);
        the warnings to show."""
        job = ctx.job
        found = gang_domain(ctx, res) if job is not None else None
        if job is None or found is None:
            return []
        domain, nodes = found
        name, template = object_names(job.name)
        what = f"ComputeDomain {job.namespace}/{name} (numNodes {nodes}, NVLink domain {domain})"
        api = getattr(ctx.cluster, "api_client", None)
        if preview or api is None:
            why = add_claim(ctx.pod, containers, template)
            if why:
                return [f"computeDomain: {why}: no claim added"]
            how = "no API access here" if api is None and not preview else "a dry run"
            return [f"computeDomain: would create {what} ({how}); the pod gets claim "
                    f"{CLAIM_NAME} from template {template}"]
        error = self.create(api, job, name, template, nodes)
        if error:
            return [f"computeDomain: {what} could not be created ({error}): no IMEX channel "
                    f"claim added; NCCL crosses the trays over the network"]
        why = add_claim(ctx.pod, containers, template)
        return [f"computeDomain: {why}: no claim added"] if why else []

    def create(self, api: Any, job: JobInfo, name: str, template: str, nodes: int) -> str:
        """Create the ComputeDomain ``name`` of ``job`` once; "" on success (or when it
        exists already), else the error. Remembered for MEMO_SECONDS per name."""
        key = (job.namespace, name)
        now = time.monotonic()
        with self._lock:
            hit = self._made.get(key)
            if hit is not None and now - hit[0] < MEMO_SECONDS:
                return hit[1]
        timeout = CREATE_TIMEOUT_SECONDS
        until = admission_deadline()
        if until is not None:
            timeout = min(timeout, until - now - RESERVE_SECONDS)
            if timeout <= 0:
                return "no time left in this admission (the API is slow)"
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        body = compute_domain_body(
            namespace=job.namespace, name=name, template=template, num_nodes=nodes,
            owner={"apiVersion": job.api_version, "kind": job.kind, "name": job.name,
                   "uid": job.uid})
        error = ""
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                API_GROUP, API_VERSION, job.namespace, PLURAL, body, _request_timeout=timeout)
            log.info("computeDomain: created %s/%s (numNodes %d) for %s %s", job.namespace,
                     name, nodes, job.kind, job.name)
        except ApiException as exc:
            if exc.status != 409:  # AlreadyExists: another replica of the gang made it
                error = f"{exc.status} {exc.reason}"
        except Exception as exc:  # transport errors: no claim, admission goes on
            error = f"{type(exc).__name__}: {str(exc)[:100]}"
        with self._lock:
            if len(self._made) > 10_000:
                self._made.clear()
            self._made[key] = (now, error)
        return error
