"""Kubernetes Events for each outcome, on the pods and on the job, read back as ``kubectl
describe`` reads them: core/v1 Events listed with a field selector on the involved object's
name, namespace, kind and uid, through the official client against the API TEST DOUBLE
(which checks a create as the API server checks a core/v1 Event).

The four outcomes: placed (node, GPUs, predicted bandwidth; at admission and from the
queue), waiting (why, position in the queue), released (the gate lifted), left unplaced
(why). Written by the recorder's own thread after the admission answered; rate-limited;
a failed write only logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from k8s_double import api_client
from kubernetes import client
from placement_jobs import mpijob, worker_pod
from queue_kit import (
    NODE_A,
    admit_and_create,
    busy_cluster,
    busy_pod,
    pods_of,
    wait_for,
    waiting_gang,
)
from test_placement_live import live_admitter
from test_queue_live import _policy_dir

from webhook import events
from webhook.queue.placer import PlacementQueue


def described(kube: Any, obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the Events ``kubectl describe`` shows for ``obj``."""
    meta = obj["metadata"]
    api = api_client(kube.url)
    try:
        found = client.CoreV1Api(api).list_namespaced_event(
            meta["namespace"], field_selector=",".join([
                f"involvedObject.name={meta['name']}",
                f"involvedObject.namespace={meta['namespace']}",
                f"involvedObject.kind={obj['kind']}",
                f"involvedObject.uid={meta['uid']}"]))
    finally:
        api.close()
    return [(e.type, e.reason, e.message) for e in found.items]


def _recorder(kube: Any, **kw: Any) -> events.EventRecorder:
    return events.EventRecorder(api_client(kube.url), instance="test", **kw)


def test_waiting_then_placed_and_released_by_the_queue(kube):
    busy = busy_cluster(kube)  # free: two GPUs per node — far below the gang's best
    recorder = _recorder(kube).start()
    try:
        with live_admitter(kube, can_wait=True, recorder=recorder) as (admitter, view):
            assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
            job, _ = waiting_gang(kube, admitter)
            other, _ = waiting_gang(kube, admitter, "second")
            queue = PlacementQueue(view.api_client, view, view.reservations,
                                   identity="test", recorder=recorder)
            queue.run_once()
            assert recorder.flush()
            pods = pods_of(kube, "waiter")
            for obj in (*pods, job):
                ((kind, reason, message),) = described(kube, obj)
                assert (kind, reason) == ("Normal", "GangWaiting")
                assert message.startswith("waits for a placement, position 1 of 2 in the "
                                          "queue (4 x 1 GPU, waited ")
                assert "a good placement gives" in message
            assert "position 2 of 2" in described(kube, other)[0][2]
            kube.remove(busy)  # the holder of A:0-3 finishes
            assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
            assert len(queue.run_once().placed) == 1
            assert recorder.flush()
        pods = pods_of(kube, "waiter")
        for pod in pods:
            got = {reason: message for _, reason, message in described(kube, pod)}
            assert set(got) == {"GangWaiting", "GangPlaced", "GangReleased"}
            gpus = pod["metadata"]["annotations"]["topology.kubernetes.io/gpu-group"]
            assert got["GangPlaced"] == (
                f"placed on node {NODE_A}, GPUs {gpus} (the job's GPUs there: 0,1,2,3); "
                f"predicted all-reduce bus bandwidth "
                f"{_record(pod)['busBandwidthGBps']:.1f} GB/s")
            assert got["GangReleased"].startswith("scheduling gate gputopo.io/placement "
                                                  "lifted after ")
        on_job = {reason: message for _, reason, message in described(kube, job)}
        assert on_job["GangPlaced"].startswith(
            f"gang of 4 pod(s) placed on 1 node(s) ({NODE_A}: GPUs 0,1,2,3); ")
        assert "GangReleased" in on_job
    finally:
        recorder.stop()


def _record(pod: dict[str, Any]) -> dict[str, Any]:
    from placement_checks import record

    return record(pod)


def test_placed_at_admission_written_after_the_answer_with_the_pod_s_uid(kube):
    """The pod does not exist while it is admitted (no uid, which describe matches on): the
    recorder writes its Event once the pod is stored. Not started during admission, it
    holds the Events: nothing of the admission waits for it."""
    holder = busy_cluster(kube)
    kube.remove(holder)
    recorder = _recorder(kube)
    with live_admitter(kube, can_wait=True, recorder=recorder) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        job = kube.apply(mpijob("direct"))
        pods = [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in range(4)]
    assert all(described(kube, p) == [] for p in (*pods, job))
    recorder.start()
    try:
        assert recorder.flush()
    finally:
        recorder.stop()
    for pod in pods:
        ((kind, reason, message),) = described(kube, pod)
        assert (kind, reason) == ("Normal", "GangPlaced") and NODE_A in message
    ((_, reason, message),) = described(kube, job)
    assert reason == "GangPlaced" and "gang of 4 pod(s) placed on 1 node(s)" in message


