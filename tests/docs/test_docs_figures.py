"""The figures the docs quote are what the code prints now.

- Every ``<!-- what-you-will-see: COMMAND -->`` block (README.md, docs/*.md): the fenced
  ``text`` block or the Markdown table right after the marker is printed, line for line,
  by COMMAND (``gputopo ...`` in process; ``python bench/...`` as a process).
- docs/benchmarks.md's queue-replay table: each row is re-run with its own command (the
  replay is simulated time, deterministic, under a second).
- docs/placement.md's example placement record: its bus bandwidth is the record
  ``gputopo mutate`` writes for that job and replica.

Why: a figure that drifts from the code misleads more than a missing one, and nothing else
fails when the cost model or a default changes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from docs_text import PAGES, REPO, rel

from gputopo.cli import main

_MARKER = re.compile(r"<!-- what-you-will-see: ([^\n]+?) -->\n"
                     r"(```text\n(.*?)```|((?:\|[^\n]*\n)+))", re.S)


def _blocks() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in PAGES:
        for m in _MARKER.finditer(page.read_text(encoding="utf-8")):
            lines = (m.group(3) if m.group(3) is not None else m.group(4)).splitlines()
            found.append((rel(page), m.group(1).strip(), [line.rstrip() for line in lines]))
    return found


BLOCKS = _blocks()


def _run(command: str, capsys: pytest.CaptureFixture[str], monkeypatch) -> list[str]:
    argv = shlex.split(command)
    if argv[0] == "gputopo":
        monkeypatch.chdir(REPO)
        assert main(argv[1:]) == 0, command
        out = capsys.readouterr().out
    else:
        assert argv[:2] == ["python", "bench/" + argv[1].removeprefix("bench/")], command
        out = _bench(tuple(argv[1:]))
    return [line.rstrip() for line in out.splitlines()]


@functools.cache
def _bench(argv: tuple[str, ...]) -> str:
    """A bench script's stdout (a process: the scripts are not importable modules).
    Cached: the two rows of one queue replay share a run (~0.7 s a process here)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-600:]
    return done.stdout


def test_the_markers_are_found() -> None:
    pages = {page for page, _, _ in BLOCKS}
    assert {"README.md", "docs/benchmarks.md"} <= pages


@pytest.mark.parametrize(("page", "command", "block"), BLOCKS,
                         ids=[f"{p}: {c}" for p, c, _ in BLOCKS])
def test_what_you_will_see_is_what_the_command_prints(page, command, block, capsys,
                                                      monkeypatch) -> None:
    printed = _run(command, capsys, monkeypatch)
    missing = [line for line in block if line not in printed]
    assert missing == [], f"{page}: `{command}` no longer prints these lines"


def _queue_table() -> list[dict[str, str]]:
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("| load | seed | whenFull |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")),
                             strict=True)))
    return rows


QUEUE_ROWS = _queue_table()


def test_the_queue_replay_table_says_its_command() -> None:
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert ("`python bench/queue_replay.py --jobs 300 --load L --seed S --markdown`" in text)
    assert len(QUEUE_ROWS) == 12


@pytest.mark.parametrize("row", QUEUE_ROWS,
                         ids=[f"load {r['load']} seed {r['seed']} {r['whenFull']}"
                              for r in QUEUE_ROWS])
def test_a_queue_replay_row_is_what_its_command_prints(row: dict[str, str]) -> None:
    out = _bench(("bench/queue_replay.py", "--jobs", "300", "--load", row["load"],
                  "--seed", row["seed"], "--markdown"))
    table = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
             if line.startswith("|")]
    header, body = table[0], table[2:]
    printed = dict(zip(header, next(r for r in body if r[0] == row["whenFull"]), strict=True))
    shown = {k: v for k, v in row.items() if k not in ("load", "seed")}
    assert shown == printed


def test_placement_mds_example_record_is_what_mutate_writes(capsys, monkeypatch) -> None:
    text = (REPO / "docs" / "placement.md").read_text(encoding="utf-8")
    section = text.split("### The placement record", 1)[1]
    example = re.search(r"```json\n(.*?)```", section, re.S).group(1)
    job = re.search(r'"job": "(\w+) default/([\w-]+)"', example).groups()
    replica = re.search(r'"replica": "([\w/]+)"', example).group(1)
    documented = float(re.search(r'"busBandwidthGBps": ([\d.]+)', example).group(1))
    node = re.search(r'"node": "([\w.-]+)"', example).group(1)
    example_file = {"tensorflow-topo-4-vgg16": "examples/arena-tf-vgg16-mpijob.yaml"}[job[1]]
    monkeypatch.chdir(REPO)
    assert main(["mutate", example_file]) == 0
    records = [json.loads(doc["metadata"]["annotations"]["gputopo.io/placement"])
               for doc in yaml.safe_load_all(capsys.readouterr().out)
               if doc and "gputopo.io/placement" in doc["metadata"].get("annotations", {})]
    (record,) = [r for r in records if r["replica"] == replica]
    assert record["job"] == f"{job[0]} default/{job[1]}"
    assert (record["busBandwidthGBps"], record["node"]) == (documented, node)
