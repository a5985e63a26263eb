"""Two webhook processes, one Kubernetes API: no GPU handed out twice, no lost reservation,
and a webhook killed mid-gang is finished by a fresh one on the reserved GPUs.

Each webhook is a separate Python process running the real Admitter with the placement
step on a KubernetesReservationStore; the API is the loopback TEST DOUBLE. The processes
are released at the same moment and admit interleaved gangs (worker 0 of every job, then
worker 1 of every job), so reservations and slot assignments of both race on the API.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from placement_jobs import mpijob, worker_pod

from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.yamlio import dump_documents

WORKER = Path(__file__).with_name("placement_worker.py")


def _start(url: str, inputs: Path, *, hang: bool = False) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(WORKER), "--api", url, *(["--hang"] if hang else []),
           str(inputs)]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _go(*procs: subprocess.Popen[str]) -> None:
    """Wait until every worker is ready, then release them all at once."""
    for p in procs:
        line = p.stdout.readline()
        assert json.loads(line or "{}").get("ready"), p.stderr.read()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def _results(proc: subprocess.Popen[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-pod lines and the final line, read up to ``done`` (the process may hang after)."""
    lines = []
    while True:
        raw = proc.stdout.readline()
        assert raw, f"worker died: {proc.stderr.read()}"
        msg = json.loads(raw)
        if msg.get("done"):
            return lines, msg
        lines.append(msg)


def _interleaved(jobs: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    return [*jobs, *(worker_pod(j, i) for i in range(workers) for j in jobs)]


def _own_gangs() -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, int]:
    """Each webhook admits its own 6 gangs of 2 x 2 GPUs (48 GPUs asked, 16 exist)."""
    a = [mpijob(f"a-{k}", workers=2, gpus=2) for k in range(6)]
    b = [mpijob(f"b-{k}", workers=2, gpus=2) for k in range(6)]
    return _interleaved(a, 2), _interleaved(b, 2), 2, 4


# Pods of the SAME gangs admitted by two webhooks at once: test_placement_serve.py, with
# two real `gputopo serve` processes.
@pytest.mark.parametrize("scenario", [_own_gangs], ids=["own"])
def test_two_webhooks_never_hand_out_a_gpu_twice_nor_lose_a_reservation(
    kube, tmp_path, scenario
):
    a_objs, b_objs, per_gang, expected_gangs = scenario()
    (tmp_path / "a.yaml").write_text(dump_documents(a_objs))
    (tmp_path / "b.yaml").write_text(dump_documents(b_objs))
    procs = [_start(kube.url, tmp_path / "a.yaml"), _start(kube.url, tmp_path / "b.yaml")]
    try:
        _go(*procs)
        outcomes = [_results(p) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    pods = [r for lines, _ in outcomes for r in lines]
    assert len(pods) == 24 and all(r["status"] == 200 and r["allowed"] for r in pods)
    placed = [r for r in pods if r["placed"]]
    held = Counter((r["node"], g) for r in placed for g in r["gpus"])
    doubles = sum(n - 1 for n in held.values() if n > 1)

    from k8s_double import api_client

    store = KubernetesReservationStore(api_client(kube.url))
    reservations = {f"MPIJob {r.key.namespace}/{r.key.name}": r for r in store.list()}
    lost = 0  # a pod placed on a slot its gang's reservation does not record
    for r in placed:
        res = reservations.get(r["job"])
        slots = {(s.node, tuple(s.gpus)) for s in res.assignments.values()} if res else set()
        lost += (r["node"], tuple(r["gpus"])) not in slots
    phantom = sum(1 for job in reservations if job not in {r["job"] for r in placed})
    placed_gangs = {r["job"] for r in placed}
    stats: Counter[str] = Counter()
    for _, final in outcomes:
        stats.update(final["store"])
    print(f"\ntwo webhooks ({scenario.__name__}): pods={len(pods)} placed={len(placed)} "
          f"gangs={len(placed_gangs)} GPUs={len(held)} double-allocated={doubles} lost={lost} "
          f"phantom={phantom} store={dict(stats)} "
          f"admit-seconds={[final['seconds'] for _, final in outcomes]}")
    assert doubles == 0
    assert lost == 0 and phantom == 0
    for job in placed_gangs:  # a placed gang has all its replicas placed, on one node
        mine = [r for r in placed if r["job"] == job]
        left = [(r["pod"], r["reason"]) for r in pods if r["job"] == job and not r["placed"]]
        assert len(mine) == per_gang and len({r["node"] for r in mine}) == 1, left
    assert len(held) <= 16
    assert len(placed_gangs) == expected_gangs, "16 GPUs / 4 per gang: filled exactly"
    unplaced = [r for r in pods if not r["placed"]]
    assert all(r["reason"] for r in unplaced)


def test_a_webhook_killed_mid_gang_is_finished_by_a_fresh_one(kube, tmp_path, demo_topologies):
    job = mpijob("survivor", workers=4, gpus=1)
    (tmp_path / "first.yaml").write_text(dump_documents(
        [job, worker_pod(job, 0), worker_pod(job, 1)]))
    first = _start(kube.url, tmp_path / "first.yaml", hang=True)
    try:
        _go(first)
        before, _ = _results(first)
    finally:
        first.kill()  # SIGKILL: no clean-up of any kind
        first.wait()
    assert [r["placed"] for r in before] == [True, True]
    # The operator recreates worker 1 (its pod died with the node, say) and creates 2 and 3.
    (tmp_path / "second.yaml").write_text(dump_documents(
        [job, worker_pod(job, 1, pod_uid_tag="again"), worker_pod(job, 2), worker_pod(job, 3)]))
    second = _start(kube.url, tmp_path / "second.yaml")
    try:
        _go(second)
        after, _ = _results(second)
    finally:
        second.kill()
        second.wait()
    by_pod = {r["pod"]: r for r in before}
    again = after[0]
    assert (again["node"], again["gpus"]) == (by_pod["survivor-worker-1"]["node"],
                                              by_pod["survivor-worker-1"]["gpus"])
    everyone = [before[0], *after]
    assert all(r["placed"] for r in everyone)
    assert len({r["node"] for r in everyone}) == 1
    gpus = [r["gpus"][0] for r in everyone]
    assert sorted(gpus) == sorted(set(gpus)) and len(gpus) == 4
    topo = demo_topologies[everyone[0]["node"]]
    assert all(topo.link(a, b).startswith("NV") for a, b in combinations(gpus, 2))

    from k8s_double import api_client

    (res,) = KubernetesReservationStore(api_client(kube.url)).list()
    assert res.complete and res.key.name == "survivor"

