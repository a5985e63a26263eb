"""The waiting rule with GPU models: references are speeds (slowest GPU's TFLOPS, bus
bandwidth), kinds are ordered by the gang's predicted throughput on them, and the share a
placement is judged by is the worst case over compute shares unless the job states its own
(gputopo.placement.throughput).

On one GPU model (or none known) every figure is the bandwidth's, as before: the same
reference, the same decision.
"""

from __future__ import annotations

import pytest

from gputopo.placement.throughput import Speed, judged_share, throughput_share, worst_share
from gputopo.placement.types import GangRequest
from gputopo.placement.waiting import reference_bandwidth, reference_speed, starts
from gputopo.topology.gpus import MODELS

A100, V100, T4 = 312.0, 125.0, 65.0


def test_on_one_model_the_share_is_the_bandwidth_share():
    for tflops in (None, V100):
        got, ref = Speed(tflops, 40.0), Speed(tflops, 80.0)
        assert worst_share(got, ref) == 40.0 / 80.0
        assert starts(got, ref, 0.5) and not starts(got, ref, 0.6)
        assert starts(got, ref, 0.5) == starts(40.0, 80.0, 0.5)


def test_slower_gpus_are_never_judged_better_than_their_compute():
    ref = Speed(A100, 100.0)
    assert worst_share(Speed(V100, 200.0), ref) == pytest.approx(V100 / A100)
    assert worst_share(Speed(V100, 20.0), ref) == 0.2
    # a stated compute share: the job's own throughput share
    c = 0.2
    expected = 1 / (c * A100 / V100 + (1 - c) * 100.0 / 200.0)
    assert judged_share(Speed(V100, 200.0), ref, c) == pytest.approx(expected)
    assert judged_share(Speed(V100, 200.0), ref, None) < judged_share(
        Speed(V100, 200.0), ref, c)
    # one GPU: no all-reduce, the compute ratio
    assert throughput_share(Speed(V100, 0.0), Speed(A100, 0.0), 0.5) == pytest.approx(
        V100 / A100)
    # an unknown model beside known ones is rated as the slowest of the table (what a T4
    # trains at: speeds are training TFLOPS, gputopo.topology.gpus)
    assert worst_share(Speed(None, 100.0), ref) == pytest.approx(
        MODELS["T4"].training_tflops / A100)


def test_the_typical_kind_is_ordered_by_speed_not_bandwidth():
    """A T4 box wired better than a V100 one still ranks below it: the median GPU's kind
    is found in the order of the share the rule compares."""
    bests = {frozenset({"a100"}): Speed(A100, 200.0), frozenset({"v100"}): Speed(V100, 40.0),
             frozenset({"t4"}): Speed(T4, 60.0)}
    kinds = ["a100", "v100", "t4"]
    gpus = {"a100": 8, "v100": 16, "t4": 16}
    gang = GangRequest(2, 8)
    assert reference_speed(kinds, bests.__getitem__, gpus, gang) == Speed(V100, 40.0)
    assert reference_speed(kinds, bests.__getitem__, None, gang) == Speed(T4, 60.0)
    # a job bound by its communication (compute share 0) ranks the better-wired T4 box
    # above the V100s
    talky = GangRequest(2, 8, compute_share=0.0)
    assert reference_speed(kinds, bests.__getitem__, gpus, talky) == Speed(T4, 60.0)
    assert reference_speed(kinds, bests.__getitem__, None, talky) == Speed(V100, 40.0)
    # without models the same bests are bandwidths: the T4 box (60) is above the V100s (40)
    plain = {k: v.gbps for k, v in bests.items()}
    assert reference_bandwidth(kinds, plain.__getitem__, gpus, gang) == 60.0
