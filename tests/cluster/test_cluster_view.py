"""The live ClusterView through the official client against the API test double: list then
watch, bad node data, 410 Gone, the API going away and coming back, jobs and reservations."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import bound_pod, dgx1_annotation, job, node, wait_for
from k8s_double import KubeApiDouble, api_client
from prometheus_client import REGISTRY

from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.reservations import GangKey
from gputopo.cluster.view import ClusterView, connect
from gputopo.placement.types import Placement, ReplicaSlot
from gputopo.topology.ack_report import report_configmap
from gputopo.topology.model import Topology
from tests.k8s_double.client import write_kubeconfig

TOPO = dgx1_annotation()


@pytest.fixture
def view(kube: KubeApiDouble) -> Iterator[ClusterView]:
    v = ClusterView(api_client(kube.url), watch_timeout_seconds=2, backoff_initial=0.05,
                    backoff_max=0.2, request_timeout=2, fetch_timeout=1)
    yield v
    v.stop()


def names_of(view: ClusterView) -> list[str]:
    return [s.name for s in view.node_states()]


def errors(reason: str) -> float:
    return REGISTRY.get_sample_value("gputopo_node_data_errors_total",
                                     {"reason": reason}) or 0.0


def test_list_then_watch_follows_node_add_modify_delete(kube, view) -> None:
    kube.apply(node("a", topology=TOPO))
    kube.apply(node("off", topology=TOPO, activated=False))
    view.start()
    assert view.wait_synced(5)
    assert names_of(view) == ["a"]
    kube.apply(node("b", topology=TOPO, rack="r9"))
    assert wait_for(lambda: names_of(view) == ["a", "b"])
    assert view.node_states()[1].rack == "r9"
    kube.apply(node("b", topology=TOPO, rack="r2"))
    assert wait_for(lambda: view.node_states()[1].rack == "r2")
    kube.apply(node("off", topology=TOPO, activated=True))  # opted in later
    assert wait_for(lambda: names_of(view) == ["a", "b", "off"])
    assert view.node_state("b") is not None and view.node_state("b").rack == "r2"
    kube.remove(node("a"))
    assert wait_for(lambda: names_of(view) == ["b", "off"])
    assert view.node_state("a") is None  # the lookup by name follows the list
    assert view.node_state("off") is view.node_states()[1]
    assert view.stats()["nodes"]["lists"] == 1  # all of it through one watch


def test_bound_pods_mark_gpus_used_until_they_finish_or_go(kube, view) -> None:
    kube.apply(node("a", topology=TOPO))
    kube.apply(bound_pod("p1", "a", "0,1"))
    view.start()
    assert view.wait_synced(5)
    assert view.node_states()[0].used == {0, 1}
    kube.apply(bound_pod("p2", "a", "4"))
    assert wait_for(lambda: view.node_states()[0].used == {0, 1, 4})
    done = bound_pod("p1", "a", "0,1")
    done["status"]["phase"] = "Succeeded"
    kube.apply(done)
    assert wait_for(lambda: view.node_states()[0].used == {4})
    kube.remove(bound_pod("p2", "a", "4"))
    assert wait_for(lambda: view.node_states()[0].used == frozenset())


def test_bad_node_data_leaves_the_node_out_with_a_metric(kube, view, caplog) -> None:
    kube.apply(node("good", topology=TOPO))
    kube.apply(node("corrupt", topology="{not json"))
    wrong = json.loads(TOPO)
    wrong["links"] = wrong["links"][:3]  # a matrix of the wrong size
    kube.apply(node("wrong-size", topology=json.dumps(wrong)))
    before = errors("bad_topology")
    caplog.set_level(logging.WARNING, logger="gputopo.cluster.view")
    view.start()
    assert view.wait_synced(5)
    assert names_of(view) == ["good"]
    assert set(view.warnings) == {"corrupt", "wrong-size"}
    assert errors("bad_topology") - before == 2
    assert "corrupt" in caplog.text and "wrong-size" in caplog.text
    view.node_states()  # asking again neither re-logs nor re-counts
    assert errors("bad_topology") - before == 2
    kube.apply(node("corrupt", topology=TOPO))  # fixed by the reporter
    assert wait_for(lambda: names_of(view) == ["corrupt", "good"])
    assert "corrupt" not in view.warnings


def test_a_misspelt_network_annotation_is_logged_once_per_change(kube, view, caplog) -> None:
    odd = node("odd", topology=TOPO)
    odd["metadata"]["annotations"]["gputopo.io/network-transport"] = "infiniband"
    kube.apply(odd)
    caplog.set_level(logging.WARNING, logger="gputopo.cluster.view")
    view.start()
    assert view.wait_synced(5)
    (state,) = view.node_states()
    assert state.network_transport == "tcp"  # used, with the documented default
    said = [r.getMessage() for r in caplog.records if "network-transport" in r.getMessage()]
    assert said == ["node odd: gputopo.io/network-transport 'infiniband' is not one of "
                    "tcp, rdma, gdr: read as tcp"]
    view.node_states()
    assert len([r for r in caplog.records if "network-transport" in r.getMessage()]) == 1


def test_ack_report_configmap_stands_in_for_the_annotation(kube, view) -> None:
    kube.apply(node("ack", topology=None))
    view.start()
    assert view.wait_synced(5)
    assert names_of(view) == []  # no topology at all: left out
    cm = report_configmap(Topology.from_annotation(TOPO), node="ack")
    kube.apply(cm)
    assert wait_for(lambda: names_of(view) == ["ack"])
    assert len(view.node_states()[0].topology.indices) == 8


def test_410_gone_relists_and_converges(kube, view) -> None:
    kube.apply(node("a", topology=TOPO))
    kube.apply(node("b", topology=TOPO))
    view.start()
    assert view.wait_synced(5)
    kube.set_down("refuse")
    kube.remove(node("a"))  # changes the view cannot see while the API is away
    kube.apply(node("c", topology=TOPO))
    kube.compact()  # ... and history it could resume from is gone
    kube.set_down(None)
    assert wait_for(lambda: names_of(view) == ["b", "c"], timeout=10)
    assert view.stats()["nodes"]["lists"] == 2  # the 410 made it list again
    assert kube.stats["WATCH 410"] >= 1


def test_api_down_then_back_keeps_serving_and_converges(kube, view) -> None:
    kube.apply(node("a", topology=TOPO))
    view.start()
    assert view.wait_synced(5)
    for mode in ("503", "refuse"):
        kube.set_down(mode)
        kube.apply(node(f"new-{mode}", topology=TOPO))
        assert names_of(view)[0] == "a"  # answers from memory meanwhile
        assert wait_for(lambda: view.stats()["nodes"]["errors"] > 0, timeout=5)
        kube.set_down(None)
        assert wait_for(lambda m=mode: f"new-{m}" in names_of(view), timeout=10)
    assert view.stats()["nodes"]["lists"] == 1  # resumed from its resourceVersion


def test_jobs_namespaces_and_launcher_jobs_are_readable(kube, view) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "team", "labels": {"gputopo.io/inject": "enabled"}}})
    kube.apply(job("PyTorchJob", "pt", namespace="team"))
    kube.apply(job("MPIJob", "mpi2", version="v2beta1", namespace="team"))
    view.start()
    assert view.wait_synced(5)
    assert view.namespace("team")["metadata"]["labels"]["gputopo.io/inject"] == "enabled"
    assert view.object(api_version="kubeflow.org/v1", kind="PyTorchJob", namespace="team",
                       name="pt") is not None
    assert view.object(api_version="kubeflow.org/v2beta1", kind="MPIJob", namespace="team",
                       name="mpi2") is not None
    # a batch/v1 Job (the v2beta1 launcher's owner) is read on demand, never watched
    kube.apply({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "mpi2-launcher", "namespace": "team"}, "spec": {}})
    got = view.object(api_version="batch/v1", kind="Job", namespace="team",
                      name="mpi2-launcher")
    assert got is not None and got["metadata"]["name"] == "mpi2-launcher"
    # a job created a moment ago is found even before its watch event arrives
    kube.apply(job("TFJob", "tf", namespace="team"))
    assert view.object(api_version="kubeflow.org/v1", kind="TFJob", namespace="team",
                       name="tf") is not None
    assert view.namespace("nope") is None


def test_deleted_or_finished_job_releases_its_reservation(kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client)
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=2)
    deleted = kube.apply(job("PyTorchJob", "gone"))
    finished = kube.apply(job("MPIJob", "done"))
    keys = {}
    for i, obj in enumerate((deleted, finished)):
        m = obj["metadata"]
        keys[m["name"]] = GangKey(m["namespace"], obj["kind"], m["name"], m["uid"])
        store.reserve(keys[m["name"]], Placement(True, (ReplicaSlot(0, "a", (i,)),)))
    view.start()
    try:
        assert view.wait_synced(5)
        kube.remove(deleted)
        assert wait_for(lambda: store.get(keys["gone"]) is None)
        finished["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
        kube.apply(finished)
        assert wait_for(lambda: store.get(keys["done"]) is None)
        assert store.held_gpus() == {}
        assert sorted(k.name for k in view.released) == ["done", "gone"]
    finally:
        view.stop()


def test_reconcile_releases_orphans_and_expired_but_keeps_live_jobs(kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client, ttl_seconds=100)
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=2,
                       job_grace_seconds=30)
    live = kube.apply(job("PyTorchJob", "live"))["metadata"]
    live_key = GangKey("default", "PyTorchJob", "live", live["uid"])
    orphan_key = GangKey("default", "PyTorchJob", "never-seen", "uid-orphan")
    store.reserve(live_key, Placement(True, (ReplicaSlot(0, "a", (0,)),)), now=1000)
    store.reserve(orphan_key, Placement(True, (ReplicaSlot(0, "a", (1,)),)), now=1000)
    view.start()
    try:
        assert view.wait_synced(5)
        # within the grace nothing goes: the job may still be on its way through the watch
        assert view.reconcile_reservations(now=1010) == []
        # later: the orphan goes (its job does not exist), the live job's stays (within TTL)
        assert view.reconcile_reservations(now=1000 + 99) == [orphan_key]
        assert store.get(live_key) is not None
        # past the TTL with no pod ever admitted: released
        assert view.reconcile_reservations(now=1000 + 101) == [live_key]
    finally:
        view.stop()


def test_connect_returns_none_without_credentials(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert connect() is None


def test_connect_returns_none_for_a_kubeconfig_that_is_not_yaml(monkeypatch, tmp_path) -> None:
    # ``gputopo serve`` used to die with a yaml ParserError traceback on such a file.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cfg = tmp_path / "config"
    cfg.write_text("apiVersion: v1\nclusters: [\n")
    assert connect(str(cfg)) is None
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    assert connect() is None


def test_connect_with_a_kubeconfig_watches_that_cluster(kube, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube.apply(node("a", topology=TOPO))
    cfg = tmp_path / "config"
    write_kubeconfig(cfg, kube.url)
    view = connect(str(cfg), watch_timeout_seconds=2)
    assert view is not None
    try:
        assert view.wait_synced(5)
        assert names_of(view) == ["a"]
        assert view.reservations is not None
    finally:
        view.stop()


def test_forbidden_ack_reports_do_not_stop_the_view(kube, view, caplog) -> None:
    # An operator who deleted the kube-system Role (docs/rbac.md): annotations still work.
    kube.forbidden.add("kube-system/configmaps")
    kube.apply(node("a", topology=TOPO))
    caplog.set_level(logging.WARNING, logger="gputopo.cluster.view")
    view.start()
    assert view.wait_synced(5)
    assert names_of(view) == ["a"]
    assert "403" in caplog.text


def test_missing_rbac_on_nodes_means_not_synced(kube, view) -> None:
    kube.forbidden.add("nodes")
    view.start()
    assert not view.wait_synced(0.5)  # never pretend an empty cluster
    kube.forbidden.clear()
    kube.apply(node("a", topology=TOPO))
    assert view.wait_synced(5) and names_of(view) == ["a"]


def test_fewer_allocatable_gpus_than_the_topology_leaves_the_node_out(kube, view) -> None:
    short = node("short", topology=TOPO, gpus=6)  # two GPUs not advertised by the plugin
    kube.apply(short)
    kube.apply(node("ok", topology=TOPO))
    before = errors("allocatable")
    view.start()
    assert view.wait_synced(5)
    assert names_of(view) == ["ok"]
    assert "allocatable" in view.warnings["short"]
    assert errors("allocatable") - before == 1
    kube.apply(node("short", topology=TOPO, gpus=8))
    assert wait_for(lambda: names_of(view) == ["ok", "short"])


def _pinned_pod(name: str, node_name: str, gpus: str, *, placed: bool = True) -> dict:
    """A pod the webhook placed but the scheduler has not bound yet (no spec.nodeName)."""
    pod = bound_pod(name, node_name, gpus)
    del pod["spec"]["nodeName"]
    pod["status"] = {"phase": "Pending"}
    pod["metadata"]["annotations"]["gputopo.io/placement"] = json.dumps(
        {"placed": placed, "node": node_name, "gpus": [int(g) for g in gpus.split(",")]})
    return pod


def test_pinned_pods_waiting_for_the_scheduler_hold_their_gpus(kube, view) -> None:
    kube.apply(node("a", topology=TOPO))
    kube.apply(_pinned_pod("waiting", "a", "2,3"))
    kube.apply(_pinned_pod("unplaced", "a", "5", placed=False))
    view.start()
    assert view.wait_synced(5)
    assert view.node_states()[0].used == {2, 3}
    kube.remove(_pinned_pod("waiting", "a", "2,3"))
    assert wait_for(lambda: view.node_states()[0].used == frozenset())


def test_gpus_an_ack_report_marks_unhealthy_are_never_offered(kube, view) -> None:
    kube.apply(node("ack", topology=None))
    cm = report_configmap(Topology.from_annotation(TOPO), node="ack")
    devices = json.loads(cm["data"]["devices"])
    devices["3"] = "Unhealthy"
    cm["data"]["devices"] = json.dumps(devices)
    kube.apply(cm)
    kube.apply(bound_pod("p", "ack", "0"))
    view.start()
    assert view.wait_synced(5)
    assert wait_for(lambda: [s.used for s in view.node_states()] == [{0, 3}])


def test_reconciler_survives_an_unexpected_error_and_keeps_releasing(kube) -> None:
    """One round failing on something unforeseen (here: the store raising a plain error)
    used to end the reconciler thread for good: from then on no orphan or expired
    reservation was ever released."""
    from gputopo.cluster.reservations import InMemoryReservationStore

    class FlakyStore(InMemoryReservationStore):
        failures = 2

        def expire(self, now=None):  # type: ignore[no-untyped-def]
            if self.failures:
                self.failures -= 1
                raise RuntimeError("unforeseen")
            return super().expire(now)

    store = FlakyStore()
    orphan = GangKey("default", "PyTorchJob", "never-seen", "uid-orphan")
    store.reserve(orphan, Placement(True, (ReplicaSlot(0, "a", (0,)),)), now=0)
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=2,
                       reconcile_interval_seconds=0.05, job_grace_seconds=0)
    view.start()
    try:
        assert view.wait_synced(5)
        assert wait_for(lambda: store.get(orphan) is None)
        assert store.failures == 0
    finally:
        view.stop()


def test_deleting_a_job_removes_its_reservation_even_when_edited_unreadable(
        kube, kube_client) -> None:
    """A gang record edited by hand into something unreadable is skipped by ``list()``;
    deleting its job used to leave it for ever (and every later gang of that uid 409)."""
    from gputopo.cluster.k8s_reservations import gang_name

    store = KubernetesReservationStore(kube_client)
    obj = kube.apply(job("PyTorchJob", "edited"))
    m = obj["metadata"]
    key = GangKey(m["namespace"], "PyTorchJob", m["name"], m["uid"])
    store.reserve(key, Placement(True, (ReplicaSlot(0, "a", (0,)),)))
    (cm,) = [c for c in kube.objects("v1", "ConfigMap")
             if c["metadata"]["name"] == gang_name(key)]
    cm["data"]["reservation"] = "{broken"
    kube.apply(cm)
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=2)
    view.start()
    try:
        assert view.wait_synced(5)
        kube.remove(obj)
        assert wait_for(lambda: not [c for c in kube.objects("v1", "ConfigMap")
                                     if c["metadata"]["name"] == gang_name(key)])
        assert view.released == [key]
    finally:
        view.stop()


def test_jobs_already_finished_at_start_are_released_by_one_reconcile_not_a_thread_each(
        kube, kube_client) -> None:
    """Clusters keep finished jobs around by the thousand; the first list used to start one
    release thread (a LIST of the reservations, then a GET) per finished job at every
    webhook start — measured 2.6 s to sync with 1,000 of them instead of 0.07 s."""
    store = KubernetesReservationStore(kube_client)
    finished = []
    for i in range(30):
        obj = job("PyTorchJob", f"old-{i}")
        obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
        finished.append(kube.apply(obj)["metadata"])
    m = finished[0]
    key = GangKey(m["namespace"], "PyTorchJob", m["name"], m["uid"])
    store.reserve(key, Placement(True, (ReplicaSlot(0, "a", (0,)),)), now=1000)
    before = sum(n for k, n in kube.verbs.items() if k[2:] == ("configmaps", "gputopo-system"))
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=2,
                       job_grace_seconds=30)
    view.start()
    try:
        assert view.wait_synced(5)
        time.sleep(0.3)
        after = sum(n for k, n in kube.verbs.items()
                    if k[2:] == ("configmaps", "gputopo-system"))
        assert after == before
        assert view.reconcile_reservations(now=1000 + 31) == [key]
        assert store.held_gpus() == {}
    finally:
        view.stop()


def test_losing_sight_of_the_jobs_releases_no_reservation(kube, kube_client) -> None:
    """The jobs' list answering 403 mid-run (a ClusterRole re-applied by an upgrade) empties
    the view's jobs; that used to count as every job deleted and release every live gang's
    reservation. Whether a job is gone is the reconciler's to confirm (by GET)."""
    store = KubernetesReservationStore(kube_client)
    m = kube.apply(job("PyTorchJob", "alive"))["metadata"]
    key = GangKey(m["namespace"], "PyTorchJob", m["name"], m["uid"])
    store.reserve(key, Placement(True, (ReplicaSlot(0, "a", (0,)),)), now=1000)
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=1,
                       backoff_initial=0.05, job_grace_seconds=30)
    view.start()
    try:
        assert view.wait_synced(5)
        kube.forbidden.add("pytorchjobs")
        assert wait_for(lambda: view.stats()["pytorchjobs.v1"]["objects"] == 0, timeout=5)
        time.sleep(0.3)
        assert store.get(key) is not None and view.released == []
        assert view.reconcile_reservations(now=1000 + 31) == []  # GET says 403: keep
        assert store.get(key) is not None
    finally:
        view.stop()


