"""Solve a whole gang and reserve it: the one code path the admission step and the queue share.

Why one module: a gang is placed either at its first GPU pod's admission
(:mod:`webhook.placement.step`) or later, when GPUs free up, by the placement queue
(:mod:`webhook.queue`). Both must choose GPUs the same way (the pod's node constraints, GPUs
held by reservations subtracted, the same solver) and both must claim them through the same
compare-and-swap :class:`~gputopo.cluster.reservations.ReservationStore`, so that the
webhook replicas and the queue never hand out one GPU twice. :class:`GangReserver` is that
shared piece; callers pass the cluster reader, the pod whose constraints decide for the gang
(the gang's first GPU pod), the gang key and the :class:`GangRequest`.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputopo.cluster.node_fit import NodeFacts, PodConstraints
from gputopo.cluster.reservations import (
    GangKey,
    GangReservation,
    ReservationConflict,
    ReservationStore,
    ReservationUnavailable,
)
from gputopo.cluster.source import ClusterReader
from gputopo.placement.types import GangRequest, NodeState, Placement
from webhook.placement import network

log = logging.getLogger(__name__)

Solver = Callable[[Sequence[NodeState], GangRequest], Placement]
HeldMemo = dict[str, tuple[NodeState, frozenset[int], NodeState]]

#: Re-solves after a ReservationConflict before the gang is declared unplaceable. Each
#: conflict means another admission won a GPU we wanted; a handful of rounds settles any
#: realistic burst, and the bound keeps one admission well inside the webhook timeout.
DEFAULT_MAX_ATTEMPTS = 5
#: How long a gang that found the cluster full right after a conflict waits for a concurrent
#: admission of the same gang to finish writing its reservation (claims, then the gang
#: record: a few API round trips).
DEFAULT_SETTLE_SECONDS = 0.5
#: A gang that may wait (``whenFull: wait``) takes a placement only when its predicted bus
#: bandwidth is at least this share of what the gang would get on the same nodes with every
#: GPU free; below it, it waits for a good placement (docs/queue.md).
GOOD_SHARE = 0.9


@dataclass(frozen=True)
class Unplaced:
    """Why a replica got no slot, in a sentence a user understands; ``lasting``: waiting
    for GPUs to free up cannot change it (the gang is not one gputopo can place)."""

    reason: str
    lasting: bool = False


def exclude_held(nodes: Sequence[NodeState], held: Mapping[str, set[int]],
                 memo: HeldMemo | None = None) -> list[NodeState]:
    """Nodes with reserved GPUs marked used, so the solver never offers them again.

    ``memo`` (the reserver's, refilled on every call) keeps the NodeState made for a
    node whose state and reserved GPUs did not change since the last gang: a third of a
    1,000-node cluster holds reserved GPUs, and one frozen-dataclass copy each is ~0.5 ms
    per new gang; with the memo only the few nodes that changed are copied.
    """
    old = memo if memo is not None else {}
    fresh: HeldMemo = {}
    out = []
    for n in nodes:
        extra = held.get(n.name)
        if not extra:
            out.append(n)
            continue
        hit = old.get(n.name)
        if hit is None or hit[0] is not n or hit[1] != extra:
            # built directly: dataclasses.replace re-runs field introspection per node,
            # twice the cost of the whole loop at 1,000 nodes (bench/admission.py); every
            # field is passed on (tests/placement_step/test_exclude_held.py checks that)
            hit = (n, frozenset(extra), NodeState(
                name=n.name, topology=n.topology, used=n.used | frozenset(extra), zone=n.zone,
                rack=n.rack, network_gbps=n.network_gbps,
                network_transport=n.network_transport, facts=n.facts,
                host_ports=n.host_ports, network_efficiency=n.network_efficiency))
        fresh[n.name] = hit
        out.append(hit[2])
    if memo is not None:
        memo.clear()
        memo.update(fresh)
    return out


def default_solver() -> Solver:
    from gputopo.placement.solver import solve  # the solver area's module

    return solve


def nodes_for(cluster: ClusterReader, pod: Mapping[str, Any]) -> tuple[list[NodeState], int]:
    """The topology nodes ``pod`` could be scheduled on at all (its nodeSelector, required
    node affinity and tolerations), and how many were ruled out. A node whose object the
    cluster view does not hold is kept: nothing is known against it.

    Why the facts on each NodeState: this runs over every node of the cluster for each new
    gang, inside its admission; looking each Node object up and re-reading its labels and
    taints cost ~3 ms at 1,000 nodes, about as much as the solve itself.
    """
    nodes = cluster.node_states()
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    constraints = PodConstraints.of(spec)
    fit = []
    for n in nodes:
        facts = n.facts
        if facts is None:  # a reader that builds bare NodeStates: read the object
            node = cluster.object(api_version="v1", kind="Node", namespace=None, name=n.name)
            facts = NodeFacts.of(node) if node is not None else None
        if facts is None or constraints.admits(facts):
            fit.append(n)
    return fit, len(nodes) - len(fit)


def ruled_out(reason: str, fit: Sequence[NodeState], excluded: int) -> str:
    """``reason``, plus how many nodes the pod's own constraints left out."""
    if not excluded:
        return reason
    if not fit:
        return (f"none of the {excluded} topology node(s) fits the pod's nodeSelector, "
                f"required node affinity and tolerations")
    return (f"{reason} ({excluded} node(s) left out: the pod's nodeSelector, required node "
            f"affinity or missing tolerations rule them out)")


class GangReserver:
    """Solve + reserve with bounded re-solving on conflict (see :meth:`reserve`)."""

    def __init__(
        self,
        store: ReservationStore,
        *,
        solver: Solver | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    ) -> None:
        self.store = store
        self._solver = solver
        self.max_attempts = max(1, int(max_attempts))
        self.settle_seconds = max(0.0, float(settle_seconds))
        self.held_memo: HeldMemo = {}  # exclude_held's copies, reused across gangs
        self._ideal: dict[tuple[Any, ...], float] = {}  # (gang, nodes) → best bandwidth

    @property
    def solver(self) -> Solver:
        if self._solver is None:
            self._solver = default_solver()
        return self._solver

    def free_nodes(self, cluster: ClusterReader, pod: Mapping[str, Any]
                   ) -> tuple[list[NodeState], int]:
        """The nodes ``pod`` fits with reserved GPUs marked used, and how many its own
        constraints left out (what :meth:`reserve` solves on)."""
        fit, excluded = nodes_for(cluster, pod)
        return exclude_held(fit, self.store.held_gpus(), self.held_memo), excluded

    def ideal_bandwidth(self, nodes: Sequence[NodeState], gang: GangRequest) -> float:
        """The bus bandwidth the gang would get on ``nodes`` with every GPU free (cached per
        gang shape and node set: the same for every gang of that shape)."""
        key = (gang, tuple((n.name, id(n.topology)) for n in nodes))
        hit = self._ideal.get(key)
        if hit is None:
            empty = [NodeState(name=n.name, topology=n.topology, zone=n.zone, rack=n.rack,
                               network_gbps=n.network_gbps,
                               network_transport=n.network_transport, facts=n.facts,
                               network_efficiency=n.network_efficiency)
                     for n in nodes]
            best = self.solver(empty, gang)
            hit = best.bus_bandwidth_gbps if best.feasible else 0.0
            if len(self._ideal) > 1_000:
                self._ideal.clear()
            self._ideal[key] = hit
        return hit

    def not_good(self, placement: Placement, nodes: Sequence[NodeState], gang: GangRequest,
                 good_share: float) -> Unplaced | None:
        """Why a feasible ``placement`` is not good enough to take now, or None."""
        ideal = self.ideal_bandwidth(nodes, gang)
        if ideal <= 0 or placement.bus_bandwidth_gbps >= good_share * ideal:
            return None
        spread = sorted({s.node for s in placement.slots})
        return Unplaced(
            f"best free now gives {placement.bus_bandwidth_gbps:.1f} GB/s bus bandwidth "
            f"({len(spread)} node(s)); a good placement gives {ideal:.1f} GB/s (waits for "
            f"at least {good_share:.0%} of it)")

    def reserve(
        self, *, cluster: ClusterReader, pod: Mapping[str, Any], key: GangKey,
        gang: GangRequest, good_share: float | None = None,
        net: network.GangNetwork | None = None,
    ) -> tuple[GangReservation, bool] | Unplaced:
        """Solve the whole gang and reserve it; re-solve on conflict, a bounded number of
        times. Returns the reservation and whether THIS call made it (False: a concurrent
        admission of the same gang won and its reservation is reused), or why not.

        Another admission of THIS gang (two webhook replicas got two of its pods at once)
        may have claimed its GPUs without having written its reservation yet: solving then
        finds the cluster "full" of our own gang, or reserving conflicts with it. So after a
        conflict the reserver waits a moment (jittered backoff) and looks for the gang's
        reservation before re-solving; and before declaring the gang unplaceable while
        GPUs of reservations still being written are in the way (it would fit without
        them), it waits up to ``settle_seconds`` for the gang's reservation to appear. A
        cluster merely full of settled reservations costs no wait.

        ``good_share``: the gang may wait, so a feasible placement below that share of the
        gang's ideal bandwidth (:meth:`not_good`) is not taken (None: take the best there is).

        ``net``: the gang's network plan: nodes holding a host port the gang cannot move are
        left out, the plan is decided from the solver's slots (ports derived from GPUs) and
        stored with the reservation; a node whose port range is used up is left out and the
        gang re-solved.
        """
        last = ""
        try:  # abandoned gangs free their GPUs before we look for free ones
            self.store.expire()
        except ReservationUnavailable as exc:
            log.warning("placement: expiring reservations failed (next gang retries): %s", exc)
        no_ports: dict[str, str] = {}  # nodes whose port range is used up → why
        for attempt in range(1, self.max_attempts + 1):
            bound, excluded = nodes_for(cluster, pod)
            if net is not None:
                bound = [n for n in net.usable(bound) if n.name not in no_ports]
            held = self.store.held_gpus()
            placement = self.solver(exclude_held(bound, held, self.held_memo), gang)
            if not placement.feasible:
                # After a conflict, or when GPUs claimed by a reservation still being written
                # stand in the way, they may be going to this very gang: give it a moment.
                # The look for the gang's reservation comes AFTER the in-flight analysis
                # (which lists reservations), so a reservation written meanwhile is seen.
                waiting = bool(last) or self._in_flight_blocks(bound, held, gang)
                existing = self._await_reservation(key) if waiting else self.store.get(key)
                if existing is not None:
                    return existing, False
                reason = placement.reason or "no feasible placement"
                if no_ports:
                    reason += "; " + "; ".join(sorted(no_ports.values()))
                return Unplaced(ruled_out(reason, bound, excluded))
            if good_share is not None:
                poor = self.not_good(placement, bound, gang, good_share)
                if poor is not None:
                    existing = self.store.get(key)
                    return (existing, False) if existing is not None else poor
            plan = (net.decide(placement.slots, {n.name: n.host_ports for n in bound})
                    if net is not None else None)
            if isinstance(plan, network.PortsUsedUp):
                no_ports[plan.node] = plan.reason
                continue
            try:
                res = self.store.reserve(key, placement,
                                         order=net.order() if net is not None else (),
                                         network=plan.to_json() if plan is not None else None)
            except ReservationConflict as exc:
                last = str(exc)
                log.info("placement: %s: conflict on attempt %d: %s", key, attempt, exc)
                existing = self._await_reservation(key, backoff=attempt)
                if existing is not None:
                    return existing, False
                continue
            # reserve() returns the existing reservation when a concurrent admission of the
            # same gang won: then this call did not place the gang, it reuses it.
            return res, res.slots == tuple(sorted(placement.slots, key=lambda s: s.replica))
        return Unplaced(
            f"the GPUs chosen were taken by concurrent admissions {self.max_attempts} times "
            f"in a row (last: {last})"
        )

    def _in_flight_blocks(
        self, bound: Sequence[NodeState], held: Mapping[str, set[int]], gang: GangRequest
    ) -> bool:
        """True when GPUs claimed by reservations not yet written (held, but in no listed
        reservation) are all that keeps the gang from fitting."""
        committed: dict[str, set[int]] = {}
        for res in self.store.list():
            for node, gpus in res.gpus().items():
                committed.setdefault(node, set()).update(gpus)
        settled = {n: g & committed.get(n, set()) for n, g in held.items()}
        if settled == {n: set(g) for n, g in held.items()}:
            return False  # nothing in flight
        return self.solver(exclude_held(bound, settled), gang).feasible

    def _await_reservation(self, key: GangKey, *, backoff: int = 0) -> GangReservation | None:
        """The gang's reservation if another admission writes it within a short wait.

        ``backoff`` > 0: one jittered sleep of about ``backoff`` x 20 ms, then a look (a
        re-solve follows when there is none). 0: poll for up to ``settle_seconds``.
        """
        if backoff > 0:
            time.sleep(random.uniform(0.5, 1.5) * 0.02 * backoff)
            return self.store.get(key)
        deadline = time.monotonic() + self.settle_seconds
        while True:
            existing = self.store.get(key)
            if existing is not None or time.monotonic() >= deadline:
                return existing
            time.sleep(0.02)
