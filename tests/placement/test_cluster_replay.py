"""bench/cluster_replay.py, bench/alibaba_replay.py and the Kueue TAS baseline, run tiny (the
real runs are on demand; figures in docs/benchmarks.md)."""

from __future__ import annotations

import math

import pytest
from solver_helpers import dgx1_v100, dgx_a100, node

from bench import alibaba_replay, cluster_replay
from bench.baselines.rack_pack import place as kueue_tas
from gputopo.placement.types import GangRequest

NODES = ("sn,cpu_milli,memory_mib,gpu,model\n"
         "n-0,96000,786432,8,V100M32\nn-1,128000,786432,8,G3\nn-2,64000,262144,2,T4\n"
         "n-3,32000,131072,8,G2\n")
PODS = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p-0,8000,16384,1,1000,,LS,Running,0,500,0\n"
        "p-1,8000,16384,8,1000,,LS,Running,10,900,10\n"
        "p-2,4000,8192,1,460,,LS,Running,20,300,20\n"  # GPU-sharing: not replayed
        "p-3,30000,16384,4,1000,,LS,Running,30,800,30\n"
        "p-4,8000,16384,2,1000,,LS,Running,40,,40\n"
        "p-5,8000,16384,8,1000,,LS,Running,50,700,50\n"
        "p-6,100000,16384,8,1000,,LS,Running,60,600,60\n")  # more CPU than a V100 node has


def _cluster() -> list:
    return [node(f"n{i}", dgx1_v100() if i % 2 else dgx_a100(), rack=f"r{i // 2}")
            for i in range(4)]


def test_load_is_the_gpu_time_demanded_at_each_jobs_best_efficiency():
    cluster = _cluster()
    ideal = cluster_replay.Ideal(cluster)
    jobs = cluster_replay.job_stream(40, seed=3, ideal=ideal, load=0.7)
    demand = sum(j.gpu_work_s / ideal.efficiency(j) for j in jobs)
    window = jobs[-1].arrival
    assert demand / (window * 32) == pytest.approx(0.7)


def test_the_replay_runs_every_policy_through_one_queue_and_keeps_the_floor():
    cluster = _cluster()
    rows = cluster_replay.run_one(0.9, 2, 40, cluster, list(cluster_replay.POLICIES),
                                  cluster_replay.Ideal(cluster))
    assert [r["policy"] for r in rows] == list(cluster_replay.POLICIES)
    for r in rows:
        assert r["done"] == r["jobs"] == 40
        assert 0 < r["goodput"] <= 1
        assert r["jctP95H"] >= r["jctP50H"] > 0 and not math.isinf(r["t99H"])
    ours = rows[0]
    assert ours["belowFloor"] == 0  # the waiting rule never starts a gang below its floor
    assert "| load | gputopo / baseline |" in cluster_replay.tables(rows)


def test_kueue_tas_packs_the_gang_into_the_fullest_rack_that_holds_it():
    free = [node("a0", dgx1_v100(), rack="ra"), node("a1", dgx1_v100(), rack="ra"),
            node("b0", dgx1_v100(), used=frozenset(range(4)), rack="rb"),
            node("b1", dgx1_v100(), rack="rb")]
    # racks hold 8 (ra) and 6 (rb) two-GPU pods: rb is the lowest count that holds 3;
    # in it, b1 (room for 4) is the first node with the lowest count that holds all 3
    p = kueue_tas(free, GangRequest(3, 2))
    assert [s.node for s in p.slots] == ["b1", "b1", "b1"]
    pairs = [s.gpus for s in p.slots]  # go-gpuallocator's pairs: NVLinked, disjoint
    assert all(dgx1_v100().link(*g).startswith("NV") for g in pairs)
    assert len({g for pair in pairs for g in pair}) == 6
    # 5 pods: rb (6) still the best fit; b1 takes its 4, the last one goes to b0
    five = kueue_tas(free, GangRequest(5, 2))
    assert sorted(s.node for s in five.slots) == ["b0", "b1", "b1", "b1", "b1"]
    # 7 pods: only ra holds them
    assert {s.node for s in kueue_tas(free, GangRequest(7, 2)).slots} == {"a0", "a1"}
    assert not kueue_tas(free, GangRequest(4, 8)).feasible


def test_alibaba_replay_on_a_trace_in_the_published_format(tmp_path, capsys):
    (tmp_path / alibaba_replay.NODES_CSV).write_text(NODES)
    (tmp_path / alibaba_replay.PODS_CSV).write_text(PODS)
    trace = alibaba_replay.load_trace(tmp_path)
    assert [p.name for p in trace.pods] == ["p-0", "p-1", "p-3", "p-4", "p-5", "p-6"]
    assert len(trace.nodes[2].topology.gpus) == 2
    row = alibaba_replay.fill(trace, "gputopo")
    assert row["failed"] >= 1 and row["bestSet"] == 1.0
    timed = alibaba_replay.over_time(trace, "best-fit", 10.0)
    assert timed["neverStarted"] == 0
    # p-6 fits only the G3 node (CPU): its best is that node's, so gputopo starts it there
    # (were the V100 node, which it never fits, its reference, it would wait for ever)
    ours = alibaba_replay.over_time(trace, "gputopo", 10.0)
    assert ours["neverStarted"] == 0 and ours["bestSet"] == 1.0
    assert alibaba_replay.main(["--data", str(tmp_path), "--modes", "fill",
                                "--policies", "gputopo,best-fit"]) == 0
    assert "asked at 1st failed 8-GPU pod" in capsys.readouterr().out


def test_alibaba_replay_without_the_data_says_so_in_one_line(tmp_path, capsys):
    assert alibaba_replay.main(["--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Alibaba trace at" in err[0]


def test_alibaba_replay_multi_mode_swaps_in_the_traces_own_multi_gpu_pods(tmp_path, capsys):
    """The multi mode's mix: the list's length and arrival times are the trace's, the share
    asked of the pods (here all: the tiny trace is 5 of 6 multi-GPU already) asks for 2+
    GPUs, each swapped-in pod is one of the trace's multi-GPU pods (size, CPU, memory,
    models, run time), and the same seed draws the same mix."""
    (tmp_path / alibaba_replay.NODES_CSV).write_text(NODES)
    (tmp_path / alibaba_replay.PODS_CSV).write_text(PODS)
    trace = alibaba_replay.load_trace(tmp_path)
    mix = alibaba_replay.multi_heavy(trace, 1.0, seed=3)
    assert [p.created for p in mix.pods] == [p.created for p in trace.pods]
    assert sum(p.gpus > 1 for p in mix.pods) == len(trace.pods) == 6
    multi = {(p.gpus, p.cpu_milli, p.memory_mib, p.models,
              (p.ends if p.ends is not None else trace.end) - p.created)
             for p in trace.pods if p.gpus > 1}
    for before, after in zip(trace.pods, mix.pods, strict=True):
        if after != before:
            assert before.gpus == 1
            assert (after.gpus, after.cpu_milli, after.memory_mib, after.models,
                    after.ends - after.created) in multi
    assert alibaba_replay.multi_heavy(trace, 1.0, seed=3) == mix
    assert alibaba_replay.main(["--data", str(tmp_path), "--modes", "multi",
                                "--policies", "gputopo,best-fit"]) == 0
    assert "pods that waited" in capsys.readouterr().out
