"""One pass of the placement queue: place the waiting gangs that start now, per the waiting rule.

A pass lists the unbound pods, rebuilds the waiting gangs from their records
(:mod:`webhook.queue.gangs`) and serves them oldest first (the order, the backfill rule
and the waiting rule are :func:`webhook.queue.gangs.serve_pass`; this module does the I/O):

1. **starts now** (the best placement free reaches the share the gang's rule asks:
   ``minShare``, or after ``maxWaitSeconds`` with ``afterMaxWait: takeBest`` its
   ``floorShare``): :meth:`GangReserver.reserve` — the very solve + compare-and-swap
   reservation of admission, so the queue and the webhook replicas never hand out one GPU
   twice — or the gang's existing reservation (a later pod of the gang was admitted when
   GPUs had freed up); then EVERY gated replica is assigned its slot in the store, then
   every pod gets its slot written (node pin, GPU annotations its env reads, record) while
   still gated, and only then are the gates lifted. So no pod of a gang is released before
   all have their slots, and a queue killed half-way is completed by the next leader (each
   step is idempotent: the same replica gets the same slot, an existing pin is not added
   twice);
2. **does not start**: it keeps waiting; if it has waited ``starvation_seconds``, no gang
   behind it is placed in this pass (backfill stops, it is not overtaken for ever);
3. **overdue with ``afterMaxWait: deny``**: its records say it was denied and the queue
   stops serving it; the gates stay (never lifted without a placement: the GPU env of a
   gated pod reads annotations only a placement writes).

Pod writes are JSON patches guarded by a ``test`` of the resourceVersion just read (a
concurrent change fails the patch → the next pass retries) and use only what the API
server allows on a gated pod: annotations, the required node affinity's terms gaining a
requirement, and removing a gate.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch
from kubernetes import client
from kubernetes.client.rest import ApiException

from gputopo import names
from gputopo.cluster.dra import DEFAULT_GPU_CLASSES, ClaimUnknown
from gputopo.cluster.dra_claims import ClaimWriter, KubernetesClaims
from gputopo.cluster.metrics import RESERVATION_RELEASES
from gputopo.cluster.reservations import (
    GangReservation,
    ReplicaKey,
    ReservationStore,
    ReservationUnavailable,
)
from gputopo.cluster.source import ClusterReader
from gputopo.placement.types import ReplicaSlot
from webhook import events, metrics
from webhook.placement import dra_slot
from webhook.placement.mutations import record_json, remove_gate, write_slot
from webhook.placement.reserve import GangReserver, Unplaced
from webhook.placement.step import placed_record
from webhook.queue.gangs import (
    DEFAULT_STARVATION_SECONDS,
    PassResult,
    WaitingGang,
    WaitingPod,
    serve_pass,
    settled_network,
    waiting_gangs,
)
from webhook.queue.report import why_not_now

log = logging.getLogger(__name__)

#: Record keys of a waiting pod (:func:`webhook.placement.step.waiting_record`).
WAITING_KEYS = ("waiting", "since", "maxWaitSeconds", "minShare", "afterMaxWait",
                "floorShare", "gang")


def released(pod: dict[str, Any]) -> None:
    """Lift gputopo's gate; the record stops saying "waiting"."""
    ann = pod["metadata"].setdefault("annotations", {})
    try:
        rec = json.loads(ann.get(names.PLACEMENT_ANNOTATION) or "{}")
    except ValueError:
        rec = {}
    if isinstance(rec, dict) and rec.get("waiting"):
        rec["waiting"] = False
        ann[names.PLACEMENT_ANNOTATION] = record_json(rec)
    remove_gate(pod)

#: Unbound pods: the gated ones are among them (the API offers no selector on gates).
UNBOUND = "spec.nodeName="


