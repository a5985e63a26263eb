"""The whole chain on a live (test double) API: ClusterView → placement step → reservations
in ConfigMaps; deleting a job frees its GPUs for the next gang.

This is ``gputopo serve``'s wiring (``placement_step_for(view)``) without the HTTPS layer:
the view watches Nodes, Namespaces and MPIJobs on the loopback Kubernetes API TEST DOUBLE
through the official client, and the step keeps its reservations there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from placement_checks import admit, gpu_group, pinned_node, record
from placement_jobs import mpijob, worker_pod

from gputopo.cluster.demo import demo_cluster_path
from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.view import ClusterView
from gputopo.yamlio import load_documents
from webhook.assembly import build_admitter
from webhook.placement.step import placement_step_for


def _wait(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@contextmanager
def live_admitter(kube, *, policies=None, can_wait: bool = False, recorder=None
                  ) -> Iterator[tuple[Any, ClusterView]]:
    """``gputopo serve``'s wiring on the double (demo cluster applied first): the admitter
    and its view, synced with both demo nodes; stopped on exit. ``can_wait``: as when the
    placement queue runs (gangs that do not fit are gated); ``recorder``: the Events'."""
    from k8s_double import api_client

    api = api_client(kube.url)
    view = ClusterView(api, reservations=KubernetesReservationStore(api)).start()
    admitter = build_admitter(policies, view,
                              placement=placement_step_for(view, can_wait=can_wait,
                                                           recorder=recorder),
                              reload_interval_s=0)
    try:
        assert view.wait_synced(10)
        assert _wait(lambda: len(view.node_states()) == 2)
        yield admitter, view
    finally:
        admitter.close()
        view.stop()
        api.close()


def demo_docs(kube) -> list[dict[str, Any]]:
    docs = load_documents(demo_cluster_path())
    for obj in docs:
        kube.apply(obj)
    return docs


def test_live_view_places_gangs_and_a_deleted_job_frees_its_gpus(kube):
    demo_docs(kube)
    # the double assigns the uids, as the API server does
    jobs = [kube.apply(mpijob(f"live-{k}")) for k in range(1, 6)]
    with live_admitter(kube) as (admitter, view):
        slots = {}
        for job in jobs:
            name = job["metadata"]["name"]
            pods = [admit(admitter, worker_pod(job, i), dry_run=False) for i in range(4)]
            slots[name] = pods
        for name in ("live-1", "live-2", "live-3", "live-4"):
            assert all(record(p)["placed"] for p in slots[name]), name
        assert not any(record(p)["placed"] for p in slots["live-5"])
        freed = {(pinned_node(p), gpu_group(p)) for p in slots["live-1"]}

        kube.remove(jobs[0])  # the job finishes and is deleted: the view releases its GPUs
        assert _wait(lambda: all(r.key.name != "live-1"
                                 for r in view.reservations.list())), "not released"
        again = [admit(admitter, worker_pod(jobs[4], i), dry_run=False) for i in range(4)]
        assert all(record(p)["placed"] for p in again)
        assert {(pinned_node(p), gpu_group(p)) for p in again} == freed


def test_a_node_tainted_or_cordoned_after_sync_gets_no_new_gang(kube):
    """The node facts the fit check reads travel with the cached NodeStates: a taint or a
    cordon arriving by watch must reach the next gang, not the facts of the first list."""
    docs = demo_docs(kube)
    nodes = {o["metadata"]["name"]: o for o in docs if o["kind"] == "Node"}
    jobs = [kube.apply(mpijob(f"taint-{k}", workers=1)) for k in range(3)]
    with live_admitter(kube) as (admitter, view):
        first = admit(admitter, worker_pod(jobs[0], 0), dry_run=False)
        busy = pinned_node(first)
        # taint the node the first gang chose (an opened node would be preferred)
        kube.apply({**nodes[busy], "spec": {"taints": [{"key": "maintenance",
                                                        "effect": "NoSchedule"}]}})
        assert _wait(lambda: next(n for n in view.node_states() if n.name == busy)
                     .facts.blocking_taints)
        second = admit(admitter, worker_pod(jobs[1], 0), dry_run=False)
        other = next(n for n in sorted(nodes) if n != busy)
        assert pinned_node(second) == other
        # cordon the other one too: nowhere left for an untolerating pod
        kube.apply({**nodes[other], "spec": {"unschedulable": True}})
        assert _wait(lambda: next(n for n in view.node_states() if n.name == other)
                     .facts.blocking_taints)
        third = admit(admitter, worker_pod(jobs[2], 0), dry_run=False)
        assert not record(third)["placed"]


