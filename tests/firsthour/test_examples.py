"""Every command in the header of every ``examples/*.yaml`` runs, through the real command
line, and a table shows a row per pod the operator would create."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from gputopo.cli import main

REPO = Path(__file__).resolve().parents[2]

EXAMPLES = REPO / "examples"


def commands(path: Path) -> list[list[str]]:
    """The ``#   gputopo ...`` lines of a file's header (``\\`` continues a line)."""
    out: list[list[str]] = []
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if pending:
            text = pending + " " + text
            pending = ""
        elif not line.startswith("#   gputopo "):  # a command is indented in the comment
            continue
        text = text.split("  #")[0].strip()
        if text.endswith("\\"):
            pending = text[:-1].strip()
            continue
        out.append(shlex.split(text)[1:])
    return out


JOBS = sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.endswith("-cluster.yaml"))
#: cluster files (Nodes and bound pods) whose header commands must run too
CLUSTERS = sorted(p for p in EXAMPLES.glob("*-cluster.yaml")
                  if p.name != "tke-cluster.yaml")  # tke-taco-mpijob.yaml runs that one
#: pods per example (the others: 2)
ROWS = {"arena-tf-resnet50-mpijob.yaml": 5, "arena-tf-vgg16-mpijob.yaml": 5,
        "tke-taco-mpijob.yaml": 5, "jobset-pytorch.yaml": 4}


def test_every_job_example_has_commands():
    assert len(JOBS) == 9
    for path in JOBS:
        assert commands(path), path.name


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_every_cluster_example_command_runs(path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    argvs = commands(path)
    assert argvs, path.name
    for argv in argvs:
        code = main(argv)
        _, err = capsys.readouterr()
        assert code == 0, (argv, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("path", JOBS, ids=lambda p: p.name)
def test_every_example_command_runs(path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    for argv in commands(path):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, (argv, err)
        assert "Traceback" not in err
        if "table" in argv:
            rows = out.splitlines()[1:]
            assert len(rows) == ROWS.get(path.name, 2)
            if "--cluster" in argv or "pytorch" in path.name or "arena" in path.name or \
                    "trainjob" in path.name:
                gpu_rows = [r for r in rows if "launcher" not in r]
                assert all(r.split()[1] != "-" for r in gpu_rows), out  # every GPU pod placed