def test_left_unplaced_says_why_as_a_warning(kube, tmp_path):
    busy_cluster(kube)
    kube.apply(busy_pod("rest-a", NODE_A, "6,7"))
    recorder = _recorder(kube).start()
    policies = _policy_dir(tmp_path, whenFull="admit")
    try:
        with live_admitter(kube, policies=policies, can_wait=True,
                           recorder=recorder) as (admitter, view):
            assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 14)
            job = kube.apply(mpijob("big", workers=2, gpus=4))
            pods = [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in (0, 1)]
        assert recorder.flush()
    finally:
        recorder.stop()
    for obj in (*pods, job):
        got = described(kube, obj)
        assert [(k, r) for k, r, _ in got] == [("Warning", "GangUnplaced")], got
        assert got[0][2] == ("admitted without a placement: no node has 4 free GPUs for one "
                             "replica right now (most free: 2 on cn-shanghai.192.168.16.173)")


def test_denied_after_max_wait_is_an_unplaced_warning_on_every_pod(kube, tmp_path):
    busy_cluster(kube)
    recorder = _recorder(kube).start()
    policies = _policy_dir(tmp_path, afterMaxWait="deny", maxWaitSeconds=60)
    try:
        with live_admitter(kube, policies=policies, can_wait=True,
                           recorder=recorder) as (admitter, view):
            assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
            job, _ = waiting_gang(kube, admitter)
            PlacementQueue(view.api_client, view, view.reservations, identity="test",
                           recorder=recorder, clock=lambda: time.time() + 61).run_once()
        assert recorder.flush()
    finally:
        recorder.stop()
    for obj in (*pods_of(kube, "waiter"), job):
        got = described(kube, obj)
        assert [(k, r) for k, r, _ in got] == [("Warning", "GangUnplaced")], got
        assert "afterMaxWait: deny" in got[0][2]


def test_rate_limited_per_object_and_reason():
    """At most one Event per object and reason per interval (a waiting gang is seen at
    every queue pass); another reason, or the interval passed, writes again."""
    from k8s_double import running_double

    now = [1000.0]
    with running_double() as kube:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
        pod = kube.apply({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "p", "namespace": "ns"},
                          "spec": {"containers": [{"name": "c", "image": "x"}]}})
        target = events.pod_target(pod)
        assert target is not None
        recorder = _recorder(kube, min_interval=60.0, clock=lambda: now[0]).start()
        try:
            for _ in range(5):
                recorder.emit(target, events.WAITING, "still waiting")
            recorder.emit(target, events.PLACED, "placed")
            assert recorder.flush()
            now[0] += 61
            recorder.emit(target, events.WAITING, "waiting again")
            assert recorder.flush()
        finally:
            recorder.stop()
        assert sorted(m for _, _, m in described(kube, pod)) == [
            "placed", "still waiting", "waiting again"]
        assert recorder.written == 3 and recorder.dropped == 4


def test_a_failed_write_is_logged_and_the_rest_go_on(kube, caplog):
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    pod = kube.apply({"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": "p", "namespace": "ns"},
                      "spec": {"containers": [{"name": "c", "image": "x"}]}})
    target = events.pod_target(pod)
    assert target is not None
    recorder = _recorder(kube).start()
    try:
        kube.forbidden.add("events")
        with caplog.at_level(logging.WARNING, logger="webhook.events"):
            recorder.emit(target, events.PLACED, "placed")
            assert recorder.flush()
        assert any("GangPlaced on Pod ns/p not written" in r.getMessage()
                   for r in caplog.records)
        kube.forbidden.discard("events")
        recorder.emit(target, events.RELEASED, "released")
        assert recorder.flush()
    finally:
        recorder.stop()
    assert [r for _, r, _ in described(kube, pod)] == ["GangReleased"]


def test_the_double_refuses_an_event_outside_its_object_s_namespace(kube):
    from kubernetes.client.rest import ApiException

    api = api_client(kube.url)
    body = {"metadata": {"generateName": "p.", "namespace": "a"},
            "involvedObject": {"kind": "Pod", "namespace": "b", "name": "p"},
            "reason": "GangPlaced", "message": "m", "type": "Normal"}
    try:
        client.CoreV1Api(api).create_namespaced_event("a", body)
        raise AssertionError("created")
    except ApiException as exc:
        assert exc.status == 422 and "does not match event.namespace" in exc.body
    finally:
        api.close()
