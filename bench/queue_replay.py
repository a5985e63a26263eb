"""Replay of a job stream: ``whenFull: wait`` (the placement queue) against ``admit``.

What it measures, from the SAME seeded stream of training jobs on the same cluster (DGX-1
V100 nodes, the seeds' topology, 25 Gbit/s between nodes), in simulated time:

* **best-topology share**: jobs whose placement's predicted bus bandwidth reaches 90 % of
  what the same gang gets on an empty cluster (the queue's "good placement" bar);
* **mean bandwidth share**: placement bandwidth / that ideal, averaged over jobs;
* **wait**: from arrival to placement, mean and p95 (seconds of simulated time).

The gputopo parts are the real ones: :class:`webhook.placement.reserve.GangReserver` (the
solve + compare-and-swap reservation of admission and the queue, on an in-memory store),
:data:`GOOD_SHARE`, and the queue's pass policy :func:`webhook.queue.gangs.serve_pass`
(arrival order, backfill, starvation guard, the waiting rule after ``maxWaitSeconds``).
Only the I/O is simulated: no API server, pods "bound" the moment they are placed.

- ``admit``: at arrival the best placement there is; when none, the gang waits for the
  default scheduler, which binds it FIFO and topology-blind
  (:mod:`bench.baselines.default_scheduler`) as soon as enough GPUs are free.
- ``wait``: at arrival a placement only if good; else the gang waits and every event (a
  job ends, a job arrives) runs one queue pass; after ``maxWaitSeconds`` what the default
  waiting rule allows (gputopo.placement.waiting: the best placement free if it reaches
  ``floorShare`` of the gang's best, else it keeps waiting).

A job's duration does not depend on its placement here (conservative for ``wait``: a
better placement would also finish sooner).

Run: ``python bench/queue_replay.py [--jobs 300] [--nodes 8] [--load 0.85] [--seed 1]
[--max-wait 1800] [--markdown]``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.baselines import default_scheduler
from gputopo.cluster.reservations import GangKey, InMemoryReservationStore
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.placement.waiting import AFTER_MAX_WAIT, WaitingRule, against_typical
from webhook.placement.reserve import GOOD_SHARE, GangReserver, Unplaced
from webhook.queue.gangs import DEFAULT_STARVATION_SECONDS, WaitingGang, serve_pass

#: (replicas, GPUs per replica) and weight: the shapes of Kubeflow jobs on 8-GPU nodes.
SHAPES = (((1, 1), 20), ((2, 1), 10), ((4, 1), 20), ((8, 1), 8), ((1, 2), 10),
          ((1, 4), 10), ((2, 2), 8), ((2, 4), 8), ((1, 8), 6))
MEAN_DURATION = 900.0


@dataclass(frozen=True)
class Job:
    name: str
    arrival: float
    duration: float
    gang: GangRequest


@dataclass
class Outcome:
    placed_at: float = -1.0
    share: float = 0.0  # placement bandwidth / ideal
    how: str = ""


@dataclass
class Cluster:
    """A ClusterReader of fixed nodes (usage lives in the reservation store)."""

    nodes: list[NodeState]

    def node_states(self) -> list[NodeState]:
        return self.nodes

    def object(self, **_: Any) -> None:
        return None

    def namespace(self, name: str) -> None:
        return None


@dataclass
class Sim:
    cluster: Cluster
    reserver: GangReserver
    ideal: dict[GangRequest, float] = field(default_factory=dict)

    def ideal_of(self, gang: GangRequest) -> float:
        if gang not in self.ideal:
            self.ideal[gang] = self.reserver.ideal_bandwidth(self.cluster.nodes, gang)
        return self.ideal[gang]


def dgx1_cluster(count: int) -> list[NodeState]:
    from gputopo.cluster.demo import demo_snapshot

    base = demo_snapshot().node_states()[0]
    return [NodeState(name=f"dgx1-{i:02d}", topology=base.topology, zone="z1",
                      rack=f"r{i // 4}", network_gbps=base.network_gbps)
            for i in range(count)]


def job_stream(count: int, seed: int, *, gpus: int, load: float) -> list[Job]:
    rng = random.Random(seed)
    shapes = [s for s, _ in SHAPES]
    weights = [w for _, w in SHAPES]
    mean_gpus = sum(r * g * w for (r, g), w in SHAPES) / sum(weights)
    rate = load * gpus / (mean_gpus * MEAN_DURATION)  # jobs per second
    t, jobs = 0.0, []
    for k in range(count):
        t += rng.expovariate(rate)
        r, g = rng.choices(shapes, weights)[0]
        jobs.append(Job(f"job-{k:04d}", t, rng.expovariate(1 / MEAN_DURATION),
                        GangRequest(replicas=r, gpus_per_replica=g)))
    return jobs


def replay(policy: str, jobs: Sequence[Job], nodes: list[NodeState], *, max_wait: float,
           rule: WaitingRule | None = None) -> dict[str, Outcome]:
    """``rule``: the waiting rule of ``wait`` (None: the product's default)."""
    rule = rule or WaitingRule()
    store = InMemoryReservationStore(ttl_seconds=1e12)
    sim = Sim(Cluster(nodes), GangReserver(store))
    out = {j.name: Outcome() for j in jobs}
    by_key: dict[GangKey, Job] = {}
    events: list[tuple[float, int, str, str]] = []  # (time, order, kind, job)
    for j in jobs:
        heapq.heappush(events, (j.arrival, 1, "arrive", j.name))
    jobs_by_name = {j.name: j for j in jobs}
    waiting: list[WaitingGang] = []  # the queue (wait)
    blind: list[Job] = []  # FIFO for the default scheduler (admit; wait: gangs denied)

    def key_of(job: Job) -> GangKey:
        return GangKey("bench", "MPIJob", job.name, job.name)

    def started(job: Job, placement_bw: float, now: float, how: str) -> None:
        o = out[job.name]
        o.placed_at, o.how = now, how
        ideal = sim.ideal_of(job.gang)
        o.share = min(1.0, placement_bw / ideal) if ideal > 0 else 1.0
        heapq.heappush(events, (now + job.duration, 0, "end", job.name))

    def try_reserve(job: Job, now: float, good: float | None, how: str) -> str | None:
        made = sim.reserver.reserve(cluster=sim.cluster, pod={}, key=key_of(job),
                                    gang=job.gang, good_share=good,
                                    typical=good is None or against_typical(rule, good),
                                    pack_share=rule.min_share)
        if isinstance(made, Unplaced):
            return made.reason
        started(job, made[0].bus_bandwidth_gbps, now, how)
        return None

    def schedule_blind(now: float) -> None:
        while blind:
            job = blind[0]
            free = [NodeState(name=n.name, topology=n.topology, used=frozenset(
                store.held_gpus().get(n.name, set())), zone=n.zone, rack=n.rack,
                network_gbps=n.network_gbps) for n in nodes]
            placement: Placement = default_scheduler(free, job.gang)
            if not placement.feasible:
                return  # FIFO: the head waits, the rest behind it
            store.reserve(key_of(job), placement)
            blind.pop(0)
            started(job, placement.bus_bandwidth_gbps, now, "scheduler")

    def queue_pass(now: float) -> None:
        def place(g: WaitingGang, need: float) -> str | None:
            how = "queue" if need >= g.rule.min_share else "fallback"  # below minShare
            return try_reserve(by_key[g.key], now, need, how)

        def give_up(g: WaitingGang, why: str) -> bool:  # afterMaxWait: deny: never runs
            out[by_key[g.key].name].how = "denied"
            return True

        result = serve_pass(waiting, now=now, starvation_seconds=DEFAULT_STARVATION_SECONDS,
                            place=place, give_up=give_up)
        done = set(result.placed) | set(result.fallen_back) | set(result.denied)
        waiting[:] = [g for g in waiting if str(g.key) not in done]

    while events:
        now, _, kind, name = heapq.heappop(events)
        job = jobs_by_name[name]
        if kind == "end":
            store.release(key_of(job))
        elif policy == "admit":
            if try_reserve(job, now, None, "admission") is not None:
                blind.append(job)
        else:
            by_key[key_of(job)] = job
            if try_reserve(job, now, rule.min_share, "admission") is not None:
                waiting.append(WaitingGang(key_of(job), job.gang, now, max_wait, rule=rule))
        if policy == "wait":
            queue_pass(now)
        schedule_blind(now)
    return out


def summary(policy: str, jobs: Sequence[Job], out: dict[str, Outcome]) -> dict[str, Any]:
    """Figures over the jobs that started (a denied one never does)."""
    ran = [j for j in jobs if out[j.name].placed_at >= 0]
    waits = sorted(out[j.name].placed_at - j.arrival for j in ran)
    shares = [out[j.name].share for j in ran]
    p95 = waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))] if waits else 0.0
    hows: dict[str, int] = {}
    for o in out.values():
        hows[o.how] = hows.get(o.how, 0) + 1
    return {"policy": policy, "jobs": len(jobs), "started": len(ran),
            "best_topology_share": round(sum(s >= GOOD_SHARE for s in shares) / len(ran), 3),
            "mean_bandwidth_share": round(sum(shares) / len(ran), 3),
            "lowest_bandwidth_share": round(min(shares), 3),
            "mean_wait_s": round(sum(waits) / len(waits), 1), "p95_wait_s": round(p95, 1),
            "placed_by": hows}


