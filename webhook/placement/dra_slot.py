"""A DRA replica's slot in its pod: the pod's GPU claims pointed at claims that pin its GPUs.

Why: with Dynamic Resource Allocation the node pin alone does not choose GPUs (the
scheduler's allocator takes the first devices that match, in slice order), and the
visible-devices env means nothing (the driver hands out devices through CDI). So for a pod
whose GPUs come from ResourceClaimTemplates, the slot becomes, per GPU claim of the pod, a
ResourceClaim ``<job>-<replica>-<pod claim>`` that only the slot's devices satisfy (a CEL
selector on the driver's ``uuid``, gputopo.cluster.dra), owned by the job so that it goes
with it; the pod's ``spec.resourceClaims`` entry names it instead of the template. That
entry is immutable after CREATE, so a waiting (gated) pod gets the names at admission too,
and the placement queue makes the claims when it places the gang, before the gate comes off
(:func:`claims_for`, from the templates kept in the pod annotation
``gputopo.io/claim-templates``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gputopo import names
from gputopo.cluster import dra
from gputopo.cluster.dra_claims import ClaimWriter
from gputopo.cluster.reservations import GangKey, ReplicaKey
from gputopo.cluster.source import ClusterReader, node_state_named
from webhook.placement.records import Granted
from webhook.placement.reserve import Unplaced
from webhook.steps import AdmissionContext

#: pod annotation: pod claim name -> the ResourceClaimTemplate gputopo replaced
TEMPLATES_ANNOTATION = names.CLAIM_TEMPLATES_ANNOTATION
#: claim annotation: the node and GPU indices the claim pins, for people
PIN_ANNOTATION = names.GPU_PIN_ANNOTATION


def owner_of(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """The ownerReference a pinned claim carries (the job: it goes with the job)."""
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}


#: apiVersion of each job kind a gang is keyed by, for a claim's ownerReference
_JOB_API = {"PyTorchJob": "kubeflow.org/v1", "TFJob": "kubeflow.org/v1",
            "MPIJob": "kubeflow.org/v2beta1", "TrainJob": "trainer.kubeflow.org/v1alpha1",
            "JobSet": "jobset.x-k8s.io/v1alpha2"}


def owner_for(key: Any, pod: Mapping[str, Any]) -> dict[str, Any]:
    """The gang's job as an ownerReference, for the queue (which keys gangs by namespace,
    kind, name and uid): the pod's own controller reference when it names the job, else
    the kind's served version."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == key.kind and \
                ref.get("uid") == key.uid:
            return owner_of(str(ref.get("apiVersion")), key.kind, key.name, key.uid)
    return owner_of(_JOB_API.get(key.kind, "kubeflow.org/v1"), key.kind, key.name, key.uid)


