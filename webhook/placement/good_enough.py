"""Good enough to take now: the waiting rule's reference for a gang, and its bar.

Why a module of its own: what a gang would get on the nodes it may use with every GPU free
(its best there, and the waiting rule's reference made of each kind's best,
:mod:`gputopo.placement.waiting`) is asked for every new gang shape by admission, the queue,
the dry run and ``gputopo place``, and answered from a memo per node set and gang shape;
:class:`GangReserver <webhook.placement.reserve.GangReserver>` takes it from here (its
bar for a good one-node placement, :meth:`GoodEnough.good_bar`, and its judgement of a
feasible placement, :meth:`GoodEnough.not_good`), and claims the GPUs itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gputopo.cluster.node_resources import empty_nodes
from gputopo.placement.objective import ROUND
from gputopo.placement.throughput import Speed, judged_share
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.placement.waiting import (
    kind_gpus,
    node_kind,
    reference_speed,
    starts,
    unracked,
)
from webhook.placement.fitting import FIT_MEMO_SIZE, same_nodes

Solver = Callable[[Sequence[NodeState], GangRequest], Placement]
#: GoodEnough.ideal_speed's memo per node set: the nodes, the speed per (gang, non-GPU
#: requests, node kinds) and the reference per (gang, requests, "typical" or "slowest"),
#: each node's kind by name, each kind's GPU count
_Ideal = tuple[list[NodeState], dict[Any, Any], dict[str, Hashable], dict[Hashable, int]]


@dataclass(frozen=True)
class Unplaced:
    """Why a replica got no slot, in a sentence a user understands; ``lasting``: waiting
    for GPUs to free up cannot change it (the gang is not one gputopo can place)."""

    reason: str
    lasting: bool = False


class GoodEnough:
    """The ideal and reference speeds of gangs, kept per node set and gang shape, and the
    judgements made from them. A subclass provides :attr:`solver`."""

    solver: Solver

    def __init__(self) -> None:
        # ideal speed per node-set signature (which holds the nodes, so their topologies'
        # ids stay unique) and per gang and node kinds, with each node's kind (filled on
        # first use); the last nodes asked about, for a signature without rebuilding it
        self._ideal: dict[tuple[Any, ...], _Ideal] = {}
        self._ideal_last: _Ideal | None = None

    def ideal_bandwidth(self, nodes: Sequence[NodeState], gang: GangRequest,
                        demand: Mapping[str, int] | None = None, *,
                        reference: bool = False, typical: bool = True) -> float:
        """The bus bandwidth of :meth:`ideal_speed` (0 when the gang does not fit)."""
        speed = self.ideal_speed(nodes, gang, demand, reference=reference, typical=typical)
        return 0.0 if speed is None else speed.gbps

    def ideal_speed(self, nodes: Sequence[NodeState], gang: GangRequest,
                    demand: Mapping[str, int] | None = None, *,
                    reference: bool = False, typical: bool = True) -> Speed | None:
        """What the gang would get on ``nodes`` with every GPU free (its slowest GPU's
        TFLOPS and its bus bandwidth; None when it does not fit; cached per gang shape and
        node set: the same for every gang of that shape) and no other pod there:
        ``demand``, one pod's non-GPU requests, still limits how many of the gang a node
        holds (two pods of 60 CPUs never share a node of 94, however empty).
        ``reference``: the waiting rule's reference instead (gputopo.placement.waiting
        ``reference_speed`` over every kind of ``nodes``, each kind's best solved on its
        nodes without their racks, ``waiting.unracked``: one figure for the gang,
        whatever the placement; cached per kind): the typical kind's, or with ``typical``
        False the slowest kind's (the floor of ``takeBest``: ``waiting.against_typical``).

        The node set is everything the solver reads of a node but its used GPUs (name,
        topology, zone, rack, effective network: line rate, transport, the node's and the
        policy's share, GPU model); the same node objects as last time skip building that
        signature (a pointer walk instead of a 1,000-entry tuple and its hash)."""
        last = self._ideal_last
        if last is None or not same_nodes(last[0], nodes):
            sig = tuple((n.name, id(n.topology), n.zone, n.rack, n.network_gbps,
                         n.network_transport, n.effective_gbps, n.nvlink_domain,
                         id(n.gpu_model))
                        for n in nodes)
            found = self._ideal.get(sig)
            if found is None:
                if len(self._ideal) >= FIT_MEMO_SIZE:
                    self._ideal.clear()
                # the entry holds the nodes: their topologies' and models' ids cannot be
                # reused
                found = self._ideal[sig] = (list(nodes), {}, {}, {})
            last = self._ideal_last = (list(nodes), found[1], found[2], found[3])
        per_gang, kinds, gpus = last[1], last[2], last[3]
        asks = tuple(sorted(demand.items())) if demand else ()

        def best_on(on: frozenset[Hashable], rackless: bool = False) -> Speed | None:
            key = (gang, asks, on, rackless)
            if key in per_gang:
                return per_gang[key]
            # the nodes of kinds ``on`` (all of them when no kind is asked for); for the
            # reference without their racks (waiting.unracked)
            ref = [n for n in nodes if kinds[n.name] in on] if on else nodes
            empty = empty_nodes(ref, demand or {}, gang)
            best = self.solver(unracked(empty) if rackless else empty, gang)
            hit = per_gang[key] = (Speed(best.tflops, best.bus_bandwidth_gbps)
                                   if best.feasible else None)
            return hit

        if not reference:
            return best_on(frozenset())
        # the reference itself, per gang and bar, beside the bests it is made of: the kinds
        # of 1,000 nodes deduplicated again was ~100 us, twice per new gang since the solve
        # takes its bar from it (good_bar) and not_good judges by it
        which = (gang, asks, "typical" if typical else "slowest")
        if which not in per_gang:
            if not kinds:
                kinds.update((n.name, node_kind(n)) for n in nodes)
                gpus.update(kind_gpus(nodes))
            per_gang[which] = reference_speed(
                list(dict.fromkeys(kinds.values())), lambda on: best_on(on, True),
                gpus if typical else None, gang)
        return per_gang[which]

    def not_good(self, placement: Placement, nodes: Sequence[NodeState], gang: GangRequest,
                 good_share: float, demand: Mapping[str, int] | None = None, *,
                 typical: bool = True) -> Unplaced | None:
        """Why a feasible ``placement`` is not good enough to take now (below ``good_share``
        of the waiting rule's reference for the gang, the typical kind's or not:
        :func:`starts`, throughput shares: gputopo.placement.throughput), or None."""
        spread = sorted({s.node for s in placement.slots})
        ideal = self.ideal_speed(nodes, gang, demand, reference=True, typical=typical)
        got = Speed(placement.tflops, placement.bus_bandwidth_gbps)
        if ideal is None or starts(got, ideal, good_share, gang.compute_share):
            return None
        if ideal.tflops is not None and placement.tflops is not None and \
                placement.tflops != ideal.tflops:
            share = judged_share(got, ideal, gang.compute_share)
            return Unplaced(
                f"best free now gives {placement.bus_bandwidth_gbps:.1f} GB/s bus bandwidth "
                f"on GPUs that train at {placement.tflops:.0f} TFLOPS ({len(spread)} "
                f"node(s)): {share:.0%} of a good placement's throughput "
                f"({ideal.gbps:.1f} GB/s on GPUs that train at {ideal.tflops:.0f}; waits "
                f"for at least {good_share:.0%} of it)")
        return Unplaced(
            f"best free now gives {placement.bus_bandwidth_gbps:.1f} GB/s bus bandwidth "
            f"({len(spread)} node(s)); a good placement gives {ideal.gbps:.1f} GB/s (waits for "
            f"at least {good_share:.0%} of it)")

    def good_bar(self, nodes: Sequence[NodeState], gang: GangRequest, share: float,
                 demand: Mapping[str, int] | None = None) -> GangRequest:
        """``gang`` with its bar for a good one-node placement (``GangRequest.good_gbps``,
        the objective's ``good`` terms): ``share`` (the policy's ``minShare``) of the
        waiting rule's typical reference on ``nodes``; where ``nodes`` hold several GPU
        models, also its bandwidth placed well (``GangRequest.well_gbps``: its best on
        ``nodes`` empty, cached per gang shape as the reference is). A one-GPU gang has
        none (no all-reduce): it comes back as it is."""
        if gang.total_gpus == 1:
            return gang
        base = (replace(gang, good_gbps=None, well_gbps=None)
                if gang.good_gbps is not None or gang.well_gbps is not None else gang)
        ideal = self.ideal_bandwidth(nodes, base, demand, reference=True)
        well = None
        if self._ideal_last is not None and len(
                {k.gpu_model for k in self._ideal_last[3]}) > 1:  # several GPU models
            well = self.ideal_bandwidth(nodes, base, demand) or None
        return replace(base, good_gbps=round(share * ideal, ROUND), well_gbps=well)
