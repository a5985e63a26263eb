"""What a GPU *is*: its model (compute, memory, memory bandwidth) and its identity on a node.

Why a module of its own, beside the wiring (:mod:`gputopo.topology.model`): placement judged
by wiring alone sends an 8-GPU job to a T4 server while a DGX A100 stands idle, because
both hold 8 GPUs and the T4 box's PCIe ring was "good enough". Dense FP16/BF16 tensor
throughput differs by over 30x across the GPUs one cluster holds (T4 65 TFLOPS, B200 2,250),
so the cost model needs each node's GPU model, and a job that needs 40 GB per GPU needs its
memory. The solver reads a :class:`GpuModel` off :class:`~gputopo.placement.types.NodeState`
(``gpu_model``); the cluster view fills it from the node's labels
(:func:`gputopo.cluster.gpu_facts.gpu_model_of`).

Data sheets give a GPU's dense tensor TFLOPS, but a training step is not all matrix
products: the normalizations and element-wise operators between them are bound by the
memory bandwidth. So GPU models are compared by :attr:`GpuModel.training_tflops`, a blend of
the two measured on a V100 (:data:`TENSOR_SHARE`): by tensor TFLOPS alone an L40S (362)
ranked above an A100 (312), though with less than half its memory bandwidth it trains
slower.

Identity is separate from the model and from the wiring: a :class:`GpuIdentity` ties a
driver index to the GPU's ``uuid`` and PCI bus id as NVML reports them, which is what a
Dynamic Resource Allocation device names (NVIDIA's DRA driver: attribute ``uuid``,
``resource.kubernetes.io/pciBusID``). Identities are per node, so they never enter the
:class:`~gputopo.topology.model.Topology` value that 1,000 nodes of one model share.

The table :data:`MODELS` lists the generations users run, each row with its public source
(the vendor's data sheet; where that was not found, the row's ``source`` says what its
figures rest on: China export variants, GH200, A30). TFLOPS are *dense* (no structured
sparsity) FP16/BF16 tensor figures for the SXM/board form named (Pascal's P100 has no
tensor cores: its FP16 peak); memory bandwidth in GB/s (10^9 bytes/s); memory in
MiB as GPU Feature Discovery labels it (``nvidia.com/gpu.memory``: NVML's total, which is
a little under the marketing GB on most boards; the table keeps the marketing size x 1024).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: The share of a training step's time in tensor-core matrix products on a V100: Ivanov
#: et al., "Data Movement Is All You Need: A Case Study on Optimizing Transformers", MLSys
#: 2021, Table 1 (BERT-large encoder layer, PyTorch, V100: tensor contractions 99.8 % of
#: the flop and 61 % of the run time; statistical normalizations and element-wise
#: operators, memory-bound, the other 39 %). What :attr:`GpuModel.training_tflops` rates
#: GPU models by.
TENSOR_SHARE = 0.61
#: The GPU that share was measured on (V100 SXM2: the table's figures below)
REFERENCE_TFLOPS, REFERENCE_MEMORY_GBPS = 125.0, 900.0


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as placement rates it.

    ``name`` is the table's canonical name ("A100-SXM4-80GB"), or the product as read for a
    model the table does not know (then ``known`` is False and the figures are the
    conservative ones of its compute capability, :func:`gpu_model`). ``tflops``: dense
    FP16/BF16 tensor throughput per GPU; ``memory_mib``: per GPU (the node's label wins
    over the table where given; 0 when nothing says it: a product the table does not know
    and no memory figure, never a guess a memory need could be met by); ``memory_gbps``:
    HBM/GDDR bandwidth; ``compute``: CUDA compute capability (major, minor); ``source``:
    where the figures come from.
    """

    name: str
    tflops: float
    memory_mib: int
    memory_gbps: float
    compute: tuple[int, int] | None = None
    known: bool = True
    source: str = ""

    @property
    def training_tflops(self) -> float:
        """The TFLOPS a training step runs at on this GPU, for comparing GPU models: the
        reference's (V100 SXM2) step split into tensor-core matrix products
        (:data:`TENSOR_SHARE`), which scale with the dense TFLOPS, and memory-bound
        operators (normalizations, element-wise), which scale with the memory bandwidth,
        in the reference's TFLOPS. 125 for the V100 SXM2; an L40S (362 TFLOPS, 864 GB/s)
        trains at 203, an A100 80GB SXM (312, 2,039 GB/s) at 300, an H100 SXM at 689."""
        return REFERENCE_TFLOPS / (TENSOR_SHARE * REFERENCE_TFLOPS / self.tflops
                                   + (1 - TENSOR_SHARE) * REFERENCE_MEMORY_GBPS
                                   / self.memory_gbps)

    def to_json(self) -> dict[str, Any]:
        """The model as the placement record and ``gputopo nodes -o json`` show it."""
        out: dict[str, Any] = {"model": self.name, "tflops": self.tflops,
                               "memoryMiB": self.memory_mib or None}
        if not self.known:
            out["unknownModel"] = True
        return out


