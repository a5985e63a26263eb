"""GPUs other gangs' records hand out, from a watch of the gang records
(gputopo/cluster/gang_record_feed.py), through the official client against the API test
double: the feed's answer must be what the LIST path answers (a store without a feed),
whoever wrote the records (this store, another webhook replica, an operator by hand) and
after the watch lost its history (410); a lagging feed must never let a ledger lost by hand
give a GPU out twice, nor put back an entry a fresh read of its record no longer names."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from cluster_helpers import wait_for
from feed_helpers import caught_up, key, ledger_lists, ledger_of, placement, watched
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from k8s_double import KubeApiDouble, api_client

from gputopo.cluster.gang_record_feed import GangRecordFeed
from gputopo.cluster.k8s_reservations import KubernetesReservationStore, gang_name
from gputopo.cluster.reservations import GangReservation, ReplicaKey, ReservationConflict
from gputopo.cluster.view import connect
from tests.k8s_double.client import write_kubeconfig

NODES = [f"n{i}" for i in range(4)]


def by_list(kube: KubeApiDouble, uid: str) -> dict[str, dict[int, str]]:
    """The truth: the LIST path's answer (a store without feeds)."""
    return KubernetesReservationStore(api_client(kube.url))._recorded_elsewhere(uid)


def feed_of(store: KubernetesReservationStore) -> GangRecordFeed:
    assert store.gang_feed is not None and store.gang_feed.synced
    return store.gang_feed


def record_cm(kube: KubeApiDouble, uid: str) -> dict[str, Any] | None:
    got = [c for c in kube.objects("v1", "ConfigMap")
           if c["metadata"]["name"] == gang_name(key(uid.removeprefix("uid-")))]
    return got[0] if got else None


def audit(kube: KubeApiDouble) -> tuple[int, int]:
    """(GPUs two records hand out, record GPUs whose ledger entry is not that gang's
    committed entry) — both must be 0."""
    cms = [c for c in kube.objects("v1", "ConfigMap")
           if c["metadata"]["namespace"] == "gputopo-system"]
    kind = {c["metadata"]["name"]: c["metadata"]["labels"]["gputopo.io/reservation"]
            for c in cms}
    ledgers = {(c["data"]["node"], int(k)): json.loads(v) for c in cms
               if kind[c["metadata"]["name"]] == "ledger"
               for k, v in c["data"].items() if k != "node"}
    seen: set[tuple[str, int]] = set()
    twice = unbacked = 0
    for c in cms:
        if kind[c["metadata"]["name"]] != "gang":
            continue
        g = json.loads(c["data"]["reservation"])
        for s in g["slots"]:
            for gpu in s["gpus"]:
                twice += (s["node"], gpu) in seen
                seen.add((s["node"], gpu))
                e = ledgers.get((s["node"], gpu))
                unbacked += not e or e["token"] != g["token"] or e["state"] != "committed"
    return twice, unbacked


# --- against the API double ----------------------------------------------------------------
def test_another_replicas_record_is_seen_through_the_watch_and_no_list_is_made(kube) -> None:
    with watched(kube) as (_, store):
        other = KubernetesReservationStore(api_client(kube.url))  # another webhook replica
        other.reserve(key(1), placement(("n0", (0, 1)), ("n1", (4,))))
        assert by_list(kube, "uid-x").keys() == {"n0", "n1"}
        assert wait_for(lambda: store._recorded_elsewhere("uid-x") == by_list(kube, "uid-x"))
        assert store._recorded_elsewhere("uid-1") == {} == by_list(kube, "uid-1")  # its own
        assert store._recorded_elsewhere("uid-x", ["n1"]) == {"n1": by_list(kube, "x")["n1"]}
        lists = ledger_lists(kube)
        store.reserve(key(2), placement(("n0", (5,)), ("n1", (6,))))  # ledgers exist
        assert ledger_lists(kube) == lists  # neither records nor ledgers listed
        with pytest.raises(ReservationConflict):
            store.reserve(key(3), placement(("n0", (1,)),))  # the ledger CAS still guards