def parse_rule(text: str) -> WaitingRule:
    """``takeBest:0.5``, ``keepWaiting``, ``deny`` (minShare stays the default)."""
    after, _, floor = text.partition(":")
    if after not in AFTER_MAX_WAIT:
        raise argparse.ArgumentTypeError(f"{after!r}: one of {', '.join(AFTER_MAX_WAIT)}")
    return WaitingRule(after_max_wait=after,  # type: ignore[arg-type]
                       **({"floor_share": float(floor)} if floor else {}))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-wait", type=float, default=1800.0)
    ap.add_argument("--rule", type=parse_rule, action="append", default=None,
                    help="a waiting rule for 'wait' (repeatable): afterMaxWait[:floorShare],"
                         " e.g. takeBest:0.5 (the default), keepWaiting, deny")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    nodes = dgx1_cluster(args.nodes)
    jobs = job_stream(args.jobs, args.seed, gpus=8 * args.nodes, load=args.load)
    rows = [summary("admit", jobs, replay("admit", jobs, nodes, max_wait=args.max_wait))]
    for rule in args.rule or [WaitingRule()]:
        name = f"wait ({rule.after_max_wait}, floor {rule.floor:.0%})"
        rows.append(summary(name, jobs, replay("wait", jobs, nodes, max_wait=args.max_wait,
                                               rule=rule)))
    if not args.markdown:
        print(json.dumps(rows, indent=2))
        return 0
    print("| whenFull | jobs started | best-topology share | mean bandwidth share | lowest "
          "share | mean wait (s) | p95 wait (s) | placed by |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        by = ", ".join(f"{k} {v}" for k, v in sorted(r["placed_by"].items()))
        print(f"| {r['policy']} | {r['started']}/{r['jobs']} | {r['best_topology_share']:.1%} | "
              f"{r['mean_bandwidth_share']:.1%} | {r['lowest_bandwidth_share']:.1%} | "
              f"{r['mean_wait_s']:.0f} | {r['p95_wait_s']:.0f} | {by} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
