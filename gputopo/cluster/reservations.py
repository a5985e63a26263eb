"""Gang reservations: GPUs promised to a training job between its first pod and its last.

Why: a gang is placed once, when its first GPU pod is admitted, but its pods arrive one by
one (and may be recreated). Until they are all bound, the GPUs chosen for them exist only
as a promise. This module keeps that promise so that

* every replica of the gang gets its slot, and a replica recreated with the same
  (job uid, replica type, replica index) gets the same slot again;
* a pod of another job cannot take the slot (the key holds the job's uid, which a pod
  cannot fake by copying labels);
* no GPU is ever promised twice, whatever number of webhook replicas run: ``reserve`` claims
  all GPUs of a placement atomically or raises :class:`ReservationConflict`, and the caller
  re-solves against fresh :meth:`ReservationStore.held_gpus`.

Two stores implement :class:`ReservationStore`: :class:`InMemoryReservationStore` (one
process: ``gputopo mutate``, the demo, file-backed ``serve``) and
``KubernetesReservationStore`` (in :mod:`gputopo.cluster.k8s_reservations`: ConfigMaps in
``gputopo-system`` with optimistic concurrency). The values they keep (:class:`GangKey`,
:class:`ReplicaKey`, :class:`GangReservation`, :func:`pick_slot`) are
:mod:`gputopo.cluster.gang_reservation`'s, importable from here too. See
docs/reservations.md.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gputopo.cluster.gang_reservation import (
    DEFAULT_TTL_SECONDS,
    GangKey,
    GangReservation,
    ReplicaKey,
    pick_slot,
)
from gputopo.cluster.reserved_requests import pending_requests, summed
from gputopo.errors import GputopoError
from gputopo.placement.types import Placement, ReplicaSlot

#: the values live in gputopo.cluster.gang_reservation; importable from here too
__all__ = ["DEFAULT_TTL_SECONDS", "GangKey", "GangReservation", "HeldSnapshot",
           "InMemoryReservationStore", "ReplicaKey", "ReservationConflict", "ReservationStore",
           "ReservationUnavailable", "admission_deadline", "pick_slot", "run_by"]

_admission = threading.local()


def run_by(until: float, call: Any, *args: Any) -> Any:
    """``call(*args)`` with ``until`` (a ``time.monotonic()`` instant) as this thread's
    admission deadline: API-backed stores end their calls by then (see
    :func:`admission_deadline`). The server sets it from the request's ARRIVAL, so an
    admission that queued behind slow ones does not get a fresh budget of its own."""
    _admission.until = until
    try:
        return call(*args)
    finally:
        _admission.until = None


def admission_deadline() -> float | None:
    """The ``time.monotonic()`` instant this thread's admission must be answered by."""
    return getattr(_admission, "until", None)


class ReservationConflict(GputopoError):
    """Some GPU of the placement is already held by another gang: re-solve with fresh state.

    ``gpus`` maps node → GPU indices found held by someone else (may be partial).
    """

    def __init__(self, message: str, gpus: Mapping[str, Iterable[int]] | None = None) -> None:
        super().__init__(message)
        self.gpus = {n: frozenset(g) for n, g in (gpus or {}).items()}


class ReservationUnavailable(GputopoError):
    """The store cannot be reached (API server down, too many conflicts in a row)."""


class ReservationStore(Protocol):
    """Where gang reservations live. All methods are safe to call from many threads.

    ``reserve`` is all-or-nothing: it claims every GPU of the placement or none, and raises
    :class:`ReservationConflict` when any is held by another gang. When ``key`` is already
    reserved it returns the existing reservation unchanged (whoever reserved first wins;
    the caller must use the returned slots, not its own placement).
    """

    def get(self, key: GangKey) -> GangReservation | None: ...

    def reserve(
        self, key: GangKey, placement: Placement, *, ttl_seconds: float | None = None,
        now: float | None = None, order: Iterable[str] = (),
        network: Mapping[str, Any] | None = None, requests: Mapping[str, int] | None = None,
    ) -> GangReservation:
        """``requests``: one replica's non-GPU requests, kept with the reservation."""
        ...

    def assign_slot(
        self, key: GangKey, replica: ReplicaKey, *, now: float | None = None
    ) -> tuple[GangReservation, ReplicaSlot] | None:
        """Give ``replica`` its slot (the same one every time). None when the gang has no
        reservation or every slot already belongs to another replica."""
        ...

    def move_slot(
        self, key: GangKey, number: int, node: str, gpus: tuple[int, ...], *, from_node: str
    ) -> GangReservation | None:
        """Move slot ``number`` from ``from_node`` (gone, or no longer fit for the gang's
        pods) to GPUs ``gpus`` of ``node``, claiming them like :meth:`reserve` does and
        freeing the old ones. When the slot has already left ``from_node`` (another
        webhook replica moved it) the reservation is returned unchanged. None when the
        gang has no reservation; :class:`ReservationConflict` when a GPU is held."""
        ...

    def release(self, key: GangKey) -> bool:
        """Drop the reservation; True if there was one."""
        ...

    def held_gpus(self) -> dict[str, set[int]]:
        """node → GPU indices promised to any gang (the solver must exclude them)."""
        ...

    def pending_requests(self) -> dict[str, dict[str, int]]:
        """node → the summed non-GPU requests of reserved slots no replica has been given
        yet (their pods do not exist: the node's own sums do not hold them); see
        :mod:`gputopo.cluster.reserved_requests`."""
        ...

    def expire(self, now: float | None = None) -> list[GangKey]:
        """Release reservations whose pods never all came within the TTL; returns them."""
        ...

    def list(self) -> list[GangReservation]: ...