def gpu_model_key(model: GpuModel | None) -> tuple[str, float] | None:
    """What makes two nodes' GPUs one model for a gang (gputopo.placement.generations): the
    name and the throughput, not the memory (GFD's label differs by a few MiB between
    boards of one model); None for a node whose model nothing says."""
    return None if model is None else (model.name, model.tflops)


@dataclass(frozen=True)
class GpuIdentity:
    """Who one GPU of a node is: its driver ``index``, NVML ``uuid`` ("GPU-…") and PCI bus
    id with a 4-digit domain ("0000:07:00.0", the DRA attribute's form); None when unknown."""

    index: int
    uuid: str | None = None
    pci_bus_id: str | None = None


def _row(name: str, family: str, tflops: float, memory_gb: int, memory_gbps: float,
         compute: tuple[int, int], source: str, *, form: str | None = None) -> tuple:
    return (family, form, memory_gb,
            GpuModel(name=name, tflops=tflops, memory_mib=memory_gb * 1024,
                     memory_gbps=memory_gbps, compute=compute, source=source))


_V100 = "NVIDIA Tesla V100 data sheet (2020): tensor performance SXM2 125, PCIe 112 TFLOPS"
_T4 = "NVIDIA T4 data sheet: mixed precision (FP16/FP32) 65 TFLOPS, 320 GB/s, 16 GB"
_A10 = "NVIDIA A10 data sheet: BF16/FP16 tensor 125 TFLOPS dense (250 with sparsity), 600 GB/s"
_A10G = ("AWS EC2 G5 instances (A10G): 24 GB GDDR6, 600 GB/s; tensor throughput about 70 "
         "TFLOPS dense FP16 (the A10's at the A10G's lower clocks, conservative estimate)")
_L4 = "NVIDIA L4 data sheet: FP16/BF16 tensor 121 TFLOPS dense (242 with sparsity), 300 GB/s"
_L40S = "NVIDIA L40S data sheet: FP16/BF16 tensor 362 TFLOPS dense (733 with sparsity), 864 GB/s"
_A100 = ("NVIDIA A100 data sheet (2021): BF16/FP16 tensor 312 TFLOPS dense; 40GB 1,555 GB/s; "
         "80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s")
_H100 = ("NVIDIA H100 data sheet: BF16/FP16 tensor SXM 1,979 / PCIe 1,513 TFLOPS with sparsity "
         "(dense: half); SXM 3.35 TB/s, PCIe 2.0 TB/s, NVL 94 GB 3.9 TB/s (NVL 1,671 sparse)")
_H200 = ("NVIDIA H200 data sheet: BF16/FP16 tensor 1,979 TFLOPS with sparsity (989 dense), "
         "141 GB, 4.8 TB/s; H200 NVL (PCIe card) 1,671 with sparsity (835 dense), 141 GB, "
         "4.8 TB/s")
_H20 = ("NVIDIA H20 (China export model) product brief as reported publicly: FP16/BF16 tensor "
        "148 TFLOPS dense, 96 GB HBM3, 4.0 TB/s")
_B200 = ("NVIDIA HGX B200 data sheet: FP16/BF16 tensor 36 PFLOPS with sparsity for 8 GPUs "
         "(2,250 TFLOPS dense per GPU), 180 GB HBM3e and 8 TB/s per GPU")
_GB200 = ("NVIDIA GB200 NVL72 data sheet: FP16/BF16 tensor 360 PFLOPS with sparsity for 72 "
          "GPUs (2,500 TFLOPS dense per GPU), 13.4 TB HBM3e (186 GB per GPU), 8 TB/s per GPU")
_GB300 = ("NVIDIA GB300 NVL72 data sheet: FP16/BF16 tensor 360 PFLOPS with sparsity for 72 "
          "GPUs (2,500 TFLOPS dense per GPU), 20.7 TB HBM3e (288 GB per GPU), 8 TB/s per GPU")
