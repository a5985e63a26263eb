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
from collections.abc import Callable, Sequence
from typing import Any

from gputopo import names
from gputopo.cluster.source import ClusterReader, WouldBlock
from webhook import metrics
from webhook.jobs import BATCH_JOB, JobNotFound, controller_ref, resolve_job
from webhook.mutations import apply_policy
from webhook.patch import copy_document, make_patch
from webhook.placement.unknown_gang import unplaced_jobset_pod
from webhook.podshape import check_pod_in_detail, well_formed_pod
from webhook.policy.match import matches
from webhook.policy.schema import OWNER_KINDS, Policy
from webhook.policy.store import PolicyStore
from webhook.review import (
    API_VERSION,
    KIND,
    POD_GVK,
    PODS_GVR,
    AdmissionRequest,
    BadReview,
    Decision,
    build_response,
    decode_json,
    parse_review,
    pod_create,
    pod_create_fields,
    review_request,
)
from webhook.steps import AdmissionContext, JobInfo, Step

__all__ = ["Admitter", "make_patch"]


#: Adders of ``gputopo_admission_requests_total`` by outcome (one dict lookup by the
#: outcome, not :func:`metrics.tally`'s by counter and labels: every review counts once),
#: each made at the first review with that outcome.
_COUNTERS: dict[str, Callable[[], object]] = {}


def _count(outcome: str) -> None:
    (_COUNTERS.get(outcome) or _counter(outcome))()


def _counter(outcome: str) -> Callable[[], object]:
    add = _COUNTERS[outcome] = metrics.tally(metrics.REQUESTS, outcome)
    return add


#: What :meth:`Admitter._scope` returns for a request it lets through untouched: one
#: instance, never handed out (:meth:`Admitter.admit` answers a fresh Decision), so an
#: out-of-scope review does not build one (~25 bytecodes of generated __init__).
_SKIPPED = Decision(outcome="skipped")


def _labels(obj: dict[str, Any] | None) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


#: The policy set of the last review and the GPU resource names of them all: the store's
#: ``in_force`` is one tuple until a reload replaces it (one identity test).
_GPU_NAMES: tuple[Sequence[Policy], frozenset[str]] = ((), frozenset())


def _gpu_resources(policies: Sequence[Policy]) -> frozenset[str]:
    global _GPU_NAMES
    held, names_ = _GPU_NAMES
    if held is policies:
        return names_
    names_ = frozenset().union(*(p.gpu_resources for p in policies))
    _GPU_NAMES = (policies, names_)
    return names_


_INJECT_LABEL, _INJECT_VALUE = names.INJECT_LABEL, names.INJECT_VALUE
_new_object = object.__new__
_NO_CLUSTER = object()  # what Admitter._readers holds before the first review
_Scope = tuple[dict[str, Any], "dict[str, Any] | None", JobInfo, "list[Policy]"]


class InScope:
    """A request :meth:`Admitter.answer_at_once` found in scope, with what deciding that
    read (the pod, its namespace, its job, the matching policies): the admitter thread
    goes on from there instead of reading them again (~a quarter of the event loop's
    share of an in-scope review, docs/benchmarks.md). Not a tuple (the server takes a
    tuple for the answer itself). Slots, filled without ``__init__`` by answer_at_once:
    a frozen dataclass instance (its ``__dict__``) cost ~10 us of a cold review on the
    benchmark guest, this ~2."""

    __slots__ = ("request", "scope")

    request: AdmissionRequest
    scope: _Scope

    def __init__(self, request: AdmissionRequest, scope: _Scope) -> None:
        self.request = request
        self.scope = scope


