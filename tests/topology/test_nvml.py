"""The NVML adapter fed with recorded answers (no GPU here)."""

from __future__ import annotations

import json

import pytest

from gputopo.errors import TopologyError
from gputopo.topology.model import Topology
from gputopo.topology.nvml import RecordedNvml, record, topology_from_nvml

from .conftest import DATA


def test_recorded_dgx1_matches_its_nvidia_smi_matrix(dgx1: Topology) -> None:
    source = RecordedNvml.from_json((DATA / "dgx1-v100-nvml.json").read_text())
    topo = topology_from_nvml(source)
    assert topo.indices == dgx1.indices
    for i in topo.indices:
        for j in topo.indices:
            # NVLink cells and the SYS cells must agree; same-socket PCIe-only pairs do not
            # exist on a DGX-1 (every same-socket pair has NVLink)
            assert topo.link(i, j) == dgx1.link(i, j)
    assert topo.generation == "nvlink2"
    assert [g.numa for g in topo.gpus] == [0] * 4 + [1] * 4


def test_record_then_replay_is_identity() -> None:
    source = RecordedNvml.from_json((DATA / "dgx1-v100-nvml.json").read_text())
    again = RecordedNvml(json.loads(json.dumps(record(source))))
    assert topology_from_nvml(again) == topology_from_nvml(source)


def _nvswitch_reply(n: int = 8, links: int = 12) -> dict:
    """An HGX A100-like reply: every GPU's links end on NVSwitches, not on GPUs."""
    devices = [
        {
            "busId": f"0000:{0x10 + i:02x}:00.0",
            "numa": i // 4,
            "arch": 7,
            "nvlinkRemotes": [f"0000:{0xC0 + s % 6:02x}:00.0" for s in range(links)],
        }
        for i in range(n)
    ]
    ancestor = [
        [0 if i == j else (40 if i // 4 == j // 4 else 50) for j in range(n)] for i in range(n)
    ]
    return {"devices": devices, "commonAncestor": ancestor}


def test_nvswitch_links_become_all_to_all_nv12(dgx_a100: Topology) -> None:
    topo = topology_from_nvml(RecordedNvml(_nvswitch_reply()))
    assert topo.links == dgx_a100.links
    assert topo.generation == "nvlink3"


def test_pcie_only_node_uses_common_ancestor_levels() -> None:
    reply = _nvswitch_reply(n=4, links=0)
    reply["commonAncestor"] = [[0, 10, 30, 50], [10, 0, 30, 50], [30, 30, 0, 50], [50, 50, 50, 0]]
    topo = topology_from_nvml(RecordedNvml(reply))
    assert topo.links[0] == ("X", "PIX", "PHB", "SYS")


@pytest.mark.parametrize("text", ["{", "{}", json.dumps({"devices": [], "commonAncestor": []})])
def test_bad_recordings_are_topology_errors(text: str) -> None:
    with pytest.raises(TopologyError):
        topology_from_nvml(RecordedNvml.from_json(text))