# The models real fleets run beside those (China export variants, Grace Hopper, older and
# workstation-class boards). Where NVIDIA's own data sheet was not found the string says what
# the figure rests on.
_A800 = ("NVIDIA A800 (China export variant of the A100: A100 compute, NVLink cut to 400 GB/s): "
         "BF16/FP16 tensor 312 TFLOPS dense (311.87; 623.74 with sparsity, hmc-tech.com's A800 "
         "spec listing); memory bandwidth taken as the A100 data sheet's for the same memory and "
         "form (80GB SXM 2,039, 80GB PCIe 1,935, 40GB 1,555 GB/s): NVIDIA's A800 data sheet "
         "not found")
_H800 = ("NVIDIA H800 (China export variant of the H100: same GH100 die and low-precision "
         "compute, NVLink cut to 400 GB/s, FP64 cut): the H100 data sheet's figures, SXM 989 / "
         "PCIe 756 TFLOPS BF16/FP16 dense, SXM 3.35 TB/s, PCIe 2.0 TB/s, 80 GB (philisun.com "
         "H800-vs-H100 comparison): NVIDIA's H800 data sheet not found")
_GH200 = ("NVIDIA GH200 Grace Hopper Superchip: an H100-class GPU, FP16/BF16 tensor 989 TFLOPS "
          "dense (1,979 with sparsity, as the H100 SXM); 96 GB HBM3 at 4,000 GB/s (as reported "
          "in Vellaisamy et al. 2025's GH200 study; NVML name 'NVIDIA GH200 480GB' or '120GB': "
          "the Grace LPDDR5X size) or 144 GB HBM3e at 4.9 TB/s ('NVIDIA GH200 144G HBM3e': "
          "NVIDIA's product page figure as recalled); NVIDIA's GH200 data sheet not found")
_A30 = ("NVIDIA A30 data sheet figures as recalled (the data sheet not found by search): "
        "BF16/FP16 tensor 165 TFLOPS dense (330 with sparsity), 24 GB HBM2, 933 GB/s")
_A40 = ("NVIDIA A40 data sheet: BF16/FP16 tensor 149.7 TFLOPS dense (299.4 with sparsity), "
        "48 GB GDDR6, 696 GB/s")
_L20 = ("NVIDIA L20 (China export model): no NVIDIA data sheet found; as reported by Tom's "
        "Hardware (2024, from a retailer's listing): FP16/BF16 tensor 119.5 TFLOPS dense, "
        "48 GB GDDR6, 864 GB/s")
_L40 = ("NVIDIA L40 data sheet: BF16/FP16 tensor 181.05 TFLOPS dense (362.1 with sparsity), "
        "48 GB GDDR6, 864 GB/s")
_P100 = ("NVIDIA Tesla P100 data sheet: Pascal has no tensor cores, so the figure is the FP16 "
         "(half precision) peak: SXM2 (NVLink) 21.2, PCIe 18.7 TFLOPS; 16 GB HBM2 732 GB/s, "
         "12 GB (PCIe) 549 GB/s")
_RTX_A6000 = ("NVIDIA RTX A6000 data sheet: 48 GB GDDR6, 768 GB/s, tensor 309.7 TFLOPS with "
              "sparsity (FP16/BF16 154.8 dense: Microway's Ampere comparison)")
_RTX_6000_ADA = ("NVIDIA RTX 6000 Ada Generation data sheet: 48 GB GDDR6, 960 GB/s, tensor "
                 "1,457 TFLOPS (FP8 with sparsity), so FP16/BF16 about 364 TFLOPS dense (a "
                 "quarter: Ada runs FP16 at half its FP8 rate on workstation boards; NVIDIA's "
                 "Ada whitepaper figure, 364.2, not found by search)")

