"""The replays' queue (bench/gang_queue.py) decides as the product's queue does.

Why: the cluster replay and the Alibaba replay claim to run "the product's own queue" for
every policy. This holds them to it: one recorded sequence of arrivals, job ends and queue
passes is played through the product (the admission step and ``PlacementQueue`` on the
API TEST DOUBLE, as ``gputopo serve`` wires them) and through ``GangQueue`` side by side;
after every event both must have made the same decision (placed at admission or gated;
per pass: which gangs were placed, placed below ``minShare`` after ``maxWaitSeconds``,
denied, which gang stopped backfill) and hold the very same GPUs. Times are the product's
own (the records' ``since``, the queue's clock moved forward to reach the starvation guard
and ``maxWaitSeconds``).

The sequence is checked to exercise each rule (placed at admission, gated, waits for a good
placement although one is feasible, queue placement, backfill, starvation stop, fallback),
so a replay that drops one of them fails here.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from placement_checks import record as record_of
from placement_jobs import mpijob, worker_pod
from queue_kit import admit_and_create, gated, wait_for
from test_placement_live import live_admitter

from bench.gang_queue import GangQueue
from gputopo import names
from gputopo.cluster.demo import demo_cluster_path
from gputopo.cluster.reservations import GangKey
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest
from gputopo.yamlio import load_documents
from webhook.queue.placer import PlacementQueue

#: ("arrive", job, workers, GPUs per worker); ("end-on-each-node", prefix): on each node,
#: the first running job named ``prefix*`` (by name) ends; ("end-gpus", prefix, GPUs): the
#: running ``prefix*`` jobs on these GPUs of the first node (by name) end; ("pass", clock
#: offset in seconds).
FULL = [("arrive", f"a{i}", 1, 2) for i in range(1, 9)]  # 8 NVLink pairs: the cluster is full
STARVING = [
    *FULL, ("arrive", "w1", 1, 8), ("arrive", "w2", 4, 1), ("arrive", "y0", 1, 2),  # wait
    ("end-on-each-node", "a"), ("pass", 0),  # 2 + 2 free: y0 backfills, w2 is not good there
    ("arrive", "y1", 1, 4), ("end-on-each-node", "a"), ("pass", 0),
    ("pass", 700),  # w1 starves: nothing behind it is placed
]
OVERDUE = [
    *(("arrive", f"s{i:02d}", 1, 1) for i in range(16)),  # 16 one-GPU jobs: full
    # GPUs 0, 1, 4, 5 of one node free: half the bus bandwidth of an NVLink quad
    ("end-gpus", "s", (0, 1, 4, 5)),
    ("arrive", "y0", 1, 4), ("pass", 0),  # below minShare: it waits
    ("pass", 3700),  # after maxWaitSeconds it takes what reaches floorShare
]
HELD = [
    *FULL, ("arrive", "w1", 1, 8), ("age", 700),  # w1 waits, and starves
    ("end-on-each-node", "a"),  # 2 + 2 free: w1 keeps the node A (tied, first by name)
    ("arrive", "y0", 1, 2),  # placed off the kept node, on B
    ("arrive", "y1", 1, 2),  # only A:2 free: held behind w1 at admission
    ("pass", 0),  # w1 still cannot start; y1 may not take its node
]
#: what each sequence must exercise (the product's decisions)
RULES = {"starving": ("admitted", "gated", "not good", "queue placed", "backfill", "blocked"),
         "overdue": ("admitted", "gated", "not good", "fallen back"),
         "held": ("admitted", "gated", "held", "blocked")}
SEQUENCES = {"starving": STARVING, "overdue": OVERDUE, "held": HELD}


def _held(store: Any) -> dict[str, set[int]]:
    return {n: set(g) for n, g in store.held_gpus().items() if g}


def _slots(res: Any) -> list[tuple[str, tuple[int, ...]]]:
    return sorted((s.node, tuple(s.gpus)) for s in res.slots)


@pytest.mark.parametrize("case", sorted(SEQUENCES))
def test_the_replay_queue_decides_as_the_product_queue(kube, case):
    sequence = SEQUENCES[case]
    decisions: list[tuple[Any, ...]] = []  # the product's, for the coverage check
    for obj in load_documents(demo_cluster_path()):  # the seeds' two DGX-1 nodes
        kube.apply(obj)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        replay = GangQueue(view.node_states(), solve, wait_for_good=True)
        jobs: dict[str, dict[str, Any]] = {}
        keys: dict[str, GangKey] = {}
        for event in sequence:
            if event[0] == "arrive":
                _, name, workers, gpus = event
                job = jobs[name] = kube.apply(mpijob(name, workers=workers, gpus=gpus))
                key = keys[name] = GangKey("default", "MPIJob", name, job["metadata"]["uid"])
                pods = [admit_and_create(admitter, kube, worker_pod(job, i))[0]
                        for i in range(workers)]
                waits = [gated(p) for p in pods]
                assert len(set(waits)) == 1, (name, waits)  # a gang waits whole or not at all
                records = [record_of(p) for p in pods]
                since = min(r.get("since", time.time()) for r in records)
                started = replay.arrive(key, GangRequest(workers, gpus), since)
                if waits[0]:
                    decisions.append(("gated", name, records[0]["reason"]))
                    assert started is None, f"{name}: the replay placed what the product gated"
                else:
                    res = view.reservations.get(key)
                    decisions.append(("admitted", name))
                    assert started is not None, f"{name}: the replay gated what was placed"
                    assert _slots(started.reservation) == _slots(res), name
            elif event[0] == "age":  # the waiting gangs waited ``seconds`` longer
                for p in kube.objects("v1", "Pod"):
                    if gated(p):
                        rec = record_of(p)
                        rec["since"] -= event[1]
                        p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] = \
                            json.dumps(rec)
                        kube.apply(p)
                for g in replay.waiting:
                    g.since -= event[1]
                assert wait_for(lambda aged=event[1]: all(
                    time.time() - w.since >= aged for w in view.waiting_gangs()))
            elif event[0].startswith("end-"):
                running = {}
                for name in sorted(jobs):
                    res = view.reservations.get(keys[name])
                    if name.startswith(event[1]) and res is not None:
                        running[name] = res
                if event[0] == "end-gpus":
                    node = min(s.node for r in running.values() for s in r.slots)
                    ending = [n for n, r in running.items()
                              if any(s.node == node and set(s.gpus) & set(event[2])
                                     for s in r.slots)]
                else:
                    first: dict[str, str] = {}
                    for name, res in running.items():
                        first.setdefault(res.slots[0].node, name)
                    ending = list(first.values())
                    assert len(ending) == 2, first  # one job on each of the two nodes
                for name in ending:
                    kube.remove(jobs.pop(name))
                    for p in kube.objects("v1", "Pod"):
                        if p["metadata"]["name"].startswith(f"{name}-worker-"):
                            kube.remove(p)
                    replay.release(keys[name])
                    assert wait_for(lambda k=keys[name]: view.reservations.get(k) is None)
            else:
                now = time.time() + event[1]
                product = PlacementQueue(view.api_client, view, view.reservations,
                                         identity="test", clock=lambda now=now: now).run_once()
                started = {str(s.key): s for s in replay.serve(now)}
                ours = replay.last_pass
                decisions.append(("pass", product))
                assert (ours.placed, ours.fallen_back, ours.denied, ours.blocked_by) == (
                    product.placed, product.fallen_back, product.denied,
                    product.blocked_by), event
                assert set(ours.waiting) == set(product.waiting), event
                for name in product.placed + product.fallen_back:
                    res = view.reservations.get(next(k for k in keys.values()
                                                     if str(k) == name))
                    assert _slots(started[name].reservation) == _slots(res), name
            assert wait_for(lambda: _held(view.reservations) == _held(replay.store)), (
                event, _held(view.reservations), _held(replay.store))

    # the sequence exercises the rules it is meant to
    passes = [d[1] for d in decisions if d[0] == "pass"]
    why = [d[2] for d in decisions if d[0] == "gated"] + [
        w for p in passes for w in p.waiting.values()]
    seen = {
        "admitted": any(d[0] == "admitted" for d in decisions),
        "gated": any(d[0] == "gated" for d in decisions),
        "not good": any("a good placement gives" in w for w in why),  # feasible, not good
        "queue placed": any(p.placed for p in passes),
        "backfill": any(p.placed and p.waiting for p in passes),  # past a waiting gang
        "blocked": any(p.blocked_by for p in passes),  # the starvation guard
        "fallen back": any(p.fallen_back for p in passes),  # maxWaitSeconds, floorShare
        # a new gang kept off a starving gang's node at admission
        "held": any(d[0] == "gated" and "has waited" in d[2] for d in decisions),
    }
    assert [r for r in RULES[case] if not seen[r]] == [], decisions
