"""Solver latency on a GB200 NVL72 cluster: 16 NVLink domains (racks) of 18 trays x 4 GPUs.

Why a script of its own: bench/placement.py's latency part times mixed DGX-1 / A100 / PCIe
clusters; an NVL72 cluster has another shape (288 nodes of one kind, grouped by NVLink
domain, every domain its own scope), and its gangs are larger (8 to 512 GPUs). The cluster
is partly busy the way a shared NVL72 fleet is: each tray fully in use, partly in use or
free at random; between timed calls a few trays change, as jobs end and start. Each row
times :func:`gputopo.placement.solver.solve` on the plain node list and on the webhook's
kept grouping (:class:`GroupedNodes`), which must answer the same.

Run: ``python bench/nvl72_latency.py [--repeats 10] [--racks 16]``; docs/benchmarks.md,
"NVL72 clusters", has the figures.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gputopo.placement.solver import GroupedNodes, solve  # noqa: E402
from gputopo.placement.types import GangRequest, NodeState  # noqa: E402
from gputopo.topology.load import read_topology_file  # noqa: E402

TRAY = read_topology_file(str(ROOT / "tests" / "fixtures" / "nvl72" / "gb200-tray.json"))
GANGS = (*(GangRequest(r, 4) for r in (2, 4, 8, 16, 18, 32, 64, 128)),
         GangRequest(8, 1), GangRequest(16, 2))


def tray(rack: int, i: int, used: frozenset[int]) -> NodeState:
    return NodeState(name=f"nvl72-{rack:02d}-tray-{i:02d}", topology=TRAY, used=used,
                     zone=f"zone-{rack // 4}", rack=f"rack-{rack:02d}", network_gbps=1600.0,
                     network_transport="gdr", nvlink_domain=f"clique-{rack:02d}")


def random_used(rng: random.Random) -> frozenset[int]:
    k = rng.choice((0, 0, 0, 0, 0, 0, 4, 4, 1, 2))  # ~60 % of trays free
    return frozenset(rng.sample(TRAY.indices, k))


def cluster(racks: int, rng: random.Random) -> list[NodeState]:
    return [tray(r, i, random_used(rng)) for r in range(racks) for i in range(18)]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run(racks: int, repeats: int, seed: int) -> list[dict[str, object]]:
    rows = []
    for gang in GANGS:
        rng = random.Random(seed)
        nodes = cluster(racks, rng)
        # as the webhook's server does with what it built before serving (webhook/server.py)
        gc.collect()
        gc.freeze()
        t0 = time.perf_counter()
        solve(nodes, gang)
        cold = (time.perf_counter() - t0) * 1000
        grouped = GroupedNodes(nodes)
        solve(grouped, gang)
        plain, kept, spans = [], [], set()
        for _ in range(repeats):
            changed = []
            for _k in range(4):
                i = rng.randrange(len(nodes))
                n = nodes[i]
                nodes[i] = tray(int(n.rack[5:]), int(n.name[-2:]), random_used(rng))
                changed.append(nodes[i])
            t0 = time.perf_counter()
            p = solve(nodes, gang)
            plain.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            grouped = grouped.replaced(changed)
            q = solve(grouped, gang)
            kept.append((time.perf_counter() - t0) * 1000)
            assert p == q, "the kept grouping must answer as the plain list"
            spans.add(p.details.get("span", "-") if p.feasible else "infeasible")
        rows.append({"gang": f"{gang.replicas}x{gang.gpus_per_replica}",
                     "gpus": gang.total_gpus, "coldMs": cold,
                     "p50Ms": percentile(plain, 0.5), "p99Ms": percentile(plain, 0.99),
                     "keptP50Ms": percentile(kept, 0.5), "keptP99Ms": percentile(kept, 0.99),
                     "spans": ",".join(sorted(spans))})
        gc.unfreeze()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--racks", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rows = run(args.racks, args.repeats, args.seed)
    load = os.getloadavg()[0]
    print(f"{args.racks * 18} trays, {args.racks * 72} GPUs; {args.repeats} timed calls per "
          f"row; load average {load:.1f}")
    print("| gang | GPUs | cold ms | p50 ms | p99 ms | kept p50 ms | kept p99 ms | spans |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['gang']} | {r['gpus']} | {r['coldMs']:.1f} | {r['p50Ms']:.1f} | "
              f"{r['p99Ms']:.1f} | {r['keptP50Ms']:.1f} | {r['keptP99Ms']:.1f} | {r['spans']} |")


if __name__ == "__main__":
    main()
