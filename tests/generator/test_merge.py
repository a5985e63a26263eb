"""``generate scheduler-config --merge-into FILE``: the profile joins an existing config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from generator.scheduler_schema import validate_config
from gputopo import yamlio
from gputopo.names import SCHEDULER_NAME

EXISTING = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
leaderElection:
  leaderElect: true
  resourceLock: leases
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      disabled:
      - name: ImageLocality
- schedulerName: no-scoring
  plugins:
    preScore:
      disabled:
      - name: '*'
    score:
      disabled:
      - name: '*'
"""


def write(tmp_path: Path, text: str, name: str = "existing.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def merge(run_cli, src: Path, out: Path, *flags: str) -> tuple[int, str, dict[str, Any] | None]:
    code, _, err = run_cli("generate", "scheduler-config", "--merge-into", str(src),
                           "-o", str(out), *flags)
    doc = yamlio.load_documents(out)[0] if code == 0 else None
    return code, err, doc


def test_conflicting_queue_sort_fails_clearly(run_cli, tmp_path):
    src = write(tmp_path, EXISTING)
    code, err, _ = merge(run_cli, src, tmp_path / "out.yaml")
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"gputopo: error: {src}: profiles[0] (default-scheduler): ")
    assert "--align-queue-sort" in line
    assert not (tmp_path / "out.yaml").exists()


def test_align_queue_sort_gives_every_profile_coscheduling(run_cli, tmp_path):
    src = write(tmp_path, EXISTING)
    code, err, doc = merge(run_cli, src, tmp_path / "out.yaml", "--align-queue-sort")
    assert code == 0, err
    names = [p["schedulerName"] for p in doc["profiles"]]
    assert names == ["default-scheduler", "no-scoring", SCHEDULER_NAME]
    sorts = [p["plugins"]["queueSort"] for p in doc["profiles"]]
    assert all(s == sorts[0] for s in sorts)
    assert sorts[0]["enabled"] == [{"name": "Coscheduling"}]
    # what the operator had is kept
    assert doc["clientConnection"] == {"kubeconfig": "/etc/kubernetes/scheduler.conf"}
    assert doc["profiles"][0]["plugins"]["score"] == {"disabled": [{"name": "ImageLocality"}]}
    assert validate_config(doc) == []


def test_merge_is_idempotent_and_replaces_the_old_profile(run_cli, tmp_path):
    src = write(tmp_path, EXISTING)
    first = tmp_path / "first.yaml"
    assert merge(run_cli, src, first, "--align-queue-sort")[0] == 0
    code, err, doc = merge(run_cli, first, tmp_path / "second.yaml", "--gpu-weight", "50")
    assert code == 0, err
    ours = [p for p in doc["profiles"] if p["schedulerName"] == SCHEDULER_NAME]
    assert len(ours) == 1
    resources = ours[0]["pluginConfig"][1]["args"]["scoringStrategy"]["resources"]
    assert resources[0]["weight"] == 50
    again = merge(run_cli, tmp_path / "second.yaml", tmp_path / "third.yaml", "--gpu-weight",
                  "50")[2]
    assert again == doc


def test_changed_gang_timeout_conflicts_with_aligned_profiles(run_cli, tmp_path):
    src = write(tmp_path, EXISTING)
    first = tmp_path / "first.yaml"
    assert merge(run_cli, src, first, "--align-queue-sort")[0] == 0
    code, err, _ = merge(run_cli, first, tmp_path / "out.yaml", "--permit-wait-seconds", "30")
    assert code == 2
    assert "Coscheduling args differ" in err
    code, err, doc = merge(run_cli, first, tmp_path / "out.yaml", "--permit-wait-seconds", "30",
                           "--align-queue-sort")
    assert code == 0, err
    waits = {c["args"]["permitWaitingTimeSeconds"]
             for p in doc["profiles"] for c in p["pluginConfig"] if c["name"] == "Coscheduling"}
    assert waits == {30}


def test_file_without_profiles_keeps_default_scheduler(run_cli, tmp_path):
    src = write(tmp_path, "apiVersion: kubescheduler.config.k8s.io/v1beta3\n"
                          "kind: KubeSchedulerConfiguration\n")
    code, err, doc = merge(run_cli, src, tmp_path / "out.yaml", "--align-queue-sort")
    assert code == 0, err
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"
    assert [p["schedulerName"] for p in doc["profiles"]] == ["default-scheduler", SCHEDULER_NAME]
    assert validate_config(doc) == []


def test_invalid_existing_config_is_refused_naming_the_file(run_cli, tmp_path):
    src = write(tmp_path, EXISTING.replace("ImageLocality", "ImageLocalty"))
    code, err, _ = merge(run_cli, src, tmp_path / "out.yaml", "--align-queue-sort")
    assert code == 2
    assert f"{src}: " in err and "ImageLocalty" in err


def test_not_a_scheduler_config(run_cli, tmp_path):
    src = write(tmp_path, "apiVersion: v1\nkind: ConfigMap\n")
    code, err, _ = merge(run_cli, src, tmp_path / "out.yaml")
    assert code == 2
    assert "not a KubeSchedulerConfiguration" in err


def test_missing_file(run_cli, tmp_path):
    code, err, _ = merge(run_cli, tmp_path / "nope.yaml", tmp_path / "out.yaml")
    assert code == 2
    assert "no such file" in err


def test_queue_sort_enabled_that_is_not_a_list_is_refused_in_one_line(run_cli, tmp_path):
    src = write(tmp_path, EXISTING.replace(
        "    score:\n      disabled:\n      - name: ImageLocality",
        "    queueSort:\n      enabled: 3", 1))
    code, err, _ = merge(run_cli, src, tmp_path / "out.yaml", "--align-queue-sort")
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert f"{src}: " in line and "queueSort.enabled: must be a list" in line


def test_align_queue_sort_keeps_a_profile_whose_plugins_are_null(run_cli, tmp_path):
    # `plugins: null` is valid (kube-scheduler defaults a nil plugin set)
    src = write(tmp_path, EXISTING.replace(
        "  plugins:\n    score:\n      disabled:\n      - name: ImageLocality",
        "  plugins: null", 1))
    code, err, doc = merge(run_cli, src, tmp_path / "out.yaml", "--align-queue-sort")
    assert code == 0, err
    default = doc["profiles"][0]
    assert default["schedulerName"] == "default-scheduler"
    assert default["plugins"]["queueSort"]["enabled"] == [{"name": "Coscheduling"}]
    assert validate_config(doc) == []
