"""exclude_held copies NodeStates by hand (for speed): every field must survive the copy."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gputopo.cluster.dra import DraDevice
from gputopo.cluster.node_fit import NodeFacts
from gputopo.cluster.node_resources import NodeResources
from gputopo.placement.types import NodeState
from gputopo.topology.gpus import GpuIdentity, gpu_model
from gputopo.topology.load import read_topology_file
from webhook.placement.fitting import exclude_held

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "topologies" / "dgx1-v100.txt"


def test_every_nodestate_field_survives_exclude_held() -> None:
    topo = read_topology_file(str(FIXTURE))
    facts = NodeFacts.of({"metadata": {"name": "n0", "labels": {"pool": "a"}}})
    node = NodeState(name="n0", topology=topo, used=frozenset({0}), zone="z", rack="r",
                     network_gbps=100.0, network_transport="rdma", facts=facts,
                     host_ports=frozenset({("TCP", 23456)}), network_efficiency=0.5,
                     transport_share=0.9, nvlink_domain="clique-1",
                     resources=NodeResources({"cpu": 94000}, {"cpu": 1000}), gpu_cap=4,
                     gpu_model=gpu_model("Tesla-V100-SXM2-16GB"),
                     gpu_ids=(GpuIdentity(0, "GPU-0", "0000:06:00.0"),), gpu_handout="dra",
                     dra_devices={0: DraDevice("gpu.nvidia.com", "n0", "gpu-3", "GPU-0")})
    # every field set to something other than its default, so a dropped one shows
    for f in dataclasses.fields(NodeState):
        if f.default is not dataclasses.MISSING:
            assert getattr(node, f.name) != f.default, f"set {f.name} in this test"
    [out] = exclude_held([node], {"n0": {2}})
    for f in dataclasses.fields(NodeState):
        want = node.used | {2} if f.name == "used" else getattr(node, f.name)
        assert getattr(out, f.name) == want, f.name
    assert out.facts is facts


def test_the_memo_reuses_only_what_did_not_change() -> None:
    topo = read_topology_file(str(FIXTURE))
    a, b = NodeState(name="a", topology=topo), NodeState(name="b", topology=topo)
    memo: dict = {}
    first = exclude_held([a, b], {"a": {1}}, memo)
    assert first[1] is b and first[0].used == {1}
    again = exclude_held([a, b], {"a": {1}}, memo)
    assert again[0] is first[0]  # unchanged: the same copy
    more = exclude_held([a, b], {"a": {1, 2}}, memo)
    assert more[0].used == {1, 2}  # the reservation grew: a new copy
    bound = NodeState(name="a", topology=topo, used=frozenset({5}))  # a pod bound on a
    moved = exclude_held([bound, b], {"a": {1, 2}}, memo)
    assert moved[0].used == {1, 2, 5}
    assert exclude_held([bound, b], {}, memo) == [bound, b] and memo == {}
