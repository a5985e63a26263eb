"""Shared by the tests of the reservation store's watch-fed answers (test_ledger_feed.py,
test_gang_record_feed.py): a view and a store wired as ``gputopo.cluster.view.connect``
wires them, the truth as a store without feeds answers it, and waiting for the watches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from cluster_helpers import wait_for
from k8s_double import KubeApiDouble, api_client, running_double

from gputopo.cluster.gang_record_feed import GangRecordFeed
from gputopo.cluster.k8s_reservations import KubernetesReservationStore, ledger_name
from gputopo.cluster.ledger_feed import LedgerFeed
from gputopo.cluster.reservations import GangKey
from gputopo.cluster.view import ClusterView
from gputopo.placement.types import Placement, ReplicaSlot

FEED_KINDS = ("ledgers", "gang-records")


def key(i: int | str) -> GangKey:
    return GangKey("default", "PyTorchJob", f"job-{i}", f"uid-{i}")


def placement(*slots: tuple[str, tuple[int, ...]]) -> Placement:
    return Placement(True, tuple(ReplicaSlot(i, n, g) for i, (n, g) in enumerate(slots)),
                     42.0, "test")


@contextlib.contextmanager
def watched(kube: KubeApiDouble) -> Iterator[tuple[ClusterView, KubernetesReservationStore]]:
    """A view watching the ledgers and gang records and a store answering from both,
    wired as connect() does."""
    feed, gangs = LedgerFeed(), GangRecordFeed()
    api = api_client(kube.url)
    store = KubernetesReservationStore(api, held_feed=feed, gang_feed=gangs)
    view = ClusterView(api, reservations=store, ledger_feed=feed, gang_feed=gangs,
                       watch_timeout_seconds=2, backoff_initial=0.05, backoff_max=0.2,
                       request_timeout=2, reconcile_interval_seconds=3600)
    view.start()
    try:
        assert view.wait_synced(5)
        yield view, store
    finally:
        view.stop()


def listed(kube: KubeApiDouble) -> dict[str, set[int]]:
    """The truth: held GPUs as a store without a feed answers them (one LIST)."""
    return KubernetesReservationStore(api_client(kube.url)).held_gpus()


def ledger_lists(kube: KubeApiDouble) -> int:
    """LISTs of ConfigMaps in gputopo-system (ledgers and gang records) so far."""
    return kube.verbs[("list", "", "configmaps", "gputopo-system")]


def caught_up(view: ClusterView, kube: KubeApiDouble) -> bool:
    """Wait until the feeds' watches delivered everything the API server holds now
    (the double's bookmarks move a quiet watch's version on)."""
    target = kube.resource_version
    infs = [view._informers[k] for k in FEED_KINDS if k in view._informers]
    return wait_for(lambda: all(int(i.rv or 0) >= target for i in infs), timeout=5)


def ledger_of(kube: KubeApiDouble, node: str) -> dict[str, Any]:
    (cm,) = [c for c in kube.objects("v1", "ConfigMap")
             if c["metadata"]["name"] == ledger_name(node)]
    return cm


def two_replicas_on_a_double() -> Iterator[dict[str, Any]]:
    """The state of a random two-replica sequence test: a double, a view with its feeds
    and the store it wires (replica 0), a second store without feeds (replica 1)."""
    with running_double() as kube, watched(kube) as (view, store):
        yield {"kube": kube, "view": view, "stores": [
            store, KubernetesReservationStore(api_client(kube.url))],
            "gangs": [], "next": [0]}