#: (family word, form "SXM"/"PCIE"/"NVL" or None for any, memory GB or 0 for any, model).
#: A family is one word of the product name, matched whole ("L40" is not "L40S", "H20" not
#: "H200", "GH200" not "H200"), or several words in a row ("RTX 6000 ADA": "Quadro RTX 6000"
#: and "RTX PRO 6000" are other GPUs). Matched in order: the first row whose family, form
#: and memory agree wins.
_ROWS: tuple[tuple[str, str | None, int, GpuModel], ...] = tuple(_row(*r[:7], form=r[7]) for r in (
    ("V100-SXM2-32GB", "V100", 125, 32, 900, (7, 0), _V100, "SXM"),
    ("V100-SXM2-16GB", "V100", 125, 16, 900, (7, 0), _V100, "SXM"),
    ("V100-PCIE-32GB", "V100", 112, 32, 900, (7, 0), _V100, "PCIE"),
    ("V100-PCIE-16GB", "V100", 112, 16, 900, (7, 0), _V100, None),
    ("T4", "T4", 65, 16, 320, (7, 5), _T4, None),
    ("A10G", "A10G", 70, 24, 600, (8, 6), _A10G, None),
    ("A10", "A10", 125, 24, 600, (8, 6), _A10, None),
    ("L4", "L4", 121, 24, 300, (8, 9), _L4, None),
    ("L40S", "L40S", 362, 48, 864, (8, 9), _L40S, None),
    ("L40", "L40", 181, 48, 864, (8, 9), _L40, None),
    ("L20", "L20", 119.5, 48, 864, (8, 9), _L20, None),
    ("RTX-6000-Ada", "RTX 6000 ADA", 364, 48, 960, (8, 9), _RTX_6000_ADA, None),
    ("RTX-A6000", "A6000", 154.8, 48, 768, (8, 6), _RTX_A6000, None),
    ("A40", "A40", 149.7, 48, 696, (8, 6), _A40, None),
    ("A30", "A30", 165, 24, 933, (8, 0), _A30, None),
    ("P100-SXM2-16GB", "P100", 21.2, 16, 732, (6, 0), _P100, "SXM"),
    ("P100-PCIE-12GB", "P100", 18.7, 12, 549, (6, 0), _P100, "PCIE"),
    ("P100-PCIE-16GB", "P100", 18.7, 16, 732, (6, 0), _P100, None),
    ("A100-PCIE-80GB", "A100", 312, 80, 1935, (8, 0), _A100, "PCIE"),
    ("A100-PCIE-40GB", "A100", 312, 40, 1555, (8, 0), _A100, "PCIE"),
    ("A100-SXM4-80GB", "A100", 312, 80, 2039, (8, 0), _A100, None),
    ("A100-SXM4-40GB", "A100", 312, 40, 1555, (8, 0), _A100, None),
    ("A800-PCIE-80GB", "A800", 312, 80, 1935, (8, 0), _A800, "PCIE"),
    ("A800-SXM4-80GB", "A800", 312, 80, 2039, (8, 0), _A800, None),
    ("A800-40GB", "A800", 312, 40, 1555, (8, 0), _A800, None),
    ("H100-NVL", "H100", 835, 94, 3900, (9, 0), _H100, "NVL"),
    ("H100-PCIE", "H100", 756, 80, 2000, (9, 0), _H100, "PCIE"),
    ("H100-SXM5-80GB", "H100", 989, 80, 3350, (9, 0), _H100, None),
    ("H200-NVL", "H200", 835, 141, 4800, (9, 0), _H200, "NVL"),
    ("H200", "H200", 989, 141, 4800, (9, 0), _H200, None),
    ("H20", "H20", 148, 96, 4000, (9, 0), _H20, None),
    ("H800-PCIE", "H800", 756, 80, 2000, (9, 0), _H800, "PCIE"),
    ("H800-SXM5-80GB", "H800", 989, 80, 3350, (9, 0), _H800, None),
    ("GH200-96GB", "GH200", 989, 96, 4000, (9, 0), _GH200, None),
    ("GH200-144GB", "GH200", 989, 144, 4900, (9, 0), _GH200, None),
    ("GB300", "GB300", 2500, 288, 8000, (10, 3), _GB300, None),
    ("GB200", "GB200", 2500, 186, 8000, (10, 0), _GB200, None),
    ("B200", "B200", 2250, 180, 8000, (10, 0), _B200, None),
))

#: The known models by canonical name.
MODELS: dict[str, GpuModel] = {row[3].name: row[3] for row in _ROWS}

#: A product the table does not know is rated as the slowest known model of its compute
#: capability's major version (conservative: an unknown GPU never looks faster than the
#: slowest GPU of its generation), and as a T4 when even that is unknown.
_SLOWEST_OF_MAJOR: dict[int, GpuModel] = {}
for _m in MODELS.values():
    if _m.compute is not None:
        _cur = _SLOWEST_OF_MAJOR.get(_m.compute[0])
        if _cur is None or _m.tflops < _cur.tflops:
            _SLOWEST_OF_MAJOR[_m.compute[0]] = _m
FALLBACK = MODELS["T4"]

_FAMILIES = {row[0] for row in _ROWS if " " not in row[0]}
#: Families of several words, as word tuples ("RTX 6000 ADA" -> ("RTX", "6000", "ADA")).
_PHRASES = tuple({tuple(row[0].split()) for row in _ROWS if " " in row[0]})
#: A memory size word: "80GB", and NVML's "144G" ("NVIDIA GH200 144G HBM3e")
_MEMORY_WORD = re.compile(r"^(\d+)GB?$")


def _words(product: str) -> list[str]:
    return [w for w in re.split(r"[-_ ]+", product.strip().upper()) if w]


