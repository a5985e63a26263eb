"""Cluster replay: what a cluster's users and owner feel from each placement policy.

Why it exists: placement quality is only worth what it does to a stream of jobs on a
shared cluster, waiting included. Issue 36 (an outside audit) found the first version
flattered gputopo: only gputopo could wait, its Kueue baseline was configured blind, the
headline metric never charged waiting, and the clock ran on gputopo's own cost model.
Here:

- **Load** is the GPU-time the jobs demand when each runs at the best placement it could
  get (gputopo's solve on the empty cluster, predicted): load 0.7 means the arrival window
  is set so that this demand is 70 % of the cluster's GPU-time over the window. Swept
  over ``--loads`` (0.5, 0.7, 0.9) and ``--seeds``: 1-5 tuned the product's waiting rule
  (issue 22) and chose the baselines' setups, 6-20 are held out and reported.
- **Every baseline as an admin who knows the hardware deploys it**, the naive setups as
  extra rows: Kueue TAS with a ResourceFlavor per node kind, one-node jobs required on one
  host, multi-node gangs only on the GPUDirect flavors, Kueue's own BestEffortFIFO queue
  (:mod:`bench.kueue_queue`); kube-scheduler-based baselines behind the admin's node
  selector and pod affinity (:mod:`bench.baselines.admin`), through the product's queue
  as a coscheduling gang queue (:mod:`bench.gang_queue`). gputopo's gangs go through the
  same product queue and follow its waiting rule; ``gputopo-admit`` is its solver without
  the rule.
- **The clock is not the model**: every policy decides on the cost model's predictions; a
  job runs for its work / its *true* efficiency, which carries a seeded per-job model
  error (log-normal, sigma 0.3, on the exposed communication time) in the main table, and
  in the sensitivity rows other network facts (TCP share 0.5 and 0.8 instead of 0.25, span
  factor 1.0 instead of 0.5 across a zone and 0.25 across the cluster):
  :mod:`bench.replay_world`.
- **Metrics that charge waiting** (:mod:`bench.replay_report`): job completion time
  (arrival to end) mean, p50, p95 and by job size; makespan; cluster goodput (useful
  work done in the arrival window per GPU-hour of the whole cluster); goodput per
  GPU-hour held as a secondary column; waits, stranded GPUs, jobs below the waiting rule's
  minShare and floor, every policy's jobs measured alike.

The cluster: 32 nodes, 256 GPUs (12 DGX-1 V100 on 100 Gbit/s GPUDirect RDMA, 8 DGX A100
on 800 Gbit/s, 12 two-socket PCIe servers on 25 GbE TCP), racks of four nodes of one kind,
two zones. Jobs of 1-32 GPUs, most small; work log-normal, median 30 minutes.

Run (a few minutes on two busy cores; the run time is printed)::

    python bench/cluster_replay.py                       # held-out seeds, every world
    python bench/cluster_replay.py --seeds 1-5           # the tuning seeds
    python bench/cluster_replay.py --jobs 60 --seeds 1 --loads 0.7 --worlds "error 0.3"
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
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/cluster_replay.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench import mixed_generations, replay_report  # noqa: E402
from bench.baselines import BASELINES  # noqa: E402
from bench.baselines.admin import admin_configured  # noqa: E402
from bench.baselines.best_fit import place as best_fit  # noqa: E402
from bench.baselines.besteffort import place as go_gpuallocator  # noqa: E402
from bench.gang_queue import DEFAULT_MAX_WAIT_SECONDS, GangQueue, Policy  # noqa: E402
from bench.kueue_queue import KueueQueue, KueueSetup, flavors_by_kind  # noqa: E402
from bench.placement import MODELS, OVERLAP, Model, mixed_cluster  # noqa: E402
from bench.replay_report import percentile  # noqa: E402, F401  (bench/alibaba_replay.py)
from bench.replay_world import MAIN_WORLD, WORLDS, World, step_s  # noqa: E402
from gputopo.cluster.reservations import GangKey  # noqa: E402
from gputopo.placement.solver import solve  # noqa: E402
from gputopo.placement.types import GangRequest, NodeState  # noqa: E402
from gputopo.placement.waiting import (  # noqa: E402
    WaitingRule,
    kind_gpus,
    node_kinds,
    reference_bandwidth,
    reference_nodes,
    unracked,
)
from gputopo.topology.cost import step_time_s  # noqa: E402
from webhook.placement.reserve import default_solver  # noqa: E402

#: gputopo's placement exactly as the webhook's GangReserver makes it: the solver with the
#: GPU-generation rules (gputopo.placement.generations.solve_models; on nodes that say no
#: GPU model, as on the homogeneous replay's, the exact solver's answer itself)
GPUTOPO: Policy = default_solver()

#: Policies through the product's queue (bench.gang_queue). "-admin": behind the node
#: selector and pod affinity a hardware-aware admin sets (bench.baselines.admin); the
#: others as the naive rows (no constraint).
POLICIES: dict[str, Policy] = {
    "gputopo": GPUTOPO, "gputopo-stated": GPUTOPO, "gputopo-admit": GPUTOPO,
    "best-fit-admin": admin_configured(best_fit),
    "go-gpuallocator-admin": admin_configured(go_gpuallocator),
    **BASELINES,
}
#: policies whose gangs follow the waiting rule (``whenFull: wait``); "gputopo-admit" is the
#: same solver taking any feasible placement (``whenFull: admit``): placement without the rule
WAITS = frozenset({"gputopo", "gputopo-stated"})
#: gputopo's own rows: never a baseline the bar is measured against
GPUTOPO_ROWS = frozenset({"gputopo", "gputopo-stated", "gputopo-admit"})


def node_kind(n: NodeState) -> str:
    """The replay cluster's node kind: its name's prefix (dgx1, a100, pcie)."""
    return n.name.split("-", 1)[0]


def _kueue(order: Sequence[str]) -> Any:
    return lambda cluster: KueueSetup(flavors_by_kind(cluster, order, node_kind))


#: Kueue TAS as an admin sets it up, with Kueue's own queue (bench.kueue_queue): a flavor
#: per node kind, in the ClusterQueue's order named. "kueue-admin" lists the PCIe servers
#: first (the fast flavors stay free for what only they can run): on the tuning seeds its
#: JCT was lower than the fastest-first order's at loads 0.7 and 0.9 (docs/benchmarks.md).
KUEUE = {
    "kueue-admin": _kueue(("pcie", "dgx1", "a100")),
    "kueue-admin-a100-first": _kueue(("a100", "dgx1", "pcie")),
}
KNOWN = (*POLICIES, *KUEUE)
#: The main table's policies: gputopo, the baselines as an admin sets them up, then the
#: naive rows and gputopo without its waiting rule.
MAIN = ("gputopo", "kueue-admin", "kueue-admin-a100-first", "best-fit-admin",
        "go-gpuallocator-admin", "kueue-tas", "best-fit", "go-gpuallocator",
        "gputopo-admit")
#: The policies of the sensitivity rows.
SENSITIVITY = ("gputopo", "kueue-admin", "kueue-admin-a100-first", "best-fit-admin",
               "go-gpuallocator-admin")
CLUSTERS = ("homogeneous", "mixed-generations")
#: Seeds: 1-5 tuned the product's waiting rule (issue 22) and chose the baselines' setups;
#: 6-20 are held out, the ones the docs report.
TUNING, HELD_OUT = "1-5", "6-20"
#: gputopo's waiting rule: the product's defaults (minShare 0.9, takeBest, floorShare 0.5)
RULE = WaitingRule()
#: Job sizes (GPUs) and their probabilities: most jobs are small, as in published traces.
SIZES = ((1, 0.45), (2, 0.18), (4, 0.14), (8, 0.13), (16, 0.06), (32, 0.04))
LOADS = (0.5, 0.7, 0.9)
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
    empty nodes of each kind of the cluster alone, whole nodes of one zone as the
    product's, :func:`gputopo.placement.waiting.reference_bandwidth` and ``unracked``)."""

    def __init__(self, cluster: Sequence[NodeState]) -> None:
        self.cluster = list(cluster)
        self.gpus = kind_gpus(self.cluster)
        self._bw: dict[tuple[GangRequest, frozenset[Any]], float] = {}
        self._best: dict[GangRequest, float] = {}

    def bandwidth(self, gang: GangRequest, *, reference: bool = False,
                  typical: bool = True) -> float:
        """The gang's best on the empty cluster; with ``reference``, the rule's reference
        (the same for every placement): the typical kind's, or the slowest kind's."""

        def best_on(kinds: frozenset[Any]) -> float:
            if (gang, kinds) not in self._bw:
                p = solve(unracked(reference_nodes(self.cluster, kinds)), gang)
                self._bw[(gang, kinds)] = p.bus_bandwidth_gbps if p.feasible else 0.0
            return self._bw[(gang, kinds)]

        if not reference:
            if gang not in self._best:
                p = solve(self.cluster, gang)
                self._best[gang] = p.bus_bandwidth_gbps if p.feasible else 0.0
            return self._best[gang]
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
    efficiency: float  # the true one (the world's), which the clock ran on
    share: float  # predicted bandwidth / the rule's typical reference (minShare's)
    floor_share: float  # predicted bandwidth / the slowest kind's reference (the floor's)
    how: str