def test_connect_wires_the_gang_record_feed_into_the_view_and_the_store(
        kube, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    write_kubeconfig(tmp_path / "config", kube.url)
    view = connect(str(tmp_path / "config"), watch_timeout_seconds=2)
    assert view is not None
    try:
        assert view.wait_synced(5)
        store = view.reservations
        assert isinstance(store, KubernetesReservationStore)
        KubernetesReservationStore(api_client(kube.url)).reserve(
            key(1), placement(("n0", (0, 1)),))
        assert wait_for(lambda: feed_of(store).recorded_elsewhere("x") == by_list(kube, "x")
                        != {})
        lists = ledger_lists(kube)
        assert store._recorded_elsewhere("x") == by_list(kube, "x")
        assert ledger_lists(kube) == lists + 1  # by_list's own LIST only
    finally:
        view.stop()


def test_own_record_writes_are_seen_at_once_without_the_watch(kube) -> None:
    with watched(kube) as (view, store):
        feed = feed_of(store)
        with view._lock:  # the watch cannot apply a single event meanwhile
            store.reserve(key(1), placement(("n0", (0, 1)), ("n1", (3,))))
            assert feed.recorded_elsewhere("x") == by_list(kube, "x") != {}
            store.assign_slot(key(1), ReplicaKey("worker", 0))
            cm = record_cm(kube, "uid-1")
            assert cm is not None
            assert feed._objects[cm["metadata"]["name"]][0] == cm["metadata"]["resourceVersion"]
            store.move_slot(key(1), 1, "n2", (6,), from_node="n1")
            assert feed.recorded_elsewhere("x") == by_list(kube, "x")
            assert set(feed.recorded_elsewhere("x")) == {"n0", "n2"}
            store.release(key(1))
            assert feed.recorded_elsewhere("x") == {} == by_list(kube, "x")
        assert caught_up(view, kube)  # the late events of those writes change nothing
        assert feed.recorded_elsewhere("x") == {} == by_list(kube, "x")


def test_released_records_are_forgotten(kube) -> None:
    with watched(kube) as (_, store):
        other = KubernetesReservationStore(api_client(kube.url))
        for i in range(3):
            other.reserve(key(i), placement((f"n{i}", (i,))))
        assert wait_for(lambda: len(store._recorded_elsewhere("x")) == 3)
        other.release(key(1))
        kube.remove(record_cm(kube, "uid-2"))  # an operator deletes one by hand
        assert wait_for(lambda: set(store._recorded_elsewhere("x")) == {"n0"})
        assert store._recorded_elsewhere("x") == by_list(kube, "x")
        assert feed_of(store).records() == 1


def test_after_410_gone_the_feed_relists_and_matches_a_list(kube) -> None:
    with watched(kube) as (view, store):
        for i in range(3):
            store.reserve(key(i), placement((f"n{i}", (i, i + 1))))
        assert caught_up(view, kube)
        kube.set_down("refuse")
        kube.remove(record_cm(kube, "uid-0"))  # changes the watch cannot see
        hand = GangReservation.from_placement(key(9), placement(("n3", (7,))), now=1.0,
                                              ttl_seconds=60, token="t9")
        kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": gang_name(key(9)), "namespace": "gputopo-system",
            "labels": {"gputopo.io/reservation": "gang"}},
            "data": {"reservation": json.dumps(hand.to_json())}})
        kube.compact()  # ... and the history it could resume from is gone
        kube.set_down(None)
        feed = store.gang_feed
        assert feed is not None
        truth = by_list(kube, "x")
        assert set(truth) == {"n1", "n2", "n3"}
        assert wait_for(lambda: feed.synced and feed.recorded_elsewhere("x") == truth,
                        timeout=10)
        assert kube.stats["WATCH 410"] >= 1 and feed.lists == 2


