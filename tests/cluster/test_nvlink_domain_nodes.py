"""NVLink domains and GPU generations read off Node objects as GPU Feature Discovery labels
them, through a cluster file, ``gputopo place`` and ``gputopo nodes``.

The Nodes carry what GFD writes (``nvidia.com/gpu.clique=<ClusterUUID>.<CliqueId>``,
``nvidia.com/gpu.product``) and a topology annotation as ``gputopo topology parse`` makes
it from ``nvidia-smi topo -m`` (which does not say the NVLink generation).
"""

from __future__ import annotations

import json

import pytest
import yaml

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.topology.cost import ring_bus_bandwidth

UUID_A = "3143b15b-c2cd-192b-28cc-9b5473fb5b93"
UUID_B = "9d0e4f38-1c55-4c8f-a4c1-2f0b7f3c1e77"


def nv18(n: int) -> str:
    """A topology annotation of n GPUs with NV18 between every pair, no generation named
    (what an nvidia-smi capture of an HGX H100, a B200 or a GB200 tray gives)."""
    links = [["X" if a == b else "NV18" for b in range(n)] for a in range(n)]
    return json.dumps({"version": 1, "gpus": [{"index": i} for i in range(n)], "links": links})


def node(name: str, *, gpus: int = 4, product: str | None = "NVIDIA-GB200",
         clique: str | None = None, annotations: dict[str, str] | None = None) -> dict:
    labels = {names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE}
    if product:
        labels[names.GPU_PRODUCT_LABEL] = product
    if clique:
        labels[names.GPU_CLIQUE_LABEL] = clique
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {names.TOPOLOGY_ANNOTATION: nv18(gpus),
                                         names.NETWORK_GBPS_ANNOTATION: "400",
                                         names.NETWORK_TRANSPORT_ANNOTATION: "gdr",
                                         **(annotations or {})}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def states(*nodes: dict) -> dict:
    return {s.name: s for s in ClusterSnapshot.from_objects(nodes).node_states()}


def test_the_clique_label_is_the_domain_whole_value_and_the_override_wins() -> None:
    got = states(
        node("a1", clique=f"{UUID_A}.1"),
        node("b1", clique=f"{UUID_B}.1"),  # same clique id, other cluster: another domain
        node("o1", clique=f"{UUID_A}.1",
             annotations={names.NVLINK_DOMAIN_ANNOTATION: "kept-apart"}),
        node("r1", annotations={names.NVLINK_DOMAIN_DETECTED_ANNOTATION: f"{UUID_A}.2"}),
        node("p1"),
    )
    assert got["a1"].nvlink_domain == f"{UUID_A}.1"
    assert got["b1"].nvlink_domain == f"{UUID_B}.1"
    assert got["o1"].nvlink_domain == "kept-apart"
    assert got["r1"].nvlink_domain == f"{UUID_A}.2"
    assert got["p1"].nvlink_domain is None


def test_a_domain_is_ignored_where_the_nvlink_generation_is_unknown() -> None:
    """A one-GPU node without product label or named generation: its fabric bandwidth
    would be a guess, so it is placed as an island."""
    got = states(node("x", gpus=1, product=None, clique=f"{UUID_A}.1"))
    assert got["x"].nvlink_domain is None


def test_a_b200_node_labelled_by_gfd_is_predicted_at_nvlink_5() -> None:
    got = states(node("b200", gpus=8, product="NVIDIA-B200"),
                 node("h100", gpus=8, product="NVIDIA-H100-80GB-HBM3"))
    b200, h100 = got["b200"].topology, got["h100"].topology
    assert b200.generation == "nvlink5" and h100.generation == "nvlink4"
    eight = tuple(range(8))
    ratio = ring_bus_bandwidth(b200, eight) / ring_bus_bandwidth(h100, eight)
    assert ratio == pytest.approx(2.0, rel=0.01)
    # a generation named in the annotation wins over the label
    named = json.loads(nv18(8)) | {"generation": "nvlink4"}
    got = states(node("named", gpus=8, product="NVIDIA-B200",
                      annotations={names.TOPOLOGY_ANNOTATION: json.dumps(named)}))
    assert got["named"].topology.generation == "nvlink4"


