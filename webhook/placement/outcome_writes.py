"""Writing an admission's outcome into its pod: a granted slot, the gate, or no slot.

Why a module of its own: the placement step (:mod:`webhook.placement.step`) decides what a
replica gets — a slot of its gang's reservation, a wait behind the queue's gate, or nothing
— and this module only carries that answer out the same way every time: the slot's pin,
GPUs, env and record (:mod:`webhook.placement.mutations`), the network plan
(:mod:`webhook.placement.network_writes`), the gang's ComputeDomain, the warnings a user
reads and the metrics an operator counts; or, with no slot, the denial
(``placement.whenFull: deny``), the waiting record and gate (``wait``, where a queue runs),
or the unplaced record (``admit``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gputopo import names
from gputopo.cluster.pod_spread import spread_of, tighter
from gputopo.cluster.reservations import GangKey, ReplicaKey
from gputopo.placement.types import GangRequest
from gputopo.placement.waiting import after_max_wait_text
from webhook import metrics
from webhook.placement import dra_slot, network, network_writes
from webhook.placement.compute_domain import ComputeDomains
from webhook.placement.mutations import (
    GPU_RESOURCES,
    apply_slot,
    apply_unplaced,
    apply_waiting,
    gpu_list,
)
from webhook.placement.records import (
    WHEN_FULL_DENY,
    WHEN_FULL_WAIT,
    Granted,
    placed_record,
    waiting_record,
)
from webhook.placement.reserve import Unplaced
from webhook.policy.schema import PlacementSettings, Policy
from webhook.steps import AdmissionContext


def placement_settings(policy: Policy | None) -> PlacementSettings:
    """The primary policy's placement section (no policy: the defaults)."""
    return policy.placement if policy is not None else PlacementSettings()


def policy_name(policy: Policy | None) -> str:
    """The matched policy's name, for metrics and messages."""
    return policy.name if policy is not None else "?"


def gpu_resources(policy: Policy | None) -> frozenset[str]:
    """GPU resource names of the matched policy (before and after its rename)."""
    return policy.gpu_resources if policy is not None else GPU_RESOURCES


def scheduler_unhandled(policy: Policy | None) -> bool:
    """False when the policy's own mutations already set schedulerName (and warned)."""
    return policy is None or policy.mutations.scheduler_name is None


def write_slot_outcome(
    ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, granted: Granted,
    net: network.GangNetwork, containers: list[dict[str, Any]], *, preview: bool,
    dra: bool = False, compute_domains: ComputeDomains,
) -> None:
    """Write a granted slot into the pod: the node pin, GPUs, env, record, the network
    plan (and the gang's ComputeDomain); warnings and metrics say what was done."""
    res, slot = granted.reservation, granted.slot
    visible = res.visible_gpus(slot.node)
    plan = granted.plan
    # the plan's JSON replaces the stored one: not copied first (only its JSON is kept)
    record = placed_record(key, replica, res, slot, visible,
                           network=None if plan is None else plan.to_json())
    policy = ctx.policy
    ctx.warnings.extend(
        apply_slot(ctx.pod, node=slot.node, gpu_group=slot.gpus, gpu_visible=visible,
                   record=record, gpu_resources=gpu_resources(policy),
                   warn_scheduler=scheduler_unhandled(policy),
                   gpu_env=placement_settings(policy).gpu_env,
                   # DRA: the driver makes only the claimed devices visible (CDI)
                   containers=[] if dra else containers)
    )
    if plan is not None:
        ctx.warnings.extend(network_writes.apply(
            ctx.pod, ctx.original, plan, net.job, replica.wire(), containers,
            net.written))
    if placement_settings(policy).compute_domain == "create":
        ctx.warnings.extend(compute_domains.apply(ctx, res, containers,
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

def write_unplaced(
    ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, gang: GangRequest,
    why: Unplaced, settings: PlacementSettings, net: network.GangNetwork,
    containers: list[dict[str, Any]], *, preview: bool, can_wait: bool,
) -> None:
    """No slot for the pod now: deny it, gate it for the queue (``can_wait``: one runs),
    or admit it unplaced, as ``placement.whenFull`` says."""
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
    if wait and can_wait:
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
            ctx.pod, record=record, gpu_resources=gpu_resources(ctx.policy),
            warn_scheduler=scheduler_unhandled(ctx.policy), gpu_env=settings.gpu_env,
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
