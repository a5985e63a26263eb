"""Small pods pack like best-fit: a one-GPU pod goes to the most allocated node that fits
(the objective's ``solo_fit`` term, ahead of the blocks term), and a larger pod does when
the GPU-quality and blocks terms tie (``fit``), not the first node by name.

Issue 22 measured the old rules on the Alibaba trace: "given nodes with 7 and 1 free GPUs it
takes the 7" (the first by name), and later, with blocks ahead of fit, a one-GPU pod took a
loose GPU on an emptier node rather than break a 2-GPU pair on a nearly full one; both
left more nodes partly used than best-fit. Each case names the nodes so that the node
best-fit must NOT take sorts first.
"""

from __future__ import annotations

import json

import pytest
from solver_helpers import fixture_topology

from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState


def _node(name: str, topology: str, free: int) -> NodeState:
    topo = fixture_topology(topology)
    used = frozenset(topo.indices[: len(topo.indices) - free])
    return NodeState(name=name, topology=topo, used=used, zone="z1", rack="r1",
                     network_gbps=100.0)


@pytest.mark.parametrize("topology", ["dgx-a100", "dgx1-v100", "hopper-nv18",
                                      "pcie-2socket-phb"])
def test_a_one_gpu_pod_takes_the_node_with_one_free_gpu_not_the_seven(topology):
    nodes = [_node("a-seven-free", topology, 7), _node("b-one-free", topology, 1)]
    gang = GangRequest(1, 1)
    # each node's best share alone: every term but the two fits ties (no block broken)
    fits = ("freeGpusLeft", "soloFreeGpusLeft")
    alone = [solve([n], gang).details["score"] for n in nodes]
    assert [{k: v for k, v in sc.items() if k not in fits} for sc in alone] == [
        {k: v for k, v in alone[1].items() if k not in fits}] * 2
    assert [sc["freeGpusLeft"] for sc in alone] == [6, 0]
    assert [sc["soloFreeGpusLeft"] for sc in alone] == [6, 0]
    placement = solve(nodes, gang)
    assert [s.node for s in placement.slots] == ["b-one-free"]
    assert placement.details["score"]["freeGpusLeft"] == 0


def test_a_two_gpu_pod_takes_the_fullest_node_that_fits_it():
    nodes = [_node("a", "dgx-a100", 7), _node("b", "dgx-a100", 1),  # b cannot hold it
             _node("c", "dgx-a100", 3), _node("d", "dgx-a100", 2)]
    placement = solve(nodes, GangRequest(1, 2))
    assert [s.node for s in placement.slots] == ["d"]


@pytest.mark.parametrize("topology", ["pcie-2socket-phb", "dgx-a100"])
def test_a_one_gpu_pod_breaks_a_pair_on_the_fuller_node_rather_than_open_an_emptier_one(
        topology):
    """The Alibaba case: 2 free GPUs forming an intact pair (a PCIe PIX pair, two NVSwitch
    GPUs) on one node, 3 free (a pair and a loose GPU) on another. Blocks first took the
    loose GPU of the 3 (no block broken) and left both nodes partly used; best-fit takes
    one of the 2, and the next one-GPU pod fills that node."""
    nodes = [_node("a-three-free", topology, 3), _node("b-two-free", topology, 2)]
    placement = solve(nodes, GangRequest(1, 1))
    assert [s.node for s in placement.slots] == ["b-two-free"]
    assert placement.details["score"]["soloFreeGpusLeft"] == 1
    assert placement.details["score"]["blocksDelta"]["2"] == -1


def test_on_the_node_best_fit_chose_the_one_gpu_pod_takes_the_loose_gpu():
    """solo_fit picks the node, the blocks term still picks the GPU on it: a DGX-1 V100
    with GPUs 0-2 in use keeps its NVLink quad (4-7) whole and gives GPU 3, and so does a
    cluster where that node is the fullest."""
    topo = fixture_topology("dgx1-v100")
    quad_and_loose = NodeState(name="b-quad-plus-one", topology=topo,
                               used=frozenset({0, 1, 2}), zone="z1", rack="r1",
                               network_gbps=100.0)
    emptier = NodeState(name="a-empty", topology=topo, zone="z1", rack="r1",
                        network_gbps=100.0)
    for nodes in ([quad_and_loose], [emptier, quad_and_loose]):
        (slot,) = solve(nodes, GangRequest(1, 1)).slots
        assert (slot.node, slot.gpus) == ("b-quad-plus-one", (3,))  # the loose GPU


def test_gputopo_place_shows_the_best_fit_choice(tmp_path, capsys):
    """Through the command line, from a cluster file: the same answer."""
    from gputopo.cli import main
    from gputopo.cluster.demo import demo_cluster_path
    from gputopo.yamlio import dump_documents, load_documents

    docs = load_documents(demo_cluster_path())
    nodes = sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Node")
    busy = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"busy-{i}", "namespace": "default",
                          "annotations": {"topology.kubernetes.io/gpu-group": gpus}},
             "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
             "status": {"phase": "Running"}}
            for i, (node, gpus) in enumerate([(nodes[0], "0"),  # first by name: 7 free
                                              (nodes[1], "0,1,2,3,4,5,6")])]  # 1 free
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents([*docs, *busy]))
    capsys.readouterr()
    code = main(["place", "--cluster", str(path), "--replicas", "1", "--gpus-per-replica",
                 "1", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["feasible"]
    assert out["placements"] == [{"replica": 0, "node": nodes[1], "gpus": [7]}]
