"""The device plugin against a fake kubelet speaking the real gRPC API over UNIX sockets, with
the pods in the API test double and the cluster view counting GPUs afterwards.

The gang is the seeds' 4-worker MPIJob (Arena's tensorflow-topo-4-vgg16), mutated by
``gputopo mutate`` on the demo cluster: placed on GPUs 0-3 of the DGX-1
cn-shanghai.192.168.16.172.
"""

from __future__ import annotations

import json

import pytest
from plugin_kit import (
    NODE,
    RESOURCE,
    bind,
    gpu_pod,
    group_of,
    pod_meta,
    setup_node,
    start_plugin,
    used_by_view,
)

from gputopo import names
from gputopo.deviceplugin.choice import best_set
from gputopo.deviceplugin.devices import HealthEvent


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 1, 0, 2), (2, 3, 1, 0)])
@pytest.mark.parametrize("stray_first", [False, True])
def test_seed_gang_gets_its_placement_and_a_stray_pod_the_best_pair(
        kube, core, kubelet, socket_dir, dgx1, seed_workers, order, stray_first):
    """Done-when: the four Allocate calls (bound in any order) hand out exactly GPUs 0-3 as
    the placement says; a pod nobody placed gets an NVLink-best set; the cluster view then
    counts exactly those GPUs in use."""
    setup_node(kube)
    bound = [seed_workers[i] for i in order]
    stray = gpu_pod("stray", 2, namespace="team-b")
    sequence = ([stray, *bound]) if stray_first else ([*bound, stray])
    for k, pod in enumerate(sequence):
        kube.apply(bind(pod, NODE, at=f"2026-01-01T00:00:{10 + k:02d}Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        assert kubelet.registrations[0].resource_name == RESOURCE
        assert sorted(kubelet.devices, key=int) == [str(i) for i in range(8)]
        got = {}
        for pod in sequence:  # the kubelet admits in binding order, one pod at a time
            size = 2 if pod is stray else 1
            got[pod["metadata"]["name"]] = kubelet.admit(pod["metadata"]["name"], size)
        for pod in bound:
            a = got[pod["metadata"]["name"]]
            assert a.preferred == a.given == [group_of(pod)]
            assert a.env == {"NVIDIA_VISIBLE_DEVICES": "0,1,2,3",
                             "CUDA_VISIBLE_DEVICES": group_of(pod)}
            ann = pod_meta(core, pod)["annotations"]
            assert ann[names.ALLOCATED_GPUS_ANNOTATION] == group_of(pod)
            assert ann[names.GPU_GROUP_ANNOTATION] == group_of(pod)
        pair = [int(i) for i in got["stray"].given]
        assert pair == list(best_set(dgx1, range(4, 8), 2))
        assert dgx1.link(*pair).startswith("NV")
        assert got["stray"].env == {"NVIDIA_VISIBLE_DEVICES": ",".join(map(str, pair)),
                                    "CUDA_VISIBLE_DEVICES": "0,1"}
        stray_ann = pod_meta(core, stray)["annotations"]
        assert stray_ann[names.GPU_GROUP_ANNOTATION] == ",".join(map(str, pair))
        assert sorted(kubelet.in_use, key=int) == ["0", "1", "2", "3", *map(str, pair)]
        assert used_by_view(kube) == {0, 1, 2, 3, *pair}
        assert not kube.objects("v1", "Event")  # nothing to warn about
    finally:
        running.halt()


def test_kubelet_restart_and_plugin_restart_re_register_without_changes(
        kube, core, kubelet, socket_dir, dgx1, seed_workers):
    """Done-when: each restart re-registers within a few seconds; device IDs and the
    allocations made before stay as they were, and allocation goes on correctly."""
    import time

    setup_node(kube)
    for k, pod in enumerate(seed_workers):
        kube.apply(bind(pod, NODE, at=f"2026-01-01T00:00:{10 + k:02d}Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        ids = dict(kubelet.devices)
        kubelet.admit("w0", 1)
        before = [pod_meta(core, p)["annotations"] for p in seed_workers]

        t0 = time.monotonic()
        kubelet.restart()  # its sockets are deleted, a new kubelet.sock appears
        assert kubelet.wait_registered(2, timeout=5)
        assert time.monotonic() - t0 < 5
        assert kubelet.devices == ids
        assert [pod_meta(core, p)["annotations"] for p in seed_workers] == before
        assert kubelet.admit("w1", 1).given == [group_of(seed_workers[1])]

        running.halt()  # the plugin process ends (its socket goes) ...
        assert not (socket_dir / "gputopo-gpu.sock").exists()
        t0 = time.monotonic()
        running = start_plugin(core, dgx1, socket_dir, NODE)  # ... and a new one starts
        assert kubelet.wait_registered(3, timeout=5)
        assert time.monotonic() - t0 < 5
        assert kubelet.devices == ids
        for k in (2, 3):
            assert kubelet.admit(f"w{k}", 1).given == [group_of(seed_workers[k])]
        assert [pod_meta(core, p)["annotations"][names.ALLOCATED_GPUS_ANNOTATION]
                for p in seed_workers] == ["0", "1", "2", "3"]
        assert used_by_view(kube) == {0, 1, 2, 3}
    finally:
        running.halt()


@pytest.mark.parametrize("spec_env", ["webhook", "literal", "none"])
def test_kubelet_ignoring_the_preference_is_written_back(
        kube, core, kubelet, socket_dir, dgx1, seed_workers, spec_env):
    """The kubelet gives worker-0 GPU 5 instead of 0: the container's env says 5, the pod's
    annotations are corrected, a Warning event says so, and the view counts 5, not 0. The
    next peer is offered the GPU worker-0 left (0), not another peer's.

    ``spec_env``: the webhook's env (downward-API references to the annotations, which the
    plugin corrects, so the container follows), a literal value in the spec (it overrides
    the plugin's: a GPUEnvOverridden event says so), or none."""
    from prometheus_client import REGISTRY

    def corrected_count() -> float:
        return REGISTRY.get_sample_value("gputopo_device_plugin_allocations_total",
                                         {"outcome": "corrected"}) or 0.0

    setup_node(kube)
    for k, pod in enumerate(seed_workers):
        pod = bind(pod, NODE, at=f"2026-01-01T00:00:{10 + k:02d}Z")
        for c in pod["spec"]["containers"]:
            if spec_env == "none":  # the webhook left the env to the plugin
                c.pop("env", None)
            elif spec_env == "literal":  # a user's own value: the spec wins in the kubelet
                c["env"] = [e if e["name"] != "NVIDIA_VISIBLE_DEVICES" else
                            {"name": e["name"], "value": "0,1,2,3"} for e in c.get("env", [])]
        kube.apply(pod)
    corrected = corrected_count()
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        a = kubelet.admit("w0", 1, ignore_preference=["5"])
        assert a.preferred == ["0"] and a.given == ["5"]
        assert a.env == {"NVIDIA_VISIBLE_DEVICES": "1,2,3,5", "CUDA_VISIBLE_DEVICES": "3"}
        ann = pod_meta(core, seed_workers[0])["annotations"]
        assert ann[names.GPU_GROUP_ANNOTATION] == "5"
        assert ann[names.GPU_VISIBLE_ANNOTATION] == "1,2,3,5"
        assert ann[names.ALLOCATED_GPUS_ANNOTATION] == "5"
        record = json.loads(ann[names.PLACEMENT_ANNOTATION])
        assert record["gpus"] == [5] and record["placementGpus"] == [0]
        assert corrected_count() == corrected + 1
        reasons = sorted(e["reason"] for e in kube.objects("v1", "Event"))
        assert reasons == (["GPUEnvOverridden", "GPUPlacementNotHonoured"]
                           if spec_env == "literal" else ["GPUPlacementNotHonoured"])
        # worker-1 now: its own GPU 1 is still free and is what it gets
        b = kubelet.admit("w1", 1)
        assert b.given == ["1"]
        assert b.env["NVIDIA_VISIBLE_DEVICES"] == "1,2,3,5"
        # workers 2 and 3 are bound and still hold their placement's GPUs; 0 is free again
        assert used_by_view(kube) == {1, 2, 3, 5}
    finally:
        running.halt()


def test_a_peer_given_another_peers_gpu_leaves_its_own_to_that_peer(
        kube, core, kubelet, socket_dir, dgx1, seed_workers):
    setup_node(kube)
    for k, pod in enumerate(seed_workers):
        kube.apply(bind(pod, NODE, at=f"2026-01-01T00:00:{10 + k:02d}Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        assert kubelet.admit("w0", 1, ignore_preference=["1"]).given == ["1"]
        b = kubelet.admit("w1", 1)
        assert b.preferred == ["0"]  # worker-0's placement GPU, not worker-2's or -3's
        assert [kubelet.admit(f"w{k}", 1).given for k in (2, 3)] == [["2"], ["3"]]
        assert used_by_view(kube) == {0, 1, 2, 3}
    finally:
        running.halt()


def test_two_gpu_pods_of_one_gang_in_either_order(kube, core, kubelet, socket_dir, dgx1):
    """A 2 x 2-GPU gang placed on 4,5 and 6,7; the second replica is bound first."""
    setup_node(kube)
    pods = []
    for r, gpus in enumerate(("4,5", "6,7")):
        pod = gpu_pod(f"g-{r}", 2, namespace="team-b")
        pod["metadata"]["labels"] = {names.GANG_LABEL: "g"}
        pod["metadata"]["annotations"] = {
            names.GPU_GROUP_ANNOTATION: gpus, names.GPU_VISIBLE_ANNOTATION: "4,5,6,7",
            names.PLACEMENT_ANNOTATION: json.dumps({"placed": True, "node": NODE,
                                                    "gpus": [int(g) for g in gpus.split(",")],
                                                    "gpuVisible": [4, 5, 6, 7]})}
        pods.append(pod)
    kube.apply(bind(pods[1], NODE, at="2026-01-01T00:00:01Z"))
    kube.apply(bind(pods[0], NODE, at="2026-01-01T00:00:02Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        first, second = kubelet.admit("g-1", 2), kubelet.admit("g-0", 2)
        assert first.given == ["6", "7"] and second.given == ["4", "5"]
        assert first.env == {"NVIDIA_VISIBLE_DEVICES": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "2,3"}
        assert second.env == {"NVIDIA_VISIBLE_DEVICES": "4,5,6,7",
                              "CUDA_VISIBLE_DEVICES": "0,1"}
        assert used_by_view(kube) == {4, 5, 6, 7}
    finally:
        running.halt()


def test_a_gpu_turning_unhealthy_is_streamed_and_not_offered(
        kube, core, kubelet, socket_dir, dgx1):
    setup_node(kube)
    kube.apply(bind(gpu_pod("p", 1, namespace="team-b"), NODE, at="2026-01-01T00:00:01Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        preferred = best_set(dgx1, range(8), 1)
        running.health.push(HealthEvent(preferred[0], False, "XID 79: GPU fell off the bus"))
        assert kubelet.wait_for(lambda: kubelet.devices.get(str(preferred[0])) == "Unhealthy",
                                timeout=5)
        assert sorted(kubelet.devices, key=int) == [str(i) for i in range(8)]  # still listed
        a = kubelet.admit("p", 1)
        assert a.given != [str(preferred[0])]
        running.health.push(HealthEvent(None, False, "GPU is lost"))
        assert kubelet.wait_for(lambda: set(kubelet.devices.values()) == {"Unhealthy"}, 5)
    finally:
        running.halt()


def test_an_allocation_no_pod_waits_for_still_gets_a_consistent_env(
        kube, core, kubelet, socket_dir, dgx1):
    setup_node(kube)
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        a = kubelet.admit("ghost", 2, ignore_preference=["2", "6"])
        assert a.env == {"NVIDIA_VISIBLE_DEVICES": "2,6", "CUDA_VISIBLE_DEVICES": "0,1"}
    finally:
        running.halt()


def test_a_pod_with_two_gpu_containers_is_allocated_container_by_container(
        kube, core, kubelet, socket_dir, dgx1):
    setup_node(kube)
    pod = gpu_pod("two", 1, namespace="team-b", containers=2)
    kube.apply(bind(pod, NODE, at="2026-01-01T00:00:01Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        a, b = kubelet.admit("two/c0", 1), kubelet.admit("two/c1", 1)
        both = sorted({*a.given, *b.given}, key=int)
        ann = pod_meta(core, pod)["annotations"]
        assert ann[names.ALLOCATED_GPUS_ANNOTATION] == ",".join(both)
        assert ann[names.GPU_GROUP_ANNOTATION] == ",".join(both)
        assert used_by_view(kube) == {int(i) for i in both}
    finally:
        running.halt()


def test_a_running_pod_nobody_marked_does_not_take_the_admitted_pods_place(
        kube, core, kubelet, socket_dir, dgx1, seed_workers):
    """A pod started before the plugin was installed (running, no mark) is older than the
    pod being admitted; it must not be mistaken for it."""
    setup_node(kube)
    old = bind(gpu_pod("old", 1, namespace="team-b"), NODE, at="2026-01-01T00:00:00Z")
    old["metadata"]["annotations"] = {names.GPU_GROUP_ANNOTATION: "7"}
    old["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "c0", "ready": True, "restartCount": 0, "image": "cuda", "imageID": "",
         "state": {"running": {}}}]}
    kube.apply(old)
    kube.apply(bind(seed_workers[2], NODE, at="2026-01-01T00:00:05Z"))
    running = start_plugin(core, dgx1, socket_dir, NODE)
    try:
        assert kubelet.wait_registered(1)
        kubelet.in_use["7"] = "old"  # the kubelet's checkpoint has it
        assert kubelet.admit("w2", 1).given == ["2"]
        assert names.ALLOCATED_GPUS_ANNOTATION not in pod_meta(core, old)["annotations"]
        assert used_by_view(kube) == {2, 7}
    finally:
        running.halt()
