"""A gang's reservation as a value: which job, which slots, which replica got which slot.

Why apart from the stores (:mod:`gputopo.cluster.reservations`): both stores, the gang-record
feed and the placement step read and build these values, and their wire form (the gang
record's JSON in the API) must stay readable across releases; the stores only decide where
the values live and how they are claimed. See docs/reservations.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gputopo.placement.types import Placement, ReplicaSlot

#: Seconds a reservation waits for its remaining pods before it is released. Long enough
#: for an operator to create all pods of a big gang and for image pulls of the first ones
#: not to matter (pods are admitted before they are scheduled); short enough that a job
#: that never comes does not block GPUs for long.
DEFAULT_TTL_SECONDS = 600.0


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
    #: the placement's GPU model, predicted step and share of the best free now
    #: (``Placement.throughput``) for the placement record; empty where no node says its
    #: GPU model, and in records written before it was kept
    throughput: Mapping[str, Any] = field(default_factory=dict)

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
            throughput=dict(placement.throughput),
        )

    def evolve(self, **changes: Any) -> GangReservation:
        """A copy with ``changes`` (``dataclasses.replace``: an unknown field is a
        TypeError). The new instance computes its own :meth:`gpus`."""
        return replace(self, **changes)

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
            **({"throughput": dict(self.throughput)} if self.throughput else {}),
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
            throughput=(dict(data["throughput"]) if isinstance(data.get("throughput"), Mapping)
                        else {}),
        )


def _requests_of(raw: object) -> dict[str, int]:
    """The ``requests`` of a record: absent in records written before they were kept (and
    ignored by readers that predate them), so the wire form stays compatible both ways;
    an entry that is not a whole non-negative amount is left out, never a failed read."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): v for k, v in raw.items()
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0}



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
