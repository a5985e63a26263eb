"""The README's claims hold: its minimum Kubernetes version is install.md's, its benchmark
figures are what docs/benchmarks.md says *now* (read at test time, so a helper who
re-measures only has to update the README sentence), and its "what you will see" block is
what the command prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from gputopo.cli import main

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
BENCH = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")


def _header(text: str, header_start: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(header_start))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(text: str, header_start: str) -> list[list[str]]:
    """Rows (cells) of the first markdown table whose header starts with ``header_start``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_minimum_kubernetes_version_is_install_mds():
    install = (REPO / "docs" / "install.md").read_text(encoding="utf-8")
    want = re.search(r"\*\*Kubernetes (\d+\.\d+) or newer", install).group(1)
    assert re.search(r"Kubernetes \*\*(\d+\.\d+) or newer\*\*", README).group(1) == want


def test_readme_figures_are_docs_benchmarks_figures():
    ratios = {r[0]: r for r in _table(BENCH, "| gputopo / baseline | throughput |")}
    m = re.search(r"(\d+)-node mixed cluster replaying ([\d,]+) jobs, (\d+) % more predicted "
                  r"throughput than NVIDIA's\s+go-gpuallocator and (\d+) % more than the "
                  r"default scheduler, with ([\d.]+)x and ([\d.]+)x their\s+stranded free "
                  r"GPUs; solver p99 ([\d.]+)-([\d.]+) ms at 1,000 nodes", README)
    assert m, "the README's benchmark sentence changed shape"
    nodes, jobs, vs_gga, vs_default, str_gga, str_default, p99_lo, p99_hi = m.groups()
    assert f"{nodes} nodes" in BENCH and f"({jobs} jobs" in BENCH
    assert int(vs_gga) == round((float(ratios["go-gpuallocator"][1]) - 1) * 100)
    assert int(vs_default) == round((float(ratios["default-scheduler"][1]) - 1) * 100)
    stranded = _header(BENCH, "| gputopo / baseline | throughput |").index("stranded GPUs")
    assert float(str_gga) == float(ratios["go-gpuallocator"][stranded])
    assert float(str_default) == float(ratios["default-scheduler"][stranded])
    latency = _table(BENCH, "| nodes | gang | GPUs | p50 ms | p99 ms |")
    p99 = [float(r[4]) for r in latency if r[0] == "1000"]
    assert (float(p99_lo), float(p99_hi)) == (min(p99), max(p99))


def test_what_you_will_see_is_what_the_command_prints(capsys, monkeypatch):
    m = re.search(r"<!-- what-you-will-see: (.+?) -->\n```text\n(.*?)```", README, re.S)
    assert m
    command, block = m.group(1), m.group(2).splitlines()
    assert len(block) == 5
    monkeypatch.chdir(REPO)
    assert main(shlex.split(command)[1:]) == 0
    printed = capsys.readouterr().out.splitlines()
    for line in block:
        assert line in printed, line
