"""The admission pipeline: review in → policy match → job identity → mutations → steps →
patch out. The server and ``gputopo mutate`` both call :meth:`Admitter.handle_body`.

Order and merge rule when several policies match one pod: policies run in ascending
``spec.priority`` (then name), each on the pod as the previous ones left it. Because every
mutation only adds what is missing, the first policy to set a field wins; a later policy
that wants a different value gets a warning, exactly like a user's own value would.
The first matching policy is the pod's *primary* policy: its ``placement`` settings and
mode decide the placement step.

Safe defaults, all documented in docs/policies.md:
- only CREATE of Pods is looked at; everything else is allowed untouched (``skipped``);
- a namespace without ``gputopo.io/inject=enabled`` is never mutated;
- a pod without a controller ownerReference to a training job is not a job pod;
- a pod that requests no GPU (an MPI launcher) gets no mutation and does not count;
- a job pod whose job cannot be read is admitted unchanged with a warning: the gang size is
  never guessed (a JobSet pod also gets the unplaced record, webhook/placement/unknown_gang.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from gputopo import names
from gputopo.cluster.dra import DEFAULT_GPU_CLASSES
from gputopo.cluster.source import ClusterReader, WouldBlock
from webhook import metrics
from webhook.jobs import JobNotFound, controller_ref, is_job_owner, resolve_job
from webhook.mutations import apply_policy
from webhook.patch import make_patch, working_copy
from webhook.placement.unknown_gang import unplaced_jobset_pod
from webhook.policy.match import matches
from webhook.policy.schema import Policy
from webhook.policy.store import PolicyStore
from webhook.review import (
    AdmissionRequest,
    BadReview,
    Decision,
    build_response,
    check_pod_object,
    parse_review,
)
from webhook.steps import AdmissionContext, JobInfo, Step

__all__ = ["Admitter", "make_patch"]


def _count(outcome: str) -> None:
    """Add one to ``gputopo_admission_requests_total{outcome}``."""
    metrics.tally(metrics.REQUESTS, outcome)()


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


#: What :meth:`Admitter._scope` found for a pod in scope: the pod, its namespace, its job
#: and the policies that match it (primary first).
_Scope = tuple[dict[str, Any], "dict[str, Any] | None", JobInfo, "list[Policy]"]


@dataclass(frozen=True)
class InScope:
    """A request :meth:`Admitter.answer_at_once` found in scope, with what deciding that
    read (the pod, its namespace, its job, the matching policies): the admitter thread
    goes on from there instead of reading them again. Not a tuple: the server takes a
    tuple for the answer itself."""

    request: AdmissionRequest
    scope: _Scope


class Admitter:
    """Decides one AdmissionReview at a time; safe to call from several threads."""

    def __init__(self, *, store: PolicyStore, cluster: ClusterReader,
                 steps: list[Step] | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.steps = list(steps or [])

    @property
    def ready(self) -> bool:
        """True once a policy set is loaded (``/readyz``)."""
        return self.store.ready

    def close(self) -> None:
        """Stop the policy watcher."""
        self.store.stop()

    # --- wire --------------------------------------------------------------------------
    def handle_body(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """HTTP status and JSON body for one request body; never raises on bad input."""
        try:
            request = parse_review(body)
        except BadReview as exc:
            _count("bad_request")
            return 400, {"error": exc.line()}
        return self.handle_request(request)

    def handle_request(self, request: AdmissionRequest | InScope) -> tuple[int, dict[str, Any]]:
        """HTTP status and JSON body for one parsed request (or one :meth:`answer_at_once`
        found in scope: what it read is not read again)."""
        if isinstance(request, InScope):
            return self._answer(request.request, self._mutate(request.request, *request.scope))
        try:
            decision = self.admit(request)
        except BadReview as exc:  # the pod of a job in scope is not one we can read
            _count("bad_request")
            return 400, {"error": exc.line()}
        return self._answer(request, decision)

    def answer_at_once(self, body: bytes
                       ) -> tuple[int, dict[str, Any]] | AdmissionRequest | InScope:
        """The answer, when it can be given without waiting and without side effects — bad
        input, anything but a Pod CREATE, a pod out of scope by what the cluster view holds
        in memory — else the parsed request, for :meth:`handle_request` on the admitter
        thread (with what was read to find it in scope, when that could be read here: the
        job and the matching policies are then not looked up twice). The same decisions as
        :meth:`handle_body`, by the same code (:meth:`_scope`).

        Why: the server's event loop calls this, so out-of-scope reviews (every pod of a
        namespace that did not opt in, when the webhook's namespaceSelector is not in
        place; plain pods in one that did) skip the hand-off to the admitter thread, which
        cost ~0.2 ms of CPU per review on the 2-core benchmark machine — as much as the
        transport. Nothing that may block (a GET to the API server, a busy view lock) or
        write (mutations, reservations) runs here: the cluster is read through its
        ``memory_only()`` reader, which raises WouldBlock instead of waiting.
        """
        try:
            request = parse_review(body)
        except BadReview as exc:
            _count("bad_request")
            return 400, {"error": exc.line()}
        memory_only = getattr(self.cluster, "memory_only", None)
        if memory_only is None:
            return request
        try:
            scope = self._scope(request, memory_only())
        except WouldBlock:
            return request
        except BadReview as exc:
            _count("bad_request")
            return 400, {"error": exc.line()}
        if isinstance(scope, Decision):
            return self._answer(request, scope)
        return InScope(request, scope)  # mutations and steps: on the admitter thread

    def _answer(self, request: AdmissionRequest, decision: Decision
                ) -> tuple[int, dict[str, Any]]:
        _count(decision.outcome)
        return 200, build_response(request.uid, decision)

    # --- decision ----------------------------------------------------------------------
    def admit(self, request: AdmissionRequest) -> Decision:
        """The decision for one parsed request."""
        scope = self._scope(request, self.cluster)
        if isinstance(scope, Decision):
            return scope
        return self._mutate(request, *scope)

    def _scope(self, request: AdmissionRequest, cluster: ClusterReader) -> Decision | _Scope:
        """A decision for a request out of scope (``skipped``, or ``unchanged`` with a
        warning), else what :meth:`_mutate` needs. Reads the cluster only through
        ``cluster`` and changes nothing; BadReview when the pod of a job in scope does not
        have the shape the pipeline relies on."""
        pod = request.object
        if pod is None or not request.is_pod_create:
            return Decision(outcome="skipped")
        policies = self.store.in_force  # one read: the set, or None before the first load
        if policies is None:
            return Decision(outcome="skipped",
                            warnings=["gputopo: no policies loaded yet; pod admitted unchanged"])
        ns_name = request.namespace
        if not ns_name:
            meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
            ns_name = str(meta.get("namespace") or "default")
        namespace = cluster.namespace(ns_name)
        ns_labels = _labels(namespace)
        if not policies or ns_labels.get(names.INJECT_LABEL) != names.INJECT_VALUE:
            return Decision(outcome="skipped")
        ref = controller_ref(pod)
        if ref is None or not is_job_owner(ref):
            return Decision(outcome="skipped")  # not a job's pod: nothing reads it
        check_pod_object(pod)  # BadReview: HTTP 400 (a pod we read must be sound)
        gpu_resources = frozenset().union(*(p.gpu_resources for p in policies))
        spec = pod.get("spec")
        # a DRA pod's GPU classes (placement.gpuDeviceClasses): only pods with claims ask
        classes = (frozenset().union(*(p.placement.gpu_device_classes for p in policies))
                   if isinstance(spec, dict) and spec.get("resourceClaims")
                   else DEFAULT_GPU_CLASSES)
        try:
            job = resolve_job(pod, ns_name, cluster, gpu_resources, owner=ref,
                              device_classes=classes)
        except JobNotFound as exc:  # a JobSet pod gets the unplaced record (unknown_gang)
            return unplaced_jobset_pod(pod, ns_name, exc.message, policies=policies,
                                       namespace_labels=ns_labels, gpu_resources=gpu_resources
                                       ) or Decision(outcome="unchanged", warnings=[
                f"gputopo: {exc.message}; gang size unknown, pod admitted unchanged"])
        if job is None or not job.requests_gpu:
            return Decision(outcome="skipped")
        pod_labels = _labels(pod)
        matched = [policy for policy in policies
                   if matches(policy, namespace_labels=ns_labels, job=job,
                              pod_labels=pod_labels)]
        if not matched:
            return Decision(outcome="skipped")
        return pod, namespace, job, matched

    def _mutate(self, request: AdmissionRequest, pod: dict[str, Any],
                namespace: dict[str, Any] | None, job: JobInfo,
                matched: list[Policy]) -> Decision:
        # the parsed pod is a tree (no shared objects): a plain copy is exact and 2x faster
        # than deepcopy; the audit copies below keep deepcopy, as mutations may share objects
        pod, working = working_copy(pod)
        warnings: list[str] = []
        for policy in matched:
            if policy.mode == "enforce":
                result = apply_policy(working, policy, job)
            else:
                result = apply_policy(copy.deepcopy(working), policy, job)
                if result.kinds:
                    warnings.append(f"policy {policy.name} (audit): would apply "
                                    f"{', '.join(result.kinds)}")
            for kind in result.kinds:
                metrics.tally(metrics.MUTATIONS, kind, policy.name, policy.mode)()
            warnings.extend(f"policy {policy.name}: {text}" for text in result.conflicts)
        primary = matched[0]
        ctx = AdmissionContext(
            request=request, pod=working, original=pod, namespace=namespace, job=job,
            policy=primary, cluster=self.cluster, warnings=warnings,
            audit=primary.mode == "audit",
        )
        if job.gang_size > 0:  # each step reads the policy's settings (placement.enabled...)
            self._run_steps(ctx)
        if ctx.denied is not None:
            return Decision(allowed=False, message=ctx.denied, warnings=ctx.warnings,
                            outcome="denied")
        patch = make_patch(pod, working)
        return Decision(patch=patch, warnings=ctx.warnings,
                        outcome="mutated" if patch else "unchanged")

    def _run_steps(self, ctx: AdmissionContext) -> None:
        for step in self.steps:
            if not ctx.audit:
                step.apply(ctx)
            else:
                before = ctx.pod
                ctx.pod = copy.deepcopy(before)
                step.apply(ctx)
                changed = make_patch(before, ctx.pod)
                if changed:
                    paths = sorted({op["path"] for op in changed})
                    ctx.warnings.append(f"{step.name} (audit): would change {', '.join(paths)}")
                if ctx.denied is not None:
                    ctx.warnings.append(f"{step.name} (audit): would deny: {ctx.denied}")
                    ctx.denied = None
                ctx.pod = before
            if ctx.denied is not None:
                return
