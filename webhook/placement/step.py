"""The placement step of the admission pipeline: a gang is placed at its first GPU pod.

Why at admission: the pods of a training job arrive one by one, but where they should run
is a property of the whole gang (all four workers on one NVLink quad beats four scattered
GPUs). So the first GPU pod of a job triggers the solver for the WHOLE gang, the answer is
reserved in a :class:`~gputopo.cluster.reservations.ReservationStore`, and every pod of the
gang (the first one included) then takes its slot from that reservation: a required node
affinity pinning the node, the GPU index annotations, the visible-devices env and the
placement record (see :mod:`webhook.placement.mutations`).

Identity: a reservation is keyed by the job's (namespace, kind, name, uid), a slot by
(replica type, replica index). A pod recreated for the same replica gets the SAME slot; a
pod of another job that copies this job's labels has another owner uid, so another key,
and cannot take this job's GPUs.

Concurrency: ``reserve`` is all-or-nothing. When another admission (this process or another
webhook replica) took one of the chosen GPUs first, it raises ReservationConflict and the
step re-solves against the fresh set of held GPUs, a bounded number of times; when the
GPUs in the way may be going to this very gang (another replica admitting a sibling pod
right now), it waits briefly for that gang's reservation instead (see ``_reserve``).

No placement now (cluster full, gang larger than the cluster, store unreachable): the
policy's ``placement.whenFull`` decides — ``wait`` (default, with a placement queue: the pod
is admitted with the scheduling gate ``gputopo.io/placement``, its GPU env pointing at
annotations the queue fills in when it places the whole gang, see :mod:`webhook.queue`),
``admit`` (the pod keeps the gang labels, gets no pin, a warning and the reason in the
placement record; also what ``wait`` does where no queue runs) or ``deny`` (a message a user
can act on). Audit mode changes nothing and reserves nothing; warnings say what would be done.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from gputopo import names
from gputopo.cluster.dra import dra_containers
from gputopo.cluster.dra_claims import ClaimList, ClaimWriter, KubernetesClaims
from gputopo.cluster.node_resources import pod_demand, solve_fitting
from gputopo.cluster.node_volumes import pod_volumes
from gputopo.cluster.pod_spread import spread_of, tighter
from gputopo.cluster.reservations import (
    GangKey,
    GangReservation,
    InMemoryReservationStore,
    ReplicaKey,
    ReservationConflict,
    ReservationStore,
    ReservationUnavailable,
    pick_slot,
)
from gputopo.cluster.source import node_state_named
from gputopo.placement import starvation
from gputopo.placement.job_needs import needs_annotations, with_needs
from gputopo.placement.types import GangRequest, ReplicaSlot
from gputopo.placement.waiting import after_max_wait_text
from webhook import events, metrics
from webhook.placement import dra_slot, network, network_writes, node_choice
from webhook.placement.compute_domain import ComputeDomains
from webhook.placement.fitting import HeldMemo
from webhook.placement.mutations import (
    GPU_RESOURCES,
    apply_slot,
    apply_unplaced,
    apply_waiting,
    gpu_containers,
    gpu_list,
    pinned_to,
    unpin,
)
from webhook.placement.readmission import (
    NOTHING_WRITTEN,
    WrittenPorts,
    own_node,
    own_record,
    written_ports,
)
from webhook.placement.records import (
    WHEN_FULL_DENY,
    WHEN_FULL_WAIT,
    Granted,
    admission_events,
    placed_record,
    waiting_record,
)
from webhook.placement.replicas import (
    gpu_counts_by_replica_type,
    replica_index,
    replica_ordinal,
)
from webhook.placement.reserve import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_SETTLE_SECONDS,
    GangReserver,
    Solver,
    Unplaced,
    kept_free,
    ruled_out,
)
from webhook.placement.slot_repair import repair_scopes, slot_node_problem
from webhook.policy.schema import OWNER_KINDS, PlacementSettings, Policy
from webhook.steps import AdmissionContext, JobInfo

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_ATTEMPTS", "DEFAULT_SETTLE_SECONDS", "Granted", "HeldMemo",
           "PlacementStep", "Unplaced", "make_placement_step", "placement_step_for"]
#: Seconds one admission may spend talking to an API-backed reservation store: the webhook's
#: timeoutSeconds is 5, and the solve, the patch and the HTTPS round trip need the rest.
STORE_SECONDS = 3.0


def placement_settings(policy: Policy | None) -> PlacementSettings:
    """The primary policy's placement section (no policy: the defaults)."""
    return policy.placement if policy is not None else PlacementSettings()


