"""Replay of a production GPU cluster's pods (Alibaba, 2023): packing and GPU choice.

Why: the synthetic replay (bench/cluster_replay.py) shows what topology does for gangs; a
real cluster's pods are mostly one GPU, and there what matters is packing: whether a
policy leaves nodes whole for the 8-GPU pods, and still gives each multi-GPU pod its
node's best GPU set. The trace (Weng et al., "Beware of Fragmentation", USENIX ATC 2023;
``alibaba/clusterdata`` ``cluster-trace-gpu-v2023``, CC BY 4.0) holds the cluster's 1,213
GPU nodes and 8,152 pods; this replays its whole-GPU pods (``gpu_milli`` 1000: 3,911 x 1
GPU, 16 x 2, 15 x 4, 44 x 8) on a cluster built from the node list, CPU and memory counted
(a pod goes only where its CPU and memory fit too; a node with less than the pod asks in
all is not one of its nodes, as if a nodeSelector ruled it out, so it does not count for
the pod's best bandwidth either). Pods are single pods, not gangs.

How each GPU model is assumed to be wired (the trace does not say):

- ``G2``/``G3`` (undisclosed 8-GPU models): a two-socket PCIe server, four GPUs per socket
  in PIX pairs (tests/fixtures/topologies/pcie-2socket-phb.txt); ``--g-wiring dgx1``
  assumes an NVLink hybrid cube-mesh instead, to show how results move with it;
- ``V100M16``/``V100M32`` x 8: a DGX-1 V100 (dgx1-v100.txt); x 4: one of its NVLink quads;
- ``T4``, ``P100``, ``A10``, V100 x 1: PCIe, the first GPUs of the two-socket PCIe server.

Modes (``--modes``):

- ``fill``: the paper's method: pods in creation order (the list again when it runs out),
  no departures, until the GPUs asked exceed the cluster's; a pod that does not fit fails.
  Reports the GPUs asked (share of the cluster) when the first pod and the first 8-GPU pod
  fail, the unallocated share of GPUs then, and stranded free GPUs (mean over the fill,
  one sample per pod).
- ``compressed``: arrivals at creation time / ``--factor`` (1,000), each pod running its
  recorded time (deletion - creation; to the trace's end when never deleted), through the
  queue every policy shares (bench/gang_queue.py: gputopo waits for a good placement as
  the product does). Waits, stranded GPUs over the arrival window, the first 8-GPU pod
  that could not start at once.
- ``recorded``: the same at the recorded times (the cluster is almost idle: a check).
- ``multi``: ``compressed`` on a multi-GPU-heavy mix of the trace's own pods
  (:func:`multi_heavy`): one-GPU pods drawn at random (``--seed``) are swapped for
  multi-GPU pods of the trace, each with its size, CPU, memory, GPU models and observed
  run time, arriving when the pod it replaces did, until pods with 2+ GPUs are
  ``--multi-share`` (50 %) of the list. The trace's own list is 98 % one-GPU pods, where
  the choice of node under churn hardly shows; here half the pods need several GPUs of
  one node.

"Stranded": free GPUs on partly used nodes, as a share of all free GPUs (and of the 8-GPU
nodes' free GPUs alone); "best set": a multi-GPU pod's GPUs are as good as any set of that
size on its node (gputopo.placement.objective).

Run: ``python bench/alibaba_replay.py [--data DIR] [--modes fill,compressed]
[--policies gputopo,best-fit,...]``; about three minutes for every mode and policy.
``--modes multi --seeds 1-10``: a row per seed and policy (gputopo's about nine CPU
minutes a seed, the baselines' about one); each row also says how many pods of 1, 2, 4
and 8 GPUs waited.
The data is not in the repository: ``--data`` defaults to ../shared/data/alibaba-gpu-2023.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.baselines import BASELINES  # noqa: E402
from bench.cluster_replay import percentile  # noqa: E402
from bench.gang_queue import GangQueue, Policy, Started  # noqa: E402
from bench.placement import md_table  # noqa: E402
from gputopo.cluster.reservations import GangKey  # noqa: E402
from gputopo.placement.objective import best_quality, set_quality  # noqa: E402
from gputopo.placement.solver import solve  # noqa: E402
from gputopo.placement.types import GangRequest, NodeState  # noqa: E402
from gputopo.topology.load import read_topology_file  # noqa: E402
from gputopo.topology.model import Topology  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "alibaba-gpu-2023"
NODES_CSV, PODS_CSV = "openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"
FIXTURES = ROOT / "tests" / "fixtures" / "topologies"
POLICIES: dict[str, Policy] = {"gputopo": solve, **BASELINES}
MODES = ("fill", "compressed", "recorded", "multi")


class MissingTrace(Exception):
    """The trace's files are not where the command looked."""


