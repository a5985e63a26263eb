"""Solve a whole gang and reserve it: the one code path the admission step and the queue share.

Why one module: a gang is placed either at its first GPU pod's admission
(:mod:`webhook.placement.step`) or later, when GPUs free up, by the placement queue
(:mod:`webhook.queue`). Both must choose GPUs the same way (the pod's node constraints, GPUs
held by reservations subtracted, the same solver) and both must claim them through the same
compare-and-swap :class:`~gputopo.cluster.reservations.ReservationStore`, so that the
webhook replicas and the queue never hand out one GPU twice. :class:`GangReserver` is that
shared piece; callers pass the cluster reader, the pod whose constraints decide for the gang
(the gang's first GPU pod), the gang key and the :class:`GangRequest`. The nodes a pod fits
and their free GPUs are worked out in :mod:`webhook.placement.fitting`, the waiting rule's
reference and bar in :mod:`webhook.placement.good_enough` (which the reserver inherits: its
memos live as long as the reserver); the reserver keeps the fitting answers between gangs,
:func:`gang_nodes` (the nodes a gang is judged against) and :meth:`GangReserver.judge` (the
solve and its judgement without the claim, which the admission step's preview and
``gputopo queue`` take too).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from itertools import compress
from operator import is_not
from typing import Any, NamedTuple

from gputopo.cluster.node_resources import (
    Limits,
    ResourceCaps,
    pod_demand,
    solve_fitting,
)
from gputopo.cluster.node_volumes import Volumes, pod_volumes
from gputopo.cluster.reservations import (
    GangKey,
    GangReservation,
    ReservationConflict,
    ReservationStore,
    ReservationUnavailable,
)
from gputopo.cluster.reserved_requests import pending_limits
from gputopo.cluster.source import ClusterReader
from gputopo.placement.generations import solve_models
from gputopo.placement.solver import GroupedNodes
from gputopo.placement.types import (
    GangRequest,
    NodeState,
    Placement,
    SharesMemo,
    with_transport_shares,
)
from gputopo.placement.waiting import (
    DEFAULT_MIN_SHARE,
    node_kind,
    starts,
)
from gputopo.topology.transport import TransportShares
from webhook.placement import network
from webhook.placement.fitting import (
    FIT_MEMO_SIZE,
    Fit,
    Free,
    HeldMemo,
    exclude_held,
    fit_nodes,
    kept_nodes,
    pod_constraints,
    refreshed_fit,
    same_nodes,
)
from webhook.placement.good_enough import GoodEnough, Solver, Unplaced

log = logging.getLogger(__name__)

#: Re-solves after a ReservationConflict before the gang is declared unplaceable. Each
#: conflict means another admission won a GPU we wanted; a handful of rounds settles any
#: realistic burst, and the bound keeps one admission well inside the webhook timeout.
DEFAULT_MAX_ATTEMPTS = 5
#: How long a gang that found the cluster full right after a conflict waits for a concurrent
#: admission of the same gang to finish writing its reservation (claims, then the gang
#: record: a few API round trips).
DEFAULT_SETTLE_SECONDS = 0.5
#: The default ``minShare`` of the waiting rule (gputopo.placement.waiting; docs/queue.md),
#: under its old name for callers that pass it as ``good_share``.
GOOD_SHARE = DEFAULT_MIN_SHARE


def default_solver() -> Solver:
    """The solver with the GPU-generation rules (gputopo.placement.generations): on a
    cluster of one GPU model, the exact solver's answer itself."""
    return solve_models


def usable_pair(fit: list[NodeState], free: Sequence[NodeState],
                net: network.GangNetwork | None, no_ports: Mapping[str, str] | None = None
                ) -> tuple[list[NodeState], Sequence[NodeState]]:
    """``fit`` and its held-marked copy ``free`` (position for position) without the nodes
    the gang's network rules out (an unmovable host port held there; ``no_ports``: port
    range used up). The lists come back as they are when no node is ruled out."""
    if net is None or (not net.need.fixed and not no_ports):
        return fit, free  # nothing to rule out: no pass over (or copy of) every node
    keep = net.usable(fit)
    if len(keep) == len(fit) and not no_ports:
        return fit, free
    kept = {n.name for n in keep if not no_ports or n.name not in no_ports}
    return [n for n in fit if n.name in kept], [f for f in free if f.name in kept]


