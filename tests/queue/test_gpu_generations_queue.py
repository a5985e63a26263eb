"""The placement queue and GPU generations, on the API test double: the demo's two DGX-1
nodes labelled by GPU Feature Discovery as V100 16GB, and a DGX A100 80GB beside them
(examples/mixed-generations-cluster.yaml's node).

A gang that needs 40 GB per GPU (the job's ``gputopo.io/gpu-memory`` annotation) waits
while the A100 is busy, however free the V100s are; its waiting record keeps the need, so
the queue, placing it later without the job's policy at hand, still keeps it off the
V100s, and places it on the A100 once that frees up.
"""

from __future__ import annotations

import copy
from pathlib import Path

from placement_checks import pinned_node, record
from placement_jobs import mpijob, worker_pod
from queue_kit import NODE_A, NODE_B, admit_and_create, busy_pod, gated, pods_of, wait_for
from test_placement_live import demo_docs, live_admitter

from gputopo import names
from gputopo.yamlio import load_documents
from webhook.queue.placer import PlacementQueue

MIXED = Path(__file__).resolve().parents[2] / "examples" / "mixed-generations-cluster.yaml"
A100 = "dgx-a100-0"
V100_LABELS = {names.GPU_PRODUCT_LABEL: "Tesla-V100-SXM2-16GB", names.GPU_MEMORY_LABEL: "16160",
               names.GPU_COMPUTE_MAJOR_LABEL: "7", names.GPU_COMPUTE_MINOR_LABEL: "0"}


def test_a_gang_that_needs_40gb_waits_for_the_a100_and_the_queue_places_it_there(kube):
    demo = demo_docs(kube)
    a100 = next(d for d in load_documents(str(MIXED)) if d and d["metadata"]["name"] == A100)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        for node in (d for d in demo if d["kind"] == "Node"):
            labelled = copy.deepcopy(node)
            labelled["metadata"]["labels"].update(V100_LABELS)
            kube.apply(labelled)
        kube.apply(a100)
        holder = kube.apply(busy_pod("holder", A100, "0,1,2,3,4,5,6,7"))
        assert wait_for(lambda: len(view.node_states()) == 3
                        and sum(len(n.used) for n in view.node_states()) == 8
                        and all(n.gpu_model is not None for n in view.node_states()))
        job = mpijob("big")
        job["metadata"]["annotations"] = {names.GPU_MEMORY_ANNOTATION: "40Gi"}
        job = kube.apply(job)
        admitted = [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in range(4)]
        assert all(gated(p) for p in admitted)
        rec = record(admitted[0])
        assert rec["gang"]["minGpuMemoryMiB"] == 40 * 1024
        assert NODE_A in rec["reason"] and NODE_B in rec["reason"]
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        assert queue.run_once().placed == []  # the V100s are free, but too small
        kube.remove(holder)
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 0)
        assert len(queue.run_once().placed) == 1
    pods = pods_of(kube, "big")
    assert not any(gated(p) for p in pods)
    assert {pinned_node(p) for p in pods} == {A100}
    assert record(pods[0])["throughput"]["gpuModel"] == "A100-SXM4-80GB"
