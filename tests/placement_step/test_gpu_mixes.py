"""GPU generations on mixes other than issue 32's (tests/fixtures/gpu-mixes/: H100 SXM +
A100 PCIe + L4, H200 + H100 + L40S, B200 + A10G, A100 40 GB + 80 GB, and GFD-labelled H100s
beside a node without labels), through the CLI: real cluster YAML in, JSON or mutated Pods
out.

What must hold whatever the mix (docs/placement.md, "GPU generations"): on the idle cluster
every shape goes to the fastest model; with its nodes full, to the next; a per-GPU memory
need never lands on smaller GPUs and the answer names the nodes ruled out; no gang spans
models (a node of unknown model is one more model) unless ``mixGpuModels`` allows it and the
record says so; pods as the operators make them (PyTorchJob, MPIJob through ``gputopo
mutate``) all land on one model; a node whose GPUs only its DRA driver's ResourceSlice
describes still has a model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from placement_checks import pinned_node

from gputopo import names
from gputopo.cli import main

TESTS = Path(__file__).resolve().parents[1]
MIXES = TESTS / "fixtures" / "gpu-mixes"
EXAMPLES = TESTS.parent / "examples"
SHAPES = [(1, 8), (1, 4), (2, 4), (4, 1), (2, 8)]
ALL = "0,1,2,3,4,5,6,7"

#: file, the fastest model's nodes, its model, the next model (when the fastest is full)
LADDERS = [
    ("mixed-h100-a100pcie-l4.yaml", ("h100-0", "h100-1"), "H100-SXM5-80GB", "A100-PCIE-40GB"),
    ("mixed-h200-h100-l40s.yaml", ("h200-0", "h200-1"), "H200", "H100-SXM5-80GB"),
    ("mixed-b200-a10g.yaml", ("b200-0", "b200-1"), "B200", "A10G"),
    ("mixed-a100-40-80.yaml", ("a100-80-0", "a100-80-1"), "A100-SXM4-80GB", "A100-SXM4-40GB"),
]


def busy(node: str, gpus: str = ALL) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"busy-{node}", "namespace": "default",
                         "annotations": {names.GPU_GROUP_ANNOTATION: gpus}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


def cluster(tmp_path: Path, source: Path, *extra: dict[str, Any]) -> Path:
    docs = [d for d in yaml.safe_load_all(source.read_text(encoding="utf-8")) if d]
    path = tmp_path / f"cluster-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump_all([*docs, *extra]), encoding="utf-8")
    return path


def place(capsys: pytest.CaptureFixture[str], path: Path, replicas: int, gpus: int,
          *flags: str) -> tuple[int, dict[str, Any]]:
    code = main(["place", "--cluster", str(path), "--replicas", str(replicas),
                 "--gpus-per-replica", str(gpus), *flags, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def models_of(path: Path) -> dict[str, str]:
    out = {}
    for d in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if d and d.get("kind") == "Node":
            out[d["metadata"]["name"]] = d["metadata"]["labels"].get(names.GPU_PRODUCT_LABEL)
    return out


def nodes_of(doc: dict[str, Any]) -> set[str]:
    return {p["node"] for p in doc["placements"]}


@pytest.mark.parametrize(("file", "fast", "model", "_next"), LADDERS)
@pytest.mark.parametrize(("replicas", "gpus"), SHAPES)
def test_idle_mix_places_on_the_fastest_model(tmp_path, capsys, file, fast, model, _next,
                                              replicas, gpus):
    code, doc = place(capsys, MIXES / file, replicas, gpus)
    assert code == 0
    assert nodes_of(doc) <= set(fast)
    assert doc["throughput"]["gpuModel"] == model
    assert doc["throughput"]["shareOfBestNow"] == 1.0


@pytest.mark.parametrize(("file", "fast", "_model", "after"), LADDERS)
@pytest.mark.parametrize(("replicas", "gpus"), SHAPES)
def test_with_the_fastest_full_the_next_model(tmp_path, capsys, file, fast, _model, after,
                                             replicas, gpus):
    path = cluster(tmp_path, MIXES / file, *(busy(n) for n in fast))
    code, doc = place(capsys, path, replicas, gpus)
    assert code == 0
    assert doc["throughput"]["gpuModel"] == after
    products = models_of(path)
    assert len({products[n] for n in nodes_of(doc)}) == 1
    assert not nodes_of(doc) & set(fast)


@pytest.mark.parametrize(("replicas", "gpus"), SHAPES)
def test_60gb_per_gpu_keeps_off_the_a100_40gb(tmp_path, capsys, replicas, gpus):
    """A100 SXM4 40 GB and 80 GB: two models (their memory bandwidth differs), and a 60 GB
    need rules the 40 GB servers out even when the 80 GB ones are full."""
    source = MIXES / "mixed-a100-40-80.yaml"
    code, doc = place(capsys, source, replicas, gpus, "--gpu-memory", "60Gi")
    assert code == 0 and nodes_of(doc) <= {"a100-80-0", "a100-80-1"}
    assert sorted(doc["ruledOutByGpuMemory"]) == ["a100-40-0", "a100-40-1"]
    full = cluster(tmp_path, source, busy("a100-80-0"), busy("a100-80-1"))
    code, doc = place(capsys, full, replicas, gpus, "--gpu-memory", "60Gi")
    assert code == 1 and not doc["feasible"]
    assert "a100-40-0" in doc["reason"] and "a100-40-1" in doc["reason"]
    assert "GPU memory" in doc["reason"]
    # the reason's "all 16 GPUs are in use" is of the 80 GB servers, and says so (the
    # cluster has 32)
    assert doc["reason"].startswith("on the nodes with enough GPU memory, ")


def test_40gb_per_gpu_never_on_the_l4s(tmp_path, capsys):
    source = MIXES / "mixed-h100-a100pcie-l4.yaml"
    full = cluster(tmp_path, source, busy("h100-0"), busy("h100-1"), busy("a100p-0"),
                   busy("a100p-1"))
    code, doc = place(capsys, full, 1, 4)
    assert code == 0 and nodes_of(doc) <= {"l4-0", "l4-1"}  # without the need: L4s
    code, doc = place(capsys, full, 1, 4, "--gpu-memory", "40Gi")
    assert code == 1 and sorted(doc["ruledOutByGpuMemory"]) == ["l4-0", "l4-1"]
    assert "L4 23034 MiB: l4-0, l4-1" in doc["reason"]


def test_no_gang_spans_models_even_when_two_would_fit_together(tmp_path, capsys):
    """B200 and A10G: one B200 server has a GPU in use, so 2 x 8 fits on the A10Gs only,
    or across the free B200 server and an A10G one if mixing were allowed."""
    path = cluster(tmp_path, MIXES / "mixed-b200-a10g.yaml", busy("b200-0", "0"),
                   busy("a10g-0", "0"))
    code, doc = place(capsys, path, 2, 8)
    assert code == 1 and not doc["feasible"]
    assert "mixGpuModels" in doc["reason"]
    code, doc = place(capsys, path, 2, 8, "--mix-gpu-models")
    assert code == 0 and nodes_of(doc) == {"b200-1", "a10g-1"}
    assert doc["throughput"]["mixedGpuModels"] is True
    assert doc["throughput"]["gpuModel"] == ["B200", "A10G"]
    # too big for either model's nodes: each is said of that model, not of the cluster
    # (32 GPUs on 4 nodes)
    code, doc = place(capsys, MIXES / "mixed-b200-a10g.yaml", 3, 8)
    assert code == 1
    assert "B200: the gang needs 24 GPUs (3 x 8 GPUs) but its nodes have only 16" in \
        doc["reason"]
    assert "whole cluster" not in doc["reason"]
    assert "mixGpuModels: true allows that" in doc["reason"]


def test_a_node_without_gfd_labels_is_its_own_unknown_model(tmp_path, capsys):
    source = MIXES / "mixed-unlabelled.yaml"
    assert main(["nodes", "--cluster", str(source), "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    # no model at all ("-"): not one of the known ones, no memory figure
    assert rows["bare-0"]["gpu_model_known"] is None
    assert rows["bare-0"]["gpu_memory_mib"] is None
    assert rows["h100-0"]["gpu_model"] == "H100-SXM5-80GB"
    # idle: the labelled H100s, not the unknown node
    for replicas, gpus in SHAPES:
        code, doc = place(capsys, source, replicas, gpus)
        assert code == 0 and "bare-0" not in nodes_of(doc)
    # one H100 server full: 2 x 8 would need the unknown node beside the other H100
    path = cluster(tmp_path, source, busy("h100-0"))
    code, doc = place(capsys, path, 2, 8)
    assert code == 1 and "mixGpuModels" in doc["reason"]
    code, doc = place(capsys, path, 2, 8, "--mix-gpu-models")
    assert code == 0 and nodes_of(doc) == {"h100-1", "bare-0"}
    assert doc["throughput"]["mixedGpuModels"] is True
    assert doc["throughput"]["unknownGpuModel"] is True
    # a memory need rules the unknown node out, by name
    path = cluster(tmp_path, source, busy("h100-0"), busy("h100-1"))
    code, doc = place(capsys, path, 1, 8, "--gpu-memory", "40Gi")
    assert code == 1 and doc["ruledOutByGpuMemory"] == ["bare-0"]


# --- pods as the operators make them, through the webhook's dry run -----------------------

def pytorchjob(name: str, workers: int, gpus: int) -> dict[str, Any]:
    def spec(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "pytorch",
             "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": {"Master": spec(1), "Worker": spec(workers)}}}


def mpijob(name: str, workers: int, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"slotsPerWorker": gpus, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "mpi", "image": "horovod"}]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [
                    {"name": "mpi", "image": "horovod",
                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}}


def mutate(capsys: pytest.CaptureFixture[str], tmp_path: Path, path: Path,
           job: dict[str, Any]) -> dict[str, str]:
    """Pod name -> node it is pinned to, for the job's GPU pods."""
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(yaml.safe_dump(job), encoding="utf-8")
    assert main(["mutate", "--cluster", str(path), str(jobfile)]) == 0
    pods = [d for d in yaml.safe_load_all(capsys.readouterr().out)
            if d and d.get("kind") == "Pod"]
    gpu_pods = [p for p in pods if "launcher" not in str(p["metadata"].get("name")
                                                         or p["metadata"].get("generateName"))]
    assert gpu_pods
    return {p["metadata"]["name"]: pinned_node(p) for p in gpu_pods}


