"""GPU generations through ``gputopo place`` on a cluster file as GPU Feature Discovery
labels it (examples/mixed-generations-cluster.yaml: a DGX A100 80GB, a DGX-1 with V100 16GB
and a PCIe server with T4s; issue 32's idle cluster).

What must hold (docs/placement.md, "GPU generations"): gangs go to the A100s while they are
free and to the V100s when the A100s are full; a gang never spans GPU models unless it is
allowed to; a per-GPU memory need rules out smaller GPUs, and the answer names them; on a
cluster of one model the labels change nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.placement.generations import solve_models
from gputopo.placement.solver import GroupedNodes
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.gpus import MODELS
from gputopo.yamlio import load_documents

MIXED = Path(__file__).resolve().parents[2] / "examples" / "mixed-generations-cluster.yaml"
A100, V100, T4 = "dgx-a100-0", "dgx1-v100-0", "pcie-t4-0"
SHAPES = [(1, 8), (1, 4), (2, 4), (4, 1)]


def busy(node: str, gpus: str, k: int = 0) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"busy-{node}-{k}", "namespace": "default",
                         "annotations": {names.GPU_GROUP_ANNOTATION: gpus}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


def cluster(tmp_path: Path, *extra: dict, edit=None) -> Path:
    docs = [d for d in load_documents(str(MIXED)) if d]
    if edit is not None:
        docs = [edit(d) for d in docs]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*docs, *extra]), encoding="utf-8")
    return path


def place(capsys, path: Path, replicas: int, gpus: int, *flags: str) -> tuple[int, dict]:
    code = main(["place", "--cluster", str(path), "--replicas", str(replicas),
                 "--gpus-per-replica", str(gpus), *flags, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)


def nodes_of(doc: dict) -> set[str]:
    return {p["node"] for p in doc["placements"]}


@pytest.mark.parametrize(("replicas", "gpus"), SHAPES)
def test_idle_mixed_cluster_places_on_the_a100(tmp_path, capsys, replicas, gpus):
    code, doc = place(capsys, cluster(tmp_path), replicas, gpus)
    assert code == 0
    assert nodes_of(doc) == {A100}
    assert doc["throughput"]["gpuModel"] == "A100-SXM4-80GB"
    assert doc["throughput"]["shareOfBestNow"] == 1.0


@pytest.mark.parametrize(("replicas", "gpus"), SHAPES)
def test_with_the_a100_full_the_v100s_come_next(tmp_path, capsys, replicas, gpus):
    code, doc = place(capsys, cluster(tmp_path, busy(A100, "0,1,2,3,4,5,6,7")), replicas, gpus)
    assert code == 0
    assert nodes_of(doc) == {V100}
    assert doc["throughput"]["gpuModel"] == "V100-SXM2-16GB"


def test_with_a100_and_v100_full_the_t4s_take_it(tmp_path, capsys):
    path = cluster(tmp_path, busy(A100, "0,1,2,3,4,5,6,7"), busy(V100, "0,1,2,3,4,5,6,7"))
    code, doc = place(capsys, path, 1, 4)
    assert code == 0 and nodes_of(doc) == {T4}


def test_a_job_that_needs_40gb_per_gpu_never_lands_on_v100_or_t4(tmp_path, capsys):
    code, doc = place(capsys, cluster(tmp_path), 1, 8, "--gpu-memory", "40Gi")
    assert code == 0 and nodes_of(doc) == {A100}
    code, doc = place(capsys, cluster(tmp_path, busy(A100, "0")), 1, 8, "--gpu-memory",
                      "40Gi")
    assert code == 1 and not doc["feasible"]
    assert V100 in doc["reason"] and T4 in doc["reason"]
    assert "GPU memory" in doc["reason"]
    assert set(doc["ruledOutByGpuMemory"]) == {V100, T4}


def test_gpu_memory_in_mib_as_the_label_writes_it(tmp_path, capsys):
    # 16160 MiB is exactly the V100s' label: they qualify, the T4s (15360) do not
    full = busy(A100, "0,1,2,3,4,5,6,7")
    code, doc = place(capsys, cluster(tmp_path, full), 1, 2, "--gpu-memory", "16160")
    assert code == 0 and nodes_of(doc) == {V100}
    assert doc["ruledOutByGpuMemory"] == [T4]


def test_a_node_of_unknown_gpu_memory_is_ruled_out_and_named(tmp_path, capsys):
    def unlabel(doc: dict) -> dict:
        if doc.get("kind") == "Node" and doc["metadata"]["name"] == A100:
            doc["metadata"]["labels"] = {k: v for k, v in doc["metadata"]["labels"].items()
                                         if not k.startswith("nvidia.com/")}
        return doc
    code, doc = place(capsys, cluster(tmp_path, edit=unlabel), 1, 2, "--gpu-memory", "10Gi")
    assert code == 0 and A100 not in nodes_of(doc)
    assert A100 in doc["ruledOutByGpuMemory"]
    assert "GPU memory unknown" in doc["reason"]


def test_no_gang_spans_gpu_models_unless_allowed(tmp_path, capsys):
    code, doc = place(capsys, cluster(tmp_path), 2, 8)
    assert code == 1 and not doc["feasible"]
    assert "mixGpuModels" in doc["reason"]
    code, doc = place(capsys, cluster(tmp_path), 2, 8, "--mix-gpu-models")
    assert code == 0
    # the A100 and the V100s (same rack, GPUDirect), paced by the V100s
    assert nodes_of(doc) == {A100, V100}
    assert doc["throughput"]["mixedGpuModels"] is True
    assert doc["throughput"]["tflops"] == 125
    assert doc["throughput"]["gpuModel"] == ["A100-SXM4-80GB", "V100-SXM2-16GB"]


def test_text_output_shows_the_step_and_its_parts(tmp_path, capsys):
    assert main(["place", "--cluster", str(cluster(tmp_path)), "--replicas", "1",
                 "--gpus-per-replica", "8", "--compute-share", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "GPU model: A100-SXM4-80GB" in out
    assert "compute 0.500 + all-reduce 0.500" in out
    assert "compute share 0.5)" in out


def two_a100s(tmp_path: Path) -> Path:
    """A DGX A100 80GB with 6 GPUs in use and an idle A100 40GB server (same chip and
    TFLOPS, NVSwitch both): a tie on throughput, so packing decides."""
    def forty(doc: dict) -> dict:
        if doc.get("kind") == "Node" and doc["metadata"]["name"] == V100:
            a100 = next(d for d in load_documents(str(MIXED)) if d and
                        d["metadata"]["name"] == A100)
            doc["metadata"]["annotations"] = a100["metadata"]["annotations"]
            doc["metadata"]["labels"].update({names.GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB",
                                              names.GPU_MEMORY_LABEL: "40960",
                                              names.GPU_COMPUTE_MAJOR_LABEL: "8",
                                              names.GPU_COMPUTE_MINOR_LABEL: "0"})
        return doc
    return cluster(tmp_path, busy(A100, "0,1,2,3,4,5"), edit=forty)


def test_equal_throughput_across_models_fills_the_partly_used_node(tmp_path, capsys):
    code, doc = place(capsys, two_a100s(tmp_path), 1, 2)
    assert code == 0 and nodes_of(doc) == {A100}  # not the idle A100 40GB
    code, doc = place(capsys, two_a100s(tmp_path), 1, 2, "--gpu-memory", "60Gi")
    assert code == 0 and nodes_of(doc) == {A100}
    code, doc = place(capsys, two_a100s(tmp_path), 1, 4)
    assert code == 0 and nodes_of(doc) == {V100}  # the A100 80GB has 2 free


def test_labels_of_one_model_change_nothing(tmp_path, capsys):
    """Every node one model: the same answer as with no GPU model known."""
    def v100s(doc: dict) -> dict:
        if doc.get("kind") == "Node":
            v = next(d for d in load_documents(str(MIXED)) if d and
                     d["metadata"]["name"] == V100)
            doc["metadata"]["annotations"] = v["metadata"]["annotations"]
            doc["metadata"]["labels"] = dict(v["metadata"]["labels"])
        return doc

    def bare(doc: dict) -> dict:
        doc = v100s(doc)
        if doc.get("kind") == "Node":
            doc["metadata"]["labels"] = {k: v for k, v in doc["metadata"]["labels"].items()
                                         if not k.startswith("nvidia.com/")}
        return doc
    extra = (busy(A100, "0,1,2"), busy(T4, "5"))
    for replicas, gpus in [*SHAPES, (2, 8), (3, 2)]:
        labelled = place(capsys, cluster(tmp_path, *extra, edit=v100s), replicas, gpus)[1]
        plain = place(capsys, cluster(tmp_path, *extra, edit=bare), replicas, gpus)[1]
        assert "throughput" not in plain
        assert labelled["placements"] == plain["placements"]
        assert labelled["busBandwidthGBps"] == plain["busBandwidthGBps"]


# --- the webhook's kept grouping on a mixed cluster ---------------------------------------

_GPU_MODELS = (None, MODELS["V100-SXM2-16GB"], MODELS["A100-SXM4-80GB"],
               MODELS["A100-SXM4-40GB"])


def _mixed_nodes() -> list[NodeState]:
    return ClusterSnapshot.from_file(str(MIXED)).node_states()


@st.composite
def _chains(draw: st.DrawFn) -> tuple[list[NodeState], list[list[NodeState]]]:
    import dataclasses

    base = _mixed_nodes()
    count = draw(st.integers(2, 9))
    models = draw(st.lists(st.sampled_from(_GPU_MODELS), min_size=1, max_size=3, unique=True))
    nodes = []
    for i in range(count):
        b = base[i % len(base)]
        nodes.append(dataclasses.replace(
            b, name=f"n{i}", gpu_model=draw(st.sampled_from(models)),
            used=frozenset(draw(st.sets(st.integers(0, 7), max_size=6)))))
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        step = []
        for at in draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=3,
                                unique=True)):
            change: dict = {"used": frozenset(draw(st.sets(st.integers(0, 7), max_size=8)))}
            if draw(st.booleans()):  # relabelled: another GPU model
                change["gpu_model"] = draw(st.sampled_from(models))
            step.append(dataclasses.replace(nodes[at], **change))
        steps.append(step)
    return nodes, steps


@settings(max_examples=40, deadline=None)
@given(_chains(), st.sampled_from([GangRequest(1, 1), GangRequest(1, 4), GangRequest(2, 4),
                                   GangRequest(2, 8, mix_models=True),
                                   GangRequest(1, 2, min_memory_mib=30000)]))
def test_kept_grouping_answers_as_the_plain_list_on_mixed_models(chain, gang):
    """``solve_models`` on the webhook's GroupedNodes (its parts per GPU model kept up to
    date by ``replaced``) gives what it gives on the plain node list, along replacement
    chains that change used GPUs and GPU models."""
    nodes, steps = chain
    grouped = GroupedNodes(nodes)
    grouped.by_model()  # made before the replacements: carried along the chain
    current = {n.name: n for n in nodes}
    for step in steps:
        grouped = grouped.replaced(step)
        current.update((n.name, n) for n in step)
        plain = [current[n.name] for n in nodes]
        assert list(grouped) == plain
        a, b = solve_models(grouped, gang), solve_models(plain, gang)
        assert (a.feasible, a.slots, a.bus_bandwidth_gbps, a.tflops, a.reason) == (
            b.feasible, b.slots, b.bus_bandwidth_gbps, b.tflops, b.reason)


def test_a_job_file_says_its_memory_need_and_compute_share(tmp_path, capsys):
    """``place JOB``: the job's annotations (gputopo.io/gpu-memory, gputopo.io/compute-share)
    as admission reads them; a bad value exits 2 naming the job."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "big", "namespace": "default",
                        "annotations": {names.GPU_MEMORY_ANNOTATION: "40Gi",
                                        names.COMPUTE_SHARE_ANNOTATION: "0.5"}},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": {"spec": {"containers": [
                   {"name": "pytorch", "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    code = main(["place", "--cluster", str(cluster(tmp_path, busy(A100, "0,1,2,3,4,5"))),
                 str(path), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and set(doc["ruledOutByGpuMemory"]) == {V100, T4}
    code = main(["place", "--cluster", str(cluster(tmp_path)), str(path), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and nodes_of(doc) == {A100}
    assert doc["throughput"]["computeShare"] == 0.5
    job["metadata"]["annotations"][names.COMPUTE_SHARE_ANNOTATION] = "most"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    assert main(["place", "--cluster", str(cluster(tmp_path)), str(path)]) == 2
    err = capsys.readouterr().err
    assert "gputopo.io/compute-share" in err and "PyTorchJob default/big" in err


def test_a_gang_is_rated_against_its_placement_placed_well_not_the_best_free_now():
    """H100s and A100s full, one rack of DGX-1 V100s whole: the 4 x 8 gang's answers are
    that rack (GPUDirect, 11.8 GB/s) and four L40S servers on 100 GbE TCP (3.1 GB/s).
    Rated against the better of those two, as if 11.8 GB/s were the gang placed well (a
    32nd of its best on the H100s), the compute weighed most and the L40S (362 TFLOPS)
    won; rated against its bandwidth placed well (``GangRequest.well_gbps``, set with the
    webhook's bar), the V100s."""
    from dataclasses import replace

    from bench.mixed_generations import mixed_cluster
    from gputopo.cluster.reservations import InMemoryReservationStore
    from webhook.placement.reserve import GangReserver

    empty = mixed_cluster()
    busy_nodes = {"v100-0004", "v100-0005", "v100-0006", "v100-0007"}
    nodes = [replace(n, used=frozenset(n.topology.indices))
             if n.name.startswith(("h100", "a100")) else
             replace(n, used=frozenset({0})) if n.name in busy_nodes else n for n in empty]
    gang = GangRequest(4, 8)
    plain = solve_models(nodes, gang)
    assert plain.feasible and plain.throughput["gpuModel"] == "L40S"
    barred = GangReserver(InMemoryReservationStore()).good_bar(empty, gang, 0.9)
    assert barred.well_gbps == pytest.approx(solve_models(empty, gang).bus_bandwidth_gbps)
    chosen = solve_models(nodes, barred)
    assert chosen.throughput["gpuModel"] == "V100-SXM2-32GB"
    assert {s.node for s in chosen.slots} == {"v100-0000", "v100-0001", "v100-0002",
                                              "v100-0003"}
    # one GPU model: no bandwidth placed well is worked out (nothing to rate across)
    one = [n for n in empty if n.name.startswith("v100")]
    assert GangReserver(InMemoryReservationStore()).good_bar(one, gang, 0.9).well_gbps is None


def test_models_are_compared_by_what_they_train_at_not_tensor_tflops_alone():
    """An L40S has more dense tensor TFLOPS than an A100 (362 against 312) and less than
    half its memory bandwidth: it trains slower (gputopo.topology.gpus.TENSOR_SHARE), so a
    one-GPU job on an idle cluster of both takes the A100; the record keeps the data
    sheet's TFLOPS beside the figure compared."""
    from bench.mixed_generations import mixed_cluster

    nodes = [n for n in mixed_cluster() if n.name.startswith(("a100", "l40s"))]
    assert MODELS["L40S"].tflops > MODELS["A100-SXM4-80GB"].tflops
    assert MODELS["L40S"].training_tflops < MODELS["A100-SXM4-80GB"].training_tflops
    assert MODELS["V100-SXM2-32GB"].training_tflops == MODELS["V100-SXM2-32GB"].tflops
    p = solve_models(nodes, GangRequest(1, 1))
    assert p.slots[0].node.startswith("a100")
    assert p.throughput["tflops"] == 312
    assert p.throughput["trainingTflops"] == pytest.approx(
        MODELS["A100-SXM4-80GB"].training_tflops, abs=0.1)