def _first(topology: Topology, n: int) -> Topology:
    """The first ``n`` GPUs of a fixture and their links."""
    return Topology(gpus=topology.gpus[:n], links=tuple(r[:n] for r in topology.links[:n]),
                    generation=topology.generation)


def wiring(model: str, gpus: int, g_wiring: str) -> Topology:
    """The assumed topology of a node of ``model`` with ``gpus`` GPUs (module docstring)."""
    pcie = read_topology_file(str(FIXTURES / "pcie-2socket-phb.txt"))
    dgx1 = read_topology_file(str(FIXTURES / "dgx1-v100.txt"))
    if model.startswith("V100") and gpus in (4, 8):
        base = dgx1
    elif model in ("G2", "G3"):
        base = dgx1 if g_wiring == "dgx1" else pcie
    else:
        base = pcie
    if gpus > len(base.gpus):
        raise ValueError(f"no assumed wiring for {model} with {gpus} GPUs")
    return _first(base, gpus)


@dataclass(frozen=True)
class Pod:
    name: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    models: frozenset[str]  # allowed GPU models (empty: any)
    created: float
    ends: float | None


@dataclass(frozen=True)
class Trace:
    nodes: list[NodeState]
    capacity: dict[str, tuple[int, int]]  # node -> (cpu milli, memory MiB)
    models: dict[str, str]
    pods: list[Pod]
    end: float


def load_trace(data: Path, g_wiring: str = "pcie") -> Trace:
    """The node list as NodeStates with their assumed wiring, and the whole-GPU pods in
    creation order."""
    nodes_csv, pods_csv = data / NODES_CSV, data / PODS_CSV
    for f in (nodes_csv, pods_csv):
        if not f.is_file():
            raise MissingTrace(f"no Alibaba trace at {data} ({f.name} missing); see "
                               f"docs/benchmarks.md for where to get it")
    topologies: dict[tuple[str, int], Topology] = {}
    nodes, capacity, models = [], {}, {}
    with nodes_csv.open(newline="") as fh:
        for row in csv.DictReader(fh):
            shape = (row["model"], int(row["gpu"]))
            if shape not in topologies:
                topologies[shape] = wiring(*shape, g_wiring)
            nodes.append(NodeState(name=row["sn"], topology=topologies[shape],
                                   network_gbps=25.0, network_transport="tcp"))
            capacity[row["sn"]] = (int(row["cpu_milli"]), int(row["memory_mib"]))
            models[row["sn"]] = row["model"]
    pods, end = [], 0.0
    with pods_csv.open(newline="") as fh:
        for row in csv.DictReader(fh):
            times = [float(row[k]) for k in ("creation_time", "deletion_time",
                                             "scheduled_time") if row[k]]
            end = max([end, *times])
            if int(row["num_gpu"]) < 1 or int(row["gpu_milli"]) != 1000:
                continue  # GPU-sharing and CPU-only pods: not whole-GPU placement
            pods.append(Pod(row["name"], int(row["num_gpu"]), int(row["cpu_milli"]),
                            int(row["memory_mib"]),
                            frozenset(m for m in row["gpu_spec"].split("|") if m),
                            float(row["creation_time"]),
                            float(row["deletion_time"]) if row["deletion_time"] else None))
    pods.sort(key=lambda p: (p.created, p.name))
    return Trace(nodes, capacity, models, pods, end)


