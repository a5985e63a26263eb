"""docs/rbac.md must list exactly the verbs the webhook's cluster code uses: every request
the view and the reservation store make against the API double is granted by a row of
the webhook table, and every verb granted there is used by some request."""

from __future__ import annotations

import re
from pathlib import Path

from cluster_helpers import bound_pod, dgx1_annotation, job, node, wait_for

from gputopo.cluster.gang_record_feed import GangRecordFeed
from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.ledger_feed import LedgerFeed
from gputopo.cluster.reservations import GangKey, ReplicaKey
from gputopo.cluster.view import ClusterView
from gputopo.placement.types import Placement, ReplicaSlot

DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.md"


def webhook_rules() -> list[tuple[str, set[str], set[str], set[str]]]:
    """(namespace or "" for cluster-wide, apiGroups, resources, verbs) per table row."""
    text = DOC.read_text()
    section = text.split("## Webhook", 1)[1].split("\n## ", 1)[0]
    rules = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not (cells[0].startswith("ClusterRole")
                                  or cells[0].startswith("Role")):
            continue
        ticks = [re.findall(r"`([^`]*)`", c) for c in cells[:4]]
        ns = ticks[0][0] if cells[0].startswith("Role in") else ""
        groups = {g.strip('"') for g in ticks[1]}
        rules.append((ns, groups, set(ticks[2]), set(ticks[3])))
    return rules


def _queue_and_pod_groups(kube, view: ClusterView) -> None:
    """A gang admitted gated (its PodGroup created), then placed by the queue holding its
    Lease: the admission step, the PodGroup step, the leader election and the queue."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "placement_step"))
    from placement_checks import admit
    from placement_jobs import worker_pod

    from gputopo import names
    from webhook.assembly import build_admitter
    from webhook.events import EventRecorder
    from webhook.placement.step import placement_step_for
    from webhook.queue.lease import LeaderElector
    from webhook.queue.placer import PlacementQueue

    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "default", "labels": {names.INJECT_LABEL: names.INJECT_VALUE}}})
    kube.apply(node("b", topology=dgx1_annotation()))
    full = kube.apply(bound_pod("full", "b", "0,1,2,3,4,5,6,7"))
    mpi = kube.apply(job("MPIJob", "queued", workers=1))
    assert wait_for(lambda: view.namespace("default") is not None
                    and view.object(api_version="kubeflow.org/v1", kind="MPIJob",
                                    namespace="default", name="queued") is not None
                    and sum(len(n.used) for n in view.node_states()) == 8)
    recorder = EventRecorder(view.api_client).start()
    admitter = build_admitter(None, view, placement=placement_step_for(view, can_wait=True,
                                                                       recorder=recorder),
                              reload_interval_s=0)
    try:
        pod = kube.apply(admit(admitter, worker_pod(mpi, 0)))
    finally:
        admitter.close()
    assert pod["spec"]["schedulingGates"]  # waits for a placement
    kube.remove(full)
    assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 0)
    elector = LeaderElector(view.api_client, namespace="gputopo-system",
                            name=names.QUEUE_LEASE, identity="rbac")
    assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()  # create, renew
    queue = PlacementQueue(view.api_client, view, view.reservations,
                           is_leader=elector.is_leader, recorder=recorder)
    assert len(queue.run_once().placed) == 1
    assert recorder.flush() and recorder.written  # the Events of the queue's placement
    recorder.stop()
    elector.release()


def _compute_domain(kube) -> None:
    """``placement.computeDomain: create``: a gang's ComputeDomain, created once."""
    from k8s_double import api_client

    from webhook.placement.compute_domain import ComputeDomains, object_names
    from webhook.steps import JobInfo

    info = JobInfo(api_version="kubeflow.org/v1", kind="PyTorchJob", name="pytorchjob",
                   namespace="default", uid="uid-1", replica_type="Worker", replica_index=0,
                   role=None, gang_size=2, gpus_per_pod=4, requests_gpu=True)
    api = api_client(kube.url)
    try:
        assert ComputeDomains().create(api, info, *object_names("pytorchjob"), 2) == ""
    finally:
        api.close()


