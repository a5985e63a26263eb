"""A gang that waits behind the ``gputopo.io/placement`` gate and is released by the queue
of ``gputopo serve``: admitted gated by the real admission chain, its pods' updates (gate
removed, node affinity, GPU annotations) accepted by the real ``ValidatePodUpdate``, then
bound by the real scheduler on the node the queue chose.

The cluster is the queue tests' (tests/queue/queue_kit.py): the demo's two DGX-1 nodes with
12 of 16 GPUs busy, free A:6,7 and B:6,7; a 4 x 1-GPU gang finds no good placement until
the pod holding A's NVLink quad 0-3 finishes.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness import (
    DEMO_CLUSTER,
    admit_and_store,
    assert_bound_where_pinned,
    check_update,
    expand_job_files,
    gpu_group,
    key,
    namespace,
    nodes_of,
    placement,
    pod_groups,
    running_pod,
    schedule_all,
    serve,
    store_owners,
)

from gputopo import names

JOBS = Path(__file__).resolve().parent / "jobs"
NODES = nodes_of(DEMO_CLUSTER)
NODE_A, NODE_B = (n["metadata"]["name"] for n in NODES)


def _gated(pod: dict) -> bool:
    return any(g.get("name") == names.PLACEMENT_GATE
               for g in pod["spec"].get("schedulingGates") or [])


def test_a_waiting_gang_is_released_by_the_queue_and_binds(programs, deployments, kube,
                                                           tmp_path):
    deployment = deployments["ack"]
    ns = namespace()
    gpu = deployment.gpu_resource
    holder = running_pod("holder", NODE_A, [0, 1, 2, 3], resource=gpu)
    running = [running_pod("busy-a", NODE_A, [4, 5], resource=gpu),
               running_pod("busy-b", NODE_B, [0, 1, 2, 3, 4, 5], resource=gpu)]
    for obj in [ns, *NODES, holder, *running]:
        kube.apply(obj)
    made, owners = expand_job_files([JOBS / "pytorch-waits.yaml"])
    pods = store_owners(kube, owners, made)

    with serve(deployment, kube.url, tmp_path / "serve") as served:
        admitted = admit_and_store(programs, deployment, served, kube, ns, pods,
                                   tmp_path / "admit")
        for pod in admitted:
            assert _gated(pod), pod["metadata"]["name"]
            assert placement(pod)["waiting"] is True
            assert pod["status"]["conditions"][0]["reason"] == "SchedulingGated"
        groups = pod_groups(kube)
        gated = schedule_all(programs, deployment, nodes=NODES,
                             pods=[holder, *running, *admitted], groups=groups,
                             work=tmp_path / "sched-gated")
        assert {gated[key(p)]["status"] for p in admitted} == {"Gated"}

        kube.remove(holder)  # the job holding A's GPUs 0-3 finishes
        deadline = time.monotonic() + 30
        while True:
            now = {p["metadata"]["name"]: p for p in kube.objects("v1", "Pod")}
            released = [now[p["metadata"]["name"]] for p in admitted]
            if not any(_gated(p) for p in released):
                break
            assert time.monotonic() < deadline, f"the queue released nothing:\n{served.stderr()}"
            time.sleep(0.2)

    for old, new in zip(admitted, released, strict=True):
        check_update(programs, old, new, tmp_path / "update")
    results = schedule_all(programs, deployment, nodes=NODES, pods=[*running, *released],
                           groups=groups, work=tmp_path / "sched")
    bound = assert_bound_where_pinned(results, released, running)
    assert set(bound.values()) == {NODE_A}
    assert sorted(g for p in released for g in gpu_group(p)) == [0, 1, 2, 3]