@dataclass(frozen=True)
class Done:
    """What the report reads of a job (bench.replay_report.summary)."""

    id: int
    arrival: float
    gpus: int
    work: float  # GPU-seconds of useful (communication-free) work


def make_queue(policy: str, cluster: list[NodeState], *,
               max_wait: float = DEFAULT_MAX_WAIT_SECONDS) -> GangQueue | KueueQueue:
    """The policy's admission and queue: Kueue's own for the admin-configured Kueue, the
    product's (bench.gang_queue) for the rest."""
    if policy in KUEUE:
        return KueueQueue(cluster, KUEUE[policy](cluster))
    return GangQueue(cluster, POLICIES[policy], wait_for_good=policy in WAITS,
                     max_wait_seconds=max_wait, packs=POLICIES[policy] is GPUTOPO)


#: How long a started job runs: (job, the world's bandwidth of its placement, the nodes it
#: got, its model-error factor) -> (true efficiency, seconds).
Clock = Callable[[Any, float, Sequence[NodeState], float], tuple[float, float]]


def homogeneous_clock(job: Job, true_bw: float, nodes: Sequence[NodeState],
                      error: float) -> tuple[float, float]:
    """Work / the true efficiency: every GPU computes alike (the homogeneous replay)."""
    eff = job.model.compute_s / step_s(
        params=job.model.params, compute_s=job.model.compute_s, bus_gbps=true_bw,
        gpus=job.gang.total_gpus, overlap=OVERLAP, error=error)
    return eff, job.work_s / eff


