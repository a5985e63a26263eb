"""A gang that spans nodes: measured against whole nodes of a kind in one zone, never
started over TCP sockets while a GPUDirect kind could hold it (gputopo.placement.waiting).

Why these clusters: in the cluster replay (docs/benchmarks.md) 16-32-GPU gangs waited for a
rack of whole DGX-1s to drain while Kueue, set up by an admin, started them on whole
GPUDirect nodes in different racks; and after ``maxWaitSeconds`` the floor, measured
against the slowest kind (PCIe servers on 25 GbE TCP), started some on TCP at 7-21 % of
their speed. Here, on the API TEST DOUBLE, with DGX-1 nodes (the demo's wiring) on
100 Gbit/s GPUDirect in one zone, two racks:

- a 2 x 8-GPU MPIJob whose only free nodes are one per rack starts at admission on them
  (it waited for a rack: half the in-rack bandwidth was below ``minShare``);
- with the GPUDirect nodes busy and two TCP servers free it waits, also after
  ``maxWaitSeconds`` (the fallback took the TCP servers), and starts on the GPUDirect
  nodes when they free up.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from placement_checks import pinned_node, record
from placement_jobs import mpijob, worker_pod
from queue_kit import NODE_A, NODE_B, admit_and_create, busy_pod, gated, pods_of, wait_for
from test_placement_live import demo_docs, live_admitter

from gputopo import names
from webhook.queue.placer import PlacementQueue

NODE_C = "cn-shanghai.192.168.16.190"
NODE_D = "cn-shanghai.192.168.16.191"
TCP_1 = "cn-shanghai.192.168.16.200"
TCP_2 = "cn-shanghai.192.168.16.201"


def node(demo: list[dict[str, Any]], name: str, *, rack: str, gbps: int,
         transport: str) -> dict[str, Any]:
    """The demo DGX-1 node's object named ``name``, in zone ``z1`` and ``rack``, on a
    ``gbps`` network over ``transport``."""
    obj = copy.deepcopy(next(d for d in demo if d["kind"] == "Node"))
    meta = obj["metadata"]
    meta["name"] = meta["labels"]["kubernetes.io/hostname"] = name
    meta["labels"].update({names.ZONE_LABEL: "z1", names.RACK_LABEL: rack})
    meta["annotations"].update({names.NETWORK_GBPS_ANNOTATION: str(gbps),
                                names.NETWORK_TRANSPORT_ANNOTATION: transport})
    return obj


def cluster(kube: Any, view: Any, demo: list[dict[str, Any]],
            nodes: dict[str, tuple[str, int, str]], busy: list[str]
            ) -> dict[str, dict[str, Any]]:
    """The ``demo`` nodes (applied) relabelled and others added. ``nodes``: name -> (rack,
    Gbit/s, transport), the demo's A and B among them; ``busy``: nodes whose 8 GPUs a
    running pod holds (returned by node)."""
    for name, (rack, gbps, transport) in nodes.items():
        kube.apply(node(demo, name, rack=rack, gbps=gbps, transport=transport))
    held = {name: kube.apply(busy_pod(f"busy-{i}", name, "0,1,2,3,4,5,6,7"))
            for i, name in enumerate(busy)}
    assert wait_for(lambda: len(view.node_states()) == len(nodes)
                    and sum(len(n.used) for n in view.node_states()) == 8 * len(busy)
                    and all(n.rack for n in view.node_states()))
    return held


def gang(kube: Any, admitter: Any, name: str) -> list[dict[str, Any]]:
    """A 2 x 8-GPU MPIJob, both workers admitted and created."""
    job = kube.apply(mpijob(name, workers=2, gpus=8))
    return [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in range(2)]


GPUDIRECT = (100, "gdr")


def test_a_gang_starts_on_gpudirect_nodes_in_two_racks_instead_of_waiting_for_one(kube):
    demo = demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        cluster(kube, view, demo, {NODE_A: ("r1", *GPUDIRECT), NODE_B: ("r1", *GPUDIRECT),
                             NODE_C: ("r2", *GPUDIRECT), NODE_D: ("r2", *GPUDIRECT)},
                busy=[NODE_A, NODE_C])
        pods = gang(kube, admitter, "spread")
    assert not any(gated(p) for p in pods)
    assert {pinned_node(p) for p in pods} == {NODE_B, NODE_D}


def test_a_gang_in_one_rack_when_a_rack_is_free(kube):
    """The solver still prefers the rack: two free nodes of r1 and one of r2."""
    demo = demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        cluster(kube, view, demo, {NODE_A: ("r1", *GPUDIRECT), NODE_B: ("r1", *GPUDIRECT),
                             NODE_C: ("r2", *GPUDIRECT), NODE_D: ("r2", *GPUDIRECT)},
                busy=[NODE_C])
        pods = gang(kube, admitter, "rack")
    assert {pinned_node(p) for p in pods} == {NODE_A, NODE_B}


def test_after_max_wait_a_gang_waits_for_gpudirect_rather_than_start_over_tcp(kube):
    """Three DGX-1s on GPUDirect (two busy, so no two free), two servers of the same
    wiring on 25 Gbit/s TCP (free). The gang waits at admission and, after
    maxWaitSeconds, still waits (the TCP pair is ~7 % of a GPUDirect pair); when a
    GPUDirect node frees up the queue starts it on the GPUDirect nodes."""
    demo = demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        held = cluster(kube, view, demo, {NODE_A: ("r1", *GPUDIRECT), NODE_B: ("r1", *GPUDIRECT),
                                    NODE_C: ("r1", *GPUDIRECT), TCP_1: ("r2", 25, "tcp"),
                                    TCP_2: ("r2", 25, "tcp")},
                       busy=[NODE_A, NODE_B])
        pods = gang(kube, admitter, "waiter")
        assert all(gated(p) for p in pods)
        late = PlacementQueue(view.api_client, view, view.reservations, identity="test",
                              clock=lambda: time.time() + 3601)  # maxWaitSeconds 3600
        result = late.run_once()
        assert result.placed == [] and result.fallen_back == [], result
        assert view.reservations.list() == []
        assert all(gated(p) for p in pods_of(kube, "waiter"))
        kube.remove(held[NODE_B])
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        again = late.run_once()
        assert len(again.placed) == 1, again
    pods = pods_of(kube, "waiter")
    assert not any(gated(p) for p in pods)
    assert {pinned_node(p) for p in pods} == {NODE_B, NODE_C}
    assert all("fallback" not in record(p)["queue"] for p in pods)
