"""`gputopo topology parse | explain | report` through the real command line entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputopo import names
from gputopo.cli import main
from gputopo.topology.ack_report import report_configmap
from gputopo.topology.model import Topology

from .conftest import DATA, FIXTURE_FILES, FIXTURES, load


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_parse_prints_the_annotation(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topology", "parse", str(FIXTURES / name))
    assert code == 0
    assert Topology.from_annotation(out) == load(name)


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_explain_every_fixture(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "topology",
        "explain",
        "--topology",
        str(FIXTURES / name),
        "--gpus",
        "0,1,2,3",
        "-o",
        "json",
    )
    assert code == 0
    doc = json.loads(out)
    assert sorted(doc["ring"]) == [0, 1, 2, 3]
    assert doc["best"]["busBandwidthGBps"] >= doc["busBandwidthGBps"] > 0


def test_explain_text_names_the_bottleneck_and_a_better_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys,
        "topology",
        "explain",
        "--topology",
        str(FIXTURES / "dgx1-v100.txt"),
        "--gpus",
        "0,1,2,5",
    )
    assert code == 0
    assert "bottleneck: " in out and "SYS" in out
    assert "better: GPUs 0,1,2,3" in out


def test_explain_reads_annotation_json_and_ack_configmaps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topo = load("dgx-a100.txt")
    ann = tmp_path / "a.json"
    ann.write_text(topo.to_json())
    cm = tmp_path / "cm.json"
    cm.write_text(json.dumps(report_configmap(topo, node="n1")))
    results = []
    for f in (ann, cm):
        code, out, _ = run(
            capsys, "topology", "explain", "--topology", str(f), "--gpus", "3,6", "-o", "json"
        )
        assert code == 0
        results.append(json.loads(out)["busBandwidthGBps"])
    assert results[0] == results[1]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["topology", "parse", "/nonexistent/topo.txt"], "/nonexistent/topo.txt"),
        (["topology", "explain", "--topology", "{fix}", "--gpus", "0,9"], "GPU 9"),
        (["topology", "explain", "--topology", "{fix}", "--gpus", "a,b"], "--gpus"),
        (["topology", "parse", "{bad}"], "line 2"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNVLINK\nGPU1\tNV1\t X \n")
    argv = [a.format(fix=FIXTURES / "dgx1-v100.txt", bad=bad) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("gputopo: error: ") and words in err


def test_report_dry_run_from_recorded_nvml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "topology",
        "report",
        "--nvml-recorded",
        str(DATA / "dgx1-v100-nvml.json"),
        "--node",
        "gpu-node-1",
        "--dry-run",
        "--transport",  # the topology only: the host's sysfs is no business of this test
        "off",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["node"] == "gpu-node-1"
    value = doc["patch"]["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION]
    assert Topology.from_annotation(value).links == load("dgx1-v100.txt").links


def test_report_dry_run_from_nvidia_smi_uses_node_name_env(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    code, out, _ = run(
        capsys,
        "topology",
        "report",
        "--nvidia-smi",
        str(FIXTURES / "hopper-nv18.tsv"),
        "--dry-run",
        "--transport",
        "off",
    )
    assert code == 0
    assert json.loads(out)["node"] == "from-env"


def test_report_without_node_name_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    code, _, err = run(
        capsys, "topology", "report", "--nvidia-smi", str(FIXTURES / "dgx1-v100.txt"), "--dry-run"
    )
    assert code == 2 and "NODE_NAME" in err


@pytest.mark.parametrize(("transport", "share"), [("tcp", 0.25), ("rdma", 0.5), ("gdr", 0.94)])
def test_explain_uses_the_transport_s_share(
    capsys: pytest.CaptureFixture[str], transport: str, share: float
) -> None:
    code, out, _ = run(capsys, "topology", "explain", "--topology",
                       str(FIXTURES / "dgx1-v100.txt"), "--gpus", "0,1", "--network-gbps",
                       "100", "--transport", transport, "-o", "json")
    assert code == 0
    net = json.loads(out)["network"]
    assert net["transport"] == transport and net["transportEfficiency"] == share
    assert net["effectiveGbps"] == pytest.approx(100 * share)


def test_explain_shows_the_step_and_its_parts(capsys: pytest.CaptureFixture[str]) -> None:
    """The step of a job on a scattered set against the node's best set of that size: the
    compute is the same, the all-reduce takes bus-bandwidth-many times longer."""
    code, out, _ = run(capsys, "topology", "explain", "--topology",
                       str(FIXTURES / "dgx1-v100.txt"), "--gpus", "0,1,2,5",
                       "--gpu-model", "Tesla-V100-SXM2-16GB", "--compute-share", "0.8",
                       "-o", "json")
    assert code == 0
    doc = json.loads(out)
    step = doc["step"]
    ratio = doc["best"]["busBandwidthGBps"] / doc["busBandwidthGBps"]
    assert step["compute"] == 0.8
    assert step["communication"] == pytest.approx(0.2 * ratio, abs=1e-3)
    assert step["model"] == "V100-SXM2-16GB" and step["tflops"] == 125
    code, out, _ = run(capsys, "topology", "explain", "--topology",
                       str(FIXTURES / "dgx1-v100.txt"), "--gpus", "0,1,2,3")
    assert "step: 1.000 of the same job on this node's best set = compute 0.960 + " \
           "all-reduce 0.040 (compute share 0.96, the default)" in out
    code, _, err = run(capsys, "topology", "explain", "--topology",
                       str(FIXTURES / "dgx1-v100.txt"), "--gpus", "0,1",
                       "--compute-share", "1.5")
    assert code == 2 and "--compute-share" in err
