"""Two trees' admission CPU, review by review, in lockstep: the A/B a noisy machine allows.

Why: this machine's speed wanders by up to 1.7x from minute to minute (a KVM guest whose
host is shared: the same tight loop runs 6.3 us a piece in one minute, 10.8 in the next),
so two runs one after the other compare the minutes, not the trees. Here one worker process
per tree (each with the tree alone on ``PYTHONPATH``) builds the benchmark's admitter (the
shipped policies, the placement step, 1,000 nodes, the same warm-up as bench/admission.py),
and the parent makes them take turns: review i on one tree, then on the other (the first
alternating), each after sleeping ``--gap-ms`` as an idle server does between reviews. Both
see the same machine at the same time, and each review costs what it costs cold (20 ms:
like 50 req/s) or hot (0).

Both trees get THIS tree's workload: the parent builds the cluster, the warm-up and the
reviews (bench/admission_cluster.py) and writes them to files; each worker reads them and
builds its admitter through the product's own entry points only
(``ClusterSnapshot.from_objects``, ``webhook.assembly.build_admitter``,
``placement_step_for``), so an older tree whose bench scripts sent other pods is measured
on these. (Until 2026-11-26 each worker built its own tree's workload: 5b1c38e's pods were
a third of the bytes of today's.)

Each review runs as the server splits it: ``answer_at_once`` (the event loop's share), then
``handle_request`` when in scope (the admitter thread's). CPU is the worker's own thread
time. The answers of both trees are compared too (status and body): a speed-up that changes
an answer shows as a mismatch count.

Run: ``python bench/admission_ab.py --base DIR`` (DIR: a checkout of the other tree, e.g.
``git worktree add /tmp/base REV``); ``--gap-ms 0`` for hot; ``--count 900``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


def worker(data: Path, gap_s: float) -> int:
    """Build the admitter from the files in ``data``, warm it up, say ready, then run
    review i for each i read from stdin. Only the product's entry points are imported: this
    runs with the other tree on the path."""
    from gputopo.cluster.snapshot import ClusterSnapshot
    from webhook.assembly import build_admitter
    from webhook.placement.step import placement_step_for

    cluster = ClusterSnapshot.from_objects(json.loads((data / "objects.json").read_text()))
    cluster.node_states()
    admitter = build_admitter(None, cluster, placement=placement_step_for(cluster),
                              reload_interval_s=0)
    for body in _bodies(data / "warm.jsonl"):
        admitter.handle_body(body)
    bodies = _bodies(data / "reviews.jsonl")
    gc.collect()
    gc.freeze()  # as the server does once it is built
    out = sys.stdout
    out.write(json.dumps({"ready": len(bodies)}) + "\n")
    out.flush()
    for line in sys.stdin:
        body = bodies[int(line)]
        if gap_s:
            time.sleep(gap_s)
        started = time.thread_time_ns()
        answer = admitter.answer_at_once(body)
        loop_ns = time.thread_time_ns() - started
        if not isinstance(answer, tuple):
            answer = admitter.handle_request(answer)
        total_ns = time.thread_time_ns() - started
        out.write(json.dumps([loop_ns, total_ns - loop_ns, answer]) + "\n")
        out.flush()
    admitter.close()
    return 0


def _bodies(path: Path) -> list[bytes]:
    """One review body a line (compact JSON has no raw newline)."""
    return path.read_bytes().splitlines()


def write_workload(data: Path, count: int, nodes: int) -> list[str]:
    """This tree's workload (bench/admission.py's ``workload_inputs``: what its
    ``warmed_admitter`` is built from) in ``data``; the kind of each review."""
    sys.path.insert(0, str(BENCH))
    from admission import workload_inputs

    objects, warm, measured = workload_inputs(nodes, count, "ab")
    (data / "objects.json").write_text(json.dumps(objects))
    (data / "warm.jsonl").write_bytes(b"\n".join(warm.bodies))
    (data / "reviews.jsonl").write_bytes(b"\n".join(measured.bodies))
    return list(measured.kinds)


def _start(tree: Path, data: Path, gap_ms: float) -> subprocess.Popen[str]:
    # one string-hash seed for both: a patch's operation order follows set iteration order
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "admission_ab.py"), "--worker", "--data", str(data),
         "--gap-ms", str(gap_ms)],
        cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"admission_ab: the worker for {tree} did not start (its product "
                         f"entry points differ? see its error above)")
    return proc


def _ask(proc: subprocess.Popen[str], i: int) -> list[Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{i}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, help="the other tree (a checkout)")
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--count", type=int, default=900)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.data, args.gap_ms / 1000)
    if args.base is None or not (args.base / "webhook").is_dir():
        print("admission_ab: --base must name a checkout of gputopo (with webhook/)",
              file=sys.stderr)
        return 2
    trees = {"base": args.base.resolve(), "this": BENCH.parent}
    with tempfile.TemporaryDirectory(prefix="gputopo-ab-") as tmp:
        data = Path(tmp)
        kinds = write_workload(data, args.count, args.nodes)
        procs = {name: _start(tree, data, args.gap_ms) for name, tree in trees.items()}
    return _lockstep(procs, kinds, args.gap_ms)


def _lockstep(procs: dict[str, subprocess.Popen[str]], kinds: list[str],
              gap_ms: float) -> int:
    """Review i on both workers in turn (who goes first alternates), then the table."""
    cpu: dict[tuple[str, str, str], list[float]] = {}
    differ = 0
    load = [os.getloadavg()[0]]
    for i, kind in enumerate(kinds):
        order = ["base", "this"] if i % 2 == 0 else ["this", "base"]
        got = {name: _ask(procs[name], i) for name in order}
        for name, (loop_ns, thread_ns, _) in got.items():
            cpu.setdefault((kind, name, "loop"), []).append(loop_ns / 1000)
            cpu.setdefault((kind, name, "thread"), []).append(thread_ns / 1000)
        if json.dumps(got["base"][2], sort_keys=True) != json.dumps(got["this"][2],
                                                                      sort_keys=True):
            differ += 1
        if i % 200 == 0:
            load.append(os.getloadavg()[0])
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    print(f"{len(kinds)} reviews, each on both trees in turn, {gap_ms:g} ms idle before "
          f"each; load average {min(load):.2f}-{max(load):.2f}; answers that differ: "
          f"{differ}\n")
    print("| kind | share | base: loop + thread (us) | this: loop + thread (us) | "
          "this / base |")
    print("|---|---:|---:|---:|---:|")
    total = {"base": 0.0, "this": 0.0}
    for kind in sorted(set(kinds)):
        n = kinds.count(kind)
        means = {}
        for name in ("base", "this"):
            loop = statistics.mean(cpu[(kind, name, "loop")])
            thread = statistics.mean(cpu[(kind, name, "thread")])
            means[name] = (loop, thread)
            total[name] += (loop + thread) * n
        b, t = means["base"], means["this"]
        print(f"| {kind} | {n / len(kinds):.0%} | {b[0]:.0f} + {b[1]:.0f} = {sum(b):.0f} | "
              f"{t[0]:.0f} + {t[1]:.0f} = {sum(t):.0f} | {sum(t) / sum(b):.2f} |")
    print(f"| mix | 100% | {total['base'] / len(kinds):.0f} | {total['this'] / len(kinds):.0f} "
          f"| {total['this'] / total['base']:.2f} |")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
