"""One queue for every policy of the replays: the product's own admission and queue rules.

Why this module: a replay that compares placement policies must not also compare queues.
Every policy, gputopo and the baselines alike, goes through the same code here, built on
the product's pieces (as ``bench/queue_replay.py`` does):

- **admission**: :meth:`webhook.placement.reserve.GangReserver.reserve`, the solve +
  compare-and-swap reservation of the webhook, with the policy's solver in place of
  gputopo's; a gang that waits for a good placement waits behind a starving one
  (:mod:`gputopo.placement.starvation`) as the webhook's does. gputopo's gangs wait for
  a good placement as the product's do (the waiting rule,
  :mod:`gputopo.placement.waiting`: ``minShare`` of the gang's best bandwidth); a baseline
  takes any feasible placement (it has no such rule).
- **the queue**: a gang that got no placement waits; after every event (an arrival, a
  job's end) one pass of :func:`webhook.queue.gangs.serve_pass` (arrival order, backfill,
  starvation guard, the waiting rule after ``maxWaitSeconds``) places what it can, exactly
  as :class:`webhook.queue.placer.PlacementQueue` does. A gang the rule denies
  (``afterMaxWait: deny``) never runs.

Only the I/O is simulated: no API server, a gang "binds" the moment it is reserved.
tests/queue/test_replay_queue_equal.py holds this queue equal to the product's
(``PlacementQueue`` and the admission step on the API test double).

The nodes a gang may use can be narrowed per gang (``unfit``): the Alibaba replay counts
CPU and memory that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gputopo.cluster.node_fit import NodeFacts
from gputopo.cluster.reservations import GangKey, GangReservation, InMemoryReservationStore
from gputopo.placement.starvation import Waiter, holding
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.placement.waiting import WaitingRule, against_typical
from webhook.placement.reserve import GangReserver, Unplaced
from webhook.queue.gangs import (
    DEFAULT_STARVATION_SECONDS,
    PassResult,
    WaitingGang,
    serve_pass,
)

Policy = Callable[[Sequence[NodeState], GangRequest], Placement]
#: The product's default ``maxWaitSeconds`` (webhook/policy/schema.py).
DEFAULT_MAX_WAIT_SECONDS = 3600.0


@dataclass(frozen=True)
class Started:
    """A gang that got its GPUs: when, where, and which rule placed it."""

    key: GangKey
    at: float
    reservation: GangReservation
    how: str  # admission | queue | fallback (after maxWaitSeconds, below minShare)


class _Reader:
    """A ClusterReader of fixed nodes (usage lives in the reservation store), as the gang
    being placed sees them.

    ``never``: nodes the gang can never run on (e.g. less CPU than it asks in all): left
    out, as the product leaves out nodes a pod's nodeSelector rules out, so they count
    neither for its placement nor for its best bandwidth. ``blocked``: nodes it cannot use
    now (e.g. too little CPU left): handed over with every GPU taken, so the list keeps
    its length and every other node its object, and the reserver's memos (which go by
    node identity) carry over."""

    def __init__(self, nodes: Sequence[NodeState]) -> None:
        self.nodes = [n if n.facts is not None else _with_facts(n) for n in nodes]
        self.never: frozenset[str] = frozenset()
        self.blocked: frozenset[str] = frozenset()
        self._full: dict[str, NodeState] = {}
        self._last: tuple[frozenset[str], frozenset[str], list[NodeState]] = (
            frozenset(), frozenset(), self.nodes)

    def node_states(self) -> list[NodeState]:
        never, blocked = self.never, self.blocked
        if (never, blocked) == self._last[:2]:
            return self._last[2]
        out = [self._full_copy(n) if n.name in blocked else n for n in self.nodes
               if n.name not in never]
        self._last = (never, blocked, out)
        return out

    def _full_copy(self, n: NodeState) -> NodeState:
        hit = self._full.get(n.name)
        if hit is None:
            hit = self._full[n.name] = replace(n, used=frozenset(n.topology.indices))
        return hit

    def object(self, **_: Any) -> None:
        return None

    def namespace(self, name: str) -> None:
        return None


def _with_facts(n: NodeState) -> NodeState:
    """The node with the facts of a plain Node object (no labels, no taints): what the
    reserver's fit memo needs to keep its answer between gangs."""
    return replace(n, facts=NodeFacts.of({"metadata": {"name": n.name}}))


