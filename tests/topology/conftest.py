"""Shared fixtures for the topology tests: the real `nvidia-smi topo -m` captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputopo.topology.model import Topology
from gputopo.topology.nvidia_smi import parse_nvidia_smi

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
DATA = Path(__file__).resolve().parent / "data"
FIXTURE_FILES = sorted(p.name for p in FIXTURES.iterdir())


def load(name: str) -> Topology:
    """Parse one fixture file by name."""
    path = FIXTURES / name
    return parse_nvidia_smi(path.read_text(), source=str(path))


@pytest.fixture
def dgx1() -> Topology:
    return load("dgx1-v100.txt")


@pytest.fixture
def dgx_a100() -> Topology:
    return load("dgx-a100.txt")


@pytest.fixture
def hopper() -> Topology:
    return load("hopper-nv18.tsv")


@pytest.fixture
def a100_pairs() -> Topology:
    return load("a100-pcie-nvlink-pairs.txt")


@pytest.fixture
def pcie() -> Topology:
    return load("pcie-2socket-phb.txt")
