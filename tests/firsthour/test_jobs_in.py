"""``gputopo mutate`` / ``place`` on the job YAML users hold: the seeds' jobs copied from the
documents, ``-o table``, ``--namespace`` and the dry-run opt-in line, ``-`` for stdin."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import yaml

from gputopo import names
from gputopo.cli import main

REPO = Path(__file__).resolve().parents[2]

TACO = REPO / "examples" / "tke-taco-mpijob.yaml"


def _table(out: str) -> list[list[str]]:
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["POD", "NODE"]
    return [line.split() for line in lines[1:]]


def test_a_job_without_namespace_goes_to_default_and_is_opted_in_with_a_line(tmp_path,
                                                                            capsys):
    job = yaml.safe_load((REPO / "examples" / "ack-pytorch.yaml").read_text())
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(job))
    cluster = tmp_path / "cluster.yaml"  # the demo cluster without its Namespace objects
    from gputopo.cluster.demo import demo_cluster_path

    docs = [d for d in yaml.safe_load_all(demo_cluster_path().read_text())
            if d and d["kind"] != "Namespace"]
    cluster.write_text(yaml.safe_dump_all(docs))
    assert main(["mutate", "--cluster", str(cluster), "--namespace", "ml", "-o", "table",
                 str(f)]) == 0
    out, err = capsys.readouterr()
    rows = _table(out)
    assert [r[0] for r in rows] == ["ml/pytorch-dist-nccl-master-0",
                                    "ml/pytorch-dist-nccl-worker-0"]
    assert all(r[1].startswith("cn-") for r in rows)  # placed on a demo node
    assert "namespace ml is not in the inputs: treated as opted in" in err
    # --namespace-labels says otherwise: not opted in, said so, pods unchanged
    assert main(["mutate", "--cluster", str(cluster), "--namespace", "ml",
                 "--namespace-labels", "team=a", "-o", "table", str(f)]) == 0
    out, err = capsys.readouterr()
    assert all(r[1] == "-" for r in _table(out))
    assert "namespace ml is not opted in" in err


def test_a_job_and_its_pods_in_one_file_are_not_expanded_twice(capsys):
    src = REPO / "policies" / "tests" / "ack-pytorch" / "resources.yaml"
    assert main(["mutate", "-o", "table", str(src)]) == 0
    assert len(_table(capsys.readouterr().out)) == 2


def test_stdin_and_wide_yaml(monkeypatch, capsys):
    text = (REPO / "examples" / "ack-pytorch.yaml").read_text()
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["mutate", "-"]) == 0
    out = capsys.readouterr().out
    pods = [d for d in yaml.safe_load_all(out) if d]
    record = json.loads(pods[0]["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
    assert record["placed"] is True
    # the record is one line of the output, not folded
    assert any(line.strip().startswith(f"{names.PLACEMENT_ANNOTATION}: '{{")
               and line.rstrip().endswith("}'") for line in out.splitlines())


def test_place_takes_a_job_file_and_exits_1_when_it_does_not_fit(tmp_path, capsys):
    assert main(["place", str(REPO / "examples" / "ack-pytorch.yaml")]) == 0
    assert "placement on" in capsys.readouterr().out
    assert main(["place", "-o", "json", str(TACO)]) == 1  # 4 x 8 GPUs > the demo's 16
    assert json.loads(capsys.readouterr().out)["feasible"] is False
    assert main(["place", "--replicas", "1", "--gpus-per-replica", "9"]) == 1
    capsys.readouterr()
    assert main(["place"]) == 2
    assert "needs --replicas" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    from gputopo import __version__

    assert capsys.readouterr().out.strip() == f"gputopo {__version__}"


def test_the_tke_seed_as_copied_gives_one_line_naming_the_no_break_space(tmp_path, capsys):
    """The TKE document's YAML, copied as-is: 48 lines indented with U+00A0."""
    seed = Path(__file__).resolve().parents[1] / "fixtures" / "seeds" / \
        "tke-taco-mpijob-as-copied.yaml"
    text = seed.read_text(encoding="utf-8")
    block = text[text.index("apiVersion: kubeflow.org/v1"):]
    assert "\u00a0" in block
    f = tmp_path / "taco.yaml"
    f.write_text(block, encoding="utf-8")
    assert main(["mutate", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gputopo: error: {f}: line 4, column 1: U+00A0 NO-BREAK SPACE where YAML "
                   f"needs a plain space (text copied from a web page?); replace it, e.g. "
                   f"sed -i 's/\\xc2\\xa0/ /g' FILE"]
    # normalised as the message says, the job goes through
    f.write_text(block.replace("\u00a0", " "), encoding="utf-8")
    assert main(["mutate", "-o", "table", str(f)]) == 0
    assert len(_table(capsys.readouterr().out)) == 5


def test_with_platform_tke_no_taco_pod_asks_for_aliyun_gpu(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["generate", "manifests", "--platform", "tke", "-o", str(out)]) == 0
    cm = next(d for d in yaml.safe_load_all((out / "policies.yaml").read_text()) if d)
    pol = tmp_path / "pol"
    pol.mkdir()
    for name, text in cm["data"].items():
        (pol / name).write_text(text)
    assert sorted(cm["data"]) == ["tke-gpu-topology.yaml", "tke-taco-harp.yaml"]
    scheduler = (out / "scheduler.yaml").read_text()
    assert "nvidia.com/gpu" in scheduler and "aliyun.com/gpu" not in scheduler
    capsys.readouterr()
    assert main(["mutate", "--policies", str(pol), str(TACO)]) == 0
    text = capsys.readouterr().out
    pods = [d for d in yaml.safe_load_all(text) if d]
    assert len(pods) == 5 and "aliyun.com/gpu" not in text
    workers = [p for p in pods if p["metadata"]["name"].startswith("taco-bench-worker")]
    for pod in workers:  # the TACO/HARP settings still came, counted on nvidia.com/gpu
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == 8 and limits["hugepages-1Gi"] == "50Gi"
        assert pod["spec"]["containers"][0]["securityContext"]["privileged"] is True
    # the ACK profile renames (and ships no TACO policy)
    assert main(["mutate", str(TACO)]) == 0
    assert "aliyun.com/gpu" in capsys.readouterr().out


@pytest.mark.parametrize("platform", ["ack", "tke", "generic"])
def test_every_platform_generates_and_its_policies_load(tmp_path, capsys, platform):
    from generator.platforms import PLATFORMS

    out = tmp_path / platform
    assert main(["generate", "manifests", "--platform", platform, "-o", str(out)]) == 0
    cm = next(d for d in yaml.safe_load_all((out / "policies.yaml").read_text()) if d)
    assert sorted(cm["data"]) == sorted(Path(p).name for p in PLATFORMS[platform].policies)
    assert (out / "reporter.yaml").exists()
    scheduler = (out / "scheduler.yaml").read_text()
    assert PLATFORMS[platform].gpu_resource in scheduler


def test_an_unknown_platform_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "manifests", "--platform", "gke"])
    assert exc.value.code == 2


