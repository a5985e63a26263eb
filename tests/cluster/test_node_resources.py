"""A pod's request and a node's room, as the scheduler counts them.

The rules (k8s.io/component-helpers/resource/helpers.go ``PodRequests`` and
``AggregateContainerRequests``; pkg/scheduler/framework/plugins/noderesources/fit.go
``fitsRequest``): containers add up; a restartable init container ("sidecar") runs beside
them and is added too; every other init container runs alone with the sidecars started
before it, and the pod asks for the larger of the two; ``spec.overhead`` is added; a
limit with no request asks for the limit (API defaulting runs before the scheduler).
"""

from __future__ import annotations

from gputopo.cluster.node_resources import NodeResources, allocatable, pod_requests, show

GI = 2**30
MI = 2**20


def container(name: str, requests: dict | None = None, limits: dict | None = None,
              **extra: object) -> dict:
    res = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "x", "resources": res, **extra}


def test_containers_add_up_and_gpus_are_left_to_the_gpu_logic() -> None:
    spec = {"containers": [
        container("a", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}),
        container("b", {"cpu": "500m", "ephemeral-storage": "10Gi"}),
    ]}
    assert pod_requests(spec, skip={"nvidia.com/gpu"}) == {
        "cpu": 1500, "memory": GI, "ephemeral-storage": 10 * GI, "pods": 1}


def test_a_limit_without_a_request_asks_for_the_limit() -> None:
    spec = {"containers": [container("a", limits={"cpu": "2", "rdma/hca": "1"}),
                           container("b", {"cpu": "1"}, {"cpu": "4"})]}
    assert pod_requests(spec) == {"cpu": 3000, "rdma/hca": 1, "pods": 1}


def test_init_containers_sidecars_and_overhead() -> None:
    """Containers 3 CPUs; init i1 alone 5; sidecar s1 (1 CPU) joins the containers (4)
    and runs beside i2 (4.5 + 1 = 5.5): the pod asks for 5.5 CPUs, plus 250m overhead.
    Memory: containers 1Gi, i1 2Gi: 2Gi, plus 120Mi overhead."""
    spec = {
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"}),
                       container("b", {"cpu": "2"})],
        "initContainers": [
            container("i1", {"cpu": "5", "memory": "2Gi"}),
            container("s1", {"cpu": "1"}, restartPolicy="Always"),
            container("i2", {"cpu": "4500m"}),
        ],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    assert pod_requests(spec) == {"cpu": 5750, "memory": 2 * GI + 120 * MI, "pods": 1}
    # without the plain init containers, the sidecar is simply added
    spec["initContainers"] = spec["initContainers"][1:2]
    assert pod_requests(spec)["cpu"] == 4250


def test_bad_shapes_are_read_without_an_error() -> None:
    spec = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}},
                           "junk", {"resources": None}], "initContainers": 3}
    assert pod_requests(spec) == {"pods": 1}


def test_how_many_fit_and_what_rules_the_next_one_out() -> None:
    node = {"status": {"allocatable": {"cpu": "94", "memory": "503Gi", "pods": "110",
                                       "nvidia.com/gpu": "8"}}}
    alloc = allocatable(node, skip={"nvidia.com/gpu"})
    assert alloc == {"cpu": 94000, "memory": 503 * GI, "pods": 110}
    room = NodeResources(alloc, {"cpu": 10000, "pods": 3})
    assert room.fits({"cpu": 60000, "pods": 1}, 2) == (1, "cpu 130 of 94")
    assert room.fits({"cpu": 1000, "pods": 1}, 2) == (2, "")
    assert room.fits({"rdma/hca": 1, "pods": 1}, 2) == (0, "rdma/hca 1 of 0")
    full = NodeResources(alloc, {"pods": 110})
    assert full.fits({"pods": 1}, 4) == (0, "pods 111 of 110")
    assert allocatable({"status": {}}) is None


def test_amounts_read_as_people_write_them() -> None:
    assert show("cpu", 120000) == "120"
    assert show("cpu", 500) == "500m"
    assert show("memory", 1000 * GI) == "1000Gi"
    assert show("rdma/hca", 2) == "2"


def test_what_a_node_object_leaves_out_of_allocatable() -> None:
    """A hand-written node listing GPUs only says nothing of its CPUs, memory or pods (every
    kubelet reports them), but it does not offer an extended resource it does not list."""
    room = NodeResources(allocatable({"status": {"allocatable": {"aliyun.com/gpu": "8"}}},
                                     skip={"aliyun.com/gpu"}) or {}, {"cpu": 10**6})
    assert room.fits({"cpu": 60000, "memory": GI, "pods": 1}, 3) == (3, "")
    assert room.fits({"rdma/hca": 1, "pods": 1}, 3) == (0, "rdma/hca 1 of 0")


def test_remembered_caps_follow_changed_nodes() -> None:
    """ResourceCaps answers as resource_limits does after any few nodes change, and for
    the very same sequence asked again; capped() of its answer is capped_by_resources."""
    import random
    from dataclasses import replace

    from gputopo.cluster.node_resources import (
        ResourceCaps,
        capped,
        capped_by_resources,
        resource_limits,
    )
    from gputopo.placement.types import GangRequest, NodeState
    from gputopo.topology.model import Topology

    topo = Topology.from_annotation({"version": 1, "gpus": [{"index": i} for i in range(4)],
                                     "links": [["X" if a == b else "NV1" for b in range(4)]
                                               for a in range(4)]})
    rng = random.Random(3)

    def res() -> NodeResources:
        return NodeResources({"cpu": 94000, "pods": 110}, {"cpu": rng.randrange(0, 94000)})

    nodes = [NodeState(name=f"n{i}", topology=topo, resources=res()) for i in range(40)]
    caps, gang, demand = ResourceCaps(), GangRequest(3, 1), {"cpu": 30000, "pods": 1}
    same = 0
    for _ in range(40):
        if rng.random() < 0.7:  # a new sequence, some nodes changed
            nodes = list(nodes)
            for i in rng.sample(range(len(nodes)), rng.choice([0, 1, 3, 20])):
                nodes[i] = replace(nodes[i], resources=res())
        else:  # the very sequence asked about last time, untouched
            same += 1
        limits = caps.limits(nodes, demand, gang)
        assert limits == resource_limits(nodes, demand, gang)
        got, why = capped(nodes, limits, gang)
        want, want_why = capped_by_resources(nodes, demand, gang)
        assert {n.name: (n.gpu_cap, n) for n in got} == {n.name: (n.gpu_cap, n) for n in want}
        assert why == want_why
    assert same > 5
