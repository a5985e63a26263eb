"""The cluster replay's figures and tables: what each policy's runs add up to.

Why a module of its own: the figures are the replay's claim, and issue 36 asked that they
charge waiting. The headline metrics are the ones a cluster's users and owner feel:

- **job completion time** (arrival to end, waiting included): mean, p50, p95, by job size;
  a job that never ran counts as never completed (infinite);
- **makespan**: from the first arrival until the last job ends;
- **cluster goodput**: useful work (communication-free GPU-time) done inside the arrival
  window (a running job's work counted pro rata to its time inside it) per GPU-hour of the
  whole cluster over that window. A GPU left idle while jobs wait, or a job run slowly,
  both lower it.

Secondary: goodput per GPU-hour *held* (work / GPU-time the jobs held: the quality of the
placements alone, blind to waiting), queue waits, stranded GPUs, jobs started below the
waiting rule's minShare and floor (every policy's jobs measured alike).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.placement import md_table

#: Job-size buckets (GPUs) of the completion-time figures.
BUCKETS = (("1", 1, 1), ("2-4", 2, 4), ("8", 8, 8), ("16-32", 16, 32))
#: how close to the lowest p95 JCT counts as level (issue 36's "within 5 %")
LEVEL = 1.05


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    if not s:
        return 0.0
    return s[max(1, math.ceil(q * len(s))) - 1]


def summary(policy: str, jobs: Sequence[Any], ran: dict[int, Any], stranded: float, *,
            capacity: int, min_share: float, floor: float) -> dict[str, Any]:
    """One run's figures. ``jobs`` have ``id, arrival, gpus, work`` (GPU-seconds of useful
    work); ``ran`` maps a job id to its run (``start, end, share, floor_share, how``)."""
    done = [j for j in jobs if j.id in ran]
    first = min(j.arrival for j in jobs)
    last = max(j.arrival for j in jobs)
    window = last - first
    in_window = 0.0
    for j in done:
        r = ran[j.id]
        inside = max(0.0, min(r.end, last) - max(r.start, first))
        in_window += j.work * (inside / (r.end - r.start) if r.end > r.start else 0.0)
    held = sum(j.gpus * (ran[j.id].end - ran[j.id].start) for j in done)
    work = sum(j.work for j in done)
    jct = {j.id: (ran[j.id].end - j.arrival if j.id in ran else math.inf) for j in jobs}
    waits = [ran[j.id].start - j.arrival for j in done]
    multi = [ran[j.id] for j in done if j.gpus > 1]
    ends = [ran[j.id].end for j in done]
    total = sum(j.work for j in jobs)
    acc, t99 = 0.0, math.inf
    for j in sorted(done, key=lambda j: ran[j.id].end):
        acc += j.work
        if acc >= 0.99 * total:
            t99 = ran[j.id].end - first
            break
    row: dict[str, Any] = {
        "policy": policy, "jobs": len(jobs), "notRun": len(jobs) - len(done),
        "clusterGoodput": in_window / (capacity * window) if window > 0 else 0.0,
        "goodputHeld": work / held if held else 0.0,
        "jctMeanH": statistics.fmean(jct.values()) / 3600,
        "jctP50H": percentile(list(jct.values()), 0.50) / 3600,
        "jctP95H": percentile(list(jct.values()), 0.95) / 3600,
        "makespanH": (max(ends) - first) / 3600 if len(done) == len(jobs) else math.inf,
        "t99H": t99 / 3600,
        "waitP50Min": percentile(waits, 0.50) / 60, "waitP95Min": percentile(waits, 0.95) / 60,
        "stranded": stranded,
        "belowMin": sum(r.share < min_share - 1e-9 for r in multi),
        "belowFloor": sum(r.floor_share < floor - 1e-9 for r in multi),
        "placedBy": {h: sum(r.how == h for r in ran.values())
                     for h in sorted({r.how for r in ran.values()})},
    }
    for label, lo, hi in BUCKETS:
        mine = [jct[j.id] for j in jobs if lo <= j.gpus <= hi]
        row[f"jctMeanH[{label}]"] = statistics.fmean(mine) / 3600 if mine else 0.0
        row[f"jctP50H[{label}]"] = percentile(mine, 0.50) / 3600
        row[f"jctP95H[{label}]"] = percentile(mine, 0.95) / 3600
    return row


#: (key, header, format) of the main table, headline metrics first.
FIGURES = (
    ("clusterGoodput", "cluster goodput", ".3f"),
    ("jctMeanH", "JCT mean h", ".2f"),
    ("jctP50H", "JCT p50 h", ".2f"),
    ("jctP95H", "JCT p95 h", ".2f"),
    ("makespanH", "makespan h", ".1f"),
    ("goodputHeld", "goodput per GPU-h held", ".3f"),
    ("waitP95Min", "wait p95 min", ".0f"),
    ("stranded", "stranded (arrivals)", ".0%"),
    ("belowFloor", "jobs < floor", ".0f"),
    ("notRun", "never ran", ".0f"),
)
#: (key, header) of the ratio table: ours / theirs, lower is better but for goodput
RATIOS = (("clusterGoodput", "cluster goodput"), ("jctMeanH", "JCT mean"),
          ("jctP95H", "JCT p95"), ("makespanH", "makespan"),
          ("goodputHeld", "goodput per GPU-h held"))


def spread(values: Sequence[float], fmt: str) -> str:
    """median (min-max)."""
    return (f"{format(statistics.median(values), fmt)} "
            f"({format(min(values), fmt)}-{format(max(values), fmt)})")


def _ratio(ours: float, theirs: float) -> float:
    if theirs == 0 or math.isinf(theirs):
        return 1.0 if ours == theirs else (0.0 if math.isinf(theirs) else math.inf)
    return ours / theirs


Pick = Callable[[float, int, str], dict[str, Any]]


def _picker(rows: list[dict[str, Any]]) -> Pick:
    index = {(r["load"], r["seed"], r["policy"]): r for r in rows}
    return lambda load, seed, policy: index[(load, seed, policy)]


def level_seeds(rows: list[dict[str, Any]], ours: str, load: float,
                seeds: Sequence[int], policies: Sequence[str]) -> tuple[int, list[str]]:
    """Seeds where ``ours``' p95 JCT is the lowest of ``policies`` or within 5 % of it; and
    for the others, "seed: who is lowest (ratio)"."""
    pick = _picker(rows)
    ok, misses = 0, []
    for s in seeds:
        mine = pick(load, s, ours)["jctP95H"]
        best = min(policies, key=lambda p: pick(load, s, p)["jctP95H"])
        low = pick(load, s, best)["jctP95H"]
        if mine <= LEVEL * low:
            ok += 1
        else:
            misses.append(f"seed {s}: {best} {_ratio(mine, low):.2f}x")
    return ok, misses


def bar(rows: list[dict[str, Any]], ours: Sequence[str], baselines: Sequence[str]) -> str:
    """Markdown: per load and row of ``ours``, the seeds where its p95 JCT is within 5 % of
    the lowest of ``baselines`` (or lower), where its cluster goodput is at least every
    baseline's, and where both hold (issue 32's bar for the mixed-generation replay)."""
    loads = sorted({r["load"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    pick = _picker(rows)
    out = []
    for load in loads:
        for p in ours:
            jct = good = both = 0
            for s in seeds:
                mine = pick(load, s, p)
                theirs = [pick(load, s, b) for b in baselines]
                a = mine["jctP95H"] <= LEVEL * min(t["jctP95H"] for t in theirs)
                b = mine["clusterGoodput"] >= max(t["clusterGoodput"] for t in theirs)
                jct, good, both = jct + a, good + b, both + (a and b)
            out.append({"load": f"{load:.1f}", "policy": p, "jct": f"{jct}/{len(seeds)}",
                        "goodput": f"{good}/{len(seeds)}", "both": f"{both}/{len(seeds)}"})
    return md_table(out, [("load", "load", ""), ("policy", "policy", ""),
                          ("jct", f"seeds JCT p95 <= 1.05x the lowest of "
                                  f"{', '.join(baselines)}", ""),
                          ("goodput", "seeds cluster goodput >= every baseline's", ""),
                          ("both", "seeds both", "")])


def tables(rows: list[dict[str, Any]], *, ours: str = "gputopo",
           level_against: Sequence[str] | None = None) -> str:
    """Markdown: per load and policy, median (range) over seeds; ours / each other policy,
    per seed; the seeds where our p95 JCT is level with the lowest; JCT by job size."""
    loads = sorted({r["load"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    pick = _picker(rows)
    against = [p for p in (level_against or policies) if p in policies]
    per = []
    for load in loads:
        for p in policies:
            mine = [pick(load, s, p) for s in seeds]
            per.append({"load": f"{load:.1f}", "policy": p,
                        **{k: spread([r[k] for r in mine], f) for k, _, f in FIGURES}})
    out = [md_table(per, [("load", "load", ""), ("policy", "policy", ""),
                          *((k, h, "") for k, h, _ in FIGURES)])]
    ratio_rows = []
    for load in loads:
        for p in policies:
            if p == ours:
                continue
            cells: dict[str, Any] = {"load": f"{load:.1f}", "baseline": p}
            for key, head in RATIOS:
                cells[head] = spread([_ratio(pick(load, s, ours)[key], pick(load, s, p)[key])
                                      for s in seeds], ".2f")
            level, _ = level_seeds(rows, ours, load, seeds, [ours, p])
            cells["seeds JCT p95 <= 1.05x"] = f"{level}/{len(seeds)}"
            ratio_rows.append(cells)
    out.append(md_table(ratio_rows, [("load", "load", ""),
                                     ("baseline", f"{ours} / baseline", ""),
                                     *((h, h, "") for _, h in RATIOS),
                                     ("seeds JCT p95 <= 1.05x", "seeds JCT p95 <= 1.05x",
                                      "")]))
    level_rows = []
    for load in loads:
        ok, misses = level_seeds(rows, ours, load, seeds, against)
        level_rows.append({"load": f"{load:.1f}", "level": f"{ok}/{len(seeds)}",
                           "misses": "; ".join(misses) or "-"})
    out.append(md_table(level_rows, [
        ("load", "load", ""),
        ("level", f"seeds where {ours}'s JCT p95 is the lowest or within 5 % of it "
                  f"({', '.join(against)})", ""),
        ("misses", "the others: lowest, ours / it", "")]))
    by_size = []
    for load in loads:
        for p in policies:
            mine = [pick(load, s, p) for s in seeds]
            cells = {"load": f"{load:.1f}", "policy": p}
            for label, _, _ in BUCKETS:
                med = [statistics.median(r[f"{k}[{label}]"] for r in mine)
                       for k in ("jctMeanH", "jctP50H", "jctP95H")]
                cells[label] = " / ".join(f"{v:.2f}" for v in med)
            by_size.append(cells)
    out.append(md_table(by_size, [("load", "load", ""), ("policy", "policy", ""),
                                  *((b, f"JCT h mean / p50 / p95, {b} GPU", "")
                                    for b, _, _ in BUCKETS)]))
    return "\n\n".join(out)


def sensitivity(rows: list[dict[str, Any]], *, ours: str, baseline: str,
                against: Sequence[str]) -> str:
    """Per world and load: ours / ``baseline`` per seed, median (range), and the seeds
    where our p95 JCT is level with the lowest of ``against``."""
    worlds = list(dict.fromkeys(r["world"] for r in rows))
    loads = sorted({r["load"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    table = []
    for w in worlds:
        mine = [r for r in rows if r["world"] == w]
        pick = _picker(mine)
        present = [p for p in against if any(r["policy"] == p for r in mine)]
        for load in loads:
            cells: dict[str, Any] = {"world": w, "load": f"{load:.1f}"}
            for key, head in RATIOS[:4]:
                cells[head] = spread([_ratio(pick(load, s, ours)[key],
                                             pick(load, s, baseline)[key])
                                      for s in seeds], ".2f")
            ok, _ = level_seeds(mine, ours, load, seeds, present)
            cells["level"] = f"{ok}/{len(seeds)}"
            table.append(cells)
    return md_table(table, [("world", "world (the clock)", ""), ("load", "load", ""),
                            *((h, f"{h}, {ours} / {baseline}", "") for _, h in RATIOS[:4]),
                            ("level", f"seeds {ours}'s JCT p95 <= 1.05x the lowest", "")])
