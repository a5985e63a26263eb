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
``gputopo-system`` with optimistic concurrency). See docs/reservations.md.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from gputopo.cluster.reserved_requests import pending_requests
from gputopo.errors import GputopoError
from gputopo.placement.types import Placement, ReplicaSlot

#: Seconds a reservation waits for its remaining pods before it is released. Long enough
#: for an operator to create all pods of a big gang and for image pulls of the first ones
#: not to matter (pods are admitted before they are scheduled); short enough that a job
#: that never comes does not block GPUs for long.
DEFAULT_TTL_SECONDS = 600.0

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


@dataclass(frozen=True, order=True)
class GangKey:
    """Which job a reservation belongs to. ``uid`` is the job object's metadata.uid.

    Why the uid: a job deleted and recreated under the same name is a new gang, and a pod
    that copies another job's labels still does not carry that job's uid in its owner
    references.
    """

    namespace: str
    kind: str
    name: str
    uid: str

    def __post_init__(self) -> None:
        ns, kind, name, uid = self.namespace, self.kind, self.name, self.uid
        if (isinstance(ns, str) and isinstance(kind, str) and isinstance(name, str)
                and isinstance(uid, str) and ns and kind and name and uid):
            return  # every admitted GPU pod makes a key: the valid one checked in one go
        for f in ("namespace", "kind", "name", "uid"):
            if not isinstance(getattr(self, f), str) or not getattr(self, f):
                raise ValueError(f"GangKey.{f} must be a non-empty string")

    def to_json(self) -> dict[str, str]:
        return {"namespace": self.namespace, "kind": self.kind, "name": self.name,
                "uid": self.uid}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GangKey:
        return cls(str(data["namespace"]), str(data["kind"]), str(data["name"]),
                   str(data["uid"]))

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True, order=True)
class ReplicaKey:
    """One replica of a gang: (replica type, replica index), e.g. ("worker", 3).

    The type is lower-cased: training-operator labels say ``worker``, job specs ``Worker``.
    """

    replica_type: str
    index: int

    def __post_init__(self) -> None:
        if not isinstance(self.replica_type, str) or not self.replica_type:
            raise ValueError("ReplicaKey.replica_type must be a non-empty string")
        if not isinstance(self.index, int) or self.index < 0:
            raise ValueError("ReplicaKey.index must be a non-negative int")
        object.__setattr__(self, "replica_type", self.replica_type.lower())

    def wire(self) -> str:
        """``worker/3``: the form stored in ConfigMaps and shown in messages."""
        return f"{self.replica_type}/{self.index}"

    @classmethod
    def from_wire(cls, text: str) -> ReplicaKey:
        rtype, _, idx = text.rpartition("/")
        return cls(rtype, int(idx))