def test_install_mds_platform_table_is_the_profiles():
    from gputopo.platforms import PLATFORMS

    text = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines()
            if line.startswith("| `") and line.split("|")[1].strip().strip("`") in PLATFORMS}
    assert set(rows) == set(PLATFORMS)
    for name, p in PLATFORMS.items():
        cells = rows[name].split("|")
        assert f"`{p.gpu_resource}`" in cells[3]
        for policy in p.policies:
            assert f"`{Path(policy).stem}`" in cells[2], (name, policy)
        for agent in p.node_agents:
            assert agent in cells[4]


def test_hand_made_pods_without_owner_uids_are_identified_with_a_note(tmp_path, capsys):
    """Issue 12: hand-made pods whose ownerReference lacks the uid got an internal
    'GangKey.uid must be a non-empty string' and no placement."""
    src = REPO / "policies" / "tests" / "ack-pytorch" / "resources.yaml"
    docs = [d for d in yaml.safe_load_all(src.read_text()) if d]
    for d in docs:
        d["metadata"].pop("uid", None)
        for ref in d["metadata"].get("ownerReferences", []):
            ref.pop("uid")
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    assert main(["mutate", "-o", "table", str(f)]) == 0
    out, err = capsys.readouterr()
    assert all(r[1] != "-" for r in _table(out))
    assert "GangKey" not in err and err.count("has no uid (the API server requires one)") == 2


def test_dash_means_stdin_for_cluster_files_and_stdout_for_one_output_file(monkeypatch,
                                                                          capsys, tmp_path):
    from gputopo.cluster.demo import demo_cluster_path

    monkeypatch.setattr(sys, "stdin", io.StringIO(demo_cluster_path().read_text()))
    assert main(["nodes", "--cluster", "-"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    monkeypatch.setattr(sys, "stdin", io.StringIO(demo_cluster_path().read_text()))
    assert main(["place", "--cluster", "-", "--replicas", "2", "--gpus-per-replica", "4"]) == 0
    capsys.readouterr()
    assert main(["generate", "scheduler-config", "-o", "-"]) == 0
    assert "KubeSchedulerConfiguration" in capsys.readouterr().out
    assert not (tmp_path / "-").exists()
    assert main(["generate", "manifests", "-o", "-"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "writes several files: give a directory, not -")


def test_a_key_written_twice_is_refused_with_its_line(tmp_path, capsys):
    """PyYAML would keep the last of two equal keys without a word; kubectl refuses such a
    file, and so does every gputopo command (one line naming the file, line and key)."""
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team}\n"
                   "spec:\n  containers:\n  - name: c\n    image: x\n    image: y\n",
                   encoding="utf-8")
    assert main(["mutate", str(pod)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gputopo: error: {pod}: line 8: not valid YAML: found duplicate key 'image'"]
    pol = tmp_path / "pol"
    pol.mkdir()
    shipped = Path(__file__).resolve().parents[2] / "policies"
    first = sorted(shipped.glob("*.yaml"))[0]
    text = first.read_text(encoding="utf-8")
    (pol / first.name).write_text(
        text.replace("\nspec:\n", "\nspec:\n  priority: 1\n  priority: 2\n", 1),
        encoding="utf-8")
    good = tmp_path / "good.yaml"
    good.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team}\n"
                    "spec:\n  containers:\n  - {name: c, image: x}\n", encoding="utf-8")
    assert main(["mutate", "--policies", str(pol), str(good)]) == 2
    assert "found duplicate key 'priority'" in capsys.readouterr().err
    # a merge key's values may be overridden, as YAML intends
    merged = tmp_path / "merged.yaml"
    merged.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  labels: &l {a: '1'}\n"
                      "  annotations: {<<: *l, a: '2'}\n  name: p\n  namespace: team\n"
                      "spec:\n  containers:\n  - {name: c, image: x}\n", encoding="utf-8")
    assert main(["mutate", str(merged)]) == 0
