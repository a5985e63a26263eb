"""``GangReservation.evolve`` gives what ``dataclasses.replace`` gives.

Why: the stores copy a reservation for every change (version bump, slot assignment, slot
move) with ``evolve``, which copies the instance dict instead of re-running the generated
``__init__``. It must give the very same field values as ``replace`` for any reservation
and any change, refuse what ``replace`` refuses, and never carry a cached value of the old
slots (``gpus()``) into a copy with other slots.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo.cluster.reservations import GangKey, GangReservation, ReplicaKey
from gputopo.placement.types import ReplicaSlot

FIELDS = [f.name for f in dataclasses.fields(GangReservation)]
names = st.text("abcxyz-0123", min_size=1, max_size=6)
floats = st.floats(allow_nan=False, allow_infinity=False, width=32)


@st.composite
def slot_lists(draw: st.DrawFn) -> tuple[ReplicaSlot, ...]:
    count = draw(st.integers(1, 4))
    return tuple(ReplicaSlot(i, draw(st.sampled_from(["n1", "n2", "n3"])),
                             tuple(sorted(draw(st.sets(st.integers(0, 7), min_size=1,
                                                       max_size=3)))))
                 for i in range(count))


replica_keys = st.builds(ReplicaKey, st.sampled_from(["worker", "master"]), st.integers(0, 3))
VALUES = {
    "key": st.builds(GangKey, names, st.sampled_from(["PyTorchJob", "MPIJob"]), names, names),
    "slots": slot_lists(),
    "assigned": st.dictionaries(replica_keys, st.integers(0, 3), max_size=3),
    "created_at": floats,
    "expires_at": floats,
    "bus_bandwidth_gbps": floats,
    "reason": st.text(max_size=8),
    "token": st.text(max_size=8),
    "version": st.text("0123456789", max_size=4),
    "ttl_seconds": floats,
    "order": st.lists(st.sampled_from(["worker/0", "worker/1", "master/0"]),
                      max_size=3).map(tuple),
    "network": st.dictionaries(st.sampled_from(["mode", "why"]), st.text(max_size=5),
                               max_size=2),
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]),
                                st.integers(0, 10**12), max_size=3),
    "throughput": st.dictionaries(st.sampled_from(["gpuModel", "tflops"]),
                                  st.text(max_size=5), max_size=2),
}
assert set(VALUES) == set(FIELDS)  # a new field must be generated here too
reservations = st.builds(GangReservation, **VALUES)


@st.composite
def changes(draw: st.DrawFn) -> dict[str, object]:
    chosen = draw(st.lists(st.sampled_from(FIELDS), unique=True, max_size=len(FIELDS)))
    return {name: draw(VALUES[name]) for name in chosen}


@settings(max_examples=300, deadline=None)
@given(reservations, changes(), st.booleans())
def test_evolve_gives_what_replace_gives(res: GangReservation, change: dict[str, object],
                                         asked: bool) -> None:
    if asked:
        res.gpus()  # the cached value is in the instance dict now
    got = res.evolve(**change)
    want = dataclasses.replace(res, **change)
    assert type(got) is GangReservation
    for name in FIELDS:  # the same objects, not just equal ones
        assert getattr(got, name) is getattr(want, name), name
    assert got == want and hash(got.key) == hash(want.key)
    assert got.gpus() == want.gpus()
    assert got.visible_gpus("n1") == want.visible_gpus("n1")
    assert got.complete == want.complete and got.to_json() == want.to_json()
    assert res == dataclasses.replace(res)  # the original is untouched


def test_a_moved_slot_is_not_served_from_the_old_cached_gpus() -> None:
    res = GangReservation(GangKey("ns", "PyTorchJob", "j", "u"),
                          (ReplicaSlot(0, "a", (0, 1)), ReplicaSlot(1, "a", (2, 3))))
    assert res.gpus() == {"a": frozenset({0, 1, 2, 3})}
    moved = res.with_slot_moved(1, "b", (5, 6))
    assert moved.gpus() == {"a": frozenset({0, 1}), "b": frozenset({5, 6})}
    assert moved.visible_gpus("b") == (5, 6)
    assert res.gpus() == {"a": frozenset({0, 1, 2, 3})}
    assigned = moved.with_assignment(ReplicaKey("worker", 0), 0, now=5.0)
    assert assigned.gpus() == moved.gpus() and assigned.expires_at == 5.0 + res.ttl_seconds


def test_evolve_refuses_what_replace_refuses() -> None:
    res = GangReservation(GangKey("ns", "PyTorchJob", "j", "u"), (ReplicaSlot(0, "a", (0,)),))
    with pytest.raises(TypeError):
        dataclasses.replace(res, nodes=1)
    with pytest.raises(TypeError, match="nodes"):
        res.evolve(nodes=1)
    with pytest.raises(TypeError, match="_gpus"):
        res.evolve(_gpus={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.evolve(version="2").version = "3"  # type: ignore[misc]
