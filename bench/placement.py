"""Placement benchmarks: gputopo's gang solver against the baselines, and its latency.

Three parts (``--part``), results as Markdown tables on stdout, optionally JSON and PNG plots:

- ``seeds``: the seeds' scenario, two empty DGX-1 V100 nodes and a 4 x 1-GPU job: where each
  policy puts the workers and the predicted all-reduce bus bandwidth (cost model).
- ``replay``: a seeded job stream on a 64-node cluster (24 DGX-1 V100, 16 DGX A100, 24
  two-socket PCIe servers; racks of 8 nodes of one kind, two zones). Jobs of 1-64 GPUs,
  skewed towards small ones, arrive as a Poisson stream; each job's run time is its
  communication-free work divided by its predicted efficiency (compute / step time with the
  cost model's bus bandwidth of its placement), so bad placements also lengthen queues.
  Every policy sees the same jobs in the same order. Metrics: mean predicted job
  throughput (efficiency), share of jobs on the best topology their size allows, stranded
  free GPUs (fragmentation) and waiting time.
- ``latency``: ``solve`` p50/p99 on random partly used clusters of 100, 1,000 and 5,000
  nodes for gangs of 1 to 64 GPUs. Between timed calls a few nodes change (jobs come and
  go); caches stay warm as in the running webhook; the first (cold) call is shown apart.

Run (the exact commands in docs/benchmarks.md)::

    python bench/placement.py                      # everything, full size (several minutes)
    python bench/placement.py --quick              # small replay, few repeats (~1 minute)
    python bench/placement.py --part latency --sizes 100,1000 --repeats 20
    python bench/placement.py --plots docs/img --json /tmp/placement.json

Not part of the test suite; tests/placement/test_bench_smoke.py runs it tiny.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/placement.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench.baselines import BASELINES  # noqa: E402
from gputopo.placement.objective import best_quality, set_quality  # noqa: E402
from gputopo.placement.solver import GroupedNodes, solve  # noqa: E402
from gputopo.placement.types import GangRequest, NodeState, Placement  # noqa: E402
from gputopo.topology.cost import step_time_s  # noqa: E402
from gputopo.topology.load import read_topology_file  # noqa: E402
from gputopo.topology.model import Topology  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "topologies"
Policy = Callable[[Sequence[NodeState], GangRequest], Placement]
POLICIES: dict[str, Policy] = {"gputopo": solve, **BASELINES}


# --- hardware -----------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeKind:
    """A kind of server: its fixture topology and its network (Gbit/s and transport, an
    assumption)."""

    name: str
    fixture: str
    network_gbps: float
    transport: str = "tcp"


#: DGX-1 V100 with one 100 Gbit/s EDR port (a common cloud setup), DGX A100 with 4 x 200 Gbit/s
#: HDR (half of the 8 ports of the reference design), both over RDMA with GPUDirect (gdr, as
#: DGX systems run it; the share, 0.94, is the one "rdma" had before gdr was split off, so
#: the replay figures in docs/benchmarks.md stand); PCIe servers on 25 GbE with NCCL over
#: TCP sockets.
KINDS = {
    "dgx1": NodeKind("dgx1", "dgx1-v100.txt", 100.0, "gdr"),
    "a100": NodeKind("a100", "dgx-a100.txt", 800.0, "gdr"),
    "pcie": NodeKind("pcie", "pcie-2socket-phb.txt", 25.0, "tcp"),
}
_TOPOLOGIES: dict[str, Topology] = {}


def topology(kind: str) -> Topology:
    if kind not in _TOPOLOGIES:
        _TOPOLOGIES[kind] = read_topology_file(str(FIXTURES / KINDS[kind].fixture))
    return _TOPOLOGIES[kind]


def mixed_cluster(
    counts: dict[str, int], *, rack_size: int, racks_per_zone: int
) -> list[NodeState]:
    """Empty nodes; each rack holds one kind of server, racks alternate over the zones."""
    nodes: list[NodeState] = []
    rack = 0
    for kind, count in counts.items():
        for start in range(0, count, rack_size):
            for i in range(start, min(count, start + rack_size)):
                nodes.append(
                    NodeState(
                        name=f"{kind}-{i:04d}",
                        topology=topology(kind),
                        zone=f"zone-{rack // racks_per_zone}",
                        rack=f"rack-{rack:03d}",
                        network_gbps=KINDS[kind].network_gbps,
                        network_transport=KINDS[kind].transport,
                    )
                )
            rack += 1
    return nodes


def with_used(node: NodeState, used: frozenset[int]) -> NodeState:
    return NodeState(
        node.name, node.topology, used, node.zone, node.rack, node.network_gbps,
        node.network_transport,
    )


# --- the seeds' scenario ------------------------------------------------------------------
def seeds_scenario() -> list[dict[str, Any]]:
    """Two empty DGX-1 V100 nodes, one 4 x 1-GPU job: each policy's answer.

    The nodes are the embedded demo cluster (the seeds' two ACK nodes, 25 Gbit/s each).
    """
    from gputopo.cluster.demo import demo_snapshot

    nodes = demo_snapshot().node_states()
    gang = GangRequest(replicas=4, gpus_per_replica=1)
    rows = []
    for name, policy in POLICIES.items():
        p = policy(nodes, gang)
        where: dict[str, list[int]] = {}
        for s in p.slots:
            where.setdefault(s.node, []).extend(s.gpus)
        rows.append(
            {
                "policy": name,
                "placement": "; ".join(
                    f"{n}: GPUs {','.join(map(str, sorted(g)))}" for n, g in sorted(where.items())
                ),
                "busBandwidthGBps": round(p.bus_bandwidth_gbps, 2),
            }
        )
    return rows


# --- the replay -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Model:
    name: str
    params: float
    compute_s: float  # one step of one GPU's batch


#: fp32 gradients. Compute per step: batch 64 on a V100 (bench/cost_model.py's figures for
#: ResNet50 and VGG16; BERT-large an assumption of the same order).
MODELS = (
    Model("resnet50", 25.6e6, 0.20),
    Model("vgg16", 138.4e6, 0.28),
    Model("bert-large", 340e6, 0.40),
)
OVERLAP = 0.5
#: Offered load: communication-free GPU-minutes asked per GPU-minute of the cluster.
LOAD = 0.8
#: Job sizes (GPUs) and their probabilities: most jobs are small, as in published traces.
SIZES = ((1, 0.45), (2, 0.18), (4, 0.14), (8, 0.13), (16, 0.05), (32, 0.03), (64, 0.02))
#: A job at the head of the queue for longer than this stops smaller jobs from overtaking.
STARVE_MIN = 120.0


@dataclass
class Job:
    id: int
    arrival: float  # minutes
    gang: GangRequest
    model: Model
    work_min: float  # run time at perfect (communication-free) efficiency
    start: float | None = None
    end: float | None = None
    efficiency: float = 0.0
    best_topology: bool = False
    slots: tuple = field(default=(), repr=False)


def job_stream(count: int, seed: int, *, capacity_gpus: int, load: float) -> list[Job]:
    """Poisson arrivals sized so the offered communication-free load is ``load``."""
    rng = random.Random(seed)
    sizes, weights = zip(*SIZES, strict=True)
    mean_size = sum(s * w for s, w in SIZES)
    median, sigma = 30.0, 1.0
    mean_work = median * math.exp(sigma**2 / 2)
    rate = load * capacity_gpus / (mean_size * mean_work)  # jobs per minute
    jobs, t = [], 0.0
    for i in range(count):
        t += rng.expovariate(rate)
        size = rng.choices(sizes, weights)[0]
        if size > 8:
            gang = GangRequest(size // 8, 8)
        elif size > 1 and rng.random() < 0.5:
            gang = GangRequest(size, 1)  # one worker per GPU, like the seeds' jobs
        else:
            gang = GangRequest(1, size)
        work = min(720.0, max(2.0, rng.lognormvariate(math.log(median), sigma)))
        jobs.append(Job(i, t, gang, rng.choice(MODELS), work))
    return jobs


def efficiency(job: Job, placement: Placement) -> float:
    """Compute time / predicted step time (1 for one GPU: nothing to all-reduce)."""
    n = job.gang.total_gpus
    if n == 1:
        return 1.0
    step = step_time_s(
        params=job.model.params,
        bytes_per_param=4,
        compute_s=job.model.compute_s,
        bus_bw_gbps=placement.bus_bandwidth_gbps,
        n_gpus=n,
        overlap=OVERLAP,
    )
    return job.model.compute_s / step


def is_best_topology(nodes: dict[str, NodeState], placement: Placement, gang: GangRequest) -> bool:
    """Fewest nodes the size needs, every share as good as any set of its size on that node,
    and one rack when it spans several nodes."""
    shares: dict[str, list[int]] = {}
    for s in placement.slots:
        shares.setdefault(s.node, []).extend(s.gpus)
    largest = max(len(n.topology.gpus) for n in nodes.values())
    if len(shares) > math.ceil(gang.total_gpus / largest):
        return False
    if len({(nodes[n].zone, nodes[n].rack) for n in shares}) > 1:
        return False
    for name, gpus in shares.items():
        topo = nodes[name].topology
        if set_quality(topo, gpus)[0] < best_quality(topo, len(gpus))[0]:
            return False
    return True


@dataclass
class ReplayResult:
    policy: str
    jobs: list[Job]
    stranded_avg: float
    solve_ms: list[float]

    def summary(self) -> dict[str, Any]:
        done = [j for j in self.jobs if j.start is not None]
        waits = sorted(j.start - j.arrival for j in done)
        multi = [j for j in done if j.gang.total_gpus > 1]
        return {
            "policy": self.policy,
            "jobs": len(self.jobs),
            "placed": len(done),
            "meanEfficiency": statistics.fmean(j.efficiency for j in multi) if multi else 1.0,
            "meanEfficiencyAll": statistics.fmean(j.efficiency for j in done) if done else 0.0,
            "bestTopologyShare": statistics.fmean(j.best_topology for j in multi) if multi else 1,
            "strandedFreeGpus": self.stranded_avg,
            "meanWaitMin": statistics.fmean(waits) if waits else 0.0,
            "p95WaitMin": waits[int(0.95 * (len(waits) - 1))] if waits else 0.0,
            "makespanMin": max((j.end or 0) for j in done) if done else 0.0,
            "policyMsMean": statistics.fmean(self.solve_ms) if self.solve_ms else 0.0,
        }


def replay(policy_name: str, cluster: list[NodeState], jobs: list[Job]) -> ReplayResult:
    """Event-driven replay: arrivals and completions; FIFO with backfill and a starvation
    guard; a job's GPUs are held from its start to its end."""
    policy = POLICIES[policy_name]
    jobs = [Job(j.id, j.arrival, j.gang, j.model, j.work_min) for j in jobs]
    base = {n.name: n for n in cluster}
    used: dict[str, set[int]] = {n.name: set() for n in cluster}
    total_gpus = sum(len(n.topology.gpus) for n in cluster)
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.id) for j in jobs]
    heapq.heapify(events)
    queue: list[Job] = []
    by_id = {j.id: j for j in jobs}
    solve_ms: list[float] = []
    stranded_area, last_t = 0.0, 0.0
    stranded_now = 0.0

    def stranded() -> float:
        free_total = free_whole = 0
        for name, u in used.items():
            size = len(base[name].topology.gpus)
            free_total += size - len(u)
            free_whole += size if not u else 0
        return 0.0 if free_total == 0 else 1 - free_whole / free_total

    while events:
        t, kind, jid = heapq.heappop(events)
        stranded_area += stranded_now * (t - last_t)
        last_t = t
        job = by_id[jid]
        if kind == 0:  # completion
            for s in job.slots:
                used[s.node].difference_update(s.gpus)
        else:
            queue.append(job)
        free_total = total_gpus - sum(len(u) for u in used.values())
        still: list[Job] = []
        blocked = False
        for q in queue:
            if blocked or q.gang.total_gpus > free_total:
                still.append(q)
                blocked = blocked or (q is queue[0] and t - q.arrival > STARVE_MIN)
                continue
            nodes = [with_used(base[name], frozenset(u)) for name, u in used.items()]
            t0 = time.perf_counter()
            p = policy(nodes, q.gang)
            solve_ms.append((time.perf_counter() - t0) * 1000)
            if not p.feasible:
                still.append(q)
                blocked = q is queue[0] and t - q.arrival > STARVE_MIN
                continue
            q.start, q.slots = t, p.slots
            q.efficiency = efficiency(q, p)
            q.best_topology = is_best_topology(base, p, q.gang)
            q.end = t + q.work_min / q.efficiency
            for s in p.slots:
                used[s.node].update(s.gpus)
            free_total -= q.gang.total_gpus
            heapq.heappush(events, (q.end, 0, q.id))
        queue = still
        stranded_now = stranded()
    horizon = max(last_t, 1e-9)
    return ReplayResult(policy_name, jobs, stranded_area / horizon, solve_ms)