class GangNodes(NamedTuple):
    """The nodes a gang is judged against (:func:`gang_nodes`)."""

    bound: list[NodeState]  # the fitting nodes its network allows
    free: Sequence[NodeState]  # ``bound`` with reserved GPUs marked used, position for position
    refused: dict[str, str]  # node name -> why the pods' volumes cannot reach it
    reach: list[NodeState]  # ``bound`` without ``refused``: what "good" is judged against


def gang_nodes(fit: list[NodeState], free: Sequence[NodeState],
               net: network.GangNetwork | None, volumes: Volumes,
               no_ports: Mapping[str, str] | None = None) -> GangNodes:
    """The nodes a gang is judged against, from its pod's fitting nodes ``fit`` and their
    held-marked copy ``free``: those its network allows (:func:`usable_pair`), the ones its
    pods' ``volumes`` cannot reach (``refused``: the solver leaves them out) and the rest
    (``reach``).

    Why one function: the gang's bar for a good one-node placement
    (:meth:`GangReserver.good_bar`) and the waiting check (:meth:`GangReserver.not_good`)
    are measured against the reference of the kinds of ``reach``, not of every fitting
    node: servers a volume keeps the gang off must not set its bar (many unreachable NVLink
    servers would make it wait for a speed it can never get here). Called by
    :meth:`GangReserver.judge`, which the live path (:meth:`GangReserver.reserve`), the
    preview (audit mode, ``dryRun`` reviews: ``PlacementStep._preview``) and ``gputopo
    queue``'s report all solve through, so a dry run and the report answer what the live
    admission and the queue's pass do."""
    bound, free = usable_pair(fit, free, net, no_ports)
    refused = volumes.refusals(free)
    reach = [n for n in bound if n.name not in refused] if refused else bound
    return GangNodes(bound=bound, free=free, refused=refused, reach=reach)


class Judged(NamedTuple):
    """A gang solved on the nodes it is judged against, and judged (:meth:`GangReserver.judge`)."""

    nodes: GangNodes
    placement: Placement  # the solver's answer on ``nodes.free``
    poor: Unplaced | None  # why a feasible ``placement`` is not good enough to take now
    pending: Limits  # nodes where other gangs' pods still coming limit this gang's


def _slot_ports(placement: Placement, fit: Fit) -> dict[str, frozenset[tuple[str, int]]]:
    """Host ports held on the placement's nodes (all the network plan looks up), without a
    pass over every node of the cluster."""
    out = {}
    for s in placement.slots:
        at = fit.where.get(s.node)
        if at is not None:
            out[s.node] = fit.fit[at].host_ports
    return out


def kept_free(free: Sequence[NodeState], avoid: frozenset[str]) -> Sequence[NodeState]:
    """``free`` with every GPU of the nodes in ``avoid`` marked used."""
    full = [replace(n, used=frozenset(n.topology.indices)) for n in free if n.name in avoid]
    if isinstance(free, GroupedNodes):
        return free.replaced(full)
    by_name = {n.name: n for n in full}
    return [by_name.get(n.name, n) for n in free]


def ruled_out(reason: str, fit: Sequence[NodeState], excluded: int) -> str:
    """``reason``, plus how many nodes the pod's own constraints left out."""
    if not excluded:
        return reason
    if not fit:
        return (f"none of the {excluded} topology node(s) fits the pod's nodeSelector, "
                f"required node affinity and tolerations")
    return (f"{reason} ({excluded} node(s) left out: the pod's nodeSelector, required node "
            f"affinity or missing tolerations rule them out)")


