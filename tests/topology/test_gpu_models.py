"""The GPU model table and how a node's labels name a model (gputopo/topology/gpus.py,
gputopo/cluster/gpu_facts.py). Product strings as GPU Feature Discovery writes them
(k8s-device-plugin internal/lm/resource.go: the NVML name with spaces as dashes) and as
NVML itself returns them."""

from __future__ import annotations

import json

import pytest

from gputopo.cluster.gpu_facts import gpu_identities_of, gpu_model_of
from gputopo.topology.gpus import MODELS, GpuIdentity, gpu_model, normal_bus_id


@pytest.mark.parametrize(("product", "name"), [
    ("Tesla-V100-SXM2-16GB", "V100-SXM2-16GB"),
    ("Tesla-V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("Tesla-V100-PCIE-16GB", "V100-PCIE-16GB"),
    ("Tesla-T4", "T4"),
    ("NVIDIA-A10", "A10"),
    ("NVIDIA-A10G", "A10G"),
    ("NVIDIA-L4", "L4"),
    ("NVIDIA-L40S", "L40S"),
    ("NVIDIA-A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("NVIDIA-A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("NVIDIA-A100-PCIE-40GB", "A100-PCIE-40GB"),
    ("NVIDIA-A100-80GB-PCIe", "A100-PCIE-80GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),  # NVML's own spelling
    ("NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"),
    ("NVIDIA-H100-PCIe", "H100-PCIE"),
    ("NVIDIA-H100-NVL", "H100-NVL"),
    ("NVIDIA-H200", "H200"),
    ("NVIDIA-H200-NVL", "H200-NVL"),  # the PCIe card: 835 dense TFLOPS, not the SXM's 989
    ("NVIDIA H200 NVL", "H200-NVL"),
    ("NVIDIA-H20", "H20"),
    ("NVIDIA-B200", "B200"),
    ("NVIDIA-GB200", "GB200"),
    ("NVIDIA-GB300", "GB300"),
    ("NVIDIA-A100-SXM4-80GB-SHARED", "A100-SXM4-80GB"),  # GFD's time-slicing suffix
    # the models real fleets run beside those: GFD's form, then NVML's own spelling
    ("NVIDIA-A800-SXM4-80GB", "A800-SXM4-80GB"),
    ("NVIDIA A800-SXM4-80GB", "A800-SXM4-80GB"),
    ("NVIDIA-A800-80GB-PCIe", "A800-PCIE-80GB"),
    ("NVIDIA A800 80GB PCIe", "A800-PCIE-80GB"),
    ("NVIDIA-A800-40GB-Active", "A800-40GB"),
    ("NVIDIA-A800-SXM4-80GB-SHARED", "A800-SXM4-80GB"),
    ("NVIDIA-A800-SXM4-80GB-MIG-1g.10gb", "A800-SXM4-80GB"),
    ("NVIDIA-H800", "H800-SXM5-80GB"),
    ("NVIDIA H800", "H800-SXM5-80GB"),
    ("NVIDIA-H800-80GB-HBM3", "H800-SXM5-80GB"),
    ("NVIDIA-H800-PCIe", "H800-PCIE"),
    ("NVIDIA H800 PCIe", "H800-PCIE"),
    ("NVIDIA-GH200-480GB", "GH200-96GB"),  # 480 GB is Grace's LPDDR5X, not the GPU's
    ("NVIDIA GH200 480GB", "GH200-96GB"),
    ("NVIDIA-GH200-120GB", "GH200-96GB"),
    ("NVIDIA-GH200-144G-HBM3e", "GH200-144GB"),
    ("NVIDIA GH200 144G HBM3e", "GH200-144GB"),
    ("NVIDIA-A30", "A30"),
    ("NVIDIA A30", "A30"),
    ("NVIDIA-A40", "A40"),
    ("NVIDIA-A40-SHARED", "A40"),
    ("NVIDIA-L20", "L20"),
    ("NVIDIA L20", "L20"),
    ("NVIDIA-L40", "L40"),
    ("NVIDIA L40", "L40"),
    ("Tesla-P100-PCIE-16GB", "P100-PCIE-16GB"),
    ("Tesla P100-PCIE-16GB", "P100-PCIE-16GB"),
    ("Tesla-P100-PCIE-12GB", "P100-PCIE-12GB"),
    ("Tesla-P100-SXM2-16GB", "P100-SXM2-16GB"),
    ("Tesla P100-SXM2-16GB", "P100-SXM2-16GB"),
    ("NVIDIA-RTX-A6000", "RTX-A6000"),
    ("NVIDIA RTX A6000", "RTX-A6000"),
    ("NVIDIA-RTX-6000-Ada-Generation", "RTX-6000-Ada"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
    ("NVIDIA-RTX-6000-Ada-Generation-SHARED", "RTX-6000-Ada"),
])
def test_products_name_their_model(product: str, name: str) -> None:
    model = gpu_model(product)
    assert model.name == name and model.known


def test_every_row_cites_its_source_and_the_generations_are_ordered() -> None:
    for model in MODELS.values():
        assert "data sheet" in model.source or "product brief" in model.source \
            or "AWS" in model.source or "reported" in model.source, model.name
    order = ["T4", "V100-SXM2-16GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "B200"]
    assert [MODELS[n].tflops for n in order] == sorted(MODELS[n].tflops for n in order)


def test_like_named_families_stay_apart() -> None:
    """A family is a whole word (or a run of words): L40 is not L40S, A10 not A100 nor A30,
    H20 not H200 nor H800, GH200 not H200; "RTX 6000 Ada" is neither the Turing "Quadro RTX
    6000" nor the Blackwell "RTX PRO 6000", which the table does not know."""
    names = {p: gpu_model(p).name for p in (
        "NVIDIA-L40", "NVIDIA-L40S", "NVIDIA-A10", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A30",
        "NVIDIA-H20", "NVIDIA-H200", "NVIDIA-H800", "NVIDIA-GH200-480GB")}
    assert len(set(names.values())) == len(names), names
    for other in ("Quadro-RTX-6000", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"):
        assert not gpu_model(other).known, other


def test_the_china_variants_compute_as_the_gpus_they_are_cut_from() -> None:
    """A800 and H800 keep the A100's and H100's tensor throughput and memory (only NVLink
    and FP64 are cut): rated by compute capability alone they were an A10G and an H20."""
    assert gpu_model("NVIDIA-A800-SXM4-80GB").training_tflops == \
        MODELS["A100-SXM4-80GB"].training_tflops
    assert gpu_model("NVIDIA-H800").training_tflops == MODELS["H100-SXM5-80GB"].training_tflops
    assert gpu_model("NVIDIA-H800-PCIe").training_tflops == MODELS["H100-PCIE"].training_tflops
    assert gpu_model("NVIDIA-A800-SXM4-80GB").tflops > 4 * MODELS["A10G"].tflops
    assert gpu_model("NVIDIA-H800").tflops > 6 * MODELS["H20"].tflops


def test_pascal_is_rated_by_its_fp16_peak_and_unknown_pascal_by_the_slowest() -> None:
    """P100 has no tensor cores: its row is the data sheet's FP16 peak, so it trains below a
    T4; a Pascal board the table does not know (P40, 6.1) is rated as the slowest P100."""
    p100 = gpu_model("Tesla-P100-SXM2-16GB")
    assert p100.compute == (6, 0) and p100.tflops < MODELS["T4"].tflops
    assert p100.training_tflops < MODELS["T4"].training_tflops
    p40 = gpu_model("Tesla-P40", 24451, (6, 1))
    assert not p40.known
    assert p40.tflops == min(m.tflops for m in MODELS.values() if m.compute[0] == 6)


def test_the_memory_label_picks_the_variant_and_wins_over_the_table() -> None:
    assert gpu_model("NVIDIA-A100-SXM4", 40960).name == "A100-SXM4-40GB"
    assert gpu_model("NVIDIA-A100-SXM4", 81920).name == "A100-SXM4-80GB"
    assert gpu_model("NVIDIA-H100-80GB-HBM3", 81559).memory_mib == 81559
    # GH200: the name's "480GB" is the CPU's memory; the label says which GPU memory it has
    assert gpu_model("NVIDIA-GH200-480GB", 97871).name == "GH200-96GB"
    assert gpu_model("NVIDIA-GH200", 145920).name == "GH200-144GB"
    assert gpu_model("Tesla-P100-PCIE", 12198).name == "P100-PCIE-12GB"
    assert gpu_model("Tesla-P100-PCIE", 16280).name == "P100-PCIE-16GB"


def test_an_unknown_product_is_rated_as_the_slowest_of_its_compute_capability() -> None:
    ampere = gpu_model("NVIDIA-RTX-A4000", 16376, (8, 6))
    assert not ampere.known and ampere.name == "NVIDIA-RTX-A4000"
    assert ampere.tflops == min(m.tflops for m in MODELS.values() if m.compute[0] == 8)
    assert ampere.memory_mib == 16376
    newer = gpu_model("NVIDIA-RTX-PRO-6000", None, (12, 0))
    assert newer.tflops == MODELS["T4"].tflops and "12.0" in newer.source


def _node(labels: dict[str, str], annotation: dict | None = None) -> dict:
    meta: dict = {"name": "n", "labels": labels}
    if annotation is not None:
        meta["annotations"] = {"gputopo.io/topology": json.dumps(annotation)}
    return {"metadata": meta}


def test_gfd_labels_are_read_before_the_reporters_annotation() -> None:
    reporter = {"gpus": [{"index": 0, "name": "Tesla T4", "memoryMiB": 15360,
                          "uuid": "GPU-aaaa", "pciBusId": "00000000:3B:00.0"}],
                "links": [["X"]]}
    both = _node({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                  "nvidia.com/gpu.memory": "81920"}, reporter)
    assert gpu_model_of(both).name == "A100-SXM4-80GB"
    reporter_only = _node({}, reporter)
    assert gpu_model_of(reporter_only).name == "T4"
    assert gpu_model_of(reporter_only).memory_mib == 15360
    assert gpu_identities_of(reporter_only) == (GpuIdentity(0, "GPU-aaaa", "0000:3b:00.0"),)
    assert gpu_model_of(_node({})) is None


def test_bus_ids_take_dras_four_digit_domain() -> None:
    assert normal_bus_id("00000000:07:00.0") == "0000:07:00.0"
    assert normal_bus_id("0000:B7:00.0") == "0000:b7:00.0"


def test_the_reporter_names_the_gpu_model_where_gfd_does_not_run(tmp_path) -> None:
    """``topology report`` from recorded NVML answers: each ``gpus[i]`` carries NVML's
    name and total memory, and a node without GFD labels is rated as that model."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    data = json.loads((repo / "tests" / "topology" / "data" / "dgx1-v100-nvml.json")
                      .read_text())
    for dev in data["devices"]:
        dev["name"], dev["memoryMiB"] = "Tesla V100-SXM2-16GB", 16160
    rec = tmp_path / "nvml.json"
    rec.write_text(json.dumps(data))
    p = subprocess.run([sys.executable, "-m", "gputopo", "topology", "report",
                        "--nvml-recorded", str(rec), "--node", "n1", "--dry-run",
                        "--transport", "off"], capture_output=True, text=True, cwd=repo,
                       env={**os.environ, "PYTHONPATH": str(repo)}, timeout=60)
    assert p.returncode == 0, p.stderr
    ann = json.loads(p.stdout)["patch"]["metadata"]["annotations"]
    gpus = json.loads(ann["gputopo.io/topology"])["gpus"]
    assert {(g["name"], g["memoryMiB"]) for g in gpus} == {("Tesla V100-SXM2-16GB", 16160)}
    model = gpu_model_of({"metadata": {"name": "n1", "annotations": ann}})
    assert model is not None and model.name == "V100-SXM2-16GB"
    assert model.memory_mib == 16160 and model.known
    # a recording without them (older reporters) adds neither
    for dev in data["devices"]:
        del dev["name"], dev["memoryMiB"]
    rec.write_text(json.dumps(data))
    p = subprocess.run([sys.executable, "-m", "gputopo", "topology", "report",
                        "--nvml-recorded", str(rec), "--node", "n1", "--dry-run",
                        "--transport", "off"], capture_output=True, text=True, cwd=repo,
                       env={**os.environ, "PYTHONPATH": str(repo)}, timeout=60)
    ann = json.loads(p.stdout)["patch"]["metadata"]["annotations"]
    assert gpu_model_of({"metadata": {"name": "n1", "annotations": ann}}) is None