def replay_cluster() -> list[NodeState]:
    return mixed_cluster({"dgx1": 24, "a100": 16, "pcie": 24}, rack_size=8, racks_per_zone=4)


def run_replay(job_count: int, seed: int, cluster: list[NodeState] | None = None) -> list[dict]:
    cluster = cluster or replay_cluster()
    capacity = sum(len(n.topology.gpus) for n in cluster)
    jobs = job_stream(job_count, seed, capacity_gpus=capacity, load=LOAD)
    largest = min(capacity, 64)
    jobs = [j for j in jobs if j.gang.total_gpus <= largest]
    return [replay(name, cluster, jobs).summary() for name in POLICIES]


# --- latency ------------------------------------------------------------------------------
GANGS = (
    GangRequest(1, 1),
    GangRequest(1, 2),
    GangRequest(4, 1),
    GangRequest(1, 4),
    GangRequest(1, 8),
    GangRequest(2, 8),
    GangRequest(4, 8),
    GangRequest(8, 8),
)


def busy_cluster(size: int, rng: random.Random) -> list[NodeState]:
    """A third of each kind, racks of 32 (8 below 200 nodes), 4 racks per zone, ~55% busy."""
    third = size // 3
    counts = {"dgx1": third, "a100": third, "pcie": size - 2 * third}
    rack = 8 if size < 200 else 32
    nodes = mixed_cluster(counts, rack_size=rack, racks_per_zone=4)
    return [with_used(n, random_used(n, rng)) for n in nodes]


