"""The plugin's pure choices on the fixture topologies: NVML faked from a fixture gives that
fixture back; the fallback is the solver's best set; the env is consistent."""

from __future__ import annotations

from itertools import combinations

import pytest
from plugin_kit import FixtureNvml, fixture_topology

from gputopo.deviceplugin.choice import best_set, container_env, preferred_within
from gputopo.topology.explanation import explain
from gputopo.topology.nvml import topology_from_nvml

FIXTURE_NAMES = ["dgx1-v100.txt", "dgx-a100.txt", "a100-pcie-nvlink-pairs.txt",
                 "pcie-2socket-phb.txt"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fake_nvml_gives_the_fixture_back(name: str) -> None:
    fixture = fixture_topology(name)
    seen = topology_from_nvml(FixtureNvml(fixture))
    assert seen.indices == fixture.indices
    # NVLink counts and the PCIe/socket levels NVML can tell apart agree cell by cell
    assert seen.links == fixture.links


def _bus(topology, gpus) -> float:
    return float(explain(topology, list(gpus))["busBandwidthGBps"])


@pytest.mark.parametrize("name", ["dgx1-v100.txt", "a100-pcie-nvlink-pairs.txt"])
@pytest.mark.parametrize("size", [2, 4])
def test_best_set_is_as_good_as_any_subset(name: str, size: int) -> None:
    """Exhaustive on 8 GPUs: no subset of the available ones has a higher bus bandwidth."""
    topo = topology_from_nvml(FixtureNvml(fixture_topology(name)))
    available = [i for i in topo.indices if i != 1]  # one GPU already in use
    chosen = best_set(topo, available, size)
    assert len(chosen) == size and set(chosen) <= set(available)
    best = max(_bus(topo, c) for c in combinations(available, size))
    assert _bus(topo, chosen) == pytest.approx(best)


def test_must_include_is_kept() -> None:
    topo = fixture_topology("dgx1-v100.txt")
    chosen = best_set(topo, range(8), 2, must=[6])
    assert 6 in chosen and len(chosen) == 2
    assert topo.link(*chosen).startswith("NV")


def test_preferred_within_takes_the_placement_then_the_gang_then_anything() -> None:
    topo = fixture_topology("dgx1-v100.txt")
    assert preferred_within(topo, (2,), {0, 1, 2, 3}, range(8), 1) == (2,)
    # its GPU is gone: one of the gang's, not a stranger's
    assert preferred_within(topo, (2,), {0, 2}, [0, 4, 5, 6, 7], 1) == (0,)
    # nothing of the gang left: the solver over everything available
    assert preferred_within(topo, (2,), {2}, [4, 5, 6, 7], 1) == best_set(topo, [4, 5, 6, 7], 1)


def test_env_positions_follow_the_visible_order() -> None:
    assert container_env(visible=[7, 6, 5, 4], own=[6, 7]) == {
        "NVIDIA_VISIBLE_DEVICES": "4,5,6,7", "CUDA_VISIBLE_DEVICES": "2,3"}
    assert container_env(visible=[0, 1], own=[5]) == {
        "NVIDIA_VISIBLE_DEVICES": "0,1,5", "CUDA_VISIBLE_DEVICES": "2"}
