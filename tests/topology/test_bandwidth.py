"""The link bandwidth table and the NVLink generation heuristic."""

from __future__ import annotations

import pytest

from gputopo.errors import TopologyError
from gputopo.topology.bandwidth import (
    GENERATIONS,
    NVLINK_PER_LINK_GBPS,
    infer_generation,
    is_all_to_all,
    link_bandwidth,
)
from gputopo.topology.model import Topology

from .conftest import load

HOST_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")


@pytest.mark.parametrize("gen", [None, *GENERATIONS])
def test_nvlink_scales_with_bonded_links_and_beats_pcie(gen: str | None) -> None:
    one = link_bandwidth("NV1", gen)
    assert link_bandwidth("NV4", gen) == pytest.approx(4 * one)
    assert link_bandwidth("NV18", gen) == pytest.approx(18 * one)
    assert one > 0
    assert link_bandwidth("NV4", gen) > link_bandwidth("PIX", gen)


@pytest.mark.parametrize("gen", [None, *GENERATIONS])
def test_host_side_codes_are_strictly_ordered(gen: str | None) -> None:
    values = [link_bandwidth(c, gen) for c in HOST_ORDER]
    assert values == sorted(values, reverse=True)
    assert len(set(values)) == len(values)
    assert link_bandwidth("SOC", gen) == link_bandwidth("SYS", gen)
    assert link_bandwidth("X", gen) == 0.0


def test_newer_generations_have_faster_pcie() -> None:
    assert link_bandwidth("PIX", "nvlink2") < link_bandwidth("PIX", "nvlink3")
    assert link_bandwidth("PIX", "nvlink3") < link_bandwidth("PIX", "nvlink4")


def test_v100_figure_comes_from_the_table() -> None:
    assert link_bandwidth("NV2", "nvlink2") == pytest.approx(2 * NVLINK_PER_LINK_GBPS["nvlink2"])


@pytest.mark.parametrize(("code", "gen"), [("NVX", None), ("QPI", "nvlink2"), ("NV1", "nvlink9")])
def test_unknown_code_or_generation_is_an_error(code: str, gen: str | None) -> None:
    with pytest.raises(TopologyError):
        link_bandwidth(code, gen)


@pytest.mark.parametrize(
    ("name", "gen", "all_to_all"),
    [
        ("dgx1-v100.txt", "nvlink2", False),
        ("dgx-a100.txt", "nvlink3", True),
        ("a100-pcie-nvlink-pairs.txt", "nvlink3", False),
        ("hopper-nv18.tsv", "nvlink4", True),
        ("pcie-2socket-phb.txt", None, False),
    ],
)
def test_generation_and_nvswitch_on_fixtures(name: str, gen: str | None, all_to_all: bool) -> None:
    topo = load(name)
    assert infer_generation(topo) == gen
    assert is_all_to_all(topo) is all_to_all


def test_explicit_generation_wins(dgx1: Topology) -> None:
    named = Topology.from_annotation({**dgx1.to_annotation(), "generation": "nvlink1"})
    assert infer_generation(named) == "nvlink1"
    assert named.bandwidth(0, 3) == pytest.approx(2 * NVLINK_PER_LINK_GBPS["nvlink1"])
    assert named.bandwidth(0, 3) < dgx1.bandwidth(0, 3)


def test_measured_bandwidth_wins_over_the_table(dgx1: Topology) -> None:
    n = len(dgx1.gpus)
    measured = [[0.0 if a == b else 10.0 for b in range(n)] for a in range(n)]
    measured[0][3] = measured[3][0] = 0.0  # zero means "not measured": the table fills it in
    topo = Topology.from_annotation({**dgx1.to_annotation(), "bandwidthGBps": measured})
    assert topo.bandwidth(0, 1) == 10.0
    assert topo.bandwidth(0, 3) == dgx1.bandwidth(0, 3)
