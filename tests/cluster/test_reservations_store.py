"""Gang reservations: the in-memory store and the ConfigMap store through the official
client against the API test double — concurrency from threads and from two processes,
restarts, TTL expiry. Double allocations and lost reservations are counted, must be zero."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import first_fit
from k8s_double import KubeApiDouble, api_client, double_process

from gputopo.cluster.k8s_reservations import KubernetesReservationStore, ledger_name
from gputopo.cluster.reservations import (
    GangKey,
    InMemoryReservationStore,
    ReplicaKey,
    ReservationConflict,
)
from gputopo.placement.types import Placement, ReplicaSlot

NODES = {"n0": 8, "n1": 8, "n2": 8, "n3": 8}
HERE = Path(__file__).resolve().parent


def key(i: int | str) -> GangKey:
    return GangKey("default", "PyTorchJob", f"job-{i}", f"uid-{i}")


def placement(*slots: tuple[str, tuple[int, ...]]) -> Placement:
    return Placement(True, tuple(ReplicaSlot(i, n, g) for i, (n, g) in enumerate(slots)),
                     42.0, "test")


def audit(kube: KubeApiDouble) -> dict[str, Any]:
    """Read what the API server holds and count double allocations / inconsistencies."""
    cms = [c for c in kube.objects("v1", "ConfigMap")
           if c["metadata"]["namespace"] == "gputopo-system"]
    gangs = [json.loads(c["data"]["reservation"]) for c in cms
             if c["metadata"]["labels"]["gputopo.io/reservation"] == "gang"]
    owners: Counter[tuple[str, int]] = Counter()
    for g in gangs:
        for s in g["slots"]:
            for gpu in s["gpus"]:
                owners[(s["node"], gpu)] += 1
    ledger: dict[tuple[str, int], dict[str, Any]] = {}
    for c in cms:
        if c["metadata"]["labels"]["gputopo.io/reservation"] != "ledger":
            continue
        for k, v in c["data"].items():
            if k != "node":
                ledger[(c["data"]["node"], int(k))] = json.loads(v)
    unbacked = 0  # a gang GPU whose ledger entry is not that gang's committed entry
    for g in gangs:
        for s in g["slots"]:
            for gpu in s["gpus"]:
                e = ledger.get((s["node"], gpu))
                if not e or e["token"] != g["token"] or e["state"] != "committed":
                    unbacked += 1
    return {"gangs": {g["key"]["uid"]: g for g in gangs},
            "double_allocated": sum(1 for n in owners.values() if n > 1),
            "unbacked": unbacked, "ledger": ledger}


# --- in-memory store ------------------------------------------------------------------------
def test_in_memory_slots_are_stable_per_replica_and_private_per_job() -> None:
    store = InMemoryReservationStore(ttl_seconds=30)
    store.reserve(key(1), placement(("n0", (0, 1)), ("n0", (2, 3))), now=0)
    _, a = store.assign_slot(key(1), ReplicaKey("Worker", 0), now=1)
    _, b = store.assign_slot(key(1), ReplicaKey("worker", 1), now=1)
    _, a_again = store.assign_slot(key(1), ReplicaKey("worker", 0), now=2)
    assert a == a_again and a != b
    assert store.assign_slot(key(1), ReplicaKey("worker", 2), now=2) is None  # all given
    # another job (other uid, even with the same name) has no slot here
    assert store.assign_slot(GangKey("default", "PyTorchJob", "job-1", "other-uid"),
                             ReplicaKey("worker", 0)) is None
    with pytest.raises(ReservationConflict) as exc:
        store.reserve(key(2), placement(("n0", (3, 4))))
    assert exc.value.gpus == {"n0": frozenset({3})}
    assert store.held_gpus() == {"n0": {0, 1, 2, 3}}


def test_in_memory_ttl_releases_only_gangs_whose_pods_never_came() -> None:
    store = InMemoryReservationStore(ttl_seconds=10)
    store.reserve(key("partial"), placement(("n0", (0,)), ("n0", (1,))), now=0)
    store.reserve(key("full"), placement(("n1", (0,)),), now=0)
    store.assign_slot(key("full"), ReplicaKey("worker", 0), now=1)
    assert store.expire(now=5) == []
    assert store.expire(now=11) == [key("partial")]
    assert store.held_gpus() == {"n1": {0}}


def test_in_memory_concurrent_threads_never_double_allocate() -> None:
    store = InMemoryReservationStore()
    results: list[GangKey] = []

    def worker(w: int) -> None:
        for i in range(10):
            k = key(f"{w}-{i}")
            while True:
                p = first_fit(NODES, store.held_gpus(), 2, 2)
                if not p.feasible:
                    return
                try:
                    store.reserve(k, p)
                except ReservationConflict:
                    continue
                results.append(k)
                break

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [(n, g) for r in store.list() for n, gs in r.gpus().items() for g in gs]
    assert len(held) == len(set(held)) == 32
    assert sorted(results) == sorted(r.key for r in store.list())


# --- ConfigMap store through the official client ------------------------------------------
def test_k8s_reserve_assign_and_restart_continues_the_gang(kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client)
    res = store.reserve(key(1), placement(("n0", (0, 1)), ("n1", (4, 5))))
    assert res.version
    _, s0 = store.assign_slot(key(1), ReplicaKey("worker", 0))
    # a "restarted webhook": a brand-new store and client see the same reservation
    restarted = KubernetesReservationStore(api_client(kube.url))
    again = restarted.get(key(1))
    assert again is not None and again.assigned == {ReplicaKey("worker", 0): s0.replica}
    _, s0b = restarted.assign_slot(key(1), ReplicaKey("worker", 0))
    _, s1 = restarted.assign_slot(key(1), ReplicaKey("worker", 1))
    assert s0b == s0 and {s0.node, s1.node} == {"n0", "n1"}
    assert restarted.held_gpus() == {"n0": {0, 1}, "n1": {4, 5}}
    with pytest.raises(ReservationConflict):
        restarted.reserve(key(2), placement(("n1", (5, 6))))
    # the failed attempt left nothing behind
    assert restarted.held_gpus() == {"n0": {0, 1}, "n1": {4, 5}}
    a = audit(kube)
    assert a["double_allocated"] == 0 and a["unbacked"] == 0


def test_k8s_ttl_expiry_and_release_free_the_gpus(kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client, ttl_seconds=100)
    store.reserve(key("slow"), placement(("n0", (0,)), ("n0", (1,))), now=1000)
    store.reserve(key("done"), placement(("n1", (0,)),), now=1000)
    store.assign_slot(key("done"), ReplicaKey("worker", 0), now=1001)
    assert store.expire(now=1050) == []
    assert store.expire(now=1101) == [key("slow")]
    assert store.get(key("slow")) is None
    assert store.held_gpus() == {"n1": {0}}
    assert store.release(key("done")) is True
    assert store.release(key("done")) is False
    assert store.held_gpus() == {}
    # freed GPUs can be reserved again
    store.reserve(key("next"), placement(("n0", (0, 1)),))


def test_k8s_same_gang_from_two_replicas_yields_one_reservation(kube) -> None:
    stores = [KubernetesReservationStore(api_client(kube.url)) for _ in range(2)]
    kube.latency = 0.002  # widen the race window
    out: list[Any] = [None, None]
    barrier = threading.Barrier(2)

    def go(i: int, p: Placement) -> None:
        barrier.wait()
        for _ in range(20):
            try:
                out[i] = stores[i].reserve(key("same"), p)
                return
            except ReservationConflict:
                continue

    ts = [threading.Thread(target=go, args=(0, placement(("n0", (0, 1)),))),
          threading.Thread(target=go, args=(1, placement(("n0", (2, 3)),)))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out[0] is not None and out[0].to_json() == out[1].to_json()
    a = audit(kube)
    assert a["double_allocated"] == 0 and a["unbacked"] == 0
    assert len(a["ledger"]) == 2  # the loser's claim was rolled back


def test_k8s_abandoned_claim_is_taken_after_the_grace(kube, kube_client) -> None:
    # A webhook died after claiming GPU 0 of n0 and before committing.
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": ledger_name("n0"), "namespace": "gputopo-system",
        "labels": {"gputopo.io/reservation": "ledger"}},
        "data": {"node": "n0", "0": json.dumps({"gang": "dead", "token": "t",
                                                 "state": "claimed", "at": 0})}})
    fresh = KubernetesReservationStore(kube_client, claim_grace_seconds=1e12)
    with pytest.raises(ReservationConflict):
        fresh.reserve(key(1), placement(("n0", (0,)),))
    store = KubernetesReservationStore(kube_client, claim_grace_seconds=60)
    assert store.held_gpus() == {"n0": {0}}  # conservative until swept...
    store.reserve(key(1), placement(("n0", (0,)),))  # ...but free to take
    assert audit(kube)["unbacked"] == 0


def test_k8s_writer_died_between_record_and_commit_keeps_the_gpus(kube, kube_client) -> None:
    # A webhook created the gang record, then died before marking its claims committed.
    # A restarted webhook may already hand out those slots: the GPUs must stay held.
    res = {"key": key("half").to_json(), "slots": [{"replica": 0, "node": "n0", "gpus": [0]}],
           "assigned": {}, "createdAt": 0, "expiresAt": 1e12, "busBandwidthGBps": 0,
           "reason": "", "token": "t-half"}
    from gputopo.cluster.k8s_reservations import gang_name

    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": gang_name(key("half")), "namespace": "gputopo-system",
        "labels": {"gputopo.io/reservation": "gang"}},
        "data": {"reservation": json.dumps(res)}})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": ledger_name("n0"), "namespace": "gputopo-system",
        "labels": {"gputopo.io/reservation": "ledger"}},
        "data": {"node": "n0", "0": json.dumps({"gang": "uid-half", "token": "t-half",
                                                 "state": "claimed", "at": 0})}})
    store = KubernetesReservationStore(kube_client, claim_grace_seconds=1)
    with pytest.raises(ReservationConflict):
        store.reserve(key("thief"), placement(("n0", (0,)),))
    _, slot = store.assign_slot(key("half"), ReplicaKey("worker", 0))
    assert slot.gpus == (0,)
    store.expire(now=0)  # the sweep finishes the dead writer's commit
    assert store.stats["promoted"] == 1
    assert audit(kube)["unbacked"] == 0


def test_k8s_threads_on_overlapping_gpus_zero_double_allocations(kube) -> None:
    kube.latency = 0.001
    stores = [KubernetesReservationStore(api_client(kube.url)) for _ in range(6)]
    reported: list[str] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        s = stores[w]
        for i in range(3):
            k = key(f"t{w}-{i}")
            while True:
                p = first_fit(NODES, s.held_gpus(), 2, 2)
                if not p.feasible:
                    return
                try:
                    res = s.reserve(k, p)
                except ReservationConflict:
                    continue
                with lock:
                    reported.append(res.key.uid)
                break

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    a = audit(kube)
    retries = sum(s.stats["api_409"] for s in stores)
    conflicts = sum(s.stats["gpu_taken"] + s.stats["lost_claim"] for s in stores)
    print(f"threads: reserved={len(reported)} api_409={retries} gpu_conflicts={conflicts} "
          f"double_allocated={a['double_allocated']}")
    assert a["double_allocated"] == 0 and a["unbacked"] == 0
    assert sorted(reported) == sorted(a["gangs"])  # zero lost, zero phantom
    assert len(reported) == 8  # 32 GPUs / 4 per gang: the cluster is filled exactly
    assert retries + conflicts > 0  # the race really happened
    assert kube.stats["PUT 409"] + kube.stats["POST 409"] == retries


def test_k8s_two_processes_zero_double_allocations() -> None:
    from kubernetes import client

    with double_process() as api:
        ac = api_client(api.url)
        client.CoreV1Api(ac).create_namespace({"metadata": {"name": "gputopo-system"}})
        api.set_latency(0.001)  # widens the race windows
        workers = [subprocess.Popen([sys.executable, str(HERE / "reserve_worker.py"),
                                     api.url, f"p{w}", "6"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, env=_env())
                   for w in range(2)]
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        for w in workers:  # go! both start racing at the same instant
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        outs = [json.loads(w.communicate(timeout=60)[0]) for w in workers]
        reported = [r["uid"] for o in outs for r in o["reserved"]]
        gangs = {json.loads(c.data["reservation"])["key"]["uid"]: json.loads(
            c.data["reservation"]) for c in client.CoreV1Api(ac).list_namespaced_config_map(
                "gputopo-system", label_selector="gputopo.io/reservation=gang").items}
        owners: Counter[tuple[str, int]] = Counter(
            (s["node"], g) for r in gangs.values() for s in r["slots"] for g in s["gpus"])
        double = sum(1 for n in owners.values() if n > 1)
        retries = sum(o["stats"].get("api_409", 0) for o in outs)
        conflicts = sum(o["conflicts"] for o in outs)
        print(f"processes: reserved={len(reported)} api_409={retries} "
              f"gpu_conflicts={conflicts} double_allocated={double}")
        assert double == 0
        assert sorted(reported) == sorted(gangs)  # nothing lost, nothing phantom
        assert len(reported) == 8 and sum(o["infeasible"] for o in outs) == 4
        assert retries + conflicts > 0  # the two processes really collided
        assert api.stats().get("PUT 409", 0) + api.stats().get("POST 409", 0) == retries


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_k8s_replicas_killed_mid_write_leak_nothing_and_double_nothing() -> None:
    """SIGKILL two writers at arbitrary points of reserve/release, then recover: every
    surviving reservation is fully backed, and after the claim grace every other GPU can
    be reserved again (nothing leaked)."""
    from kubernetes import client

    with double_process() as api:
        ac = api_client(api.url)
        client.CoreV1Api(ac).create_namespace({"metadata": {"name": "gputopo-system"}})
        killed = 0
        for delay in (0.6,):
            procs = [subprocess.Popen([sys.executable, str(HERE / "crash_worker.py"),
                                       api.url], stdout=subprocess.PIPE, text=True,
                                      env=_env()) for _ in range(2)]
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            time.sleep(delay)
            for p in procs:
                p.kill()
                p.wait(10)
                killed += 1
        recovery = KubernetesReservationStore(ac, claim_grace_seconds=0.5)
        # past the claim grace: whatever a dead writer claimed is now dead. The margin
        # covers a write the double was still finishing when its client was killed (on a
        # loaded 2-core machine that took over 0.1 s and left a claim younger than grace).
        time.sleep(1.5)
        recovery.expire(now=0)  # sweep (TTL far away for now=0: nothing expires)
        cms = client.CoreV1Api(ac).list_namespaced_config_map("gputopo-system").items
        gangs = [json.loads(c.data["reservation"]) for c in cms
                 if c.metadata.labels["gputopo.io/reservation"] == "gang"]
        ledger = {(c.data["node"], int(k)): json.loads(v) for c in cms
                  if c.metadata.labels["gputopo.io/reservation"] == "ledger"
                  for k, v in c.data.items() if k != "node"}
        owners: Counter[tuple[str, int]] = Counter(
            (s["node"], g) for r in gangs for s in r["slots"] for g in s["gpus"])
        assert all(n == 1 for n in owners.values())  # zero double allocations
        for r in gangs:  # every surviving reservation is backed by committed entries
            for s in r["slots"]:
                for g in s["gpus"]:
                    e = ledger[(s["node"], g)]
                    assert (e["token"], e["state"]) == (r["token"], "committed")
        assert set(ledger) == set(owners)  # and nothing else is held: no leak
        # fill the rest of the cluster: every GPU not in a reservation is usable again
        filled = 0
        while True:
            p = first_fit(NODES, recovery.held_gpus(), 2, 2)
            if not p.feasible:
                break
            recovery.reserve(key(f"refill-{filled}"), p)
            filled += 1
        held = recovery.held_gpus()
        print(f"crash drill: killed={killed} survivors={len(gangs)} refilled={filled} "
              f"swept={recovery.stats['swept']} promoted={recovery.stats['promoted']}")
        assert sum(len(g) for g in held.values()) == 32
        assert len(gangs) + filled == 8


def test_ttl_is_per_reservation_and_restarts_when_a_replica_comes() -> None:
    store = InMemoryReservationStore(ttl_seconds=1000)
    store.reserve(key("short"), placement(("n0", (0,)), ("n0", (1,))), ttl_seconds=5, now=0)
    store.assign_slot(key("short"), ReplicaKey("worker", 0), now=4)  # one pod came at t=4
    assert store.expire(now=8) == []
    assert store.expire(now=9) == [key("short")]


@pytest.mark.parametrize("value", [
    "5", '"x"', "null", "[1]",
    json.dumps({"gang": "u", "token": "t", "state": "claimed", "at": "yesterday"}),
])
def test_k8s_ledger_entry_edited_by_hand_is_held_never_a_crash(kube, kube_client,
                                                                 value: str) -> None:
    """An operator edits a ledger ConfigMap: a value that is valid JSON but not an entry
    used to raise AttributeError/ValueError out of reserve() (a 500 for the admission) and
    out of expire() (killing the view's reconciler, so nothing was released any more)."""
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": ledger_name("n0"), "namespace": "gputopo-system",
        "labels": {"gputopo.io/reservation": "ledger"}},
        "data": {"node": "n0", "0": value}})
    store = KubernetesReservationStore(kube_client)
    with pytest.raises(ReservationConflict):
        store.reserve(key(1), placement(("n0", (0,)),))
    assert store.expire(now=1e12) == []
    assert store.held_gpus() == {"n0": {0}}  # unreadable: conservatively held
    store.reserve(key(1), placement(("n0", (1,)),))  # the rest of the node still works
    # a gang record edited into JSON that is not an object is skipped, not a crash
    from gputopo.cluster.k8s_reservations import gang_name

    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": gang_name(key(2)), "namespace": "gputopo-system",
        "labels": {"gputopo.io/reservation": "gang"}}, "data": {"reservation": value}})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": ledger_name("n1"), "namespace": "gputopo-system",
        "labels": {"gputopo.io/reservation": "ledger"}},
        "data": {"node": "n1", "0": json.dumps({"gang": "uid-2", "token": "t",
                                                 "state": "committed", "at": 0})}})
    assert [r.key for r in store.list()] == [key(1)]
    store.expire(now=1e12)
    store.reserve(key(3), placement(("n1", (1,)),))


