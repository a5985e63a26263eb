"""Default per-link bandwidths: what one ``nvidia-smi topo -m`` code is worth in GB/s.

Why a table: most nodes publish only the legend matrix (X, NV#, PIX, PXB, PHB, NODE, SYS),
not measured bandwidths, yet the solver and the cost model need numbers to compare GPU sets.
The figures are per direction, in GB/s (10^9 bytes/s), and are *line rates* from public
sources (each named in docs/topology.md's link bandwidth table).
Real NCCL traffic reaches roughly 75-95% of them; what matters to placement is that the
ratios between link kinds are right. Measured ``bandwidthGBps`` in the node annotation
always wins over this table (see :attr:`gputopo.topology.model.Topology.bandwidth_matrix`).

NVLink: ``NV#`` is a bonded set of # links, so it is worth # x the per-link figure of the
NVLink generation. The generation cannot be read off the legend alone; it is either stated
in the annotation (``"generation"``) or inferred by :func:`infer_generation`.

PCIe and the host: the PCIe generation follows the GPU generation (V100: Gen3, A100: Gen4,
H100 and later: Gen5; unknown: Gen3, the conservative choice). The codes further from the
GPU get rank-preserving discounts of the x16 figure, so that a nearer pair always wins:

=====  ======================================================================
PIX    1.0 x PCIe x16 (at most one PCIe switch between the two GPUs)
PXB    0.9 x (several switches share upstream ports)
PHB    0.8 x (peer-to-peer through the CPU's root complex)
NODE   0.7 x (between root complexes of one NUMA node)
SYS    min(0.5 x PCIe x16, inter-socket link): NCCL does not use peer-to-peer across
       sockets by default, so data is staged in host memory and crosses PCIe twice; the
       QPI/UPI/Infinity-Fabric link caps it (SOC, the legend's old name, means SYS)
=====  ======================================================================

The discounts of PXB/PHB/NODE are ranking assumptions, not measurements: they are written
down here so nobody mistakes them for data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from gputopo.errors import TopologyError


class LinkMatrix(Protocol):
    """What the functions below read of a node: its legend matrix and named generation.

    Why a protocol, not :class:`gputopo.topology.model.Topology`: the model builds its
    bandwidth matrix from this table, so this module must not import the model back (that
    was an import circle, hidden inside functions).
    """

    @property
    def links(self) -> Sequence[Sequence[str]]: ...

    @property
    def generation(self) -> str | None: ...

#: Per-direction GB/s of ONE NVLink, by generation (interconnect.md; nvlink1 is the Tesla
#: P100 whitepaper's 20 GB/s, kept for annotations that name it explicitly).
NVLINK_PER_LINK_GBPS: dict[str, float] = {
    "nvlink1": 20.0,
    "nvlink2": 25.781,  # V100: `nvidia-smi nvlink -s`, 6 links per GPU
    "nvlink3": 25.0,  # A100: 12 links per GPU, 600 GB/s bidirectional in total
    "nvlink4": 26.562,  # H100: 18 links per GPU
    "nvlink5": 53.125,  # GB200: 18 links (NVIDIA/k8s-test-infra #371)
}
#: Used when the legend has NV# but nothing says which generation: the lowest modern figure.
DEFAULT_NVLINK_PER_LINK_GBPS = 25.0

#: PCIe x16 line rate per direction, GB/s (public spec tables).
PCIE_X16_GBPS: dict[int, float] = {3: 15.7, 4: 31.5, 5: 63.0}
#: PCIe generation that comes with each GPU generation; None (no NVLink seen) -> Gen3.
PCIE_GEN_BY_GENERATION: dict[str | None, int] = {
    None: 3,
    "nvlink1": 3,
    "nvlink2": 3,
    "nvlink3": 4,
    "nvlink4": 5,
    "nvlink5": 5,
}
#: Inter-socket link per direction, GB/s: QPI 9.6 GT/s (DGX-1, Broadwell) 19.2 per link;
#: AMD Zen2 (DGX A100) 16 and Sapphire Rapids 22 from NCCL's topology model (topo.h).
INTER_SOCKET_GBPS: dict[str | None, float] = {
    None: 19.2,
    "nvlink1": 19.2,
    "nvlink2": 19.2,
    "nvlink3": 16.0,
    "nvlink4": 22.0,
    "nvlink5": 22.0,
}
#: Fraction of the PCIe x16 figure per host-side legend code (see the module docstring).
PCIE_PATH_FACTOR: dict[str, float] = {"PIX": 1.0, "PXB": 0.9, "PHB": 0.8, "NODE": 0.7}
#: Fraction of PCIe x16 for SYS before the inter-socket cap: staged through host memory.
SYS_PCIE_FACTOR = 0.5

GENERATIONS: tuple[str, ...] = tuple(NVLINK_PER_LINK_GBPS)
_NV = re.compile(r"^NV([1-9][0-9]?)$")


def nvlink_count(code: str) -> int:
    """Number of bonded NVLinks a legend code stands for (0 for anything that is not NV#)."""
    m = _NV.match(code.strip().upper())
    return int(m.group(1)) if m else 0


def link_bandwidth(code: str, generation: str | None) -> float:
    """Per-direction GB/s of one link code of the ``nvidia-smi topo -m`` legend.

    ``generation`` is an NVLink generation name ("nvlink2", ...) or None when unknown.
    ``X`` (a GPU to itself) is 0: there is no link to use. Unknown codes or generations
    raise :class:`TopologyError` rather than guessing a number.
    """
    c = code.strip().upper()
    if generation is not None and generation not in NVLINK_PER_LINK_GBPS:
        raise TopologyError(
            f"unknown NVLink generation {generation!r} (known: {', '.join(GENERATIONS)})"
        )
    if c == "X":
        return 0.0
    links = nvlink_count(c)
    if links:
        per_link = NVLINK_PER_LINK_GBPS[generation] if generation else DEFAULT_NVLINK_PER_LINK_GBPS
        return round(links * per_link, 3)
    pcie = PCIE_X16_GBPS[PCIE_GEN_BY_GENERATION[generation]]
    if c in PCIE_PATH_FACTOR:
        return round(PCIE_PATH_FACTOR[c] * pcie, 3)
    if c in ("SYS", "SOC"):
        return round(min(SYS_PCIE_FACTOR * pcie, INTER_SOCKET_GBPS[generation]), 3)
    raise TopologyError(f"unknown link code {code!r}")


def infer_generation(topology: LinkMatrix) -> str | None:
    """Guess the NVLink generation from the legend matrix alone.

    The heuristic uses the widest bonded NVLink set between any two GPUs, because each
    generation has a fixed number of links per GPU and a set can never be wider:

    - no NV# at all -> None (PCIe-only node; the table then assumes PCIe Gen3);
    - widest set 1..6 -> "nvlink2": V100 has 6 links (DGX-1's hybrid cube-mesh shows NV1 and
      NV2, DGX-2's NVSwitch NV6). P100 (nvlink1, 4 links) looks the same and must be named
      in the annotation. Except when one GPU's direct links add up to more than V100's 6
      with every set narrower than NV6 (a V100 behind NVSwitch shows NV6): then the sum
      decides, 7..12 -> "nvlink3", more -> "nvlink4" (HGX A100 4-GPU: NV4 to each of its 3
      peers, 12 links). Four GPUs with NV6 between every pair stay "nvlink2": an HGX H100
      4-GPU board and four GPUs of a DGX-2 look alike, so the former must be named;
    - 7..12 -> "nvlink3": A100 has 12 links (DGX A100 NVSwitch: every pair NV12; A100 PCIe
      with NVLink bridges: NV12 pairs);
    - 13..18 -> "nvlink4": H100 has 18 links (HGX H100: every pair NV18). GB200 (nvlink5) also
      shows NV18 and must be named in the annotation;
    - wider -> "nvlink5".

    An explicit ``generation`` on the topology wins and is returned unchanged.
    """
    if topology.generation is not None:
        return topology.generation
    widest = max((nvlink_count(c) for row in topology.links for c in row), default=0)
    if widest == 0:
        return None
    if widest <= 6:
        per_gpu = max(sum(nvlink_count(c) for c in row) for row in topology.links)
        if widest < 6 and per_gpu > 6:
            return "nvlink3" if per_gpu <= 12 else "nvlink4"
        return "nvlink2"
    if widest <= 12:
        return "nvlink3"
    if widest <= 18:
        return "nvlink4"
    return "nvlink5"


def is_all_to_all(topology: LinkMatrix) -> bool:
    """True when every pair of distinct GPUs has the same NVLink code (an NVSwitch node).

    On such a node (DGX-2 NV6, DGX A100 NV12, HGX H100 NV18) any subset of GPUs is as good as
    any other of the same size, which NVIDIA's go-gpuallocator does not know.
    """
    codes = {c for a, row in enumerate(topology.links) for b, c in enumerate(row) if a != b}
    if len(codes) != 1:
        return False
    return nvlink_count(codes.pop()) > 0
