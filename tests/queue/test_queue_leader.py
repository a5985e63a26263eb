"""Two placement queue processes, one Lease: only the leader acts; a leader killed
mid-placement is replaced and the gang completed, no GPU handed out twice.

Each queue is a separate Python process (``queue_worker.py``: ClusterView, the
KubernetesReservationStore, the LeaderElector and the QueueRunner, as ``gputopo serve``
wires them) talking to the API TEST DOUBLE through the official client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from placement_checks import gpu_group, pinned_node
from queue_kit import busy_cluster, gated, pods_of, wait_for, waiting_gang
from test_placement_live import live_admitter

from gputopo import names
from gputopo.cluster.k8s_reservations import KubernetesReservationStore

WORKER = Path(__file__).with_name("queue_worker.py")


def _start(url: str, identity: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), *filter(None, [os.environ.get(
            "PYTHONPATH")])])}
    return subprocess.Popen([sys.executable, str(WORKER), "--api", url, "--identity", identity,
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _read_until(proc: subprocess.Popen[str], key: str, timeout: float = 30.0
                ) -> list[dict[str, Any]]:
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = proc.stdout.readline()
        assert raw, f"worker died: {proc.stderr.read()}"
        msg = json.loads(raw)
        lines.append(msg)
        if key in msg:
            return lines
    raise AssertionError(f"no {key!r} line in {timeout} s: {lines}")


def _slotted(pod: dict[str, Any]) -> bool:
    return names.GPU_GROUP_ANNOTATION in (pod["metadata"].get("annotations") or {})


def test_killing_the_leader_mid_placement_hands_the_gang_to_the_next(kube):
    holder = busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        waiting_gang(kube, admitter)
    kube.remove(holder)  # GPUs free up: the gang fits now

    first = _start(kube.url, "queue-a", "--stall-after", "2")
    second = None
    try:
        lines = _read_until(first, "stalled")
        assert [m["phase"] for m in lines if "phase" in m] == ["slot", "slot"]
        second = _start(kube.url, "queue-b")
        _read_until(second, "started")
        time.sleep(0.5)  # the stalled leader's Lease is still fresh as queue-b sees it
        pods = pods_of(kube, "waiter")
        assert sum(_slotted(p) for p in pods) == 2 and all(gated(p) for p in pods)
        leases = kube.objects("coordination.k8s.io/v1", "Lease")
        assert [ls["spec"]["holderIdentity"] for ls in leases] == ["queue-a"]

        first.kill()  # SIGKILL mid-placement: 2 of 4 slots written, no gate lifted
        first.wait(10)
        assert wait_for(lambda: not any(gated(p) for p in pods_of(kube, "waiter")),
                        timeout=30), "the next leader did not complete the gang"
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)

    pods = pods_of(kube, "waiter")
    assert all(_slotted(p) for p in pods)
    leases = kube.objects("coordination.k8s.io/v1", "Lease")
    assert [ls["spec"]["holderIdentity"] for ls in leases] == ["queue-b"]
    # count every GPU held: busy pods and the gang, each GPU at most once
    held = Counter()
    for p in kube.objects("v1", "Pod"):
        ann = p["metadata"].get("annotations") or {}
        if names.GPU_GROUP_ANNOTATION not in ann:
            continue
        node = p["spec"].get("nodeName") or pinned_node(p)
        for g in gpu_group(p):
            held[(node, g)] += 1
    assert held and max(held.values()) == 1, held
    assert sum(held.values()) == 12  # 8 busy + the gang's 4
    from k8s_double import api_client

    store = KubernetesReservationStore(api_client(kube.url))
    (res,) = store.list()
    assert res.key.name == "waiter" and len(res.assigned) == 4
    assert {(s.node, g) for s in res.slots for g in s.gpus} == {
        (pinned_node(p), g) for p in pods for g in gpu_group(p)}
