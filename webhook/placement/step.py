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

No placement (cluster full, gang larger than the cluster, store unreachable): the policy's
``placement.onUnplaceable`` decides — ``admit`` (default: the pod keeps the gang labels, gets
no pin, a warning and the reason in the placement record) or ``deny`` (a message a user can
act on). Audit mode changes nothing and reserves nothing; warnings say what would be done.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from gputopo.cluster.node_fit import NodeFacts, PodConstraints
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
from gputopo.placement.types import GangRequest, NodeState, Placement, ReplicaSlot
from webhook import metrics
from webhook.jobs import pod_gpus
from webhook.placement import network
from webhook.placement.mutations import (
    GPU_RESOURCES,
    apply_slot,
    apply_unplaced,
    gpu_containers,
    gpu_list,
)
from webhook.placement.slot_repair import repair_scopes, slot_node_problem
from webhook.policy.schema import OWNER_KINDS, PlacementSettings, Policy
from webhook.steps import AdmissionContext, JobInfo

log = logging.getLogger(__name__)

Solver = Callable[[Sequence[NodeState], GangRequest], Placement]

#: Re-solves after a ReservationConflict before the gang is declared unplaceable. Each
#: conflict means another admission won a GPU we wanted; a handful of rounds settles any
#: realistic burst, and the bound keeps one admission well inside the webhook timeout.
DEFAULT_MAX_ATTEMPTS = 5
#: How long a gang that found the cluster full right after a conflict waits for a concurrent
#: admission of the same gang to finish writing its reservation (claims, then the gang
#: record: a few API round trips).
DEFAULT_SETTLE_SECONDS = 0.5
#: Seconds one admission may spend talking to an API-backed reservation store: the webhook's
#: timeoutSeconds is 5, and the solve, the patch and the HTTPS round trip need the rest.
STORE_SECONDS = 3.0
ON_UNPLACEABLE_ADMIT = "admit"
ON_UNPLACEABLE_DENY = "deny"


@dataclass(frozen=True)
class Unplaced:
    """Why a replica got no slot, in a sentence a user understands."""

    reason: str


@dataclass(frozen=True)
class Granted:
    """A replica's slot and the reservation it came from; ``fresh``: reserved just now."""

    reservation: GangReservation
    slot: ReplicaSlot
    fresh: bool
    moved: str = ""  # why the slot just left its node ("" when it did not)
    plan: network.Plan | None = None  # the gang's network plan


@dataclass(frozen=True)
class Net:
    """What the network plan of this pod's gang reads (see webhook/placement/network.py)."""

    job: network.Job
    need: network.Needs
    host_ports: tuple[int, int]

    def order(self) -> list[str]:
        return network.ordered_replicas(self.job)

    def plan_for(self, res: GangReservation) -> network.Plan:
        """The plan stored with ``res``; for a reservation written before plans existed,
        the plan this gang would get now (no host ports known: none are held)."""
        stored = network.Plan.from_json(res.network)
        if stored is not None:
            return stored
        plan = network.decide(self.need, self.job, res.slots, {}, self.host_ports)
        return plan if isinstance(plan, network.Plan) else network.Plan(network.POD, "")


def without_fixed_ports(nodes: Sequence[NodeState], fixed: frozenset[tuple[str, int]]
                        ) -> list[NodeState]:
    """Nodes where none of the gang's unmovable host ports is held already."""
    if not fixed:
        return list(nodes)
    return [n for n in nodes if not (n.host_ports & fixed)]


def placement_settings(policy: Policy | None) -> PlacementSettings:
    """The primary policy's placement section (no policy: the defaults)."""
    return policy.placement if policy is not None else PlacementSettings()


def policy_name(policy: Policy | None) -> str:
    """The matched policy's name, for metrics and messages."""
    return policy.name if policy is not None else "?"


def gpu_counts_by_replica_type(job: JobInfo, gpu_resources: frozenset[str]) -> dict[str, int]:
    """GPUs per pod of each GPU-requesting replica type of the job's spec."""
    specs = job.spec.get(OWNER_KINDS.get((job.api_version, job.kind), ""), {})
    out: dict[str, int] = {}
    for rtype, rs in specs.items() if isinstance(specs, Mapping) else ():
        template = rs.get("template") if isinstance(rs, Mapping) else None
        tspec = template.get("spec") if isinstance(template, Mapping) else None
        gpus = pod_gpus(tspec, gpu_resources) if isinstance(tspec, Mapping) else 0
        if gpus > 0:
            out[str(rtype)] = gpus
    return out