def test_a_lagging_feed_puts_back_nothing_a_fresh_record_no_longer_names(kube) -> None:
    """Released, or its slot moved, while this replica's watch lags: the feed still names
    the GPUs, the ledger no longer holds them — a fresh GET of the record decides, so the
    GPUs are free (no conflict for nothing, no entry of a gang that gave them up)."""
    with watched(kube) as (view, store):
        other = KubernetesReservationStore(api_client(kube.url))
        other.reserve(key(1), placement(("n0", (0, 1)),))
        other.reserve(key(2), placement(("n1", (2,)), ("n1", (3,))))
        assert caught_up(view, kube)
        with view._lock:  # this replica's watch lags from here on
            other.release(key(1))
            other.move_slot(key(2), 1, "n2", (5,), from_node="n1")
            assert set(feed_of(store).recorded_elsewhere("x")) == {"n0", "n1"}  # stale
            store.reserve(key(3), placement(("n0", (0, 1)), ("n1", (3,))))
        assert caught_up(view, kube)
        ledger = ledger_of(kube, "n1")["data"]
        assert {k: json.loads(v)["gang"] for k, v in ledger.items() if k != "node"} == \
            {"2": "uid-2", "3": "uid-3"}
        assert audit(kube) == (0, 0)


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_ledger_lost_by_hand_is_restored_with_the_feed_not_given_twice(kube, how) -> None:
    """As tests/cluster/test_reservations_store.py's LIST-path test, with this replica
    answering from the gang-record feed."""
    with watched(kube) as (view, store):
        first = KubernetesReservationStore(api_client(kube.url))  # another webhook replica
        first.reserve(key("a"), placement(("n0", (0,)), ("n0", (1,))))
        first.assign_slot(key("a"), ReplicaKey("worker", 0))
        assert caught_up(view, kube)
        if how == "deleted":
            kube.remove(ledger_of(kube, "n0"))
        else:
            cm = ledger_of(kube, "n0")
            cm["data"] = {"node": "n0"}
            kube.apply(cm)
        lists = ledger_lists(kube)
        with pytest.raises(ReservationConflict):
            store.reserve(key("b"), placement(("n0", (1,)), ("n0", (2,))))
        # a deleted ledger is the one case listed again (the feed may lag); emptied: none
        assert ledger_lists(kube) - lists == (1 if how == "deleted" else 0)
        assert wait_for(lambda: store.held_gpus() == {"n0": {0, 1}})
        store.reserve(key("b"), placement(("n0", (2,)), ("n0", (3,))))
        _, slot = first.assign_slot(key("a"), ReplicaKey("worker", 1))
        assert slot.gpus == (1,)
        assert audit(kube) == (0, 0)


def test_a_deleted_ledger_is_checked_against_a_list_even_while_the_watch_lags(kube) -> None:
    """A record the feed has not seen yet (its watch stalled) whose ledger an operator then
    deletes: the store lists the records for an absent ledger, so the GPU is not reused."""
    with watched(kube) as (view, store):
        first = KubernetesReservationStore(api_client(kube.url))
        with view._lock:  # the watch stalls before the record arrives
            first.reserve(key("a"), placement(("n0", (0,)), ("n0", (1,))))
            assert feed_of(store).recorded_elsewhere("x") == {}
            kube.remove(ledger_of(kube, "n0"))
            with pytest.raises(ReservationConflict):
                store.reserve(key("b"), placement(("n0", (1,)),))
        assert audit(kube) == (0, 0)


# --- random sequences by two replicas: the feed's answer against the LIST's ------------------


OP = st.tuples(st.sampled_from(["reserve", "reserve", "assign", "move", "release"]),
               st.integers(0, 1), st.sampled_from(NODES), st.sets(st.integers(0, 7),
                                                                   min_size=1, max_size=2),
               st.integers(0, 50))


def one_op(store: KubernetesReservationStore, gangs: list[tuple[Any, str]], nxt: list[int],
           op: str, node: str, gpus: set[int], pick: int) -> None:
    if op == "reserve" or not gangs:
        nxt[0] += 1
        k = key(f"h{nxt[0]}")
        try:  # two slots when two GPUs: assign and move have a slot to work on
            store.reserve(k, placement(*((node, (x,)) for x in sorted(gpus))))
            gangs.append((k, node))
        except ReservationConflict:
            pass
    elif op == "assign":
        k, _ = gangs[pick % len(gangs)]
        store.assign_slot(k, ReplicaKey("worker", pick % 3))
    elif op == "move":
        k, _ = gangs[pick % len(gangs)]
        res = store.get(k)
        assert res is not None
        n = pick % len(res.slots)
        to = NODES[(NODES.index(node) + 1) % len(NODES)]
        with contextlib.suppress(ReservationConflict):
            store.move_slot(k, n, to, (min(gpus),), from_node=res.slots[n].node)
    else:
        k, _ = gangs.pop(pick % len(gangs))
        assert store.release(k)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(OP, min_size=1, max_size=4), min_size=1, max_size=4))
