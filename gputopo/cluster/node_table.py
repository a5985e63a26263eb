"""``gputopo nodes``: the activated nodes as a kubectl-style table — the view an operator
opens first when asking "why did my job not fit?".

Per node: the GPU kind (how its GPUs are wired: NVSwitch, NVLink, PCIe), the GPU model and
its memory per GPU (GPU Feature Discovery's labels, gputopo.cluster.gpu_facts; a product
the model table does not know says "(unknown)": it is rated conservatively), what hands its
GPUs out (``device-plugin``: an extended resource; ``dra``: its DRA driver's ResourceSlices,
gputopo.cluster.dra), GPUs used / free,
the largest free *well-connected* block (the biggest k for which k free GPUs of the node
are as well connected as any k GPUs of it can be, :func:`gputopo.placement.objective.
free_blocks` — a free 4-block on a DGX-1 is an NVLink quad), rack and zone, the network
(line rate, transport, the node's own share if it states one),
the NVLink domain it shares with other nodes (GB200 NVL72 trays; a line per domain after
the table: free GPUs, largest free block), the CPUs and memory its pods request of what it
has allocatable (what decides whether a gang's pods fit beside them), and the gangs holding
GPUs there (from the pods' ``gpu-topology`` label, or their ``gputopo.io/placement``
record, and from reservation records). Pure: objects in, rows out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gputopo import names
from gputopo.cluster import objects as ob
from gputopo.cluster.node_resources import CPU, MEMORY, show
from gputopo.placement.objective import BLOCK_SIZES, free_blocks, position_mask
from gputopo.placement.types import NodeState
from gputopo.topology.bandwidth import is_all_to_all


@dataclass(frozen=True)
class NodeRow:
    name: str
    kind: str
    gpus: int
    used: int
    largest_block: int
    rack: str
    zone: str
    network: str
    gangs: tuple[str, ...]
    nvlink_domain: str = "-"
    cpu: str = "-"  # CPUs requested / allocatable ("80/94"), "-" when the node says nothing
    memory: str = "-"  # memory requested / allocatable ("1Gi/503Gi")
    #: the GPU model (gputopo.topology.gpus), "-" when nothing says it; a product the table
    #: does not know is shown as read with "(unknown)" and ``gpu_model_known`` False
    gpu_model: str = "-"
    gpu_model_known: bool | None = None
    gpu_memory_mib: int | None = None  # per GPU, as GFD's nvidia.com/gpu.memory says
    handout: str = "device-plugin"  # how its GPUs are handed out: device-plugin or dra

    def cells(self) -> list[str]:
        model = self.gpu_model + (" (unknown)" if self.gpu_model_known is False
                                  and self.gpu_model != "unknown" else "")
        memory = f"{self.gpu_memory_mib}Mi" if self.gpu_memory_mib is not None else "-"
        return [self.name, self.kind, model, memory, self.handout, f"{self.used}/{self.gpus}",
                str(self.gpus - self.used),
                str(self.largest_block), self.rack, self.zone, self.network,
                self.nvlink_domain, self.cpu, self.memory, ",".join(self.gangs) or "-"]


HEADER = ["NAME", "GPU KIND", "GPU MODEL", "GPU MEMORY", "GPUS BY", "USED", "FREE",
          "FREE BLOCK", "RACK", "ZONE", "NETWORK", "NVLINK DOMAIN", "CPU", "MEMORY", "GANGS"]


def resource_cell(state: NodeState, resource: str) -> str:
    """What the node's pods request of ``resource`` of what it has allocatable ("80/94"):
    what the scheduler's NodeResourcesFit compares a new pod against."""
    res = state.resources
    if res is None or resource not in res.allocatable:
        return "-"
    return (f"{show(resource, res.requested.get(resource, 0))}/"
            f"{show(resource, res.allocatable[resource])}")


@dataclass(frozen=True)
class DomainRow:
    """One NVLink domain: its nodes, free GPUs, and the largest free block in it. Every
    free GPU of a domain reaches every other over NVLink, so the largest free block of
    the domain is all of its free GPUs; ``free_trays`` counts its nodes with no GPU in use
    (what a gang of whole trays can take)."""

    domain: str
    nodes: int
    gpus: int
    free: int
    free_trays: int

    def line(self) -> str:
        return (f"NVLINK DOMAIN {self.domain}: {self.nodes} nodes, {self.free}/{self.gpus} "
                f"GPUs free, largest free block {self.free} GPUs "
                f"({self.free_trays} whole free node{'s' if self.free_trays != 1 else ''})")


