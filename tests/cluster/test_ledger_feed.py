"""Held GPUs from a watch of the GPU ledgers (gputopo/cluster/ledger_feed.py), through the
official client against the API test double: what the feed answers must always be what a
LIST of the ledgers says (the store's answer without a feed), with the changes since a
revision naming every node that differs — whoever wrote the ledgers (this store, another
webhook replica, an operator by hand) and after the watch lost its history (410)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import wait_for
from feed_helpers import caught_up, key, ledger_lists, ledger_of, listed, placement, watched
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from k8s_double import api_client

from gputopo.cluster.k8s_reservations import KubernetesReservationStore, ledger_name
from gputopo.cluster.ledger_feed import LedgerFeed
from gputopo.cluster.reservations import (
    GangKey,
    ReservationConflict,
    ReservationUnavailable,
)
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.load import read_topology_file
from webhook.placement.reserve import GangReserver

NODES = [f"n{i}" for i in range(6)]
DGX = read_topology_file(str(Path(__file__).resolve().parents[1] / "fixtures" /
                             "topologies" / "dgx1-v100.txt"))


# --- against the API double ----------------------------------------------------------------
def test_another_replicas_ledgers_are_seen_through_the_watch_without_a_list(kube) -> None:
    with watched(kube) as (_, store):
        other = KubernetesReservationStore(api_client(kube.url))  # another webhook replica
        other.reserve(key(1), placement(("n0", (0, 1)), ("n1", (4,))))
        assert wait_for(lambda: store.held_gpus() == {"n0": {0, 1}, "n1": {4}})
        lists = ledger_lists(kube)
        before = store.held_snapshot(None)
        for _ in range(5):
            assert store.held_gpus() == {"n0": {0, 1}, "n1": {4}}
            assert store.held_snapshot(before.revision).changed == frozenset()
        assert ledger_lists(kube) == lists  # answered from memory, not a LIST per gang
        other.release(key(1))
        assert wait_for(lambda: store.held_gpus() == {})
        after = store.held_snapshot(before.revision)
        assert after.changed == frozenset({"n0", "n1"}) and dict(after.gpus) == {}
        assert dict(before.gpus) == {"n0": {0, 1}, "n1": {4}}  # never modified once out


def test_own_writes_are_seen_at_once_without_the_watch(kube) -> None:
    with watched(kube) as (view, store):
        with view._lock:  # the watch cannot apply a single event meanwhile
            store.reserve(key(1), placement(("n0", (0, 1)), ("n2", (7,))))
            assert store.held_gpus() == {"n0": {0, 1}, "n2": {7}} == listed(kube)
            store.release(key(1))
            assert store.held_gpus() == {} == listed(kube)
        assert caught_up(view, kube)  # the late events of those writes change nothing
        assert store.held_gpus() == {} == listed(kube)


def test_a_conflict_makes_the_next_look_see_the_taker(kube) -> None:
    with watched(kube) as (view, store):
        other = KubernetesReservationStore(api_client(kube.url))
        with view._lock:  # the watch is held back: only the conflict's own read can tell
            other.reserve(key(1), placement(("n0", (0, 1))))
            assert store.held_gpus() == {}  # stale, as a lagging watch is
            with pytest.raises(ReservationConflict):
                store.reserve(key(2), placement(("n0", (1, 2))))
            assert store.held_gpus() == {"n0": {0, 1}}


def test_a_deleted_ledger_frees_its_gpus_and_a_hand_edited_one_counts_as_held(kube) -> None:
    with watched(kube) as (_, store):
        store.reserve(key(1), placement(("n0", (0, 1)), ("n1", (2,))))
        kube.remove(ledger_of(kube, "n1"))  # an operator deletes it by hand
        assert wait_for(lambda: store.held_gpus() == {"n0": {0, 1}})
        cm = ledger_of(kube, "n0")
        cm["data"]["5"] = "not json"  # edited by hand: whose GPU it is cannot be known
        kube.apply(cm)
        assert wait_for(lambda: store.held_gpus() == {"n0": {0, 1, 5}})
        assert store.held_gpus() == listed(kube)


def test_after_410_gone_the_feed_relists_and_matches_a_fresh_list(kube) -> None:
    with watched(kube) as (view, store):
        for i, node in enumerate(("n0", "n1", "n2")):
            store.reserve(key(i), placement((node, (i, i + 1))))
        assert caught_up(view, kube)
        kube.set_down("refuse")
        kube.remove(ledger_of(kube, "n0"))  # changes the watch cannot see
        cm = ledger_of(kube, "n1")
        cm["data"]["7"] = json.dumps({"gang": "x", "token": "t", "state": "committed",
                                      "at": 1.0})
        kube.apply(cm)
        kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": ledger_name("n5"), "namespace": "gputopo-system",
            "labels": {"gputopo.io/reservation": "ledger"}}, "data": {
            "node": "n5", "3": json.dumps({"gang": "y", "token": "t", "state": "claimed",
                                           "at": 1.0})}})
        kube.compact()  # ... and the history it could resume from is gone
        kube.set_down(None)
        truth = {"n1": {1, 2, 7}, "n2": {2, 3}, "n5": {3}}
        assert listed(kube) == truth
        feed = store.held_feed
        assert feed is not None
        # the feed itself (while its watch is down the store lists: right, but not the feed)
        assert wait_for(lambda: feed.synced and feed.held_gpus() == truth, timeout=10)
        assert kube.stats["WATCH 410"] >= 1 and feed.lists == 2
        assert store.held_gpus() == truth


def test_while_the_watch_is_broken_the_store_lists_and_after_it_serves_from_memory_again(
        kube) -> None:
    with watched(kube) as (_, store):
        feed = store.held_feed
        assert feed is not None and feed.synced
        kube.set_down("503")
        assert wait_for(lambda: not feed.synced)  # the watch failed: the feed may lag
        with pytest.raises(ReservationUnavailable):
            store.held_gpus()  # so the store asks the API, which is down: said, not guessed
        kube.set_down(None)
        assert wait_for(lambda: feed.synced, timeout=10)
        KubernetesReservationStore(api_client(kube.url)).reserve(
            key(1), placement(("n3", (2,))))
        lists = ledger_lists(kube)
        assert wait_for(lambda: store.held_gpus() == {"n3": {2}})
        assert ledger_lists(kube) == lists and feed.lists == 1  # resumed, not re-listed


def test_a_store_without_a_feed_answers_as_before(kube) -> None:
    store = KubernetesReservationStore(api_client(kube.url))
    store.reserve(key(1), placement(("n0", (0, 1))))
    lists = ledger_lists(kube)
    snap = store.held_snapshot(None)
    assert dict(snap.gpus) == {"n0": {0, 1}} and snap.changed is None
    assert store.held_snapshot(snap.revision).changed is None  # never "nothing changed"
    assert ledger_lists(kube) == lists + 2


# --- random sequences by two replicas: snapshots against a brute-force diff of LISTs ---------


OP = st.tuples(st.sampled_from(["reserve", "reserve", "release"]), st.integers(0, 1),
               st.sampled_from(NODES[:3]), st.sets(st.integers(0, 7), min_size=1, max_size=3),
               st.integers(0, 50))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(OP, min_size=1, max_size=3), min_size=1, max_size=4))
def test_snapshots_match_a_brute_force_diff_of_two_lists(two_replicas, steps) -> None:
    kube, view, stores = two_replicas["kube"], two_replicas["view"], two_replicas["stores"]
    gangs: list[tuple[GangKey, int, str]] = two_replicas["gangs"]
    mine = stores[0]
    assert caught_up(view, kube)
    before_truth = listed(kube)
    before = mine.held_snapshot(None)
    assert {n: set(g) for n, g in before.gpus.items()} == before_truth
    for step in steps:
        touched: set[str] = set()
        for op, who, node, gpus, pick in step:
            if op == "reserve":
                two_replicas["next"][0] += 1
                k = key(f"h{two_replicas['next'][0]}")
                touched.add(node)
                try:
                    stores[who].reserve(k, placement((node, tuple(sorted(gpus)))))
                    gangs.append((k, who, node))
                except ReservationConflict:
                    pass
            elif gangs:
                k, _, where = gangs.pop(pick % len(gangs))
                touched.add(where)
                assert stores[who].release(k)
        assert caught_up(view, kube)
        truth = listed(kube)
        now = mine.held_snapshot(before.revision)
        assert {n: set(g) for n, g in now.gpus.items()} == truth
        assert mine.held_gpus() == truth
        diff = {n for n in set(truth) | set(before_truth)
                if truth.get(n) != before_truth.get(n)}
        assert now.changed is not None
        assert diff <= now.changed <= touched, (diff, now.changed, touched)
        before, before_truth = now, truth


def test_placement_with_the_feed_equals_placement_with_a_list(kube) -> None:
    class Reader:
        def __init__(self) -> None:
            self.nodes = [NodeState(name=n, topology=DGX) for n in NODES]

        def node_states(self) -> list[NodeState]:
            return list(self.nodes)

        def object(self, **_: Any) -> None:
            return None

    reader, rng = Reader(), random.Random(7)
    shapes = (GangRequest(1, 2), GangRequest(2, 4), GangRequest(1, 8), GangRequest(4, 3))
    with watched(kube) as (view, store):
        by_feed = GangReserver(store)
        by_list = GangReserver(KubernetesReservationStore(api_client(kube.url)))
        other = KubernetesReservationStore(api_client(kube.url))
        held: list[GangKey] = []
        for i in range(24):
            if i % 3 == 2 and held:  # whoever reserved it, another replica releases it
                other.release(held.pop(rng.randrange(len(held))))
                assert caught_up(view, kube)
            elif i % 3 == 1:  # this replica's own reservation: seen with no wait
                gang = rng.choice(shapes)
                got = by_feed.reserve(cluster=reader, pod={}, key=key(f"p{i}"), gang=gang)
                if not isinstance(got, tuple):
                    continue
                held.append(key(f"p{i}"))
            else:
                node = rng.choice(NODES)
                try:
                    other.reserve(key(f"o{i}"), placement(
                        (node, tuple(sorted(rng.sample(range(8), rng.randint(1, 4)))))))
                    held.append(key(f"o{i}"))
                except ReservationConflict:
                    pass
                assert caught_up(view, kube)
            a = by_feed.fit_and_free(reader, {})[1]
            b = by_list.fit_and_free(reader, {})[1]
            assert [(n.name, n.used) for n in a] == [(n.name, n.used) for n in b]
            for gang in shapes:
                pa, pb = solve(a, gang), solve(b, gang)
                assert (pa.feasible, pa.slots, pa.bus_bandwidth_gbps) == \
                    (pb.feasible, pb.slots, pb.bus_bandwidth_gbps)


# --- the feed's own rules, on ConfigMaps as the API returns them ----------------------------
def ledger(node: str, rv: str, *gpus: int, name: str | None = None) -> dict[str, Any]:
    entry = json.dumps({"gang": "g", "token": "t", "state": "committed", "at": 1.0})
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": name or ledger_name(node), "namespace": "gputopo-system",
        "resourceVersion": rv, "labels": {"gputopo.io/reservation": "ledger"}},
        "data": {"node": node, **{str(g): entry for g in gpus}}}


def test_an_older_watch_event_never_overwrites_a_newer_write_through() -> None:
    feed = LedgerFeed()
    feed.relisted([], "1")
    feed.observe(ledger("a", "10", 0, 1))  # written through
    feed.watched("MODIFIED", ledger("a", "9", 0))  # the watch, late
    feed.watched("DELETED", ledger("a", "8"))  # a deletion before that write
    assert feed.held_gpus() == {"a": {0, 1}}
    feed.watched("DELETED", ledger("a", "11", 0, 1))
    assert feed.held_gpus() == {}
    feed.observe(ledger("a", "10", 0, 1))  # a write-through from before the deletion
    assert feed.held_gpus() == {}
    feed.watched("ADDED", ledger("a", "12", 3))  # created again
    assert feed.held_gpus() == {"a": {3}}
    # opaque (non-integer) versions have no order: the latest call wins
    feed.observe(ledger("b", "x2", 5))
    feed.observe(ledger("b", "x1", 6))
    assert feed.held_gpus() == {"a": {3}, "b": {6}}


def test_a_relist_keeps_writes_newer_than_the_list_and_drops_what_vanished() -> None:
    feed = LedgerFeed()
    feed.relisted([ledger("a", "5", 0), ledger("b", "6", 1)], "6")
    feed.observe(ledger("c", "20", 2))  # written through after the next list was taken
    feed.observe(ledger("a", "21", 0, 4))
    feed.relisted([ledger("a", "15", 0), ledger("d", "16", 7)], "18")
    assert feed.held_gpus() == {"a": {0, 4}, "c": {2}, "d": {7}}  # b vanished
    feed.relisted([ledger("a", "21", 0, 4)], "30")
    assert feed.held_gpus() == {"a": {0, 4}}


def test_two_ledgers_naming_one_node_and_ledgers_without_a_node_count_as_a_list_does() -> None:
    feed = LedgerFeed()
    feed.relisted([ledger("a", "1", 0), ledger("a", "2", 1, name="copy-of-a"),
                   {"metadata": {"name": "x", "resourceVersion": "3"}, "data": {"0": "{}"}}],
                  "3")
    assert feed.held_gpus() == {"a": {0, 1}}
    feed.watched("MODIFIED", ledger("b", "4", 1, name="copy-of-a"))  # now names node b
    assert feed.held_gpus() == {"a": {0}, "b": {1}}
    assert feed.snapshot(feed.revision - 1).changed == frozenset({"a", "b"})


def test_snapshot_answers_unknown_when_the_log_does_not_reach_back() -> None:
    feed = LedgerFeed(log_size=2)
    feed.relisted([], "1")
    first = feed.snapshot(None)
    assert first.changed is None and feed.snapshot(first.revision).changed == frozenset()
    for i in range(3):
        feed.observe(ledger(f"n{i}", str(10 + i), 0))
    assert feed.snapshot(first.revision).changed is None  # 3 changes, 2 remembered
    assert feed.snapshot(first.revision + 1).changed == frozenset({"n1", "n2"})
    assert feed.snapshot(-1).changed is None and dict(first.gpus) == {}