def test_recorded_elsewhere_from_the_feed_equals_the_list(two_replicas, steps) -> None:
    kube, view, stores = two_replicas["kube"], two_replicas["view"], two_replicas["stores"]
    gangs: list[tuple[Any, str]] = two_replicas["gangs"]
    mine, feed = stores[0], feed_of(stores[0])
    for step in steps:
        others_unseen = False  # the other replica wrote since the watch last caught up
        for op, who, node, gpus, pick in step:
            others_unseen |= who == 1
            with view._lock:  # no event applied meanwhile: own writes must be seen without
                one_op(stores[who], gangs, two_replicas["next"], op, node, gpus, pick)
                if not others_unseen:
                    for uid in ["nobody", *(k.uid for k, _ in gangs[-2:])]:
                        assert feed.recorded_elsewhere(uid) == by_list(kube, uid)
        assert caught_up(view, kube)
        for uid in ["nobody", *(k.uid for k, _ in gangs[:3])]:
            truth = by_list(kube, uid)
            assert feed.recorded_elsewhere(uid) == truth
            assert mine._recorded_elsewhere(uid, NODES[:2]) == \
                {n: e for n, e in truth.items() if n in NODES[:2]}
    assert audit(kube) == (0, 0)


# --- the feed's own rules, on ConfigMaps as the API returns them ----------------------------
def record(uid: str, rv: str, node: str, *gpus: int, name: str | None = None
           ) -> dict[str, Any]:
    k = key(uid)
    res = GangReservation.from_placement(k, placement((node, gpus)), now=1.0,
                                         ttl_seconds=60, token=f"t-{uid}")
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": name or gang_name(k), "namespace": "gputopo-system", "resourceVersion": rv,
        "labels": {"gputopo.io/reservation": "gang"}},
        "data": {"reservation": json.dumps(res.to_json())}}


def test_a_deleted_record_stays_deleted_until_created_again() -> None:
    feed = GangRecordFeed()
    feed.relisted([record("a", "5", "n0", 0)], "5")
    feed.observe(record("a", "6", "n0", 0, 1))  # written through (a slot assigned)
    feed.watched("MODIFIED", record("a", "5", "n0", 0))  # the watch, late
    assert set(feed.recorded_elsewhere("x")["n0"]) == {0, 1}
    feed.deleted(gang_name(key("a")))  # released by this store: version unknown
    feed.observe(record("a", "6", "n0", 0, 1))  # a late write-through of the deleted one
    feed.watched("MODIFIED", record("a", "6", "n0", 0, 1))  # ... or its late event
    assert feed.recorded_elsewhere("x") == {}
    feed.watched("ADDED", record("a", "9", "n1", 3))  # the job's uid reserved again
    assert set(feed.recorded_elsewhere("x")) == {"n1"}
    feed.relisted([], "12")  # gone after all
    assert feed.recorded_elsewhere("x") == {} and feed.records() == 0


def test_two_records_on_one_gpu_and_unreadable_records_answer_as_a_list_does() -> None:
    feed = GangRecordFeed()
    broken = record("c", "3", "n0", 2)
    broken["data"]["reservation"] = "not json"
    feed.relisted([record("a", "1", "n0", 0), record("b", "2", "n0", 0, name="zz"),
                   broken], "3")
    only_b = feed.recorded_elsewhere("x")["n0"]
    assert list(only_b) == [0] and json.loads(only_b[0])["gang"] == "uid-b"  # sorts last
    assert json.loads(feed.recorded_elsewhere("uid-b")["n0"][0])["gang"] == "uid-a"
    feed.deleted("zz", "4")
    assert json.loads(feed.recorded_elsewhere("x")["n0"][0])["gang"] == "uid-a"
    assert feed.records() == 2  # the unreadable one is known, and hands out nothing