@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_k8s_ledger_lost_by_hand_is_restored_from_the_records_not_given_twice(
        kube, kube_client, how: str) -> None:
    """An operator deletes (or empties) a node's ledger while a gang recorded on it still
    has slots to hand out: the next reservation used to claim those GPUs from the empty
    ledger, and the first gang's next replica got the same GPU — handed out twice."""
    store = KubernetesReservationStore(kube_client)
    store.reserve(key("a"), placement(("n0", (0,)), ("n0", (1,))))
    store.assign_slot(key("a"), ReplicaKey("worker", 0))
    (ledger,) = [c for c in kube.objects("v1", "ConfigMap")
                 if c["metadata"]["name"] == ledger_name("n0")]
    if how == "deleted":
        kube.remove(ledger)
    else:
        ledger["data"] = {"node": "n0"}
        kube.apply(ledger)
    other = KubernetesReservationStore(api_client(kube.url))  # another webhook replica
    with pytest.raises(ReservationConflict):
        other.reserve(key("b"), placement(("n0", (1,)), ("n0", (2,))))
    assert other.held_gpus() == {"n0": {0, 1}}  # the ledger knows them again
    other.reserve(key("b"), placement(("n0", (2,)), ("n0", (3,))))
    _, slot = store.assign_slot(key("a"), ReplicaKey("worker", 1))
    assert slot.gpus == (1,)
    a = audit(kube)
    assert a["double_allocated"] == 0 and a["unbacked"] == 0
