""":func:`gputopo.cluster.reservations.pick_slot` without building the free slots, and the
store's assignment in one copy of the reservation, give what the plain code gives.

Why: every later pod of a gang picks its slot; the walk over the slots replaced building
``res.unassigned`` (a set and a tuple) and one ``any`` over it, and the store now makes
the assignment and the version bump in one ``evolve``. Both must answer as before for
any reservation: taken slots, an ``order`` naming the replica or not, slots out of order,
a meant slot taken by another replica.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo.cluster.reservations import (
    GangKey,
    GangReservation,
    InMemoryReservationStore,
    ReplicaKey,
    pick_slot,
)
from gputopo.placement.types import Placement, ReplicaSlot


def _plain_pick(res: GangReservation, replica: ReplicaKey) -> int | None:
    """pick_slot as it was: the free slots built, then searched."""
    n = res.assigned.get(replica)
    if n is not None:
        return n
    free = res.unassigned
    wire = replica.wire()
    if wire in res.order:
        meant = res.order.index(wire)
        if any(s.replica == meant for s in free):
            return meant
    return free[0].replica if free else None


replica_keys = st.builds(ReplicaKey, st.sampled_from(["worker", "master"]), st.integers(0, 3))
wires = st.sampled_from(["worker/0", "worker/1", "worker/2", "master/0", "worker/3"])


@st.composite
def reservations(draw: st.DrawFn) -> GangReservation:
    count = draw(st.integers(1, 4))
    numbers = draw(st.permutations(list(range(count))))
    slots = tuple(ReplicaSlot(n, f"n{n}", (n,)) for n in numbers)
    assigned = draw(st.dictionaries(replica_keys, st.sampled_from(range(count)),
                                    max_size=count))
    order = tuple(draw(st.lists(wires, max_size=5)))
    return GangReservation(key=GangKey("ns", "PyTorchJob", "j", "u"), slots=slots,
                           assigned=assigned, order=order)


@settings(max_examples=400, deadline=None)
@given(res=reservations(), replica=replica_keys)
def test_pick_slot_is_the_plain_pick(res: GangReservation, replica: ReplicaKey) -> None:
    assert pick_slot(res, replica) == _plain_pick(res, replica)


@settings(max_examples=100, deadline=None)
@given(replicas=st.lists(replica_keys, min_size=1, max_size=6), order=st.lists(wires,
                                                                               max_size=4))
def test_assign_slot_is_with_assignment_then_a_version(replicas: list[ReplicaKey],
                                                       order: list[str]) -> None:
    store = InMemoryReservationStore(clock=lambda: 100.0, ttl_seconds=30)
    key = GangKey("ns", "PyTorchJob", "j", "u")
    placement = Placement(feasible=True, slots=tuple(ReplicaSlot(i, "n1", (i,))
                                                     for i in range(3)),
                          bus_bandwidth_gbps=1.0, reason="r")
    store.reserve(key, placement, now=90.0, order=order)
    for replica in replicas:
        before = store.get(key)
        assert before is not None
        got = store.assign_slot(key, replica)
        want_number = _plain_pick(before, replica)
        if want_number is None:
            assert got is None
            continue
        assert got is not None
        res, slot = got
        assert slot == before.slot(want_number)
        if replica in before.assigned:
            assert res is before
            continue
        want = before.with_assignment(replica, want_number, now=100.0).evolve(
            version=str(int(before.version) + 1))
        assert res == want and res.version == want.version
        assert store.get(key) is res
