"""Placement beyond MPIJob: a PyTorchJob's master and workers, and dry-run admissions."""

from __future__ import annotations

from itertools import combinations

from placement_checks import admit, gpu_group, pinned_node, record
from placement_jobs import mpijob, pytorch_pods, pytorchjob, worker_pod

from gputopo.cluster.demo import demo_snapshot
from webhook.assembly import build_admitter
from webhook.placement.step import PlacementStep

NO_HOST_NETWORK_POLICY = """\
apiVersion: gputopo.io/v1alpha1
kind: TopologyPolicy
metadata: {name: no-host-network}
spec:
  match:
    owners: [{apiVersion: kubeflow.org/v1, kind: PyTorchJob}]
  mutations:
    renameResources: {nvidia.com/gpu: aliyun.com/gpu}
    hostIPC: true
    gangLabels: true
    schedulerName: gpu-topology-scheduler
"""


def test_pytorchjob_master_and_workers_form_one_gang_without_host_network(
        mutate, demo_topologies, tmp_path):
    """Without hostNetwork, ports stay in each pod's own network: master and workers share
    one NVLink quad."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "p.yaml").write_text(NO_HOST_NETWORK_POLICY)
    job = pytorchjob("pytorch-dist-nccl", workers=3)
    result = mutate([job, *pytorch_pods(job)], "--policies", str(tmp_path / "policies"))
    assert result.rc == 0, result.stderr
    pods = [result.pods[n] for n in ("pytorch-dist-nccl-master-0",
                                     *(f"pytorch-dist-nccl-worker-{i}" for i in range(3)))]
    nodes = {pinned_node(p) for p in pods}
    assert len(nodes) == 1
    gpus = [gpu_group(p)[0] for p in pods]
    assert len(set(gpus)) == 4
    topo = demo_topologies[nodes.pop()]
    assert all(topo.link(a, b).startswith("NV") for a, b in combinations(gpus, 2))
    assert {record(p)["replica"] for p in pods} == {"master/0", "worker/0", "worker/1",
                                                    "worker/2"}


def test_dry_run_admissions_show_the_slot_but_reserve_nothing():
    cluster = demo_snapshot()
    first, second = mpijob("dry"), mpijob("real")
    cluster.add(first)
    cluster.add(second)
    admitter = build_admitter(None, cluster, placement=PlacementStep(), reload_interval_s=0)
    try:
        dry = [admit(admitter, worker_pod(first, i), dry_run=True) for i in range(4)]
        real = [admit(admitter, worker_pod(second, i), dry_run=False) for i in range(4)]
    finally:
        admitter.close()
    dry_slots = [(pinned_node(p), gpu_group(p)) for p in dry]
    real_slots = [(pinned_node(p), gpu_group(p)) for p in real]
    assert len({g for _, g in dry_slots}) == 4, "a dry run still shows distinct slots"
    assert dry_slots == real_slots, "the dry run reserved nothing: the real job gets those GPUs"


def test_a_job_whose_pods_ask_for_different_gpu_counts_is_left_unplaced_as_a_whole(mutate):
    job = pytorchjob("mixed", workers=2)
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    master["resources"]["limits"]["nvidia.com/gpu"] = 2
    result = mutate([job, *pytorch_pods(job)])
    assert result.rc == 0, result.stderr
    for name in ("mixed-master-0", "mixed-worker-0", "mixed-worker-1"):
        rec = record(result.pods[name])
        assert rec["placed"] is False
        assert "Master: 2" in rec["reason"] and "Worker: 1" in rec["reason"]


def _without_index_labels(pods: list[dict]) -> list[dict]:
    for pod in pods:
        for key in ("training.kubeflow.org/replica-index", "replica-index"):
            pod["metadata"]["labels"].pop(key, None)
    return pods


def test_replicas_without_index_labels_are_told_apart_by_their_operator_given_names(mutate):
    job = mpijob("noindex", version="kubeflow.org/v1")
    workers = _without_index_labels([worker_pod(job, i) for i in range(4)])
    result = mutate([job, *workers])
    assert result.rc == 0, result.stderr
    pods = [result.pods[f"noindex-worker-{i}"] for i in range(4)]
    assert len({gpu_group(p)[0] for p in pods}) == 4, "every replica has its own GPU"
    assert {record(p)["replica"] for p in pods} == {f"worker/{i}" for i in range(4)}


def test_replicas_with_no_index_anywhere_are_never_given_a_shared_slot(mutate):
    job = mpijob("anon", version="kubeflow.org/v1")
    pods = _without_index_labels([worker_pod(job, i) for i in range(4)])
    for i, pod in enumerate(pods):
        pod["metadata"]["name"] = f"anon-pod-{i}"
    result = mutate([job, *pods])
    assert result.rc == 0, result.stderr
    for i in range(len(pods)):
        pod = result.pods[f"anon-pod-{i}"]
        annotations = pod["metadata"].get("annotations") or {}
        assert "topology.kubernetes.io/gpu-group" not in annotations, "no GPUs pinned"
    assert "no replica index label" in result.stderr
