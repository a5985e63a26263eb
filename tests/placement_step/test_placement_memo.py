"""The placement step's remembered bookkeeping never goes stale.

The reserver remembers, per pod constraints, the nodes a pod fits and those nodes with
reserved GPUs marked used, and per policy transport-share table each node's copy under it;
the in-memory store publishes its held GPUs per node with a log
of what changed and keeps a lower bound on the next expiry. Each test changes one thing
the memos depend on (a reservation made, released, expired or moved; a node object
replaced; the change log overrun; the admitting policy's transport shares) and checks
that the very next gang sees it, against the plain computation (:func:`nodes_for` +
:func:`exclude_held` over ``held_gpus()``) or by where the solver puts the next gang.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import gputopo.cluster.reservations as reservations
from gputopo.cluster.node_fit import NodeFacts
from gputopo.cluster.reservations import GangKey, InMemoryReservationStore, ReplicaKey
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState, Placement, ReplicaSlot
from gputopo.topology.load import read_topology_file
from gputopo.topology.transport import TransportShares
from webhook.placement.fitting import exclude_held, nodes_for
from webhook.placement.reserve import GangReserver, Unplaced

TOPOLOGIES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
DGX = read_topology_file(str(TOPOLOGIES / "dgx1-v100.txt"))


class Reader:
    """A cluster reader over a node list the test replaces at will (as a watch would)."""

    def __init__(self, nodes: list[NodeState]) -> None:
        self.nodes = nodes
        self.objects: dict[str, dict[str, Any]] = {}

    def node_states(self) -> list[NodeState]:
        return list(self.nodes)

    def object(self, *, api_version: str, kind: str, namespace: str | None,
               name: str) -> dict[str, Any] | None:
        return self.objects.get(name)

    def namespace(self, name: str) -> dict[str, Any] | None:
        return None


def node(name: str, *, pool: str = "a", used: frozenset[int] = frozenset(),
         facts: bool = True, **kw: Any) -> NodeState:
    labels = {"pool": pool, "kubernetes.io/hostname": name}
    f = NodeFacts.of({"metadata": {"name": name, "labels": labels}}) if facts else None
    return NodeState(name=name, topology=DGX, used=used, facts=f, **kw)


def pod(pool: str | None = None) -> dict[str, Any]:
    return {"spec": {"nodeSelector": {"pool": pool}} if pool else {}}


def key(i: int) -> GangKey:
    return GangKey("ns", "PyTorchJob", f"job-{i}", f"uid-{i}")


def plain(reader: Reader, store: InMemoryReservationStore, p: dict[str, Any],
          shares: TransportShares | None = None) -> list[tuple[Any, ...]]:
    """What the reserver must hand the solver, computed from scratch."""
    fit, _ = nodes_for(reader, p, shares)
    return [facts_of(n) for n in exclude_held(fit, store.held_gpus())]


def facts_of(n: NodeState) -> tuple[Any, ...]:
    return (n.name, n.used, n.topology is DGX, n.zone, n.rack, n.network_gbps,
            n.network_transport, n.facts, n.host_ports, n.network_efficiency,
            n.transport_share, n.effective_gbps)


def remembered(reserver: GangReserver, reader: Reader, p: dict[str, Any],
               shares: TransportShares | None = None) -> list[tuple[Any, ...]]:
    _, free, _ = reserver.fit_and_free(reader, p, shares)
    return [facts_of(n) for n in free]


#: Transport-share tables of the policies the tests admit under (placement.transportShare).
SHARES: tuple[TransportShares | None, ...] = (
    None, (("rdma", 0.8),), (("gdr", 0.99), ("rdma", 0.6), ("tcp", 0.4)))


def place(gpus: dict[str, tuple[int, ...]]) -> Placement:
    return Placement(feasible=True, slots=tuple(
        ReplicaSlot(i, n, g) for i, (n, g) in enumerate(sorted(gpus.items()))))


class NoChangeLog:
    """The in-memory store without ``held_snapshot``, as the Kubernetes store is: the
    reserver gets a fresh held-GPU map for every gang and must find what changed itself."""

    claims_in_flight = False

    def __init__(self, store: InMemoryReservationStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name == "held_snapshot":
            raise AttributeError(name)
        return getattr(self._store, name)


GANGS = (GangRequest(1, 1), GangRequest(2, 2), GangRequest(1, 8), GangRequest(3, 4))


@pytest.mark.parametrize("change_log", [True, False], ids=["change-log", "no-change-log"])
def test_every_store_change_is_seen_by_the_next_gang_like_a_fresh_computation(
        change_log: bool) -> None:
    rng = random.Random(14)
    clock = [1000.0]
    store = InMemoryReservationStore(ttl_seconds=50, clock=lambda: clock[0])
    transports = ("tcp", "rdma", "gdr")
    reader = Reader([node(f"n{i}", pool="ab"[i % 2], network_transport=transports[i % 3])
                     for i in range(12)])
    reserver = GangReserver(store if change_log else NoChangeLog(store))  # type: ignore[arg-type]
    pods = [pod(), pod("a"), pod("b")]
    live: list[int] = []
    for step in range(400):
        op = rng.random()
        if op < 0.4:  # reserve 1-2 GPUs on a random node, if free
            n = f"n{rng.randrange(12)}"
            held = store.held_gpus().get(n, set())
            free = [g for g in range(8) if g not in held]
            if free:
                store.reserve(key(step), place({n: tuple(rng.sample(free, min(2, len(free))))}))
                live.append(step)
        elif op < 0.55 and live:
            store.release(key(live.pop(rng.randrange(len(live)))))
        elif op < 0.65 and live:  # a slot moves to free GPUs of another node
            k = key(rng.choice(live))
            res = store.get(k)
            if res is not None:
                target = f"n{rng.randrange(12)}"
                held = store.held_gpus().get(target, set())
                free = [g for g in range(8) if g not in held]
                if free:
                    store.move_slot(k, 0, target, (free[0],), from_node=res.slots[0].node)
        elif op < 0.75 and live:
            store.assign_slot(key(rng.choice(live)), ReplicaKey("worker", 0))
        elif op < 0.85:
            clock[0] += rng.choice((5.0, 40.0))
            store.expire()
        elif op < 0.95:  # a pod binds, or a node is relabelled: new node objects
            i = rng.randrange(12)
            reader.nodes[i] = node(f"n{i}", pool=rng.choice("ab"),
                                   used=frozenset(rng.sample(range(8), rng.randrange(3))),
                                   network_transport=rng.choice(transports))
        p = rng.choice(pods)
        shares = rng.choice(SHARES)  # gangs of policies with different transport shares
        assert remembered(reserver, reader, p, shares) == plain(reader, store, p, shares), step
        # and the grouping kept for the solver answers as the plain list does
        _, free, _ = reserver.fit_and_free(reader, p, shares)
        gang = GANGS[step % len(GANGS)]
        assert solve(free, gang) == solve(list(free), gang), step
        assert store.held_snapshot().gpus == {
            n: frozenset(g) for n, g in store.held_gpus().items()}


def test_released_expired_and_moved_gpus_are_free_for_the_very_next_gang() -> None:
    clock = [0.0]
    store = InMemoryReservationStore(ttl_seconds=100, clock=lambda: clock[0])
    reader = Reader([node("n0")])
    reserver = GangReserver(store)
    whole = GangRequest(1, 8)
    first = reserver.reserve(cluster=reader, pod=pod(), key=key(1), gang=whole)
    assert not isinstance(first, Unplaced)
    assert isinstance(reserver.reserve(cluster=reader, pod=pod(), key=key(2), gang=whole),
                      Unplaced)
    store.release(key(1))  # released: the next gang gets the node
    assert not isinstance(reserver.reserve(cluster=reader, pod=pod(), key=key(2),
                                           gang=whole), Unplaced)
    assert isinstance(reserver.reserve(cluster=reader, pod=pod(), key=key(3), gang=whole),
                      Unplaced)
    clock[0] = 100.0  # gang 2's pods never came: it expires before gang 3 is solved
    assert not isinstance(reserver.reserve(cluster=reader, pod=pod(), key=key(3),
                                           gang=whole), Unplaced)
    assert store.get(key(2)) is None
    # a slot moved off n0 frees its GPUs there
    reader.nodes = [node("n0"), node("n1")]
    store.release(key(3))
    half = GangRequest(1, 4)
    made = reserver.reserve(cluster=reader, pod=pod(), key=key(4), gang=half)
    assert not isinstance(made, Unplaced)
    res = made[0]
    reserver.reserve(cluster=reader, pod=pod(), key=key(5), gang=half)
    _, free, _ = reserver.fit_and_free(reader, pod())
    before = {n.name: n.used for n in free}
    store.move_slot(key(4), 0, "n1" if res.slots[0].node == "n0" else "n0", (4, 5, 6, 7),
                    from_node=res.slots[0].node)
    _, free, _ = reserver.fit_and_free(reader, pod())
    after = {n.name: n.used for n in free}
    assert after != before
    assert [facts_of(n) for n in free] == plain(reader, store, pod())


def test_a_replaced_node_object_invalidates_the_remembered_fit() -> None:
    store = InMemoryReservationStore()
    reader = Reader([node("n0", pool="a"), node("n1", pool="b")])
    reserver = GangReserver(store)
    fit, _, excluded = reserver.fit_and_free(reader, pod("a"))
    assert [n.name for n in fit] == ["n0"] and excluded == 1
    reader.nodes = [node("n0", pool="b"), reader.nodes[1]]  # relabelled: new object
    fit, _, excluded = reserver.fit_and_free(reader, pod("a"))
    assert list(fit) == [] and excluded == 2
    made = reserver.reserve(cluster=reader, pod=pod("a"), key=key(1), gang=GangRequest(1, 1))
    assert isinstance(made, Unplaced) and "none of the 2" in made.reason
    reader.nodes = [node("n0", pool="a"), node("n1", pool="a"), node("n2", pool="a")]
    assert [n.name for n in reserver.fit_and_free(reader, pod("a"))[0]] == ["n0", "n1", "n2"]


def test_nodes_without_facts_are_read_from_their_objects_every_time() -> None:
    """A reader of bare NodeStates: the answer comes from Node objects, which may change
    while the node states stay the same objects, so it is never remembered."""
    store = InMemoryReservationStore()
    bare = node("n0", facts=False)
    reader = Reader([bare])
    reader.objects["n0"] = {"metadata": {"name": "n0", "labels": {"pool": "a"}}}
    reserver = GangReserver(store)
    assert [n.name for n in reserver.fit_and_free(reader, pod("a"))[0]] == ["n0"]
    reader.objects["n0"] = {"metadata": {"name": "n0", "labels": {"pool": "b"}}}
    assert reader.nodes[0] is bare
    assert list(reserver.fit_and_free(reader, pod("a"))[0]) == []


def test_an_overrun_change_log_falls_back_to_a_full_pass(monkeypatch) -> None:
    monkeypatch.setattr(reservations, "HELD_LOG", 4)
    store = InMemoryReservationStore()
    reader = Reader([node(f"n{i}") for i in range(4)])
    reserver = GangReserver(store)
    reserver.fit_and_free(reader, pod())
    for i in range(10):  # more changes than the log keeps
        store.reserve(key(i), place({f"n{i % 4}": (i // 4,)}))
    assert store.held_snapshot(0).changed is None
    assert remembered(reserver, reader, pod()) == plain(reader, store, pod())


def test_expiry_bound_follows_a_ttl_restarted_earlier() -> None:
    """assign_slot restarts the TTL from the caller's ``now``, which may be earlier than
    the reservation's creation: the store's next-expiry bound must follow it down."""
    store = InMemoryReservationStore(ttl_seconds=100)
    store.reserve(key(1), place({"n0": (0,), "n1": (1,)}), now=1000.0)
    assert store.expire(now=500.0) == []
    store.assign_slot(key(1), ReplicaKey("worker", 0), now=0.0)  # expires at 100 now
    assert store.expire(now=200.0) == [key(1)]
    assert store.held_gpus() == {}


def test_a_policy_s_transport_shares_are_remembered_apart() -> None:
    """Two policies with different transport shares admit gangs on the same nodes: each
    sees the nodes' networks as it rates them, whichever asked first."""
    store = InMemoryReservationStore()
    reader = Reader([node("n0", network_transport="rdma", network_gbps=100.0),
                     node("n1", network_transport="gdr", network_gbps=100.0)])
    reserver = GangReserver(store)
    for shares, want in ((None, [50.0, 94.0]), ((("rdma", 0.9),), [90.0, 94.0]),
                         (None, [50.0, 94.0]), ((("gdr", 1.0), ("rdma", 0.7)), [70.0, 100.0])):
        fit, _, _ = reserver.fit_and_free(reader, pod(), shares)
        assert [n.effective_gbps for n in fit] == pytest.approx(want), shares
        _, free, _ = reserver.fit_and_free(reader, pod(), shares)
        assert [n.effective_gbps for n in free] == pytest.approx(want), shares