HeldMemo = dict[str, tuple[NodeState, frozenset[int], NodeState]]


def exclude_held(nodes: Sequence[NodeState], held: Mapping[str, set[int]],
                 memo: HeldMemo | None = None) -> list[NodeState]:
    """Nodes with reserved GPUs marked used, so the solver never offers them again.

    ``memo`` (the placement step's, refilled on every call) keeps the NodeState made for a
    node whose state and reserved GPUs did not change since the last gang: a third of a
    1,000-node cluster holds reserved GPUs, and one frozen-dataclass copy each is ~0.5 ms
    per new gang; with the memo only the few nodes that changed are copied.
    """
    old = memo if memo is not None else {}
    fresh: HeldMemo = {}
    out = []
    for n in nodes:
        extra = held.get(n.name)
        if not extra:
            out.append(n)
            continue
        hit = old.get(n.name)
        if hit is None or hit[0] is not n or hit[1] != extra:
            # built directly: dataclasses.replace re-runs field introspection per node,
            # twice the cost of the whole loop at 1,000 nodes (bench/admission.py); every
            # field is passed on (tests/placement_step/test_exclude_held.py checks that)
            hit = (n, frozenset(extra), NodeState(
                name=n.name, topology=n.topology, used=n.used | frozenset(extra), zone=n.zone,
                rack=n.rack, network_gbps=n.network_gbps,
                network_transport=n.network_transport, facts=n.facts,
                host_ports=n.host_ports))
        fresh[n.name] = hit
        out.append(hit[2])
    if memo is not None:
        memo.clear()
        memo.update(fresh)
    return out


def _default_solver() -> Solver:
    from gputopo.placement.solver import solve  # the solver area's module

    return solve


def replica_index(
    pod: dict[str, Any], job_name: str, replica_type: str, labelled: int | None, gang_size: int,
    type_replicas: int | None = None,
) -> int | None:
    """The replica's index: its label, else the ``<job>-<type>-<index>`` pod name every
    Kubeflow operator gives, else 0 for a gang of one or the only replica of its type
    (``type_replicas == 1``: an mpi-operator v2beta1 launcher with GPUs, whose pod its
    batch Job creates from ``generateName`` with no index label); None when it cannot be
    known.

    Why not default to 0: two replicas keyed alike would be handed the same GPUs.
    """
    if labelled is not None:
        return labelled
    name = (pod.get("metadata") or {}).get("name")
    if isinstance(name, str):
        m = re.fullmatch(re.escape(f"{job_name}-{replica_type.lower()}-") + r"(\d{1,6})", name)
        if m:
            return int(m.group(1))
    return 0 if gang_size == 1 or type_replicas == 1 else None


def replica_ordinal(specs: object, gpu_types: Mapping[str, int], replica_type: str,
                    index: int) -> int:
    """Position of replica ``index`` of ``replica_type`` among all GPU replicas of the job
    (types in spec order), so that previews of Master 0 and Worker 0 show different slots."""
    offset = 0
    for rtype in gpu_types:
        if rtype == replica_type:
            return offset + index
        rs = specs.get(rtype) if isinstance(specs, Mapping) else None
        count = rs.get("replicas", 1) if isinstance(rs, Mapping) else 1
        offset += count if isinstance(count, int) and count >= 0 else 1
    return index


def nodes_for_pod(ctx: AdmissionContext) -> tuple[list[NodeState], int]:
    """The topology nodes this pod could be scheduled on at all (its nodeSelector, required
    node affinity and tolerations), and how many were ruled out. A node whose object the
    cluster view does not hold is kept: nothing is known against it.

    Why the facts on each NodeState: this runs over every node of the cluster for each new
    gang, inside its admission; looking each Node object up and re-reading its labels and
    taints cost ~3 ms at 1,000 nodes, about as much as the solve itself.
    """
    nodes = ctx.cluster.node_states()
    spec = ctx.pod.get("spec") if isinstance(ctx.pod.get("spec"), dict) else {}
    pod = PodConstraints.of(spec)
    fit = []
    for n in nodes:
        facts = n.facts
        if facts is None:  # a reader that builds bare NodeStates: read the object
            node = ctx.cluster.object(api_version="v1", kind="Node", namespace=None,
                                      name=n.name)
            facts = NodeFacts.of(node) if node is not None else None
        if facts is None or pod.admits(facts):
            fit.append(n)
    return fit, len(nodes) - len(fit)