def replay(policy: str, cluster: list[NodeState], jobs: Sequence[Job], ideal: Ideal, *,
           max_wait: float = DEFAULT_MAX_WAIT_SECONDS, world: World | None = None,
           seed: int = 0, queue: Any = None, clock: Clock = homogeneous_clock,
           ) -> tuple[dict[int, Ran], float]:
    """Arrivals and ends in time order, one queue pass after each; every job's run, and the
    stranded share of free GPUs averaged over the arrival window. The policies decide on
    the cost model's predictions; a job runs as ``clock`` says with the placement's
    bandwidth in ``world`` (bench.replay_world; None: the model's). ``queue``: the
    policy's queue when the caller built it (default :func:`make_queue`)."""
    world = world or World()
    queue = queue if queue is not None else make_queue(policy, cluster, max_wait=max_wait)
    by_key = {j.key: j for j in jobs}
    by_name = {n.name: n for n in cluster}
    ran: dict[int, Ran] = {}
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.id) for j in jobs]
    heapq.heapify(events)
    sizes = {n.name: len(n.topology.gpus) for n in cluster}
    window_end = max(j.arrival for j in jobs)
    area, last, stranded_now = 0.0, min(j.arrival for j in jobs), 0.0

    def started(s: Any) -> None:
        job = by_key[s.key]
        bw = s.reservation.bus_bandwidth_gbps
        got = [by_name[n] for n in sorted({x.node for x in s.reservation.slots})]
        eff, runs = clock(job, world.bandwidth(by_name, s.reservation.slots), got,
                          world.error(seed, job.id))

        def of(best: float) -> float:
            return 1.0 if job.gang.total_gpus == 1 or best <= 0 else min(1.0, bw / best)

        end = s.at + runs
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
        held = queue.held_gpus()
        free = sum(sizes[n] - len(held.get(n, ())) for n in sizes)
        partly = sum(sizes[n] - len(g) for n, g in held.items() if g)
        stranded_now = partly / free if free else 0.0
    span = window_end - min(j.arrival for j in jobs)
    return ran, area / span if span > 0 else 0.0


