"""GPU generations through real admission (``gputopo mutate`` with the shipped policy, a
real YAML policy where a key is set, and the mixed-generation cluster file of
examples/mixed-generations-cluster.yaml): MPIJob workers as the operator makes them.

The gang goes to the DGX A100 while it is free and to the V100s when it is full, and starts
there rather than wait for the A100 (the waiting rule's reference is a speed: GPU model
and wiring);
a per-GPU memory need (policy key or the job's annotation) and a required node affinity on
``nvidia.com/gpu.memory`` keep it off smaller GPUs; the placement record carries the GPU
model and the predicted step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from placement_checks import pinned_node, record
from placement_jobs import gang, mpijob

from gputopo import names
from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import dump, dump_documents, load_documents
from webhook.assembly import default_policies_dir

MIXED = Path(__file__).resolve().parents[2] / "examples" / "mixed-generations-cluster.yaml"
A100, V100, T4 = "dgx-a100-0", "dgx1-v100-0", "pcie-t4-0"


def busy(node: str, gpus: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"busy-{node}", "namespace": "default",
                         "annotations": {names.GPU_GROUP_ANNOTATION: gpus}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


def cluster(tmp_path: Path, *full: str) -> Path:
    namespaces = [d for d in load_documents(demo_cluster_path()) if d["kind"] == "Namespace"]
    nodes = [d for d in load_documents(str(MIXED)) if d]
    path = tmp_path / "mixed.yaml"
    path.write_text(dump_documents([*namespaces, *nodes,
                                    *(busy(n, "0,1,2,3,4,5,6,7") for n in full)]))
    return path


def policies(tmp_path: Path, **placement: Any) -> Path:
    (doc,) = load_documents(default_policies_dir() / "ack-gpu-topology.yaml")
    doc["spec"]["placement"].update(placement)
    out = tmp_path / "policies"
    out.mkdir(exist_ok=True)
    (out / "policy.yaml").write_text(dump(doc))
    return out


def workers(result: Any, n: int) -> list[dict[str, Any]]:
    assert result.rc == 0, result.stderr
    return [result.pods[f"job-worker-{i}"] for i in range(n)]


def test_four_workers_go_to_the_a100_then_to_the_v100s(mutate, tmp_path):
    got = workers(mutate(gang(mpijob("job", workers=4)), cluster=cluster(tmp_path)), 4)
    assert {pinned_node(w) for w in got} == {A100}
    rec = record(got[0])
    assert rec["throughput"]["gpuModel"] == "A100-SXM4-80GB"
    assert rec["throughput"]["step"]["total"] == 1.0
    got = workers(mutate(gang(mpijob("job", workers=4)), cluster=cluster(tmp_path, A100)), 4)
    # placed at once, not gated waiting for the A100: the reference of a gang one node
    # holds is the slowest kind's (the T4 server), and the V100s beat it
    assert {pinned_node(w) for w in got} == {V100}
    assert record(got[0])["placed"] is True


def test_a_one_node_gang_starts_on_the_t4s_when_nothing_faster_is_free(mutate, tmp_path):
    got = workers(mutate(gang(mpijob("job", workers=2, gpus=4)),
                         cluster=cluster(tmp_path, A100, V100)), 2)
    assert {pinned_node(w) for w in got} == {T4}


def test_policy_min_gpu_memory_keeps_the_gang_off_small_gpus(mutate, tmp_path):
    result = mutate(gang(mpijob("job", workers=2)), "--policies",
                    str(policies(tmp_path, minGpuMemory="40Gi")),
                    cluster=cluster(tmp_path, A100))
    got = workers(result, 2)
    rec = record(got[0])
    assert rec["placed"] is False and rec.get("waiting") is True
    assert V100 in rec["reason"] and T4 in rec["reason"]
    assert rec["gang"]["minGpuMemoryMiB"] == 40 * 1024
    placed = workers(mutate(gang(mpijob("job", workers=2)), "--policies",
                            str(policies(tmp_path, minGpuMemory="40Gi")),
                            cluster=cluster(tmp_path)), 2)
    assert {pinned_node(w) for w in placed} == {A100}


def test_the_jobs_annotation_wins_over_the_policy(mutate, tmp_path):
    job = mpijob("job", workers=2)
    job["metadata"]["annotations"] = {names.GPU_MEMORY_ANNOTATION: "16000"}
    got = workers(mutate(gang(job), "--policies", str(policies(tmp_path, minGpuMemory="40Gi")),
                         cluster=cluster(tmp_path, A100)), 2)
    assert {pinned_node(w) for w in got} == {V100}


def test_required_affinity_on_gpu_memory_still_works(mutate, tmp_path):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": names.GPU_MEMORY_LABEL, "operator": "Gt", "values": ["40000"]}]}]}}}
    got = workers(mutate(gang(mpijob("job", workers=2, worker_affinity=affinity)),
                         cluster=cluster(tmp_path)), 2)
    assert {pinned_node(w) for w in got} == {A100}
    got = workers(mutate(gang(mpijob("job", workers=2, worker_affinity=affinity)),
                         cluster=cluster(tmp_path, A100)), 2)
    rec = record(got[0])
    assert rec["placed"] is False
    assert "node affinity" in rec["reason"]


def test_mix_gpu_models_lets_a_gang_span_models_and_says_so(mutate, tmp_path):
    job = mpijob("job", workers=2, gpus=8)
    result = mutate(gang(job), cluster=cluster(tmp_path))
    assert record(workers(result, 2)[0])["placed"] is False
    got = workers(mutate(gang(job), "--policies", str(policies(tmp_path, mixGpuModels=True)),
                         cluster=cluster(tmp_path)), 2)
    assert {pinned_node(w) for w in got} == {A100, V100}
    rec = record(got[0])
    assert rec["throughput"]["mixedGpuModels"] is True
    assert "paced by the slowest" in rec["reason"]



def test_mutate_table_shows_the_share_of_the_best_placement_free_now(tmp_path, capsys):
    from gputopo.cli import main

    path = tmp_path / "job.yaml"
    path.write_text(dump_documents(gang(mpijob("job", workers=2))))
    capsys.readouterr()
    assert main(["mutate", "--cluster", str(cluster(tmp_path)), "-o", "table",
                 str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    assert header[:6] == ["POD", "NODE", "GPUS", "BUS", "GB/S", "SHARE"]
    workers = [line.split() for line in lines[1:] if "-worker-" in line]
    assert [w[1] for w in workers] == [A100, A100]
    assert [w[4] for w in workers] == ["100%", "100%"]
