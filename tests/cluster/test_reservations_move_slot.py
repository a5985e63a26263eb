"""move_slot: a slot leaves a node that is gone, in both stores, without a GPU handed out
twice or held for ever. The ConfigMap store is checked on what the API server holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from k8s_double import KubeApiDouble
from test_reservations_store import audit, key, placement

from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.reservations import (
    InMemoryReservationStore,
    ReplicaKey,
    ReservationConflict,
)


@pytest.fixture(params=["memory", "configmaps"])
def store(request, kube: KubeApiDouble, kube_client) -> Iterator[object]:
    if request.param == "memory":
        yield InMemoryReservationStore()
    else:
        s = KubernetesReservationStore(kube_client)
        s.held_cache_seconds = 0.0
        yield s


def test_a_slot_moves_its_gpus_and_keeps_its_replica(store) -> None:
    store.reserve(key(1), placement(("gone", (0, 1)), ("n1", (0, 1))))
    store.assign_slot(key(1), ReplicaKey("worker", 0))
    moved = store.move_slot(key(1), 0, "n2", (4, 5), from_node="gone")
    assert moved is not None and moved.slot(0).node == "n2" and moved.slot(0).gpus == (4, 5)
    assert moved.slot_for(ReplicaKey("worker", 0)).node == "n2"
    assert store.get(key(1)).slot(0).node == "n2"
    held = store.held_gpus()
    assert held.get("gone", set()) == set() and held["n2"] == {4, 5} and held["n1"] == {0, 1}
    # the freed GPUs are reservable by another gang; the new ones are not
    store.reserve(key(2), placement(("gone", (0, 1)),))
    with pytest.raises(ReservationConflict):
        store.reserve(key(3), placement(("n2", (5,)),))


def test_a_move_onto_held_gpus_conflicts_and_changes_nothing(store) -> None:
    store.reserve(key(1), placement(("gone", (0,)),))
    store.reserve(key(2), placement(("n2", (3,)),))
    with pytest.raises(ReservationConflict):
        store.move_slot(key(1), 0, "n2", (3,), from_node="gone")
    store.reserve(key(5), placement(("gone", (5,)), ("n3", (1,))))
    with pytest.raises(ReservationConflict):  # nor onto a GPU of its own gang
        store.move_slot(key(5), 0, "n3", (1,), from_node="gone")
    assert store.get(key(1)).slot(0).node == "gone"
    assert store.get(key(5)).slot(0).node == "gone"
    assert store.held_gpus() == {"gone": {0, 5}, "n2": {3}, "n3": {1}}


def test_a_slot_moved_already_or_a_gang_gone_is_left_alone(store) -> None:
    store.reserve(key(1), placement(("gone", (0,)),))
    first = store.move_slot(key(1), 0, "n1", (2,), from_node="gone")
    again = store.move_slot(key(1), 0, "n3", (6,), from_node="gone")  # a second replica
    assert again.slot(0) == first.slot(0)
    assert store.held_gpus() == {"n1": {2}}
    assert store.move_slot(key(9), 0, "n1", (3,), from_node="gone") is None


def test_configmaps_after_moves_are_backed_and_hold_nothing_else(kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client)
    store.reserve(key(1), placement(("gone", (0, 1)), ("gone", (2, 3)), ("n1", (0, 1))))
    store.move_slot(key(1), 0, "n1", (2, 3), from_node="gone")
    store.move_slot(key(1), 1, "n2", (0, 1), from_node="gone")
    state = audit(kube)
    assert state["double_allocated"] == 0 and state["unbacked"] == 0
    assert set(state["ledger"]) == {("n1", 0), ("n1", 1), ("n1", 2), ("n1", 3), ("n2", 0),
                                    ("n2", 1)}
    assert store.stats["moved"] == 2