def _admit_with_warnings(admitter, pod):
    import base64
    import json

    import jsonpatch
    from placement_checks import review_body

    status, answer = admitter.handle_body(review_body(pod, "uid-move"))
    assert status == 200
    response = answer["response"]
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(pod, patch), response.get("warnings", [])


def test_a_node_deleted_after_placement_moves_its_slots_to_a_node_that_exists(kube):
    """The gang was placed on one node; the node is deleted (scaled down) before all pods
    came, and a placed pod is recreated: no pod may stay pinned to the missing node, no
    GPU may be handed out twice."""
    docs = demo_docs(kube)
    job = kube.apply(mpijob("move", workers=4))
    with live_admitter(kube) as (admitter, view):
        first = [admit(admitter, worker_pod(job, i), dry_run=False) for i in range(2)]
        home = pinned_node(first[0])
        assert pinned_node(first[1]) == home
        kube.remove(next(o for o in docs if o["kind"] == "Node"
                         and o["metadata"]["name"] == home))
        assert _wait(lambda: len(view.node_states()) == 1)
        later, warnings = _admit_with_warnings(admitter, worker_pod(job, 2))
        again, again_warnings = _admit_with_warnings(admitter, worker_pod(job, 0))
        for pod, said in ((later, warnings), (again, again_warnings)):
            assert record(pod)["placed"] and pinned_node(pod) != home
            assert any("slot moved" in w and home in w for w in said), said
        assert not set(gpu_group(later)) & set(gpu_group(again))
        # the replica keeps its moved slot, and the gang's record says where it is
        same, _ = _admit_with_warnings(admitter, worker_pod(job, 0))
        assert (pinned_node(same), gpu_group(same)) == (pinned_node(again), gpu_group(again))
        res = next(r for r in view.reservations.list() if r.key.name == "move")
        assert sorted(s.node for s in res.slots).count(home) == 2  # slots 1 and 3 wait
        assert set(view.reservations.held_gpus().get(pinned_node(again), set())) >= (
            set(gpu_group(later)) | set(gpu_group(again)))


def test_live_network_plan_survives_a_restart_and_avoids_ports_held_on_the_node(kube):
    """A TFJob admitted worker-3 first, half by one webhook and half by a restarted one:
    every pod agrees on TF_CONFIG (the plan lives in the reservation ConfigMap). A pod
    nobody placed already holds host port 23456 on one node (seen by the view's watch):
    the PyTorchJob master placed there gets another port."""
    import json

    from apiserver_rules import host_ports

    from gputopo.operators import expand, with_identity

    docs = demo_docs(kube)
    nodes = sorted(o["metadata"]["name"] for o in docs if o["kind"] == "Node")
    squatter = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "exporter", "namespace": "default"},
                "spec": {"nodeName": nodes[1], "hostNetwork": True, "containers": [
                    {"name": "x", "image": "x", "ports": [{"containerPort": 23456}]}]},
                "status": {"phase": "Running"}}
    kube.apply(squatter)
    tf = kube.apply(with_identity({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4, "template": {"spec": {
            "containers": [{"name": "tensorflow", "image": "tf",
                            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}}))
    pt = kube.apply(with_identity({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"},
        "spec": {"pytorchReplicaSpecs": {r: {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "pt",
                            "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}
            for r in ("Master", "Worker")}}}))
    tf_pods = [p for p in expand(tf) if p["kind"] == "Pod"][::-1]
    with live_admitter(kube) as (admitter, _):
        done = [admit(admitter, p, dry_run=False) for p in tf_pods[:2]]
    with live_admitter(kube) as (admitter, view):
        assert _wait(lambda: any(n.host_ports for n in view.node_states()))
        done += [admit(admitter, p, dry_run=False) for p in tf_pods[2:]]
        master, worker = (admit(admitter, p, dry_run=False) for p in expand(pt))
    configs = [json.loads(next(e["value"] for e in p["spec"]["containers"][0]["env"]
                               if e["name"] == "TF_CONFIG")) for p in done]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    for pod, config in zip(done, configs, strict=True):
        task = config["task"]
        port = int(config["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
        assert host_ports(pod) == {("TCP", port)}
    assert pinned_node(master) == pinned_node(worker)
    (_, port), = host_ports(master)
    assert pinned_node(master) == nodes[1], "the TFJob took the other node's quad first"
    assert port == 23456 + 64, "the exporter holds 23456 there: the next step of GPU 0"
    assert {e["value"] for e in master["spec"]["containers"][0]["env"]
            if e["name"] == "MASTER_PORT"} == {str(port)}
