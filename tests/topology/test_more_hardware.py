"""Hardware beyond the five fixtures: realistic `nvidia-smi topo -m` listings of other machines
(tests/topology/data/*.txt) through parse, the generation heuristic and explain."""

from __future__ import annotations

import pytest

from gputopo.topology.bandwidth import infer_generation, is_all_to_all
from gputopo.topology.commands import explain_with_alternative, render_explanation
from gputopo.topology.cost import LINK_EFFICIENCY, ring_bus_bandwidth
from gputopo.topology.model import Topology
from gputopo.topology.nvidia_smi import parse_nvidia_smi

from .conftest import DATA, load


def data(name: str) -> Topology:
    path = DATA / name
    return parse_nvidia_smi(path.read_text(), source=str(path))


@pytest.mark.parametrize(
    ("name", "gpus", "gen", "all_to_all", "pair_gbps"),
    [
        ("hgx-a100-4gpu.txt", 4, "nvlink3", True, 100.0),  # NV4 x A100's 25 GB/s
        ("dgx2-v100.txt", 16, "nvlink2", True, 154.686),  # NV6 x V100's 25.781
        ("hgx-h100-nics.txt", 8, "nvlink4", True, 478.116),  # NV18, ten NICs, NIC Legend
        ("l40s-pcie.txt", 8, None, False, 0.7 * 15.7),  # NODE, PCIe only
        ("old-driver-soc.txt", 4, None, False, 15.7),  # PIX pairs, SOC between sockets
    ],
)
def test_other_machines(name: str, gpus: int, gen: str | None, all_to_all: bool,
                        pair_gbps: float) -> None:
    topo = data(name)
    assert topo.indices == tuple(range(gpus))
    assert infer_generation(topo) == gen
    assert is_all_to_all(topo) is all_to_all
    assert ring_bus_bandwidth(topo, (0, 1)) == pytest.approx(pair_gbps * LINK_EFFICIENCY)


def test_a100_full_mesh_is_not_taken_for_v100() -> None:
    """HGX A100 4-GPU: NV4 to each of 3 peers is 12 links per GPU, more than a V100 has."""
    topo = data("hgx-a100-4gpu.txt")
    assert topo.bandwidth(0, 3) == pytest.approx(4 * 25.0)
    text = render_explanation(explain_with_alternative(topo, [0, 1, 2]))
    assert "nvlink3, all-to-all" in text.splitlines()[0]
    assert "NVSwitch" not in text  # there is none on this board


def sub(topo: Topology, indices: list[int]) -> Topology:
    pos = [topo.indices.index(i) for i in indices]
    return Topology(
        gpus=tuple(topo.gpus[p] for p in pos),
        links=tuple(tuple(topo.links[a][b] for b in pos) for a in pos),
    )


@pytest.mark.parametrize("count", [2, 3, 4, 8])
def test_listings_cut_from_v100_nodes_stay_nvlink2(count: int) -> None:
    """A filtered listing (a few GPUs of a DGX-2 or DGX-1) keeps the V100 figures."""
    assert infer_generation(sub(data("dgx2-v100.txt"), list(range(count)))) == "nvlink2"
    dgx1 = load("dgx1-v100.txt")
    assert infer_generation(sub(dgx1, list(range(min(count, 8))))) == "nvlink2"
    assert infer_generation(sub(dgx1, [4, 5, 6, 7][: min(count, 4)])) == "nvlink2"


def test_line_endings_and_trailing_blanks_do_not_matter() -> None:
    text = (DATA.parent.parent / "fixtures" / "topologies" / "dgx1-v100.txt").read_text()
    base = parse_nvidia_smi(text)
    assert parse_nvidia_smi(text.replace("\n", "\r\n")) == base
    assert parse_nvidia_smi("\n".join(line + "   " for line in text.splitlines())) == base


@pytest.mark.parametrize(
    ("label", "encode"),
    [
        ("utf-8 with a byte-order mark (Notepad)", lambda t: b"\xef\xbb\xbf" + t.encode()),
        ("utf-16 (Windows PowerShell 5 `>`)", lambda t: t.encode("utf-16")),
        ("utf-16 big-endian with its mark", lambda t: b"\xfe\xff" + t.encode("utf-16-be")),
    ],
)
def test_windows_saved_listings_parse(tmp_path, capsys, label, encode) -> None:
    from gputopo.cli import main

    text = (DATA.parent.parent / "fixtures" / "topologies" / "dgx1-v100.txt").read_text()
    path = tmp_path / "topo.txt"
    path.write_bytes(encode(text.replace("\n", "\r\n")))
    assert main(["topology", "parse", str(path)]) == 0, label
    assert Topology.from_annotation(capsys.readouterr().out) == parse_nvidia_smi(text)


def test_old_drivers_soc_becomes_the_contracts_sys() -> None:
    """The annotation speaks the contract's legend (X, NV#, PIX, PXB, PHB, NODE, SYS)."""
    topo = data("old-driver-soc.txt")
    assert topo.link(0, 2) == "SYS"
    assert "SOC" not in topo.to_json()