@dataclass(frozen=True)
class HeldSnapshot:
    """The GPUs held at one revision of a store that keeps them per node as it changes.

    ``gpus`` (node → GPU indices) is never modified after it is handed out: the next change
    publishes a new mapping. ``changed`` names every node whose entry differs from the
    revision the caller asked about (None: unknown, the caller must look at every node).
    Why: the placement step marks reserved GPUs used on every node of the cluster for each
    new gang; knowing which few nodes changed since the last gang lets it redo only those.
    """

    revision: int
    gpus: Mapping[str, frozenset[int]]
    changed: frozenset[str] | None

    @classmethod
    def from_log(cls, revision: int, gpus: Mapping[str, frozenset[int]],
                 log: Sequence[tuple[int, frozenset[str]]], since: int | None
                 ) -> HeldSnapshot:
        """The snapshot at ``revision`` for a caller that last saw revision ``since``,
        from a log of (revision, nodes changed by it), oldest first (the in-memory store's
        and the ledger feed's): ``changed`` None when not asked or when the log no longer
        reaches back that far, empty when nothing changed."""
        if since is None or since > revision or since < 0:
            return cls(revision, gpus, None)
        if since == revision:
            return cls(revision, gpus, frozenset())
        if not log or log[0][0] > since + 1:
            return cls(revision, gpus, None)
        changed: set[str] = set()
        for at, nodes in reversed(log):
            if at <= since:
                break
            changed |= nodes
        return cls(revision, gpus, frozenset(changed))


#: How many held-GPU changes the in-memory store remembers for :meth:`held_snapshot`
#: callers that are behind: a caller further behind recomputes everything, nothing worse.
HELD_LOG = 2048


