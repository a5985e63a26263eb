"""Where a new gang's CPU goes on the live path: bench/held_feed.py with each part timed.

Why not cProfile alone: a profiler timing CPU (``--profile`` of held_feed.py) charges its
own overhead per function call, which triples the solver's share (many small calls) and
distorts the split. Here only a few dozen functions are wrapped, each timed with
``time.thread_time`` of the admitting thread, and every part's time is counted exclusive of
the wrapped parts inside it: the API calls by kind and by the step making them (the record
GET, the claim's ledger GET and PUT, the record POST, the commit PUT, the LIST of the
in-flight analysis), response decoding, the feeds' write-through, record parsing, the
solver, the in-flight analysis of a gang that finds no room, and the reserver's own
bookkeeping. The wrapping itself costs ~1 us per wrapped call, so totals run slightly
above held_feed.py's.

Run: ``python bench/held_feed_parts.py [held_feed.py options]`` (default: the
``both feeds`` mode, 60 gangs): per part, mean and median ms per new gang, for all gangs,
those placed and those that found no room.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time
import types
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import held_feed  # noqa: E402
import orjson  # noqa: E402

import gputopo.cluster.gang_record_feed as records  # noqa: E402
import gputopo.cluster.k8s_reservations as k8s  # noqa: E402
import gputopo.cluster.ledger_feed as ledgers  # noqa: E402
import webhook.placement.reserve as reserve  # noqa: E402

Part = dict[str, float]
STEPS = ("claim", "commit", "unclaim", "get", "list", "expire", "still recorded")
gangs: list[Part] = []
_stack: list[list[Any]] = []  # [label, start, time of wrapped parts inside]
_gang: Part | None = None


def timed(label: str | Callable[[], str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def run(*a: Any, **k: Any) -> Any:
            if _gang is None:
                return f(*a, **k)
            name = label() if callable(label) else label
            if _stack and _stack[-1][0].startswith("in-flight") \
                    and not name.startswith("in-flight"):
                name = "in-flight: " + name
            _stack.append([name, time.thread_time(), 0.0])
            try:
                return f(*a, **k)
            finally:
                name, t0, inner = _stack.pop()
                ms = (time.thread_time() - t0) * 1000
                _gang[name] = _gang.get(name, 0.0) + ms - inner
                if _stack:
                    _stack[-1][2] += ms
        return run
    return deco


def api(kind: str) -> Callable[[], str]:
    def label() -> str:
        steps = [s[0] for s in _stack if s[0] in STEPS or s[0].startswith("in-flight")]
        return f"API {kind} ({steps[-1] if steps else 'reserve'})"
    return label


def install() -> None:
    try:  # the tree measured may predate gputopo/cluster/configmap_calls.py (2026-11-24)
        import gputopo.cluster.configmap_calls as calls
        target: Any = calls.ConfigMapCalls
        methods = (("read", "GET"), ("replace", "PUT"), ("create", "POST"),
                   ("list", "LIST"), ("delete", "DELETE"))
    except ImportError:
        from kubernetes.client import CoreV1Api as target
        methods = tuple((f"{verb}_namespaced_config_map", kind) for verb, kind in (
            ("read", "GET"), ("replace", "PUT"), ("create", "POST"), ("list", "LIST"),
            ("delete", "DELETE")))
    for meth, kind in methods:
        setattr(target, meth, timed(api(kind))(getattr(target, meth)))
    if hasattr(k8s, "orjson"):
        k8s.orjson = types.SimpleNamespace(loads=timed("decode responses")(orjson.loads))
    else:  # json.loads there decodes responses (and a few record texts)
        k8s.json = types.SimpleNamespace(loads=timed("decode responses")(json.loads),
                                         dumps=json.dumps)
    store = k8s.KubernetesReservationStore
    for meth, label in (("_seen", "feeds' write-through"), ("_claim", "claim"),
                        ("_commit", "commit"), ("_unclaim", "unclaim"), ("get", "get"),
                        ("list", "list"), ("expire", "expire"),
                        ("_still_recorded", "still recorded"),
                        ("reserve", "store.reserve (own)")):
        setattr(store, meth, timed(label)(getattr(store, meth)))
    store._parse_gang = staticmethod(timed("parse records")(records.parse_record))
    store._entries = staticmethod(timed("parse ledger entries")(ledgers.ledger_entries))
    reserver = reserve.GangReserver
    reserver._in_flight_blocks = timed("in-flight")(reserver._in_flight_blocks)
    reserver._fit_entry = timed("fit of the pod")(reserver._fit_entry)
    reserve.solve = timed("solve")(reserve.solve)
    reserve.exclude_held = timed("exclude_held")(reserve.exclude_held)
    reserve.GroupedNodes.replaced = timed("GroupedNodes.replaced (solver)")(
        reserve.GroupedNodes.replaced)
    whole = reserver.reserve

    def one_gang(self: reserve.GangReserver, **kw: Any) -> Any:
        global _gang
        if getattr(self.store, "gang_feed", None) is None:
            return whole(self, **kw)  # only the both-feeds mode is split
        _gang = {}
        _stack.append(["reserver (own)", time.thread_time(), 0.0])
        try:
            out = whole(self, **kw)
        finally:
            name, t0, inner = _stack.pop()
            ms = (time.thread_time() - t0) * 1000
            _gang[name] = ms - inner
            _gang["TOTAL"] = ms
            gangs.append(_gang)
            _gang = None
        _gang_placed.append(isinstance(out, tuple))
        return out

    reserver.reserve = one_gang  # type: ignore[method-assign]


_gang_placed: list[bool] = []


def main(argv: list[str]) -> int:
    install()
    held_feed.main(argv or ["--modes", "both feeds"])
    print("\nboth feeds, CPU per new gang by part (ms, exclusive of the parts inside it):")
    for name, chosen in (("all", [True, False]), ("placed", [True]),
                         ("found no room", [False])):
        sel = [g for g, p in zip(gangs, _gang_placed, strict=True) if p in chosen]
        if not sel:
            continue
        total = [g["TOTAL"] for g in sel]
        print(f"\n{name}: {len(sel)} gangs, total median {statistics.median(total):.2f} / "
              f"mean {statistics.mean(total):.2f}")
        print("| part | mean | median |\n|---|---:|---:|")
        parts: defaultdict[str, list[float]] = defaultdict(list)
        for g in sel:
            for part in {p for g2 in sel for p in g2} - {"TOTAL"}:
                parts[part].append(g.get(part, 0.0))
        for part, vals in sorted(parts.items(), key=lambda kv: -sum(kv[1])):
            if statistics.mean(vals) >= 0.005:
                print(f"| {part} | {statistics.mean(vals):.3f} | "
                      f"{statistics.median(vals):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
