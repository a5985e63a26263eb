"""The answer: a candidate placement, and the Placement the solver returns for the best.

Why a module of its own: both searches (one node, several nodes) produce candidates and
compare them the same way, and the Placement's reason (what it predicts, which domain it
sits in, which free blocks it used up) is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from gputopo.placement.domains import domain_note, trays
from gputopo.placement.objective import BLOCK_SIZES, Score, span_of
from gputopo.placement.types import GangRequest, NodeState, Placement, ReplicaSlot
from gputopo.topology.cost import NodeShare, gang_bus_bandwidth
from gputopo.topology.model import Topology


@dataclass(frozen=True)
class _Candidate:
    score: Score
    tie: tuple[tuple[str, tuple[int, ...]], ...]
    shares: dict[str, tuple[int, ...]]
    nodes: dict[str, NodeState]  # the touched nodes by name
    bus: float | None = None  # the placement's bus bandwidth when known (one node: cached)

    def better_than(self, other: _Candidate | None) -> bool:
        """Higher score wins; equal scores go to the smaller (node, GPUs) list."""
        if other is None:
            return True
        return self.score > other.score or (self.score == other.score and self.tie < other.tie)


# --- output -----------------------------------------------------------------------------
def _placement(gang: GangRequest, best: _Candidate) -> Placement:
    g = gang.gpus_per_replica
    slots = []
    for name in sorted(best.shares):
        gpus = sorted(best.shares[name])
        for start in range(0, len(gpus), g):
            slots.append(ReplicaSlot(len(slots), name, tuple(gpus[start : start + g])))
    touched = [best.nodes[name] for name in sorted(best.shares)]
    span = span_of(touched)
    bus = best.bus if best.bus is not None else _bus(gang, touched, best.shares, span)
    return Placement(
        feasible=True,
        slots=tuple(slots),
        bus_bandwidth_gbps=bus,
        reason=_explain(gang, touched, best, bus, span),
        details={"score": best.score.to_json(), "span": span, "nodes": [n.name for n in touched]},
    )


def _bus(gang: GangRequest, touched: list[NodeState], shares: dict[str, tuple[int, ...]],
         span: str) -> float:
    """The placement's predicted bus bandwidth (unrounded; 0 for one GPU)."""
    if gang.total_gpus == 1:
        return 0.0
    return gang_bus_bandwidth([
        NodeShare(n.topology, tuple(sorted(shares[n.name])), n.network_gbps,
                  n.network_transport, n.network_efficiency, n.transport_share)
        for n in touched
    ], span=span)


@lru_cache(maxsize=1 << 12)
def _links_between(topology: Topology, gpus: tuple[int, ...]) -> str:
    """The legend codes between the GPUs of a one-node share, sorted, for its reason."""
    return ", ".join(sorted({topology.link(a, b) for a, b in combinations(gpus, 2)}))


def _explain(
    gang: GangRequest, touched: list[NodeState], best: _Candidate, bus: float, span: str
) -> str:
    g = gang.gpus_per_replica
    shape = f"{gang.replicas} x {g} GPU{'s' if g > 1 else ''}"
    if gang.total_gpus == 1:
        head = f"{shape} on {touched[0].name}: one GPU does not communicate"
    elif len(touched) == 1:
        node = touched[0]
        links = _links_between(node.topology, tuple(best.shares[node.name]))
        head = (
            f"{shape} on one node {node.name}: predicted bus bandwidth {bus:.1f} GB/s "
            f"(links between its GPUs: {links})"
        )
    elif span == "nvlink-domain":
        head = (f"{shape} over {len(touched)} nodes in one NVLink domain "
                f"({trays(len(touched))}): predicted bus bandwidth {bus:.1f} GB/s (NVLink "
                "across the nodes; its pods need the domain's IMEX channel)")
    else:
        head = (
            f"{shape} over {len(touched)} nodes in one {span}"
            if span != "cluster"
            else f"{shape} over {len(touched)} nodes across zones"
        )
        head += f": predicted bus bandwidth {bus:.1f} GB/s (hierarchical all-reduce)"
        note = domain_note(touched)
        if note is not None:
            head += f"; {note}"
    lost = [f"{-d} x {k}-GPU" for k, d in zip(BLOCK_SIZES, best.score.blocks, strict=True) if d]
    tail = (
        "; keeps every well-connected free block"
        if not lost
        else f"; well-connected free blocks used up: {', '.join(lost)}"
    )
    return head + tail
