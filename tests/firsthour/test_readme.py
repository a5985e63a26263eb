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


def _cell(rows: list[list[str]], first: str, second: str, column: int) -> str:
    return next(r for r in rows if r[0] == first and r[1] == second)[column]


def test_readme_figures_are_docs_benchmarks_figures():
    text = " ".join(README.split())  # the sentences may wrap anywhere
    m = re.search(
        r"median \(range\) over (\d+) held-out seeds; .*? on a (\d+)-node mixed cluster at "
        r"load ([\d.]+), .*?gputopo's p95 job completion time is (\S+ \(\S+\)) that of Kueue "
        r"TAS set up by an admin who knows the hardware .*?It is (\S+ \(\S+\)) Kueue's with "
        r"the fastest flavor first and (\S+ \(\S+\)) Kueue's configured blind; the lowest "
        r"p95 or within 5 % of it on (\d+) of (\d+) seed-loads", text)
    assert m, "the README's cluster replay sentence changed shape"
    seeds, nodes, load, vs_admin, vs_fast, vs_blind, level, of = m.groups()
    assert f"## Cluster replay: {nodes} nodes" in BENCH
    assert f"{seeds} held-out seeds" in BENCH
    ratios = _table(BENCH, "| load | gputopo / baseline | cluster goodput |")
    head = _header(BENCH, "| load | gputopo / baseline | cluster goodput |")
    jct = head.index("JCT p95")
    assert vs_admin.replace("x", "", 1) == _cell(ratios, load, "kueue-admin", jct)
    assert vs_fast.replace("x", "", 1) == _cell(ratios, load, "kueue-admin-a100-first", jct)
    assert vs_blind.replace("x", "", 1) == _cell(ratios, load, "kueue-tas", jct)
    bar = _table(BENCH, "| load | seeds where gputopo's JCT p95 is the lowest")
    counts = [r[1].split("/") for r in bar]
    assert int(level) == sum(int(ok) for ok, _ in counts)
    assert int(of) == sum(int(n) for _, n in counts)

    m = re.search(r"Alibaba 2023 trace \(fill\), its first failed 8-GPU pod comes at "
                  r"([\d.]+ %) of the GPUs asked, as best-fit's does, with ([\d.]+ %) of "
                  r"free GPUs stranded against best-fit's ([\d.]+ %); solver p99 "
                  r"([\d.]+)-([\d.]+) ms at 1,000 nodes", text)
    assert m, "the README's Alibaba sentence changed shape"
    first8, ours, theirs, p99_lo, p99_hi = m.groups()
    fill = _table(BENCH, "| policy | pods | failed | asked at 1st failure |")
    head = _header(BENCH, "| policy | pods | failed | asked at 1st failure |")
    at8, stranded = head.index("asked at 1st failed 8-GPU pod"), head.index(
        "stranded (mean over the fill)")
    row = {r[0]: r for r in fill}
    assert first8.replace(" ", "") == row["gputopo"][at8] == row["best-fit"][at8]
    assert ours.replace(" ", "") == row["gputopo"][stranded]
    assert theirs.replace(" ", "") == row["best-fit"][stranded]
    m = re.search(r"five GPU generations .*?gputopo's p95 job completion time is within 5 % "
                  r"of the lowest of three baselines that know the GPU models .*? on (\d+) of "
                  r"(\d+) held-out seed-loads and its cluster goodput at least theirs on "
                  r"(\d+) of (\d+)", text)
    assert m, "the README's mixed-generation sentence changed shape"
    jct_ok, jct_of, good_ok, good_of = map(int, m.groups())
    bar = [r for r in _table(BENCH, "| load | policy | seeds JCT p95 <= 1.05x the lowest of")
           if r[1] == "gputopo"]
    assert jct_ok == sum(int(r[2].split("/")[0]) for r in bar)
    assert good_ok == sum(int(r[3].split("/")[0]) for r in bar)
    assert jct_of == good_of == sum(int(r[2].split("/")[1]) for r in bar)
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
