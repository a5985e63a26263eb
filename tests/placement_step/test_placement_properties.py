"""Invariants of gang placement over random job mixes and random admission orders.

Whatever the jobs (MPIJob v1/v2beta1, PyTorchJob; 1-4 GPU pods of 1, 2, 4 or 8 GPUs) and
however their pods interleave or get recreated, on the demo cluster through the real
Admitter: no GPU is handed to two replicas, a gang is placed whole or not at all, a
recreated replica keeps its slot, and each pod's annotations and env agree.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import event, given
from hypothesis import strategies as st
from placement_checks import admit, env, gpu_group, gpu_visible, pinned_node, record
from placement_jobs import V1, V2BETA1, mpijob, pytorch_pods, pytorchjob, worker_pod

from gputopo import names
from gputopo.cluster.demo import demo_snapshot
from webhook.assembly import build_admitter
from webhook.placement.step import PlacementStep

_job = st.tuples(st.sampled_from(["mpi-v2beta1", "mpi-v1", "pytorch"]),
                 st.integers(1, 4), st.sampled_from([1, 2, 4, 8]))


def _build(k: int, shape: tuple[str, int, int]):
    kind, replicas, gpus = shape
    if kind == "pytorch":
        job = pytorchjob(f"j{k}", workers=replicas - 1, gpus=gpus)
        return job, pytorch_pods(job)
    job = mpijob(f"j{k}", version=V2BETA1 if kind == "mpi-v2beta1" else V1,
                 workers=replicas, gpus=gpus)
    return job, [worker_pod(job, i) for i in range(replicas)]


@given(shapes=st.lists(_job, min_size=1, max_size=4), data=st.data())
def test_random_gangs_never_share_a_gpu_and_are_placed_whole(shapes, data):
    cluster = demo_snapshot()
    pods = []
    for k, shape in enumerate(shapes):
        job, job_pods = _build(k, shape)
        cluster.add(job)
        pods.extend(job_pods)
    order = data.draw(st.permutations(pods))
    recreated = data.draw(st.lists(st.sampled_from(pods), max_size=3))
    admitter = build_admitter(None, cluster, placement=PlacementStep(), reload_interval_s=0)
    try:
        out = [admit(admitter, p) for p in [*order, *recreated]]
    finally:
        admitter.close()

    slot_of: dict[tuple[str, str], tuple[str, tuple[int, ...]]] = {}
    owner: dict[tuple[str, int], tuple[str, str]] = {}
    placed_by_job: dict[str, set[bool]] = defaultdict(set)
    gangs: dict[tuple[str, str], set[int]] = defaultdict(set)
    for pod in out:
        rec = record(pod)
        assert rec is not None, "every GPU pod of a job gets a placement record"
        placed_by_job[rec["job"]].add(rec["placed"])
        if not rec["placed"]:
            assert "affinity" not in pod["spec"]
            continue
        node, group = pinned_node(pod), gpu_group(pod)
        replica = (rec["job"], rec["replica"])
        assert slot_of.setdefault(replica, (node, group)) == (node, group), "slot changed"
        for g in group:
            assert owner.setdefault((node, g), replica) == replica, f"GPU {node}/{g} twice"
        gangs[(rec["job"], node)].update(group)
        visible = gpu_visible(pod)
        assert set(group) <= set(visible)
        for c in pod["spec"]["containers"]:
            e = env(c, pod)
            assert e[names.NVIDIA_VISIBLE_DEVICES_ENV] == ",".join(map(str, visible))
            cuda = [int(x) for x in e[names.CUDA_VISIBLE_DEVICES_ENV].split(",")]
            assert tuple(visible[i] for i in cuda) == group
    for pod in out:
        rec = record(pod)
        if rec["placed"]:
            assert set(gpu_visible(pod)) == gangs[(rec["job"], pinned_node(pod))]
    assert all(len(v) == 1 for v in placed_by_job.values()), "a gang is placed whole or not"
    event(f"gangs placed: {sum(True in v for v in placed_by_job.values())} of {len(shapes)}")
