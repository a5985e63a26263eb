"""The GPU models real fleets run beside the first table (China export variants A800/H800,
GH200, A30, A40, L20, L40, P100, RTX A6000, RTX 6000 Ada), through ``gputopo place`` and
``gputopo nodes`` on a cluster file labelled as GPU Feature Discovery labels it.

Why: a product the table does not know is rated as the slowest known model of its compute
capability's major version, so before these rows an A800 (8.0) was rated as an A10G and an
H800 (9.0) as an H20, 4-7x too slow: a Chinese cluster's best GPUs lost every job to an
A100 or a V100 (gputopo/topology/gpus.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from gputopo.cli import main
from gputopo.yamlio import load_documents

MIXED = Path(__file__).resolve().parents[2] / "examples" / "mixed-generations-cluster.yaml"
A100, V100, T4 = "dgx-a100-0", "dgx1-v100-0", "pcie-t4-0"


def _nv_all(n: int, link: str) -> str:
    """A topology annotation of ``n`` GPUs, every pair joined by ``link``."""
    links = [["X" if i == j else link for j in range(n)] for i in range(n)]
    return json.dumps({"version": 1, "gpus": [{"index": i} for i in range(n)],
                       "links": links})


def _relabelled(node: dict, name: str, product: str, memory_mib: int,
                compute: tuple[int, int], link: str | None = None) -> dict:
    out = copy.deepcopy(node)
    out["metadata"]["name"] = name
    labels = out["metadata"]["labels"]
    labels["nvidia.com/gpu.product"] = product
    labels["nvidia.com/gpu.memory"] = str(memory_mib)
    labels["nvidia.com/gpu.compute.major"] = str(compute[0])
    labels["nvidia.com/gpu.compute.minor"] = str(compute[1])
    if link is not None:
        out["metadata"]["annotations"]["gputopo.io/topology"] = _nv_all(8, link)
    return out


def _cluster(tmp_path: Path, *extra: dict, drop: tuple[str, ...] = ()) -> Path:
    docs = [d for d in load_documents(str(MIXED)) if d
            and d.get("metadata", {}).get("name") not in drop]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*docs, *extra]), encoding="utf-8")
    return path


def _a100_node() -> dict:
    return next(d for d in load_documents(str(MIXED))
                if d and d.get("kind") == "Node" and d["metadata"]["name"] == A100)


def _place(capsys, path: Path, replicas: int, gpus: int) -> dict:
    code = main(["place", "--cluster", str(path), "--replicas", str(replicas),
                 "--gpus-per-replica", str(gpus), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    return doc


def test_an_h800_server_now_beats_the_a100_server(tmp_path, capsys):
    """An HGX H800 (GFD ``NVIDIA-H800``, NVML 81559 MiB, 8 NVLinks per GPU: NV8) beside the
    DGX A100: the 8-GPU gang goes to the H800s. Rated as an H20 (the slowest known 9.x
    model, before its row) it lost to the A100s."""
    h800 = _relabelled(_a100_node(), "hgx-h800-0", "NVIDIA-H800", 81559, (9, 0), "NV8")
    doc = _place(capsys, _cluster(tmp_path, h800), 1, 8)
    assert {p["node"] for p in doc["placements"]} == {"hgx-h800-0"}
    assert doc["throughput"]["gpuModel"] == "H800-SXM5-80GB"


def test_an_a800_server_beats_the_v100s_and_ranks_as_an_a100(tmp_path, capsys):
    """A China cluster of A800s, V100s and T4s (no A100): the A800s take the gang, at the
    A100's throughput. Rated as an A10G (the slowest known 8.x model) they lost to the V100s."""
    a800 = _relabelled(_a100_node(), "hgx-a800-0", "NVIDIA-A800-SXM4-80GB", 81920, (8, 0))
    doc = _place(capsys, _cluster(tmp_path, a800, drop=(A100,)), 1, 4)
    assert {p["node"] for p in doc["placements"]} == {"hgx-a800-0"}
    assert doc["throughput"]["gpuModel"] == "A800-SXM4-80GB"


def test_nodes_names_each_fleet_model_from_its_gfd_label(tmp_path, capsys):
    """``gputopo nodes``: each GFD product string of the new rows in the GPU MODEL column,
    known (no "(unknown)"), with the memory the label gives."""
    base = _a100_node()
    fleet = {  # node -> (GFD product, gpu.memory MiB, compute capability, model shown)
        "a800-pcie": ("NVIDIA-A800-80GB-PCIe", 81920, (8, 0), "A800-PCIE-80GB"),
        "h800-pcie": ("NVIDIA-H800-PCIe", 81559, (9, 0), "H800-PCIE"),
        "gh200-96": ("NVIDIA-GH200-480GB", 97871, (9, 0), "GH200-96GB"),
        "gh200-144": ("NVIDIA-GH200-144G-HBM3e", 145920, (9, 0), "GH200-144GB"),
        "a30": ("NVIDIA-A30", 24576, (8, 0), "A30"),
        "a40": ("NVIDIA-A40-SHARED", 46068, (8, 6), "A40"),
        "l20": ("NVIDIA-L20", 46068, (8, 9), "L20"),
        "l40": ("NVIDIA-L40", 46068, (8, 9), "L40"),
        "p100": ("Tesla-P100-PCIE-16GB", 16280, (6, 0), "P100-PCIE-16GB"),
        "a6000": ("NVIDIA-RTX-A6000", 49140, (8, 6), "RTX-A6000"),
        "ada6000": ("NVIDIA-RTX-6000-Ada-Generation", 49140, (8, 9), "RTX-6000-Ada"),
    }
    extra = [_relabelled(base, n, p, m, c) for n, (p, m, c, _) in fleet.items()]
    assert main(["nodes", "--cluster", str(_cluster(tmp_path, *extra)), "-o", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for node, (_, memory, _, model) in fleet.items():
        assert rows[node]["gpu_model"] == model, node
        assert rows[node]["gpu_model_known"] is not False, node
        assert rows[node]["gpu_memory_mib"] == memory, node