@pytest.mark.parametrize("job", [pytorchjob("llm", 1, 8), mpijob("hvd", 4, 2),
                                 pytorchjob("small", 3, 1)], ids=lambda j: j["kind"])
def test_operator_pods_land_on_one_model(tmp_path, capsys, job):
    source = MIXES / "mixed-h100-a100pcie-l4.yaml"
    products = models_of(source)
    for full in [(), ("h100-0",), ("h100-0", "h100-1")]:
        path = cluster(tmp_path, source, *(busy(n) for n in full))
        pinned = mutate(capsys, tmp_path, path, job)
        assert len({products[n] for n in pinned.values()}) == 1, pinned
        want = "NVIDIA-A100-PCIE-40GB" if len(full) == 2 else "NVIDIA-H100-80GB-HBM3"
        if job["metadata"]["name"] == "llm" and full:
            want = "NVIDIA-A100-PCIE-40GB"  # 2 x 8 no longer fits on one free H100 node
        assert {products[n] for n in pinned.values()} == {want}


# --- a node whose GPUs only its DRA driver describes -------------------------------------

def test_resourceslice_product_and_memory_give_the_model(tmp_path, capsys):
    """examples/dra-cluster.yaml: two nodes with no GFD labels and a topology annotation
    without GPU names; NVIDIA's DRA driver publishes ``productName: Tesla V100-SXM2-16GB``
    and capacity ``memory: 16Gi`` per GPU. gputopo knows the model and the memory: a 16 GiB
    need is met, a 32 GiB one rules both nodes out for their 16 GiB, not for "unknown"."""
    source = EXAMPLES / "dra-cluster.yaml"
    code, doc = place(capsys, source, 1, 4)
    assert code == 0 and doc["throughput"]["gpuModel"] == "V100-SXM2-16GB"
    code, doc = place(capsys, source, 1, 4, "--gpu-memory", "16Gi")
    assert code == 0 and "ruledOutByGpuMemory" not in doc
    code, doc = place(capsys, source, 1, 4, "--gpu-memory", "32Gi")
    assert code == 1 and sorted(doc["ruledOutByGpuMemory"]) == ["dgx-a", "dgx-b"]
    assert "V100-SXM2-16GB 16384 MiB" in doc["reason"]


