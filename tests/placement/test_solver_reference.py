"""The solver gives exactly the answers of its frozen reference copy on random clusters.

Why: the oracle test (test_solver_oracle.py) pins the optimum's *score* on clusters of up
to four nodes; this one pins the whole answer (node names, GPU indices, reason, details) on
clusters of 20-60 nodes with racks, zones, shared and equal-but-distinct topologies, so a
speed-up of the solver's bookkeeping can never change a placement. The reference is the
solver as it was before that rework (solver_reference.py, never edited).
"""

from __future__ import annotations

import random

import pytest
import solver_reference as reference
from solver_helpers import FIXTURE_FILES, fixture_topology

from gputopo.errors import InputError
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.topology.bandwidth import infer_generation
from gputopo.topology.model import Topology

#: (replicas, GPUs per replica): one-node shapes, spread one-GPU gangs, multi-node gangs.
SHAPES = ((1, 1), (1, 2), (1, 3), (1, 4), (1, 8), (2, 1), (4, 1), (8, 1), (2, 2), (3, 2),
          (2, 4), (2, 8), (4, 8), (12, 1), (6, 2))
CLUSTERS = 200


def _cut(full: Topology, positions: list[int]) -> Topology:
    """Some GPUs of a real node (driver indices kept): a small, odd-sized topology."""
    return Topology(
        gpus=tuple(full.gpus[p] for p in positions),
        links=tuple(tuple(full.links[a][b] for b in positions) for a in positions),
        generation=infer_generation(full),
    )


def _twin(topo: Topology) -> Topology:
    """An equal Topology that is a different object (as two parsed annotations are)."""
    return Topology(gpus=topo.gpus, links=topo.links, measured=topo.measured,
                    generation=topo.generation)


def _pool(rng: random.Random) -> list[Topology]:
    names = sorted(FIXTURE_FILES)
    pool = [fixture_topology(n) for n in rng.sample(names, rng.randint(1, 3))]
    if rng.random() < 0.5:
        full = fixture_topology(rng.choice(names))
        pool.append(_cut(full, sorted(rng.sample(range(len(full.gpus)), rng.randint(2, 6)))))
    if rng.random() < 0.3:
        pool.append(_twin(pool[0]))
    return pool


def _location(rng: random.Random, layout: str, i: int) -> tuple[str | None, str | None]:
    if layout == "one-rack":
        return "z1", "r1"
    if layout == "racks":  # racks of 4-8, two racks per zone
        rack = i // 6
        return f"z{rack // 2}", f"r{rack}"
    if layout == "one-zone":
        return "z1", rng.choice([None, "r1", "r2"])
    # ragged labels: missing zones or racks, a rack name reused in two zones
    return rng.choice([None, "z1", "z2"]), rng.choice([None, "r1", "r2", "r3"])


def random_cluster(rng: random.Random) -> list[NodeState]:
    """20-60 nodes of a few topologies, some racks and zones, random GPUs in use."""
    pool = _pool(rng)
    layout = rng.choice(["one-rack", "racks", "one-zone", "ragged"])
    busy = rng.choice([0.2, 0.5, 0.8, 0.97])
    nets = rng.choice([[25.0], [25.0, 100.0], [100.0, 200.0, 800.0, 3200.0]])
    nodes = []
    for i in range(rng.randint(20, 60)):
        topo = rng.choice(pool)
        used = frozenset()
        if rng.random() < (0.7 if busy < 0.9 else 0.99):
            used = frozenset(g for g in topo.indices if rng.random() < busy)
        zone, rack = _location(rng, layout, i)
        nodes.append(NodeState(f"node-{rng.randrange(10**6):06d}-{i}", topo, used, zone, rack,
                               rng.choice(nets)))
    rng.shuffle(nodes)
    return nodes


def assert_same(got: Placement, want: Placement) -> None:
    assert got == want
    assert got.details == want.details


@pytest.mark.parametrize("chunk", range(4))
def test_solver_answers_equal_the_reference_on_random_clusters(chunk: int) -> None:
    rng = random.Random(20261121 + chunk)
    for _ in range(CLUSTERS // 4):
        nodes = random_cluster(rng)
        for r, g in rng.sample(SHAPES, 3):
            cap = rng.choice([None, None, 1, 2])
            gang = GangRequest(replicas=r, gpus_per_replica=g, max_replicas_per_node=cap)
            assert_same(solve(nodes, gang), reference.solve(nodes, gang))


def test_edge_clusters_equal_the_reference() -> None:
    topo = fixture_topology("dgx1-v100")
    full = frozenset(topo.indices)
    cases = [
        [],
        [NodeState("a", topo)],
        [NodeState("a", topo, full), NodeState("b", topo, full)],
        [NodeState("a", topo, full - {3}), NodeState("b", topo, full - {5}, "z", "r")],
        [NodeState("a", topo, frozenset({0, 99})), NodeState("b", topo, frozenset({0}))],
        [NodeState("b", topo, zone="z"), NodeState("a", _twin(topo), zone="z")],
        [NodeState("a", topo, rack="r"), NodeState("b", topo, rack="r")],
    ]
    for nodes in cases:
        for r, g in ((1, 1), (1, 8), (2, 8), (3, 8), (1, 9), (9, 1), (2, 4)):
            for cap in (None, 1):
                gang = GangRequest(r, g, cap)
                assert_same(solve(nodes, gang), reference.solve(nodes, gang))


def test_input_errors_equal_the_reference() -> None:
    topo = fixture_topology("dgx1-v100")
    nodes = [NodeState("a", topo), NodeState("b", topo), NodeState("a", topo),
             NodeState("b", topo)]
    for gang in (GangRequest(1, 1), GangRequest(0, 1), GangRequest(1, 0),
                 GangRequest(1, 1, 0)):
        with pytest.raises(InputError) as want:
            reference.solve(nodes, gang)
        with pytest.raises(InputError) as got:
            solve(nodes, gang)
        assert str(got.value) == str(want.value)