def _ruled_out(reason: str, fit: Sequence[NodeState], excluded: int) -> str:
    if not excluded:
        return reason
    if not fit:
        return (f"none of the {excluded} topology node(s) fits the pod's nodeSelector, "
                f"required node affinity and tolerations")
    return (f"{reason} ({excluded} node(s) left out: the pod's nodeSelector, required node "
            f"affinity or missing tolerations rule them out)")


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
    ) -> None:
        self.store: ReservationStore = store if store is not None else InMemoryReservationStore()
        self._solver = solver
        self.max_attempts = max(1, int(max_attempts))
        self.settle_seconds = max(0.0, float(settle_seconds))
        self._held_memo: HeldMemo = {}  # exclude_held's copies, reused across gangs

    @property
    def solver(self) -> Solver:
        if self._solver is None:
            self._solver = _default_solver()
        return self._solver

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
        if gpus <= 0 or not gpu_containers(ctx.pod, resources):
            return
        what = f"{job.kind} {job.namespace}/{job.name}"
        if (ctx.pod.get("spec") or {}).get("nodeName"):
            ctx.warnings.append(f"placement: pod already bound to a node; {what} not placed")
            return
        rtype = job.replica_type or job.role or "replica"
        specs = job.spec.get(OWNER_KINDS.get((job.api_version, job.kind), ""), {})
        rs = specs.get(job.replica_type) if isinstance(specs, Mapping) else None
        count = rs.get("replicas", 1) if isinstance(rs, Mapping) else None
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
        net = self._net(ctx, settings, specs, counts)
        ctx.warnings.extend(f"network: {w}" for w in net.need.warnings)
        if net.need.cap is not None:
            ctx.warnings.append(f"placement: {what}: {net.need.cap_why}")
        gang = GangRequest(replicas=job.gang_size, gpus_per_replica=gpus,
                           max_replicas_per_node=net.need.cap)
        preview = ctx.audit or ctx.request.dry_run
        if len(set(counts.values())) > 1:
            shown = ", ".join(f"{t}: {n}" for t, n in sorted(counts.items()))
            outcome: Granted | Unplaced = Unplaced(
                f"its GPU pods ask for different numbers of GPUs ({shown}); gputopo places "
                f"gangs of equal pods only")
        elif preview:
            with store_deadline(self.store):
                outcome = self._preview(ctx, key, replica, gang,
                                        replica_ordinal(specs, counts, rtype, index), net)
        else:
            with store_deadline(self.store):
                outcome = self._grant(ctx, key, replica, gang, net)
        if isinstance(outcome, Granted):
            self._write_slot(ctx, key, replica, outcome, net, preview=preview)
        else:
            self._unplaced(ctx, key, replica, gang, outcome, settings, net, preview=preview)

    @staticmethod
    def _net(ctx: AdmissionContext, settings: PlacementSettings, specs: object,
             counts: Mapping[str, int]) -> Net:
        job = ctx.job
        assert job is not None
        facts = network.job_facts(job.api_version, job.kind, job.name,
                                  specs if isinstance(specs, Mapping) else {}, counts)
        spec = ctx.pod.get("spec") if isinstance(ctx.pod.get("spec"), dict) else {}
        ospec = ctx.original.get("spec") if isinstance(ctx.original.get("spec"), dict) else {}
        need = network.needs(facts, mode=settings.network, pod_spec=spec, original_spec=ospec,
                             pod_type=job.replica_type)
        return Net(job=facts, need=need, host_ports=settings.host_ports)

    # --- deciding ------------------------------------------------------------------------
    def _grant(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, gang: GangRequest,
        net: Net,
    ) -> Granted | Unplaced:
        """This replica's slot: from the gang's reservation, made now if there is none."""
        fresh = False
        try:
            res = self.store.get(key)
            if res is None:
                made = self._reserve(ctx, key, gang, net)
                if isinstance(made, Unplaced):
                    return made
                res, fresh = made
            size = len(res.slots[0].gpus) if res.slots else 0
            if size != gang.gpus_per_replica:
                return Unplaced(
                    f"this pod asks for {gang.gpus_per_replica} GPU(s) but the gang was "
                    f"placed with {size} per pod; gputopo places gangs of equal pods only"
                )
            got = self.store.assign_slot(key, replica)
            if got is None:
                return Unplaced(
                    f"all {len(res.slots)} slots reserved for the gang belong to other "
                    f"replicas ({', '.join(r.wire() for r in sorted(res.assigned))})"
                )
            res, slot = got
            spec = ctx.pod.get("spec") if isinstance(ctx.pod.get("spec"), dict) else {}
            problem = slot_node_problem(ctx.cluster.node_states(), spec, slot)
            if problem:
                moved = self._move(ctx, key, res, slot, gang, problem)
                if isinstance(moved, Unplaced):
                    return moved
                res, slot = moved, moved.slot(slot.replica)
        except ReservationUnavailable as exc:
            return Unplaced(f"the reservation store is unavailable: {exc}")
        return Granted(reservation=res, slot=slot, fresh=fresh, moved=problem,
                       plan=net.plan_for(res))

    def _move(
        self, ctx: AdmissionContext, key: GangKey, res: GangReservation, slot: ReplicaSlot,
        gang: GangRequest, problem: str,
    ) -> GangReservation | Unplaced:
        """Move ``slot`` to the best free GPUs for one replica near the rest of the gang
        (see :mod:`webhook.placement.slot_repair`); re-solve when another gang takes them first."""
        one = GangRequest(1, gang.gpus_per_replica)
        others = [s for s in res.slots if s.replica != slot.replica]
        for _ in range(self.max_attempts):
            fit, excluded = nodes_for_pod(ctx)
            free = exclude_held(fit, self.store.held_gpus(), self._held_memo)
            choice = None
            for scope in repair_scopes(free, others, gang.per_node):
                placement = self.solver(scope, one)
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
        self, ctx: AdmissionContext, key: GangKey, gang: GangRequest, net: Net
    ) -> tuple[GangReservation, bool] | Unplaced:
        """Solve the whole gang and reserve it; re-solve on conflict, a bounded number of times.

        Another admission of THIS gang (two webhook replicas got two of its pods at once)
        may have claimed its GPUs without having written its reservation yet: solving then
        finds the cluster "full" of our own gang, or reserving conflicts with it. So after a
        conflict the step waits a moment (jittered backoff) and looks for the gang's
        reservation before re-solving; and before declaring the gang unplaceable while
        GPUs of reservations still being written are in the way (it would fit without
        them), it waits up to ``settle_seconds`` for the gang's reservation to appear. A
        cluster merely full of settled reservations costs no wait.
        """
        last = ""
        try:  # abandoned gangs free their GPUs before we look for free ones
            self.store.expire()
        except ReservationUnavailable as exc:
            log.warning("placement: expiring reservations failed (next gang retries): %s", exc)
        no_ports: dict[str, str] = {}  # nodes whose port range is used up → why
        for attempt in range(1, self.max_attempts + 1):
            bound, excluded = nodes_for_pod(ctx)
            bound = [n for n in without_fixed_ports(bound, net.need.fixed)
                     if n.name not in no_ports]
            held = self.store.held_gpus()
            placement = self.solver(exclude_held(bound, held, self._held_memo), gang)
            if not placement.feasible:
                # After a conflict, or when GPUs claimed by a reservation still being written
                # stand in the way, they may be going to this very gang: give it a moment.
                # The look for the gang's reservation comes AFTER the in-flight analysis
                # (which lists reservations), so a reservation written meanwhile is seen.
                waiting = bool(last) or self._in_flight_blocks(bound, held, gang)
                existing = self._await_reservation(key) if waiting else self.store.get(key)
                if existing is not None:
                    return existing, False
                reason = placement.reason or "no feasible placement"
                if no_ports:
                    reason += "; " + "; ".join(sorted(no_ports.values()))
                return Unplaced(_ruled_out(reason, bound, excluded))
            ports = {n.name: n.host_ports for n in bound}
            plan = network.decide(net.need, net.job, placement.slots, ports, net.host_ports)
            if isinstance(plan, network.PortsUsedUp):
                no_ports[plan.node] = plan.reason
                continue
            try:
                res = self.store.reserve(key, placement, order=net.order(),
                                         network=plan.to_json())
            except ReservationConflict as exc:
                last = str(exc)
                log.info("placement: %s: conflict on attempt %d: %s", key, attempt, exc)
                existing = self._await_reservation(key, backoff=attempt)
                if existing is not None:
                    return existing, False
                continue
            # reserve() returns the existing reservation when a concurrent admission of the
            # same gang won: then this pod did not place the gang, it reuses it.
            return res, res.slots == tuple(sorted(placement.slots, key=lambda s: s.replica))
        return Unplaced(
            f"the GPUs chosen were taken by concurrent admissions {self.max_attempts} times "
            f"in a row (last: {last})"
        )

    def _in_flight_blocks(
        self, bound: Sequence[NodeState], held: Mapping[str, set[int]], gang: GangRequest
    ) -> bool:
        """True when GPUs claimed by reservations not yet written (held, but in no listed
        reservation) are all that keeps the gang from fitting."""
        committed: dict[str, set[int]] = {}
        for res in self.store.list():
            for node, gpus in res.gpus().items():
                committed.setdefault(node, set()).update(gpus)
        settled = {n: g & committed.get(n, set()) for n, g in held.items()}
        if settled == {n: set(g) for n, g in held.items()}:
            return False  # nothing in flight
        return self.solver(exclude_held(bound, settled), gang).feasible

    def _await_reservation(self, key: GangKey, *, backoff: int = 0) -> GangReservation | None:
        """The gang's reservation if another admission writes it within a short wait.

        ``backoff`` > 0: one jittered sleep of about ``backoff`` x 20 ms, then a look (a
        re-solve follows when there is none). 0: poll for up to ``settle_seconds``.
        """
        if backoff > 0:
            time.sleep(random.uniform(0.5, 1.5) * 0.02 * backoff)
            return self.store.get(key)
        deadline = time.monotonic() + self.settle_seconds
        while True:
            existing = self.store.get(key)
            if existing is not None or time.monotonic() >= deadline:
                return existing
            time.sleep(0.02)

    def _preview(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, gang: GangRequest,
        ordinal: int, net: Net,
    ) -> Granted | Unplaced:
        """The slot this replica would get, with no side effects (audit mode, dry run)."""
        try:
            res = self.store.get(key)
            if res is None:
                fit, excluded = nodes_for_pod(ctx)
                fit = without_fixed_ports(fit, net.need.fixed)
                nodes = exclude_held(fit, self.store.held_gpus(), self._held_memo)
                placement = self.solver(nodes, gang)
                if not placement.feasible:
                    return Unplaced(_ruled_out(placement.reason or "no feasible placement",
                                               fit, excluded))
                plan = network.decide(net.need, net.job, placement.slots,
                                      {n.name: n.host_ports for n in fit}, net.host_ports)
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
                       plan=net.plan_for(res))

    # --- writing -------------------------------------------------------------------------
    def _write_slot(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, granted: Granted,
        net: Net, *, preview: bool,
    ) -> None:
        res, slot = granted.reservation, granted.slot
        visible = res.visible_gpus(slot.node)
        record = {
            "placed": True,
            "job": f"{key.kind} {key.namespace}/{key.name}",
            "jobUid": key.uid,
            "replica": replica.wire(),
            "node": slot.node,
            "gpus": list(slot.gpus),
            "gpuVisible": list(visible),
            "busBandwidthGBps": round(res.bus_bandwidth_gbps, 3),
            "reason": res.reason,
        }
        plan = granted.plan
        if plan is not None:
            record["network"] = plan.to_json()
        policy = ctx.policy
        ctx.warnings.extend(
            apply_slot(ctx.pod, node=slot.node, gpu_group=slot.gpus, gpu_visible=visible,
                       record=record, gpu_resources=_gpu_resources(policy),
                       warn_scheduler=_scheduler_unhandled(policy))
        )
        if plan is not None:
            ctx.warnings.extend(network.apply(
                ctx.pod, ctx.original, plan, net.job, replica.wire(),
                gpu_containers(ctx.pod, _gpu_resources(policy))))
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
            metrics.PLACEMENTS.labels(result="moved" if granted.moved else
                                      "placed" if granted.fresh else "reused").inc()
        if not ctx.request.dry_run:
            metrics.MUTATIONS.labels(
                kind="placement", policy=policy_name(policy),
                mode="audit" if ctx.audit else "enforce",
            ).inc()

    def _unplaced(
        self, ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, gang: GangRequest,
        why: Unplaced, settings: PlacementSettings, net: Net, *, preview: bool,
    ) -> None:
        what = f"{key.kind} {key.namespace}/{key.name}"
        demand = f"{gang.replicas} pod(s) x {gang.gpus_per_replica} GPU(s)"
        if settings.on_unplaceable == ON_UNPLACEABLE_DENY:
            message = (
                f"gputopo cannot place {what} ({demand}) on GPUs that fit together: "
                f"{why.reason}. Policy {policy_name(ctx.policy)!r} denies such pods "
                f"(placement.onUnplaceable: deny); free GPUs, make the job smaller, or "
                f"set onUnplaceable: admit to run it without topology placement."
            )
            if ctx.audit:
                ctx.warnings.append(f"placement (audit): would deny: {message}")
                return
            if not preview:
                metrics.PLACEMENTS.labels(result="denied").inc()
            ctx.deny(message)
            return
        record = {
            "placed": False,
            "job": what,
            "jobUid": key.uid,
            "replica": replica.wire(),
            "node": None,
            "gpus": [],
            "reason": why.reason,
        }
        ctx.warnings.extend(apply_unplaced(ctx.pod, record))
        # Unpinned, the scheduler may put replicas anywhere: ports the operator declared
        # keep them apart (NodePorts), but sshd of MPIJob v2beta1 workers is declared
        # nowhere, so those take the pod network (as "after-solve" would for a shared node).
        if net.need.kind in (network.POD, "after-solve"):
            plan = network.Plan(network.POD, net.need.why or "pod networking: the gang is "
                                "unplaced, so no two workers can be kept off one node")
            record["network"] = plan.to_json()
            apply_unplaced(ctx.pod, record)
            ctx.warnings.extend(network.apply(
                ctx.pod, ctx.original, plan, net.job, replica.wire(),
                gpu_containers(ctx.pod, _gpu_resources(ctx.policy))))
        prefix = "placement (audit): would leave" if ctx.audit else "placement:"
        ctx.warnings.append(
            f"{prefix} {what} ({demand}) left unplaced: {why.reason}; admitted without "
            f"node or GPU pinning"
        )
        if not preview:
            metrics.PLACEMENTS.labels(result="unplaced").inc()


