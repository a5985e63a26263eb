"""A gang that does not fit waits, gated, and the queue places it on exactly the GPUs that
free up — through the official client against the API TEST DOUBLE, whose Pod update rules
are the API server's (gates only removed, a gated pod's affinity only narrowed).

"Done when" of issue 10: the seeds' two DGX-1 nodes with 12 of 16 GPUs busy; a 4 x 1-GPU
MPIJob is admitted gated; when the job holding a whole NVLink quad finishes, the queue
places the gang on exactly those GPUs; the pods lose their gate and carry consistent
annotations, affinity and env (resolved as the kubelet resolves the downward API); no pod
is released before every pod of the gang has its slot.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from placement_checks import env, gpu_group, gpu_visible, pinned_node, record
from placement_jobs import mpijob, worker_pod
from queue_kit import (
    NODE_A,
    NODE_B,
    admit_and_create,
    busy_cluster,
    busy_pod,
    gated,
    pods_of,
    wait_for,
    waiting_gang,
)
from test_placement_live import live_admitter

from gputopo import names
from gputopo.cluster.reservations import GangKey
from webhook.queue.gangs import waiting_gangs
from webhook.queue.placer import PlacementQueue


def _queue(view: Any, kube: Any, **kw: Any) -> PlacementQueue:
    return PlacementQueue(view.api_client, view, view.reservations, identity="test", **kw)


def test_a_gang_waits_gated_then_takes_exactly_the_freed_nvlink_quad(kube):
    holder = busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job, admitted = waiting_gang(kube, admitter)
        for pod in admitted:
            assert gated(pod)
            rec = record(pod)
            assert rec["placed"] is False and rec["waiting"] is True
            assert "a good placement gives" in rec["reason"]
            assert names.GPU_GROUP_ANNOTATION not in pod["metadata"]["annotations"]
            assert "affinity" not in pod["spec"]
            (c,) = pod["spec"]["containers"]  # the env is there already, as references
            assert {e["name"] for e in c["env"]} >= {names.NVIDIA_VISIBLE_DEVICES_ENV,
                                                     names.CUDA_VISIBLE_DEVICES_ENV}
        key = GangKey("default", "MPIJob", "waiter", job["metadata"]["uid"])
        assert view.reservations.get(key) is None  # nothing reserved while waiting

        released: list[str] = []

        def check_before_release(phase: str, name: str) -> None:
            """When a gate is lifted, every pod of the gang already carries its slot and
            the reservation holds all four replicas (a scheduler binds only ungated pods)."""
            if phase != "ungate":
                return
            released.append(name)
            for p in pods_of(kube, "waiter"):
                assert names.GPU_GROUP_ANNOTATION in p["metadata"]["annotations"], name
                assert pinned_node(p) == NODE_A
            res = view.reservations.get(key)
            assert res is not None and len(res.assigned) == 4

        queue = _queue(view, kube, after_write=check_before_release)
        first = queue.run_once()
        assert first.placed == [] and str(key) in first.waiting
        assert all(gated(p) for p in pods_of(kube, "waiter"))

        kube.remove(holder)  # the job holding GPUs 0-3 of node A finishes
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        second = queue.run_once()
        assert second.placed == [str(key)], second
        assert len(released) == 4

    pods = pods_of(kube, "waiter")
    groups = [gpu_group(p) for p in pods]
    assert sorted(g for grp in groups for g in grp) == [0, 1, 2, 3]  # exactly the freed quad
    for pod in pods:
        assert not gated(pod)
        assert pinned_node(pod) == NODE_A
        assert gpu_visible(pod) == (0, 1, 2, 3)
        rec = record(pod)
        assert rec["placed"] is True and rec["node"] == NODE_A
        assert tuple(rec["gpus"]) == gpu_group(pod) and rec["queue"]["by"] == "test"
        (c,) = pod["spec"]["containers"]
        e = env(c, pod)  # what the kubelet hands the container
        assert e[names.NVIDIA_VISIBLE_DEVICES_ENV] == "0,1,2,3"
        positions = [int(x) for x in e[names.CUDA_VISIBLE_DEVICES_ENV].split(",")]
        assert tuple(gpu_visible(pod)[i] for i in positions) == gpu_group(pod)


def test_later_pods_of_a_placed_gang_are_admitted_straight_into_their_slots(kube):
    holder = busy_cluster(kube)
    kube.remove(holder)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        job = kube.apply(mpijob("direct"))
        pods = [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in range(4)]
    assert not any(gated(p) for p in pods)
    assert sorted(g for p in pods for g in gpu_group(p)) == [0, 1, 2, 3]


@pytest.mark.parametrize("starvation_seconds", [10_000.0, 0.0])
def test_backfill_and_the_starvation_guard(kube, starvation_seconds):
    """A younger 1-GPU gang may take GPUs the older 4-GPU gang cannot use yet (backfill) —
    unless the older one has waited ``starvation_seconds``: then nothing overtakes it."""
    busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        old, _ = waiting_gang(kube, admitter, "old")
        kube.apply(busy_pod("tmp-a", NODE_A, "6,7"))
        tmp_b = kube.apply(busy_pod("tmp-b", NODE_B, "6,7"))
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 16)
        young = kube.apply(mpijob("young", workers=1))
        pod, warnings = admit_and_create(admitter, kube, worker_pod(young, 0))
        assert gated(pod), warnings  # the cluster is full: it waits too, behind "old"
        kube.remove(tmp_b)  # B:6,7 free: enough for "young", not for "old"
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 14)
        queue = _queue(view, kube, starvation_seconds=starvation_seconds)
        result = queue.run_once()
    old_key = str(GangKey("default", "MPIJob", "old", old["metadata"]["uid"]))
    young_key = str(GangKey("default", "MPIJob", "young", young["metadata"]["uid"]))
    assert old_key in result.waiting
    if starvation_seconds:
        assert result.placed == [young_key]
        assert pinned_node(pods_of(kube, "young")[0]) == NODE_B
    else:
        assert result.placed == [] and result.blocked_by == old_key
        assert gated(pods_of(kube, "young")[0])


def test_gangs_are_served_in_arrival_order():
    def pod(name: str, job: str, since: float) -> dict[str, Any]:
        rec = {"waiting": True, "replica": "worker/0", "since": since,
               "maxWaitSeconds": 60, "gang": {"namespace": "default", "kind": "MPIJob",
                                              "name": job, "uid": job, "replicas": 1,
                                              "gpusPerReplica": 1}}
        return {"metadata": {"name": name, "namespace": "default",
                             "annotations": {names.PLACEMENT_ANNOTATION: json.dumps(rec)}},
                "spec": {"schedulingGates": [{"name": names.PLACEMENT_GATE}]}}

    bound = pod("b", "bound", 1.0)
    bound["spec"]["nodeName"] = "n1"
    ungated = pod("u", "ungated", 1.0)
    ungated["spec"]["schedulingGates"] = []
    gangs = waiting_gangs([pod("x", "late", 30.0), pod("y", "early", 10.0), bound, ungated])
    assert [g.key.name for g in gangs] == ["early", "late"]
    assert gangs[0].overdue(71.0) and not gangs[0].overdue(69.0)


def test_queue_command_shows_the_waiting_gangs_and_why_not_now(kube, tmp_path, capsys):
    from gputopo.cli import main
    from gputopo.yamlio import dump_documents

    busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        waiting_gang(kube, admitter)
        kube.apply(busy_pod("tmp-a", NODE_A, "6,7"))
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 14)
        young = kube.apply(mpijob("young", workers=1, gpus=4))
        admit_and_create(admitter, kube, worker_pod(young, 0))
    objects = [*kube.objects("v1", "Node"), *kube.objects("v1", "Namespace"),
               *kube.objects("v1", "Pod")]
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents(objects))
    capsys.readouterr()
    assert main(["queue", "--cluster", str(path), "-o", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(r["position"], r["job"], r["demand"], r["pods"]) for r in found] == [
        (1, "MPIJob default/waiter", "4 x 1 GPU", 4),
        (2, "MPIJob default/young", "1 x 4 GPU", 1)]
    assert "needs 4 x 1 GPU(s); free now: 2 GPU(s), at most 2 on one node" in found[0]["why"]
    assert "needs 1 x 4 GPU(s)" in found[1]["why"]
    assert main(["queue", "--cluster", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["POS", "JOB", "DEMAND"]
    assert "MPIJob default/waiter" in out


def _policy_dir(tmp_path: Any, **placement: Any) -> Any:
    """The shipped ACK policy with ``placement`` keys set, as the only policy of a folder."""
    from gputopo.yamlio import dump, load_documents
    from webhook.assembly import default_policies_dir

    (doc,) = load_documents(default_policies_dir() / "ack-gpu-topology.yaml")
    doc["spec"]["placement"].update(placement)
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "policy.yaml").write_text(dump(doc))
    return folder


def test_by_default_a_gang_never_starts_below_the_floor_even_after_max_wait(kube):
    """The seeds' case: the only free GPUs are two per node (A:6,7, B:6,7), which would run
    the 4 x 1-GPU gang at ~3 % of its best bus bandwidth over TCP. Before and after
    maxWaitSeconds the default rule (takeBest, floorShare 0.5) keeps it waiting, gated,
    nothing reserved; when a whole NVLink quad frees up it starts there at its best."""
    holder = busy_cluster(kube)  # free: A:6,7 and B:6,7 — feasible, but far below the floor
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job, admitted = waiting_gang(kube, admitter)
        rec = record(admitted[0])
        assert (rec["minShare"], rec["afterMaxWait"], rec["floorShare"]) == (
            0.9, "takeBest", 0.5)
        key = str(GangKey("default", "MPIJob", "waiter", job["metadata"]["uid"]))
        late = _queue(view, kube, clock=lambda: time.time() + 3601)  # maxWaitSeconds 3600
        result = late.run_once()
        assert result.placed == [] and result.fallen_back == [] and result.denied == []
        assert "waits for at least 50% of it" in result.waiting[key]
        assert view.reservations.list() == []
        assert all(gated(p) and "affinity" not in p["spec"] for p in pods_of(kube, "waiter"))
        kube.remove(holder)  # A:0-3 frees up
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        assert late.run_once().placed == [key]  # at its best: minShare met
    pods = pods_of(kube, "waiter")
    assert sorted(g for p in pods for g in gpu_group(p)) == [0, 1, 2, 3]
    assert {pinned_node(p) for p in pods} == {NODE_A} and not any(gated(p) for p in pods)


def test_after_max_wait_take_best_with_a_low_floor_takes_the_best_placement_there_is(
        kube, tmp_path):
    """``afterMaxWait: takeBest, floorShare: 0`` (the old behaviour, opted into): after
    maxWaitSeconds the gang takes the two-node placement, pinned, its env right."""
    busy_cluster(kube)  # free: A:6,7 and B:6,7 — feasible, but not good
    policies = _policy_dir(tmp_path, afterMaxWait="takeBest", floorShare=0)
    with live_admitter(kube, policies=policies, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        waiting_gang(kube, admitter)
        assert _queue(view, kube).run_once().waiting  # before maxWaitSeconds: minShare
        queue = _queue(view, kube, clock=lambda: time.time() + 3601)  # maxWaitSeconds 3600
        result = queue.run_once()
    assert len(result.fallen_back) == 1 and result.placed == []
    pods = pods_of(kube, "waiter")
    held = sorted((pinned_node(p), g) for p in pods for g in gpu_group(p))
    assert held == [(NODE_A, 6), (NODE_A, 7), (NODE_B, 6), (NODE_B, 7)]
    for pod in pods:
        assert not gated(pod)
        rec = record(pod)
        assert rec["placed"] is True and "maxWaitSeconds" in rec["queue"]["fallback"]
        (c,) = pod["spec"]["containers"]
        e = env(c, pod)
        assert e[names.NVIDIA_VISIBLE_DEVICES_ENV] == "6,7"  # the job's GPUs on that node
        assert tuple(gpu_visible(pod)[int(i)] for i in e[names.CUDA_VISIBLE_DEVICES_ENV]
                     .split(",")) == gpu_group(pod)


@pytest.mark.parametrize("after", ["takeBest", "keepWaiting"])
def test_after_max_wait_with_no_room_at_all_the_gang_keeps_waiting_gated(kube, tmp_path,
                                                                         after):
    """No gang is ever released without a placement (its GPU env would read empty
    annotations): with nothing free it keeps waiting, whatever the rule."""
    busy_cluster(kube)
    kube.apply(busy_pod("rest-a", NODE_A, "6,7"))
    kube.apply(busy_pod("rest-b", NODE_B, "6,7"))
    policies = _policy_dir(tmp_path, afterMaxWait=after, floorShare=0)
    with live_admitter(kube, policies=policies, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 16)
        waiting_gang(kube, admitter)
        queue = _queue(view, kube, clock=lambda: time.time() + 3601)
        result = queue.run_once()
        assert len(result.waiting) == 1 and not result.fallen_back and not result.denied
        assert view.reservations.list() == []  # nothing reserved for it
    for pod in pods_of(kube, "waiter"):
        assert gated(pod) and "affinity" not in pod["spec"]
        assert record(pod)["waiting"] is True


def test_after_max_wait_deny_gives_up_and_the_pods_stay_gated(kube, tmp_path):
    busy_cluster(kube)  # feasible but poor: deny does not take it either
    policies = _policy_dir(tmp_path, afterMaxWait="deny", maxWaitSeconds=60)
    with live_admitter(kube, policies=policies, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job, _ = waiting_gang(kube, admitter)
        key = str(GangKey("default", "MPIJob", "waiter", job["metadata"]["uid"]))
        assert _queue(view, kube, clock=lambda: time.time() + 30).run_once().waiting
        queue = _queue(view, kube, clock=lambda: time.time() + 61)
        assert queue.run_once().denied == [key]
        again = queue.run_once()  # a denied gang is no longer served
        assert again.denied == [] and again.waiting == {}
        assert view.reservations.list() == []
    for pod in pods_of(kube, "waiter"):
        assert gated(pod) and "affinity" not in pod["spec"]
        rec = record(pod)
        assert rec["placed"] is False and rec["waiting"] is False and rec["denied"] is True
        assert "afterMaxWait: deny" in rec["reason"]


def test_a_gang_that_fits_halfway_through_its_admissions_is_completed_by_the_queue(kube):
    """Worker 0 is gated; GPUs free up; workers 1-3 are admitted into a fresh reservation;
    the queue then gives worker 0 the remaining slot of that same reservation."""
    holder = busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job = kube.apply(mpijob("halfway"))
        first, _ = admit_and_create(admitter, kube, worker_pod(job, 0))
        assert gated(first)
        kube.remove(holder)
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        rest = [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in (1, 2, 3)]
        assert not any(gated(p) for p in rest)
        result = _queue(view, kube).run_once()
        key = GangKey("default", "MPIJob", "halfway", job["metadata"]["uid"])
        assert result.placed == [str(key)]
        (res,) = view.reservations.list()
    pods = pods_of(kube, "halfway")
    assert not any(gated(p) for p in pods)
    assert sorted(g for p in pods for g in gpu_group(p)) == [0, 1, 2, 3]
    assert {(s.node, s.gpus) for s in res.assignments.values()} == {
        (pinned_node(p), gpu_group(p)) for p in pods}


def test_a_waiting_pytorchjob_gets_the_pod_network_and_starts_co_located(kube):
    """A PyTorchJob of 2 x 2 GPUs (operator-made: port 23456 on every replica) waits gated:
    ports derived from GPUs cannot be written into pods created before the GPUs are chosen,
    so its pods take the pod network at admission (NCCL_HOSTID from spec.nodeName). The
    queue later packs both on one node with the plan they carry, and no two pods of that
    node hold one host port after API defaulting."""
    from apiserver_rules import assert_node_ports_free, host_ports, stored

    from gputopo.operators import expand, with_identity

    holder = busy_cluster(kube)
    job = kube.apply(with_identity({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"},
        "spec": {"pytorchReplicaSpecs": {r: {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "pt",
                            "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}
            for r in ("Master", "Worker")}}}))
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        admitted = [admit_and_create(admitter, kube, p)[0] for p in expand(job)]
        for pod in admitted:
            assert gated(pod)
            assert record(pod)["network"]["plan"] == "pod"
            assert "hostNetwork" not in stored(pod)["spec"] and not host_ports(pod)
        kube.remove(holder)
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        assert _queue(view, kube).run_once().placed
    pods = [p for p in kube.objects("v1", "Pod") if p["metadata"]["name"].startswith("pt-")]
    assert len(pods) == 2 and not any(gated(p) for p in pods)
    assert len({pinned_node(p) for p in pods}) == 1
    assert {record(p)["network"]["plan"] for p in pods} == {"pod"}
    for pod in pods:
        (c,) = pod["spec"]["containers"]
        assert {"name": "NCCL_HOSTID", "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": "spec.nodeName"}}} in c["env"]
    assert_node_ports_free({pinned_node(pods[0]): pods})


def test_the_queue_rates_networks_with_the_admitting_policy_s_transport_share(kube, tmp_path):
    """A policy with ``placement.transportShare`` gates a gang: its pods' records carry the
    shares, and the queue (which has no policy at hand) places the gang with them: the
    2 + 2 placement over the demo's 25 Gbit/s TCP network is predicted at 25 x 0.5 / 8,
    not at the default 25 x 0.25 / 8."""
    policies = _policy_dir(tmp_path, transportShare={"tcp": 0.5}, floorShare=0)
    busy_cluster(kube)  # free: A:6,7 and B:6,7 — feasible, but not good
    with live_admitter(kube, policies=policies, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        _, admitted = waiting_gang(kube, admitter)
        assert all(record(p)["gang"]["transportShare"] == {"tcp": 0.5} for p in admitted)
        assert waiting_gangs(admitted)[0].transport_share == (("tcp", 0.5),)
        queue = _queue(view, kube, clock=lambda: time.time() + 3601)  # maxWaitSeconds 3600
        result = queue.run_once()
    assert len(result.fallen_back) == 1
    pods = pods_of(kube, "waiter")
    assert {pinned_node(p) for p in pods} == {NODE_A, NODE_B}
    for pod in pods:
        assert record(pod)["busBandwidthGBps"] == pytest.approx(25 * 0.5 / 8, abs=1e-3)
