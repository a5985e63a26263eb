"""Annotations follow the kubelet's own record (its PodResources API) when the inferred pod
of an Allocate was the wrong one, or when a pod was never marked."""

from __future__ import annotations

import json

from plugin_kit import NODE, bind, gpu_pod, pod_meta, setup_node, start_plugin, used_by_view

from gputopo import names


def _events(kube) -> list[str]:
    return sorted(e["reason"] for e in kube.objects("v1", "Event"))


def _wait(predicate, timeout: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_pods_admitted_in_the_other_order_are_corrected_from_the_kubelets_record(
        kube, core, kubelet, socket_dir, dgx1):
    """Two 1-GPU pods bound in one order, admitted by the kubelet in the other: the plugin
    marks each with the other's GPU at first; the reconciliation swaps them back."""
    setup_node(kube)
    first = gpu_pod("first", 1, namespace="team-b")
    second = gpu_pod("second", 1, namespace="team-b")
    kube.apply(bind(first, NODE, at="2026-01-01T00:00:01Z"))
    kube.apply(bind(second, NODE, at="2026-01-01T00:00:02Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE, reconcile_every=0.2)
    try:
        assert kubelet.wait_registered(1)
        a = kubelet.admit("team-b/second/c0", 1)  # the kubelet admits "second" first
        b = kubelet.admit("team-b/first/c0", 1)
        assert a.given != b.given

        def settled() -> bool:
            return (pod_meta(core, second)["annotations"].get(names.GPU_GROUP_ANNOTATION)
                    == a.given[0]
                    and pod_meta(core, first)["annotations"].get(names.GPU_GROUP_ANNOTATION)
                    == b.given[0])

        assert _wait(settled)
        assert pod_meta(core, second)["annotations"][names.ALLOCATED_GPUS_ANNOTATION] == a.given[0]
        assert _events(kube) == ["GPUAllocationReconciled", "GPUAllocationReconciled"]
        assert used_by_view(kube) == {int(a.given[0]), int(b.given[0])}
    finally:
        running.halt()


def test_a_pod_started_before_the_plugin_is_marked_from_the_kubelets_record(
        kube, core, kubelet, socket_dir, dgx1, seed_workers):
    setup_node(kube)
    old = bind(gpu_pod("old", 1, namespace="team-b"), NODE, at="2026-01-01T00:00:00Z")
    old["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "c0", "ready": True, "restartCount": 0, "image": "cuda", "imageID": "",
         "state": {"running": {}}}]}
    kube.apply(old)
    placed = bind(seed_workers[1], NODE, at="2026-01-01T00:00:05Z")
    kube.apply(placed)
    kubelet.in_use["6"] = "team-b/old/c0"  # admitted long ago, under another plugin
    running = start_plugin(core, dgx1, socket_dir, NODE, reconcile_every=0.2)
    try:
        assert kubelet.wait_registered(1)
        assert _wait(lambda: pod_meta(core, old).get("annotations", {}).get(
            names.ALLOCATED_GPUS_ANNOTATION) == "6")
        assert pod_meta(core, old)["annotations"][names.GPU_GROUP_ANNOTATION] == "6"
        # the placed pod admitted next is still identified and given its placement
        name = placed["metadata"]["name"]
        assert kubelet.admit(f"team-b/{name}/mpi", 1).given == ["1"]
        assert used_by_view(kube) == {1, 6}
        # nothing more to correct: its record matches the kubelet's
        record = json.loads(pod_meta(core, placed)["annotations"][names.PLACEMENT_ANNOTATION])
        assert record["gpus"] == [1] and "placementGpus" not in record
        assert _events(kube) == ["GPUAllocationReconciled"]
    finally:
        running.halt()


def test_with_the_api_server_away_the_container_starts_and_the_annotations_catch_up(
        kube, core, kubelet, socket_dir, dgx1, seed_workers):
    """No pod can be identified while the API answers 503: the kubelet still gets a
    preference (the solver's) and an env; once the API is back, the reconciliation writes
    what the kubelet gave."""
    from prometheus_client import REGISTRY

    def count(outcome: str) -> float:
        return REGISTRY.get_sample_value("gputopo_device_plugin_allocations_total",
                                         {"outcome": outcome}) or 0.0

    setup_node(kube)
    pod = bind(seed_workers[3], NODE, at="2026-01-01T00:00:01Z")
    kube.apply(pod)
    unidentified = count("unidentified")
    running = start_plugin(core, dgx1, socket_dir, NODE, reconcile_every=0.2)
    try:
        assert kubelet.wait_registered(1)
        kube.set_down("503")
        name = pod["metadata"]["name"]
        a = kubelet.admit(f"team-b/{name}/mpi", 1)
        assert a.preferred is not None and a.env["CUDA_VISIBLE_DEVICES"] == "0"
        assert count("unidentified") == unidentified + 1
        kube.set_down(None)
        assert _wait(lambda: pod_meta(core, pod)["annotations"].get(
            names.ALLOCATED_GPUS_ANNOTATION) == a.given[0])
        assert used_by_view(kube) == {int(a.given[0])}
    finally:
        kube.set_down(None)
        running.halt()