def test_gfd_labels_outrank_the_resourceslice(tmp_path, capsys):
    """The same DRA nodes with GFD labels saying A100 80GB: the labels win."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "dra-cluster.yaml").read_text(
        encoding="utf-8")) if d]
    for d in docs:
        if d.get("kind") == "Node":
            d["metadata"]["labels"].update({names.GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB",
                                            names.GPU_MEMORY_LABEL: "81920"})
    path = tmp_path / "labelled.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    code, doc = place(capsys, path, 1, 4, "--gpu-memory", "60Gi")
    assert code == 0 and doc["throughput"]["gpuModel"] == "A100-SXM4-80GB"


def test_a_memory_need_is_not_met_by_a_guessed_memory(tmp_path, capsys):
    """A node labelled with its compute capability only (no product, no memory: hand
    labels, or a DRA driver that publishes ``cudaComputeCapability`` alone) is rated as the
    slowest known model of 9.x for speed, but its GPU memory is unknown: ``nodes`` does not
    show that model's memory as the node's, and a 60 GB need is not placed there."""
    docs = [d for d in yaml.safe_load_all((MIXES / "mixed-unlabelled.yaml").read_text(
        encoding="utf-8")) if d]
    for d in docs:
        if d["metadata"]["name"] == "bare-0":
            d["metadata"]["labels"].update({names.GPU_COMPUTE_MAJOR_LABEL: "9",
                                            names.GPU_COMPUTE_MINOR_LABEL: "0"})
    source = tmp_path / "compute-only.yaml"
    source.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    assert main(["nodes", "--cluster", str(source), "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["bare-0"]["gpu_model_known"] is False
    assert rows["bare-0"]["gpu_memory_mib"] is None
    assert main(["nodes", "--cluster", str(source)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("bare-0"))
    assert row.split()[3:5] == ["unknown", "-"], row  # GPU MODEL, GPU MEMORY
    path = cluster(tmp_path, source, busy("h100-0"), busy("h100-1"))
    code, doc = place(capsys, path, 1, 8)
    assert code == 0 and nodes_of(doc) == {"bare-0"}
    code, doc = place(capsys, path, 1, 8, "--gpu-memory", "60Gi")
    assert code == 1 and doc["ruledOutByGpuMemory"] == ["bare-0"]
    assert "GPU memory unknown" in doc["reason"]


def _memory_need(job: dict[str, Any], how: str) -> dict[str, Any]:
    if how == "annotation":
        job["metadata"]["annotations"] = {names.GPU_MEMORY_ANNOTATION: "60Gi"}
        return job
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": names.GPU_MEMORY_LABEL, "operator": "Gt",
                                       "values": ["60000"]}]}]}}}
    return job


@pytest.mark.parametrize("how", ["annotation", "node affinity"])
def test_operator_pods_with_a_memory_need_wait_rather_than_take_the_40gb(tmp_path, capsys,
                                                                         how):
    """A100 80 GB servers full, 40 GB ones idle: a PyTorchJob that needs 60 GB per GPU (the
    job's gputopo.io/gpu-memory, or a required node affinity on nvidia.com/gpu.memory) is
    gated, not pinned to the 40 GB servers; with one 80 GB server free it goes there."""
    source = MIXES / "mixed-a100-40-80.yaml"
    job = _memory_need(pytorchjob("big", 1, 4), how)
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text(yaml.safe_dump(job), encoding="utf-8")
    full = cluster(tmp_path, source, busy("a100-80-0"), busy("a100-80-1"))
    assert main(["mutate", "--cluster", str(full), str(jobfile)]) == 0
    pods = [d for d in yaml.safe_load_all(capsys.readouterr().out)
            if d and d.get("kind") == "Pod"]
    assert len(pods) == 2
    for pod in pods:
        assert {"name": names.PLACEMENT_GATE} in pod["spec"].get("schedulingGates", [])
        assert "a100-40" not in json.dumps(pod["spec"].get("affinity"))
    pinned = mutate(capsys, tmp_path, cluster(tmp_path, source, busy("a100-80-0")), job)
    assert set(pinned.values()) == {"a100-80-1"}


def test_dra_only_nodes_of_two_models_are_never_mixed(tmp_path, capsys):
    """examples/dra-cluster.yaml with dgx-b's slice saying A100 80GB (its driver's
    ``productName`` and capacity ``memory``; still no GFD label): one-node shapes go to
    dgx-b, and 2 x 8, which needs both nodes, is refused unless mixing is allowed."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "dra-cluster.yaml").read_text(
        encoding="utf-8")) if d]
    for d in docs:
        if d.get("kind") == "ResourceSlice" and d["spec"]["nodeName"] == "dgx-b":
            for dev in d["spec"]["devices"]:
                dev["attributes"]["productName"] = {"string": "NVIDIA A100-SXM4-80GB"}
                dev["attributes"]["cudaComputeCapability"] = {"version": "8.0.0"}
                dev["capacity"]["memory"] = {"value": "81920Mi"}
    path = tmp_path / "dra-two-models.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    for replicas, gpus in [(1, 8), (1, 4), (2, 4), (4, 1)]:
        code, doc = place(capsys, path, replicas, gpus)
        assert code == 0 and nodes_of(doc) == {"dgx-b"}
        assert doc["throughput"]["gpuModel"] == "A100-SXM4-80GB"
    code, doc = place(capsys, path, 2, 8)
    assert code == 1 and "mixGpuModels" in doc["reason"]
    code, doc = place(capsys, path, 2, 8, "--mix-gpu-models")
    assert code == 0 and doc["throughput"]["mixedGpuModels"] is True
