"""Measured bandwidth: noise between alike links is taken out, real differences stay.

Why it matters: a reporter's bandwidth test gives every pair a slightly different figure;
taken literally, no two GPUs look alike any more and the solver's exact shortcuts stop
applying (a DGX-2 with +-10 % noise took tens of seconds to place one 8-GPU gang).
"""

from __future__ import annotations

import random

from gputopo.placement.solver import interchangeable_groups
from gputopo.topology.model import Gpu, Topology


def _nvswitch(n: int, measured: list[list[float]]) -> Topology:
    links = tuple(tuple("X" if a == b else "NV6" for b in range(n)) for a in range(n))
    return Topology(gpus=tuple(Gpu(i) for i in range(n)), links=links,
                    measured=tuple(tuple(r) for r in measured))


def _noisy(n: int, figure: float, noise: float, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    m = [[0.0] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            m[a][b] = m[b][a] = figure * rng.uniform(1 - noise, 1 + noise)
    return m


def test_noise_between_alike_links_is_one_figure() -> None:
    topo = _nvswitch(16, _noisy(16, 150.0, 0.10, seed=1))
    values = {topo.bandwidth(a, b) for a in range(16) for b in range(16) if a != b}
    assert len(values) == 1
    assert 135.0 <= values.pop() <= 165.0  # V100's NV6 figure, 154.686
    assert len(interchangeable_groups(topo, topo.indices)) == 1


def test_a_degraded_link_keeps_its_own_figure() -> None:
    m = _noisy(8, 150.0, 0.05, seed=2)
    m[2][5] = m[5][2] = 70.0  # one NVLink bond running at half speed
    topo = _nvswitch(8, m)
    assert topo.bandwidth(2, 5) == 70.0
    others = {topo.bandwidth(a, b) for a in range(8) for b in range(8)
              if a != b and {a, b} != {2, 5}}
    assert len(others) == 1 and others.pop() > 140.0
    # GPUs 2 and 5 are no longer like the others
    assert len(interchangeable_groups(topo, topo.indices)) > 1


def test_links_of_different_codes_are_never_merged() -> None:
    links = (("X", "NV1", "SYS"), ("NV1", "X", "SYS"), ("SYS", "SYS", "X"))
    measured = ((0, 24.0, 22.0), (24.0, 0, 22.0), (22.0, 22.0, 0))
    topo = Topology(gpus=(Gpu(0), Gpu(1), Gpu(2)), links=links, measured=measured)
    # NV1 24 is V100's 25.781 give or take noise; SYS 22 is far above the table's 7.85
    assert topo.bandwidth(0, 1) == 25.781 and topo.bandwidth(0, 2) == 22.0


def test_denoising_never_lowers_a_figure_that_rises() -> None:
    """Each figure depends on its own measurement only, monotonically (issue 11)."""
    links = (("X", "NV6"), ("NV6", "X"))
    seen = []
    for tenth in range(10, 4000, 7):
        m = tenth / 10
        topo = Topology(gpus=(Gpu(0), Gpu(1)), links=links, measured=((0, m), (m, 0)))
        seen.append(topo.bandwidth(0, 1))
    assert seen == sorted(seen)
