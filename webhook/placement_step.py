"""The placement step of the admission pipeline: a gang is placed at its first GPU pod.

Why at admission: the pods of a training job arrive one by one, but where they should run
is a property of the whole gang (all four workers on one NVLink quad beats four scattered
GPUs). So the first GPU pod of a job triggers the solver for the WHOLE gang, the answer is
reserved in a :class:`~gputopo.cluster.reservations.ReservationStore`, and every pod of the
gang (the first one included) then takes its slot from that reservation: a required node
affinity pinning the node, the GPU index annotations, the visible-devices env and the
placement record (see :mod:`webhook.placement_mutations`).

Identity: a reservation is keyed by the job's (namespace, kind, name, uid), a slot by
(replica type, replica index). A pod recreated for the same replica gets the SAME slot; a
pod of another job that copies this job's labels has another owner uid, so another key,
and cannot take this job's GPUs.

Concurrency: ``reserve`` is all-or-nothing. When another admission (this process or another
webhook replica) took one of the chosen GPUs first, it raises ReservationConflict and the
step re-solves against the fresh set of held GPUs, a bounded number of times.

No placement (cluster full, gang larger than the cluster, store unreachable): the policy's
``placement.onUnplaceable`` decides — ``admit`` (default: the pod keeps the gang labels, gets
no pin, a warning and the reason in the placement record) or ``deny`` (a message a user can
act on). Audit mode changes nothing and reserves nothing; warnings say what would be done.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from webhook.placement_mutations import (
    GPU_RESOURCES,
    apply_slot,
    apply_unplaced,
    gpu_containers,
    gpu_list,
    pod_gpu_count,
)

log = logging.getLogger(__name__)

Solver = Callable[[Sequence[NodeState], GangRequest], Placement]

#: Re-solves after a ReservationConflict before the gang is declared unplaceable. Each
#: conflict means another admission won a GPU we wanted; a handful of rounds settles any
#: realistic burst, and the bound keeps one admission well inside the webhook timeout.
DEFAULT_MAX_ATTEMPTS = 5
ON_UNPLACEABLE_ADMIT = "admit"
ON_UNPLACEABLE_DENY = "deny"


@dataclass(frozen=True)
class PlacementSettings:
    """The policy's ``placement`` section, as this step reads it."""

    enabled: bool = True
    on_unplaceable: str = ON_UNPLACEABLE_ADMIT


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


def _field(obj: object, *names: str, default: Any = None) -> Any:
    """Read the first present attribute or key among ``names`` (dataclass or mapping)."""
    for name in names:
        if isinstance(obj, Mapping):
            if name in obj:
                return obj[name]
        elif hasattr(obj, name):
            return getattr(obj, name)
    return default


def placement_settings(policy: object) -> PlacementSettings:
    """The policy's placement section; absent → enabled, admit when unplaceable."""
    if policy is None:
        return PlacementSettings()
    section = _field(policy, "placement")
    if section is None:
        spec = _field(policy, "spec")
        section = _field(spec, "placement") if spec is not None else None
    if section is None:
        return PlacementSettings()
    enabled = _field(section, "enabled", default=True)
    mode = _field(section, "on_unplaceable", "onUnplaceable", default=ON_UNPLACEABLE_ADMIT)
    mode = getattr(mode, "value", mode)  # an Enum member reads as its value
    return PlacementSettings(enabled=bool(enabled), on_unplaceable=str(mode).lower())


def policy_name(policy: object) -> str:
    """The matched policy's name, for metrics and messages."""
    name = _field(policy, "name")
    if name is None:
        meta = _field(policy, "metadata")
        name = _field(meta, "name") if meta is not None else None
    return str(name) if name else "?"


def exclude_held(nodes: Sequence[NodeState], held: Mapping[str, set[int]]) -> list[NodeState]:
    """Nodes with reserved GPUs marked used, so the solver never offers them again."""
    out = []
    for n in nodes:
        extra = held.get(n.name)
        out.append(dataclasses.replace(n, used=n.used | frozenset(extra)) if extra else n)
    return out


def _default_solver() -> Solver:
    from gputopo.placement.solver import solve  # the solver area's module

    return solve