def _dra(kube, view) -> None:
    """DRA: a pod's claim template and its own claim the watches do not hold yet (one GET
    each), and a replica's pinned claim created twice (the second: 409, read back)."""
    from k8s_double import api_client

    from gputopo.cluster.dra_claims import KubernetesClaims

    view.object(api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate",
                namespace="default", name="not-watched-yet")
    view.object(api_version="resource.k8s.io/v1", kind="ResourceClaim",
                namespace="default", name="not-watched-yet")
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "j-worker-0-gpus", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "count": 1}}]}}}
    api = api_client(kube.url)
    try:
        assert KubernetesClaims(api).ensure([claim]) == []
        assert KubernetesClaims(api).ensure([claim]) == []  # the same slot again
    finally:
        api.close()


def test_rbac_doc_is_exactly_what_the_webhook_uses(kube, kube_client) -> None:
    from k8s_double import api_client

    for kind in ("PyTorchJob", "TFJob"):
        kube.apply(job(kind, kind.lower()))
    kube.apply(node("a", topology=None))
    feed, gangs = LedgerFeed(), GangRecordFeed()  # as connect() wires them: both watched
    store = KubernetesReservationStore(kube_client, held_feed=feed, gang_feed=gangs)
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=1,
                       ledger_feed=feed, gang_feed=gangs)
    view.start()
    try:
        assert view.wait_synced(5)
        assert wait_for(lambda: all(i["watches"] for i in view.stats().values()))
        # cache misses: a namespace, a job created a moment ago, a launcher's batch Job
        view.namespace("not-yet-watched")
        kube.apply(job("MPIJob", "fresh"))
        view.object(api_version="kubeflow.org/v1", kind="MPIJob", namespace="default",
                    name="fresh")
        view.object(api_version="batch/v1", kind="Job", namespace="default", name="l")
        # a pod that mounts claims: a bound claim and its volume, an unbound claim's class
        kube.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data", "namespace": "default"},
                    "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}})
        kube.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "later", "namespace": "default"},
                    "spec": {"storageClassName": "local"}, "status": {"phase": "Pending"}})
        kube.apply({"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": "pv-1"}, "spec": {}})
        kube.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                    "metadata": {"name": "local"}, "provisioner": "x",
                    "volumeBindingMode": "WaitForFirstConsumer"})
        from gputopo.cluster.node_volumes import pod_volumes
        claims = pod_volumes(view, {"metadata": {"namespace": "default"}, "spec": {
            "volumes": [{"name": v, "persistentVolumeClaim": {"claimName": v}}
                        for v in ("data", "later")]}})
        assert "WaitForFirstConsumer" in claims.notes[0]
        # a JobSet pod's JobSet and TrainJob the watches do not hold (yet): one GET each
        view.object(api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet",
                    namespace="default", name="not-watched-yet")
        view.object(api_version="trainer.kubeflow.org/v1alpha1", kind="TrainJob",
                    namespace="default", name="not-watched-yet")
        key = GangKey("default", "PyTorchJob", "pytorchjob", "uid-1")
        store.reserve(key, Placement(True, (ReplicaSlot(0, "a", (0,)),)))
        store.assign_slot(key, ReplicaKey("worker", 0))
        store.held_gpus()
        store.expire(now=0)
        store.release(key)
        _queue_and_pod_groups(kube, view)
        _compute_domain(kube)
        _dra(kube, view)
    finally:
        view.stop()
    rules = webhook_rules()
    assert rules, "no webhook rules parsed from docs/rbac.md"
    used = set(kube.verbs)
    for verb, group, resource, ns in used:
        granted = [r for r in rules if group in r[1] and resource in r[2] and verb in r[3]
                   and (r[0] == "" or r[0] == ns)]
        assert granted, f"{verb} {group or 'core'}/{resource} in {ns or '*'}: not in rbac.md"
    for ns, groups, resources, verbs in rules:
        for verb in verbs:
            assert any(v == verb and g in groups and r in resources and (not ns or n == ns)
                       for v, g, r, n in used), \
                f"rbac.md grants {verb} on {resources} ({ns or 'cluster'}) but nothing uses it"
