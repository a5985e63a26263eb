"""Admission latency of the real webhook over TLS, at fixed request rates, next to its floor.

What it measures: for each rate (default 50, 200 and 500 requests/s) a FRESH webhook server
process (``bench/admission_server.py``: the shipped policies, the placement step, a
1,000-node cluster from ``bench/admission_cluster.py``) is driven by a separate client
process (``bench/admission_load.py``: open loop, keep-alive TLS connections) with realistic
AdmissionReviews for a bounded time — then, on the SAME server, with the same bodies sent to
``POST /noop`` (parse the review, allow it untouched): the floor of HTTP + TLS + JSON on this
server, against which the mutation's own cost is read. A fresh server per rate gives every
rate the same cluster (each new gang reserves GPUs for good in this fixed cluster).

Before each rate, 100 requests warm the server up (not measured; see WARMUP_REQUESTS).
Reported per rate: throughput, p50/p95/p99 latency from each request's due time (so queueing
counts), the same for the floor, and per request kind: ``gang-first`` (the first GPU pod of
a new job: the solver runs for the whole gang), ``gang-next`` (a later pod of a placed gang:
it takes its reserved slot), ``out-of-scope`` (a namespace that did not opt in, a pod of no
job). Then the out-of-scope reviews alone (resent to fill the same duration) go to
``/mutate`` and to ``/noop``: what such a review costs against the floor. Server CPU per
review comes from the kernel's per-thread CPU clocks (process total, and the event loop's
main thread apart). Ratios come from one run; the machine is shared and noisy.

Run: ``python bench/admission.py`` (``--markdown`` prints the docs/benchmarks.md table;
``--rates 50,200 --duration 5`` for a quicker look; ``--json FILE`` keeps the raw figures).
``--server-tree DIR`` serves with another checkout's code (its ``admission_server.py``,
that tree alone on the path) while the pods stay this tree's: how to compare two trees
when the bench scripts changed between them (a run of each tree's own script compares
their workloads too: 5b1c38e's sent pods as their controllers wrote them, a third of the
bytes the API server sends).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from admission_cluster import Workload, cluster_objects, request_stream  # noqa: E402
from admission_load import percentile  # noqa: E402

from gputopo.certs import write_serving_certs  # noqa: E402

#: Requests sent (and not measured) before each rate: the first admission imports the solver
#: and the first gang of each shape fills its caches (~120 ms and ~30-60 ms, measured once);
#: a webhook in service is past that after its first minute.
WARMUP_REQUESTS = 100
WARMUP_RATE = 50.0


def _start_server(objects: Path, cert_dir: Path, tree: Path | None = None
                  ) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """The server process: this tree's ``admission_server.py``, or with ``tree`` (another
    checkout) that tree's, with that tree alone on its path."""
    script, env = BENCH / "admission_server.py", None
    if tree is not None:
        script = tree / "bench" / "admission_server.py"
        env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.Popen(
        [sys.executable, str(script), "--objects", str(objects), "--cert-dir", str(cert_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        err = proc.stderr.read() if proc.stderr else ""
        raise SystemExit(f"admission server did not start:\n{err}")
    return proc, json.loads(line)


def _load(port: int, ca: Path, path: str, rate: float, bodies: Path, kinds: Path | None,
          connections: int) -> dict[str, Any]:
    cmd = [sys.executable, str(BENCH / "admission_load.py"), "--port", str(port), "--ca",
           str(ca), "--path", path, "--rate", str(rate), "--connections", str(connections),
           str(bodies)]
    if kinds is not None:
        cmd[-1:-1] = ["--kinds", str(kinds)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _cpu_seconds(pid: int) -> float:
    """CPU time the process has used (all its threads): what a request costs the server
    whatever else the shared machine is doing (latencies are not immune to that)."""
    tasks = Path(f"/proc/{pid}/task")
    return sum(_task_cpu(t) for t in tasks.iterdir())


def _task_cpu(task: Path) -> float:
    """One thread's CPU seconds: ``schedstat`` in nanoseconds where the kernel keeps it
    (a 10 ms clock tick is too coarse for the 100-odd requests of a short phase), else
    user + system ticks from ``stat``."""
    try:
        return int((task / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loop_cpu_seconds(pid: int) -> float:
    """CPU time of the server's main thread: the event loop (TLS, HTTP, the ASGI app). The
    rest of the process is the admitter thread (plus an idle policy watcher)."""
    return _task_cpu(Path(f"/proc/{pid}/task/{pid}"))


def _measured(pid: int, *load: Any) -> dict[str, Any]:
    """``_load(*load)``, with the server's CPU seconds (all, event loop) added."""
    cpu, loop = _cpu_seconds(pid), _loop_cpu_seconds(pid)
    out: dict[str, Any] = _load(*load)
    out["server_cpu_s"] = _cpu_seconds(pid) - cpu
    out["loop_cpu_s"] = _loop_cpu_seconds(pid) - loop
    return out


def run(rates: list[float], duration: float, nodes: int, connections: int,
        server_tree: Path | None = None) -> dict[str, Any]:
    """Every rate on a fresh server: the mutation load, then the floor on the same server.
    ``server_tree``: serve with that checkout's code (the workload stays this tree's)."""
    results: dict[str, Any] = {"nodes": nodes, "duration_s": duration,
                               "connections": connections, "rates": []}
    with tempfile.TemporaryDirectory(prefix="gputopo-bench-") as tmp:
        work = Path(tmp)
        write_serving_certs(work / "certs", extra_dns=("localhost", "127.0.0.1"), days=2)
        base = cluster_objects(nodes)
        for rate in rates:
            count = int(rate * duration)
            workload = request_stream(count, tag=f"r{int(rate)}")
            warm = request_stream(WARMUP_REQUESTS, seed=5, tag=f"w{int(rate)}")
            objects = work / f"cluster-{int(rate)}.json"
            objects.write_text(json.dumps(base + warm.jobs + workload.jobs))
            warm_bodies = work / f"warm-{int(rate)}.jsonl"
            warm_bodies.write_bytes(b"\n".join(warm.bodies) + b"\n")
            bodies = work / f"bodies-{int(rate)}.jsonl"
            bodies.write_bytes(b"\n".join(workload.bodies) + b"\n")
            kinds = work / f"kinds-{int(rate)}.txt"
            kinds.write_text("\n".join(workload.kinds) + "\n")
            # out-of-scope reviews change nothing: resent as often as it takes to fill the
            # mix's duration, so the CPU per review is not read from a hundred requests
            outside = work / f"out-of-scope-{int(rate)}.jsonl"
            skipped = [b for b, k in zip(workload.bodies, workload.kinds, strict=True)
                       if k == "out-of-scope"]
            outside.write_bytes(b"\n".join((skipped * (count // max(1, len(skipped)) + 1))[
                :count]) + b"\n")
            server, info = _start_server(objects, work / "certs", server_tree)
            try:
                ca = work / "certs" / "ca.crt"
                for path in ("/mutate", "/noop"):  # imports, first solves, TLS session setup
                    _load(info["port"], ca, path, WARMUP_RATE, warm_bodies, None, connections)
                port = info["port"]
                mutate = _measured(server.pid, port, ca, "/mutate", rate, bodies, kinds,
                                   connections)
                time.sleep(0.5)
                floor = _measured(server.pid, port, ca, "/noop", rate, bodies, None,
                                  connections)
                # the out-of-scope reviews alone, to /mutate and to /noop: their CPU per
                # review against the floor's, at the same rate
                time.sleep(0.5)
                alone = {path: _measured(server.pid, port, ca, path, rate, outside, None,
                                         connections) for path in ("/mutate", "/noop")}
            finally:
                server.terminate()
                server.wait(timeout=10)
            results["rates"].append({"rate": rate, "server": info, "mutate": mutate,
                                     "noop": floor, "out_of_scope_alone": alone,
                                     "loadavg": Path("/proc/loadavg").read_text().strip()})
            _progress(rate, mutate, floor)
    return results


def workload_inputs(nodes: int, count: int, tag: str
             ) -> tuple[list[dict[str, Any]], Workload, Workload]:
    """The in-process benchmarks' inputs: the cluster's objects (``nodes`` nodes and the jobs
    of both streams), the warm-up's reviews and the ``count`` reviews to measure (job names
    carry ``tag``)."""
    measured = request_stream(count, tag=tag)
    warm = request_stream(WARMUP_REQUESTS, seed=5, tag=f"{tag}-warm")
    return cluster_objects(nodes) + warm.jobs + measured.jobs, warm, measured


def warmed_admitter(nodes: int, count: int, tag: str, *, can_wait: bool = False
                    ) -> tuple[Any, Workload]:
    """The admitter the benchmark server builds (shipped policies, the placement step, a
    ``nodes``-node cluster holding the workload's jobs), after the same warm-up, and the
    ``count`` reviews to send it (job names carry ``tag``). ``can_wait``: gangs that may
    wait take a placement only above GOOD_SHARE of their ideal bandwidth, as with a
    placement queue. The in-process benchmarks all start from here, so they measure the
    same thing."""
    from gputopo.cluster.snapshot import ClusterSnapshot
    from webhook.assembly import build_admitter
    from webhook.placement.step import PlacementStep, placement_step_for

    objects, warm, measured = workload_inputs(nodes, count, tag)
    cluster = ClusterSnapshot.from_objects(objects)
    cluster.node_states()
    admitter = build_admitter(None, cluster, placement=placement_step_for(cluster),
                              reload_interval_s=0)
    if can_wait:
        for step in admitter.steps:
            if isinstance(step, PlacementStep):
                step.can_wait = True
    for body in warm.bodies:
        admitter.handle_body(body)
    return admitter, measured


def in_process(nodes: int, count: int) -> dict[str, Any]:
    """The pipeline's own cost per request kind: the same workload through
    ``Admitter.handle_body`` in this process (no HTTP, no TLS, no queueing), after the same
    warm-up. What the server adds on top is transport and waiting for the one admitter
    thread."""
    admitter, workload = warmed_admitter(nodes, count, "inproc")
    times: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    for body, kind in zip(workload.bodies, workload.kinds, strict=True):
        started, started_cpu = time.perf_counter(), time.thread_time()
        admitter.handle_body(body)
        times.setdefault(kind, []).append((time.perf_counter() - started) * 1000)
        cpu[kind] = cpu.get(kind, 0.0) + time.thread_time() - started_cpu
    admitter.close()
    out: dict[str, Any] = {}
    for kind, values in sorted(times.items()):
        values.sort()
        out[kind] = {"n": len(values), "p50_ms": percentile(values, 50),
                     "p99_ms": percentile(values, 99), "mean_ms": sum(values) / len(values),
                     "cpu_mean_ms": cpu[kind] * 1000 / len(values)}
    return out


def _progress(rate: float, mutate: dict[str, Any], floor: dict[str, Any]) -> None:
    m, f = mutate["all"], floor["all"]
    print(f"{rate:>5.0f}/s  mutate p50 {m['p50_ms']:.2f} p99 {m['p99_ms']:.2f} ms "
          f"({mutate['throughput_per_s']:.0f}/s, {mutate['errors']} errors)   "
          f"noop p50 {f['p50_ms']:.2f} p99 {f['p99_ms']:.2f} ms", file=sys.stderr, flush=True)


def markdown(results: dict[str, Any]) -> str:
    """The docs/benchmarks.md tables."""
    lines = []
    if "in_process" in results:
        lines += ["| request kind (in process, no HTTP) | n | mean (ms) | p50 (ms) | p99 (ms) "
                  "| CPU mean (ms) |", "|---|---:|---:|---:|---:|---:|"]
        for kind, s in results["in_process"].items():
            lines.append(f"| {kind} | {s['n']} | {s['mean_ms']:.2f} | {s['p50_ms']:.2f} "
                         f"| {s['p99_ms']:.2f} | {s.get('cpu_mean_ms', 0.0):.2f} |")
        lines.append("")
    lines += [
        "| rate (req/s) | endpoint | throughput (req/s) | p50 (ms) | p95 (ms) | p99 (ms) "
        "| errors | > 5 s | server CPU per request (ms) | of it event loop (ms) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["rates"]:
        alone = r.get("out_of_scope_alone", {})
        for name, d in (("/mutate", r["mutate"]), ("/noop (floor)", r["noop"]),
                        ("/mutate, out-of-scope only", alone.get("/mutate")),
                        ("/noop, same bodies", alone.get("/noop"))):
            if d is None:
                continue
            a = d["all"]
            lines.append(
                f"| {r['rate']:.0f} | {name} | {d['throughput_per_s']:.0f} | {a['p50_ms']:.2f} "
                f"| {a['p95_ms']:.2f} | {a['p99_ms']:.2f} | {d['errors'] + d['unanswered']} "
                f"| {d['over_timeout']} | {_cpu_per_request(d)} "
                f"| {_cpu_per_request(d, 'loop_cpu_s')} |")
    lines += ["", "| rate (req/s) | request kind | share | p50 (ms) | p99 (ms) "
              "| p50 / floor p50 | p99 / floor p99 |", "|---:|---|---:|---:|---:|---:|---:|"]
    for r in results["rates"]:
        floor = r["noop"]["all"]
        total = max(1, r["mutate"]["answered"])
        for kind, s in r["mutate"]["by_kind"].items():
            lines.append(
                f"| {r['rate']:.0f} | {kind} | {s['n'] / total:.0%} | {s['p50_ms']:.2f} "
                f"| {s['p99_ms']:.2f} | {_ratio(s['p50_ms'], floor['p50_ms'])} "
                f"| {_ratio(s['p99_ms'], floor['p99_ms'])} |")
    lines += ["", "| rate (req/s) | load average during the run |", "|---:|---|"]
    lines += [f"| {r['rate']:.0f} | {r.get('loadavg', '-')} |" for r in results["rates"]]
    return "\n".join(lines)


def _cpu_per_request(d: dict[str, Any], key: str = "server_cpu_s") -> str:
    if key not in d or not d["answered"]:
        return "-"
    return f"{d[key] * 1000 / d['answered']:.2f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="50,200,500", help="comma-separated requests/s")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds per rate")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--markdown", action="store_true", help="print the docs table")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    ap.add_argument("--server-tree", type=Path, metavar="DIR",
                    help="serve with the code of this other checkout (its own "
                         "bench/admission_server.py), this tree's workload: two trees "
                         "compared on the same pods even when their bench scripts differ")
    args = ap.parse_args(argv)
    if args.server_tree is not None and not (
            args.server_tree / "bench" / "admission_server.py").is_file():
        ap.error(f"--server-tree {args.server_tree}: no bench/admission_server.py there")
    rates = [float(x) for x in args.rates.split(",") if x.strip()]
    results = run(rates, args.duration, args.nodes, args.connections,
                  args.server_tree and args.server_tree.resolve())
    if args.server_tree is None:  # in process is this tree's pipeline
        results["in_process"] = in_process(args.nodes, 1000)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.markdown:
        print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
