"""Where an admission's CPU goes: the benchmark's workload through the pipeline in one
process, CPU time per request kind and a cProfile of each kind.

Why next to ``bench/admission.py``: that script measures the server from the outside
(latency, process CPU per review); this one says which functions the pipeline's share of
that CPU is spent in, so a speed-up removes a cost instead of moving a measurement. Same
cluster (1,000 nodes), same request mix, same 100-request warm-up. CPU is the admitting
thread's own (``time.thread_time``), so other processes on a shared machine do not count.

Run: ``python bench/admission_profile.py`` (``--top 25`` functions per kind by own time;
``--count 1000``; ``--sort cumulative``). ``--parts`` times the old and new ways of the
review's own steps (patch, copy, decode, encode) on the pods this workload really admits,
interleaved in one process, so the machine's noise hits both alike. Transport (TLS, HTTP,
the ASGI app) is not in here: profile the server for that (``py-spy record -p PID`` on
``bench/admission_server.py`` under ``bench/admission.py``'s load).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from admission import WARMUP_REQUESTS  # noqa: E402
from admission_cluster import cluster_objects, request_stream  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--sort", default="tottime", choices=("tottime", "cumulative"))
    ap.add_argument("--no-profile", action="store_true", help="CPU per kind only")
    ap.add_argument("--parts", action="store_true",
                    help="old vs new patch/copy/decode/encode on the admitted pods")
    args = ap.parse_args(argv)

    from gputopo.cluster.snapshot import ClusterSnapshot
    from webhook.assembly import build_admitter
    from webhook.placement.step import placement_step_for

    workload = request_stream(args.count, tag="prof")
    warm = request_stream(WARMUP_REQUESTS, seed=5, tag="prof-warm")
    cluster = ClusterSnapshot.from_objects(cluster_objects(args.nodes) + warm.jobs
                                           + workload.jobs)
    cluster.node_states()
    admitter = build_admitter(None, cluster, placement=placement_step_for(cluster),
                              reload_interval_s=0)
    for body in warm.bodies:
        admitter.handle_body(body)
    if args.parts:
        return parts(admitter, workload.bodies)
    cpu: dict[str, list[float]] = {}
    profiles: dict[str, cProfile.Profile] = {}
    for body, kind in zip(workload.bodies, workload.kinds, strict=True):
        prof = None if args.no_profile else profiles.setdefault(kind, cProfile.Profile())
        started = time.thread_time()
        if prof is not None:
            prof.enable()
        admitter.handle_body(body)
        if prof is not None:
            prof.disable()
        cpu.setdefault(kind, []).append((time.thread_time() - started) * 1000)
    admitter.close()
    total = sum(len(v) for v in cpu.values())
    print("| request kind | share | CPU per review, mean (ms) |")
    print("|---|---:|---:|")
    for kind, values in sorted(cpu.items()):
        print(f"| {kind} | {len(values) / total:.0%} | {sum(values) / len(values):.3f} |")
    mix = sum(sum(v) for v in cpu.values()) / total
    print(f"| mix | 100% | {mix:.3f} |")
    if args.no_profile:
        return 0
    print("\n(CPU above includes the profiler's own overhead when profiling)")
    for kind, prof in sorted(profiles.items()):
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
        print(f"\n===== {kind} ({len(cpu[kind])} reviews) =====")
        print(out.getvalue().split("\n", 4)[-1].rstrip())
    return 0


def parts(admitter: Any, bodies: list[bytes], rounds: int = 5) -> int:
    """Old vs new for each step of a review the pipeline itself owns, microseconds per
    call, median of ``rounds`` interleaved rounds over the (original, mutated) pod pairs."""
    import copy
    import json
    import statistics

    import jsonpatch

    import webhook.pipeline as pipeline
    from webhook.patch import copy_document, make_patch
    from webhook.review import decode_json, encode_patch_json

    pairs: list[tuple[Any, Any]] = []
    real = pipeline.make_patch

    def record(original: Any, mutated: Any) -> list[dict[str, Any]]:
        pairs.append((copy.deepcopy(original), copy.deepcopy(mutated)))
        return real(original, mutated)

    pipeline.make_patch = record
    for body in bodies:
        admitter.handle_body(body)
    pipeline.make_patch = real
    admitter.close()
    patches = [make_patch(a, b) for a, b in pairs]
    pods = [a for a, _ in pairs]
    cases = {
        "patch: jsonpatch.make_patch -> webhook.patch.make_patch": (
            lambda ab: jsonpatch.make_patch(*ab).patch, lambda ab: make_patch(*ab), pairs),
        "copy: copy.deepcopy -> copy_document": (copy.deepcopy, copy_document, pods),
        "decode body: json.loads -> decode_json": (json.loads, decode_json, bodies),
        "encode patch: json.dumps -> encode_patch_json": (
            lambda p: json.dumps(p, separators=(",", ":")).encode(), encode_patch_json,
            patches),
    }
    print(f"{len(pairs)} mutated pods, {len(bodies)} bodies, {sum(map(len, patches))} "
          f"operations; microseconds per call, median of {rounds} interleaved rounds\n")
    print("| step: old -> new | old (us) | new (us) | old / new |")
    print("|---|---:|---:|---:|")
    for name, (old, new, items) in cases.items():
        timings: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(rounds):
            for label, fn in (("old", old), ("new", new)):
                started = time.thread_time()
                for item in items:
                    fn(item)
                timings[label].append((time.thread_time() - started) / len(items) * 1e6)
        o, n = statistics.median(timings["old"]), statistics.median(timings["new"])
        print(f"| {name} | {o:.1f} | {n:.1f} | {o / n:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
