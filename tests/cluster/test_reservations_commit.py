"""The commit step (4) of a Kubernetes reservation takes the ledger its claim wrote as its
first read instead of a GET: whatever another writer does to the ledger between the claim
and the commit must still be seen — the commit's compare-and-swap fails and the ledger is
read afresh — and the writes of a reservation must be exactly those of the protocol
(docs/reservations.md, "The Kubernetes store: algorithm")."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from feed_helpers import key, placement
from kubernetes import client

from gputopo.cluster.k8s_reservations import (
    GANG_PREFIX,
    KubernetesReservationStore,
    gang_name,
    ledger_name,
)
from gputopo.cluster.reservations import ReservationConflict

NS = "gputopo-system"


def between_claim_and_commit(store: KubernetesReservationStore, act: Any) -> None:
    """Run ``act()`` once, right after the gang record is created (all claims written, no
    commit yet): another writer's move in the commit's window."""
    create = store._create

    def hooked(body: dict[str, Any]) -> dict[str, Any] | None:
        out = create(body)
        if body["metadata"]["name"].startswith(GANG_PREFIX):
            act()
        return out

    store._create = hooked  # type: ignore[method-assign]


def ledger(core: client.CoreV1Api, node: str) -> dict[str, Any]:
    return json.loads(core.read_namespaced_config_map(ledger_name(node), NS,
                                                      _preload_content=False).data)


def entries(core: client.CoreV1Api, node: str) -> dict[int, dict[str, Any]]:
    return {int(k): json.loads(v) for k, v in ledger(core, node)["data"].items()
            if k != "node"}


def test_a_reservation_writes_what_the_protocol_says_and_reads_each_ledger_once(
        kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client)
    store.reserve(key(0), placement(("n0", (0,)), ("n1", (1,))))  # the ledgers exist now
    store.release(key(0))
    before = Counter(kube.verbs)
    res = store.reserve(key(1), placement(("n0", (0, 1)), ("n1", (2,)), ("n2", (3,))))
    calls = Counter({v[0]: n for v, n in (Counter(kube.verbs) - before).items()})
    # writes: a claim per node (n2's ledger is new: created), the record, a commit per node
    assert calls["create"] == 2 and calls["update"] == 5
    # reads: the record (absent) and each ledger before its claim; none before a commit
    assert calls["get"] == 1 + 3
    core = client.CoreV1Api(kube_client)
    for node, gpus in res.gpus().items():
        got = entries(core, node)
        assert {g: (got[g]["token"], got[g]["state"]) for g in gpus} == \
            {g: (res.token, "committed") for g in gpus}


def test_another_gangs_claim_between_claim_and_commit_is_kept(kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client)
    other = KubernetesReservationStore(kube_client)
    between_claim_and_commit(
        store, lambda: other.reserve(key(2), placement(("n0", (5, 6)))))
    res = store.reserve(key(1), placement(("n0", (0, 1)), ("n1", (0,))))
    core = client.CoreV1Api(kube_client)
    got = entries(core, "n0")
    assert {g: e["token"] for g, e in got.items()} == {
        0: res.token, 1: res.token, 5: other.get(key(2)).token, 6: other.get(key(2)).token}
    assert {e["state"] for e in got.values()} == {"committed"}
    assert store.stats["api_409"] == 1  # the commit on n0 saw the other write


@pytest.mark.parametrize("how", ["taken over", "deleted"])
def test_a_claim_lost_between_claim_and_commit_aborts_the_reservation(
        kube, kube_client, how: str) -> None:
    store = KubernetesReservationStore(kube_client)
    core = client.CoreV1Api(kube_client)

    def lose() -> None:
        cm = ledger(core, "n1")
        if how == "deleted":
            core.delete_namespaced_config_map(cm["metadata"]["name"], NS)
            return
        cm["data"]["0"] = json.dumps({"gang": "uid-9", "token": "t9", "state": "claimed",
                                      "at": 1e12}, sort_keys=True)
        core.replace_namespaced_config_map(cm["metadata"]["name"], NS, cm)

    between_claim_and_commit(store, lose)
    with pytest.raises(ReservationConflict, match="taken over"):
        store.reserve(key(1), placement(("n0", (0,)), ("n1", (0, 1))))
    assert store.stats["lost_claim"] == 1
    names = {c["metadata"]["name"] for c in kube.objects("v1", "ConfigMap")}
    assert gang_name(key(1)) not in names  # the record is deleted again
    assert entries(core, "n0") == {}  # this attempt's claims are rolled back
    if how == "taken over":
        assert {g: e["token"] for g, e in entries(core, "n1").items()} == {0: "t9"}
