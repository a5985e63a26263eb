"""Cluster replay: what a cluster owner feels from each placement policy, under one queue.

Why it exists: the older replay (``bench/placement.py --part replay``) set its load by
communication-free work, so at the placements' real speeds the GPU-time demanded was several
times the cluster and its waits measured a backlog draining; it had its own queue, not the
product's; and one straggler decided its makespan. Here:

- **Load** is the GPU-time the jobs demand when each runs at the best placement it could
  get (gputopo's solve on the empty cluster): load 0.7 means the arrival window is set so
  that this demand is 70 % of the cluster's GPU-time over the window. Swept over
  ``--loads`` (0.5, 0.7, 0.9) and ``--seeds`` (five), reported as median and range.
- **One queue for every policy**, the product's own: :mod:`bench.gang_queue` (admission
  through ``GangReserver.reserve``, the queue through ``serve_pass``). gputopo's gangs wait
  for a good placement as the product's do; a baseline takes any feasible placement.
- **A job's run time** is its communication-free work divided by its placement's predicted
  efficiency (compute / step time with the cost model's bus bandwidth), so a poor
  placement holds its GPUs longer and delays the queue behind it.
- **Metrics**: goodput (communication-free GPU-hours of work done per GPU-hour held), job
  completion time (arrival to end) p50/p95 by job size, queue wait p50/p95, time until
  99 % of the work is done, stranded free GPUs over the arrival window (free GPUs on
  partly used nodes, as a share of all free GPUs, time-averaged from first to last
  arrival), and how many multi-GPU jobs started below the waiting rule's ``minShare``
  (0.9) and below its floor (0.5) of the rule's reference (their best on the kinds of
  nodes they got: :class:`Ideal`), every policy's jobs measured alike.
- **Baselines** (:mod:`bench.baselines`): the default scheduler (LeastAllocated, lowest
  device ids), first fit, go-gpuallocator BestEffort behind the default scheduler, and
  Kueue TAS rack-packing with go-gpuallocator's GPU choice.

The cluster: 32 nodes, 256 GPUs (12 DGX-1 V100 on 100 Gbit/s GPUDirect RDMA, 8 DGX A100
on 800 Gbit/s, 12 two-socket PCIe servers on 25 GbE TCP), racks of four nodes of one kind,
two zones. Jobs of 1-32 GPUs, most small; work log-normal, median 30 minutes.

Run (about two to four minutes on two busy cores)::

    python bench/cluster_replay.py                        # 3 loads x 5 seeds x 5 policies
    python bench/cluster_replay.py --jobs 60 --seeds 1 --loads 0.7   # a quick look
    python bench/cluster_replay.py --json /tmp/replay.json

Not part of the test suite; tests/placement/test_cluster_replay.py runs it tiny.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/cluster_replay.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench.baselines import BASELINES  # noqa: E402
from bench.gang_queue import DEFAULT_MAX_WAIT_SECONDS, GangQueue, Policy  # noqa: E402
from bench.placement import MODELS, OVERLAP, Model, md_table, mixed_cluster  # noqa: E402
from gputopo.cluster.reservations import GangKey  # noqa: E402
from gputopo.placement.solver import solve  # noqa: E402
from gputopo.placement.types import GangRequest, NodeState  # noqa: E402
from gputopo.placement.waiting import (  # noqa: E402
    WaitingRule,
    kind_gpus,
    node_kinds,
    reference_bandwidth,
    reference_nodes,
)
from gputopo.topology.cost import step_time_s  # noqa: E402

POLICIES: dict[str, Policy] = {"gputopo": solve, "gputopo-admit": solve, **BASELINES}
#: policies whose gangs follow the waiting rule (``whenFull: wait``); "gputopo-admit" is the
#: same solver taking any feasible placement (``whenFull: admit``): placement without the rule
WAITS = frozenset({"gputopo"})
#: gputopo's waiting rule: the product's defaults (minShare 0.9, takeBest, floorShare 0.5)
RULE = WaitingRule()
#: Job sizes (GPUs) and their probabilities: most jobs are small, as in published traces.
SIZES = ((1, 0.45), (2, 0.18), (4, 0.14), (8, 0.13), (16, 0.06), (32, 0.04))
#: Job-size buckets of the completion-time figures.
BUCKETS = (("1", 1, 1), ("2-4", 2, 4), ("8", 8, 8), ("16-32", 16, 32))
LOADS = (0.5, 0.7, 0.9)
SEEDS = (1, 2, 3, 4, 5)
WORK_MEDIAN_S, WORK_SIGMA, WORK_MIN_S, WORK_MAX_S = 1800.0, 1.0, 120.0, 43200.0


def replay_cluster() -> list[NodeState]:
    return mixed_cluster({"dgx1": 12, "a100": 8, "pcie": 12}, rack_size=4, racks_per_zone=4)


@dataclass(frozen=True)
class Job:
    id: int
    arrival: float  # seconds
    gang: GangRequest
    model: Model
    work_s: float  # run time at perfect (communication-free) efficiency

    @property
    def key(self) -> GangKey:
        return GangKey("replay", "PyTorchJob", f"job-{self.id:05d}", f"uid-{self.id:05d}")

    @property
    def gpu_work_s(self) -> float:
        return self.gang.total_gpus * self.work_s


def efficiency(gang: GangRequest, model: Model, bus_gbps: float) -> float:
    """Compute time / predicted step time (1 for one GPU: nothing to all-reduce)."""
    if gang.total_gpus == 1:
        return 1.0
    step = step_time_s(params=model.params, bytes_per_param=4, compute_s=model.compute_s,
                       bus_bw_gbps=bus_gbps, n_gpus=gang.total_gpus, overlap=OVERLAP)
    return model.compute_s / step


class Ideal:
    """Each gang shape's best bus bandwidth: gputopo's solve on the empty cluster (what the
    load is counted in), and the waiting rule's reference for a placement (what a job's
    share is counted against, for every policy alike: the least of gputopo's solves on the
    empty nodes of each kind of the cluster alone,
    :func:`gputopo.placement.waiting.reference_bandwidth`)."""

    def __init__(self, cluster: Sequence[NodeState]) -> None:
        self.cluster = list(cluster)
        self.gpus = kind_gpus(self.cluster)
        self._bw: dict[tuple[GangRequest, frozenset[Any]], float] = {}

    def bandwidth(self, gang: GangRequest, *, reference: bool = False,
                  typical: bool = True) -> float:
        """The gang's best on the empty cluster; with ``reference``, the rule's reference
        (the same for every placement): the typical kind's, or the slowest kind's."""

        def best_on(kinds: frozenset[Any]) -> float:
            if (gang, kinds) not in self._bw:
                p = solve(reference_nodes(self.cluster, kinds), gang)
                self._bw[(gang, kinds)] = p.bus_bandwidth_gbps if p.feasible else 0.0
            return self._bw[(gang, kinds)]

        if not reference:
            return best_on(frozenset())
        return reference_bandwidth(node_kinds(self.cluster), best_on,
                                   self.gpus if typical else None, gang)

    def efficiency(self, job: Job) -> float:
        return efficiency(job.gang, job.model, self.bandwidth(job.gang))


def job_stream(count: int, seed: int, *, ideal: Ideal, load: float) -> list[Job]:
    """``count`` jobs whose arrival window makes their GPU-time, each at its best
    placement's efficiency, ``load`` of the cluster's GPU-time over the window."""
    rng = random.Random(seed)
    capacity = sum(len(n.topology.gpus) for n in ideal.cluster)
    sizes, weights = zip(*SIZES, strict=True)
    drafts, t = [], 0.0
    for i in range(count):
        t += rng.expovariate(1.0)
        size = rng.choices(sizes, weights)[0]
        if size > 8:
            gang = GangRequest(size // 8, 8)
        elif size > 1 and rng.random() < 0.5:
            gang = GangRequest(size, 1)  # one worker per GPU
        else:
            gang = GangRequest(1, size)
        work = min(WORK_MAX_S, max(WORK_MIN_S, rng.lognormvariate(math.log(WORK_MEDIAN_S),
                                                                  WORK_SIGMA)))
        drafts.append(Job(i, t, gang, rng.choice(MODELS), work))
    demand = sum(j.gpu_work_s / ideal.efficiency(j) for j in drafts)
    window = demand / (load * capacity)
    scale = window / drafts[-1].arrival
    return [Job(j.id, j.arrival * scale, j.gang, j.model, j.work_s) for j in drafts]


@dataclass
class Ran:
    start: float
    end: float
    efficiency: float
    share: float  # placement bandwidth / the rule's typical reference (minShare's)
    floor_share: float  # placement bandwidth / the slowest kind's reference (the floor's)
    how: str


def replay(policy: str, cluster: list[NodeState], jobs: Sequence[Job], ideal: Ideal, *,
           max_wait: float = DEFAULT_MAX_WAIT_SECONDS) -> tuple[dict[int, Ran], float]:
    """Arrivals and ends in time order, one queue pass after each; every job's run, and the
    stranded share of free GPUs averaged over the arrival window."""
    queue = GangQueue(cluster, POLICIES[policy], wait_for_good=policy in WAITS,
                      max_wait_seconds=max_wait, packs=POLICIES[policy] is solve)
    by_key = {j.key: j for j in jobs}
    ran: dict[int, Ran] = {}
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.id) for j in jobs]
    heapq.heapify(events)
    sizes = {n.name: len(n.topology.gpus) for n in cluster}
    window_end = max(j.arrival for j in jobs)
    area, last, stranded_now = 0.0, min(j.arrival for j in jobs), 0.0

    def started(s: Any) -> None:
        job = by_key[s.key]
        bw = s.reservation.bus_bandwidth_gbps
        eff = efficiency(job.gang, job.model, bw)
        def of(best: float) -> float:
            return 1.0 if job.gang.total_gpus == 1 or best <= 0 else min(1.0, bw / best)

        end = s.at + job.work_s / eff
        ran[job.id] = Ran(s.at, end, eff, of(ideal.bandwidth(job.gang, reference=True)),
                          of(ideal.bandwidth(job.gang, reference=True, typical=False)), s.how)
        heapq.heappush(events, (end, 0, job.id))

    while events:
        t, kind, jid = heapq.heappop(events)
        upto = min(t, window_end)
        if upto > last:
            area += stranded_now * (upto - last)
            last = upto
        job = jobs[jid]
        if kind == 0:
            queue.release(job.key)
        else:
            s = queue.arrive(job.key, job.gang, t)
            if s is not None:
                started(s)
        for s in queue.serve(t):
            started(s)
        held = queue.store.held_gpus()
        free = sum(sizes[n] - len(held.get(n, ())) for n in sizes)
        partly = sum(sizes[n] - len(g) for n, g in held.items() if g)
        stranded_now = partly / free if free else 0.0
    span = window_end - min(j.arrival for j in jobs)
    return ran, area / span if span > 0 else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    if not s:
        return 0.0
    return s[max(1, math.ceil(q * len(s))) - 1]


def summary(policy: str, jobs: Sequence[Job], ran: dict[int, Ran], stranded: float
            ) -> dict[str, Any]:
    done = [j for j in jobs if j.id in ran]
    held = sum(j.gang.total_gpus * (ran[j.id].end - ran[j.id].start) for j in done)
    work = sum(j.gpu_work_s for j in done)
    total = sum(j.gpu_work_s for j in jobs)
    first = min(j.arrival for j in jobs)
    acc, t99 = 0.0, math.inf
    for j in sorted(done, key=lambda j: ran[j.id].end):
        acc += j.gpu_work_s
        if acc >= 0.99 * total:
            t99 = ran[j.id].end - first
            break
    jct = {j.id: ran[j.id].end - j.arrival for j in done}
    waits = [ran[j.id].start - j.arrival for j in done]
    multi = [ran[j.id] for j in done if j.gang.total_gpus > 1]
    row: dict[str, Any] = {
        "policy": policy, "jobs": len(jobs), "done": len(done),
        "goodput": work / held if held else 0.0,
        "jctP50H": percentile(list(jct.values()), 0.50) / 3600,
        "jctP95H": percentile(list(jct.values()), 0.95) / 3600,
        "waitP50Min": percentile(waits, 0.50) / 60, "waitP95Min": percentile(waits, 0.95) / 60,
        "t99H": t99 / 3600, "stranded": stranded,
        "belowMin": sum(r.share < RULE.min_share - 1e-9 for r in multi),
        "belowFloor": sum(r.floor_share < RULE.floor - 1e-9 for r in multi),
        "minShare": min((r.share for r in multi), default=1.0),
        "placedBy": {h: sum(r.how == h for r in ran.values())
                     for h in sorted({r.how for r in ran.values()})},
    }
    for label, lo, hi in BUCKETS:
        mine = [jct[j.id] for j in done if lo <= j.gang.total_gpus <= hi]
        row[f"jctP50H[{label}]"] = percentile(mine, 0.50) / 3600
        row[f"jctP95H[{label}]"] = percentile(mine, 0.95) / 3600
    return row


def run_one(load: float, seed: int, count: int, cluster: list[NodeState],
            policies: Sequence[str], ideal: Ideal) -> list[dict[str, Any]]:
    jobs = job_stream(count, seed, ideal=ideal, load=load)
    rows = []
    for name in policies:
        ran, stranded = replay(name, cluster, jobs, ideal)
        rows.append({"load": load, "seed": seed, **summary(name, jobs, ran, stranded)})
    return rows


#: (key, header, format, lower is better) of the figures reported per policy.
FIGURES = (
    ("goodput", "goodput", ".3f", False),
    ("jctP50H", "JCT p50 h", ".2f", True),
    ("jctP95H", "JCT p95 h", ".2f", True),
    ("waitP50Min", "wait p50 min", ".1f", True),
    ("waitP95Min", "wait p95 min", ".1f", True),
    ("t99H", "99 % of work h", ".1f", True),
    ("stranded", "stranded (arrivals)", ".1%", True),
    ("belowMin", "jobs < minShare", ".0f", True),
    ("belowFloor", "jobs < floor", ".0f", True),
)


def _spread(values: Sequence[float], fmt: str) -> str:
    return (f"{format(statistics.median(values), fmt)} "
            f"({format(min(values), fmt)}-{format(max(values), fmt)})")


def tables(rows: list[dict[str, Any]]) -> str:
    """Markdown: per load and policy, median (range) over seeds; gputopo / baseline
    ratios per seed; completion times by job size."""
    loads = sorted({r["load"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    out = []
    per = []
    for load in loads:
        for p in policies:
            mine = [r for r in rows if r["load"] == load and r["policy"] == p]
            per.append({"load": f"{load:.1f}", "policy": p,
                        **{k: _spread([r[k] for r in mine], f) for k, _, f, _ in FIGURES}})
    out.append(md_table(per, [("load", "load", ""), ("policy", "policy", ""),
                              *((k, h, "") for k, h, _, _ in FIGURES)]))
    ratio_rows = []
    for load in loads:
        for p in policies[1:]:
            cells: dict[str, Any] = {"load": f"{load:.1f}", "baseline": p}
            for key, head in (("goodput", "goodput"), ("jctP95H", "JCT p95"),
                              ("waitP95Min", "wait p95"), ("t99H", "99 % of work"),
                              ("stranded", "stranded")):
                rs = []
                for seed in seeds:
                    ours = _pick(rows, load, seed, policies[0])[key]
                    theirs = _pick(rows, load, seed, p)[key]
                    if theirs or not ours:  # x / 0 has no ratio: left out, counted below
                        rs.append(ours / theirs if theirs else 1.0)
                cells[head] = _spread(rs, ".2f") if rs else "n/a"
                if len(rs) < len(seeds):
                    cells[head] += f" [{len(seeds) - len(rs)} seed(s): baseline 0]"
            ours_ok = sum(_pick(rows, load, s, policies[0])["goodput"]
                          >= _pick(rows, load, s, p)["goodput"] for s in seeds)
            jct_ok = sum(_pick(rows, load, s, policies[0])["jctP95H"]
                         <= 1.05 * _pick(rows, load, s, p)["jctP95H"] for s in seeds)
            cells["seeds goodput >="] = f"{ours_ok}/{len(seeds)}"
            cells["seeds JCT p95 <= 1.05x"] = f"{jct_ok}/{len(seeds)}"
            ratio_rows.append(cells)
    heads = ["goodput", "JCT p95", "wait p95", "99 % of work", "stranded",
             "seeds goodput >=", "seeds JCT p95 <= 1.05x"]
    out.append(md_table(ratio_rows, [("load", "load", ""),
                                     ("baseline", f"{policies[0]} / baseline", ""),
                                     *((h, h, "") for h in heads)]))
    by_size = []
    for load in loads:
        for p in policies:
            mine = [r for r in rows if r["load"] == load and r["policy"] == p]
            cells = {"load": f"{load:.1f}", "policy": p}
            for label, _, _ in BUCKETS:
                p50 = statistics.median(r[f"jctP50H[{label}]"] for r in mine)
                p95 = statistics.median(r[f"jctP95H[{label}]"] for r in mine)
                cells[label] = f"{p50:.2f} / {p95:.2f}"
            by_size.append(cells)
    out.append(md_table(by_size, [("load", "load", ""), ("policy", "policy", ""),
                                  *((b, f"JCT h p50 / p95, {b} GPU", "")
                                    for b, _, _ in BUCKETS)]))
    return "\n\n".join(out)


def _pick(rows: list[dict[str, Any]], load: float, seed: int, policy: str) -> dict[str, Any]:
    return next(r for r in rows if r["load"] == load and r["seed"] == seed
                and r["policy"] == policy)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs per run (default 300)")
    ap.add_argument("--loads", default=",".join(map(str, LOADS)))
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma list; the first is the one the ratios are of")
    ap.add_argument("--max-wait", type=float, default=DEFAULT_MAX_WAIT_SECONDS,
                    help="gputopo's maxWaitSeconds (the product's default 3600)")
    ap.add_argument("--json", metavar="FILE", help="also write every run's figures as JSON")
    args = ap.parse_args(argv)
    loads = [float(x) for x in args.loads.split(",") if x.strip()]
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    cluster = replay_cluster()
    ideal = Ideal(cluster)
    t0 = time.perf_counter()
    rows = []
    for load in loads:
        for seed in seeds:
            rows.extend(run_one(load, seed, args.jobs, cluster, policies, ideal))
    took = time.perf_counter() - t0
    gpus = sum(len(n.topology.gpus) for n in cluster)
    print(f"## Cluster replay: {len(cluster)} nodes, {gpus} GPUs; {args.jobs} jobs per run; "
          f"loads {', '.join(map(str, loads))}; seeds {', '.join(map(str, seeds))}; "
          f"{took:.0f} s, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print(tables(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