class InMemoryReservationStore:
    """A thread-safe in-process store: one lock, dicts. For one process only.

    Why a single lock: operations are microseconds, and a lock makes "check every GPU, then
    claim them all" trivially atomic. For the same reason no claim is ever held without its
    reservation recorded (``claims_in_flight`` is False): the placement step need not look
    for reservations still being written.

    Held GPUs are kept per node as reservations change (copy-on-write, with a log of the
    nodes each change touched) and the earliest possible expiry as a lower bound, so that
    :meth:`held_gpus`, :meth:`held_snapshot` and :meth:`expire`, called for every new gang,
    do not walk every GPU and every gang of a full cluster (docs/reservations.md).
    """

    claims_in_flight = False

    def __init__(self, *, ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 clock: Any = time.time) -> None:
        self.ttl_seconds = float(ttl_seconds)
        self._clock = clock
        self._lock = threading.Lock()
        self._gangs: dict[GangKey, GangReservation] = {}
        # the gangs with a slot no replica has been given yet, each with the requests
        # those slots hold per node (pending_requests adds them up)
        self._incomplete: dict[GangKey, dict[str, dict[str, int]]] = {}
        self._owner: dict[tuple[str, int], GangKey] = {}
        self._revision = 0
        # node -> GPUs held there (the live sets) and the published, never-mutated copy
        self._by_node: dict[str, set[int]] = {}
        self._held: dict[str, frozenset[int]] = {}
        self._held_rev = 0
        self._held_log: deque[tuple[int, frozenset[str]]] = deque(maxlen=HELD_LOG)
        # no gang expires before this instant (a lower bound: only ever lowered, and made
        # exact again by each sweep of expire())
        self._next_expiry = float("inf")

    def _now(self, now: float | None) -> float:
        return float(self._clock()) if now is None else float(now)

    def _bump(self, res: GangReservation, **changes: Any) -> GangReservation:
        """``res`` with ``changes`` and the next version, recorded (one copy of it)."""
        self._revision += 1
        res = res.evolve(version=str(self._revision), **changes)
        self._gangs[res.key] = res
        if res.complete:
            self._incomplete.pop(res.key, None)
        else:
            self._incomplete[res.key] = pending_requests([res])
            self._next_expiry = min(self._next_expiry, res.expires_at)
        return res

    def _claim_locked(self, node: str, gpus: Iterable[int], key: GangKey) -> None:
        live = self._by_node.setdefault(node, set())
        for g in gpus:
            self._owner[(node, g)] = key
            live.add(g)

    def _unclaim_locked(self, node: str, gpus: Iterable[int], key: GangKey) -> None:
        live = self._by_node.get(node)
        for g in gpus:
            if self._owner.get((node, g)) == key:
                del self._owner[(node, g)]
                if live is not None:
                    live.discard(g)
        if live is not None and not live:
            del self._by_node[node]

    def _publish_locked(self, nodes: Iterable[str]) -> None:
        """Publish the held GPUs of ``nodes`` (changed just now) as a new mapping."""
        touched = frozenset(nodes)
        if not touched:
            return
        held = dict(self._held)
        for node in touched:
            live = self._by_node.get(node)
            if live:
                held[node] = frozenset(live)
            else:
                held.pop(node, None)
        self._held = held
        self._held_rev += 1
        self._held_log.append((self._held_rev, touched))

    def get(self, key: GangKey) -> GangReservation | None:
        with self._lock:
            return self._gangs.get(key)

    def reserve(
        self, key: GangKey, placement: Placement, *, ttl_seconds: float | None = None,
        now: float | None = None, order: Iterable[str] = (),
        network: Mapping[str, Any] | None = None, requests: Mapping[str, int] | None = None,
    ) -> GangReservation:
        t = self._now(now)
        ttl = self.ttl_seconds if ttl_seconds is None else float(ttl_seconds)
        res = GangReservation.from_placement(key, placement, now=t, ttl_seconds=ttl,
                                             token=f"mem-{id(self):x}", order=order,
                                             network=network, requests=requests)
        with self._lock:
            existing = self._gangs.get(key)
            if existing is not None:
                return existing
            clash: dict[str, set[int]] = {}
            for node, gpus in res.gpus().items():
                for g in gpus:
                    owner = self._owner.get((node, g))
                    if owner is not None and owner != key:
                        clash.setdefault(node, set()).add(g)
            if clash:
                raise ReservationConflict(
                    f"{key}: GPUs already reserved: "
                    + "; ".join(f"{n}: {sorted(g)}" for n, g in sorted(clash.items())),
                    clash,
                )
            wanted = res.gpus()
            for node, gpus in wanted.items():
                self._claim_locked(node, gpus, key)
            self._publish_locked(wanted)
            return self._bump(res)

    def assign_slot(
        self, key: GangKey, replica: ReplicaKey, *, now: float | None = None
    ) -> tuple[GangReservation, ReplicaSlot] | None:
        t = self._now(now)
        with self._lock:
            res = self._gangs.get(key)
            if res is None:
                return None
            n = pick_slot(res, replica)
            if n is None:
                return None
            if replica not in res.assigned:
                # with_assignment and the version bump in one copy, not two (~5 us cold)
                res = self._bump(res, assigned={**res.assigned, replica: n},
                                 expires_at=t + res.ttl_seconds)
            return res, res.slot(n)

    def move_slot(
        self, key: GangKey, number: int, node: str, gpus: tuple[int, ...], *, from_node: str
    ) -> GangReservation | None:
        with self._lock:
            res = self._gangs.get(key)
            if res is None:
                return None
            old = res.slot(number)
            if old.node != from_node:
                return res
            # held by another gang, or by another slot of this one: either way not free
            taken = sorted(g for g in gpus if (node, g) in self._owner)
            if taken:
                raise ReservationConflict(
                    f"{key}: GPUs {taken} of {node} are already reserved", {node: taken})
            self._unclaim_locked(old.node, old.gpus, key)
            self._claim_locked(node, gpus, key)
            self._publish_locked((old.node, node))
            return self._bump(res.with_slot_moved(number, node, tuple(gpus)))

    def release(self, key: GangKey) -> bool:
        with self._lock:
            return self._release_locked(key)

    def _release_locked(self, key: GangKey) -> bool:
        res = self._gangs.pop(key, None)
        self._incomplete.pop(key, None)
        if res is None:
            return False
        held = res.gpus()
        for node, gpus in held.items():
            self._unclaim_locked(node, gpus, key)
        self._publish_locked(held)
        return True

    def held_gpus(self) -> dict[str, set[int]]:
        with self._lock:
            return {node: set(gpus) for node, gpus in self._held.items()}

    def pending_requests(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return summed(self._incomplete.values())

    def held_snapshot(self, since: int | None = None) -> HeldSnapshot:
        """The held GPUs now, and which nodes changed after revision ``since`` (None when
        not asked, or when the change log no longer reaches back that far)."""
        with self._lock:
            return HeldSnapshot.from_log(self._held_rev, self._held, self._held_log, since)

    def expire(self, now: float | None = None) -> list[GangKey]:
        t = self._now(now)
        with self._lock:
            if t < self._next_expiry:
                return []  # nothing can have expired yet: no walk over every gang
            gone = [k for k, r in self._gangs.items() if r.expired(t)]
            out = [k for k in gone if self._release_locked(k)]
            self._next_expiry = min((r.expires_at for r in self._gangs.values()
                                     if not r.complete), default=float("inf"))
            return out

    def list(self) -> list[GangReservation]:
        with self._lock:
            return sorted(self._gangs.values(), key=lambda r: r.key)
