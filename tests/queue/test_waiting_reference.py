"""The waiting rule's references: the gang placed well on the typical kind of node it may use
(minShare's: the kind of the median GPU) and on the slowest (the floor's after maxWait).

A heterogeneous cluster on the API test double: the demo's two DGX-1 nodes (NVLink quads
0-3 and 4-7) and a DGX A100 (NVSwitch) beside them, all on the same network. A 4 x 1-GPU
MPIJob on a free DGX-1 quad gets all a DGX-1 can give it, so it starts at once (admission)
or as soon as the quad frees up (the queue) while the A100 is busy — measured against the
A100 (about three times the quad's bus bandwidth) it waited below even the floor. A gang
whose only free placement is scattered (two GPUs on each DGX-1; or an A100 pair and a
DGX-1 pair) still waits: scatter is what the rule is for. (With two DGX-1s and one A100
the typical kind is the DGX-1, the slowest too.)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from placement_checks import gpu_group, pinned_node, record
from placement_jobs import mpijob, worker_pod
from queue_kit import (
    NODE_A,
    NODE_B,
    admit_and_create,
    busy_pod,
    gated,
    pods_of,
    wait_for,
    waiting_gang,
)
from test_placement_live import demo_docs, live_admitter

from bench.queue_replay import Cluster
from gputopo import names
from gputopo.cluster.demo import demo_snapshot
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState
from gputopo.placement.waiting import node_kinds, reference_bandwidth, reference_nodes
from gputopo.topology.nvidia_smi import parse_nvidia_smi
from webhook.queue.placer import PlacementQueue

NODE_X = "cn-shanghai.192.168.16.180"  # the DGX A100
NODE_Y = "cn-shanghai.192.168.16.181"  # a second one
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"


def _a100_topology():
    return parse_nvidia_smi((FIXTURES / "dgx-a100.txt").read_text(encoding="utf-8"))


def _a100_node(demo: list[dict[str, Any]]) -> dict[str, Any]:
    """A DGX A100 Node: the demo node A's object (labels, network, allocatable) with
    another name and the A100's wiring."""
    node = copy.deepcopy(next(d for d in demo if d["kind"] == "Node"))
    node["metadata"]["name"] = NODE_X
    node["metadata"]["labels"]["kubernetes.io/hostname"] = NODE_X
    node["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION] = _a100_topology().to_json()
    return node


def _cluster(kube: Any, view: Any, busy: dict[str, str]) -> None:
    """The A100 node joins the demo nodes (applied before the view started: it waits for
    them); ``busy``: node -> GPUs held by a running pod."""
    kube.apply(_a100_node(demo_docs(kube)))
    for i, (node, gpus) in enumerate(busy.items()):
        kube.apply(busy_pod(f"busy-{i}", node, gpus))
    held = sum(len(g.split(",")) for g in busy.values())
    assert wait_for(lambda: len(view.node_states()) == 3
                    and sum(len(n.used) for n in view.node_states()) == held)


def test_the_a100_gives_about_three_times_a_dgx1_quad():
    """The premise of this file: against the A100 the quad is below the 0.5 floor."""
    demo = {n.name: n for n in _nodes_of_demo()}
    quad = solve([demo[NODE_A]], GangRequest(4, 1)).bus_bandwidth_gbps
    a100 = solve([NodeState(name=NODE_X, topology=_a100_topology())],
                 GangRequest(4, 1)).bus_bandwidth_gbps
    assert quad / a100 < 0.5


def _nodes_of_demo() -> list[NodeState]:
    return demo_snapshot().node_states()


def test_a_gang_starts_at_admission_on_a_free_dgx1_quad_while_the_a100_is_busy(kube):
    demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        _cluster(kube, view, {NODE_X: "0,1,2,3,4,5,6,7", NODE_A: "4,5,6,7",
                              NODE_B: "0,1,2,3,4,5,6,7"})
        job = kube.apply(mpijob("quad"))
        pods = [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in range(4)]
    assert not any(gated(p) for p in pods)
    assert {pinned_node(p) for p in pods} == {NODE_A}
    assert sorted(g for p in pods for g in gpu_group(p)) == [0, 1, 2, 3]


def test_a_waiting_gang_takes_the_freed_quad_while_the_a100_stays_busy(kube):
    """Scattered (two GPUs on each DGX-1) it waits; the queue places it on the quad as soon
    as that frees up, without waiting for the A100."""
    demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        _cluster(kube, view, {NODE_X: "0,1,2,3,4,5,6,7", NODE_A: "4,5",
                              NODE_B: "0,1,2,3,4,5"})
        holder = kube.apply(busy_pod("holder", NODE_A, "0,1,2,3"))
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 20)
        _, admitted = waiting_gang(kube, admitter)  # asserts each pod was told it waits
        assert all(gated(p) for p in admitted)
        assert "a good placement gives" in record(admitted[0])["reason"]
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        assert queue.run_once().placed == []  # still only 2 + 2 free: it keeps waiting
        kube.remove(holder)
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 16)
        assert len(queue.run_once().placed) == 1
    pods = pods_of(kube, "waiter")
    assert not any(gated(p) for p in pods)
    assert {pinned_node(p) for p in pods} == {NODE_A}
    assert sorted(g for p in pods for g in gpu_group(p)) == [0, 1, 2, 3]
    assert all("fallback" not in record(p)["queue"] for p in pods)  # at minShare


