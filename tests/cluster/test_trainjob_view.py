"""The live view finds TrainJob and JobSet gangs through the owner chain (issue 20).

The objects are what Trainer, JobSet and the Job controller create
(``gputopo.operators.expand``), written into the Kubernetes API TEST DOUBLE in creation
order; the double gives each its own uid, as the API server does, and the owner
references are made to name those uids, as the controllers' would.
"""

from __future__ import annotations

from typing import Any

from cluster_helpers import wait_for
from k8s_double import KubeApiDouble, api_client
from k8s_double.owner_chain import apply_chain

from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.reservations import GangKey
from gputopo.cluster.view import ClusterView
from gputopo.operators import expand, with_identity
from gputopo.placement.types import Placement, ReplicaSlot
from webhook.jobs import JobNotFound, resolve_job

GPU_NAMES = frozenset({"nvidia.com/gpu", "aliyun.com/gpu"})


def _trainjob(name: str) -> dict[str, Any]:
    return with_identity({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 2,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}}})


def _view(kube: KubeApiDouble, **kw: Any) -> ClusterView:
    return ClusterView(api_client(kube.url), watch_timeout_seconds=2, backoff_initial=0.05,
                       backoff_max=0.2, request_timeout=2, fetch_timeout=1, **kw)


def test_a_trainjob_pod_resolves_to_its_trainjob_gang(kube) -> None:
    job = _trainjob("llm")
    pods = apply_chain(kube, [job, *expand(job)])
    view = _view(kube).start()
    try:
        assert view.wait_synced(5)
        stored = view.object(api_version="trainer.kubeflow.org/v1alpha1", kind="TrainJob",
                             namespace="team", name="llm")
        assert stored is not None
        infos = [resolve_job(p, "team", view, GPU_NAMES) for p in pods]
        assert all(i is not None for i in infos)
        assert {(i.kind, i.name, i.uid) for i in infos} == {
            ("TrainJob", "llm", stored["metadata"]["uid"])}
        assert [(i.replica_type, i.replica_index) for i in infos] == [("node", 0), ("node", 1)]
        assert {(i.gang_size, i.gpus_per_pod, i.runtime) for i in infos} == {
            (2, 4, "torch-distributed")}
    finally:
        view.stop()


def test_a_jobset_pod_whose_jobset_is_gone_has_no_gang(kube) -> None:
    job = _trainjob("lost")
    objs = expand(job)
    pods = apply_chain(kube, [job, *objs])
    kube.remove(next(o for o in objs if o["kind"] == "JobSet"))
    view = _view(kube).start()
    try:
        assert view.wait_synced(5)
        try:
            resolve_job(pods[0], "team", view, GPU_NAMES)
        except JobNotFound as exc:
            assert exc.message == "owner JobSet team/lost not found"
        else:
            raise AssertionError("a pod whose JobSet is gone was given a gang")
    finally:
        view.stop()


def test_a_finished_trainjob_releases_its_reservation(kube, kube_client) -> None:
    store = KubernetesReservationStore(kube_client)
    job = kube.apply(_trainjob("done"))
    m = job["metadata"]
    key = GangKey(m["namespace"], "TrainJob", m["name"], m["uid"])
    store.reserve(key, Placement(True, (ReplicaSlot(0, "a", (0,)),)))
    view = _view(kube, reservations=store).start()
    try:
        assert view.wait_synced(5)
        assert store.get(key) is not None
        job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        kube.apply(job)
        assert wait_for(lambda: store.get(key) is None)
    finally:
        view.stop()