class GangReserver(GoodEnough):
    """Solve + reserve with bounded re-solving on conflict (see :meth:`reserve`)."""

    def __init__(
        self,
        store: ReservationStore,
        *,
        solver: Solver | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    ) -> None:
        super().__init__()
        self.store = store
        self._solver = solver
        self.max_attempts = max(1, int(max_attempts))
        self.settle_seconds = max(0.0, float(settle_seconds))
        self.held_memo: HeldMemo = {}  # exclude_held's copies, reused across gangs
        self.caps = ResourceCaps()  # the nodes the gang's pods' other requests limit
        # Per pod constraints: the nodes they admit, and those nodes with reserved GPUs
        # marked used; both checked against the reader's node objects (identity) and the
        # store's held-GPU revision on every use, so a change anywhere is seen at once.
        self._fits: dict[str, Fit] = {}
        self._frees: dict[str, Free] = {}
        # the last grouping handed to the solver per memo key (``_regroup``)
        self._grouped: dict[str, GroupedNodes] = {}
        # per policy share table: each node's copy under it, reused while the node stays
        self._shared: dict[TransportShares, SharesMemo] = {}

    @property
    def solver(self) -> Solver:
        if self._solver is None:
            self._solver = default_solver()
        return self._solver

    def fit_and_free(self, cluster: ClusterReader, pod: Mapping[str, Any],
                     shares: TransportShares | None = None
                     ) -> tuple[list[NodeState], Sequence[NodeState], int]:
        """``pod``'s fitting nodes (:func:`nodes_for`), the same nodes with reserved GPUs
        marked used, and how many nodes its constraints left out. Both lists may be
        remembered for the next gang: read them, never modify them."""
        entry, free, excluded, _ = self._fit_and_free(cluster, pod, shares)
        return entry.fit, free, excluded

    def _fit_entry(self, cluster: ClusterReader, pod: Mapping[str, Any],
                   shares: TransportShares | None = None) -> tuple[Fit, int, str]:
        """The remembered fit of ``pod``'s constraints on the reader's nodes now, as a
        policy with transport ``shares`` sees them, its count of left-out nodes and the
        memo key (constraints and shares)."""
        nodes = cluster.node_states()
        constraints = pod_constraints(pod)
        # repr tells 1, 1.0 and True apart and every value of a parsed pod is JSON: equal
        # texts are equal constraints (a different key order merely misses the memo); the
        # shares are part of the key: the nodes' effective networks depend on them
        key = repr((constraints.selector, constraints.terms, constraints.tolerations,
                    shares or (), constraints.handout))
        hit = self._fits.get(key)
        if hit is not None:
            if same_nodes(hit.source, nodes):
                return hit, hit.excluded, key
            refit = refreshed_fit(hit, nodes, constraints, shares)
            if refit is not None:
                self._fits[key] = refit
                return refit, refit.excluded, key
        fit, own = fit_nodes(cluster, nodes, constraints)
        if shares:
            memo = self._shared.get(shares)
            if memo is None:
                if len(self._shared) >= FIT_MEMO_SIZE:
                    self._shared.clear()
                memo = self._shared[shares] = {}
            fit = with_transport_shares(fit, shares, memo)
        entry = Fit(source=kept_nodes(nodes), fit=fit, excluded=len(nodes) - len(fit),
                     where={n.name: i for i, n in enumerate(fit)})
        if own:  # answers read from Node objects may change without the node states
            if len(self._fits) >= FIT_MEMO_SIZE:
                self._fits.clear()
                self._frees.clear()
            self._fits[key] = entry
        return entry, entry.excluded, key

    def _fit_and_free(self, cluster: ClusterReader, pod: Mapping[str, Any],
                      shares: TransportShares | None = None
                      ) -> tuple[Fit, Sequence[NodeState], int, Mapping[str, Any]]:
        """``pod``'s fitting nodes, the same with reserved GPUs marked used (position for
        position, never to be modified: they may be remembered), how many nodes its
        constraints left out, and the held GPUs (node → indices) marked.

        A store that publishes held GPUs by revision (``held_snapshot``) says which nodes
        changed since the last gang: only those are redone, instead of a pass over every
        node and every held GPU of the cluster for each new gang."""
        entry, excluded, key = self._fit_entry(cluster, pod, shares)
        snapshot = getattr(self.store, "held_snapshot", None)
        if snapshot is None:
            gpus = self.store.held_gpus()
            free = self._regroup(key, exclude_held(entry.fit, gpus, self.held_memo))
            return entry, free, excluded, gpus
        last = self._frees.get(key)
        if last is not None and last.fit is entry.fit:
            held = snapshot(last.revision)
            if held.changed is not None:
                if not held.changed:
                    return entry, last.free, excluded, held.gpus
                redone = [entry.fit[at] for at in map(entry.where.get, held.changed)
                          if at is not None]
                free = last.free.replaced(exclude_held(redone, held.gpus, self.held_memo,
                                                       keep_memo=True))
                self._grouped[key] = free
                self._remember_free(key, entry, held.revision, free)
                return entry, free, excluded, held.gpus
        else:
            held = snapshot(None)
        free = self._regroup(key, exclude_held(entry.fit, held.gpus, self.held_memo))
        self._remember_free(key, entry, held.revision, free)
        return entry, free, excluded, held.gpus

    def _regroup(self, key: str, free: list[NodeState]) -> GroupedNodes:
        """``free`` grouped for the solver: the last grouping of the same memo key with the
        nodes that are other objects now put in (same names at the same places), else
        grouped anew.

        Why: a store without a change log of held GPUs (the Kubernetes store) and a live
        view, which replaces a node's object whenever a pod binds there, both hand over a
        fresh list for every new gang; but :func:`exclude_held` and the reader return the
        very same objects for the nodes that did not change, so a pointer walk finds the few
        that did, and the solver's grouping, tallies and best one-node shares carry over.
        """
        last = self._grouped.get(key)
        if last is not None and len(last) == len(free):
            at = list(compress(range(len(free)), map(is_not, last, free)))
            if len(at) <= len(free) // 4 and all(last[i].name == free[i].name for i in at):
                grouped = last.replaced([free[i] for i in at]) if at else last
                self._grouped[key] = grouped
                return grouped
        grouped = GroupedNodes(free)
        if len(self._grouped) >= FIT_MEMO_SIZE:
            self._grouped.clear()
        self._grouped[key] = grouped
        return grouped

    def _remember_free(self, key: str, entry: Fit, revision: int,
                       free: GroupedNodes) -> None:
        if self._fits.get(key) is entry:  # only for a remembered fit
            self._frees[key] = Free(fit=entry.fit, revision=revision, free=free)

    def reserved_limits(self, nodes: Sequence[NodeState], demand: Mapping[str, int],
                        gang: GangRequest) -> Limits:
        """The nodes of ``nodes`` where the requests of reserved slots whose pods do not
        exist yet limit how many of ``gang``'s pods (each asking for ``demand``) a node
        holds (:mod:`gputopo.cluster.reserved_requests`; ``pending`` of
        :func:`solve_fitting`): another gang's pods still coming hold their CPU and memory
        as their GPUs are held."""
        return pending_limits(nodes, self.store.pending_requests(), demand, gang.per_node)

    def judge(self, fit: list[NodeState], free: Sequence[NodeState], gang: GangRequest,
              demand: Mapping[str, int], volumes: Volumes, *,
              net: network.GangNetwork | None = None,
              no_ports: Mapping[str, str] | None = None, good_share: float | None = None,
              typical: bool = True, pack_share: float | None = None) -> Judged:
        """``gang`` solved and judged as :meth:`reserve` solves and judges it, without side
        effects: from the pod's fitting nodes ``fit`` and their held-marked copy ``free``
        (:meth:`fit_and_free`), the nodes it is judged against (:func:`gang_nodes`), its bar
        for a good one-node placement (``pack_share``: :meth:`good_bar` on ``reach``), the
        solve with one pod's non-GPU requests ``demand``, the requests of other gangs' pods
        still coming (:meth:`reserved_limits`) and the nodes its ``volumes`` refuse, and
        whether a feasible placement is good enough to take now (``good_share``,
        ``typical``: :meth:`not_good` on ``reach``). Parameters as :meth:`reserve`'s.

        Why one method: :meth:`reserve` takes the placement it answers, and ``gputopo
        queue``'s WHY NOT NOW (webhook/queue/report.py) says from it what the queue's next
        pass would do. A report that solved its own way said "fits now" for gangs the pass
        leaves waiting (their volumes or host ports keep them off the nodes with room) and
        quoted a reference made of nodes they cannot use."""
        nodes = gang_nodes(fit, free, net, volumes, no_ports)
        solved = (gang if pack_share is None else
                  self.good_bar(nodes.reach, gang, pack_share, demand))
        pending = self.reserved_limits(nodes.free, demand, gang)
        placement = solve_fitting(self.solver, nodes.free, solved, demand, self.caps,
                                  source=nodes.bound, pending=pending,
                                  refused=nodes.refused, notes=volumes.notes)
        poor = None
        if placement.feasible and good_share is not None:
            poor = self.not_good(placement, nodes.reach, gang, good_share, demand,
                                 typical=typical)
        return Judged(nodes=nodes, placement=placement, poor=poor, pending=pending)

    def reserve(
        self, *, cluster: ClusterReader, pod: Mapping[str, Any], key: GangKey,
        gang: GangRequest, good_share: float | None = None,
        net: network.GangNetwork | None = None, shares: TransportShares | None = None,
        typical: bool = True, pack_share: float | None = None,
        avoid: frozenset[str] = frozenset(),
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
        gang's ideal bandwidth (:meth:`not_good`) is not taken (None: take the best there is);
        callers take it from the gang's waiting rule (``WaitingRule.start_share``), and
        ``typical`` from ``waiting.against_typical`` (False: the floor of ``takeBest``,
        measured against the slowest kind).

        ``net``: the gang's network plan: nodes holding a host port the gang cannot move are
        left out, the plan is decided from the solver's slots (ports derived from GPUs) and
        stored with the reservation; a node whose port range is used up is left out and the
        gang re-solved.

        ``shares``: the admitting policy's transport shares (``placement.transportShare``):
        the solve, the predicted bandwidth and the "good" bar all see the nodes' networks
        as that policy rates them.

        ``pack_share``: the policy's ``minShare``: the gang is solved with that share of its
        typical reference as its bar for a good one-node placement (:meth:`good_bar`;
        among good ones packing decides); None: bandwidth first.

        ``avoid``: nodes a starving gang could use well (:meth:`kept_for`): their GPUs are
        not taken (as if all were held), the gang is judged as ever.
        """
        last = ""
        try:  # abandoned gangs free their GPUs before we look for free ones
            self.store.expire()
        except ReservationUnavailable as exc:
            log.warning("placement: expiring reservations failed (next gang retries): %s", exc)
        no_ports: dict[str, str] = {}  # nodes whose port range is used up → why
        demand = pod_demand(pod)
        volumes = pod_volumes(cluster, pod)
        for attempt in range(1, self.max_attempts + 1):
            entry, free, excluded, held = self._fit_and_free(cluster, pod, shares)
            if avoid:
                free = kept_free(free, avoid)
            judged = self.judge(entry.fit, free, gang, demand, volumes, net=net,
                                no_ports=no_ports, good_share=good_share, typical=typical,
                                pack_share=pack_share)
            bound, free, placement = judged.nodes.bound, judged.nodes.free, judged.placement
            if not placement.feasible:
                # After a conflict, or when GPUs claimed by a reservation still being written
                # stand in the way, they may be going to this very gang: give it a moment.
                # The look for the gang's reservation comes AFTER the in-flight analysis
                # (which lists reservations), so a reservation written meanwhile is seen.
                waiting = bool(last) or self._in_flight_blocks(bound, held, gang, free,
                                                               demand)
                existing = self._await_reservation(key) if waiting else self.store.get(key)
                if existing is not None:
                    return existing, False
                reason = placement.reason or "no feasible placement"
                if no_ports:
                    reason += "; " + "; ".join(sorted(no_ports.values()))
                return Unplaced(ruled_out(reason, bound, excluded))
            if judged.poor is not None:
                existing = self.store.get(key)
                return (existing, False) if existing is not None else judged.poor
            plan = (net.decide(placement.slots, _slot_ports(placement, entry))
                    if net is not None else None)
            if isinstance(plan, network.PortsUsedUp):
                no_ports[plan.node] = plan.reason
                continue
            try:
                res = self.store.reserve(key, placement,
                                         order=net.order() if net is not None else (),
                                         network=plan.to_json() if plan is not None else None,
                                         requests=demand)
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

    def kept_for(self, nodes: Sequence[NodeState], gang: GangRequest, min_share: float
                 ) -> frozenset[str]:
        """The nodes a starving ``gang`` keeps from the gangs behind it: among the kinds on
        which its best (every GPU free) reaches ``min_share`` of its waiting rule's typical
        reference (where it runs well: never the floor of ``takeBest``, which would steer
        it onto the hardware the floor merely tolerates), the slowest, the fewest nodes of
        one kind in one zone that hold it, those with the most GPUs free now (they drain
        first; as EASY backfill reserves for the head job the nodes that free up first);
        of one kind across zones when no zone has enough; every node of those kinds when
        no kind alone holds it; none when it fits nowhere. (gputopo.placement.starvation)"""
        ref = self.ideal_speed(nodes, gang, reference=True)
        if ref is None:
            return frozenset()
        kinds: dict[Hashable, list[NodeState]] = {}
        for n in nodes:
            kinds.setdefault(node_kind(n), []).append(n)
        rated = [(best, of_kind) for of_kind in kinds.values()
                 if (best := self.ideal_speed(of_kind, gang)) is not None
                 and starts(best, ref, min_share, gang.compute_share)]
        # the slowest good kind first: what the others lose least by
        good = [of_kind for _, of_kind in sorted(
            rated, key=lambda r: (r[0].tflops or 0.0, r[0].gbps, r[1][0].name))]
        if not good:
            return frozenset(n.name for n in nodes)
        held = self.store.held_gpus()

        def free(n: NodeState) -> int:
            return len(n.topology.gpus) - len(set(n.used) | held.get(n.name, set()))

        per_node = gang.per_node * gang.gpus_per_replica
        for scope in ("zone", "kind"):
            best_free, chosen = -1, None
            for of_kind in good:
                groups: dict[object, list[NodeState]] = {}
                for n in of_kind:
                    groups.setdefault(n.zone if scope == "zone" else None, []).append(n)
                for group in groups.values():
                    take, gpus = [], 0
                    for n in sorted(group, key=lambda n: (-free(n), n.name)):
                        if gpus >= gang.total_gpus:
                            break
                        take.append(n)
                        gpus += min(len(n.topology.gpus), per_node)
                    got = sum(free(n) for n in take)
                    if gpus >= gang.total_gpus and got > best_free:
                        best_free, chosen = got, take
                if chosen is not None:
                    return frozenset(n.name for n in chosen)
            if chosen is not None:
                return frozenset(n.name for n in chosen)
        return frozenset(n.name for of_kind in good for n in of_kind)

    def _in_flight_blocks(self, bound: Sequence[NodeState], held: Mapping[str, Any],
                          gang: GangRequest, free: Sequence[NodeState] | None = None,
                          demand: Mapping[str, int] | None = None) -> bool:
        """True when GPUs claimed by reservations not yet written (held, but in no listed
        reservation) are all that keeps the gang from fitting. A store that records every
        claim with its reservation at once (``claims_in_flight`` False) has none.

        ``free``: ``bound`` with ``held`` marked used, position for position (what the
        gang was just solved on): then only the nodes with claims in flight are redone for
        the second solve, not every node of the cluster. ``demand``: one pod's non-GPU
        requests, which limit the second solve as they did the first."""
        if not getattr(self.store, "claims_in_flight", True):
            return False
        committed: dict[str, set[int]] = {}
        for res in self.store.list():
            for node, gpus in res.gpus().items():
                committed.setdefault(node, set()).update(gpus)
        none: frozenset[int] = frozenset()
        # the nodes holding a GPU no listed reservation holds: claims in flight
        flight = {n for n, g in held.items() if not g <= committed.get(n, none)}
        if not flight:
            return False
        if free is None:
            settled = {n: g & committed.get(n, set()) for n, g in held.items()}
            return solve_fitting(self.solver, exclude_held(bound, settled), gang,
                                 demand or {}).feasible
        # elsewhere every held GPU is settled, so ``free`` already has the node as the
        # second solve must see it
        settled = {n: frozenset(held[n]) & committed.get(n, none) for n in flight}
        nodes = [exclude_held([b], settled)[0] if b.name in flight else f
                 for b, f in zip(bound, free, strict=True)]
        return solve_fitting(self.solver, nodes, gang, demand or {},
                             pending=self.reserved_limits(free, demand or {}, gang)).feasible

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