def multi_heavy(trace: Trace, share: float, seed: int) -> Trace:
    """The trace with one-GPU pods, drawn with ``seed``, swapped for multi-GPU pods of the
    trace until pods of 2+ GPUs are ``share`` of the list (module docstring, ``multi``).

    A swapped-in pod keeps the arrival of the pod it replaces and brings its own size,
    CPU, memory, GPU models and run time (deletion - creation; to the trace's end when
    never deleted), so the list's length and arrival times are the trace's."""
    rng = random.Random(seed)
    multi = [p for p in trace.pods if p.gpus > 1]
    ones = [i for i, p in enumerate(trace.pods) if p.gpus == 1]
    swap = set(rng.sample(ones, max(0, min(len(ones),
                                            round(share * len(trace.pods)) - len(multi)))))
    pods = []
    for i, pod in enumerate(trace.pods):
        if i in swap:
            like = rng.choice(multi)
            run = (like.ends if like.ends is not None else trace.end) - like.created
            pod = Pod(f"{like.name}-as-{pod.name}", like.gpus, like.cpu_milli,
                      like.memory_mib, like.models, pod.created, pod.created + run)
        pods.append(pod)
    return Trace(trace.nodes, trace.capacity, trace.models, pods, trace.end)


class Cluster:
    """GPUs (through one policy's queue), CPU and memory of the trace's nodes."""

    def __init__(self, trace: Trace, policy: str, *, wait_for_good: bool) -> None:
        self.trace = trace
        self.size = {n.name: len(n.topology.gpus) for n in trace.nodes}
        self.topology = {n.name: n.topology for n in trace.nodes}
        self.cpu = {n: c for n, (c, _) in trace.capacity.items()}
        self.mem = {n: m for n, (_, m) in trace.capacity.items()}
        self.used = dict.fromkeys(self.size, 0)
        self._free: dict[int | None, int] = {None: sum(self.size.values()), 8: sum(
            s for s in self.size.values() if s == 8)}
        self._partly: dict[int | None, int] = {None: 0, 8: 0}
        self.pods: dict[GangKey, Pod] = {}
        self._max_cpu = max(p.cpu_milli for p in trace.pods)
        self._max_mem = max(p.memory_mib for p in trace.pods)
        self._tight = {n for n in self.size
                       if self.cpu[n] < self._max_cpu or self.mem[n] < self._max_mem}
        self._version = 0
        self._unfit_memo: dict[tuple[int, int, frozenset[str]],
                               tuple[int, frozenset[str]]] = {}
        self._never: dict[tuple[int, int, frozenset[str]], frozenset[str]] = {}
        self.queue = GangQueue(trace.nodes, POLICIES[policy], wait_for_good=wait_for_good,
                               unfit=self._unfit, packs=POLICIES[policy] is solve)

    def _unfit(self, key: GangKey) -> tuple[frozenset[str], frozenset[str]]:
        """Nodes the pod can never use (less CPU or memory than it asks in all, or a GPU
        model it may not use) and nodes without its CPU or memory left now. Only "tight"
        nodes (less left than the largest pod asks) are looked at for the second; both
        answers are kept while nothing changed, so the queue's node list stays the same."""
        pod = self.pods[key]
        ask = (pod.cpu_milli, pod.memory_mib, pod.models)
        never = self._never.get(ask)
        if never is None:
            never = self._never[ask] = frozenset(
                n for n, (cpu, mem) in self.trace.capacity.items()
                if cpu < pod.cpu_milli or mem < pod.memory_mib
                or (pod.models and self.trace.models[n] not in pod.models))
        hit = self._unfit_memo.get(ask)
        if hit is not None and hit[0] == self._version:
            return never, hit[1]
        # a node without a free GPU is no candidate anyway: leaving it out of the answer
        # keeps the answer (and so the queue's node list) the same for longer
        answer = frozenset(n for n in self._tight if n not in never
                           and self.used[n] < self.size[n]
                           and (self.cpu[n] < pod.cpu_milli or self.mem[n] < pod.memory_mib))
        self._unfit_memo[ask] = (self._version, answer)
        return never, answer

    def _changed(self, node: str) -> None:
        self._version += 1
        if self.cpu[node] < self._max_cpu or self.mem[node] < self._max_mem:
            self._tight.add(node)
        else:
            self._tight.discard(node)

    def take(self, s: Started) -> tuple[str, tuple[int, ...]]:
        pod = self.pods[s.key]
        (slot,) = s.reservation.slots
        self.cpu[slot.node] -= pod.cpu_milli
        self.mem[slot.node] -= pod.memory_mib
        self._count(slot.node, -1)
        self.used[slot.node] += pod.gpus
        self._count(slot.node, 1)
        self._changed(slot.node)
        return slot.node, slot.gpus

    def give_back(self, key: GangKey, node: str) -> None:
        pod = self.pods[key]
        self.queue.release(key)
        self.cpu[node] += pod.cpu_milli
        self.mem[node] += pod.memory_mib
        self._count(node, -1)
        self.used[node] -= pod.gpus
        self._count(node, 1)
        self._changed(node)

    def _count(self, node: str, sign: int) -> None:
        """Add (1) or remove (-1) the node's free GPUs from the stranded tallies."""
        size, used = self.size[node], self.used[node]
        left = (size - used) * sign
        partly = left if used else 0
        self._free[None] += left
        self._partly[None] += partly
        if size == 8:
            self._free[8] += left
            self._partly[8] += partly

    def stranded(self, only_size: int | None = None) -> float:
        """Free GPUs on partly used nodes / all free GPUs (of ``only_size``-GPU nodes)."""
        free = self._free[only_size]
        return self._partly[only_size] / free if free else 0.0

    def best_set(self, node: str, gpus: tuple[int, ...]) -> bool:
        topo = self.topology[node]
        return set_quality(topo, gpus)[0] >= best_quality(topo, len(gpus))[0]


