"""The waiting rule (gputopo.placement.waiting) decides alike at admission and in the queue.

Admission: a policy's ``minShare`` is the bar a gang's first placement must reach — the
seeds' 4 x 1-GPU gang whose only free GPUs are two per node (~3 % of its best) is gated by
default and starts at once under ``minShare: 0``. The queue: ``serve_pass`` asks for the
share the gang's own rule sets (from its pods' records), never less than the floor.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from queue_kit import NODE_A, NODE_B, busy_cluster, gated, pods_of, wait_for
from test_placement_live import live_admitter
from test_queue_live import _policy_dir

from gputopo import names
from gputopo.placement.waiting import WaitingRule, rule_from_record, share, starts
from webhook.queue.gangs import serve_pass, waiting_gangs


def test_starts_compares_the_share_of_the_best_with_the_bar():
    assert starts(9.0, 10.0, 0.9) and not starts(8.9, 10.0, 0.9)
    assert starts(0.1, 10.0, None)  # a gang that may not wait takes what there is
    assert share(3.0, 0.0) == 1.0 and starts(0.0, 0.0, 1.0)  # one GPU: no all-reduce


@pytest.mark.parametrize(("after", "floor_share", "floor", "overdue_need", "gives_up"), [
    ("takeBest", 0.5, 0.5, 0.5, False),
    ("takeBest", 0.95, 0.9, 0.9, False),  # a floor above minShare is minShare
    ("keepWaiting", 0.5, 0.9, 0.9, False),
    ("deny", 0.5, 0.9, 0.9, True),
])
def test_the_floor_each_after_max_wait_value_states(after, floor_share, floor, overdue_need,
                                                    gives_up):
    rule = WaitingRule(min_share=0.9, after_max_wait=after, floor_share=floor_share)
    assert rule.floor == floor
    assert rule.start_share(overdue=False) == 0.9
    assert rule.start_share(overdue=True) == overdue_need
    assert rule.gives_up(overdue=True) is gives_up and not rule.gives_up(overdue=False)


def _gated_pod(name: str, since: float, **rule: Any) -> dict[str, Any]:
    rec = {"waiting": True, "replica": "worker/0", "since": since, "maxWaitSeconds": 60,
           **rule, "gang": {"namespace": "default", "kind": "MPIJob", "name": name,
                            "uid": name, "replicas": 1, "gpusPerReplica": 2}}
    return {"metadata": {"name": f"{name}-worker-0", "namespace": "default",
                         "annotations": {names.PLACEMENT_ANNOTATION: json.dumps(rec)}},
            "spec": {"schedulingGates": [{"name": names.PLACEMENT_GATE}]}}


def test_records_carry_the_rule_and_a_record_without_it_gets_the_defaults():
    gangs = waiting_gangs([
        _gated_pod("old", 1.0),
        _gated_pod("set", 2.0, minShare=0.7, afterMaxWait="keepWaiting", floorShare=0.2),
        _gated_pod("odd", 3.0, minShare="high", afterMaxWait="sometimes", floorShare=2),
    ])
    assert [g.rule for g in gangs] == [
        WaitingRule(), WaitingRule(0.7, "keepWaiting", 0.2), WaitingRule()]
    assert rule_from_record(None) == WaitingRule()


def test_serve_pass_asks_each_gang_for_its_own_rule_s_share():
    """A recorded best-free share per gang stands in for the cluster: the pass must take
    exactly the gangs whose rule allows that share now, and deny the overdue ``deny`` one."""
    pods = [_gated_pod("a-before", 100.0), _gated_pod("b-take", 10.0),
            _gated_pod("c-keep", 11.0, afterMaxWait="keepWaiting"),
            _gated_pod("d-deny", 12.0, afterMaxWait="deny"),
            _gated_pod("e-good", 101.0, afterMaxWait="deny")]
    best_free = {"a-before": 0.6, "b-take": 0.6, "c-keep": 0.6, "d-deny": 0.6,
                 "e-good": 0.95}
    asked: list[tuple[str, float]] = []

    def place(gang: Any, need: float) -> str | None:
        asked.append((gang.key.name, need))
        return None if starts(best_free[gang.key.name], 1.0, need) else "below the bar"

    denied: list[str] = []
    result = serve_pass(waiting_gangs(pods), now=120.0, starvation_seconds=1e9, place=place,
                        give_up=lambda g, why: denied.append(g.key.name) or True)
    by_name = {str(g.key): g.key.name for g in waiting_gangs(pods)}
    assert [by_name[k] for k in result.placed] == ["e-good"]
    assert [by_name[k] for k in result.fallen_back] == ["b-take"]  # overdue, 0.6 >= 0.5
    assert [by_name[k] for k in result.denied] == ["d-deny"] == denied
    assert sorted(by_name[k] for k in result.waiting) == ["a-before", "c-keep"]
    assert min(need for _, need in asked) == 0.5  # never below the default floor
    assert ("c-keep", 0.5) not in asked and ("d-deny", 0.5) not in asked


def test_admission_gates_below_min_share_and_starts_at_once_under_min_share_zero(
        kube, tmp_path):
    from placement_jobs import mpijob, worker_pod
    from queue_kit import admit_and_create

    busy_cluster(kube)  # free: A:6,7 and B:6,7 — ~3 % of the gang's best
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job = kube.apply(mpijob("strict"))
        pod, warnings = admit_and_create(admitter, kube, worker_pod(job, 0))
        assert gated(pod)
        assert any("it starts at 90% of its best predicted bus bandwidth; after 3600 s "
                   "at 50%" in w for w in warnings), warnings
        assert view.reservations.list() == []
    policies = _policy_dir(tmp_path, minShare=0)
    with live_admitter(kube, policies=policies, can_wait=True) as (admitter, view):
        job = kube.apply(mpijob("eager"))
        for i in range(4):
            admit_and_create(admitter, kube, worker_pod(job, i))
        (res,) = view.reservations.list()
    assert not any(gated(p) for p in pods_of(kube, "eager"))
    assert res.gpus() == {NODE_A: {6, 7}, NODE_B: {6, 7}}
