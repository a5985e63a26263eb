"""What one admission's outcome says: the placement record a pod carries and the Events.

Why a module of its own: the record is a contract (``gputopo.io/placement``, read by users,
the queue, the device plugin and the cluster view) written from two places — the admission
step (:mod:`webhook.placement.step`) and the placement queue when it places a waiting gang
(:mod:`webhook.queue.placer`) — so its shape lives in one place, beside the Events that
report the same outcome (:mod:`webhook.events`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gputopo.cluster.reservations import GangKey, GangReservation, ReplicaKey
from gputopo.placement.types import GangRequest, ReplicaSlot
from webhook import events
from webhook.placement import network
from webhook.placement.reserve import Unplaced
from webhook.policy.schema import PlacementSettings
from webhook.steps import JobInfo

WHEN_FULL_WAIT = "wait"
WHEN_FULL_ADMIT = "admit"
WHEN_FULL_DENY = "deny"


@dataclass(frozen=True)
class Granted:
    """A replica's slot and the reservation it came from; ``fresh``: reserved just now."""

    reservation: GangReservation
    slot: ReplicaSlot
    fresh: bool
    moved: str = ""  # why the slot just left its node ("" when it did not)
    plan: network.Plan | None = None  # the gang's network plan



def admission_events(pod: dict[str, Any], job: JobInfo, outcome: Granted | Unplaced,
                     when_full: str, can_wait: bool
                     ) -> list[tuple[events.Target | None, str, str, bool]]:
    """The Events of one admission's outcome, as (target, reason, message, warning) rows.
    A gated pod gets none here: the queue writes its GangWaiting, with its position."""
    target = events.pod_target(pod, admitted=True)
    owner = events.Target(job.api_version, job.kind, job.namespace, job.name, job.uid)
    if isinstance(outcome, Granted):
        res, slot = outcome.reservation, outcome.slot
        rows: list[tuple[events.Target | None, str, str, bool]] = [
            (target, events.PLACED, events.slot_message(
                slot.node, slot.gpus, res.visible_gpus(slot.node), res.bus_bandwidth_gbps),
             False)]
        if outcome.fresh:
            rows.append((owner, events.PLACED, events.gang_message(
                [(s.node, s.gpus) for s in res.slots], res.bus_bandwidth_gbps), False))
        return rows
    if when_full == WHEN_FULL_WAIT and not outcome.lasting and can_wait:
        return []
    if when_full == WHEN_FULL_DENY:
        return [(owner, events.UNPLACED, f"denied: {outcome.reason}", True)]
    message = f"admitted without a placement: {outcome.reason}"
    return [(target, events.UNPLACED, message, True), (owner, events.UNPLACED, message, True)]


def placed_record(key: GangKey, replica: ReplicaKey, res: GangReservation, slot: ReplicaSlot,
                  visible: tuple[int, ...] | None = None, *,
                  network: dict[str, Any] | None = None) -> dict[str, Any]:
    """The placement record of a replica in its slot (at admission or from the queue);
    ``visible``: ``res.visible_gpus(slot.node)`` when the caller has it already;
    ``network``: the plan's JSON, in place of the one stored with the reservation."""
    record = {
        "placed": True,
        "job": f"{key.kind} {key.namespace}/{key.name}",
        "jobUid": key.uid,
        "replica": replica.wire(),
        "node": slot.node,
        "gpus": list(slot.gpus),
        "gpuVisible": list(res.visible_gpus(slot.node) if visible is None else visible),
        "busBandwidthGBps": round(res.bus_bandwidth_gbps, 3),
        "reason": res.reason,
    }
    if res.throughput:
        record["throughput"] = dict(res.throughput)
    if network is not None:
        record["network"] = network
    elif res.network:
        record["network"] = dict(res.network)
    return record


def waiting_record(key: GangKey, gang: GangRequest, settings: PlacementSettings,
                   plan: network.Plan | None = None,
                   fixed_ports: frozenset[tuple[str, int]] = frozenset()) -> dict[str, Any]:
    """What the placement record of a gated pod adds: everything the queue needs to place
    the gang later without the policy or the job at hand (the job is looked up all the same
    before the gang is placed, so a deleted job's pods are never placed) — the policy's
    transport shares too, so that the queue rates nodes as admission did."""
    return {
        "waiting": True,
        "since": time.time(),
        "maxWaitSeconds": settings.max_wait_seconds,
        **settings.waiting.to_json(),
        "gang": {"namespace": key.namespace, "kind": key.kind, "name": key.name,
                 "uid": key.uid, "replicas": gang.replicas,
                 "gpusPerReplica": gang.gpus_per_replica,
                 "maxReplicasPerNode": gang.max_replicas_per_node,
                 **({"fixedPorts": sorted([p, n] for p, n in fixed_ports)}
                    if fixed_ports else {}),
                 **({"transportShare": dict(settings.transport_share)}
                    if settings.transport_share else {}),
                 **({"computeShare": gang.compute_share}
                    if gang.compute_share is not None else {}),
                 **({"minGpuMemoryMiB": gang.min_memory_mib} if gang.min_memory_mib else {}),
                 **({"mixGpuModels": True} if gang.mix_models else {})},
        **({"network": plan.to_json()} if plan is not None else {}),
    }