def summary(policy: str, jobs: Sequence[Job], ran: dict[int, Ran], stranded: float,
            capacity: int) -> dict[str, Any]:
    return replay_report.summary(
        policy, [Done(j.id, j.arrival, j.gang.total_gpus, j.gpu_work_s) for j in jobs], ran,
        stranded, capacity=capacity, min_share=RULE.min_share, floor=RULE.floor)


def run_one(load: float, seed: int, count: int, cluster: list[NodeState],
            policies: Sequence[str], ideal: Ideal, *, world: World | None = None,
            max_wait: float = DEFAULT_MAX_WAIT_SECONDS, mixed: bool = False
            ) -> list[dict[str, Any]]:
    """Every policy on one seeded stream; ``mixed``: the mixed-generation mode
    (bench.mixed_generations: compute charged per GPU model, its own baselines)."""
    world = world or WORLDS[MAIN_WORLD]
    scale = mixed_generations.capacity_ratio(cluster) if mixed else 1.0
    jobs = job_stream(count, seed, ideal=ideal, load=load * scale)
    capacity = sum(len(n.topology.gpus) for n in cluster)
    make = mixed_generations.queue_factory(seed, jobs) if mixed else None
    clock = (mixed_generations.clock_for(seed, OVERLAP, step_s) if mixed
             else homogeneous_clock)

    def stated(jobs: Sequence[Job]) -> list[Job]:
        """The jobs stating their compute share (gputopo.io/compute-share): on the
        homogeneous cluster their compute / step at their best placement."""
        if mixed:
            return mixed_generations.stating(jobs, lambda j: mixed_generations.stated_share(
                seed, j, ideal.bandwidth(j.gang), cluster, OVERLAP, step_s))
        return mixed_generations.stating(jobs, ideal.efficiency)
    rows = []
    for name in policies:
        ran, stranded = replay(name, cluster, stated(jobs) if name == "gputopo-stated" else jobs,
                               ideal, world=world, seed=seed,
                               max_wait=max_wait, clock=clock,
                               queue=make(name, cluster) if make else None)
        rows.append({"world": world.name, "load": load, "seed": seed,
                     **summary(name, jobs, ran, stranded, capacity)})
    return rows


def tables(rows: list[dict[str, Any]]) -> str:
    return replay_report.tables(rows, ours=next(iter(r["policy"] for r in rows)))