def test_a_gang_split_between_an_a100_and_a_dgx1_waits(kube):
    """Scattered over an A100 pair and a DGX-1 pair over the network: below a DGX-1 quad (the
    slower kind's best), so it waits."""
    demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        _cluster(kube, view, {NODE_X: "0,1,2,3,4,5", NODE_A: "0,1,2,3,4,5",
                              NODE_B: "0,1,2,3,4,5,6,7"})
        _, admitted = waiting_gang(kube, admitter)
    assert all(gated(p) for p in admitted)
    rec = record(admitted[0])
    assert rec["waiting"] is True and "(2 node(s))" in rec["reason"]


def test_a_node_s_kind_is_its_wiring_and_network_not_its_place():
    dgx1 = {n.name: n for n in _nodes_of_demo()}
    a, b = dgx1[NODE_A], dgx1[NODE_B]
    far = NodeState(name="far", topology=a.topology, zone="elsewhere", rack="r9",
                    network_gbps=a.network_gbps, network_transport=a.network_transport)
    fast = NodeState(name="fast", topology=a.topology, network_gbps=100,
                     network_transport="gdr")  # same GPUs, another network: another kind
    x = NodeState(name=NODE_X, topology=_a100_topology(), network_gbps=a.network_gbps,
                  network_transport=a.network_transport)
    nodes = [a, b, far, fast, x]

    def names_of(used: list[str]) -> list[str]:
        kinds = node_kinds(n for n in nodes if n.name in used)
        return [n.name for n in reference_nodes(nodes, kinds)]

    assert names_of([NODE_A]) == [NODE_A, NODE_B, "far"]
    assert names_of(["fast"]) == ["fast"]
    assert names_of([NODE_B, NODE_X]) == [NODE_A, NODE_B, "far", NODE_X]
    assert names_of(["gone"]) == [n.name for n in nodes]  # nothing to narrow by


def test_the_typical_kind_is_the_kind_of_the_median_gpu_by_the_gang_s_speed():
    """Kinds in rising order of the gang's best on each, weighed by their GPUs: the one at
    which half of the GPUs is reached (at exactly half, the slower); kinds that cannot
    hold the gang count for nothing; none: the best on all of them together."""
    bests = {frozenset({"a100"}): 200.0, frozenset({"dgx1"}): 80.0,
             frozenset({"pcie"}): 10.0, frozenset({"a100", "dgx1", "pcie"}): 200.0}
    kinds = ["a100", "dgx1", "pcie"]
    ref = reference_bandwidth
    assert ref(kinds, bests.__getitem__, {"a100": 64, "dgx1": 96, "pcie": 96}) == 80.0
    assert ref(kinds, bests.__getitem__, {"a100": 64, "dgx1": 16, "pcie": 96}) == 10.0
    assert ref(kinds, bests.__getitem__, {"a100": 64, "dgx1": 32, "pcie": 32}) == 80.0
    assert ref(kinds, bests.__getitem__, {"a100": 200, "dgx1": 8, "pcie": 8}) == 200.0
    assert ref(kinds, bests.__getitem__, None) == 10.0  # the slowest kind's
    bests[frozenset({"pcie"})] = 0.0  # too small for the gang: its GPUs do not count
    assert ref(kinds, bests.__getitem__, {"a100": 64, "dgx1": 32, "pcie": 900}) == 200.0


