"""A job deleted while its gang waits gets no GPUs: the queue checks the job (by uid) right
before it reserves, and releases a reservation the gang already has, saying why in the log
and in ``gputopo_reservation_releases_total`` — through the official client against the API
TEST DOUBLE, where the job's pods outlive it (garbage collection takes a few seconds)."""

from __future__ import annotations

import logging
from typing import Any

from placement_jobs import mpijob
from prometheus_client import REGISTRY
from queue_kit import busy_cluster, pods_of, wait_for, waiting_gang
from test_placement_live import live_admitter

from gputopo.cluster.reservations import GangKey, InMemoryReservationStore
from gputopo.placement.types import Placement, ReplicaSlot
from webhook.queue.placer import PlacementQueue


def _releases(reason: str) -> float:
    return REGISTRY.get_sample_value("gputopo_reservation_releases_total",
                                     {"reason": reason}) or 0.0


def _queue(view: Any) -> PlacementQueue:
    return PlacementQueue(view.api_client, view, view.reservations, identity="test")


def test_a_job_deleted_while_its_gang_waits_gets_no_reservation(kube, caplog):
    holder = busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job, _ = waiting_gang(kube, admitter)
        key = GangKey("default", "MPIJob", "waiter", job["metadata"]["uid"])
        kube.remove(mpijob("waiter"))  # deleted; its pods are still there
        kube.remove(holder)  # and GPUs free up: the gang would fit now
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        assert len(pods_of(kube, "waiter")) == 4
        with caplog.at_level(logging.INFO):
            result = _queue(view).run_once()
        assert result.placed == []
        assert view.reservations.get(key) is None
        assert "not placed: its job is gone" in caplog.text


def test_a_reservation_of_a_job_gone_is_released_at_once_with_the_reason(kube, caplog):
    """The race the check leaves: the gang got its reservation in the store after the
    release on the job's deletion had run. The next pass releases it, not the reconcile
    pass minutes later. (A store of its own, which the view's release never touches.)"""
    busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job, _ = waiting_gang(kube, admitter)
        key = GangKey("default", "MPIJob", "waiter", job["metadata"]["uid"])
        store = InMemoryReservationStore()
        node = view.node_states()[1].name
        store.reserve(key, Placement(feasible=True, slots=tuple(
            ReplicaSlot(i, node, (4 + i,)) for i in range(4))))
        kube.remove(mpijob("waiter"))
        assert wait_for(lambda: view.job_exists(key) is False)
        before = _releases("stale")
        with caplog.at_level(logging.INFO):
            result = PlacementQueue(view.api_client, view, store, identity="t").run_once()
        assert result.placed == []
        assert store.get(key) is None and store.held_gpus() == {}
        assert _releases("stale") == before + 1
        assert f"reservation of {key} released: stale" in caplog.text
