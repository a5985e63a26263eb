"""Gangs through the real API server admission and the real scheduler: two jobs on one
node, a gang over two nodes, a gang whose pods need 60 CPUs each.

Each scenario fixes the cluster so that only one answer binds: the node gputopo pins must
be the one the scheduler can bind (GPUs, CPUs and the gang's Permit all counted by the
real code), and no GPU index may be handed out twice on a node.
"""

from __future__ import annotations

from pathlib import Path

from harness import (
    DEMO_CLUSTER,
    gpu_group,
    key,
    nodes_of,
    placement,
    run_jobs,
    running_pod,
)

JOBS = Path(__file__).resolve().parent / "jobs"
NODE_A, NODE_B = (n["metadata"]["name"] for n in nodes_of(DEMO_CLUSTER))


def test_two_jobs_share_a_node_without_sharing_a_gpu(programs, deployments, kube, tmp_path):
    """Node B is full; two 2 x 2-GPU jobs admitted one after the other both go to node A,
    on GPUs the first one left free: all eight, none twice."""
    full_b = running_pod("busy-b", NODE_B, range(8), resource="aliyun.com/gpu")
    run = run_jobs(programs, deployments["ack"], kube, tmp_path, running=[full_b],
                   job_files=[JOBS / "pytorch-share-a.yaml", JOBS / "pytorch-share-b.yaml"])
    assert len(run.pods) == 4
    assert {run.nodes[key(p)] for p in run.pods} == {NODE_A}
    gpus = [g for p in run.pods for g in gpu_group(p)]
    assert len(gpus) == len(set(gpus)) == 8
    assert {g["metadata"]["name"] for g in run.groups} == {"share-a", "share-b"}


def test_a_gang_of_two_whole_nodes(programs, deployments, kube, tmp_path):
    run = run_jobs(programs, deployments["ack"], kube, tmp_path,
                   job_files=[JOBS / "pytorch-2x8.yaml"])
    assert sorted(run.nodes.values()) == sorted([NODE_A, NODE_B])
    assert all(gpu_group(p) == list(range(8)) for p in run.pods)
    (group,) = run.groups
    assert group["spec"]["minMember"] == 2


def test_a_cpu_heavy_gang_is_pinned_where_its_cpus_fit(programs, deployments, kube, tmp_path):
    """2 GPUs and 60 of a node's 94 CPUs per pod: the GPUs would fit on one node, the CPUs
    do not. Pinned both on one node, the second pod would be "Insufficient cpu" and, under
    Coscheduling, the whole gang would wait for ever."""
    run = run_jobs(programs, deployments["ack"], kube, tmp_path,
                   job_files=[JOBS / "pytorch-cpu-heavy.yaml"])
    assert sorted(run.nodes.values()) == sorted([NODE_A, NODE_B])
    assert all(placement(p)["placed"] for p in run.pods)
