"""Reservations keep one replica's non-GPU requests, and the stores answer which of them
reserved slots hold on each node while their pods do not exist (pending_requests):
in memory, from a LIST of the gang records, and from the gang-record watch feed (the same
answer each way); records written before requests were kept still read, and count nothing."""

from __future__ import annotations

import json

from feed_helpers import caught_up, key, placement, watched
from k8s_double import api_client

from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.reservations import GangReservation, InMemoryReservationStore, ReplicaKey

ASKS = {"cpu": 60000, "memory": 8 * 2**30, "pods": 1}


def three_slots():
    return placement(("n0", (0,)), ("n0", (1,)), ("n1", (0,)))


def test_in_memory_store_counts_unassigned_slots_until_their_replica_comes():
    store = InMemoryReservationStore()
    store.reserve(key(1), three_slots(), requests=ASKS)
    store.reserve(key(2), placement(("n1", (1,)),))  # no requests kept: counts nothing
    assert store.pending_requests() == {
        "n0": {"cpu": 120000, "memory": 16 * 2**30, "pods": 2}, "n1": ASKS}
    store.assign_slot(key(1), ReplicaKey("master", 0))  # slot 0 (n0): its pod counts now
    store.assign_slot(key(1), ReplicaKey("worker", 0))
    assert store.pending_requests() == {"n1": ASKS}
    store.assign_slot(key(1), ReplicaKey("worker", 1))  # complete
    assert store.pending_requests() == {}
    store.reserve(key(3), placement(("n2", (0,)),), requests=ASKS)
    store.release(key(3))
    assert store.pending_requests() == {}


def test_the_wire_form_keeps_requests_and_old_records_still_read():
    res = InMemoryReservationStore().reserve(key(1), three_slots(), requests=ASKS)
    wire = res.to_json()
    assert wire["requests"] == ASKS
    assert GangReservation.from_json(json.loads(json.dumps(wire))).requests == ASKS
    old = {k: v for k, v in wire.items() if k != "requests"}  # a record of an older release
    assert GangReservation.from_json(old).requests == {}
    bad = {**wire, "requests": {"cpu": "lots", "memory": -1, "pods": 1}}
    assert GangReservation.from_json(bad).requests == {"pods": 1}
    assert "requests" not in InMemoryReservationStore().reserve(key(2), three_slots()).to_json()


def test_kubernetes_store_answers_the_same_from_a_list_and_from_the_feed(kube):
    with watched(kube) as (view, store):
        plain = KubernetesReservationStore(api_client(kube.url))  # no feeds: LISTs
        store.reserve(key(1), three_slots(), requests=ASKS)
        plain.reserve(key(2), placement(("n2", (0,)),), requests={"cpu": 1000, "pods": 1})
        assert caught_up(view, kube)
        want = {"n0": {"cpu": 120000, "memory": 16 * 2**30, "pods": 2}, "n1": ASKS,
                "n2": {"cpu": 1000, "pods": 1}}
        assert store.pending_requests() == plain.pending_requests() == want
        store.assign_slot(key(1), ReplicaKey("master", 0))  # seen at once (write-through)
        want["n0"] = ASKS
        assert store.pending_requests() == want
        assert caught_up(view, kube)
        assert plain.pending_requests() == want
        plain.release(key(2))
        assert caught_up(view, kube)
        del want["n2"]
        assert store.pending_requests() == plain.pending_requests() == want
