"""Helpers of the failure drills: a live webhook on the API test double, and the ledger of
what was handed out.

``live_webhook`` is ``gputopo serve``'s live wiring (``ClusterView`` with a
``KubernetesReservationStore`` on the same client, ``placement_step_for(view)``,
``build_admitter``) behind the real HTTPS server, in this process. ``Ledger`` collects the
placement records of every admitted pod and counts what must never happen: a GPU handed to
two pods of different replicas, or a placed pod whose slot its gang's reservation (in the
API) does not record.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from admitkit import admitted, client_for, namespaces, placement, post, real_server, review
from k8s_double import KubeApiDouble
from serverkit import RunningServer

from gputopo.cluster.demo import demo_cluster_path
from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.view import ClusterView, connect
from gputopo.yamlio import load_documents
from tests.k8s_double.client import write_kubeconfig
from webhook.assembly import build_admitter
from webhook.placement.step import placement_step_for


def seed(kube: KubeApiDouble, *objects: dict[str, Any]) -> list[dict[str, Any]]:
    """The demo cluster's nodes, the test namespaces and ``objects`` into the API; returns
    ``objects`` as stored (the double assigns uids unless given)."""
    for obj in load_documents(demo_cluster_path()):
        kube.apply(obj)
    for ns in namespaces():
        kube.apply(ns)
    return [kube.apply(obj) for obj in objects]


def wait_for(condition: Callable[[], object], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


@dataclass
class LiveWebhook:
    server: RunningServer
    client: httpx.Client
    view: ClusterView
    store: KubernetesReservationStore


def kubeconfig(kube: KubeApiDouble, path: Path) -> Path:
    """A kubeconfig file pointing at the double, as ``gputopo serve`` would find one."""
    return write_kubeconfig(path, kube.url)


@contextmanager
def live_webhook(kube: KubeApiDouble, work: Path, **view_options: Any
                 ) -> Iterator[LiveWebhook]:
    """The real webhook reading the cluster through a live view of ``kube``, built the way
    ``gputopo serve`` builds it from a kubeconfig (``gputopo.cluster.view.connect``)."""
    work.mkdir(parents=True, exist_ok=True)
    view = connect(str(kubeconfig(kube, work / "kubeconfig")), **view_options)
    assert view is not None and isinstance(view.reservations, KubernetesReservationStore)
    try:
        assert view.wait_synced(10), "the view never listed the double"
        admitter = build_admitter(None, view, placement=placement_step_for(view))
        with real_server(view, work, admitter=admitter) as server, \
                client_for(server) as client:
            yield LiveWebhook(server, client, view, view.reservations)
    finally:
        view.stop()
        view.api_client.close()


@dataclass
class Ledger:
    """Placement records of admitted pods: (pod name → record)."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)

    def admit(self, client: httpx.Client, pod: dict[str, Any], **kwargs: Any
              ) -> tuple[dict[str, Any], float]:
        """Admit ``pod`` over HTTPS; (the answer, seconds it took). Records placed pods."""
        started = time.perf_counter()
        resp = post(client, review(pod, **kwargs))
        seconds = time.perf_counter() - started
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        record = placement(admitted(pod, answer))
        if record is not None and record.get("placed"):
            self.records[pod["metadata"]["name"]] = record
        return answer, seconds

    def double_allocated(self) -> int:
        """GPUs held by more than one replica (a recreated replica holding its own slot
        again is the same holder)."""
        holders: dict[tuple[str, int], set[tuple[str, str]]] = defaultdict(set)
        for rec in self.records.values():
            for gpu in rec["gpus"]:
                holders[(rec["node"], gpu)].add((rec["jobUid"], rec["replica"]))
        return sum(len(h) - 1 for h in holders.values() if len(h) > 1)

    def lost(self, store: KubernetesReservationStore) -> int:
        """Placed pods whose slot is not what their gang's reservation records."""
        reservations = {r.key.uid: r for r in store.list()}
        lost = 0
        for rec in self.records.values():
            res = reservations.get(rec["jobUid"])
            slots = {(s.node, tuple(s.gpus)) for s in res.assignments.values()} if res else set()
            lost += (rec["node"], tuple(rec["gpus"])) not in slots
        return lost
