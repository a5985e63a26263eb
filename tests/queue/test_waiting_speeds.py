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


def test_the_default_share_is_carried_over_from_the_v100_it_was_measured_on():
    """0.96 on a V100: on GPUs k times faster the compute takes k times less, the all-reduce
    the same; unknown or equal models leave it as it is."""
    from gputopo.placement.throughput import DEFAULT_COMPUTE_SHARE, default_share, share_at

    v100 = MODELS["V100-SXM2-32GB"].training_tflops
    a100 = MODELS["A100-SXM4-80GB"].training_tflops
    assert default_share(v100) == DEFAULT_COMPUTE_SHARE == default_share(None)
    compute = 0.96 * v100 / a100
    assert default_share(a100) == pytest.approx(compute / (compute + 0.04))
    assert default_share(MODELS["H100-SXM5-80GB"].training_tflops) < default_share(a100) < 0.96
    assert share_at(0.5, 100.0, 200.0) == pytest.approx(1 / 3)


def test_a_gangs_typical_reference_on_a_mixed_cluster_is_the_gpudirect_v100_rack():
    """The replay's mixed cluster (H100, A100, V100 on GPUDirect; L40S and T4 on TCP): a
    4 x 8 gang's typical kind (the median GPU's, kinds in the order of its throughput) is
    the DGX-1 V100s. With the V100-measured 0.96 applied at the H100's compute and GPUs
    compared by tensor TFLOPS alone it was the L40S servers on 100 GbE TCP (362 TFLOPS),
    which no A100 placement reached (312), so gangs waited for the four H100 nodes; either
    fix alone (the default carried over, ``training_tflops``) makes it the V100s."""
    from bench.mixed_generations import mixed_cluster
    from gputopo.cluster.reservations import InMemoryReservationStore
    from webhook.placement.reserve import GangReserver

    reserver = GangReserver(InMemoryReservationStore())
    ref = reserver.ideal_speed(mixed_cluster(), GangRequest(4, 8), reference=True)
    assert ref is not None and ref.tflops == MODELS["V100-SXM2-32GB"].training_tflops
    # an A100 placement starts at once against it, a TCP one does not
    a100 = Speed(MODELS["A100-SXM4-80GB"].training_tflops, 94.0)
    l40s = Speed(MODELS["L40S"].training_tflops, 3.1)
    assert starts(a100, ref, 0.9) and not starts(l40s, ref, 0.9)
