"""Gated pods → waiting gangs, in the order they are served (pure data, no I/O).

Why from the pods alone: every gated pod carries its placement record (written at
admission, :func:`webhook.placement.step.waiting_record`): the gang key, the gang's demand,
when it started waiting, its policy's ``maxWaitSeconds`` and transport shares. So the queue
needs neither the policies nor the job to rebuild its state: a new leader, or ``gputopo
queue`` reading a cluster file, sees exactly what the last one saw. The network plan the
records carry (:func:`settled_network`) is read here for the same reason: the pass and
``gputopo queue`` (:mod:`webhook.queue.report`) both need it.

Order: arrival (the earliest ``since`` of the gang's pods), then the gang key, so the order
is total and the same in every process. :func:`serve_pass` says which gangs a pass may
place: all of them in order (backfill: a smaller, younger gang may use GPUs an older one
cannot use yet), except that once a gang has waited ``starvation_seconds`` nothing behind it
is placed before it (it is not overtaken for ever); and whether a gang takes the placement
it can get is the waiting rule's call (:mod:`gputopo.placement.waiting`), the same at
admission and in the benchmark's replay.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gputopo import names
from gputopo.cluster.reservations import GangKey, ReplicaKey
from gputopo.placement import starvation
from gputopo.placement.job_needs import recorded_needs
from gputopo.placement.types import GangRequest
from gputopo.placement.waiting import WaitingRule, rule_from_record
from gputopo.topology.transport import TRANSPORT_EFFICIENCY, TransportShares, order_problem
from webhook.placement import network

#: A gang that has waited this long blocks backfill behind it, and new gangs at admission
#: (gputopo.placement.starvation; docs/queue.md).
DEFAULT_STARVATION_SECONDS = starvation.DEFAULT_STARVATION_SECONDS


@dataclass(frozen=True)
class WaitingPod:
    """A gated pod of a waiting gang."""

    namespace: str
    name: str
    replica: ReplicaKey
    since: float
    pod: dict[str, Any] = field(compare=False, repr=False)
    record: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class WaitingGang:
    """A gang with at least one gated pod, and what it asks for."""

    key: GangKey
    request: GangRequest
    since: float
    max_wait_seconds: float
    pods: list[WaitingPod] = field(default_factory=list)
    #: the admitting policy's ``placement.transportShare``, from the record: the queue
    #: rates the nodes' networks as admission did
    transport_share: TransportShares = ()
    #: the admitting policy's waiting rule (``minShare``, ``afterMaxWait``, ``floorShare``),
    #: from the record; the documented defaults when the record has none
    rule: WaitingRule = field(default_factory=WaitingRule)

    def waited(self, now: float) -> float:
        return max(0.0, now - self.since)

    def overdue(self, now: float) -> bool:
        """Waited its policy's ``maxWaitSeconds``: ``rule.after_max_wait`` applies."""
        return self.waited(now) >= self.max_wait_seconds

    @property
    def demand(self) -> str:
        r = self.request
        return f"{r.replicas} x {r.gpus_per_replica} GPU"


