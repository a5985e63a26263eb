"""bench/replay_bars.py counts the replay bars as the replay's own report does, and the
rows of a second run replace the first's (run tiny: two seeds, 30 jobs)."""

from __future__ import annotations

import json
import re

from bench import cluster_replay, replay_bars


def test_the_bars_from_saved_runs_are_the_replays_own(tmp_path, capsys):
    base = tmp_path / "base.json"
    assert cluster_replay.main(["--jobs", "30", "--seeds", "1,2", "--loads", "0.7",
                                "--policies", "gputopo,kueue-admin,best-fit-admin",
                                "--worlds", "error 0.3", "--json", str(base)]) == 0
    printed = capsys.readouterr().out
    # the replay's own count: "| 0.7 | N/2 | ..." (p95 lowest or within 5 % of it)
    want = re.search(r"\| 0\.7 \| (\d+)/2 \|", printed).group(1)
    assert replay_bars.main([str(base)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"load 0.7: p95 bar {want}/2,"), line

    # a second run's gputopo rows replace the first's: here a copy whose p95 is doubled
    rows = json.loads(base.read_text(encoding="utf-8"))
    worse = [{**r, "jctP95H": 2 * r["jctP95H"] + 1} for r in rows if r["policy"] == "gputopo"]
    new = tmp_path / "new.json"
    new.write_text(json.dumps(worse), encoding="utf-8")
    assert replay_bars.main([str(base), str(new)]) == 0
    assert capsys.readouterr().out.startswith("load 0.7: p95 bar 0/2,")