def test_a_placement_over_two_kinds_is_measured_against_its_slower_kind():
    """The least of the bests on each kind alone that holds the gang; the best on all of
    them together only when none does."""
    bests = {frozenset({"a100"}): 200.0, frozenset({"dgx1"}): 80.0,
             frozenset({"pcie"}): 0.0, frozenset({"a100", "dgx1"}): 200.0,
             frozenset({"a100", "pcie"}): 150.0, frozenset({"pcie", "dgx1"}): 90.0}
    assert reference_bandwidth(["a100", "dgx1"], bests.__getitem__) == 80.0
    assert reference_bandwidth(["a100", "pcie"], bests.__getitem__) == 200.0  # pcie: 0
    assert reference_bandwidth(["dgx1"], bests.__getitem__) == 80.0
    assert reference_bandwidth([], lambda ks: 7.0 if ks == frozenset() else 0.0) == 7.0


def test_a_two_node_gang_over_an_a100_and_a_dgx1_starts_at_the_dgx1_s_pace(kube):
    """Two A100 nodes on 800 Gbit/s GPUDirect (one busy), the DGX-1s on 25 Gbit/s TCP (one
    busy): a 2 x 8-GPU gang's only placement is one A100 and one DGX-1, over TCP, as fast
    as two DGX-1s — it starts; against two A100s on their fast network (the best on both
    kinds together) it would wait."""
    demo = demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        for name in (NODE_X, NODE_Y):
            node = _a100_node(demo)
            node["metadata"]["name"] = node["metadata"]["labels"][
                "kubernetes.io/hostname"] = name
            node["metadata"]["annotations"].update({
                names.NETWORK_GBPS_ANNOTATION: "800",
                names.NETWORK_TRANSPORT_ANNOTATION: "gdr"})
            kube.apply(node)
        kube.apply(busy_pod("busy-y", NODE_Y, "0,1,2,3,4,5,6,7"))
        kube.apply(busy_pod("busy-b", NODE_B, "0,1,2,3,4,5,6,7"))
        assert wait_for(lambda: len(view.node_states()) == 4
                        and sum(len(n.used) for n in view.node_states()) == 16)
        job = kube.apply(mpijob("wide", workers=2, gpus=8))
        pods = [admit_and_create(admitter, kube, worker_pod(job, i))[0] for i in range(2)]
    assert not any(gated(p) for p in pods), [record(p) for p in pods]
    assert {pinned_node(p) for p in pods} == {NODE_A, NODE_X}


