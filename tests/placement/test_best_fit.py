"""Small pods pack like best-fit: when the GPU-quality and blocks terms tie, a pod goes to
the most allocated node that fits (the objective's ``fit`` term), not the first by name.

Issue 22 measured the old rule on the Alibaba trace: "given nodes with 7 and 1 free GPUs it
takes the 7" (the first by name), stranding GPUs a whole 8-GPU job could have used. Each
case names the nodes so that the node best-fit must NOT take sorts first.
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
    # each node's best share alone: every term but fit ties (its GPU breaks no block)
    alone = [solve([n], gang).details["score"] for n in nodes]
    assert [{k: v for k, v in sc.items() if k != "freeGpusLeft"} for sc in alone] == [
        {k: v for k, v in alone[1].items() if k != "freeGpusLeft"}] * 2
    assert [sc["freeGpusLeft"] for sc in alone] == [6, 0]
    placement = solve(nodes, gang)
    assert [s.node for s in placement.slots] == ["b-one-free"]
    assert placement.details["score"]["freeGpusLeft"] == 0


def test_a_two_gpu_pod_takes_the_fullest_node_that_fits_it():
    nodes = [_node("a", "dgx-a100", 7), _node("b", "dgx-a100", 1),  # b cannot hold it
             _node("c", "dgx-a100", 3), _node("d", "dgx-a100", 2)]
    placement = solve(nodes, GangRequest(1, 2))
    assert [s.node for s in placement.slots] == ["d"]


def test_best_fit_never_overrides_keeping_a_block_whole():
    """The fit term comes last: on DGX-1 V100 nodes, one with a whole NVLink quad free
    (GPUs 4-7) and a loose GPU elsewhere is still preferred to breaking the 4-free node's
    quad, however full the other is."""
    topo = fixture_topology("dgx1-v100")
    quad_only = NodeState(name="a-quad", topology=topo, used=frozenset(range(4)),
                          zone="z1", rack="r1", network_gbps=100.0)
    quad_and_loose = NodeState(name="b-quad-plus-one", topology=topo,
                               used=frozenset({0, 1, 2}), zone="z1", rack="r1",
                               network_gbps=100.0)
    placement = solve([quad_only, quad_and_loose], GangRequest(1, 1))
    (slot,) = placement.slots
    assert (slot.node, slot.gpus) == ("b-quad-plus-one", (3,))  # the loose GPU, not a quad


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
