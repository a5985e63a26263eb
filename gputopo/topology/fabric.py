"""NVLink beyond one node: a GPU's NVLink fabric bandwidth and the generation of a GPU model.

Why a module of its own: on GB200/GB300 NVL72 racks the best-connected GPU set is no longer
one node. 18 compute trays of 4 GPUs reach each other through NVLink switch trays, so two
GPUs of different trays of one *NVLink domain* talk at the GPU's full NVLink bandwidth
(NVLink 5: 18 links x 53.125 GB/s per direction), not over the NIC. NCCL uses it when the
GPUs' fabric cluster UUID and clique id match (MNNVL, ``src/mnnvl.cc``). The cost model
(:mod:`gputopo.topology.cost`) reads :func:`fabric_gbps` for gangs inside one domain.

The second half: GPU Feature Discovery publishes the GPU model (``nvidia.com/gpu.product``)
and an ``nvidia-smi topo -m`` of a B200 node reads NV18 between every pair like an H100's;
:func:`generation_of_product` gives the generation the legend cannot.
"""

from __future__ import annotations

import re
from functools import lru_cache

from gputopo.topology.bandwidth import NVLINK_PER_LINK_GBPS, infer_generation
from gputopo.topology.model import Topology

#: NVLinks per GPU by generation (P100 4, V100 6, A100 12, H100/H200 18, B200/GB200 18):
#: on a switched fabric every one of them leads to the switches.
NVLINKS_PER_GPU: dict[str, int] = {
    "nvlink1": 4,
    "nvlink2": 6,
    "nvlink3": 12,
    "nvlink4": 18,
    "nvlink5": 18,
}

#: GPU model words (as GFD writes them, upper-cased, split on "-" and " ") -> generation.
#: First match wins, most specific first ("GB200" before "B200", "GH200" before "H200").
_PRODUCTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), g)
    for p, g in (
        (r"^GB[23]00", "nvlink5"),
        (r"^B[123]00[A-Z]?$", "nvlink5"),
        (r"^GH200", "nvlink4"),
        (r"^H(100|200|800|20)$", "nvlink4"),
        (r"^A(100|800)$", "nvlink3"),
        (r"^V100[A-Z]?$", "nvlink2"),
        (r"^P100$", "nvlink1"),
    )
)


def generation_of_product(product: str | None) -> str | None:
    """The NVLink generation of a GPU model name as GFD labels it, None when unknown.

    ``"NVIDIA-GB200"`` and ``"NVIDIA-B200"`` -> nvlink5, ``"NVIDIA-H100-80GB-HBM3"`` ->
    nvlink4, ``"NVIDIA-A100-SXM4-80GB"`` -> nvlink3, ``"Tesla-V100-SXM2-16GB"`` -> nvlink2.
    GFD appends ``-SHARED`` (time-slicing) or a MIG suffix; the model word is still found.
    """
    if not isinstance(product, str):
        return None
    for word in re.split(r"[-_ ]+", product.strip().upper()):
        for pattern, generation in _PRODUCTS:
            if pattern.match(word):
                return generation
    return None


@lru_cache(maxsize=1024)
def fabric_gbps(topology: Topology) -> float:
    """Per-direction line rate (GB/s) one GPU of this node has into a multi-node NVLink
    fabric: its NVLinks x the generation's per-link figure (GB200: 18 x 53.125 = 956.25).

    A node whose generation is neither named nor readable from its legend (a one-GPU node
    without ``generation``) gets its best link figure: never more than what it shows.
    """
    generation = infer_generation(topology)
    if generation is not None:
        return round(NVLINKS_PER_GPU[generation] * NVLINK_PER_LINK_GBPS[generation], 3)
    return max((x for row in topology.bandwidth_matrix for x in row), default=0.0)