class PlacementQueue:
    """Serves the waiting gangs of one cluster (see the module docstring)."""

    def __init__(
        self, api_client: client.ApiClient, cluster: ClusterReader, store: ReservationStore,
        *, identity: str = "", is_leader: Callable[[], bool] = lambda: True,
        reserver: GangReserver | None = None,
        starvation_seconds: float = DEFAULT_STARVATION_SECONDS,
        clock: Callable[[], float] = time.time, request_timeout: float = 10.0,
        after_write: Callable[[str, str], None] | None = None,
        recorder: events.EventRecorder | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        #: the ResourceClaims that pin a DRA gang's GPUs, made before its gates come off
        self.claims: ClaimWriter = KubernetesClaims(api_client)
        self.cluster = cluster
        self.store = store
        self.reserver = reserver if reserver is not None else GangReserver(store)
        self.identity = identity
        self.is_leader = is_leader
        self.starvation_seconds = starvation_seconds
        self._clock = clock
        self._timeout = request_timeout
        #: test hook: called with (phase, pod name) after each pod write
        self.after_write = after_write
        #: Kubernetes Events: waiting (with the position), placed, released, denied
        self.recorder = recorder

    # --- reading ---------------------------------------------------------------------------
    def waiting(self) -> list[WaitingGang]:
        """The waiting gangs, oldest first, from one LIST of the unbound pods."""
        resp = self.core.list_pod_for_all_namespaces(
            field_selector=UNBOUND, _preload_content=False, _request_timeout=self._timeout)
        return waiting_gangs(json.loads(resp.data).get("items") or [])

    def why_not_now(self, gang: WaitingGang) -> str:
        """Why ``gang`` does not fit now, in a sentence (no side effects)."""
        return why_not_now(gang, self.cluster, self.reserver)

    # --- one pass --------------------------------------------------------------------------
    def run_once(self) -> PassResult:
        if not self.is_leader():
            return PassResult(not_leader=True)
        gangs = self.waiting()
        metrics.QUEUE_WAITING.set(len(gangs))
        now = self._clock()
        result = serve_pass(gangs, now=now, starvation_seconds=self.starvation_seconds,
                            place=lambda g, need: self._place(
                                g, now, good_share=need, fallback=need < g.rule.min_share),
                            give_up=lambda g, why: self._deny(g, now, why),
                            may_act=self.is_leader, keep=self._kept(),
                            place_avoiding=lambda g, need, avoid: self._place(
                                g, now, good_share=need, fallback=need < g.rule.min_share,
                                avoid=avoid))
        if self.recorder is not None:
            for position, gang in enumerate(gangs, start=1):
                why = result.waiting.get(str(gang.key))
                if why is not None:
                    self.recorder.emit_all(
                        _targets(gang), events.WAITING,
                        f"waits for a placement, position {position} of {len(gangs)} in "
                        f"the queue ({gang.demand}, waited {gang.waited(now):.0f} s): {why}")
        return result

    def _kept(self) -> Callable[[WaitingGang], frozenset[str]]:
        """What a starving gang keeps from the gangs behind it in a pass: the nodes it could
        use well (``GangReserver.kept_for`` on every node; none when it asks more GPUs than
        the cluster has: gputopo.placement.starvation)."""
        def kept(g: WaitingGang) -> frozenset[str]:
            nodes = self.cluster.node_states()
            if g.request.total_gpus > sum(len(n.topology.gpus) for n in nodes):
                return frozenset()
            return self.reserver.kept_for(nodes, g.request, g.rule.min_share)
        return kept

    def _place(self, gang: WaitingGang, now: float, *, good_share: float | None,
               fallback: bool = False, avoid: frozenset[str] = frozenset()) -> str | None:
        """Place ``gang`` and release its pods; None when done, else why not. ``good_share``:
        the share of its best the placement needs (``fallback``: the lower bar of
        ``afterMaxWait: takeBest``)."""
        key = gang.key
        try:
            gone = self._job_gone(gang)
            if gone:
                return gone
            res = self.store.get(key)
            if res is None:
                made = self.reserver.reserve(cluster=self.cluster, pod=gang.pods[0].pod,
                                             key=key, gang=gang.request, good_share=good_share,
                                             net=settled_network(gang.pods[0].record),
                                             shares=gang.transport_share, typical=not fallback,
                                             pack_share=gang.rule.min_share, avoid=avoid)
                if isinstance(made, Unplaced):
                    return made.reason
                res = made[0]
            slots = {}
            for wp in gang.pods:  # every replica's slot first: none is released before
                got = self.store.assign_slot(key, wp.replica)
                if got is None:
                    return (f"no slot left for {wp.replica.wire()} in the gang's reservation "
                            f"(released meanwhile, or more pods than the gang's size)")
                res, slot = got
                slots[wp.replica] = slot
        except ReservationUnavailable as exc:
            return f"the reservation store is unavailable: {exc}"
        problem = self._dra_claims(gang, slots)
        if problem:
            return problem
        waited = round(gang.waited(now), 3)
        for wp in gang.pods:
            slot = slots[wp.replica]
            rec = placed_record(key, wp.replica, res, slot)
            # still gated: keep what makes it a waiting pod, so a next leader finds the
            # whole gang if this one stops before every gate is lifted
            rec.update({k: wp.record[k] for k in WAITING_KEYS if k in wp.record})
            rec["queue"] = {"waitedSeconds": waited, "by": self.identity}
            if fallback:
                rec["queue"]["fallback"] = (
                    f"maxWaitSeconds: best placement there was, at least "
                    f"{gang.rule.floor:.0%} of the best (afterMaxWait: takeBest)")
            if not self._update(wp, "slot", lambda pod, slot=slot, rec=rec: write_slot(
                    pod, node=slot.node, gpu_group=slot.gpus,
                    gpu_visible=res.visible_gpus(slot.node), record=rec)):
                return "a pod changed while its slot was written (retried next pass)"
        for wp in gang.pods:
            if not self._update(wp, "ungate", released):
                return "a pod changed while its gate was lifted (retried next pass)"
        if fallback:
            metrics.QUEUE_FALLBACKS.labels(reason="placed_below_good").inc()
        else:
            metrics.QUEUE_PLACEMENTS.inc()
        if self.recorder is not None:
            self._placed_events(gang, res, slots, waited)
        metrics.QUEUE_WAIT_SECONDS.observe(waited)
        log.info("queue: placed %s after %.1f s waiting (%s)", key, waited,
                 ", ".join(f"{s.node}:{list(s.gpus)}" for s in slots.values()))
        return None

    def _dra_claims(self, gang: WaitingGang, slots: dict[Any, Any]) -> str | None:
        """The pinned ResourceClaims of the gang's DRA pods (named at their CREATE,
        webhook/placement/dra_slot.py), made before any gate comes off; why not, if so."""
        key = gang.key
        for wp in gang.pods:
            gang_rec = wp.record.get("gang") if isinstance(wp.record.get("gang"), dict) else {}
            classes = gang_rec.get("gpuDeviceClasses")
            try:
                ask = dra_slot.ask_of_waiting(
                    wp.pod, key.namespace, self.cluster,
                    tuple(map(str, classes)) if isinstance(classes, list) and classes
                    else DEFAULT_GPU_CLASSES)
            except ClaimUnknown as exc:
                return f"{wp.replica.wire()}: {exc}"
            if ask is None:
                continue
            if not ask.gpus or ask.why_not:
                # its claims name pinned claims that would never be made: not released
                return (f"{wp.replica.wire()}: its claim templates no longer ask for GPUs "
                        f"gputopo can pin ({ask.why_not or 'no GPU request'})")
            slot = slots[wp.replica]
            claims, why = dra_slot.slot_claims(
                self.cluster, ask, node=slot.node, gpus=slot.gpus, namespace=key.namespace,
                job=key.name, replica=wp.replica.wire(), owner=dra_slot.owner_for(key, wp.pod))
            problems = [why] if why else self.claims.ensure(claims)
            if problems:
                return f"{wp.replica.wire()}: {'; '.join(problems)}"
        return None

    def _job_gone(self, gang: WaitingGang) -> str | None:
        """Why the gang's job is gone (deleted, or recreated under another uid), its
        reservation released if it has one; None while it exists or nobody can say.

        Why right before reserving: a job deleted while its gang waits leaves its pods for
        a few seconds, and the release on the job's deletion may already have run; GPUs
        reserved now would stay held until the reconcile pass, minutes later."""
        exists = getattr(self.cluster, "job_exists", None)
        if exists is None or exists(gang.key) is not False:
            return None
        if self.store.release(gang.key):
            log.info("queue: reservation of %s released: stale (its job is gone)", gang.key)
            RESERVATION_RELEASES.labels("stale").inc()
        log.info("queue: %s not placed: its job is gone", gang.key)
        return f"its job {gang.key.kind} {gang.key.namespace}/{gang.key.name} is gone"

    def _deny(self, gang: WaitingGang, now: float, why: str) -> bool:
        """Give up on an overdue gang (``afterMaxWait: deny``): each record says so and stops
        being a waiting one; the gates stay, so no pod of it ever starts."""
        waited = round(gang.waited(now), 3)
        reason = (f"denied: no placement of {gang.rule.min_share:.0%} of the gang's best "
                  f"within maxWaitSeconds {gang.max_wait_seconds:.0f} (afterMaxWait: deny); "
                  f"last: {why}. Its pods stay gated; delete the job")

        def deny(pod: dict[str, Any]) -> None:
            ann = pod["metadata"].setdefault("annotations", {})
            try:
                rec = json.loads(ann.get(names.PLACEMENT_ANNOTATION) or "{}")
            except ValueError:
                rec = {}
            rec.update({"placed": False, "waiting": False, "denied": True, "reason": reason,
                        "queue": {"waitedSeconds": waited, "by": self.identity}})
            ann[names.PLACEMENT_ANNOTATION] = record_json(rec)

        for wp in gang.pods:
            if not self._update(wp, "deny", deny):
                return False
        metrics.QUEUE_FALLBACKS.labels(reason="denied").inc()
        if self.recorder is not None:
            self.recorder.emit_all(_targets(gang), events.UNPLACED, reason, warning=True)
        metrics.QUEUE_WAIT_SECONDS.observe(waited)
        log.warning("queue: %s %s", gang.key, reason)
        return True

    def _placed_events(self, gang: WaitingGang, res: GangReservation,
                       slots: Mapping[ReplicaKey, ReplicaSlot], waited: float) -> None:
        """GangPlaced and GangReleased on every pod of a gang the queue placed, and on its
        job."""
        assert self.recorder is not None
        *pods, job = _targets(gang)
        for wp, target in zip(gang.pods, pods, strict=True):
            slot = slots[wp.replica]
            self.recorder.emit_all([target], events.PLACED, events.slot_message(
                slot.node, slot.gpus, res.visible_gpus(slot.node), res.bus_bandwidth_gbps))
        self.recorder.emit(job, events.PLACED, events.gang_message(
            [(s.node, s.gpus) for s in res.slots], res.bus_bandwidth_gbps))
        self.recorder.emit_all([*pods, job], events.RELEASED,
                               f"scheduling gate {names.PLACEMENT_GATE} lifted after "
                               f"{waited:.0f} s waiting; the scheduler binds the pods to "
                               f"their nodes")

    # --- writing ---------------------------------------------------------------------------
    def _update(self, wp: WaitingPod, phase: str, change: Callable[[dict[str, Any]], Any]
                ) -> bool:
        """GET the pod, apply ``change``, PUT it back with the resourceVersion read. True when
        written (or nothing to write); False on a conflict, a lost lease or a gone pod."""
        if not self.is_leader():
            return False
        try:
            resp = self.core.read_namespaced_pod(wp.name, wp.namespace, _preload_content=False,
                                                 _request_timeout=self._timeout)
            pod = json.loads(resp.data)
            if (pod.get("metadata") or {}).get("uid") != (wp.pod.get("metadata") or {}).get(
                    "uid") or (pod.get("spec") or {}).get("nodeName"):
                return False  # recreated or bound meanwhile: the next pass looks again
            new = copy.deepcopy(pod)
            change(new)
            if new != pod:
                # a JSON patch guarded by a test of the resourceVersion read: compare-and-swap
                # (a change in between fails the test) without re-sending the whole pod
                ops = [{"op": "test", "path": "/metadata/resourceVersion",
                        "value": pod["metadata"]["resourceVersion"]},
                       *jsonpatch.make_patch(pod, new).patch]
                self.core.patch_namespaced_pod(wp.name, wp.namespace, ops,
                                               _preload_content=False,
                                               _request_timeout=self._timeout)
        except ApiException as exc:
            log.info("queue: %s %s/%s: %s %s", phase, wp.namespace, wp.name, exc.status,
                     exc.reason)
            return False
        if self.after_write is not None:
            self.after_write(phase, wp.name)
        return True


def _targets(gang: WaitingGang) -> list[events.Target | None]:
    """The Event targets of a waiting gang: its pods, then its job (last)."""
    key = gang.key
    job = events.job_target(gang.pods[0].pod, kind=key.kind, namespace=key.namespace,
                            name=key.name, uid=key.uid)
    return [*(events.pod_target(wp.pod) for wp in gang.pods), job]