class PlacementStep:
    """The pipeline step (``webhook.steps.Step``): name ``placement``, ``apply(ctx)``."""

    name = "placement"

    def __init__(
        self,
        store: ReservationStore | None = None,
        *,
        solver: Solver | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.store: ReservationStore = store if store is not None else InMemoryReservationStore()
        self._solver = solver
        self.max_attempts = max(1, int(max_attempts))

    @property
    def solver(self) -> Solver:
        if self._solver is None:
            self._solver = _default_solver()
        return self._solver

    # --- the step ------------------------------------------------------------------------
    def apply(self, ctx: Any) -> None:
        """Give this pod its slot of the gang (placing the gang first if needed)."""
        job = getattr(ctx, "job", None)
        if job is None or _field(job, "requests_gpu", default=True) is False:
            return
        settings = placement_settings(getattr(ctx, "policy", None))
        if not settings.enabled:
            return
        pod = ctx.pod
        gpus = int(_field(job, "gpus_per_pod", default=0) or 0) or pod_gpu_count(
            pod, _gpu_resources(ctx.policy))
        if gpus <= 0 or not gpu_containers(pod, _gpu_resources(ctx.policy)):
            return  # a launcher or any pod without GPUs: no slot
        what = f"{job.kind} {job.namespace}/{job.name}"
        if (pod.get("spec") or {}).get("nodeName"):
            ctx.warnings.append(f"placement: pod already bound to a node; {what} not placed")
            return
        gang_size = int(_field(job, "gang_size", default=0) or 0)
        uid = _field(job, "uid", default="") or ""
        if gang_size <= 0 or not uid:
            ctx.warnings.append(
                f"placement: {what}: gang size or job uid unknown; pod admitted unplaced"
            )
            return
        rtype = _field(job, "replica_type") or _field(job, "role") or "replica"
        index = _field(job, "replica_index")
        try:
            key = GangKey(str(job.namespace or ""), str(job.kind or ""), str(job.name or ""),
                          str(uid))
            replica = ReplicaKey(str(rtype), int(index) if index is not None else 0)
        except (TypeError, ValueError) as exc:
            ctx.warnings.append(f"placement: {what}: cannot identify the replica ({exc}); "
                                f"pod admitted unplaced")
            return
        gang = GangRequest(replicas=gang_size, gpus_per_replica=gpus)
        request = getattr(ctx, "request", None)
        preview = bool(ctx.audit or getattr(request, "dry_run", False))
        outcome = (self._preview(ctx, key, replica, gang) if preview
                   else self._grant(ctx, key, replica, gang))
        if isinstance(outcome, Granted):
            self._write_slot(ctx, key, replica, outcome, preview=preview)
        else:
            self._unplaced(ctx, key, replica, gang, outcome, settings, preview=preview)

    # --- deciding ------------------------------------------------------------------------
    def _grant(
        self, ctx: Any, key: GangKey, replica: ReplicaKey, gang: GangRequest
    ) -> Granted | Unplaced:
        """This replica's slot: from the gang's reservation, made now if there is none."""
        fresh = False
        try:
            res = self.store.get(key)
            if res is None:
                made = self._reserve(ctx, key, gang)
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
        except ReservationUnavailable as exc:
            return Unplaced(f"the reservation store is unavailable: {exc}")
        res, slot = got
        return Granted(reservation=res, slot=slot, fresh=fresh)

    def _reserve(
        self, ctx: Any, key: GangKey, gang: GangRequest
    ) -> tuple[GangReservation, bool] | Unplaced:
        """Solve the whole gang and reserve it; re-solve on conflict, a bounded number of times."""
        last = ""
        try:  # abandoned gangs free their GPUs before we look for free ones
            self.store.expire()
        except ReservationUnavailable as exc:
            log.warning("placement: expiring reservations failed (next gang retries): %s", exc)
        for attempt in range(1, self.max_attempts + 1):
            nodes = exclude_held(ctx.cluster.node_states(), self.store.held_gpus())
            placement = self.solver(nodes, gang)
            if not placement.feasible:
                return Unplaced(placement.reason or "no feasible placement")
            try:
                res = self.store.reserve(key, placement)
            except ReservationConflict as exc:
                last = str(exc)
                log.info("placement: %s: conflict on attempt %d: %s", key, attempt, exc)
                existing = self.store.get(key)  # a concurrent admission of the same gang
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

    def _preview(
        self, ctx: Any, key: GangKey, replica: ReplicaKey, gang: GangRequest
    ) -> Granted | Unplaced:
        """The slot this replica would get, with no side effects (audit mode, dry run)."""
        try:
            res = self.store.get(key)
            if res is None:
                nodes = exclude_held(ctx.cluster.node_states(), self.store.held_gpus())
                placement = self.solver(nodes, gang)
                if not placement.feasible:
                    return Unplaced(placement.reason or "no feasible placement")
                res = GangReservation.from_placement(key, placement, now=0.0, ttl_seconds=0.0)
                # Nothing is assigned in a preview, so "lowest free slot" would show slot 0
                # to every replica; the replica index is what enforce mode ends up with when
                # the operator creates the pods in order.
                slot = res.slots[replica.index % len(res.slots)]
                return Granted(reservation=res, slot=slot, fresh=False)
        except ReservationUnavailable as exc:
            return Unplaced(f"the reservation store is unavailable: {exc}")
        number = pick_slot(res, replica)
        if number is None:
            return Unplaced(f"all {len(res.slots)} slots reserved for the gang belong to "
                            f"other replicas")
        return Granted(reservation=res, slot=res.slot(number), fresh=False)

    # --- writing -------------------------------------------------------------------------
    def _write_slot(
        self, ctx: Any, key: GangKey, replica: ReplicaKey, granted: Granted, *, preview: bool
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
        policy = getattr(ctx, "policy", None)
        ctx.warnings.extend(
            apply_slot(ctx.pod, node=slot.node, gpu_group=slot.gpus, gpu_visible=visible,
                       record=record, gpu_resources=_gpu_resources(policy),
                       warn_scheduler=_scheduler_unhandled(policy))
        )
        if ctx.audit:
            ctx.warnings.append(
                f"placement (audit): would pin this pod ({replica.wire()}) to node "
                f"{slot.node}, GPUs {gpu_list(slot.gpus)} of the job's "
                f"{gpu_list(visible)} there; nothing was reserved"
            )
        if not preview:
            metrics.PLACEMENTS.labels(result="placed" if granted.fresh else "reused").inc()
        if not getattr(getattr(ctx, "request", None), "dry_run", False):
            metrics.MUTATIONS.labels(
                kind="placement", policy=policy_name(policy),
                mode="audit" if ctx.audit else "enforce",
            ).inc()

    def _unplaced(
        self, ctx: Any, key: GangKey, replica: ReplicaKey, gang: GangRequest,
        why: Unplaced, settings: PlacementSettings, *, preview: bool,
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
        prefix = "placement (audit): would leave" if ctx.audit else "placement:"
        ctx.warnings.append(
            f"{prefix} {what} ({demand}) left unplaced: {why.reason}; admitted without "
            f"node or GPU pinning"
        )
        if not preview:
            metrics.PLACEMENTS.labels(result="unplaced").inc()


def _gpu_resources(policy: object) -> frozenset[str]:
    """GPU resource names of the matched policy (before and after its rename)."""
    found = getattr(policy, "gpu_resources", None)
    return frozenset(found) if found else GPU_RESOURCES


def _scheduler_unhandled(policy: object) -> bool:
    """False when the policy's own mutations already set schedulerName (and warned)."""
    mutations = getattr(policy, "mutations", None)
    return getattr(mutations, "scheduler_name", None) is None


def make_placement_step(store: ReservationStore | None = None) -> PlacementStep:
    """The placement step for ``build_admitter(..., placement=...)``.

    Without a store: an in-memory one (``gputopo mutate``, the demo, file-backed ``serve``);
    a live server with API access passes a KubernetesReservationStore.
    """
    return PlacementStep(store)


def placement_step_for(cluster: object) -> PlacementStep:
    """The placement step ``gputopo serve`` uses for ``cluster``.

    A live cluster view exposes its ``api_client`` (the official client it watches with):
    then reservations live in the API (KubernetesReservationStore), shared by every webhook
    replica and surviving restarts. A fixed cluster (a file, the demo) gets an in-memory
    store: one process, nothing to share.
    """
    api = getattr(cluster, "api_client", None)
    if api is not None:
        from gputopo.cluster.k8s_reservations import KubernetesReservationStore

        return PlacementStep(KubernetesReservationStore(api))
    return PlacementStep()