def is_gated(pod: Mapping[str, Any]) -> bool:
    """True when the pod still carries gputopo's scheduling gate."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    return any(isinstance(g, Mapping) and g.get("name") == names.PLACEMENT_GATE
               for g in spec.get("schedulingGates") or [])


def waiting_record(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The placement record of a gated, unbound pod that waits; None for any other pod."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    if spec.get("nodeName") or meta.get("deletionTimestamp") or not is_gated(pod):
        return None
    raw = (meta.get("annotations") or {}).get(names.PLACEMENT_ANNOTATION)
    try:
        rec = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("gang"), dict) or \
            not rec.get("waiting"):
        return None
    return rec


def waiting_gangs(pods: Iterable[Mapping[str, Any]]) -> list[WaitingGang]:
    """The waiting gangs among ``pods``, oldest first (see the module docstring)."""
    gangs: dict[GangKey, WaitingGang] = {}
    for pod in pods:
        rec = waiting_record(pod)
        if rec is None:
            continue
        g = rec["gang"]
        try:
            key = GangKey(str(g["namespace"]), str(g["kind"]), str(g["name"]), str(g["uid"]))
            replica = ReplicaKey.from_wire(str(rec["replica"]))
            cap = g.get("maxReplicasPerNode")
            request = GangRequest(replicas=int(g["replicas"]),
                                  gpus_per_replica=int(g["gpusPerReplica"]),
                                  max_replicas_per_node=int(cap) if cap is not None else None,
                                  **recorded_needs(g))
            since = float(rec.get("since") or 0.0)
            max_wait = float(rec.get("maxWaitSeconds") or 0.0)
        except (KeyError, TypeError, ValueError):
            continue  # a record not written by gputopo: not ours to release
        meta = pod["metadata"]
        wp = WaitingPod(str(meta.get("namespace") or key.namespace), str(meta["name"]),
                        replica, since, dict(pod), rec)
        gang = gangs.get(key)
        if gang is None:
            gang = gangs[key] = WaitingGang(key, request, since, max_wait)
        gang.since = min(gang.since, since)
        gang.max_wait_seconds = min(gang.max_wait_seconds, max_wait) or max_wait
        gang.pods.append(wp)
    out = sorted(gangs.values(), key=lambda g: (g.since, g.key.namespace, g.key.name,
                                                g.key.uid))
    for g in out:
        g.pods.sort(key=lambda p: p.replica)
        # the newest record's table (the policy in force at the gang's latest admission),
        # whatever order the pods came in: during a webhook upgrade one pod's record may
        # lack the key and another carry it, and every reader must see the same gang
        newest = max(g.pods, key=lambda p: (p.since, p.replica))
        g.transport_share = transport_shares(newest.record["gang"])
        g.rule = rule_from_record(newest.record)
    return out


def transport_shares(gang: Mapping[str, Any]) -> TransportShares:
    """The ``transportShare`` a waiting record's gang carries (known transports, shares in
    (0, 1]; anything else is left out: the defaults apply to it). Absent (a record of a
    webhook older than the key): none. A table that would rank a faster transport below a
    slower one (gdr >= rdma >= tcp, what policy validation holds) did not come from a valid
    policy, e.g. an annotation edited by hand: the defaults apply to every transport."""
    raw = gang.get("transportShare")
    if not isinstance(raw, Mapping):
        return ()
    table = {str(t): float(v) for t, v in raw.items()
             if t in TRANSPORT_EFFICIENCY and isinstance(v, int | float)
             and not isinstance(v, bool) and 0 < v <= 1}
    if order_problem(table) is not None:
        return ()
    return tuple(sorted(table.items()))


def starving(gang: WaitingGang, now: float, starvation_seconds: float) -> bool:
    """True when ``gang`` has waited long enough that nothing behind it may be placed first."""
    return starvation.starving(gang.waited(now), starvation_seconds)


@dataclass
class PassResult:
    """What one pass did, for tests, logs, the bench and ``gputopo queue``."""

    placed: list[str] = field(default_factory=list)
    #: placed after ``maxWaitSeconds`` with ``afterMaxWait: takeBest``'s lower bar
    fallen_back: list[str] = field(default_factory=list)
    denied: list[str] = field(default_factory=list)  # ``afterMaxWait: deny``: given up
    waiting: dict[str, str] = field(default_factory=dict)  # gang → why not now
    blocked_by: str | None = None  # the starving gang that stopped backfill
    not_leader: bool = False


def serve_pass(
    gangs: list[WaitingGang], *, now: float, starvation_seconds: float,
    place: Callable[[WaitingGang, float], str | None],
    give_up: Callable[[WaitingGang, str], bool],
    may_act: Callable[[], bool] = lambda: True,
    keep: Callable[[WaitingGang], frozenset[str]] | None = None,
    place_avoiding: Callable[[WaitingGang, float, frozenset[str]], str | None] | None = None,
) -> PassResult:
    """The queue's policy for one pass over ``gangs`` (oldest first), I/O left to callers:
    ``place(gang, need)`` places the gang when the best placement free reaches ``need``, its
    share of the gang's best (:func:`gputopo.placement.waiting.starts`), and returns None,
    else why not; ``give_up(gang, why)`` denies an overdue gang whose rule says ``deny``
    (True when done). ``need`` comes from the gang's own rule: ``minShare`` first, then
    after ``maxWaitSeconds`` with ``afterMaxWait: takeBest`` its floor (``fallen_back``:
    placed below ``minShare``). Backfill: a gang that does not start is
    skipped, younger ones may go — unless it is starving: then the pass stops there, or
    with ``keep`` and ``place_avoiding`` (backfill around a reservation, as EASY backfill
    does) the gangs behind it are placed only off ``keep(gang)``, the nodes it could
    use well (:mod:`gputopo.placement.starvation`), through ``place_avoiding(gang, need,
    nodes)``."""
    result = PassResult()
    avoid: frozenset[str] = frozenset()

    def try_place(gang: WaitingGang, need: float) -> str | None:
        if avoid and place_avoiding is not None:
            return place_avoiding(gang, need, avoid)
        return place(gang, need)

    for gang in gangs:
        if not may_act():
            result.not_leader = True
            return result
        name = str(gang.key)
        overdue = gang.overdue(now)
        why = try_place(gang, gang.rule.min_share)
        if why is None:
            result.placed.append(name)
            continue
        lower = gang.rule.start_share(overdue=overdue)
        if lower < gang.rule.min_share:  # overdue, takeBest: down to its floor
            below = try_place(gang, lower)
            if below is None:
                result.fallen_back.append(name)
                continue
            why = below
        if gang.rule.gives_up(overdue=overdue):
            if give_up(gang, why):
                result.denied.append(name)
            continue
        result.waiting[name] = why
        if not starving(gang, now, starvation_seconds):
            continue
        if keep is None or place_avoiding is None:
            result.blocked_by = name
            break  # nothing behind a starving gang is placed before it
        if starvation.holds(gang.waited(now), gang.max_wait_seconds, starvation_seconds):
            kept = keep(gang)  # nothing behind it takes the nodes it could use well
            if kept:
                result.blocked_by = result.blocked_by or name
                avoid = avoid | kept
    return result


def settled_network(record: Mapping[str, Any]) -> network.GangNetwork | None:
    """The network plan a gated gang's pods carry since their admission (written into them
    then: a gated pod's env and ports cannot change), with the host ports it cannot move;
    None for records of gangs gated before network plans existed."""
    plan = network.Plan.from_json(record.get("network"))
    if plan is None:
        return None
    gang = record.get("gang") if isinstance(record.get("gang"), Mapping) else {}
    fixed = frozenset(
        (str(p[0]), int(p[1])) for p in gang.get("fixedPorts") or ()
        if isinstance(p, list) and len(p) == 2 and isinstance(p[1], int))
    return network.GangNetwork.settled(plan, fixed)
