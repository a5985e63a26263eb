"""The nvidia-smi topo -m parser on every real fixture, corrupt inputs, and a round trip."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputopo.errors import TopologyError
from gputopo.topology.nvidia_smi import parse_nvidia_smi, render_nvidia_smi

from .conftest import FIXTURE_FILES, FIXTURES, load
from .strategies import topologies


def _gpu_rows(name: str) -> dict[int, list[str]]:
    """Independent reading of a fixture: GPU rows split on whitespace, first 8 link cells."""
    rows = {}
    for line in (FIXTURES / name).read_text().splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]) and cells[1] != "GPU1":
            rows[int(cells[0][3:])] = cells[1:9]
    return rows


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_every_fixture_parses_to_its_gpu_matrix(name: str) -> None:
    topo = load(name)
    rows = _gpu_rows(name)
    assert topo.indices == tuple(sorted(rows))
    for i, cells in rows.items():
        for j, code in enumerate(cells):
            assert topo.link(i, j) == code


def test_nic_rows_and_columns_are_not_gpus() -> None:
    topo = load("dgx1-v100.txt")  # has an mlx5_0 column and a shorter mlx5_0 row
    assert len(topo.gpus) == 8
    topo = load("dgx-a100.txt")  # 11 mlx5 columns
    assert len(topo.gpus) == 8


def test_numa_affinity_column() -> None:
    assert [g.numa for g in load("pcie-2socket-phb.txt").gpus] == [0] * 4 + [1] * 4
    # hopper-nv18.tsv has an empty field between NUMA Affinity and GPU NUMA ID
    assert [g.numa for g in load("hopper-nv18.tsv").gpus] == [0] * 4 + [1] * 4
    # no NUMA column at all
    assert all(g.numa is None for g in load("dgx1-v100.txt").gpus)
    # "0-7" is a range: unknown, while a single number is kept
    numas = [g.numa for g in load("dgx-a100.txt").gpus]
    assert numas[2] == 1 and numas[0] is None


def test_legend_block_and_ansi_codes_are_ignored() -> None:
    text = (FIXTURES / "pcie-2socket-phb.txt").read_text()
    decorated = "\x1b[4m" + text.replace("GPU0", "\x1b[1mGPU0\x1b[0m", 1)
    decorated += "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set\n"
    decorated += "\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    assert parse_nvidia_smi(decorated) == load("pcie-2socket-phb.txt")


GOOD = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-11\nGPU1\tNV2\t X \t0-11\n"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (GOOD.replace("NV2\t0", "NVX\t0", 1), 2, "not a link code"),
        (GOOD.replace("GPU1\tNV2\t X ", "GPU1\tPIX\t X "), 3, "but"),
        (GOOD.replace("\tNV2\t0-11\n", "\n", 1), 2, "link cells"),
        (GOOD.replace("GPU1\tNV2", "GPU7\tNV2"), 3, "not a device"),
        (GOOD + "GPU1\tNV2\t X \t0-11\n", 4, None),
        (GOOD.replace(" X \tNV2\t0", "PIX\tNV2\t0", 1), 2, "itself"),
    ],
)
def test_corrupt_text_names_the_line(text: str, line: int, words: str | None) -> None:
    with pytest.raises(TopologyError) as err:
        parse_nvidia_smi(text, source="bad.txt")
    assert err.value.file == "bad.txt"
    if words != "link cells":
        assert err.value.obj == f"line {line}"
    if words:
        assert words in err.value.reason


def test_duplicate_row_and_missing_row_are_errors() -> None:
    with pytest.raises(TopologyError, match="twice"):
        parse_nvidia_smi(GOOD + "GPU1\tNV2\t X \t0-11\n")
    with pytest.raises(TopologyError, match="no row for GPU1"):
        parse_nvidia_smi("\tGPU0\tGPU1\nGPU0\t X \tNV2\n")


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "GPU0 X\n"])
def test_text_without_a_matrix_is_refused(text: str) -> None:
    with pytest.raises(TopologyError, match="header"):
        parse_nvidia_smi(text, source="empty.txt")


@given(topo=topologies(), tabs=st.booleans())
def test_render_then_parse_round_trips(topo, tabs: bool) -> None:
    assert parse_nvidia_smi(render_nvidia_smi(topo, tabs=tabs)) == topo
