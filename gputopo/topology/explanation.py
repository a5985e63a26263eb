"""The cost model explained in words and figures: what ``topology explain`` prints.

Why a module of its own: the predictions live in cost.py and the solver reads only those;
how they came about (which channels, which ring, which link limits it, how the network's
rate is worked out) is for users, and is built here from the same functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations, permutations
from typing import Any

from gputopo.topology.bandwidth import (
    infer_generation,
    nvlink_count,
)
from gputopo.topology.cost import (
    SPAN_FACTOR,
    _Bus,
    _bus,
    _key,
    _weight,
    all_to_all,
    domain_gbps,
    link_efficiency,
    symmetric_weights,
)
from gputopo.topology.fabric import fabric_gbps
from gputopo.topology.model import Topology
from gputopo.topology.transport import (
    TRANSPORT_EFFICIENCY,
    effective_network_gbps,
    known_transport,
)


def network_explanation(line_gbps: float, transport: str, span: str = "rack") -> dict[str, Any]:
    """The effective inter-node rate the model uses for one node's network, and why."""
    used = known_transport(transport)
    effective = effective_network_gbps(line_gbps, used)
    return {
        "lineGbps": line_gbps,
        "transport": used,
        "transportEfficiency": TRANSPORT_EFFICIENCY[used],
        "effectiveGbps": round(effective, 3),
        "span": span,
        "spanFactor": SPAN_FACTOR[span],
        "effectiveGBps": round(effective / 8.0 * SPAN_FACTOR[span], 3),
        "why": (
            f"NCCL over {used} gets {TRANSPORT_EFFICIENCY[used]:g} of the {line_gbps:g} "
            f"Gbit/s line rate (gputopo.topology.transport); a multi-node gang's bus "
            f"bandwidth is the lower of this and its slowest node share"
        ),
    }


def fabric_explanation(topology: Topology, trays: int) -> dict[str, Any]:
    """What a gang over ``trays`` nodes of one NVLink domain gets between them (assumption
    8): the GPU's NVLink line rate into the fabric, the efficiency, the bus bandwidth."""
    line = fabric_gbps(topology)
    eff = link_efficiency(topology)
    return {
        "span": "nvlink-domain",
        "trays": trays,
        "generation": infer_generation(topology),
        "fabricLineGBps": line,
        "linkEfficiency": eff,
        "busBandwidthGBps": round(domain_gbps(topology) / 8.0, 3),
        "why": (f"one NVLink domain ({trays} trays): GPUs of different nodes reach each other "
                f"over NVLink through the fabric's switches, not the network; NCCL needs "
                f"matching fabric cluster UUID and clique id and an IMEX channel in the pod"),
    }


# --- explanation ------------------------------------------------------------------------
#: Up to this many GPUs, explain() searches every ring order for the most readable one.
_READABLE_MAX = 8


def _readable_order(topology: Topology, order: list[int]) -> list[int]:
    """Among rings with the best bottleneck, the one whose slow links are fewest and fastest.

    Only for explanations (the bus bandwidth is the same): a ring that crosses the slow link
    once reads better than one that crosses it twice. Exhaustive, so small sets only.
    """
    if not 3 < len(order) <= _READABLE_MAX:
        return order
    first, rest = min(order), sorted(set(order) - {min(order)})

    def profile(ring: tuple[int, ...]) -> list[float]:
        return sorted(
            _weight(topology, a, b) for a, b in zip(ring, ring[1:] + ring[:1], strict=True)
        )

    best = max(((first, *perm) for perm in permutations(rest)), key=lambda ring: profile(ring))
    return list(best)


def _channels(topology: Topology, bus: _Bus, gpus: Sequence[int]) -> tuple[float, float]:
    """(channels, line-rate GB/s per channel) for the explanation."""
    if bus.kind == "nvlink-rings":
        pos, sym = symmetric_weights(topology)
        per_link = min(
            sym[pos[a]][pos[b]] / nvlink_count(topology.link(a, b))
            for a, b in combinations(gpus, 2)
            if nvlink_count(topology.link(a, b))
        )
        return round(bus.nvlink_rings_gbps / per_link, 3), per_link
    if bus.kind == "nvswitch":
        links = nvlink_count(topology.link(gpus[0], gpus[1])) or 1
        return float(links), bus.ring.bus_gbps / links
    return 1.0, bus.ring.bus_gbps


_LIMITS = {
    "single": "one GPU does not communicate; the figure is its node's best link",
    "pair": "two GPUs: one ring over both directions of their link",
    "nvswitch": "all-to-all: every GPU reaches every other at its full NVLink bandwidth "
    "(a switch or a direct full mesh), so any set of this size is as good",
    "nvlink-rings": "NVLink rings in both directions over every link between the GPUs; "
    "the GPUs' NVLinks inside the set bound how many fit",
    "ring": "no NVLink ring reaches every GPU: one ring, limited by its slowest link",
}


def explain(topology: Topology, gpus: Sequence[int]) -> dict[str, Any]:
    """Why a GPU set gets its bus bandwidth: the channels, the best single ring and its
    bottleneck, and the efficiency applied. Plain JSON-able data for
    ``gputopo topology explain``.
    """
    key = _key(topology, gpus)
    bus = _bus(topology, key)
    ring = bus.ring
    order = _readable_order(topology, list(ring.order))
    edges = []
    if len(order) > 1:
        pairs = list(zip(order, order[1:] + order[:1], strict=True))
        if len(order) == 2:
            pairs = pairs[:1]
        for a, b in pairs:
            edges.append(
                {
                    "from": a,
                    "to": b,
                    "link": topology.link(a, b),
                    "bandwidthGBps": round(_weight(topology, a, b), 3),
                }
            )
    bottleneck = None
    if ring.bottleneck is not None:
        a, b = min(
            zip(order, order[1:] + order[:1], strict=True),
            key=lambda e: _weight(topology, e[0], e[1]),
        )
        bottleneck = {
            "from": a,
            "to": b,
            "link": topology.link(a, b),
            "bandwidthGBps": round(_weight(topology, a, b), 3),
        }
    channels, per_channel = _channels(topology, bus, sorted(key))
    return {
        "gpus": sorted(order),
        "generation": infer_generation(topology),
        "allToAll": all_to_all(topology),
        "model": bus.kind,
        "channels": channels,
        "perChannelGBps": round(per_channel, 3),
        "linkEfficiency": bus.efficiency,
        "limit": _LIMITS[bus.kind],
        "ring": order,
        "links": edges,
        "bottleneck": bottleneck,
        "ringBusBandwidthGBps": round(ring.bus_gbps * bus.efficiency, 3),
        "busBandwidthGBps": round(bus.bus_gbps, 3),
    }