def test_the_reason_names_the_reference_a_dgx1_quad(kube):
    demo_docs(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        _cluster(kube, view, {NODE_X: "0,1,2,3,4,5,6,7", NODE_A: "0,1,2,3,4,5",
                              NODE_B: "0,1,2,3,4,5"})
        _, admitted = waiting_gang(kube, admitter)
    reason = record(admitted[0])["reason"]
    quad = solve([next(n for n in _nodes_of_demo() if n.name == NODE_A)],
                 GangRequest(4, 1)).bus_bandwidth_gbps
    assert f"a good placement gives {quad:.1f} GB/s" in reason


def test_the_reference_does_not_depend_on_the_placement_so_a_faster_one_is_never_refused():
    """A gang's reference is one figure for the cluster it may use (the least of its bests
    on each kind alone), whatever placement is asked about: were it the best of the
    placement's own kinds, a 2 x 8 gang would turn down two DGX-1s in different racks
    (short of two in one rack) and later start on two PCIe servers over TCP, slower, at
    "share 1" of theirs. With one reference, a faster placement starts wherever a slower
    one would (and, since the reference no longer asks for a rack, they start at once)."""
    from gputopo.cluster.reservations import InMemoryReservationStore
    from webhook.placement.reserve import GangReserver

    dgx1 = parse_nvidia_smi((FIXTURES / "dgx1-v100.txt").read_text(encoding="utf-8"))
    pcie = parse_nvidia_smi((FIXTURES / "pcie-2socket-phb.txt").read_text(encoding="utf-8"))
    nodes = [NodeState(name="dgx-a", topology=dgx1, rack="r1", zone="z", network_gbps=100,
                       network_transport="gdr"),
             NodeState(name="dgx-b", topology=dgx1, rack="r2", zone="z", network_gbps=100,
                       network_transport="gdr"),
             NodeState(name="dgx-c", topology=dgx1, rack="r1", zone="z", network_gbps=100,
                       network_transport="gdr"),
             NodeState(name="pcie-1", topology=pcie, rack="r3", zone="z"),
             NodeState(name="pcie-2", topology=pcie, rack="r3", zone="z")]
    gang = GangRequest(2, 8)
    reserver = GangReserver(InMemoryReservationStore())
    dgx_best = solve([n for n in nodes if n.name.startswith("dgx")], gang).bus_bandwidth_gbps
    pcie_best = solve([n for n in nodes if n.name.startswith("pcie")], gang).bus_bandwidth_gbps
    across = solve([nodes[0], nodes[1]], gang).bus_bandwidth_gbps  # two racks, one zone
    assert pcie_best < across < 0.9 * dgx_best
    # minShare's reference: the typical kind (24 of the 40 GPUs are DGX-1s) as whole nodes
    # of one zone, not a rack to itself: two DGX-1s across racks
    assert reserver.ideal_bandwidth(nodes, gang, reference=True) == across
    # the floor's: the slowest kind off TCP sockets (the PCIe servers are on TCP)
    assert reserver.ideal_bandwidth(nodes, gang, reference=True, typical=False) == across
    # so two DGX-1s across racks start at once, one rack too; the PCIe pair over TCP
    # (~13 % of them) never, not even at the floor
    for placement in (solve([nodes[0], nodes[1]], gang), solve(nodes[:3], gang)):
        assert reserver.not_good(placement, nodes, gang, 0.9) is None
    pcie_pair = solve(nodes[3:], gang)
    assert reserver.not_good(pcie_pair, nodes, gang, 0.9) is not None
    assert reserver.not_good(pcie_pair, nodes, gang, 0.5, typical=False) is not None


def _dgx1_busy_pcie_free() -> Cluster:
    """Three DGX-1s on 100 Gbit/s GPUDirect (24 of the 40 GPUs: the typical kind), all
    busy; two PCIe servers on 25 GbE TCP (the slowest kind), free."""
    dgx1 = parse_nvidia_smi((FIXTURES / "dgx1-v100.txt").read_text(encoding="utf-8"))
    pcie = parse_nvidia_smi((FIXTURES / "pcie-2socket-phb.txt").read_text(encoding="utf-8"))
    busy = frozenset(range(8))
    return Cluster([*(NodeState(name=f"dgx-{i}", topology=dgx1, used=busy, network_gbps=100,
                                network_transport="gdr") for i in range(3)),
                    *(NodeState(name=f"pcie-{i}", topology=pcie, network_gbps=25,
                                network_transport="tcp") for i in range(2))])


def _queue_until_placed(nodes: Cluster, gang: GangRequest) -> tuple[object, list[list[str]],
                                                                   list[float]]:
    """Admission (minShare), then queue passes at 600 s and at ``maxWaitSeconds`` (3600 s);
    what admission answered, where the queue placed the gang, and at which passes."""
    from gputopo.cluster.reservations import GangKey, InMemoryReservationStore
    from gputopo.placement.waiting import WaitingRule, against_typical
    from webhook.placement.reserve import GangReserver, Unplaced
    from webhook.queue.gangs import WaitingGang, serve_pass

    rule = WaitingRule()
    reserver = GangReserver(InMemoryReservationStore())
    key = GangKey("default", "PyTorchJob", "job", "uid-job")
    made = reserver.reserve(cluster=nodes, pod={}, key=key, gang=gang,
                            good_share=rule.start_share(overdue=False),
                            pack_share=rule.min_share)
    placed: list[list[str]] = []
    when: list[float] = []
    if not isinstance(made, Unplaced):
        return made, placed, when
    waiting = [WaitingGang(key, gang, since=0.0, max_wait_seconds=3600.0, rule=rule)]
    for now in (600.0, 3600.0):
        def place(g: WaitingGang, need: float) -> str | None:
            got = reserver.reserve(cluster=nodes, pod={}, key=g.key, gang=g.request,
                                   good_share=need, typical=against_typical(g.rule, need),
                                   pack_share=g.rule.min_share)
            if isinstance(got, Unplaced):
                return got.reason
            placed.append(sorted({s.node for s in got[0].slots}))
            when.append(now)  # noqa: B023 - called within this pass only
            return None

        done = serve_pass(waiting, now=now, starvation_seconds=1e9, place=place,
                          give_up=lambda g, why: False)
        waiting = [g for g in waiting if str(g.key) not in {*done.placed, *done.fallen_back}]
    return made, placed, when


def test_a_gang_one_pcie_server_holds_starts_on_it_at_once():
    """A 1 x 4-GPU gang on a PCIe server's socket gets all a PCIe server can give it and its
    all-reduce never leaves the node: measured against the slowest kind (one node of it
    holds the gang), it starts at admission, though an eighth of a DGX-1 quad. (Against
    the typical kind, as before, it waited an hour for a DGX-1 quad.)"""
    from webhook.placement.reserve import Unplaced

    made, _, _ = _queue_until_placed(_dgx1_busy_pcie_free(), GangRequest(1, 4))
    assert not isinstance(made, Unplaced), made.reason
    assert {s.node for s in made[0].slots} <= {"pcie-0", "pcie-1"}


def test_a_gang_over_pcie_servers_waits_for_gpudirect_nodes_even_after_max_wait():
    """A 2 x 8-GPU gang no PCIe server holds alone would cross their 25 GbE TCP: share 1 of
    the slowest kind, but a fraction of two DGX-1s on GPUDirect (the typical kind), so it
    waits for them — a gang that starts on hardware far below most of the cluster's holds
    its GPUs for long. After ``maxWaitSeconds`` it still waits: the floor of a gang that
    spans nodes is measured against the slowest kind off TCP sockets, the DGX-1s (the
    cluster replay's fallback started such gangs over TCP at 7-21 % of their speed,
    docs/benchmarks.md)."""
    from webhook.placement.reserve import Unplaced

    nodes = _dgx1_busy_pcie_free()
    made, placed, when = _queue_until_placed(nodes, GangRequest(2, 8))
    assert isinstance(made, Unplaced)
    dgx1 = [NodeState(name=f"idle-{i}", topology=n.topology, network_gbps=100,
                      network_transport="gdr") for i, n in enumerate(nodes.nodes[:2])]
    pair = solve(dgx1, GangRequest(2, 8)).bus_bandwidth_gbps
    assert f"a good placement gives {pair:.1f} GB/s" in made.reason
    assert placed == [] and when == []


def test_the_slowest_kind_is_minshare_s_reference_for_a_gang_one_node_of_it_holds():
    """Pure cases of :func:`reference_bandwidth` with the gang: the slowest kind's best for
    a gang one node of that kind holds (its GPUs are enough, its replicas may share a
    node); the typical kind's for one that would span nodes of it. The floor's: the
    slowest kind's, for a gang that spans nodes on GPUs of one model the slowest kind off
    TCP sockets."""
    from gputopo.placement.waiting import NodeKind, one_node_holds
    from gputopo.topology.model import Topology

    dgx1 = parse_nvidia_smi((FIXTURES / "dgx1-v100.txt").read_text(encoding="utf-8"))
    pcie = parse_nvidia_smi((FIXTURES / "pcie-2socket-phb.txt").read_text(encoding="utf-8"))
    four = Topology.from_annotation({
        "version": 1, "gpus": [{"index": i, "numa": 0} for i in range(4)],
        "links": [["X" if i == j else "PHB" for j in range(4)] for i in range(4)]})
    slow, typical = NodeKind(pcie, 25.0, "tcp", False), NodeKind(dgx1, 100.0, "gdr", False)
    small = NodeKind(four, 25.0, "tcp", False)
    bests = {frozenset({slow}): 10.0, frozenset({small}): 10.0, frozenset({typical}): 80.0}
    gpus = {slow: 16, small: 16, typical: 24}
    ref = reference_bandwidth
    assert ref([slow, typical], bests.__getitem__, gpus, GangRequest(1, 4)) == 10.0
    assert ref([slow, typical], bests.__getitem__, gpus, GangRequest(8, 1)) == 10.0
    assert ref([slow, typical], bests.__getitem__, gpus, GangRequest(2, 8)) == 80.0
    capped = GangRequest(4, 1, max_replicas_per_node=2)  # never all on one node
    assert ref([slow, typical], bests.__getitem__, gpus, capped) == 80.0
    assert ref([small, typical], bests.__getitem__, gpus, GangRequest(8, 1)) == 80.0
    assert ref([slow, typical], bests.__getitem__, gpus) == 80.0  # no gang: the typical
    # the floor: the slowest kind's, for a gang that spans nodes the slowest off TCP
    assert ref([slow, typical], bests.__getitem__, None, GangRequest(1, 4)) == 10.0
    assert ref([slow, typical], bests.__getitem__, None, GangRequest(2, 8)) == 80.0
    assert ref([slow, small], bests.__getitem__, None, GangRequest(2, 8)) == 10.0  # all TCP
    # GPU models that differ: the rule compares speeds, the floor stays the slowest kind's
    l40s, v100 = slow._replace(gpu_model=("L40S", 362.0)), typical._replace(
        gpu_model=("V100", 125.0))
    bests.update({frozenset({l40s}): 10.0, frozenset({v100}): 80.0})
    assert ref([l40s, v100], bests.__getitem__, None, GangRequest(2, 8)) == 10.0
    assert one_node_holds(slow, GangRequest(1, 8)) and not one_node_holds("pcie",
                                                                          GangRequest(1, 2))