def domain_rows(states: Iterable[NodeState]) -> list[DomainRow]:
    """Per NVLink domain (nodes in none are left out), by domain name."""
    per: dict[str, list[NodeState]] = {}
    for s in states:
        if s.nvlink_domain is not None:
            per.setdefault(s.nvlink_domain, []).append(s)
    return [
        DomainRow(domain=d, nodes=len(members),
                  gpus=sum(len(m.topology.gpus) for m in members),
                  free=sum(len(m.topology.gpus) - len(m.used) for m in members),
                  free_trays=sum(1 for m in members if not m.used))
        for d, members in sorted(per.items())
    ]


def gpu_kind(state: NodeState) -> str:
    """A short name for how a node's GPUs are wired, from its ``nvidia-smi topo -m`` links."""
    topo = state.topology
    n = len(topo.gpus)
    if n > 1 and is_all_to_all(topo):
        return f"{n}x NVSwitch"
    if any(link.startswith("NV") for row in topo.links for link in row):
        return f"{n}x NVLink"
    return f"{n}x PCIe"


def network_cell(state: NodeState) -> str:
    """Line rate and transport (``100G/gdr``), and the node's own measured share of the
    line rate when it states one (``100G/rdma@0.6``): what the cost model reads."""
    own = state.network_efficiency
    mine = f"@{own:g}" if own is not None else ""
    return f"{state.network_gbps:g}G/{state.network_transport}{mine}"


def largest_free_block(state: NodeState) -> int:
    """The biggest k with a free well-connected k-block; 1 if only loose GPUs are free."""
    free = state.free
    if not free:
        return 0
    counts = free_blocks(state.topology, position_mask(state.topology, free))
    for size, count in zip(BLOCK_SIZES, counts, strict=True):
        if count:
            return size
    return 1


def _gang_of(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    ns = meta.get("namespace") or "default"
    if labels.get(names.GANG_LABEL):
        return f"{ns}/{labels[names.GANG_LABEL]}"
    raw = (meta.get("annotations") or {}).get(names.PLACEMENT_ANNOTATION)
    try:
        record = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    job = record.get("job") if isinstance(record, dict) else None
    return str(job).split(" ", 1)[-1] if job else None


def gangs_by_node(pods: Iterable[Mapping[str, Any]],
                  reserved: Iterable[tuple[str, Iterable[str]]] = ()) -> dict[str, set[str]]:
    """Gang names holding GPUs per node: pods holding GPUs (bound or pinned), and
    ``reserved`` pairs of (gang name, nodes) from reservation records."""
    out: dict[str, set[str]] = {}
    for pod in pods:
        held = ob.gpus_held_by_pod(pod)
        gang = _gang_of(pod) if held is not None else None
        if held is not None and gang:
            out.setdefault(held[0], set()).add(gang)
    for gang, nodes in reserved:
        for node in nodes:
            out.setdefault(node, set()).add(gang)
    return out


def node_rows(states: Iterable[NodeState], gangs: Mapping[str, set[str]]) -> list[NodeRow]:
    rows = []
    for s in sorted(states, key=lambda s: s.name):
        rows.append(NodeRow(
            name=s.name, kind=gpu_kind(s), gpus=len(s.topology.gpus), used=len(s.used),
            largest_block=largest_free_block(s), rack=s.rack or "-", zone=s.zone or "-",
            network=network_cell(s), gangs=tuple(sorted(gangs.get(s.name, ()))),
            nvlink_domain=s.nvlink_domain or "-",
            cpu=resource_cell(s, CPU), memory=resource_cell(s, MEMORY),
            gpu_model=s.gpu_model.name if s.gpu_model is not None else "-",
            gpu_model_known=s.gpu_model.known if s.gpu_model is not None else None,
            gpu_memory_mib=s.gpu_model.memory_mib or None if s.gpu_model is not None else None,
            handout=s.gpu_handout,
        ))
    return rows


def format_rows(rows: Iterable[NodeRow]) -> str:
    table = [HEADER, *(r.cells() for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER) - 1)]
    return "\n".join(
        "   ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]])
        for r in table) + "\n"