@pytest.mark.parametrize("change", ["network", "rack", "zone", "share"])
def test_ideal_bandwidth_follows_a_node_whose_network_or_place_changed(change) -> None:
    """The good-placement bar (GOOD_SHARE) compares against the gang's ideal bandwidth on
    the same nodes; a node's network, rack or zone changes it even when its topology
    object is the same."""
    store = InMemoryReservationStore()
    reserver = GangReserver(store)
    gang = GangRequest(2, 8)

    def nodes(**kw: Any) -> list[NodeState]:
        return [node("n0", **kw), node("n1", **kw)]

    slow = {"network": {"network_gbps": 10.0}, "rack": {"rack": "r1"},
            "zone": {"zone": "z1"}, "share": {"transport_share": 0.1}}[change]
    fast = {"network": {"network_gbps": 400.0}, "rack": {"rack": "r2"},
            "zone": {"zone": "z2"}, "share": {"transport_share": 1.0}}[change]
    a, b = nodes(**slow), nodes(**fast)
    assert reserver.ideal_bandwidth(a, gang) == solve(a, gang).bus_bandwidth_gbps
    assert reserver.ideal_bandwidth(b, gang) == solve(b, gang).bus_bandwidth_gbps
    assert reserver.ideal_bandwidth(a, gang) == solve(a, gang).bus_bandwidth_gbps
    if change in ("network", "share"):
        assert solve(a, gang).bus_bandwidth_gbps != solve(b, gang).bus_bandwidth_gbps
