"""No gang starts below the waiting rule's floor in a replay of a busy job stream through the
product's own GangReserver and serve_pass (bench/queue_replay.py); with the floor opted
down to 0 some do — so the check can fail."""

from __future__ import annotations

from bench.queue_replay import dgx1_cluster, job_stream, replay
from gputopo.placement.waiting import WaitingRule


def _shares(rule: WaitingRule) -> list[float]:
    jobs = job_stream(150, 1, gpus=64, load=0.95)
    out = replay("wait", jobs, dgx1_cluster(8), max_wait=300, rule=rule)
    assert all(o.placed_at >= 0 for o in out.values())  # every job ran in the end
    return [o.share for o in out.values()]


def test_the_default_rule_starts_no_gang_below_its_floor():
    rule = WaitingRule()
    assert min(_shares(rule)) >= rule.floor - 1e-9


def test_a_floor_of_zero_does_start_gangs_far_below_their_best():
    assert min(_shares(WaitingRule(floor_share=0.0))) < 0.1