def store_deadline(store: object) -> AbstractContextManager[None]:
    """The store's per-admission deadline (API-backed stores have one), else nothing: an
    admission must answer inside the webhook's timeout even when the API is slow."""
    deadline = getattr(store, "deadline", None)
    return deadline(STORE_SECONDS) if deadline is not None else contextlib.nullcontext()


def _gpu_resources(policy: Policy | None) -> frozenset[str]:
    """GPU resource names of the matched policy (before and after its rename)."""
    return policy.gpu_resources if policy is not None else GPU_RESOURCES


def _scheduler_unhandled(policy: Policy | None) -> bool:
    """False when the policy's own mutations already set schedulerName (and warned)."""
    return policy is None or policy.mutations.scheduler_name is None


def make_placement_step(store: ReservationStore | None = None) -> PlacementStep:
    """The placement step for ``build_admitter(..., placement=...)``.

    Without a store: an in-memory one (``gputopo mutate``, the demo, file-backed ``serve``);
    a live server with API access passes a KubernetesReservationStore.
    """
    return PlacementStep(store)


def placement_step_for(cluster: object) -> PlacementStep:
    """The placement step ``gputopo serve`` uses for ``cluster``.

    A live cluster view (``gputopo.cluster.view.ClusterView``) carries the reservation store
    it releases deleted jobs from (``reservations``) and the official client it watches with
    (``api_client``): the step shares that store — or builds a KubernetesReservationStore on
    that client — so reservations live in the API, shared by every webhook replica and
    surviving restarts. A fixed cluster (a file, the demo) gets an in-memory store: one
    process, nothing to share.
    """
    store = getattr(cluster, "reservations", None)
    if store is not None:
        return PlacementStep(store)
    api = getattr(cluster, "api_client", None)
    if api is not None:
        from gputopo.cluster.k8s_reservations import KubernetesReservationStore

        return PlacementStep(KubernetesReservationStore(api))
    return PlacementStep()
