"""What an idle webhook pays for waking up: the server's CPU while nothing comes, and one
hand-off to the admitter thread and back, hot and after an idle gap.

Why: at 50 reviews/s the server costs about twice the CPU per review it costs at 500/s
(docs/benchmarks.md). Between two reviews 20 ms apart the process sleeps, and on this
machine (a KVM guest) every wake-up from sleep runs on cold caches; the same code costs 2-3x
more then. These two figures say how much of a review's cost is waking, not working:

- ``idle``: a fresh ``bench/admission_server.py`` (1,000 nodes) left alone; its threads'
  CPU over ``--seconds``. Everything it spends is timers and pollers.
- ``hand-off``: an ``await`` of a trivial call on the admitter thread, through
  ``loop.run_in_executor`` on a one-worker ThreadPoolExecutor (what the server did before)
  and through ``webhook.admitter_thread.AdmitterThread`` (what it does now), alternating,
  with no gap (hot) and with ``--gap-ms`` of sleep before each (cold, like 50 reviews/s).
  CPU of the whole process (both threads) per round trip.

Run: ``python bench/idle_costs.py`` (``--seconds 10 --rounds 3 --gap-ms 20``). To compare
with another tree, put it first: ``PYTHONPATH=/tmp/base python bench/idle_costs.py --idle``
measures that tree's server (the hand-off part needs this tree's AdmitterThread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from admission_cluster import cluster_objects  # noqa: E402

from gputopo.certs import write_serving_certs  # noqa: E402


def idle_cpu(seconds: float, nodes: int = 1000) -> dict[str, float]:
    """ms of CPU per second of each thread of an idle admission server."""
    with tempfile.TemporaryDirectory(prefix="gputopo-idle-") as tmp:
        work = Path(tmp)
        write_serving_certs(work / "certs", extra_dns=("localhost", "127.0.0.1"), days=2)
        (work / "cluster.json").write_text(json.dumps(cluster_objects(nodes)))
        proc = subprocess.Popen(
            [sys.executable, str(BENCH / "admission_server.py"), "--objects",
             str(work / "cluster.json"), "--cert-dir", str(work / "certs")],
            stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline(), "server did not start"
            time.sleep(2.0)  # past start-up
            before = _threads(proc.pid)
            time.sleep(seconds)
            after = _threads(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return {name: (after[name] - before.get(name, 0.0)) * 1000 / seconds for name in after}


def _threads(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = f"{(task / 'comm').read_text().strip()}-{task.name}"
        out[name] = int((task / "schedstat").read_text().split()[0]) / 1e9
    return out


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _trivial(x: int) -> int:
    return x


async def _hand_offs(kind: str, count: int, gap_s: float) -> float:
    """us of process CPU per round trip loop -> admitter thread -> loop."""
    from webhook.admitter_thread import AdmitterThread

    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="admitter")
    worker = AdmitterThread()
    try:
        await loop.run_in_executor(executor, _trivial, 0)  # threads started, not measured
        await worker.run(_trivial, 0)
        started = _cpu()
        for i in range(count):
            if gap_s:
                await asyncio.sleep(gap_s)
            if kind == "executor":
                await loop.run_in_executor(executor, _trivial, i)
            else:
                await worker.run(_trivial, i)
        spent = _cpu() - started
        if gap_s:  # the loop's own wake from asyncio.sleep, measured alone, is not a hand-off
            started = _cpu()
            for _ in range(count):
                await asyncio.sleep(gap_s)
            spent -= _cpu() - started
        return spent * 1e6 / count
    finally:
        executor.shutdown()
        worker.shutdown()


def hand_offs(rounds: int, gap_ms: float) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for label, gap, count in (("hot", 0.0, 3000), (f"after {gap_ms:g} ms idle", gap_ms, 200)):
        mine = out.setdefault(label, {"executor": [], "AdmitterThread": []})
        for _ in range(rounds):
            for kind in ("executor", "AdmitterThread"):
                mine[kind].append(asyncio.run(_hand_offs(kind, count, gap / 1000)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--idle", action="store_true", help="only the idle server")
    args = ap.parse_args(argv)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average before: {' '.join(load)}\n")
    threads = idle_cpu(args.seconds)
    print("| idle server thread | CPU (ms per s) |\n|---|---:|")
    for name, ms in sorted(threads.items()):
        print(f"| {name} | {ms:.2f} |")
    print(f"| all | {sum(threads.values()):.2f} |")
    if args.idle:
        return 0
    figures = hand_offs(args.rounds, args.gap_ms)
    print("\n| hand-off round trip | via | CPU per round trip (us), each round |\n|---|---|---|")
    for label, kinds in figures.items():
        for kind, values in kinds.items():
            print(f"| {label} | {kind} | {', '.join(f'{v:.0f}' for v in values)} |")
    print(f"\nload average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