def policy_name(policy: Policy | None) -> str:
    """The matched policy's name, for metrics and messages."""
    return policy.name if policy is not None else "?"


_ruled_out = ruled_out

class PlacementStep:
    """The pipeline step (``webhook.steps.Step``): name ``placement``, ``apply(ctx)``."""

    name = "placement"

    def __init__(
        self,
        store: ReservationStore | None = None,
        *,
        solver: Solver | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        can_wait: bool = False,
        recorder: events.EventRecorder | None = None,
        claims: ClaimWriter | None = None,
    ) -> None:
        #: where the ResourceClaims that pin DRA replicas go (the API, or the dry run's list)
        self.claims: ClaimWriter = claims if claims is not None else ClaimList()
        self.store: ReservationStore = store if store is not None else InMemoryReservationStore()
        self.reserver = GangReserver(self.store, solver=solver, max_attempts=max_attempts,
                                     settle_seconds=settle_seconds)
        #: True when a placement queue releases gated gangs (a live cluster); without one a
        #: gated pod would wait for ever, so ``whenFull: wait`` acts as ``admit``.
        self.can_wait = can_wait
        #: ``placement.computeDomain: create``: each gang's ComputeDomain, made once
        self.compute_domains = ComputeDomains()
        #: Kubernetes Events of each outcome (webhook/events.py); None: none written
        self.recorder = recorder

    @property
    def solver(self) -> Solver:
        return self.reserver.solver

    @property
    def max_attempts(self) -> int:
        return self.reserver.max_attempts

    @property
    def settle_seconds(self) -> float:
        return self.reserver.settle_seconds

    @property
    def _held_memo(self) -> HeldMemo:
        return self.reserver.held_memo

    # --- the step ------------------------------------------------------------------------
    def apply(self, ctx: AdmissionContext) -> None:
        """Give this pod its slot of the gang (placing the gang first if needed)."""
        job = ctx.job
        if job is None or not job.requests_gpu:
            return  # a launcher or any pod without GPUs: no slot
        settings = placement_settings(ctx.policy)
        if not settings.enabled:
            return
        resources = _gpu_resources(ctx.policy)
        gpus = job.gpus_per_pod
        if gpus <= 0:
            return
        # the GPU containers, found once: writing the slot and the network plan changes
        # their env and ports, never which containers ask for GPUs (~190 bytecodes a look)
        containers = gpu_containers(ctx.pod, resources)
        ask = job.dra if job.dra is not None and job.dra.gpus > 0 else None
        if ask is not None:  # GPUs through DRA claims: their containers too
            containers += [c for c in dra_containers(ctx.pod, ask)
                           if not any(c is k for k in containers)]
        if not containers:
            return
        what = f"{job.kind} {job.namespace}/{job.name}"
        if (ctx.pod.get("spec") or {}).get("nodeName"):
            ctx.warnings.append(f"placement: pod already bound to a node; {what} not placed")
            return
        rtype = job.replica_type or job.role or "replica"
        specs = job.spec.get(OWNER_KINDS.get((job.api_version, job.kind), ""), {})
        rs = specs.get(job.replica_type) if isinstance(specs, dict) else None
        count = rs.get("replicas", 1) if isinstance(rs, dict) else None
        index = replica_index(ctx.pod, job.name, rtype, job.replica_index, job.gang_size,
                              count if isinstance(count, int) else None)
        if index is None:
            ctx.warnings.append(
                f"placement: {what}: pod has no replica index label and its name does not "
                f"end in -{rtype.lower()}-<index>; pod admitted unplaced (two replicas must "
                f"never share a slot)")
            return
        try:
            key = GangKey(job.namespace, job.kind, job.name, job.uid)
            replica = ReplicaKey(rtype, index)
        except (TypeError, ValueError) as exc:
            ctx.warnings.append(f"placement: {what}: cannot identify the replica ({exc}); "
                                f"pod admitted unplaced")
            return
        counts = gpu_counts_by_replica_type(job, resources)
        written = NOTHING_WRITTEN
        own = own_record(ctx.original, job.uid)
        if own is not None:  # gputopo admitted this pod before: what it wrote is its own
            pinned = own_node(own)
            if pinned is not None and not pinned_to(network.template_spec(
                    specs if isinstance(specs, dict) else {}, job.replica_type or ""), pinned):
                unpin(ctx.pod, pinned)  # gputopo's pin, not the user's: the slot pins anew
            written = written_ports(own)
        net = self._net(ctx, settings, specs, counts, written)
        elsewhere = node_choice.chosen_elsewhere(ctx.pod)
        if elsewhere is not None:  # Kueue TAS or JobSet picks the node: no pin, no reservation
            plan = network.Plan(network.POD, "another component chooses the node; co-located "
                                "pods keep their ports in their own network namespaces")
            ctx.warnings.extend(network_writes.apply(ctx.pod, ctx.original, plan, net.job,
                                              replica.wire(), containers))
            ctx.warnings.extend(apply_unplaced(ctx.pod, {
                "placed": False, "job": what, "jobUid": key.uid, "replica": replica.wire(),
                "node": None, "gpus": [], "reason": elsewhere, "network": plan.to_json()}))
            return
        if net.need.warnings:
            ctx.warnings.extend(f"network: {w}" for w in net.need.warnings)
        if net.need.cap is not None:
            ctx.warnings.append(f"placement: {what}: {net.need.cap_why}")
        spread = spread_of(ctx.pod)  # the user's own anti-affinity and spread rules
        if spread.per_node is not None:
            ctx.warnings.append(f"placement: {what}: {spread.why}")
        gang, problems = with_needs(
            GangRequest(job.gang_size, gpus,
                        max_replicas_per_node=tighter(net.need.cap, spread.per_node)),
            needs_annotations(ctx.pod.get("metadata") or {}), job.annotations,
            compute_share=settings.compute_share, min_memory_mib=settings.min_gpu_memory_mib,
            mix_models=settings.mix_gpu_models)
        ctx.warnings.extend(f"placement: {what}: {p}; the policy's value applies"
                            for p in problems)
        preview = ctx.audit or ctx.request.dry_run
        if spread.unjudged:
            outcome: Granted | Unplaced = Unplaced(
                f"{spread.unjudged}; left to the scheduler unpinned", lasting=True)
        elif ask is not None and (ask.why_not or ask.gpus != gpus):
            why = ask.why_not or ("it asks for GPUs both as an extended resource and "
                                  "through DRA claims")
            outcome = Unplaced(f"{why}; its GPUs are left to the scheduler's DRA allocator",
                               lasting=True)
        elif len(set(counts.values())) > 1:
            shown = ", ".join(f"{t}: {n}" for t, n in sorted(counts.items()))
            outcome = Unplaced(
                f"its GPU pods ask for different numbers of GPUs ({shown}); gputopo places "
                f"gangs of equal pods only", lasting=True)
        elif preview:
            with store_deadline(self.store):
                outcome = self._preview(ctx, key, replica, gang,
                                        replica_ordinal(specs, counts, rtype, index), net)
        else:
            with store_deadline(self.store):
                outcome = self._grant(ctx, key, replica, gang, net)
        if isinstance(outcome, Unplaced) and ask is None and not outcome.lasting:
            outcome = dra_slot.extended_on_dra(ctx, outcome, resources)
        if isinstance(outcome, Granted) and ask is not None:
            outcome = dra_slot.pin_slot(ctx, key, replica, outcome, ask, self.claims,
                                        preview=preview)
        if isinstance(outcome, Granted):
            self._write_slot(ctx, key, replica, outcome, net, containers, preview=preview,
                             dra=ask is not None)
        else:
            self._unplaced(ctx, key, replica, gang, outcome, settings, net, containers,
                           preview=preview)
        if self.recorder is not None and not preview:
            self._tell(ctx, job, outcome, settings)

    def _tell(self, ctx: AdmissionContext, job: JobInfo, outcome: Granted | Unplaced,
              settings: PlacementSettings) -> None:
        """Queue the Events of this admission's outcome (built and written after the
        answer, on the recorder's thread: :func:`admission_events`)."""
        assert self.recorder is not None
        meta = ctx.pod.get("metadata") if isinstance(ctx.pod.get("metadata"), dict) else {}
        self.recorder.later(admission_events, {"metadata": {
            "name": meta.get("name") or ctx.request.name,
            "namespace": meta.get("namespace") or ctx.request.namespace}}, job, outcome,
            settings.when_full, self.can_wait)

    @staticmethod
    def _net(ctx: AdmissionContext, settings: PlacementSettings, specs: object,
             counts: Mapping[str, int], written: WrittenPorts) -> network.GangNetwork:
        job = ctx.job
        assert job is not None
        spec = ctx.pod.get("spec") if isinstance(ctx.pod.get("spec"), dict) else {}
        ospec = ctx.original.get("spec") if isinstance(ctx.original.get("spec"), dict) else {}
        return network.gang_network(job.api_version, job.kind, job.name,
                                    specs if isinstance(specs, dict) else {}, counts,
                                    mode=settings.network, pod_spec=spec, original_spec=ospec,
                                    pod_type=job.replica_type, host_ports=settings.host_ports,
                                    written=written)

    # --- deciding ------------------------------------------------------------------------
    def _grant(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, gang: GangRequest,
        net: network.GangNetwork,
    ) -> Granted | Unplaced:
        """This replica's slot: from the gang's reservation, made now if there is none."""
        fresh = False
        try:
            res = self.store.get(key)
            if res is None:
                behind, avoid = self._held_back(ctx, key)
                made = self._reserve(ctx, key, gang, net, avoid)
                if isinstance(made, Unplaced):
                    return made if behind is None else Unplaced(f"{behind}: {made.reason}")
                res, fresh = made
            size = len(res.slots[0].gpus) if res.slots else 0
            if size != gang.gpus_per_replica:
                return Unplaced(
                    f"this pod asks for {gang.gpus_per_replica} GPU(s) but the gang was "
                    f"placed with {size} per pod; gputopo places gangs of equal pods only",
                    lasting=True)
            got = self.store.assign_slot(key, replica)
            if got is None:
                return Unplaced(
                    f"all {len(res.slots)} slots reserved for the gang belong to other "
                    f"replicas ({', '.join(r.wire() for r in sorted(res.assigned))})",
                    lasting=True)
            res, slot = got
            spec = ctx.pod.get("spec") if isinstance(ctx.pod.get("spec"), dict) else {}
            problem = slot_node_problem(node_state_named(ctx.cluster, slot.node), spec, slot)
            if problem:
                moved = self._move(ctx, key, res, slot, gang, problem)
                if isinstance(moved, Unplaced):
                    return moved
                res, slot = moved, moved.slot(slot.replica)
        except ReservationUnavailable as exc:
            return Unplaced(f"the reservation store is unavailable: {exc}")
        return Granted(reservation=res, slot=slot, fresh=fresh, moved=problem,
                       plan=net.plan_for(res.network, res.slots))

    def _move(
        self, ctx: AdmissionContext, key: GangKey, res: GangReservation, slot: ReplicaSlot,
        gang: GangRequest, problem: str,
    ) -> GangReservation | Unplaced:
        """Move ``slot`` to the best free GPUs for one replica near the rest of the gang
        (see :mod:`webhook.placement.slot_repair`); re-solve when another gang takes them first."""
        # one replica with the gang's needs (GPU memory, compute share)
        one = replace(gang, replicas=1, max_replicas_per_node=None, good_gbps=None,
                      well_gbps=None)
        others = [s for s in res.slots if s.replica != slot.replica]
        for _ in range(self.max_attempts):
            fit, free, excluded = self.reserver.fit_and_free(
                ctx.cluster, ctx.pod, placement_settings(ctx.policy).transport_share)
            choice = None
            for scope in repair_scopes(free, others, gang.per_node,
                                       mix_models=gang.mix_models):
                placement = solve_fitting(self.solver, scope, one, pod_demand(ctx.pod))
                if placement.feasible:
                    choice = placement.slots[0]
                    break
            if choice is None:
                return Unplaced(_ruled_out(
                    f"{problem}, and no other node has {gang.gpus_per_replica} free GPU(s) "
                    "for this pod's slot", fit, excluded))
            try:
                moved = self.store.move_slot(key, slot.replica, choice.node, choice.gpus,
                                             from_node=slot.node)
            except ReservationConflict as exc:
                log.info("placement: %s: moving slot %d conflicted: %s", key, slot.replica,
                         exc)
                continue
            if moved is None:
                return Unplaced("the gang's reservation was released while its slot moved")
            log.warning("placement: %s: slot %d moved from %s to %s: %s", key, slot.replica,
                        slot.node, moved.slot(slot.replica).node, problem)
            return moved
        return Unplaced(f"{problem}, and the GPUs chosen for its slot were taken by "
                        f"concurrent admissions {self.max_attempts} times in a row")

    def _reserve(
        self, ctx: AdmissionContext, key: GangKey, gang: GangRequest, net: network.GangNetwork,
        avoid: frozenset[str] = frozenset(),
    ) -> tuple[GangReservation, bool] | Unplaced:
        """Solve the whole gang and reserve it (:meth:`GangReserver.reserve`, shared with
        the placement queue); the admitted pod's constraints decide for the gang."""
        settings = placement_settings(ctx.policy)
        return self.reserver.reserve(cluster=ctx.cluster, pod=ctx.pod, key=key, gang=gang,
                                     good_share=self._min_share(ctx), net=net,
                                     shares=settings.transport_share,
                                     pack_share=settings.waiting.min_share, avoid=avoid)

    def _held_back(self, ctx: AdmissionContext, key: GangKey
                   ) -> tuple[str | None, frozenset[str]]:
        """The queue's starvation guard at admission (:mod:`gputopo.placement.starvation`):
        for a NEW gang that may wait, why it waits if it does, and the nodes starving gangs
        could use well (it may not take their GPUs); (None, none) when no gang starves.
        Costs one dict look on a cluster where no gang waits."""
        waiting = getattr(ctx.cluster, "waiting_gangs", None)
        if waiting is None or not self._may_wait(ctx):
            return None, frozenset()
        gangs = waiting()
        if not gangs:
            return None, frozenset()
        now = time.time()
        nodes = ctx.cluster.node_states()
        held = starvation.holding(gangs, uid=key.uid, now=now,
                                  cluster_gpus=sum(len(n.topology.gpus) for n in nodes))
        if not held:
            return None, frozenset()
        avoid: frozenset[str] = frozenset()
        for w in held:
            avoid |= (frozenset(n.name for n in nodes) if w.request is None else
                      self.reserver.kept_for(nodes, w.request, w.rule.min_share))
        return starvation.held_text(held[0], now), avoid

    def _may_wait(self, ctx: AdmissionContext) -> bool:
        """The gang may wait for a good placement (``whenFull: wait`` and a queue runs)."""
        return self.can_wait and placement_settings(ctx.policy).when_full == WHEN_FULL_WAIT

    def _min_share(self, ctx: AdmissionContext) -> float | None:
        """The share of its best a gang needs to start at admission (its policy's
        ``minShare``), or None when it may not wait (it takes what there is)."""
        if not self._may_wait(ctx):
            return None
        return placement_settings(ctx.policy).waiting.start_share(overdue=False)

    def _preview(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, gang: GangRequest,
        ordinal: int, net: network.GangNetwork,
    ) -> Granted | Unplaced:
        """The slot this replica would get, with no side effects (audit mode, dry run)."""
        try:
            res = self.store.get(key)
            if res is None:
                behind, avoid = self._held_back(ctx, key)
                settings = placement_settings(ctx.policy)
                fit, free, excluded = self.reserver.fit_and_free(ctx.cluster, ctx.pod,
                                                                 settings.transport_share)
                if avoid:
                    free = kept_free(free, avoid)
                # solved and judged as reserve() does (GangReserver.judge: the same nodes,
                # bar and waiting check), or the preview would differ from the live answer
                judged = self.reserver.judge(fit, free, gang, pod_demand(ctx.pod),
                                             pod_volumes(ctx.cluster, ctx.pod), net=net,
                                             good_share=self._min_share(ctx),
                                             pack_share=settings.waiting.min_share)
                placement, fit = judged.placement, judged.nodes.bound
                if not placement.feasible:
                    why = _ruled_out(placement.reason or "no feasible placement", fit,
                                     excluded)
                    return Unplaced(why if behind is None else f"{behind}: {why}")
                if judged.poor is not None:
                    return (judged.poor if behind is None else
                            Unplaced(f"{behind}: {judged.poor.reason}"))
                slot_nodes = {s.node for s in placement.slots}
                plan = net.decide(placement.slots, {n.name: n.host_ports for n in fit
                                                    if n.name in slot_nodes})
                if isinstance(plan, network.PortsUsedUp):
                    return Unplaced(plan.reason)
                res = GangReservation.from_placement(key, placement, now=0.0, ttl_seconds=0.0,
                                                     order=net.order(),
                                                     network=plan.to_json())
                # Nothing is assigned in a preview, so "lowest free slot" would show slot 0
                # to every replica; the replica's position in the gang (types in spec
                # order) is what enforce mode ends up with when the operator creates the
                # pods in order.
                slot = res.slots[ordinal % len(res.slots)]
                return Granted(reservation=res, slot=slot, fresh=False, plan=plan)
        except ReservationUnavailable as exc:
            return Unplaced(f"the reservation store is unavailable: {exc}")
        number = pick_slot(res, replica)
        if number is None:
            return Unplaced(f"all {len(res.slots)} slots reserved for the gang belong to "
                            f"other replicas")
        return Granted(reservation=res, slot=res.slot(number), fresh=False,
                       plan=net.plan_for(res.network, res.slots))

    # --- writing -------------------------------------------------------------------------
    def _write_slot(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, granted: Granted,
        net: network.GangNetwork, containers: list[dict[str, Any]], *, preview: bool,
        dra: bool = False,
    ) -> None:
        res, slot = granted.reservation, granted.slot
        visible = res.visible_gpus(slot.node)
        plan = granted.plan
        # the plan's JSON replaces the stored one: not copied first (only its JSON is kept)
        record = placed_record(key, replica, res, slot, visible,
                               network=None if plan is None else plan.to_json())
        policy = ctx.policy
        ctx.warnings.extend(
            apply_slot(ctx.pod, node=slot.node, gpu_group=slot.gpus, gpu_visible=visible,
                       record=record, gpu_resources=_gpu_resources(policy),
                       warn_scheduler=_scheduler_unhandled(policy),
                       gpu_env=placement_settings(policy).gpu_env,
                       # DRA: the driver makes only the claimed devices visible (CDI)
                       containers=[] if dra else containers)
        )
        if plan is not None:
            ctx.warnings.extend(network_writes.apply(
                ctx.pod, ctx.original, plan, net.job, replica.wire(), containers,
                net.written))
        if placement_settings(policy).compute_domain == "create":
            ctx.warnings.extend(self.compute_domains.apply(ctx, res, containers,
                                                           preview=preview))
        if ctx.audit:
            ctx.warnings.append(
                f"placement (audit): would pin this pod ({replica.wire()}) to node "
                f"{slot.node}, GPUs {gpu_list(slot.gpus)} of the job's "
                f"{gpu_list(visible)} there; nothing was reserved"
            )
        if granted.moved:
            ctx.warnings.append(
                f"placement: this pod's slot moved to node {slot.node}, GPUs "
                f"{gpu_list(slot.gpus)}: {granted.moved}"
            )
        if not preview:
            metrics.tally(metrics.PLACEMENTS, "moved" if granted.moved else
                          "placed" if granted.fresh else "reused")()
        if not ctx.request.dry_run:
            metrics.tally(metrics.MUTATIONS, "placement", policy_name(policy),
                          "audit" if ctx.audit else "enforce")()

    def _unplaced(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, gang: GangRequest,
        why: Unplaced, settings: PlacementSettings, net: network.GangNetwork,
        containers: list[dict[str, Any]], *, preview: bool,
    ) -> None:
        what = f"{key.kind} {key.namespace}/{key.name}"
        demand = f"{gang.replicas} pod(s) x {gang.gpus_per_replica} GPU(s)"
        if settings.when_full == WHEN_FULL_DENY:
            message = (
                f"gputopo cannot place {what} ({demand}) on GPUs that fit together: "
                f"{why.reason}. Policy {policy_name(ctx.policy)!r} denies such pods "
                f"(placement.whenFull: deny); free GPUs, make the job smaller, or "
                f"set whenFull: wait (or admit) to run it later (or without topology "
                f"placement)."
            )
            if ctx.audit:
                ctx.warnings.append(f"placement (audit): would deny: {message}")
                return
            if not preview:
                metrics.PLACEMENTS.labels(result="denied").inc()
            ctx.deny(message)
            return
        record: dict[str, Any] = {
            "placed": False,
            "job": what,
            "jobUid": key.uid,
            "replica": replica.wire(),
            "node": None,
            "gpus": [],
            "reason": why.reason,
        }
        wait = settings.when_full == WHEN_FULL_WAIT and not why.lasting
        if wait and self.can_wait:
            plan, cap = network.waiting_plan(net.need)
            gated = replace(gang, good_gbps=None, well_gbps=None,
                            max_replicas_per_node=tighter(cap, spread_of(ctx.pod).per_node))
            record.update(waiting_record(key, gated, settings, plan, net.need.fixed))
            dra_ask = ctx.job.dra if ctx.job is not None else None
            if dra_ask is not None and dra_ask.gpus and dra_ask.why_not is None:
                # which of its claims' requests are GPUs, for the queue (placement.
                # gpuDeviceClasses of the policy that admitted it)
                record["gang"]["gpuDeviceClasses"] = list(settings.gpu_device_classes)
            ctx.warnings.extend(network_writes.apply(
                ctx.pod, ctx.original, plan, net.job, replica.wire(), containers,
                net.written))
            ctx.warnings.extend(apply_waiting(
                ctx.pod, record=record, gpu_resources=_gpu_resources(ctx.policy),
                warn_scheduler=_scheduler_unhandled(ctx.policy), gpu_env=settings.gpu_env,
                containers=containers))
            if dra_ask is not None and dra_ask.gpus and dra_ask.why_not is None:
                # spec.resourceClaims is immutable after CREATE: the names now, the claims
                # when the queue places the gang (webhook/placement/dra_slot.py)
                dra_slot.name_claims(ctx.pod, dra_ask, job=key.name, replica=replica.wire())
            prefix = "placement (audit): would gate" if ctx.audit else "placement:"
            ctx.warnings.append(
                f"{prefix} {what} ({demand}) waits for a placement: {why.reason}; its pods "
                f"are held by the scheduling gate {names.PLACEMENT_GATE} until the queue "
                f"places the whole gang: "
                f"{after_max_wait_text(settings.waiting, settings.max_wait_seconds)}")
            if not preview:
                metrics.PLACEMENTS.labels(result="gated").inc()
            return
        # Unpinned, the scheduler may put replicas anywhere: ports the operator declared
        # keep them apart (NodePorts), but sshd of MPIJob v2beta1 workers is declared
        # nowhere, so those take the pod network (as "after-solve" would for a shared node).
        plan = None
        if net.need.kind in (network.POD, "after-solve"):
            plan = network.Plan(network.POD, net.need.why or "pod networking: the gang is "
                                "unplaced, so no two workers can be kept off one node")
            record["network"] = plan.to_json()
        ctx.warnings.extend(apply_unplaced(ctx.pod, record))
        if plan is not None:
            ctx.warnings.extend(network_writes.apply(
                ctx.pod, ctx.original, plan, net.job, replica.wire(), containers,
                net.written))
        prefix = "placement (audit): would leave" if ctx.audit else "placement:"
        note = ("" if not wait else "; whenFull: wait needs the placement queue, which runs "
                "only in a webhook with a live cluster")
        ctx.warnings.append(
            f"{prefix} {what} ({demand}) left unplaced: {why.reason}; admitted without "
            f"node or GPU pinning{note}"
        )
        if not preview:
            metrics.PLACEMENTS.labels(result="unplaced").inc()


