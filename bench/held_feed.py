"""CPU per new gang on the live path: held GPUs from a LIST of every ledger vs from the
watch-fed LedgerFeed (gputopo/cluster/ledger_feed.py), and other gangs' records from a LIST
vs from the watch-fed GangRecordFeed (gputopo/cluster/gang_record_feed.py).

Why: with the Kubernetes reservation store the placement step read ``held_gpus()`` for
every new gang it solved — one LIST of every ledger ConfigMap and a JSON parse of every
entry, on the admitting thread. With the feed the view's watch keeps them in memory and
the reserver redoes only the nodes that changed since the last gang. This measures what
that buys where it is paid: CPU of the admitting thread (``time.thread_time``, so the
double's process and the watch thread do not count) per ``GangReserver.reserve`` of a new
gang (solve over every node + reserve), the held-GPU read alone, and the record check
(``_recorded_elsewhere``, asked before the claims) alone.

Setup: the API TEST DOUBLE in its own process (tests/k8s_double); the bench's 1,000-node
cluster (bench/admission_cluster.py) as the node source; ``--gangs`` (250) gangs of 4
replicas x 2 GPUs seeded one replica per node, so every node has a ledger; then
``--count`` new gangs per mode (1-4 replicas x 1-8 GPUs, the same shapes for each) rotate
between a reserver on a store without feeds (the LIST path), one on a store with the ledger
feed only (``ledger feed``: records still listed) and one with both feeds wired as
``gputopo.cluster.view.connect`` wires them (one view watching both, as in production);
after each, the oldest gang is released (not timed) so about ``--gangs`` stay held,
and the bench waits (not timed, ``--settle``) until both feeds saw the release. The
record check is timed on its own before each reserve, for a 4-node gang. TTL expiry sweeps
are switched off for all (a sweep lists every ledger and gang: rate-limited to one per 10 s
in production, it would land on a few random gangs).

Run: ``python bench/held_feed.py`` (``--count 60 --gangs 250 --nodes 1000``).
``--modes "both feeds"`` times one mode only; ``--profile FILE`` runs cProfile over the
admitting thread's ``reserve()`` calls of the ``both feeds`` mode and writes the stats to
FILE (read them with ``python -m pstats FILE``; profiling inflates the CPU figures, so take
timings from a run without it). The table also splits each mode's CPU by whether the gang
was placed.
"""

from __future__ import annotations

import argparse
import cProfile
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

from admission_cluster import cluster_objects  # noqa: E402
from k8s_double import api_client, double_process  # noqa: E402

from gputopo.cluster.gang_record_feed import GangRecordFeed  # noqa: E402
from gputopo.cluster.k8s_reservations import KubernetesReservationStore  # noqa: E402
from gputopo.cluster.ledger_feed import LedgerFeed  # noqa: E402
from gputopo.cluster.reservations import GangKey, GangReservation  # noqa: E402
from gputopo.cluster.snapshot import ClusterSnapshot  # noqa: E402
from gputopo.cluster.view import ClusterView  # noqa: E402
from gputopo.placement.types import GangRequest, Placement, ReplicaSlot  # noqa: E402
from webhook.placement.reserve import GangReserver  # noqa: E402

SHAPES = [GangRequest(r, g) for r in (1, 2, 4) for g in (1, 2, 4, 8)]


def key(tag: str) -> GangKey:
    return GangKey("bench", "PyTorchJob", tag, f"uid-{tag}")


def cpu(call: Callable[[], Any]) -> tuple[float, Any]:
    t = time.thread_time()
    out = call()
    return (time.thread_time() - t) * 1000, out


def cpu_and_wall(call: Callable[[], Any]) -> tuple[float, float]:
    w = time.perf_counter()
    ms, _ = cpu(call)
    return ms, (time.perf_counter() - w) * 1000