@dataclass(frozen=True)
class GangReservation:
    """The GPUs promised to one gang and which replica got which slot.

    ``slots`` are the solver's slots (``ReplicaSlot.replica`` numbers them 0..n-1);
    ``assigned`` maps a replica to the number of the slot it was given. ``expires_at``
    (epoch seconds) only matters while some slot is unassigned: a fully admitted gang lives
    until its job is deleted or finishes. ``version`` is the store's opaque revision.
    """

    key: GangKey
    slots: tuple[ReplicaSlot, ...]
    assigned: Mapping[ReplicaKey, int] = field(default_factory=dict)
    created_at: float = 0.0
    expires_at: float = 0.0
    bus_bandwidth_gbps: float = 0.0
    reason: str = ""
    token: str = ""
    version: str = ""
    ttl_seconds: float = DEFAULT_TTL_SECONDS
    #: the replica (wire form) slot k is meant for, in slot order: ports of a network plan
    #: are derived from a slot's GPUs, so every pod must know at once which slot each
    #: replica will get (empty: first come, lowest free slot)
    order: tuple[str, ...] = ()
    #: the gang's network plan (``webhook.placement.network.Plan.to_json``), so that every
    #: pod of the gang, a recreated one too, gets the same
    network: Mapping[str, Any] = field(default_factory=dict)
    #: one replica's non-GPU requests (``node_resources.pod_demand`` of the gang's first
    #: pod: CPU in millicores, memory in bytes, pods, extended resources): a slot whose pod
    #: is not there yet holds them on its node (gputopo.cluster.reserved_requests); empty in
    #: records written before it was kept
    requests: Mapping[str, int] = field(default_factory=dict)

    # --- what the placement step reads ---------------------------------------------------
    def slot(self, number: int) -> ReplicaSlot:
        for s in self.slots:
            if s.replica == number:
                return s
        raise KeyError(number)

    def slot_for(self, replica: ReplicaKey) -> ReplicaSlot | None:
        """The slot already given to ``replica``, or None."""
        n = self.assigned.get(replica)
        return None if n is None else self.slot(n)

    @property
    def assignments(self) -> dict[ReplicaKey, ReplicaSlot]:
        return {r: self.slot(n) for r, n in sorted(self.assigned.items())}

    @property
    def unassigned(self) -> tuple[ReplicaSlot, ...]:
        taken = set(self.assigned.values())
        return tuple(s for s in self.slots if s.replica not in taken)

    @property
    def complete(self) -> bool:
        """Every slot has its replica."""
        return not self.unassigned

    def gpus(self) -> dict[str, frozenset[int]]:
        """node → GPUs this reservation holds (a fresh dict, the caller's to modify).

        Computed once per reservation (the slots never change: frozen): the placement step
        asks every listed reservation for a gang that finds no room, and the Kubernetes
        store hands out the same parsed reservations from one LIST to the next."""
        held = self.__dict__.get("_gpus")
        if held is None:
            out: dict[str, set[int]] = {}
            for s in self.slots:
                out.setdefault(s.node, set()).update(s.gpus)
            held = {n: frozenset(g) for n, g in out.items()}
            object.__setattr__(self, "_gpus", held)
        return dict(held)

    def visible_gpus(self, node: str) -> tuple[int, ...]:
        """The job's GPUs on ``node``, ascending: the ``gpu-visible`` annotation value."""
        return tuple(sorted(self.gpus().get(node, frozenset())))

    def expired(self, now: float) -> bool:
        # the time first: it is one comparison, and every gang is asked at every new gang
        return now >= self.expires_at and not self.complete

    # --- building and the wire form ------------------------------------------------------
    @classmethod
    def from_placement(
        cls, key: GangKey, placement: Placement, *, now: float, ttl_seconds: float,
        token: str = "", order: Iterable[str] = (), network: Mapping[str, Any] | None = None,
        requests: Mapping[str, int] | None = None,
    ) -> GangReservation:
        if not placement.feasible or not placement.slots:
            raise ValueError("only a feasible placement with slots can be reserved")
        numbers = [s.replica for s in placement.slots]
        if len(set(numbers)) != len(numbers):
            raise ValueError("placement slots must have distinct replica numbers")
        seen: set[tuple[str, int]] = set()
        for s in placement.slots:
            for g in s.gpus:
                if (s.node, g) in seen:
                    raise ValueError(f"placement uses GPU {g} of {s.node} twice")
                seen.add((s.node, g))
        return cls(
            key=key, slots=tuple(sorted(placement.slots, key=lambda s: s.replica)),
            assigned={}, created_at=now, expires_at=now + ttl_seconds,
            bus_bandwidth_gbps=placement.bus_bandwidth_gbps, reason=placement.reason,
            token=token, ttl_seconds=ttl_seconds, order=tuple(order),
            network=dict(network or {}), requests=dict(requests or {}),
        )

    def evolve(self, **changes: Any) -> GangReservation:
        """A copy with ``changes``: what ``dataclasses.replace`` gives, without its cost.

        Why: the store makes two or three such copies per admitted GPU pod (the version
        bump, the slot assignment), and ``replace`` walks every field of the class and
        calls the generated ``__init__``, which sets each of the twelve fields through
        ``object.__setattr__``: ~480 bytecodes per copy (``--opcodes`` of
        bench/admission_profile.py), a sixth of a later pod's placement step. Here the
        instance dict is copied and updated at C speed. Nothing is skipped:
        GangReservation has no ``__post_init__`` (no field is validated or derived on
        construction, so ``replace`` checks only the names, and so does this), and the one
        value cached on an instance (:meth:`gpus`, from ``slots``) is carried only while
        ``slots`` stays (tests/cluster/test_reservation_evolve.py compares both ways on
        generated reservations)."""
        if not changes.keys() <= _FIELD_NAMES:
            raise TypeError(f"GangReservation has no field(s) "
                            f"{sorted(changes.keys() - _FIELD_NAMES)}")
        new = object.__new__(type(self))
        state = new.__dict__
        state.update(self.__dict__)
        state.update(changes)
        if "slots" in changes:
            state.pop("_gpus", None)
        return new

    def with_assignment(self, replica: ReplicaKey, number: int, *, now: float
                        ) -> GangReservation:
        """``replica`` gets slot ``number``; the pods are coming, so the TTL restarts."""
        return self.evolve(assigned={**self.assigned, replica: number},
                           expires_at=now + self.ttl_seconds)

    def with_slot_moved(self, number: int, node: str, gpus: tuple[int, ...]
                        ) -> GangReservation:
        """Slot ``number`` on (``node``, ``gpus``) instead; its replica keeps it."""
        slots = tuple(ReplicaSlot(s.replica, node, tuple(gpus)) if s.replica == number else s
                      for s in self.slots)
        return self.evolve(slots=slots)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key.to_json(),
            "slots": [{"replica": s.replica, "node": s.node, "gpus": list(s.gpus)}
                      for s in self.slots],
            "assigned": {r.wire(): n for r, n in sorted(self.assigned.items())},
            "createdAt": self.created_at,
            "expiresAt": self.expires_at,
            "busBandwidthGBps": self.bus_bandwidth_gbps,
            "reason": self.reason,
            "token": self.token,
            "ttlSeconds": self.ttl_seconds,
            **({"order": list(self.order)} if self.order else {}),
            **({"network": dict(self.network)} if self.network else {}),
            **({"requests": dict(self.requests)} if self.requests else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, version: str = "") -> GangReservation:
        return cls(
            key=GangKey.from_json(data["key"]),
            slots=tuple(ReplicaSlot(int(s["replica"]), str(s["node"]),
                                    tuple(int(g) for g in s["gpus"])) for s in data["slots"]),
            assigned={ReplicaKey.from_wire(k): int(v)
                      for k, v in dict(data.get("assigned", {})).items()},
            created_at=float(data.get("createdAt", 0.0)),
            expires_at=float(data.get("expiresAt", 0.0)),
            bus_bandwidth_gbps=float(data.get("busBandwidthGBps", 0.0)),
            reason=str(data.get("reason", "")),
            token=str(data.get("token", "")),
            version=version,
            ttl_seconds=float(data.get("ttlSeconds", DEFAULT_TTL_SECONDS)),
            order=tuple(str(r) for r in data.get("order") or ()),
            network=dict(data["network"]) if isinstance(data.get("network"), Mapping) else {},
            requests=_requests_of(data.get("requests")),
        )


