"""The gangs waiting in the placement queue, as admission sees them in the cluster view.

Why here: admission must honour the queue's starvation guard
(:mod:`gputopo.placement.starvation`), so it needs the waiting gangs without a LIST of the
pods per review. Every gated pod carries its placement record (webhook/placement/records.py
``waiting_record``: the gang, its size, when it started waiting, its ``maxWaitSeconds``);
the live view keeps one :class:`~gputopo.placement.starvation.Waiter` per gated pod, updated
pod event by pod event, and hands admission one per gang.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gputopo import names
from gputopo.placement.job_needs import recorded_needs
from gputopo.placement.starvation import Waiter
from gputopo.placement.types import GangRequest
from gputopo.placement.waiting import rule_from_record


def is_gated(pod: Mapping[str, Any]) -> bool:
    """True when the pod still carries gputopo's scheduling gate."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    return any(isinstance(g, Mapping) and g.get("name") == names.PLACEMENT_GATE
               for g in spec.get("schedulingGates") or [])


def waiter_of(pod: Mapping[str, Any]) -> Waiter | None:
    """The waiting gang a gated, unbound pod belongs to (from its record); None for any
    other pod, and for a record gputopo did not write (the queue leaves those alone too)."""
    if not is_gated(pod):
        return None
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    if spec.get("nodeName") or meta.get("deletionTimestamp"):
        return None
    raw = (meta.get("annotations") or {}).get(names.PLACEMENT_ANNOTATION)
    try:
        rec = json.loads(raw) if isinstance(raw, str) else None
        if not isinstance(rec, dict) or not rec.get("waiting"):
            return None
        g = rec["gang"]
        cap = g.get("maxReplicasPerNode")
        request = GangRequest(replicas=int(g["replicas"]),
                              gpus_per_replica=int(g["gpusPerReplica"]),
                              max_replicas_per_node=int(cap) if cap is not None else None,
                              **recorded_needs(g))
        return Waiter(name=f"{g['kind']} {g['namespace']}/{g['name']}", uid=str(g["uid"]),
                      since=float(rec.get("since") or 0.0), gpus=request.total_gpus,
                      max_wait_seconds=float(rec.get("maxWaitSeconds") or 0.0),
                      request=request, rule=rule_from_record(rec))
    except (KeyError, TypeError, ValueError):
        return None


def by_gang(waiters: Iterable[Waiter]) -> list[Waiter]:
    """One waiter per gang (its pods' earliest ``since`` and least ``maxWaitSeconds``, as
    the queue reads a gang: webhook/queue/gangs.py ``waiting_gangs``)."""
    out: dict[str, Waiter] = {}
    for w in waiters:
        had = out.get(w.uid)
        if had is None:
            out[w.uid] = w
        else:
            out[w.uid] = replace(had, since=min(had.since, w.since),
                                 max_wait_seconds=min(had.max_wait_seconds,
                                                      w.max_wait_seconds)
                                 or w.max_wait_seconds)
    return list(out.values())
