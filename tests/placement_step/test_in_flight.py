"""The in-flight analysis of a gang that finds no room (``GangReserver._in_flight_blocks``:
are GPUs claimed by reservations not yet written all that keeps it from fitting?) answers
as the plain computation does — held GPUs intersected with every listed reservation's,
compared with the held map, then a solve without the in-flight GPUs — over random clusters,
reservations and claims in flight."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Mapping
from typing import Any

from test_placement_memo import key, node

from gputopo.cluster.reservations import InMemoryReservationStore, ReservationConflict
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState, Placement, ReplicaSlot
from webhook.placement.fitting import exclude_held
from webhook.placement.reserve import GangReserver


class WithClaimsInFlight:
    """The in-memory store as a store whose claims precede their reservations (the
    Kubernetes store's ``claims_in_flight``): the reserver then runs the analysis."""

    claims_in_flight = True

    def __init__(self, store: InMemoryReservationStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def plain(store: InMemoryReservationStore, bound: list[NodeState],
          held: Mapping[str, frozenset[int]], gang: GangRequest) -> bool:
    committed: dict[str, set[int]] = {}
    for res in store.list():
        for n, gpus in res.gpus().items():
            committed.setdefault(n, set()).update(gpus)
    settled = {n: g & committed.get(n, set()) for n, g in held.items()}
    if settled == {n: set(g) for n, g in held.items()}:
        return False
    return solve(exclude_held(bound, settled), gang).feasible


def test_in_flight_analysis_answers_as_the_plain_computation() -> None:
    rng = random.Random(5)
    answers = []
    for round_ in range(80):
        bound = [node(f"n{i}") for i in range(rng.randrange(2, 7))]
        store = InMemoryReservationStore()
        reserver = GangReserver(WithClaimsInFlight(store))  # type: ignore[arg-type]
        for j in range(rng.randrange(0, 8)):
            n = rng.choice(bound).name
            gpus = tuple(sorted(rng.sample(range(8), rng.randrange(1, 5))))
            with contextlib.suppress(ReservationConflict):  # a GPU taken: none reserved
                store.reserve(key(100 * round_ + j),
                              Placement(True, (ReplicaSlot(0, n, gpus),), 1.0, "t"))
        held = {n: set(g) for n, g in store.held_gpus().items()}
        for n in bound:  # claims of reservations still being written
            if rng.random() < 0.4:
                held.setdefault(n.name, set()).update(rng.sample(range(8),
                                                                 rng.randrange(1, 5)))
        frozen = {n: frozenset(g) for n, g in held.items()}
        gang = GangRequest(rng.choice((1, 2, 4)), rng.choice((1, 2, 4, 8)))
        got = reserver._in_flight_blocks(bound, frozen, gang)
        assert got == plain(store, bound, frozen, gang), round_
        # with the nodes the gang was just solved on (held marked): only in-flight nodes redone
        assert reserver._in_flight_blocks(bound, frozen, gang,
                                          exclude_held(bound, frozen)) == got, round_
        answers.append(got)
    assert True in answers and False in answers  # both answers were exercised


def test_in_flight_analysis_solves_with_the_pods_resource_caps() -> None:
    """Without the in-flight claims the gang's GPUs would be free, but its pods' CPUs do
    not fit: the analysis must say the claims are not what blocks it (else the gang waits
    for a reservation that will never be its own)."""
    from gputopo.cluster.node_resources import NodeResources

    room = NodeResources({"cpu": 94000, "pods": 110}, {})
    bound = [node("n0", resources=room), node("n1", resources=room)]
    reserver = GangReserver(WithClaimsInFlight(InMemoryReservationStore()))  # type: ignore[arg-type]
    held = {"n0": frozenset(range(8)), "n1": frozenset(range(8))}  # all claimed in flight
    gang = GangRequest(2, 1)
    assert reserver._in_flight_blocks(bound, held, gang, demand={"cpu": 60000, "pods": 1})
    assert not reserver._in_flight_blocks(bound, held, gang,
                                          demand={"cpu": 95000, "pods": 1})
    assert not reserver._in_flight_blocks(bound, held, gang, exclude_held(bound, held),
                                          demand={"cpu": 95000, "pods": 1})
