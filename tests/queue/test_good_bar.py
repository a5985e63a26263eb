"""The reserver's bar for a good one-node placement: the policy's ``minShare`` of the gang's
minShare reference (``GangReserver.good_bar``), what admission and the queue solve with.

A 2-GPU gang that one PCIe server holds is measured against the slowest kind's best pair
(a PIX pair), wherever PCIe servers are in the minority or not, so it fills a busy PCIe
server rather than opening an empty DGX-1. It starts at admission exactly when the
bandwidth-first placement would (the bar is the waiting rule's own), and no pack share
means bandwidth first.
"""

from __future__ import annotations

from pathlib import Path

from bench.queue_replay import Cluster
from gputopo.cluster.reservations import GangKey, InMemoryReservationStore
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.nvidia_smi import parse_nvidia_smi
from webhook.placement.reserve import GangReserver, Unplaced

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
DGX1 = parse_nvidia_smi((FIXTURES / "dgx1-v100.txt").read_text(encoding="utf-8"))
PCIE = parse_nvidia_smi((FIXTURES / "pcie-2socket-phb.txt").read_text(encoding="utf-8"))
KEY = GangKey("default", "PyTorchJob", "pair", "uid-pair")


def reserved_on(nodes: list[NodeState], pack_share: float | None) -> tuple[str, set[int]]:
    """Where a 1 x 2-GPU gang is reserved at admission (minShare 0.9)."""
    made = GangReserver(InMemoryReservationStore()).reserve(
        cluster=Cluster(nodes), pod={}, key=KEY, gang=GangRequest(1, 2), good_share=0.9,
        pack_share=pack_share)
    assert not isinstance(made, Unplaced), made.reason
    (name,) = {s.node for s in made[0].slots}
    return name, {g for s in made[0].slots for g in s.gpus}


def test_pcie_typical_a_pair_fills_the_busy_pcie_server():
    nodes = [NodeState(name="dgx", topology=DGX1),
             NodeState(name="pcie-busy", topology=PCIE, used=frozenset({0, 2})),
             NodeState(name="pcie-1", topology=PCIE), NodeState(name="pcie-2", topology=PCIE)]
    name, gpus = reserved_on(nodes, 0.9)
    assert name == "pcie-busy" and gpus in ({4, 5}, {6, 7})
    assert reserved_on(nodes, None)[0] == "dgx"  # bandwidth first


def test_dgx1_typical_a_pair_one_pcie_server_holds_fills_it_too():
    """DGX-1s hold most of the GPUs, but one PCIe server (the slowest kind) holds the pair:
    its bar is of the slowest kind's best pair (module docstring of
    gputopo.placement.waiting), so the PCIe pair is good enough and the DGX-1s stay whole
    (against the typical kind it took a DGX-1 pair)."""
    nodes = [NodeState(name="dgx-a", topology=DGX1), NodeState(name="dgx-b", topology=DGX1),
             NodeState(name="pcie-busy", topology=PCIE, used=frozenset({0, 2}))]
    name, gpus = reserved_on(nodes, 0.9)
    assert name == "pcie-busy" and gpus in ({4, 5}, {6, 7})
    assert reserved_on(nodes, None)[0].startswith("dgx")  # bandwidth first


def test_the_bar_is_min_share_of_the_typical_reference():
    nodes = [NodeState(name="dgx", topology=DGX1), NodeState(name="pcie-1", topology=PCIE),
             NodeState(name="pcie-2", topology=PCIE)]
    reserver = GangReserver(InMemoryReservationStore())
    gang = GangRequest(1, 2)
    typical = reserver.ideal_bandwidth(nodes, gang, reference=True)
    assert reserver.good_bar(nodes, gang, 0.9).good_gbps == round(0.9 * typical, 6)
    # a bar already set is not the reference's: worked out again from the plain gang
    assert reserver.good_bar(nodes, reserver.good_bar(nodes, gang, 0.5), 0.9) == \
        reserver.good_bar(nodes, gang, 0.9)
    assert reserver.good_bar(nodes, GangRequest(1, 1), 0.9).good_gbps is None  # one GPU
