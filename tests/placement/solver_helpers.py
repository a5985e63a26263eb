"""Named topologies and cluster builders for the placement tests (imported by name).

The topologies are the real ``nvidia-smi topo -m`` fixtures read through the project's own
parser, so a test reads like the hardware (``dgx1_v100()``), in the go-gpuallocator style.
"""

from __future__ import annotations

from pathlib import Path

from gputopo.placement.types import NodeState
from gputopo.topology.load import read_topology_file
from gputopo.topology.model import Topology

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
FIXTURE_FILES = {
    "dgx1-v100": "dgx1-v100.txt",
    "dgx-a100": "dgx-a100.txt",
    "a100-pcie-nvlink-pairs": "a100-pcie-nvlink-pairs.txt",
    "hopper-nv18": "hopper-nv18.tsv",
    "pcie-2socket-phb": "pcie-2socket-phb.txt",
}
_CACHE: dict[str, Topology] = {}


def fixture_topology(name: str) -> Topology:
    """One fixture topology, parsed once per test session (Topology is immutable)."""
    if name not in _CACHE:
        _CACHE[name] = read_topology_file(str(FIXTURES / FIXTURE_FILES[name]))
    return _CACHE[name]


def dgx1_v100() -> Topology:
    return fixture_topology("dgx1-v100")


def dgx_a100() -> Topology:
    return fixture_topology("dgx-a100")


def a100_pcie_pairs() -> Topology:
    return fixture_topology("a100-pcie-nvlink-pairs")


def pcie_2socket() -> Topology:
    return fixture_topology("pcie-2socket-phb")


def gb200_tray() -> Topology:
    """One GB200 NVL72 compute tray: 4 GPUs, every pair NV18 of NVLink 5 (named: its
    ``nvidia-smi topo -m`` reads like an H100 board's). Not an nvidia-smi capture, so it
    lives apart from FIXTURE_FILES, as its annotation (tests/fixtures/nvl72)."""
    if "gb200-tray" not in _CACHE:
        _CACHE["gb200-tray"] = read_topology_file(
            str(FIXTURES.parent / "nvl72" / "gb200-tray.json"))
    return _CACHE["gb200-tray"]


def node(
    name: str,
    topology: Topology,
    used: tuple[int, ...] = (),
    *,
    zone: str | None = "zone-a",
    rack: str | None = "rack-1",
    network_gbps: float = 25.0,
    network_transport: str = "tcp",
    nvlink_domain: str | None = None,
) -> NodeState:
    return NodeState(
        name=name,
        topology=topology,
        used=frozenset(used),
        zone=zone,
        rack=rack,
        network_gbps=network_gbps,
        network_transport=network_transport,
        nvlink_domain=nvlink_domain,
    )
