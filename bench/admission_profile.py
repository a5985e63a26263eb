"""Where an admission's CPU goes: the benchmark's workload through the pipeline in one
process, CPU time per request kind and a cProfile of each kind.

Why next to ``bench/admission.py``: that script measures the server from the outside
(latency, process CPU per review); this one says which functions the pipeline's share of
that CPU is spent in, so a speed-up removes a cost instead of moving a measurement. Same
cluster (1,000 nodes), same request mix, same 100-request warm-up. CPU is the admitting
thread's own (``time.thread_time``), so other processes on a shared machine do not count.

Run: ``python bench/admission_profile.py`` (``--top 25`` functions per kind by own time;
``--count 1000``; ``--sort cumulative``). ``--components`` gives the CPU of each part of
the placement step (solver, held GPUs, node fit, expiry, network plan, ...) per request
kind; ``--can-wait`` adds the good-placement check a live cluster with a queue runs.
``--opcodes`` counts the Python bytecodes each review executes (event-loop share and
admitter share, as the server splits them), by kind and by function: the same on every
machine and every run, so a change's effect on the interpreter's work is read exactly,
without the noise of a shared machine. Why it matters: on an idle KVM guest each review
starts with cold caches and branch predictors, and its CPU then grows with the code it
runs (``git show 5b1c38e:docs/benchmarks.md``, "Idle wake-ups").
``--parts`` times the old and new ways of the review's own steps (patch, copy, decode,
encode) on the pods this workload really admits, interleaved in one process, so the
machine's noise hits both alike. Transport (TLS, HTTP, the ASGI app) is not in here:
profile the server for that (``py-spy record -p PID`` on ``bench/admission_server.py``
under ``bench/admission.py``'s load).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from admission import warmed_admitter  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--sort", default="tottime", choices=("tottime", "cumulative"))
    ap.add_argument("--no-profile", action="store_true", help="CPU per kind only")
    ap.add_argument("--parts", action="store_true",
                    help="old vs new patch/copy/decode/encode on the admitted pods")
    ap.add_argument("--can-wait", action="store_true",
                    help="as with a placement queue (a live cluster): gangs that may wait "
                         "take a placement only above GOOD_SHARE of their ideal bandwidth")
    ap.add_argument("--components", action="store_true",
                    help="CPU per review of each part of the placement step, by kind")
    ap.add_argument("--opcodes", action="store_true",
                    help="Python bytecodes executed per review, by kind and by function "
                         "(deterministic: no timing)")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="sleep this long before each review, as an idle server between "
                         "reviews (20: like 50 reviews/s): the cold-cache cost per review")
    ap.add_argument("--skip", type=int, default=0, metavar="N",
                    help="admit the first N reviews unmeasured: with --count 2500 --skip "
                         "1500 the figures are of the busy cluster (past ~1,500 reviews no "
                         "node holds a 2 x 4 gang: docs/benchmarks.md, "
                         "\"Admission latency\")")
    args = ap.parse_args(argv)
    if args.skip and (args.parts or args.opcodes or args.components):
        ap.error("--skip is for CPU per kind and cProfile (not --parts, --opcodes, "
                 "--components)")

    admitter, workload = warmed_admitter(args.nodes, args.count, "prof",
                                         can_wait=args.can_wait)
    gc.collect()
    gc.freeze()  # as the server does once it is built (webhook/server.py)
    if args.parts:
        return parts(admitter, workload.bodies)
    if args.opcodes:
        return opcodes(admitter, workload.bodies, workload.kinds, args.top)
    if args.components:
        return components(admitter, workload.bodies, workload.kinds, args.gap_ms / 1000)
    cpu: dict[str, list[float]] = {}
    profiles: dict[str, cProfile.Profile] = {}
    for i, (body, kind) in enumerate(zip(workload.bodies, workload.kinds, strict=True)):
        if i < args.skip:
            admitter.handle_body(body)
            continue
        prof = None if args.no_profile else profiles.setdefault(kind, cProfile.Profile())
        if args.gap_ms:
            time.sleep(args.gap_ms / 1000)
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


def components(admitter: Any, bodies: list[bytes], kinds: list[str], gap_s: float = 0.0
               ) -> int:
    """CPU (thread time) per review of each kind spent in each part of the placement step
    and the features around it, each part timed by wrapping it (inclusive: the solver
    inside ``not_good`` counts there and under ``solver``). Wrapping costs ~1 us a call."""
    import webhook.pipeline as pipeline
    import webhook.placement.reserve as reserve
    import webhook.placement.step as step
    from webhook.placement import network, network_writes
    from webhook.podgroups import PodGroupStep

    spent: dict[str, float] = {}
    calls: dict[str, int] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            started = time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - started
                calls[name] = calls.get(name, 0) + 1
        return wrapper

    placement = next(s for s in admitter.steps if isinstance(s, step.PlacementStep))
    store, reserver = placement.store, placement.reserver
    for name in ("held_gpus", "held_snapshot", "expire", "reserve", "get", "assign_slot"):
        if hasattr(store, name):
            setattr(store, name, timed(f"store.{name}", getattr(store, name)))
    reserver._solver = timed("solver", reserver.solver)
    for name in ("not_good", "_fit_and_free", "_fit_entry"):
        if hasattr(reserver, name):
            setattr(reserver, name, timed(f"reserver.{name}", getattr(reserver, name)))
    for mod in (reserve, step):
        for name in ("nodes_for", "exclude_held", "usable_pair", "_in_flight_blocks"):
            if hasattr(mod, name):
                setattr(mod, name, timed(name, getattr(mod, name)))
    if hasattr(reserver, "_in_flight_blocks"):
        reserver._in_flight_blocks = timed("_in_flight_blocks", reserver._in_flight_blocks)
    # node fit (issue 23): absent from older trees, so each looked up first
    if hasattr(reserver, "reserved_limits"):
        reserver.reserved_limits = timed("reserver.reserved_limits", reserver.reserved_limits)
    if hasattr(reserver, "caps"):
        reserver.caps.limits = timed("ResourceCaps.limits", reserver.caps.limits)
    for mod in (reserve, step):
        for name in ("solve_fitting", "pod_volumes", "pod_demand"):
            if hasattr(mod, name):
                setattr(mod, name, timed(name, getattr(mod, name)))
    step.slot_node_problem = timed("slot_node_problem", step.slot_node_problem)
    # the slot is written by webhook.placement.outcome_writes (by the step itself in trees
    # before that split; this script also profiles the other tree of a comparison)
    writes = step if hasattr(step, "apply_slot") else importlib.import_module(
        "webhook.placement.outcome_writes")
    writes.apply_slot = timed("apply_slot (mutations)", writes.apply_slot)
    network.needs = timed("network.needs", network.needs)
    network_writes.apply = timed("network_writes.apply", network_writes.apply)
    network.job_facts = timed("network.job_facts", network.job_facts)
    for name in ("usable", "decide", "plan_for"):
        setattr(network.GangNetwork, name,
                timed(f"GangNetwork.{name}", getattr(network.GangNetwork, name)))
    PodGroupStep.apply = timed("podgroups step", PodGroupStep.apply)
    placement.apply = timed("placement step (all)", placement.apply)
    pipeline.make_patch = timed("patch", pipeline.make_patch)
    pipeline.parse_review = timed("parse_review", pipeline.parse_review)
    pipeline.working_copy = timed("copy of the pod", pipeline.working_copy)
    pipeline.apply_policy = timed("policy mutations", pipeline.apply_policy)
    pipeline.build_response = timed("build_response", pipeline.build_response)
    pipeline.resolve_job = timed("resolve_job", pipeline.resolve_job)
    admitter.answer_at_once = timed("event loop share (answer_at_once)",
                                    admitter.answer_at_once)
    admitter.handle_request = timed("admitter thread share (handle_request)",
                                    admitter.handle_request)
    admitter.cluster.node_states = timed("cluster.node_states", admitter.cluster.node_states)

    by_kind: dict[str, dict[str, float]] = {}
    count: dict[str, int] = {}
    total: dict[str, float] = {}
    for body, kind in zip(bodies, kinds, strict=True):
        if gap_s:
            time.sleep(gap_s)
        before = dict(spent)
        started = time.thread_time()
        answer = admitter.answer_at_once(body)  # as the server splits a review
        if not isinstance(answer, tuple):
            admitter.handle_request(answer)
        total[kind] = total.get(kind, 0.0) + time.thread_time() - started
        count[kind] = count.get(kind, 0) + 1
        mine = by_kind.setdefault(kind, {})
        for name, value in spent.items():
            mine[name] = mine.get(name, 0.0) + value - before.get(name, 0.0)
    admitter.close()
    names = sorted(spent, key=lambda n: -spent[n])
    shown = sorted(count)
    n_all = sum(count.values())
    print("ms of CPU per review of each kind (mix: per review of the whole mix); "
          "parts are inclusive and nest\n")
    print("| part | " + " | ".join(shown) + " | mix |")
    print("|---|" + "---:|" * (len(shown) + 1))
    print("| whole review | " + " | ".join(f"{total[k] * 1000 / count[k]:.3f}" for k in shown)
          + f" | {sum(total.values()) * 1000 / n_all:.3f} |")
    for name in names:
        cells = [f"{by_kind[k].get(name, 0.0) * 1000 / count[k]:.3f}" for k in shown]
        print(f"| {name} | " + " | ".join(cells) + f" | {spent[name] * 1000 / n_all:.3f} |")
    print(f"\nreservations at the end: {len(store.list())}")
    return 0


def opcodes(admitter: Any, bodies: list[bytes], kinds: list[str], top: int) -> int:
    """Python bytecodes each review executes, as the server runs it: ``answer_at_once``
    (the event loop's share), then ``handle_request`` (the admitter thread's) when the
    review is in scope. Counted with a ``sys.settrace`` tracer and ``f_trace_opcodes``,
    which sees every Python frame (not C code such as orjson's)."""
    from collections import Counter

    ops: Counter[tuple[str, str]] = Counter()
    calls: Counter[tuple[str, str]] = Counter()

    def tracer(frame: Any, event: str, _arg: Any) -> Any:
        key = (Path(frame.f_code.co_filename).name, frame.f_code.co_qualname)
        if event == "call":
            frame.f_trace_opcodes = True
            calls[key] += 1
        elif event == "opcode":
            ops[key] += 1
        return tracer

    per_kind: dict[str, list[int]] = {}
    for body, kind in zip(bodies, kinds, strict=True):
        before = ops.total()
        loop_ops = 0
        sys.settrace(tracer)
        try:
            answer = admitter.answer_at_once(body)
            loop_ops = ops.total() - before
            if not isinstance(answer, tuple):
                admitter.handle_request(answer)
        finally:
            sys.settrace(None)
        per_kind.setdefault(kind, [0, 0, 0])
        per_kind[kind][0] += 1
        per_kind[kind][1] += loop_ops
        per_kind[kind][2] += ops.total() - before - loop_ops
    admitter.close()
    n_all = sum(v[0] for v in per_kind.values())
    print("Python bytecodes executed per review (event loop: answer_at_once; admitter "
          "thread: handle_request)\n")
    print("| request kind | share | event loop | admitter thread | total |")
    print("|---|---:|---:|---:|---:|")
    for kind, (n, loop_ops, thread_ops) in sorted(per_kind.items()):
        print(f"| {kind} | {n / n_all:.0%} | {loop_ops / n:.0f} | {thread_ops / n:.0f} | "
              f"{(loop_ops + thread_ops) / n:.0f} |")
    print(f"| mix | 100% | | | {ops.total() / n_all:.0f} |")
    print(f"\nTop {top} functions, bytecodes and calls per review of the mix:\n")
    print("| bytecodes | calls | function |")
    print("|---:|---:|---|")
    for (name, qualname), count in ops.most_common(top):
        print(f"| {count / n_all:.0f} | {calls[(name, qualname)] / n_all:.1f} | "
              f"{name}:{qualname} |")
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
