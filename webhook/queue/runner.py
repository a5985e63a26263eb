"""The placement queue's loop in ``gputopo serve``: elect, then re-solve on every change.

Why event-driven plus a period: GPUs free up when a pod finishes or is deleted, a node is
added or activated, or a reservation is released. The cluster view's watches see the first
two (:attr:`ClusterView.listeners` kicks the loop, debounced so a burst of events costs one
pass); reservations released by another replica live in ConfigMaps the view does not
watch, so a pass also runs every ``interval_seconds``. Each round first renews (or tries to
take) the Lease; only the holder runs passes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from gputopo import names
from webhook import metrics
from webhook.events import EventRecorder
from webhook.queue.lease import DEFAULT_LEASE_SECONDS, DEFAULT_RENEW_SECONDS, LeaderElector
from webhook.queue.placer import PlacementQueue

log = logging.getLogger(__name__)

#: Watched kinds whose changes cannot free GPUs nor bring a waiting pod; every other kind
#: (pods, nodes, ACK reports, training jobs: a deleted or finished job releases its
#: reservation) wakes the queue. The GPU ledgers are written by every reservation (the
#: queue's own too), and so are the gang records; GPUs a release frees come with the job
#: event that kicks it already, and a TTL expiry is found by the periodic pass.
QUIET_KINDS = frozenset({"namespaces", "podgroups", "ledgers", "gang-records"})
DEFAULT_INTERVAL_SECONDS = 5.0
DEFAULT_DEBOUNCE_SECONDS = 0.5


def default_identity() -> str:
    """``<hostname>_<pid>``: unique per process, readable in the Lease (as client-go's)."""
    return f"{socket.gethostname()}_{os.getpid()}"


class QueueRunner:
    """A daemon thread: lease round, then a queue pass when leading; stop() to end."""

    def __init__(self, queue: PlacementQueue, elector: LeaderElector, *,
                 interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
                 debounce_seconds: float = DEFAULT_DEBOUNCE_SECONDS) -> None:
        self.queue = queue
        self.elector = elector
        self.interval_seconds = interval_seconds
        self.debounce_seconds = debounce_seconds
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placement-queue", daemon=True)
        self.passes = 0

    def kick(self, kind: str = "pods") -> None:
        """Ask for a pass soon (a watched change that may free GPUs)."""
        if kind not in QUIET_KINDS:
            self._kick.set()

    def start(self) -> QueueRunner:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._kick.set()
        self._thread.join(timeout)
        self.elector.release()
        metrics.QUEUE_LEADER.set(0)

    def _run(self) -> None:
        wait = min(self.interval_seconds, self.elector.renew_seconds)
        while not self._stop.is_set():
            leading = self.elector.try_acquire_or_renew()
            metrics.QUEUE_LEADER.set(1 if leading else 0)
            if leading:
                try:
                    self.queue.run_once()
                    self.passes += 1
                except Exception:  # the API away, a bad object: log, the next round retries
                    log.exception("placement queue: pass failed")
            if self._kick.wait(wait) and not self._stop.is_set():
                self._stop.wait(self.debounce_seconds)  # gather a burst of events
            self._kick.clear()


def start_queue(view: Any, *, identity: str | None = None,
                lease_seconds: float = DEFAULT_LEASE_SECONDS,
                renew_seconds: float = DEFAULT_RENEW_SECONDS,
                interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
                recorder: EventRecorder | None = None) -> QueueRunner:
    """The queue for a live cluster view (``gputopo serve``): same API client, same
    reservation store as the view's admissions; started, and kicked by the view.
    ``recorder``: the :class:`webhook.events.EventRecorder` its Events go through."""
    ident = identity or default_identity()
    elector = LeaderElector(view.api_client, namespace=names.GPUTOPO_NAMESPACE,
                            name=names.QUEUE_LEASE, identity=ident,
                            lease_seconds=lease_seconds, renew_seconds=renew_seconds)
    queue = PlacementQueue(view.api_client, view, view.reservations, identity=ident,
                           is_leader=elector.is_leader, recorder=recorder)
    runner = QueueRunner(queue, elector, interval_seconds=interval_seconds)
    view.listeners.append(runner.kick)
    return runner.start()