def test_an_on_demand_get_ends_within_the_admission_s_budget(kube, view) -> None:
    """A batch Job the watches do not hold is fetched by GET; on a slow API that GET may
    take only what the review's answer-by leaves (minus the store's share), and a review
    with no time left does not start one."""
    from gputopo.cluster.reservations import run_by
    from gputopo.cluster.view import FETCH_RESERVE_SECONDS

    view.start()
    assert view.wait_synced(10)
    kube.apply({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "launcher", "namespace": "default"}})
    kube.latency = 1.0  # every request now takes a second

    def lookup() -> object:
        return view.object(api_version="batch/v1", kind="Job", namespace="default",
                           name="launcher")

    started = time.monotonic()
    got = run_by(started + FETCH_RESERVE_SECONDS + 0.3, lookup)
    took = time.monotonic() - started
    assert got is None and took < 0.8  # cut at ~0.3 s, not the 1 s fetch_timeout
    gets = kube.verbs[("get", "batch", "jobs", "default")]
    assert run_by(time.monotonic() + FETCH_RESERVE_SECONDS, lookup) is None
    assert kube.verbs[("get", "batch", "jobs", "default")] == gets  # no time: no GET
    kube.latency = 0.0
    time.sleep(0.3)  # the failed GET quiets the API for backoff_max
    assert run_by(time.monotonic() + 4, lookup)["metadata"]["name"] == "launcher"