def _requests_of(raw: object) -> dict[str, int]:
    """The ``requests`` of a record: absent in records written before they were kept (and
    ignored by readers that predate them), so the wire form stays compatible both ways;
    an entry that is not a whole non-negative amount is left out, never a failed read."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): v for k, v in raw.items()
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


_FIELD_NAMES = frozenset(f.name for f in fields(GangReservation))


def pick_slot(res: GangReservation, replica: ReplicaKey) -> int | None:
    """The slot number ``replica`` gets: its existing one, else the slot the reservation's
    ``order`` meant for it (when still free), else the lowest free slot.

    Deterministic so that two webhook replicas racing on one gang compute the same answer.
    """
    n = res.assigned.get(replica)
    if n is not None:
        return n
    # the free slots are not built (``res.unassigned``): one set of the taken numbers, then
    # the slots walked in order (tests/cluster/test_pick_slot.py: the same as building them)
    taken = set(res.assigned.values())
    order = res.order
    if order:
        wire = replica.wire()
        if wire in order:
            meant = order.index(wire)
            if meant not in taken:
                for s in res.slots:
                    if s.replica == meant:
                        return meant
    for s in res.slots:
        if s.replica not in taken:
            return s.replica
    return None


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
        # the gangs with a slot no replica has been given yet: what pending_requests walks
        self._incomplete: set[GangKey] = set()
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
            self._incomplete.discard(res.key)
        else:
            self._incomplete.add(res.key)
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
        self._incomplete.discard(key)
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
            return pending_requests([self._gangs[k] for k in self._incomplete])

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