def released(res: GangReservation | None, records: int, feed: LedgerFeed,
             gangs: GangRecordFeed) -> bool:
    """True once both feeds saw ``res`` (released a moment ago) go: its record no longer
    counted, none of its GPUs held."""
    if res is None:
        return True
    if gangs.records() >= records:
        return False
    held = feed.held_gpus()
    return not any(held.get(n, set()) & g for n, g in res.gpus().items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gangs", type=int, default=250)
    ap.add_argument("--count", type=int, default=60, help="new gangs per mode")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="at most this long after each release, the feeds are waited for "
                         "to see it (not timed)")
    ap.add_argument("--modes", default="LIST,ledger feed,both feeds",
                    help="comma-separated modes to time (default: all three)")
    ap.add_argument("--profile", metavar="FILE",
                    help="cProfile the both-feeds reserve() calls into FILE")
    args = ap.parse_args(argv)
    prof = cProfile.Profile(time.thread_time) if args.profile else None  # CPU, not wall

    cluster = ClusterSnapshot.from_objects(cluster_objects(args.nodes))
    nodes = [n.name for n in cluster.node_states()]
    pod: dict[str, Any] = {"spec": {}}
    with double_process() as kube:
        seeder = KubernetesReservationStore(api_client(kube.url))
        held: deque[GangKey] = deque()
        for j in range(args.gangs):
            slots = tuple(ReplicaSlot(r, nodes[(4 * j + r) % len(nodes)], (0, 1))
                          for r in range(4))
            seeder.reserve(key(f"seed-{j}"), Placement(True, slots, 1.0, "seed"))
            held.append(key(f"seed-{j}"))
        feed, gangs = LedgerFeed(), GangRecordFeed()
        api = api_client(kube.url)
        with_feed = KubernetesReservationStore(api, held_feed=feed,
                                               expire_interval_seconds=1e9)
        with_both = KubernetesReservationStore(api, held_feed=feed, gang_feed=gangs,
                                               expire_interval_seconds=1e9)
        view = ClusterView(api, reservations=with_both, ledger_feed=feed, gang_feed=gangs,
                           reconcile_interval_seconds=1e9).start()
        try:
            assert view.wait_synced(30), "the view did not sync"
            by_list = KubernetesReservationStore(api_client(kube.url),
                                                 expire_interval_seconds=1e9)
            modes = {"LIST": GangReserver(by_list), "ledger feed": GangReserver(with_feed),
                     "both feeds": GangReserver(with_both)}
            wanted = [m.strip() for m in args.modes.split(",")]
            unknown = [m for m in wanted if m not in modes]
            if unknown:
                raise SystemExit(f"--modes: unknown {', '.join(map(repr, unknown))}; "
                                 f"choose from {', '.join(map(repr, modes))}")
            modes = {m: modes[m] for m in wanted}
            names = list(modes)
            for reserver in modes.values():  # warm: first solve, memos, one sweep
                reserver.fit_and_free(cluster, pod)
                # the store's first expire() sweeps (lists every ledger and record): here,
                # not on the first timed gang (it landed there before 2026-11-24, ~2 ms on
                # a mode's mean of 60 gangs)
                reserver.store.expire()
            rng = random.Random(3)
            shapes = [rng.choice(SHAPES) for _ in range(args.count)]  # the same for each
            total: dict[str, list[float]] = {m: [] for m in modes}
            read: dict[str, list[float]] = {m: [] for m in modes}
            wall: dict[str, list[float]] = {m: [] for m in modes}
            check: dict[str, list[float]] = {m: [] for m in modes}
            done: dict[str, list[bool]] = {m: [] for m in modes}
            gang_nodes = nodes[:4]  # what a 4-node gang asks the record check about
            placed = 0
            for i in range(len(modes) * args.count):
                mode = names[i % len(modes)]
                reserver = modes[mode]
                store = reserver.store
                if mode == "LIST":
                    ms, w = cpu_and_wall(store.held_gpus)
                else:
                    ms, w = cpu_and_wall(lambda s=store: s.held_snapshot(None))
                read[mode].append(ms)
                wall[mode].append(w)
                ms, _ = cpu(lambda s=store: s._recorded_elsewhere("none", gang_nodes))
                check[mode].append(ms)
                k, shape = key(f"new-{i}"), shapes[i // len(modes)]
                on = prof is not None and mode == "both feeds"
                if on:
                    prof.enable()
                ms, got = cpu(lambda r=reserver, k=k, g=shape: r.reserve(
                    cluster=cluster, pod=pod, key=k, gang=g))
                if on:
                    prof.disable()
                total[mode].append(ms)
                done[mode].append(isinstance(got, tuple))
                if isinstance(got, tuple):
                    placed += 1
                    held.append(k)
                gone = seeder.get(held[0])
                records = gangs.records()
                seeder.release(held.popleft())
                # let the watches deliver the release (not timed): else whether the next
                # gang still sees the released GPUs held depends on how fast the code under
                # measurement is, and so does where (and whether) it is placed. Polled in
                # short steps: a long idle sleep lets the core slow down and go cold, and
                # the next gang's first calls then cost up to twice their CPU time
                until = time.monotonic() + args.settle
                while time.monotonic() < until and not released(gone, records, feed, gangs):
                    time.sleep(0.0005)
        finally:
            view.stop()
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"{args.nodes} nodes, {args.gangs} gangs held ({len(feed.held_gpus())} nodes "
          f"with held GPUs), {args.count} new gangs per mode ({placed} placed in all); "
          f"load average {' '.join(load)}")
    print("| store | held read: CPU / wall, median (ms) | record check: CPU, median (ms) "
          "| reserve() per new gang: CPU median / mean (ms) |")
    print("|---|---:|---:|---:|")
    for m in modes:
        print(f"| {m} | {statistics.median(read[m]):.2f} / {statistics.median(wall[m]):.2f} "
              f"| {statistics.median(check[m]):.2f} "
              f"| {statistics.median(total[m]):.1f} / {statistics.mean(total[m]):.1f} |")
    print("| store | placed: n, CPU median / mean (ms) | not placed: n, CPU median / mean (ms) |")
    print("|---|---:|---:|")
    for m in modes:
        cells = []
        for want in (True, False):
            got = [ms for ms, ok in zip(total[m], done[m], strict=True) if ok is want]
            cells.append(f"{len(got)}, {statistics.median(got):.1f} / "
                         f"{statistics.mean(got):.1f}" if got else "0, -")
        print(f"| {m} | {cells[0]} | {cells[1]} |")
    if prof is not None:
        prof.dump_stats(args.profile)
        print(f"profile of the both-feeds reserve() calls: {args.profile}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