def store_deadline(store: object) -> AbstractContextManager[None]:
    """The store's per-admission deadline (API-backed stores have one), else nothing: an
    admission must answer inside the webhook's timeout even when the API is slow."""
    deadline = getattr(store, "deadline", None)
    return deadline(STORE_SECONDS) if deadline is not None else _NO_DEADLINE


#: One "nothing" for every admission: a nullcontext keeps no state, so it can be entered
#: again and again (one object fewer to build per GPU pod).
_NO_DEADLINE: AbstractContextManager[None] = contextlib.nullcontext()


def _gpu_resources(policy: Policy | None) -> frozenset[str]:
    """GPU resource names of the matched policy (before and after its rename)."""
    return policy.gpu_resources if policy is not None else GPU_RESOURCES


def _scheduler_unhandled(policy: Policy | None) -> bool:
    """False when the policy's own mutations already set schedulerName (and warned)."""
    return policy is None or policy.mutations.scheduler_name is None


def make_placement_step(store: ReservationStore | None = None, *,
                        can_wait: bool = False,
                        recorder: events.EventRecorder | None = None) -> PlacementStep:
    """The placement step for ``build_admitter(..., placement=...)``.

    Without a store: an in-memory one (``gputopo mutate``, the demo, file-backed ``serve``);
    a live server with API access passes a KubernetesReservationStore. ``can_wait``: gate
    gangs that do not fit as the live webhook does (``gputopo mutate`` shows that answer).
    """
    return PlacementStep(store, can_wait=can_wait, recorder=recorder)