@dataclass
class GangQueue:
    """Admission + the placement queue for one policy on one cluster (module docstring).

    ``wait_for_good``: gangs follow the waiting rule ``rule`` (gputopo's ``whenFull:
    wait``); False: any feasible placement is taken (a baseline).
    ``unfit``: per gang, the names of nodes it can never use and of those it cannot use
    now (None: it may use all). ``packs``: gangs are solved with the rule's bar for a good
    one-node placement (``minShare`` of the typical reference; the product's admission and
    queue pass it for every gang, ``whenFull: admit`` too); False for a baseline, whose
    placement has no such term.
    """

    nodes: list[NodeState]
    policy: Policy
    wait_for_good: bool
    rule: WaitingRule = field(default_factory=WaitingRule)
    max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS
    starvation_seconds: float = DEFAULT_STARVATION_SECONDS
    unfit: Callable[[GangKey], tuple[frozenset[str], frozenset[str]]] | None = None
    packs: bool = True
    waiting: list[WaitingGang] = field(default_factory=list)
    denied: list[GangKey] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = InMemoryReservationStore(ttl_seconds=1e12)
        self.reserver = GangReserver(self.store, solver=self.policy)
        self.reader = _Reader(self.nodes)
        self.nodes = self.reader.nodes
        #: every GPU of the cluster: a starving gang larger holds no admission
        self.cluster_gpus = sum(len(n.topology.gpus) for n in self.nodes)
        #: what the last :meth:`serve` pass decided (the product's PassResult)
        self.last_pass = PassResult()

    # --- the events ----------------------------------------------------------------------
    def arrive(self, key: GangKey, gang: GangRequest, now: float) -> Started | None:
        """A gang's first GPU pod is admitted: placed now, or it waits (None): behind a
        starving gang (gputopo.placement.starvation, for gangs that wait for a good
        placement, as the product's admission), or for a placement."""
        avoid: frozenset[str] = frozenset()
        if self.wait_for_good and self.waiting:
            for w in holding((Waiter(str(g.key), g.key.uid, g.since, g.request.total_gpus,
                                     g.max_wait_seconds, g.request, g.rule)
                              for g in self.waiting),
                             uid=key.uid, now=now, cluster_gpus=self.cluster_gpus,
                             starvation_seconds=self.starvation_seconds):
                avoid |= self._kept(w.request, w.rule)
        made = self._reserve(key, gang, self.rule.start_share(overdue=False), typical=True,
                             avoid=avoid)
        if isinstance(made, GangReservation):
            return Started(key, now, made, "admission")
        self.waiting.append(WaitingGang(key, gang, now, self.max_wait_seconds,
                                        rule=self.rule))
        return None

    def release(self, key: GangKey) -> None:
        """The gang's job ended: its GPUs are free."""
        self.store.release(key)

    def serve(self, now: float) -> list[Started]:
        """One queue pass (its decisions in :attr:`last_pass`); who started."""
        out: list[Started] = []

        def place(g: WaitingGang, need: float) -> str | None:
            made = self._reserve(g.key, g.request, need,
                                 typical=against_typical(g.rule, need))
            if isinstance(made, Unplaced):
                return made.reason
            out.append(Started(g.key, now, made,
                               "queue" if need >= g.rule.min_share else "fallback"))
            return None

        def place_avoiding(g: WaitingGang, need: float, avoid: frozenset[str]
                           ) -> str | None:
            made = self._reserve(g.key, g.request, need,
                                 typical=against_typical(g.rule, need), avoid=avoid)
            if isinstance(made, Unplaced):
                return made.reason
            out.append(Started(g.key, now, made,
                               "queue" if need >= g.rule.min_share else "fallback"))
            return None

        def give_up(g: WaitingGang, why: str) -> bool:
            self.denied.append(g.key)
            return True

        self.last_pass = PassResult()
        if self.waiting:
            result = self.last_pass = serve_pass(
                self.waiting, now=now, starvation_seconds=self.starvation_seconds,
                place=place, give_up=give_up,
                # the product's backfill around a starving gang, for gangs that wait for a
                # good placement; a baseline's queue stops behind it (no rule, no "good")
                keep=(lambda g: self._kept(g.request, g.rule))
                if self.wait_for_good else None,
                place_avoiding=place_avoiding)
            done = set(result.placed) | set(result.fallen_back) | set(result.denied)
            self.waiting[:] = [g for g in self.waiting if str(g.key) not in done]
        return out

    def held_gpus(self) -> dict[str, set[int]]:
        """node -> GPU indices held by running gangs."""
        return self.store.held_gpus()

    # --- helpers -------------------------------------------------------------------------
    def _kept(self, gang: GangRequest | None, rule: WaitingRule) -> frozenset[str]:
        """The nodes a starving gang could use well, as the product's queue and admission
        see them (``GangReserver.kept_for`` on every node; none for a gang larger than
        the cluster)."""
        if gang is None or gang.total_gpus > self.cluster_gpus:
            return frozenset()
        return self.reserver.kept_for(self.nodes, gang, rule.min_share)

    def _reserve(self, key: GangKey, gang: GangRequest, need: float, *, typical: bool,
                 avoid: frozenset[str] = frozenset()) -> GangReservation | Unplaced:
        self.reader.never, self.reader.blocked = (
            self.unfit(key) if self.unfit is not None else (frozenset(), frozenset()))
        made = self.reserver.reserve(cluster=self.reader, pod={}, key=key, gang=gang,
                                     good_share=need if self.wait_for_good else None,
                                     typical=typical,
                                     pack_share=self.rule.min_share if self.packs else None,
                                     avoid=avoid)
        return made if isinstance(made, Unplaced) else made[0]
