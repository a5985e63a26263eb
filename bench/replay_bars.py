"""The replay bars of issues 32 and 36, per seed-load, from saved runs: a tuning aid.

Why: the baselines do not change when gputopo's placement does, and a full replay runs
every policy; tuning a product rule then costs a run of gputopo's row alone
(``--policies gputopo --json NEW``) against the baselines' rows saved once
(``--json BASE``). This prints, per load, issue 36's count (gputopo's p95 JCT the lowest or
within 5 % of it) and issue 32's (that, and cluster goodput at least every baseline's),
with each miss named, and the medians of gputopo's own figures old and new.

    python bench/replay_bars.py BASE.json [NEW.json]   # NEW's gputopo rows replace BASE's

Only the main world's rows (the first world of the run) are read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.replay_report import LEVEL  # noqa: E402

#: gputopo's own rows: never a baseline a bar is measured against
OURS = ("gputopo", "gputopo-stated", "gputopo-admit")


def load_rows(path: str) -> list[dict[str, Any]]:
    rows = json.loads(Path(path).read_text(encoding="utf-8"))
    world = rows[0]["world"]
    return [r for r in rows if r["world"] == world]


def merged(base: list[dict[str, Any]], new: list[dict[str, Any]] | None
           ) -> list[dict[str, Any]]:
    """``base`` with its rows of the policies ``new`` has replaced by ``new``'s."""
    if not new:
        return base
    mine = {r["policy"] for r in new}
    return [r for r in base if r["policy"] not in mine] + new


def bars(rows: list[dict[str, Any]], ours: str = "gputopo") -> str:
    index = {(r["load"], r["seed"], r["policy"]): r for r in rows}
    baselines = sorted({r["policy"] for r in rows} - set(OURS))
    out = []
    for load in sorted({r["load"] for r in rows}):
        seeds = sorted({r["seed"] for r in rows if r["load"] == load})
        jct = good = both = 0
        misses = []
        for s in seeds:
            mine = index[(load, s, ours)]
            theirs = [index[(load, s, b)] for b in baselines]
            low = min(theirs, key=lambda t: t["jctP95H"])
            a = mine["jctP95H"] <= LEVEL * low["jctP95H"]
            b = mine["clusterGoodput"] >= max(t["clusterGoodput"] for t in theirs)
            jct, good, both = jct + a, good + b, both + (a and b)
            if not a:
                misses.append(f"{s}: {low['policy']} {mine['jctP95H'] / low['jctP95H']:.2f}x")
        med = {k: statistics.median(index[(load, s, ours)][k] for s in seeds)
               for k in ("clusterGoodput", "jctP95H", "jctP95H[16-32]", "jctP95H[2-4]")}
        n = len(seeds)
        out.append(f"load {load}: p95 bar {jct}/{n}, goodput {good}/{n}, both {both}/{n}"
                   f"; median goodput {med['clusterGoodput']:.3f} p95 {med['jctP95H']:.2f} h"
                   f" (2-4 GPU {med['jctP95H[2-4]']:.2f}, 16-32 {med['jctP95H[16-32]']:.2f})"
                   f"; misses {'; '.join(misses) or 'none'}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="a cluster_replay.py --json file with every policy")
    ap.add_argument("new", nargs="?", help="a --json file whose rows replace base's")
    args = ap.parse_args(argv)
    print(bars(merged(load_rows(args.base), load_rows(args.new) if args.new else None)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
