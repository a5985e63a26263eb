"""The Kubernetes store re-parses only the gang records that changed since its last LIST
(``_parse_listed``): every answer must be the one a store that parses everything gives —
after slot assignments, moves, releases, another replica's writes and records edited by
hand."""

from __future__ import annotations

import json
import random

from feed_helpers import key
from kubernetes import client

from gputopo.cluster.k8s_reservations import KubernetesReservationStore, gang_name
from gputopo.cluster.reservations import (
    GangReservation,
    ReplicaKey,
    ReservationConflict,
)
from gputopo.placement.types import Placement, ReplicaSlot

NS = "gputopo-system"


def wire(rs: list[GangReservation]) -> list[tuple[str, dict]]:
    return [(r.version, r.to_json()) for r in rs]


def test_list_answers_as_a_fresh_parse_through_random_changes(kube, kube_client) -> None:
    rng = random.Random(7)
    mine = KubernetesReservationStore(kube_client)
    other = KubernetesReservationStore(kube_client)  # another replica writing meanwhile
    core = client.CoreV1Api(kube_client)
    live: list[int] = []
    broken: dict[int, str] = {}  # gang -> its record's text before it was broken by hand
    for step in range(80):
        store = rng.choice((mine, other))
        op = rng.random()
        fine = [i for i in live if i not in broken]
        if op < 0.35 or not fine:
            node, gpu = f"n{rng.randrange(6)}", rng.randrange(8)
            try:
                store.reserve(key(step), Placement(True, (ReplicaSlot(0, node, (gpu,)),
                                                          ReplicaSlot(1, node, (8 + gpu,))),
                                                   1.0, "t"))
                live.append(step)
            except ReservationConflict:  # a GPU taken: nothing reserved
                pass
        elif op < 0.6:
            store.assign_slot(key(rng.choice(fine)), ReplicaKey("worker", rng.randrange(2)))
        elif op < 0.7:
            i = rng.choice(fine)
            store.move_slot(key(i), 1, f"m{step}", (0,),
                            from_node=store.get(key(i)).slot(1).node)
        elif op < 0.8:
            i = live.pop(rng.randrange(len(live)))
            broken.pop(i, None)
            store.release(key(i))
        else:  # edited by hand: broken, repaired, or readable with other content
            i = rng.choice(live)
            cm = json.loads(core.read_namespaced_config_map(gang_name(key(i)), NS,
                                                            _preload_content=False).data)
            if i in broken:
                cm["data"]["reservation"] = broken.pop(i)
            elif rng.random() < 0.5:
                broken[i] = cm["data"]["reservation"]
                cm["data"]["reservation"] = "{broken"
            else:
                res = json.loads(cm["data"]["reservation"])
                res["reason"] = f"edited at {step}"
                cm["data"]["reservation"] = json.dumps(res, sort_keys=True)
            core.replace_namespaced_config_map(cm["metadata"]["name"], NS, cm)
        fresh = KubernetesReservationStore(kube_client)  # parses every record
        assert wire(mine.list()) == wire(fresh.list()), step
        assert mine._recorded_elsewhere("none", listed=True) == \
            fresh._recorded_elsewhere("none", listed=True), step
    assert mine._parsed  # the memo was in use


def test_a_record_changed_by_hand_keeps_its_version_never_a_stale_parse(
        kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client)
    store.reserve(key(1), Placement(True, (ReplicaSlot(0, "n0", (0,)),), 1.0, "first"))
    assert [r.reason for r in store.list()] == ["first"]
    core = client.CoreV1Api(kube_client)
    cm = json.loads(core.read_namespaced_config_map(gang_name(key(1)), NS,
                                                    _preload_content=False).data)
    res = json.loads(cm["data"]["reservation"])
    res["reason"] = "second"
    cm["data"]["reservation"] = json.dumps(res, sort_keys=True)
    core.replace_namespaced_config_map(cm["metadata"]["name"], NS, cm)
    assert [r.reason for r in store.list()] == ["second"]
    cm = json.loads(core.read_namespaced_config_map(gang_name(key(1)), NS,
                                                    _preload_content=False).data)
    cm["data"]["reservation"] = "not json"
    core.replace_namespaced_config_map(cm["metadata"]["name"], NS, cm)
    assert store.list() == []  # unreadable: skipped, as without the memo


def test_gpus_is_a_fresh_dict_every_time() -> None:
    res = GangReservation(key(1), (ReplicaSlot(0, "a", (0, 1)), ReplicaSlot(1, "a", (2,)),
                                   ReplicaSlot(2, "b", (3,))))
    got = res.gpus()
    assert got == {"a": frozenset({0, 1, 2}), "b": frozenset({3})}
    got["a"] = frozenset()
    got["c"] = frozenset({9})
    assert res.gpus() == {"a": frozenset({0, 1, 2}), "b": frozenset({3})}
    moved = res.with_slot_moved(2, "c", (5,))
    assert moved.gpus() == {"a": frozenset({0, 1, 2}), "c": frozenset({5})}
    assert res == GangReservation(key(1), res.slots)  # the memo is no field
