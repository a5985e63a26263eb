"""Hypothesis strategies for random but valid topologies."""

from __future__ import annotations

from hypothesis import strategies as st

from gputopo.topology.model import Gpu, Topology

CODES = ("NV1", "NV2", "NV4", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS")


@st.composite
def topologies(draw: st.DrawFn, min_gpus: int = 1, max_gpus: int = 8) -> Topology:
    """A symmetric legend matrix over distinct driver indices, with optional NUMA nodes."""
    n = draw(st.integers(min_gpus, max_gpus))
    indices = sorted(draw(st.sets(st.integers(0, 15), min_size=n, max_size=n)))
    numas = draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=n, max_size=n))
    links = [["X"] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            links[a][b] = links[b][a] = draw(st.sampled_from(CODES))
    return Topology(
        gpus=tuple(Gpu(i, m) for i, m in zip(indices, numas, strict=True)),
        links=tuple(tuple(r) for r in links),
    )


@st.composite
def measured_topologies(draw: st.DrawFn, min_gpus: int = 2, max_gpus: int = 7) -> Topology:
    """A topology with a random symmetric measured bandwidth matrix (few distinct values)."""
    base = draw(topologies(min_gpus=min_gpus, max_gpus=max_gpus))
    n = len(base.gpus)
    values = st.sampled_from([5.0, 10.0, 20.0, 25.0, 50.0, 100.0])
    m = [[0.0] * n for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            m[a][b] = m[b][a] = draw(values)
    return Topology(base.gpus, base.links, measured=tuple(tuple(r) for r in m))