def _family(words: list[str]) -> str | None:
    """The table family a product's words name: a family phrase found in a row, else the
    first whole word that is a family (module docstring of :data:`_ROWS`)."""
    for phrase in _PHRASES:
        n = len(phrase)
        if any(tuple(words[i:i + n]) == phrase for i in range(len(words) - n + 1)):
            return " ".join(phrase)
    return next((w for w in words if w in _FAMILIES), None)


@lru_cache(maxsize=1024)
def gpu_model(product: str | None, memory_mib: int | None = None,
              compute: tuple[int, int] | None = None) -> GpuModel:
    """The model of a GPU product name as GFD (``Tesla-V100-SXM2-16GB``,
    ``NVIDIA-H100-80GB-HBM3``) or NVML (``NVIDIA A100-SXM4-80GB``) writes it.

    ``memory_mib`` (GFD's ``nvidia.com/gpu.memory``) picks the memory variant a product name
    leaves open and replaces the table's size; ``compute`` (``nvidia.com/gpu.compute.major``
    / ``.minor``) rates a product the table does not know (module docstring). An empty or
    missing product gives an unknown model rated from ``compute``.
    """
    words = _words(product) if isinstance(product, str) else []
    family = _family(words)
    size = next((int(m.group(1)) for w in words if (m := _MEMORY_WORD.match(w))), None)
    if size is None and memory_mib:
        size = round(memory_mib / 1024)
    if "PCIE" in words:
        form = "PCIE"
    elif "NVL" in words:
        form = "NVL"
    else:
        form = "SXM" if "SXM2" in words or "SXM4" in words or "SXM5" in words else None
    if family is not None:
        fits = [row for row in _ROWS if row[0] == family and (row[1] is None or row[1] == form)]
        # the row of the stated memory size, else the family's smallest-memory row
        exact = [row for row in fits if size is not None and abs(row[2] - size) <= 4]
        # the closest memory (P100 PCIe: 12 and 16 GB), a row of the very form named before
        # a row for any form, then the smallest memory
        ranked = sorted(exact or fits, key=lambda r: (
            abs(r[2] - size) if exact and size is not None else 0, r[1] != form, r[2]))
        chosen = ranked[0] if ranked else None
        if chosen is not None:
            model = chosen[3]
            if memory_mib and memory_mib != model.memory_mib:
                model = _with_memory(model, memory_mib)
            return model
    base = _SLOWEST_OF_MAJOR.get(compute[0]) if compute else None
    why = (f"rated as {base.name}, the slowest known model of compute capability "
           f"{compute[0]}.x" if base is not None and compute else
           f"rated as {FALLBACK.name}, the slowest model of the table (compute capability "
           f"{f'{compute[0]}.{compute[1]}' if compute else 'unknown'})")
    base = base or FALLBACK
    name = product.strip() if isinstance(product, str) and product.strip() else "unknown"
    return GpuModel(name=name, tflops=base.tflops,
                    memory_mib=memory_mib or 0, memory_gbps=base.memory_gbps,
                    compute=compute, known=False, source=f"not in the table: {why}")


def _with_memory(model: GpuModel, memory_mib: int) -> GpuModel:
    return GpuModel(name=model.name, tflops=model.tflops, memory_mib=memory_mib,
                    memory_gbps=model.memory_gbps, compute=model.compute, known=model.known,
                    source=model.source)


def identities_from_annotation(value: Mapping[str, Any]) -> tuple[GpuIdentity, ...]:
    """Each ``gpus[i]`` of a ``gputopo.io/topology`` annotation (decoded) as a
    :class:`GpuIdentity`: ``uuid`` and ``pciBusId`` where the reporter wrote them (NVML's
    8-digit PCI domain is cut to the 4 digits DRA uses). Entries without an integer index
    are skipped: the topology parser reports those."""
    out = []
    gpus = value.get("gpus")
    for g in gpus if isinstance(gpus, list) else []:
        if not isinstance(g, Mapping):
            continue
        index = g.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            continue
        uuid = g.get("uuid")
        bus = g.get("pciBusId")
        out.append(GpuIdentity(index=index, uuid=uuid if isinstance(uuid, str) else None,
                               pci_bus_id=normal_bus_id(bus) if isinstance(bus, str) else None))
    return tuple(out)


def normal_bus_id(bus_id: str) -> str:
    """A PCI bus id in DRA's form: lower case, 4-digit domain (``00000000:07:00.0`` and
    ``0000:07:00.0`` both -> ``0000:07:00.0``)."""
    text = bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    if rest and len(domain) > 4 and set(domain[:-4]) <= {"0"}:
        domain = domain[-4:]
    return f"{domain}:{rest}" if rest else text