def key_of(pod: Pod, round_: int = 0) -> GangKey:
    name = pod.name if not round_ else f"{pod.name}-r{round_}"
    return GangKey("trace", "Pod", name, name)


def fill(trace: Trace, policy: str) -> dict[str, Any]:
    """Creation order, no departures, until the GPUs asked exceed the cluster's."""
    c = Cluster(trace, policy, wait_for_good=False)
    capacity = sum(c.size.values())
    asked = placed_gpus = 0
    first: dict[str, Any] = {}
    multi = best = failed = 0
    i = 0
    stranded = stranded8 = 0.0
    while asked < capacity:
        stranded += c.stranded()
        stranded8 += c.stranded(8)
        pod = trace.pods[i % len(trace.pods)]
        key = key_of(pod, i // len(trace.pods))
        i += 1
        c.pods[key] = pod
        asked += pod.gpus
        s = c.queue.arrive(key, GangRequest(1, pod.gpus), 0.0)
        if s is None:
            c.queue.waiting.clear()  # no departures: it never fits
            failed += 1
            unallocated = 1 - placed_gpus / capacity
            first.setdefault("firstFailAsked", asked / capacity)
            first.setdefault("firstFailUnallocated", unallocated)
            if pod.gpus == 8:
                first.setdefault("firstFail8Asked", asked / capacity)
                first.setdefault("firstFail8Unallocated", unallocated)
            continue
        node, gpus = c.take(s)
        placed_gpus += pod.gpus
        if pod.gpus > 1:
            multi += 1
            best += c.best_set(node, gpus)
    return {"policy": policy, "pods": i, "failed": failed,
            "firstFailAsked": first.get("firstFailAsked"),
            "firstFailUnallocated": first.get("firstFailUnallocated"),
            "firstFail8Asked": first.get("firstFail8Asked"),
            "firstFail8Unallocated": first.get("firstFail8Unallocated"),
            "allocatedEnd": placed_gpus / capacity,
            "stranded": stranded / i, "stranded8": stranded8 / i,
            "multiGpu": multi, "bestSet": best / multi if multi else 1.0}


def over_time(trace: Trace, policy: str, factor: float) -> dict[str, Any]:
    """Arrivals at creation / ``factor``, recorded run times, the shared queue."""
    c = Cluster(trace, policy, wait_for_good=policy == "gputopo")
    events: list[tuple[float, int, int]] = []  # (time, 0 end / 1 arrival, pod index)
    keys = [key_of(p) for p in trace.pods]
    by_key = {k: i for i, k in enumerate(keys)}
    for i, pod in enumerate(trace.pods):
        c.pods[keys[i]] = pod
        events.append((pod.created / factor, 1, i))
    heapq.heapify(events)
    window = (trace.pods[0].created / factor, trace.pods[-1].created / factor)
    start: dict[int, float] = {}
    where: dict[int, str] = {}
    area = area8 = 0.0
    last, now_s, now_s8 = window[0], 0.0, 0.0
    first8 = None
    multi = best = 0
    n8 = 0
    hows: dict[str, int] = {}

    def started(s: Started) -> None:
        nonlocal multi, best
        i = by_key[s.key]
        pod = trace.pods[i]
        node, gpus = c.take(s)
        start[i], where[i] = s.at, node
        hows[s.how] = hows.get(s.how, 0) + 1
        if pod.gpus > 1:
            multi += 1
            best += c.best_set(node, gpus)
        ends = (pod.ends if pod.ends is not None else trace.end) - pod.created
        heapq.heappush(events, (s.at + max(ends, 1.0), 0, i))

    while events:
        t, kind, i = heapq.heappop(events)
        upto = min(t, window[1])
        if upto > last:
            area += now_s * (upto - last)
            area8 += now_s8 * (upto - last)
            last = upto
        pod = trace.pods[i]
        if kind == 0:
            c.give_back(keys[i], where[i])
        else:
            n8 += pod.gpus == 8
            s = c.queue.arrive(keys[i], GangRequest(1, pod.gpus), t)
            if s is not None:
                started(s)
            elif pod.gpus == 8 and first8 is None:
                first8 = n8
        for s in c.queue.serve(t):
            started(s)
        now_s, now_s8 = c.stranded(), c.stranded(8)
    span = window[1] - window[0]
    waits = [start[i] - trace.pods[i].created / factor for i in start]
    by_size: dict[int, int] = {}
    for i in start:
        if start[i] > trace.pods[i].created / factor:
            by_size[trace.pods[i].gpus] = by_size.get(trace.pods[i].gpus, 0) + 1
    waits8 = [start[i] - trace.pods[i].created / factor for i in start
              if trace.pods[i].gpus == 8]
    return {"policy": policy, "pods": len(trace.pods), "started": len(start),
            "neverStarted": len(trace.pods) - len(start),
            "waited": sum(w > 0 for w in waits),
            "waitedBySize": " / ".join(str(by_size.get(g, 0)) for g in (1, 2, 4, 8)),
            "belowMin": hows.get("fallback", 0),
            "waitP50S": percentile(waits, 0.5), "waitP95S": percentile(waits, 0.95),
            "waitMaxS": max(waits, default=0.0), "wait8P95S": percentile(waits8, 0.95),
            "first8Waited": first8, "eightGpuPods": n8,
            "stranded": area / span if span else 0.0,
            "stranded8": area8 / span if span else 0.0,
            "multiGpu": multi, "bestSet": best / multi if multi else 1.0,
            "placedBy": hows}


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _seeds(text: str) -> list[int]:
    """``1-10`` or ``1,4,7`` (or both: ``1-3,7``) as a list of seeds; ValueError if not."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    if not out:
        raise ValueError(text)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="folder with the trace's two CSV files")
    ap.add_argument("--modes", default="fill,compressed")
    ap.add_argument("--factor", type=float, default=1000.0,
                    help="arrival compression of the compressed mode")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--g-wiring", choices=("pcie", "dgx1"), default="pcie",
                    help="assumed wiring of the undisclosed 8-GPU models G2/G3")
    ap.add_argument("--multi-share", type=float, default=0.5,
                    help="share of pods with 2+ GPUs in the multi mode's mix")
    ap.add_argument("--seed", type=int, default=1, help="the multi mode's draw")
    ap.add_argument("--seeds", default=None,
                    help="the multi mode's draws, e.g. 1-10 or 1,4,7: a row per seed and "
                         "policy (overrides --seed)")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    try:
        seeds = _seeds(args.seeds) if args.seeds is not None else [args.seed]
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: want seeds like 1-10 or 1,4,7")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for what, got, known in (("mode", modes, MODES), ("policy", policies, POLICIES)):
        bad = [x for x in got if x not in known]
        if bad:
            ap.error(f"unknown {what} {bad[0]!r} (known: {', '.join(known)})")
    try:
        trace = load_trace(args.data, args.g_wiring)
    except MissingTrace as exc:
        print(f"alibaba_replay: {exc}", file=sys.stderr)
        return 2
    gpus = sum(len(n.topology.gpus) for n in trace.nodes)
    print(f"## Alibaba GPU trace 2023: {len(trace.nodes)} nodes, {gpus} GPUs, "
          f"{len(trace.pods)} whole-GPU pods; G2/G3 wired as {args.g_wiring}\n")
    for mode in modes:
        t0 = time.perf_counter()
        if mode == "fill":
            rows = [fill(trace, p) for p in policies]
            table = md_table([{**r, **{k: _fmt(r[k], ".1%") for k in (
                "firstFailAsked", "firstFailUnallocated", "firstFail8Asked",
                "firstFail8Unallocated")}} for r in rows], [
                ("policy", "policy", ""), ("pods", "pods", "d"), ("failed", "failed", "d"),
                ("firstFailAsked", "asked at 1st failure", ""),
                ("firstFailUnallocated", "unallocated then", ""),
                ("firstFail8Asked", "asked at 1st failed 8-GPU pod", ""),
                ("firstFail8Unallocated", "unallocated then", ""),
                ("allocatedEnd", "allocated at end", ".1%"),
                ("stranded", "stranded (mean over the fill)", ".2%"),
                ("stranded8", "stranded, 8-GPU nodes", ".2%"),
                ("bestSet", "multi-GPU pods on best set", ".0%")])
        else:
            factor = args.factor if mode in ("compressed", "multi") else 1.0
            rows = []
            for seed in (seeds if mode == "multi" else [None]):
                mix = trace if seed is None else multi_heavy(trace, args.multi_share, seed)
                rows += [{**over_time(mix, p, factor), "seed": _fmt(seed, "d")}
                         for p in policies]
            table = md_table([{**r, "first8Waited": _fmt(r["first8Waited"], "d")}
                              for r in rows], [
                *([("seed", "seed", "")] if mode == "multi" else []),
                ("policy", "policy", ""), ("neverStarted", "pods never started", "d"),
                ("waited", "pods that waited", "d"),
                ("waitedBySize", "waited (1 / 2 / 4 / 8 GPUs)", ""),
                ("belowMin", "started below minShare", "d"),
                ("waitP50S", "wait p50 s", ".0f"), ("waitP95S", "wait p95 s", ".0f"),
                ("waitMaxS", "wait max s", ".0f"), ("wait8P95S", "8-GPU wait p95 s", ".0f"),
                ("first8Waited", "1st 8-GPU pod that waited", ""),
                ("multiGpu", "multi-GPU pods started", "d"),
                ("stranded", "stranded (arrivals)", ".2%"),
                ("stranded8", "stranded, 8-GPU nodes", ".2%"),
                ("bestSet", "multi-GPU pods on best set", ".0%")])
        took = time.perf_counter() - t0
        what = (f"arrivals / {args.factor:g}" if mode == "compressed" else
                f"pods of 2+ GPUs {args.multi_share:.0%} (seeds "
                f"{', '.join(map(str, seeds))}), arrivals / "
                f"{args.factor:g}" if mode == "multi" else
                "recorded times" if mode == "recorded" else "creation order, no departures")
        print(f"### {mode} ({what}; {took:.0f} s, load average {os.getloadavg()[0]:.1f})\n")
        print(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
