"""The PodGroup a gang label names must exist: make it, or take the label off.

Why: the policy's gang labels put ``scheduling.x-k8s.io/pod-group: <job>`` on every GPU pod.
The scheduler-plugins Coscheduling plugin lets such a pod through PreFilter but rejects it
at Permit with "PodGroup not found" — for ever — when no PodGroup of that name exists
(``pkg/coscheduling/coscheduling.go``, ``Permit``). That happens whenever the training
operator was not started with its gang-scheduling flags: every opted-in GPU pod would hang,
which is worse than no webhook at all. So at a gang's first admission this step makes sure
the PodGroup exists, as the policy's ``placement.podGroup`` says:

* ``create`` (default): create it when missing — ``minMember`` = the gang's GPU pods (of a
  JobSet or TrainJob: those JobSet starts together, :func:`webhook.jobset_gangs.min_member`),
  an ownerReference to the job so it is deleted with the job; if that fails, the label goes;
* ``require``: a PodGroup made by someone else (the operator) must exist; when it does not,
  the label is not added and the user is warned;
* ``off``: gputopo manages no PodGroup and adds no pod-group label.

In no case does a pod leave admission labelled for a PodGroup that does not exist. A label
the pod already had (the operator's own) is not ours and is left alone.

Cost: the lookup reads the live view's PodGroup watch (:meth:`ClusterView.pod_group`),
never the API, so a gang's pods cost no API call; a creation is one POST per gang, and its
outcome is remembered until the watch shows the object. A cluster reader without that
watch (a cluster file, the demo) cannot tell, and the label is kept as the policy wrote it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gputopo import names
from gputopo.cluster.reservations import admission_deadline
from webhook import metrics
from webhook.jobset_gangs import min_member
from webhook.steps import AdmissionContext

log = logging.getLogger(__name__)

#: Seconds a creation's outcome is remembered (until the watch delivers the object).
MEMO_SECONDS = 60.0
#: The POST's timeout: an admission must still answer inside the webhook's 5 s; within an
#: admission also no later than its answer-by less what placement needs after it.
CREATE_TIMEOUT_SECONDS = 2.0
RESERVE_SECONDS = 1.0
MIN_CREATE_SECONDS = 0.05


def pod_group_body(*, namespace: str, name: str, min_member: int, owner: dict[str, str]
                   ) -> dict[str, Any]:
    """The PodGroup gputopo creates for a gang (scheduling.x-k8s.io/v1alpha1)."""
    return {
        "apiVersion": f"{names.POD_GROUP_API_GROUP}/{names.POD_GROUP_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
                     "ownerReferences": [owner]},
        "spec": {"minMember": min_member},
    }


class PodGroupStep:
    """The pipeline step (``webhook.steps.Step``): name ``podgroup``; runs before placement."""

    name = "podgroup"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[tuple[str, str], tuple[float, str]] = {}  # → (when, error or "")

    def apply(self, ctx: AdmissionContext) -> None:
        job = ctx.job
        labels = (ctx.pod.get("metadata") or {}).get("labels")
        if job is None or not isinstance(labels, dict) or names.POD_GROUP_LABEL not in labels:
            return
        before = (ctx.original.get("metadata") or {}).get("labels") or {}
        if names.POD_GROUP_LABEL in before:
            return  # the pod came with it: the operator's (or the user's), not ours
        group = str(labels[names.POD_GROUP_LABEL])
        policy = ctx.policy.placement.pod_group if ctx.policy is not None else "create"
        if policy == "off":
            del labels[names.POD_GROUP_LABEL]
            return
        look = getattr(ctx.cluster, "pod_group", None)
        if look is None:
            return  # a cluster file or the demo: nothing to check against
        known, found = look(job.namespace, group)
        if found is not None or not known:
            return  # exists (or the watch has not listed yet: nothing known against it)
        what = f"PodGroup {job.namespace}/{group}"
        preview = ctx.audit or ctx.request.dry_run
        if policy == "require":
            del labels[names.POD_GROUP_LABEL]
            ctx.warnings.append(
                f"podgroup: {what} does not exist and the policy "
                f"requires one (placement.podGroup: require): the {names.POD_GROUP_LABEL} label "
                f"is not added (Coscheduling would reject the pod for ever); start the training "
                f"operator with gang scheduling, or set podGroup: create")
            if not preview:
                metrics.POD_GROUPS.labels(result="label_removed").inc()
            return
        if preview:
            ctx.warnings.append(f"podgroup: would create {what} (minMember {min_member(job)})")
            return
        error = self._create(ctx, group)
        if error:
            del labels[names.POD_GROUP_LABEL]
            ctx.warnings.append(
                f"podgroup: {what} does not exist and could not be created ({error}): the "
                f"{names.POD_GROUP_LABEL} label is not added")
            metrics.POD_GROUPS.labels(result="label_removed").inc()

    def _create(self, ctx: AdmissionContext, group: str) -> str:
        """Create the gang's PodGroup once; "" on success (or when it already exists)."""
        job = ctx.job
        assert job is not None
        key = (job.namespace, group)
        now = time.monotonic()
        with self._lock:
            hit = self._made.get(key)
            if hit is not None and now - hit[0] < MEMO_SECONDS:
                return hit[1]
        api = getattr(ctx.cluster, "api_client", None)
        if api is None:
            return "no API access"
        timeout = CREATE_TIMEOUT_SECONDS
        until = admission_deadline()  # the review's answer-by, counted from its arrival
        if until is not None:
            timeout = min(timeout, until - now - RESERVE_SECONDS)
            if timeout < MIN_CREATE_SECONDS:
                return "no time left in this admission (the API is slow)"
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        body = pod_group_body(
            namespace=job.namespace, name=group, min_member=min_member(job),
            owner={"apiVersion": job.api_version, "kind": job.kind, "name": job.name,
                   "uid": job.uid})
        error = ""
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                names.POD_GROUP_API_GROUP, names.POD_GROUP_VERSION, job.namespace,
                names.POD_GROUP_PLURAL, body, _request_timeout=timeout)
            metrics.POD_GROUPS.labels(result="created").inc()
            log.info("podgroup: created PodGroup %s/%s (minMember %d) for %s %s", job.namespace,
                     group, min_member(job), job.kind, job.name)
        except ApiException as exc:
            if exc.status != 409:  # 409 AlreadyExists: another replica made it
                error = f"{exc.status} {exc.reason}"
        except Exception as exc:  # transport errors: the label goes, admission goes on
            error = f"{type(exc).__name__}: {str(exc)[:100]}"
        if error:
            log.warning("podgroup: creating PodGroup %s/%s failed: %s", job.namespace, group,
                        error)
        with self._lock:
            if len(self._made) > 10_000:
                self._made.clear()
            self._made[key] = (now, error)
        return error