def _ints(text: str) -> list[int]:
    """"6-20" or "1,2,3" or "1-5,9"."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs per run (default 300)")
    ap.add_argument("--loads", default=",".join(map(str, LOADS)))
    ap.add_argument("--seeds", default=HELD_OUT,
                    help=f"e.g. 6-20 or 1,2 (default {HELD_OUT}, held out; {TUNING} tuned on)")
    ap.add_argument("--policies", default=",".join(MAIN),
                    help=f"comma list; the first is the one the ratios are of (known: "
                         f"{', '.join(KNOWN)})")
    ap.add_argument("--worlds", default=",".join(WORLDS),
                    help=f"the clock's worlds; the first is the main table's, the others "
                         f"are sensitivity rows (known: {', '.join(WORLDS)})")
    ap.add_argument("--sensitivity-policies", default=",".join(SENSITIVITY),
                    help="the policies run in the sensitivity worlds")
    ap.add_argument("--max-wait", type=float, default=DEFAULT_MAX_WAIT_SECONDS,
                    help="gputopo's maxWaitSeconds (the product's default 3600)")
    ap.add_argument("--cluster", choices=CLUSTERS, default=CLUSTERS[0],
                    help="homogeneous (default: the 32-node DGX-1/A100/PCIe replay) or "
                         "mixed-generations "
                         "(bench/mixed_generations.py: H100 ... T4, compute charged per GPU "
                         "model, its own baselines and defaults)")
    ap.add_argument("--json", metavar="FILE", help="also write every run's figures as JSON")
    args = ap.parse_args(argv)
    mixed = args.cluster == "mixed-generations"
    if mixed:  # the mode's own policies unless named; no sensitivity worlds unless named
        given = set(argv or sys.argv[1:])
        if not any(a.startswith("--policies") for a in given):
            args.policies = ",".join(mixed_generations.POLICIES)
        if not any(a.startswith("--worlds") for a in given):
            args.worlds = MAIN_WORLD
        if not any(a.startswith("--sensitivity-policies") for a in given):
            args.sensitivity_policies = args.policies
    try:
        loads = [float(x) for x in args.loads.split(",") if x.strip()]
        seeds = _ints(args.seeds)
    except ValueError as e:
        ap.error(f"--loads/--seeds: {e}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    sens = [p.strip() for p in args.sensitivity_policies.split(",") if p.strip()]
    worlds = [w.strip() for w in args.worlds.split(",") if w.strip()]
    known_policies = (*mixed_generations.POLICIES, "gputopo-admit") if mixed else KNOWN
    for what, names, known in (("policy", policies + (sens if len(worlds) > 1 else []),
                                known_policies), ("world", worlds, WORLDS)):
        unknown = [n for n in names if n not in known]
        if unknown:
            ap.error(f"unknown {what} {unknown[0]!r} (known: {', '.join(known)})")
    cluster = mixed_generations.mixed_cluster() if mixed else replay_cluster()
    ideal = Ideal(cluster)
    t0 = time.perf_counter()
    rows, side = [], []
    for w in worlds:
        for load in loads:
            for seed in seeds:
                main_world = w == worlds[0]
                out = run_one(load, seed, args.jobs, cluster, policies if main_world else sens,
                              ideal, world=WORLDS[w], max_wait=args.max_wait, mixed=mixed)
                if main_world:
                    rows.extend(out)  # and, when there are other worlds, their reference
                side.extend(r for r in out if r["policy"] in sens and len(worlds) > 1)
    took = time.perf_counter() - t0
    gpus = sum(len(n.topology.gpus) for n in cluster)
    title = "Mixed-generation replay" if mixed else "Cluster replay"
    print(f"## {title}: {len(cluster)} nodes, {gpus} GPUs; {args.jobs} jobs per run; "
          f"loads {', '.join(map(str, loads))}; seeds {args.seeds}; the clock: "
          f"{worlds[0]}; {took:.0f} s, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores\n")
    print(replay_report.tables(rows, ours=policies[0],
                               level_against=[p for p in policies
                                              if p == policies[0] or p not in GPUTOPO_ROWS]))
    if mixed:
        mine = [p for p in policies if p in GPUTOPO_ROWS]
        others = [p for p in policies if p not in GPUTOPO_ROWS]
        if mine and others:
            print("\n### Issue 32's bar: goodput at least every baseline's and p95 JCT "
                  "within 5 % of the lowest\n")
            print(replay_report.bar(rows, mine, others))
    if side:
        base = next((p for p in sens if p.startswith("kueue")), sens[-1])
        print(f"\n### Sensitivity: {policies[0]} / {base} when the clock runs in another "
              f"world (the policies still decide on the cost model)\n")
        print(replay_report.sensitivity(side, ours=policies[0], baseline=base, against=sens))
    if args.json:
        Path(args.json).write_text(json.dumps(rows + [r for r in side if r["world"] !=
                                                      worlds[0]], indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