def test_memory_only_reader_never_waits(kube, view) -> None:
    """What the server's event loop reads: the watches' objects, else WouldBlock — never a
    GET (a batch Job is only read on demand), never a wait for a lock a watch holds."""
    import threading

    from gputopo.cluster.source import WouldBlock

    kube.apply({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "team", "labels": {"gputopo.io/inject": "enabled"}}})
    kube.apply(job("PyTorchJob", "pt", namespace="team"))
    kube.apply({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "launcher", "namespace": "team"}, "spec": {}})
    view.start()
    assert view.wait_synced(5)
    quick = view.memory_only()
    assert quick.namespace("team") == view.namespace("team")
    assert quick.object(api_version="kubeflow.org/v1", kind="PyTorchJob", namespace="team",
                        name="pt") is not None
    for lookup in (lambda: quick.namespace("nope"), quick.node_states,
                   lambda: quick.object(api_version="batch/v1", kind="Job",
                                        namespace="team", name="launcher")):
        with pytest.raises(WouldBlock):
            lookup()
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with view._lock:
            held.set()
            release.wait(5)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert held.wait(5)
        with pytest.raises(WouldBlock):
            quick.namespace("team")
    finally:
        release.set()
        holder.join(5)
    assert quick.namespace("team") is not None


def _asking_pod(name: str, node_name: str | None, cpu: str, **spec: object) -> dict:
    """A pod without GPUs asking for CPUs, as the API server stores it."""
    pod = bound_pod(name, node_name or "", "0")
    del pod["metadata"]["annotations"]
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    pod["spec"].update(spec)
    if node_name is None:
        del pod["spec"]["nodeName"]
        pod["status"] = {"phase": "Pending"}
    return pod