def random_used(node: NodeState, rng: random.Random) -> frozenset[int]:
    k = rng.choice((0, 0, 0, 2, 4, 4, 5, 6, 7, 8, 8))
    return frozenset(rng.sample(node.topology.indices, k))


def run_latency(
    sizes: Sequence[int], repeats: int, seed: int, gangs: Sequence[GangRequest] = GANGS
) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        rng = random.Random(seed + size)
        nodes = busy_cluster(size, rng)
        # The cluster lives as long as the webhook's process does: the server moves what it
        # built out of the collector's sight before serving (webhook/server.py, serve), so
        # the full collections a solve triggers do not rescan it. Measured as it runs.
        gc.collect()
        gc.freeze()
        for gang in gangs:
            cold_nodes = nodes
            t0 = time.perf_counter()
            solve(cold_nodes, gang)
            cold = (time.perf_counter() - t0) * 1000
            samples = []
            kept = []  # the webhook's way: the grouping kept, the changed nodes redone
            grouped = GroupedNodes(nodes)
            solve(grouped, gang)
            feasible = 0
            for _ in range(repeats):
                changed = []
                for _k in range(max(1, size // 50)):  # some jobs end, others start
                    i = rng.randrange(len(nodes))
                    nodes[i] = with_used(nodes[i], random_used(nodes[i], rng))
                    changed.append(nodes[i])
                t0 = time.perf_counter()
                p = solve(nodes, gang)
                samples.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                grouped = grouped.replaced(changed)
                q = solve(grouped, gang)
                kept.append((time.perf_counter() - t0) * 1000)
                assert p == q, "the kept grouping must answer as the plain list"
                feasible += p.feasible
            samples.sort()
            kept.sort()
            rows.append(
                {
                    "nodes": size,
                    "gang": f"{gang.replicas}x{gang.gpus_per_replica}",
                    "gpus": gang.total_gpus,
                    "coldMs": cold,
                    "p50Ms": percentile(samples, 0.50),
                    "p99Ms": percentile(samples, 0.99),
                    "maxMs": samples[-1],
                    "keptP50Ms": percentile(kept, 0.50),
                    "keptP99Ms": percentile(kept, 0.99),
                    "feasibleShare": feasible / repeats,
                }
            )
        gc.unfreeze()  # the next size is another process's cluster
    return rows


def percentile(sorted_samples: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted samples."""
    if not sorted_samples:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_samples)))
    return sorted_samples[rank - 1]


# --- output -------------------------------------------------------------------------------
def md_table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """Markdown table; columns are (key, header, format)."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = [
        "| " + " | ".join(format(r[k], f) if f else str(r[k]) for k, _, f in columns) + " |"
        for r in rows
    ]
    return "\n".join([head, sep, *body])


def ratios(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gputopo's figures divided by each baseline's, from the same run."""
    ours = next(s for s in summaries if s["policy"] == "gputopo")
    out = []
    for s in summaries:
        if s["policy"] == "gputopo":
            continue
        out.append(
            {
                "baseline": s["policy"],
                "throughput": ours["meanEfficiency"] / s["meanEfficiency"],
                "bestTopology": ours["bestTopologyShare"] / max(s["bestTopologyShare"], 1e-9),
                "stranded": ours["strandedFreeGpus"] / max(s["strandedFreeGpus"], 1e-9),
                "wait": ours["meanWaitMin"] / max(s["meanWaitMin"], 1e-9),
            }
        )
    return out


def plot(results: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    if "replay" in results:
        rows = results["replay"]
        names = [r["policy"] for r in rows]
        colors = ["#2a7", "#888", "#aaa", "#c84"][: len(names)]
        fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
        panels = [
            ("meanEfficiency", "mean predicted efficiency\n(multi-GPU jobs, higher better)"),
            ("bestTopologyShare", "share on best topology\n(multi-GPU jobs, higher better)"),
            ("strandedFreeGpus", "stranded free GPUs\n(time average, lower better)"),
            ("meanWaitMin", "mean wait, minutes\n(lower better)"),
        ]
        for ax, (key, title) in zip(axes, panels, strict=True):
            ax.bar(names, [r[key] for r in rows], color=colors)
            ax.set_title(title, fontsize=9)
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        fig.suptitle("Job stream replay, 64 nodes (DGX-1 V100, DGX A100, PCIe)", fontsize=10)
        save(fig, "placement-replay.png")
    if "latency" in results:
        rows = results["latency"]
        fig, ax = plt.subplots(figsize=(7.5, 4))
        for size in sorted({r["nodes"] for r in rows}):
            mine = [r for r in rows if r["nodes"] == size]
            xs = [r["gang"] for r in mine]
            ax.plot(xs, [r["p50Ms"] for r in mine], marker="o", label=f"{size} nodes p50")
            ax.plot(xs, [r["p99Ms"] for r in mine], marker="^", ls="--", label=f"{size} p99")
        ax.axhline(50, color="red", lw=0.8, ls=":")
        ax.axhline(500, color="red", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel("gang (replicas x GPUs)")
        ax.set_ylabel("solve time, ms")
        ax.set_title("gputopo solver latency (targets 50 ms / 500 ms dotted)", fontsize=10)
        ax.legend(fontsize=7, ncol=3)
        save(fig, "placement-latency.png")
    if "seeds" in results:
        rows = results["seeds"]
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.bar([r["policy"] for r in rows], [r["busBandwidthGBps"] for r in rows], color="#47a")
        ax.set_ylabel("predicted bus bandwidth, GB/s")
        ax.set_title("Seeds' scenario: 4 x 1-GPU job on two empty DGX-1 V100", fontsize=10)
        save(fig, "placement-seeds.png")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("all", "seeds", "replay", "latency"), default="all")
    ap.add_argument("--quick", action="store_true", help="small replay and few repeats")
    ap.add_argument("--jobs", type=int, help="jobs in the replay (default 2000, quick 300)")
    ap.add_argument("--sizes", default="100,1000,5000", help="cluster sizes for latency")
    ap.add_argument("--repeats", type=int, help="timed calls per gang (default 100, quick 10)")
    ap.add_argument(
        "--gangs", help="latency gangs as RxG list, e.g. 16x1,64x1 (default: 1 to 64 GPUs)"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    ap.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    args = ap.parse_args(argv)
    jobs = args.jobs or (300 if args.quick else 2000)
    repeats = args.repeats or (10 if args.quick else 100)
    results: dict[str, Any] = {"seed": args.seed}

    if args.part in ("all", "seeds"):
        results["seeds"] = seeds_scenario()
        print("## Seeds' scenario: two empty DGX-1 V100, one 4 x 1-GPU job\n")
        print(md_table(results["seeds"], [
            ("policy", "policy", ""), ("placement", "placement", ""),
            ("busBandwidthGBps", "bus bandwidth GB/s", ".2f"),
        ]) + "\n")
    if args.part in ("all", "replay"):
        t0 = time.perf_counter()
        results["replay"] = run_replay(jobs, args.seed)
        results["replayRatios"] = ratios(results["replay"])
        print(f"## Replay: {jobs} jobs, seed {args.seed}, 64 nodes "
              f"({time.perf_counter() - t0:.0f} s)\n")
        print(md_table(results["replay"], [
            ("policy", "policy", ""), ("placed", "jobs placed", "d"),
            ("meanEfficiency", "mean efficiency (multi-GPU)", ".3f"),
            ("meanEfficiencyAll", "mean efficiency (all)", ".3f"),
            ("bestTopologyShare", "best topology (multi-GPU)", ".1%"),
            ("strandedFreeGpus", "stranded free GPUs", ".1%"),
            ("meanWaitMin", "mean wait min", ".1f"), ("p95WaitMin", "p95 wait min", ".1f"),
            ("makespanMin", "makespan min", ".0f"), ("policyMsMean", "ms per call", ".2f"),
        ]) + "\n")
        print(md_table(results["replayRatios"], [
            ("baseline", "gputopo / baseline", ""), ("throughput", "throughput", ".2f"),
            ("bestTopology", "best-topology share", ".2f"),
            ("stranded", "stranded GPUs", ".2f"), ("wait", "mean wait", ".2f"),
        ]) + "\n")
    if args.part in ("all", "latency"):
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        gangs = GANGS
        if args.gangs:
            gangs = tuple(
                GangRequest(*(int(x) for x in g.lower().split("x"))) for g in args.gangs.split(",")
            )
        results["latency"] = run_latency(sizes, repeats, args.seed, gangs)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        results["loadAverage"] = load
        print(f"## Solver latency ({repeats} timed calls per row, load average {load:.1f} "
              f"on {os.cpu_count()} cores)\n")
        print(md_table(results["latency"], [
            ("nodes", "nodes", "d"), ("gang", "gang", ""), ("gpus", "GPUs", "d"),
            ("p50Ms", "p50 ms", ".1f"), ("p99Ms", "p99 ms", ".1f"), ("maxMs", "max ms", ".1f"),
            ("coldMs", "cold first call ms", ".1f"), ("feasibleShare", "feasible", ".0%"),
            ("keptP50Ms", "kept grouping p50 ms", ".2f"), ("keptP99Ms", "kept grouping p99 ms",
                                                             ".2f"),
        ]) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    if args.plots:
        for path in plot(results, Path(args.plots)):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