def nvl72(uuid: str, clique: int, racks: str, trays: int, used: int = 0) -> list[dict]:
    out = []
    for i in range(trays):
        n = node(f"{racks}-tray-{i:02d}", clique=f"{uuid}.{clique}")
        n["metadata"]["labels"][names.RACK_LABEL] = racks
        out.append(n)
        if i < used:
            out.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"busy-{racks}-{i}", "namespace": "ml",
                                     "labels": {names.GANG_LABEL: "busy"},
                                     "annotations": {names.GPU_GROUP_ANNOTATION: "0,1,2,3"}},
                        "spec": {"nodeName": n["metadata"]["name"],
                                 "containers": [{"name": "c", "image": "x"}]}})
    return out


def test_place_and_nodes_on_two_nvl72_domains(tmp_path, capsys) -> None:
    cluster = tmp_path / "nvl72.yaml"
    cluster.write_text(yaml.safe_dump_all(nvl72(UUID_A, 1, "rack-a", 18, used=8)
                                          + nvl72(UUID_A, 2, "rack-b", 18)))
    assert main(["place", "--cluster", str(cluster), "--replicas", "16",
                 "--gpus-per-replica", "4", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {p["node"].split("-tray")[0] for p in doc["placements"]} == {"rack-b"}
    assert doc["busBandwidthGBps"] == pytest.approx(745.875)
    assert "one NVLink domain (16 trays)" in doc["reason"]

    assert main(["nodes", "--cluster", str(cluster)]) == 0
    out = capsys.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith("rack-a-tray-00"))
    assert row[-4] == f"{UUID_A}.1" and row[-1] == "ml/busy"  # then CPU, MEMORY, GANGS
    lines = [line for line in out.splitlines() if line.startswith("NVLINK DOMAIN ")]
    assert lines == [
        f"NVLINK DOMAIN {UUID_A}.1: 18 nodes, 40/72 GPUs free, largest free block 40 GPUs "
        "(10 whole free nodes)",
        f"NVLINK DOMAIN {UUID_A}.2: 18 nodes, 72/72 GPUs free, largest free block 72 GPUs "
        "(18 whole free nodes)",
    ]


def test_admission_places_a_pytorchjob_in_one_domain_and_the_record_says_so(
        tmp_path, capsys) -> None:
    """``gputopo mutate``, the admission code path: a PyTorchJob of 4 pods x 4 GPUs on two
    NVL72 domains lands on 4 trays of one domain, and each pod's placement record says so."""
    cluster = tmp_path / "nvl72.yaml"
    cluster.write_text(yaml.safe_dump_all(
        nvl72(UUID_A, 1, "rack-a", 18) + nvl72(UUID_A, 2, "rack-b", 18)
        + [{"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ml", "labels": {names.INJECT_LABEL: names.INJECT_VALUE}}}]))
    replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {
        "containers": [{"name": "pytorch", "image": "pytorch:latest",
                        "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "llm", "namespace": "ml", "uid": "u-1"},
           "spec": {"pytorchReplicaSpecs": {"Master": replica,
                                            "Worker": {**replica, "replicas": 3}}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["mutate", "--cluster", str(cluster), str(path)]) == 0
    pods = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d and d["kind"] == "Pod"]
    assert len(pods) == 4
    records = [json.loads(p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
               for p in pods]
    assert all(r["placed"] for r in records)
    assert len({r["node"].split("-tray")[0] for r in records}) == 1
    assert len({r["node"] for r in records}) == 4
    assert all("one NVLink domain (4 trays)" in r["reason"] for r in records)
    assert records[0]["busBandwidthGBps"] == pytest.approx(745.875)