def test_requests_of_every_pod_on_a_node_are_summed_as_pods_come_and_go(kube, view) -> None:
    """Not only GPU pods: CPU and memory of every pod bound there (init containers and
    overhead as the scheduler counts them), until it finishes or goes; a pending pod
    asks nothing of any node."""
    a = node("a", topology=TOPO)
    a["status"]["allocatable"].update({"cpu": "94", "memory": "503Gi", "pods": "110"})
    kube.apply(a)
    kube.apply(_asking_pod("loader", "a", "80", overhead={"cpu": "500m"}))
    kube.apply(_asking_pod("pending", None, "8"))
    view.start()
    assert view.wait_synced(5)

    def requested() -> dict:
        res = view.node_states()[0].resources
        return dict(res.requested) if res is not None else {}

    assert requested() == {"cpu": 80500, "memory": 2**30, "pods": 1}
    assert view.node_states()[0].resources.allocatable["cpu"] == 94000
    kube.apply(_asking_pod("sidecar", "a", "2", initContainers=[
        {"name": "s", "image": "x", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "1"}}}]))
    assert wait_for(lambda: requested() == {"cpu": 83500, "memory": 2 * 2**30, "pods": 2})
    done = _asking_pod("loader", "a", "80", overhead={"cpu": "500m"})
    done["status"]["phase"] = "Succeeded"
    kube.apply(done)
    assert wait_for(lambda: requested() == {"cpu": 3000, "memory": 2**30, "pods": 1})
    kube.remove(_asking_pod("sidecar", "a", "2"))
    assert wait_for(lambda: requested() == {})