def placement_step_for(cluster: object, *, can_wait: bool = False,
                       recorder: events.EventRecorder | None = None) -> PlacementStep:
    """The placement step ``gputopo serve`` uses for ``cluster``.

    A live cluster view (``gputopo.cluster.view.ClusterView``) carries the reservation store
    it releases deleted jobs from (``reservations``) and the official client it watches with
    (``api_client``): the step shares that store — or builds a KubernetesReservationStore on
    that client — so reservations live in the API, shared by every webhook replica and
    surviving restarts. A fixed cluster (a file, the demo) gets an in-memory store: one
    process, nothing to share. ``can_wait``: a placement queue runs (``gputopo serve`` on a
    live cluster), so ``whenFull: wait`` gates gangs that do not fit. ``recorder``: the
    Kubernetes Events of each outcome (webhook/events.py).
    """
    store = getattr(cluster, "reservations", None)
    api = getattr(cluster, "api_client", None)
    # the ResourceClaims that pin DRA replicas: created in the API where there is one
    claims = KubernetesClaims(api) if api is not None else None
    if store is not None:
        return PlacementStep(store, can_wait=can_wait, recorder=recorder, claims=claims)
    if api is not None:
        from gputopo.cluster.k8s_reservations import KubernetesReservationStore

        return PlacementStep(KubernetesReservationStore(api), can_wait=can_wait,
                             recorder=recorder, claims=claims)
    return PlacementStep()