class Admitter:
    """Decides one AdmissionReview at a time; safe to call from several threads."""

    def __init__(self, *, store: PolicyStore, cluster: ClusterReader,
                 steps: list[Step] | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.steps = list(steps or [])
        self._readers: tuple[object, Any, Callable[[str], bool | None] | None] = (
            _NO_CLUSTER, None, None)

    def _remember_readers(self) -> tuple[object, Any, Callable[[str], bool | None] | None]:
        """(cluster, its memory-only reader or None, that reader's kept opt-in answers or
        None), asked once per cluster object: ``memory_only()`` and the attribute lookups
        were a call and ~4 us of each cold review."""
        memory_only = getattr(self.cluster, "memory_only", None)
        reader = memory_only() if memory_only is not None else None
        self._readers = (self.cluster, reader, getattr(reader, "namespace_opted_in", None))
        return self._readers

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
        :meth:`handle_body`, by the same code.

        Why: the server's event loop calls this, so out-of-scope reviews (every pod of a
        namespace that did not opt in, when the webhook's namespaceSelector is not in
        place; plain pods in one that did) skip the hand-off to the admitter thread, which
        cost ~0.2 ms of CPU per review on the 2-core benchmark machine — as much as the
        transport. Nothing that may block (a GET to the API server, a busy view lock) or
        write (mutations, reservations) runs here: the cluster is read through its
        ``memory_only()`` reader, which raises WouldBlock instead of waiting.
        """
        try:
            doc = decode_json(body)
        except (UnicodeDecodeError, ValueError, RecursionError):
            return self.handle_body(body)  # parse_review words it, as it always did
        held = self._readers
        if held[0] is not self.cluster:
            held = self._remember_readers()
        reader, opted_in = held[1], held[2]
        fields = pod_create_fields(doc)
        if fields is None:  # anything but a well-formed Pod CREATE: the general parse
            try:
                request = review_request(doc)
            except BadReview as exc:
                _count("bad_request")
                return 400, {"error": exc.line()}
        else:
            if opted_in is not None and self.store.in_force is not None and fields[1]:
                # Out of scope by the namespace's kept opt-in answer, or a pod without
                # owner references in one that opted in: _scope's first answers, without
                # its calls (the policy set and the opt-in are read, not asked for) and
                # without an AdmissionRequest (an instance made is ~10 us cold). Why: each
                # function and object a cold review touches costs on its own
                # (docs/benchmarks.md, "Cold CPU: the event loop's share"). Anything else (a
                # namespace not in memory, no policies loaded yet, a pod with owners) goes
                # through _scope, which decides in full.
                opted = opted_in(fields[1])
                if opted is True:
                    meta = fields[3].get("metadata")
                    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
                    opted = None if refs and isinstance(refs, list) else False
                if opted is False:
                    (_COUNTERS.get("skipped") or _counter("skipped"))()
                    return 200, {"apiVersion": API_VERSION, "kind": KIND,
                                 "response": {"uid": fields[0], "allowed": True}}
            request = pod_create(fields)
        if reader is None:
            return request
        try:
            scope = self._scope(request, reader)
        except WouldBlock:
            return request
        except BadReview as exc:
            _count("bad_request")
            return 400, {"error": exc.line()}
        if scope is _SKIPPED:  # _answer's work, inline: the loop's most common answer
            (_COUNTERS.get("skipped") or _counter("skipped"))()
            return 200, {"apiVersion": API_VERSION, "kind": KIND,
                         "response": {"uid": request.uid, "allowed": True}}
        if not isinstance(scope, Decision):
            found = _new_object(InScope)  # InScope(request, scope) without its __init__
            found.request = request
            found.scope = scope
            return found  # mutations and steps: on the admitter thread
        return self._answer(request, scope)

    def _answer(self, request: AdmissionRequest, decision: Decision
                ) -> tuple[int, dict[str, Any]]:
        _count(decision.outcome)
        return 200, build_response(request.uid, decision)

    # --- decision ----------------------------------------------------------------------
    def admit(self, request: AdmissionRequest) -> Decision:
        """The decision for one parsed request."""
        scope = self._scope(request, self.cluster)
        if isinstance(scope, Decision):
            return Decision(outcome="skipped") if scope is _SKIPPED else scope
        return self._mutate(request, *scope)

    def _scope(self, request: AdmissionRequest, cluster: ClusterReader
               ) -> Decision | tuple[dict[str, Any], dict[str, Any] | None, JobInfo,
                                     list[Policy]]:
        """A decision for a request out of scope, else what :meth:`_mutate` needs. Reads
        the cluster only through ``cluster`` and changes nothing. Out of scope is
        :data:`_SKIPPED` (for the callers here to answer, never to hand out)."""
        pod = request.object
        # a Pod CREATE parse_review vouched for shares POD_GVK: no is_pod_create property
        # call (~15 us of a cold review on the benchmark guest, for 20 bytecodes)
        if pod is None or not ((request.kind is POD_GVK and request.operation == "CREATE"
                               and request.resource is PODS_GVR and not request.sub_resource)
                               or request.is_pod_create):
            return _SKIPPED
        policies = self.store.in_force  # None: not ready (the property and policies(),
        if policies is None:            # lock and copy, in one attribute read)
            return Decision(outcome="skipped",
                            warnings=["gputopo: no policies loaded yet; pod admitted unchanged"])
        ns_name = request.namespace
        if not ns_name:
            meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
            ns_name = str(meta.get("namespace") or "default")
        namespace = cluster.namespace(ns_name)
        # _labels(namespace) and namespace_opted_in, inline (every review comes this way)
        meta = namespace.get("metadata") if isinstance(namespace, dict) else None
        ns_labels = meta.get("labels") if isinstance(meta, dict) else None
        if not isinstance(ns_labels, dict):
            ns_labels = {}
        if ns_labels.get(_INJECT_LABEL) != _INJECT_VALUE:
            return _SKIPPED
        meta = pod.get("metadata")
        refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
        if not refs or not isinstance(refs, list):
            return _SKIPPED  # controller_ref would find none: a plain pod, skipped as fast
        if not policies:
            return _SKIPPED
        ref = controller_ref(pod)
        if ref is None or ((ref.api_version, ref.kind) not in OWNER_KINDS
                           and (ref.api_version, ref.kind) != BATCH_JOB):
            return _SKIPPED  # not a job's pod (is_job_owner, inline): nothing reads it
        try:  # check_pod_object and check_pod, inline: two functions fewer
            sound = well_formed_pod(pod)
        except Exception:  # anything unexpected is simply not vouched for
            sound = False
        if not sound:
            problem = check_pod_in_detail(pod)
            if problem is not None:  # BadReview: HTTP 400 (a pod we read must be sound)
                raise BadReview(problem[1], path=f"request.object{problem[0]}")
        held = _GPU_NAMES  # _gpu_resources' hit, inline
        gpu_resources = held[1] if held[0] is policies else _gpu_resources(policies)
        try:
            job = resolve_job(pod, ns_name, cluster, gpu_resources, owner=ref)
        except JobNotFound as exc:  # a JobSet pod gets the unplaced record (unknown_gang)
            return unplaced_jobset_pod(pod, ns_name, exc.message, policies=policies,
                                       namespace_labels=ns_labels, gpu_resources=gpu_resources
                                       ) or Decision(outcome="unchanged", warnings=[
                f"gputopo: {exc.message}; gang size unknown, pod admitted unchanged"])
        if job is None or not job.requests_gpu:
            return _SKIPPED
        meta = pod.get("metadata")  # _labels(pod), inline
        pod_labels = meta.get("labels") if isinstance(meta, dict) else None
        if not isinstance(pod_labels, dict):
            pod_labels = {}
        matched = []  # a loop, not a comprehension: its own function in Python 3.11
        for policy in policies:
            if matches(policy, namespace_labels=ns_labels, job=job, pod_labels=pod_labels):
                matched.append(policy)
        if not matched:
            return _SKIPPED
        return pod, namespace, job, matched

    def _mutate(self, request: AdmissionRequest, pod: dict[str, Any],
                namespace: dict[str, Any] | None, job: JobInfo,
                matched: list[Policy]) -> Decision:
        # the parsed pod is a tree (no shared objects): a plain copy is exact and 2x faster
        # than deepcopy; the audit copies below keep deepcopy, as mutations may share objects
        working = copy_document(pod)
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