def slot_claims(cluster: ClusterReader, ask: dra.DraAsk, *, node: str,
                gpus: Sequence[int], namespace: str, job: str, replica: str,
                owner: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The claims that pin ``gpus`` of ``node`` for the pod's GPU claims, or why not."""
    state = node_state_named(cluster, node)
    devices = state.dra_devices if state is not None else None
    if not devices:
        return [], f"node {node} has no DRA GPU devices known to gputopo"
    missing = [g for g in gpus if g not in devices]
    if missing:
        return [], f"GPU(s) {missing} of node {node} have no DRA device"
    chosen = [devices[g] for g in gpus]
    pin = json.dumps({"node": node, "gpus": list(gpus)}, separators=(",", ":"))
    made = dra.pinned_claims(ask, chosen, namespace=namespace, job=job, replica=replica,
                             owner=owner, annotations={PIN_ANNOTATION: pin})
    return list(made.values()), None


def name_claims(pod: dict[str, Any], ask: dra.DraAsk, *, job: str, replica: str) -> None:
    """Point the pod's GPU claims at their pinned claims' names and keep the templates
    they replace in :data:`TEMPLATES_ANNOTATION` (written at CREATE: the entry is
    immutable after)."""
    dra.point_pod_at_claims(pod, {c: dra.claim_name(job, replica, c)
                                  for c in ask.templates})
    meta = pod.setdefault("metadata", {})
    ann = meta.get("annotations")
    if not isinstance(ann, dict):
        ann = meta["annotations"] = {}
    ann[TEMPLATES_ANNOTATION] = dra.templates_annotation(ask)


def ask_of_waiting(pod: Mapping[str, Any], namespace: str, cluster: ClusterReader,
                   classes: Sequence[str] = dra.DEFAULT_GPU_CLASSES) -> dra.DraAsk | None:
    """A gated pod's GPU claims as they were before :func:`name_claims` (its templates
    from the annotation), for the queue; None for a pod gputopo did not rename."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    replaced = dra.replaced_templates(pod)
    if not replaced:
        return None
    return dra.pod_dra_gpus(dra.with_templates(spec, replaced), namespace, cluster, classes)


def pin_slot(ctx: AdmissionContext, key: GangKey, replica: ReplicaKey, granted: Granted,
             ask: dra.DraAsk, claims: ClaimWriter, *, preview: bool) -> Granted | Unplaced:
    """The placement step's DRA half of writing a slot: the slot's pinned claims made
    (``claims``: the API, or ``gputopo mutate``'s list; nothing in a preview) and the pod
    pointed at them. Unplaced when they cannot be: lasting when the slot's devices are not
    known (the pod keeps its templates, left to the scheduler), passing when the API failed
    (a gang that may wait is gated, and the queue makes the claims later)."""
    job = ctx.job
    assert job is not None
    slot = granted.slot
    made, why = slot_claims(ctx.cluster, ask, node=slot.node, gpus=slot.gpus,
                            namespace=key.namespace, job=key.name, replica=replica.wire(),
                            owner=owner_of(job.api_version, job.kind, job.name, key.uid))
    if why is not None:
        return Unplaced(f"the GPUs chosen cannot be pinned by a claim: {why}", lasting=True)
    problems = [] if preview else claims.ensure(made)
    if problems:
        return Unplaced(f"the claims pinning the GPUs chosen were not made: "
                        f"{'; '.join(problems)}")
    name_claims(ctx.pod, ask, job=key.name, replica=replica.wire())
    if preview:
        ctx.warnings.append(
            f"placement: would create ResourceClaim(s) "
            f"{', '.join(c['metadata']['name'] for c in made)} pinning GPUs "
            f"{','.join(map(str, slot.gpus))} of node {slot.node}")
    return granted


def extended_on_dra(ctx: AdmissionContext, why: Unplaced, resources: frozenset[str]
                    ) -> Unplaced:
    """A pod asking a GPU extended resource that found no place, on a cluster whose GPU
    nodes are all DRA nodes: there the scheduler meets ``nvidia.com/gpu`` from DRA devices
    through a claim of its own (KEP-5004, a DeviceClass's ``extendedResourceName``; beta
    and on in 1.36), which gputopo cannot pin. Said in the record, and lasting (waiting for
    a device-plugin node would be for ever); read only on this rare path."""
    nodes = ctx.cluster.node_states()
    if not nodes or any(n.gpu_handout != dra.DRA for n in nodes):
        return why
    asked = sorted(r for r in resources if dra.has_gpu_resource(ctx.pod, (r,)))
    return Unplaced(
        f"every GPU node here hands out its GPUs through DRA, where this pod's "
        f"{', '.join(asked) or 'GPU resource'} is met by the scheduler's own claim "
        f"(KEP-5004 extendedResourceName), which gputopo cannot pin; ask for GPUs with a "
        f"ResourceClaimTemplate of a GPU DeviceClass (gpu.nvidia.com) to have them placed",
        lasting=True)


__all__ = ["PIN_ANNOTATION", "TEMPLATES_ANNOTATION", "ask_of_waiting", "extended_on_dra",
           "name_claims", "owner_for", "owner_of", "pin_slot", "slot_claims"]
