"""Kubernetes Events that say what gputopo did with a gang: ``kubectl describe`` shows them.

Why Events: a user whose pods sit Pending looks at ``kubectl describe pod`` (and at the
job), not at a placement record in an annotation nor at the webhook's log. So each outcome
becomes a core/v1 Event on every pod of the gang and on the job object:

============  =======  ======================================================================
reason        type     when
============  =======  ======================================================================
GangPlaced    Normal   a pod got its slot (at admission, or from the queue): node, GPUs,
                       predicted bus bandwidth
GangWaiting   Normal   the queue saw the gang waiting: why not now, position in the queue
GangReleased  Normal   the queue lifted the scheduling gate ``gputopo.io/placement``
GangUnplaced  Warning  left without a placement (``whenFull: admit``/``deny``, a gang gputopo
                       can never place, ``afterMaxWait: deny``): why
============  =======  ======================================================================

core/v1, not events.k8s.io/v1: ``kubectl describe`` lists the core/v1 Events whose
``involvedObject`` matches the object's name, namespace, kind and uid
(k8s.io/kubectl/pkg/describe ``searchEvents``; both APIs serve the same stored objects),
and the device plugin writes its Events the same way (gputopo/deviceplugin/pods.py).

Never in the admission's critical section: :meth:`EventRecorder.emit` puts a tuple on a
queue (no I/O, no lock held for long) and one daemon thread writes the Events. A pod being
admitted does not exist yet — it has no uid, and ``kubectl describe pod`` matches on the uid
— so for a pod named without its uid the thread waits for the API server to store it (a few
GETs over ~3 s) and then writes the Event with the uid; a pod that never appears (denied by
a later webhook) gets none. Rate-limited: at most one Event per object and reason per
``min_interval`` seconds (a waiting gang is seen at every queue pass), and a backlog beyond
``max_backlog`` is dropped. A failed write is logged, never raised: Events are a courtesy,
the placement record is the truth.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

PLACED = "GangPlaced"
WAITING = "GangWaiting"
RELEASED = "GangReleased"
UNPLACED = "GangUnplaced"
COMPONENT = "gputopo-webhook"
#: Seconds between two Events of one reason on one object.
DEFAULT_MIN_INTERVAL = 60.0
#: Events waiting to be written beyond this are dropped (an API server that is down).
DEFAULT_MAX_BACKLOG = 10_000
#: Waits before each look for a pod admitted a moment ago (its create follows the answer).
LOOKUP_DELAYS = (0.05, 0.2, 0.5, 1.0, 1.5)
#: Message length kept (the API server refuses messages over 1 KiB... of 1024 runes for
#: events.k8s.io; core/v1 has no limit, but a short message reads better).
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class Target:
    """The object an Event is about. ``uid`` "" for a pod being admitted: looked up."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def involved(self) -> dict[str, str]:
        out = {"kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.api_version:
            out["apiVersion"] = self.api_version
        if self.uid:
            out["uid"] = self.uid
        return out


def pod_target(pod: dict, *, admitted: bool = False) -> Target | None:
    """The Event target of a pod object (None without a name: ``generateName`` only).
    ``admitted``: the pod of an AdmissionReview for its CREATE, whose uid (if the client
    sent one) the API server replaces when it stores the pod: looked up instead."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    name, ns = meta.get("name"), meta.get("namespace") or "default"
    if not isinstance(name, str) or not name:
        return None
    uid = "" if admitted else str(meta.get("uid") or "")
    return Target("v1", "Pod", str(ns), name, uid)


def job_target(pod: dict, *, kind: str, namespace: str, name: str, uid: str) -> Target:
    """The job a gated pod belongs to, its apiVersion read from the pod's ownerReference
    to it (the waiting record names kind, name and uid only)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    api_version = next((str(r.get("apiVersion") or "") for r in meta.get("ownerReferences")
                        or [] if isinstance(r, dict) and r.get("uid") == uid), "")
    return Target(api_version, kind, namespace, name, uid)


def gpus_text(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus)


def slot_message(node: str, gpus: Sequence[int], visible: Sequence[int],
                 bandwidth_gbps: float) -> str:
    """What a GangPlaced Event on a pod says."""
    return (f"placed on node {node}, GPUs {gpus_text(gpus)} (the job's GPUs there: "
            f"{gpus_text(visible)}); predicted all-reduce bus bandwidth "
            f"{bandwidth_gbps:.1f} GB/s")


def gang_message(slots: Sequence[tuple[str, Sequence[int]]], bandwidth_gbps: float) -> str:
    """What a GangPlaced Event on the job says: every pod's node and GPUs."""
    where: dict[str, list[int]] = {}
    for node, gpus in slots:
        where.setdefault(node, []).extend(gpus)
    shown = "; ".join(f"{n}: GPUs {gpus_text(sorted(g))}" for n, g in sorted(where.items()))
    return (f"gang of {len(slots)} pod(s) placed on {len(where)} node(s) ({shown}); "
            f"predicted all-reduce bus bandwidth {bandwidth_gbps:.1f} GB/s")


class EventRecorder:
    """Writes Events from one daemon thread (module docstring); ``start()`` before use."""

    def __init__(self, api_client: client.ApiClient, *, component: str = COMPONENT,
                 instance: str = "", min_interval: float = DEFAULT_MIN_INTERVAL,
                 max_backlog: int = DEFAULT_MAX_BACKLOG,
                 lookup_delays: Sequence[float] = LOOKUP_DELAYS,
                 clock: Callable[[], float] = time.monotonic,
                 request_timeout: float = 5.0) -> None:
        self.core = client.CoreV1Api(api_client)
        self.component = component
        self.instance = instance
        self.min_interval = min_interval
        self.max_backlog = max_backlog
        self.lookup_delays = tuple(lookup_delays)
        self._clock = clock
        self._timeout = request_timeout
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._last: dict[tuple[str, str, str, str], float] = {}
        self._pending = 0  # queued and not yet written or dropped (guarded by _done)
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="gputopo-events", daemon=True)
        self.written = 0
        self.dropped = 0

    # --- callers ------------------------------------------------------------------------
    def emit(self, target: Target, reason: str, message: str, *,
             warning: bool = False) -> None:
        """Queue an Event (cheap: no I/O here)."""
        with self._done:
            self._pending += 1
        self._queue.put((target, reason, message, warning))

    def emit_all(self, targets: Sequence[Target | None], reason: str, message: str, *,
                 warning: bool = False) -> None:
        for t in targets:
            if t is not None:
                self.emit(t, reason, message, warning=warning)

    def later(self, make: Callable[..., Sequence[tuple[Target | None, str, str, bool]]],
              *args: Any) -> None:
        """Queue ``make(*args)``, called on the recorder's thread, whose (target, reason,
        message, warning) rows are then written: an admission pays for one tuple put on a
        queue, not for building targets and messages (~14 us a pod)."""
        with self._done:
            self._pending += 1
        self._queue.put((make, args))

    def start(self) -> EventRecorder:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every Event queued so far is written or dropped (tests, shutdown)."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, timeout)

    # --- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                if self._queue.qsize() > self.max_backlog:
                    self.dropped += 1
                elif len(item) == 2:  # later(make, *args)
                    for target, reason, message, warning in item[0](*item[1]):
                        if target is not None:
                            self._write(target, reason, message, warning)
                else:
                    self._write(*item)
            except Exception:  # never let one Event stop the others
                log.exception("events: writing %s failed", item)
            finally:
                with self._done:
                    self._pending -= 1
                    self._done.notify_all()

    def _due(self, target: Target, reason: str) -> bool:
        key = (target.kind, target.namespace, target.name, reason)
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.min_interval:
            return False
        if len(self._last) >= 50_000:  # bounded: forget the old ones
            self._last = {k: v for k, v in self._last.items()
                          if now - v < self.min_interval}
        self._last[key] = now
        return True

    def _write(self, target: Target, reason: str, message: str, warning: bool) -> None:
        if not self._due(target, reason):
            self.dropped += 1
            return
        if not target.uid and target.kind == "Pod":
            uid = self._pod_uid(target)
            if not uid:
                log.info("events: pod %s/%s not found; %s not written", target.namespace,
                         target.name, reason)
                self.dropped += 1
                return
            target = Target(target.api_version, target.kind, target.namespace, target.name,
                            uid)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{target.name}.", "namespace": target.namespace},
            "involvedObject": target.involved(),
            "reason": reason, "message": message[:MAX_MESSAGE],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance or self.component,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.core.create_namespaced_event(target.namespace, body, _preload_content=False,
                                              _request_timeout=self._timeout)
        except (ApiException, OSError, ValueError) as exc:
            log.warning("events: %s on %s %s/%s not written: %s", reason, target.kind,
                        target.namespace, target.name, exc)
            return
        self.written += 1

    def _pod_uid(self, target: Target) -> str:
        """The uid of a pod admitted a moment ago, once the API server has stored it."""
        for delay in self.lookup_delays:
            time.sleep(delay)
            try:
                resp = self.core.read_namespaced_pod(target.name, target.namespace,
                                                     _preload_content=False,
                                                     _request_timeout=self._timeout)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                log.info("events: pod %s/%s: %s", target.namespace, target.name, exc.status)
                return ""
            except (OSError, ValueError):
                return ""
            return str((json.loads(resp.data).get("metadata") or {}).get("uid") or "")
        return ""
