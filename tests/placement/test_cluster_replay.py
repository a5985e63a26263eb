"""bench/cluster_replay.py, bench/alibaba_replay.py and the Kueue TAS baselines, run tiny
(the real runs are on demand; figures in docs/benchmarks.md)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from solver_helpers import dgx1_v100, dgx_a100, node

from bench import alibaba_replay, cluster_replay
from bench.baselines.admin import admin_configured
from bench.baselines.best_fit import place as best_fit
from bench.baselines.common import rated
from bench.baselines.rack_pack import place as kueue_tas
from bench.cluster_replay import KueueQueue, KueueSetup, flavors_by_kind, node_kind
from bench.placement import mixed_cluster
from bench.replay_world import World
from gputopo.cluster.reservations import GangKey
from gputopo.placement.types import GangRequest, ReplicaSlot

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


def test_the_replay_runs_every_policy_and_charges_waiting():
    cluster = mixed_cluster({"dgx1": 2, "a100": 2, "pcie": 2}, rack_size=2, racks_per_zone=2)
    rows = cluster_replay.run_one(0.9, 2, 40, cluster, list(cluster_replay.KNOWN),
                                  cluster_replay.Ideal(cluster))
    assert [r["policy"] for r in rows] == list(cluster_replay.KNOWN)
    for r in rows:
        assert r["notRun"] == 0 and r["jobs"] == 40
        assert 0 < r["goodputHeld"] <= 1
        # the cluster's goodput: work done in the window / all its GPU-time there
        assert 0 < r["clusterGoodput"] < 1
        assert r["jctP95H"] >= r["jctP50H"] > 0 and not math.isinf(r["makespanH"])
        assert r["makespanH"] * 3600 >= max(0.0, r["jctP95H"])
    ours = rows[0]
    assert ours["belowFloor"] == 0  # the waiting rule never starts a gang below its floor
    text = cluster_replay.tables(rows)
    assert "| load | gputopo / baseline | cluster goodput |" in text
    assert "is the lowest or within 5 % of it" in text


def test_the_script_prints_the_main_table_and_the_sensitivity_rows(capsys):
    assert cluster_replay.main(["--jobs", "30", "--seeds", "1", "--loads", "0.7",
                                "--policies", "gputopo,kueue-admin,kueue-tas",
                                "--sensitivity-policies", "gputopo,kueue-admin",
                                "--worlds", "error 0.3,tcp 0.8"]) == 0
    out = capsys.readouterr().out
    assert "| 0.7 | kueue-admin |" in out and "| 0.7 | kueue-tas |" in out
    assert "| tcp 0.8 | 0.7 |" in out and "| error 0.3 | 0.7 |" in out


def test_unknown_policy_or_world_is_refused_in_one_line(capsys):
    for args in (["--policies", "gputopo,slurm"], ["--worlds", "mars"]):
        with pytest.raises(SystemExit) as e:
            cluster_replay.main(args)
        assert e.value.code == 2
        assert "unknown" in capsys.readouterr().err.splitlines()[-1]


def _kinds() -> list:
    return mixed_cluster({"dgx1": 2, "pcie": 2}, rack_size=2, racks_per_zone=1)


def _kueue(cluster, order=("pcie", "dgx1")) -> KueueQueue:
    return KueueQueue(cluster, KueueSetup(flavors_by_kind(cluster, order, node_kind)))


def _key(i: int) -> GangKey:
    return GangKey("t", "PyTorchJob", f"j{i}", f"u{i}")


def test_admin_kueue_flavors_in_order_one_host_for_one_node_jobs_gdr_for_gangs():
    cluster = _kinds()
    q = _kueue(cluster)
    # a one-node job: the first flavor (PCIe) whose quota and topology hold it, one host
    s = q.arrive(_key(1), GangRequest(4, 1), 0.0)
    assert {x.node for x in s.reservation.slots} == {"pcie-0000"}
    # a 16-GPU gang: only the GPUDirect flavor, though the PCIe servers have room
    s = q.arrive(_key(2), GangRequest(2, 8), 0.0)
    assert {x.node for x in s.reservation.slots} == {"dgx1-0000", "dgx1-0001"}
    # 6 GPUs one pod per GPU: pcie-0000 has 4 left, so the other PCIe host takes all six
    # (required hostname), never 4 + 2
    s = q.arrive(_key(3), GangRequest(6, 1), 0.0)
    assert {x.node for x in s.reservation.slots} == {"pcie-0001"}
    # 6 more: no PCIe host has 6 free, the DGX-1s are full: it waits (not split up)
    assert q.arrive(_key(4), GangRequest(6, 1), 0.0) is None
    # BestEffortFIFO: a 2-GPU job behind it is admitted; the 6-GPU one when room frees
    assert q.arrive(_key(5), GangRequest(1, 2), 0.0) is not None
    assert q.serve(1.0) == []
    q.release(_key(2))
    (s,) = q.serve(2.0)
    assert s.key == _key(4) and len({x.node for x in s.reservation.slots}) == 1
    assert s.reservation.slots[0].node.startswith("dgx1")


def test_admin_scheduler_baseline_keeps_a_jobs_pods_on_one_host_and_gangs_on_gdr():
    cluster = _kinds()
    place = admin_configured(best_fit)
    used = [replace(n, used=frozenset(range(5))) if n.name == "pcie-0000" else n
            for n in cluster]
    # best-fit alone starts on the fullest node (3 free) and spreads the job over two
    assert len({s.node for s in best_fit(used, GangRequest(4, 1)).slots}) == 2
    p = place(used, GangRequest(4, 1))
    assert len({s.node for s in p.slots}) == 1 and p.slots[0].node != "pcie-0000"
    # best-fit alone puts a 16-GPU gang on the TCP servers too (its pods fit any node)
    assert {s.node for s in place(used, GangRequest(2, 8)).slots} == {"dgx1-0000",
                                                                      "dgx1-0001"}


def test_the_worlds_bandwidth_is_the_cost_models_unless_the_world_differs():
    cluster = _kinds()
    by_name = {n.name: n for n in cluster}
    for slots in ([ReplicaSlot(0, "pcie-0000", (0, 1, 2, 3))],
                  [ReplicaSlot(0, "pcie-0000", (0, 1)), ReplicaSlot(1, "pcie-0001", (0, 1))],
                  [ReplicaSlot(0, "dgx1-0000", (0,)), ReplicaSlot(1, "pcie-0001", (0,))],
                  [ReplicaSlot(0, "dgx1-0000", tuple(range(8))),
                   ReplicaSlot(1, "dgx1-0001", tuple(range(8)))]):
        gang = GangRequest(len(slots), len(slots[0].gpus))
        model = rated(cluster, gang, slots).bus_bandwidth_gbps
        assert World().bandwidth(by_name, slots) == pytest.approx(model)
    # two GB200 trays of one NVLink domain: the fabric's rate, not the network's
    from bench.nvl72_latency import tray
    trays = [tray(0, 0, frozenset()), tray(0, 1, frozenset())]
    slots = [ReplicaSlot(0, trays[0].name, (0, 1, 2, 3)), ReplicaSlot(1, trays[1].name,
                                                                   (0, 1, 2, 3))]
    assert World().bandwidth({n.name: n for n in trays}, slots) == pytest.approx(
        rated(trays, GangRequest(2, 4), slots).bus_bandwidth_gbps)
    tcp = [ReplicaSlot(0, "pcie-0000", (0, 1)), ReplicaSlot(1, "pcie-0001", (0, 1))]
    assert World(tcp_share=0.8).bandwidth(by_name, tcp) > World().bandwidth(by_name, tcp)
    # the per-job error is seeded: the same job, the same factor; sigma 0 none
    w = World(error_sigma=0.3)
    assert w.error(3, 7) == w.error(3, 7) != w.error(3, 8)
    assert World().error(3, 7) == 1.0


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


def test_mixed_generations_nodes_carry_gfd_labels_and_compute_is_charged_per_model(capsys):
    from bench import mixed_generations as mg

    cluster = mg.mixed_cluster()
    models = {n.name.split("-")[0]: n.gpu_model.name for n in cluster}
    assert models == {"h100": "H100-SXM5-80GB", "a100": "A100-SXM4-80GB",
                      "v100": "V100-SXM2-32GB", "l40s": "L40S", "t4": "T4"}
    assert all(n.facts.labels["nvidia.com/gpu.product"] for n in cluster)
    h100, t4 = (next(n for n in cluster if n.name.startswith(k)) for k in ("h100", "t4"))
    # a compute-bound job gains more from an H100 than a memory-bound one; the reference 1
    assert mg.speed(h100.gpu_model, 1.0) > mg.speed(h100.gpu_model, 0.2) > 1 > mg.speed(
        t4.gpu_model, 0.2)
    assert mg.speed(mg.REFERENCE, 0.7) == pytest.approx(1.0)
    # the clock: the same one-GPU job runs longer on a T4 than on an H100
    ideal = cluster_replay.Ideal(cluster)
    job = next(j for j in cluster_replay.job_stream(20, 1, ideal=ideal, load=0.5)
               if j.gang.total_gpus == 1)
    clock = mg.clock_for(1, 0.5, cluster_replay.step_s)
    assert clock(job, 0.0, [t4], 1.0)[1] > clock(job, 0.0, [h100], 1.0)[1]
    assert cluster_replay.main(["--cluster", "mixed-generations", "--jobs", "40", "--seeds",
                                "2", "--loads", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "## Mixed-generation replay" in out
    for p in mg.POLICIES:
        assert f"| 0.7 | {p} |" in out


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
    # a row per seed and policy, and the waits by pod size
    assert alibaba_replay.main(["--data", str(tmp_path), "--modes", "multi", "--seeds",
                                "1-2", "--policies", "gputopo,best-fit"]) == 0
    out = capsys.readouterr().out
    assert "waited (1 / 2 / 4 / 8 GPUs)" in out
    for row in ("| 1 | gputopo |", "| 1 | best-fit |", "| 2 | gputopo |", "| 2 | best-fit |"):
        assert row in out
    with pytest.raises(SystemExit) as bad:
        alibaba_replay.main(["--data", str(tmp_path), "--modes", "multi", "--seeds", "1-x"])
    assert bad.value.code == 2 and "--seeds '1-x'" in capsys.readouterr().err
