"""Communication cost model: how fast a set of GPUs can all-reduce, and what a step costs.

Why: placement quality has to be a number the solver can maximise and a user can read. The
number is the predicted all-reduce *bus bandwidth* in GB/s, NCCL's definition
(``busbw = algbw * 2(n-1)/n``, nccl-tests PERFORMANCE.md), because it does not depend on
the message size or the GPU count, and it is what nccl-tests prints, so every prediction
can be held against a published measurement (docs/topology.md, "Calibration").

Assumptions (also in docs/topology.md):

1. Within a node NCCL lays several *channels* over the GPUs, each a ring, and the bus
   bandwidth is the sum of the channels' speeds. Two ways to build them are modelled, and
   the better one counts:

   a. NVLink rings (NCCL's graph search on NVLink): every ring uses one direction of one
      link between neighbours, so a ring and its reverse share no link, and a bonded set
      ``NV#`` carries # links. The most ring bandwidth that fits is a fractional packing
      of Hamiltonian cycles of the set's NVLink graph into the links' capacities (an
      exact small LP, :func:`_nvlink_packing`); both directions double it. A DGX-1 V100
      NVLink quad (every pair NV1 or NV2) packs 2 rings, a 4-GPU ring across the two
      halves (0,1,5,4) only 1: the quad predicts twice the bandwidth.
   b. One ring over any links (PCIe, host bridges, the CPU interconnect for SYS): its
      bottleneck link, as the table gives it (PCIe x16 discounted per path, SYS capped by
      QPI/UPI: gputopo.topology.bandwidth). Not doubled: both directions of a GPU's PCIe
      port carry the ring and its peer traffic (nccl-tests #178 measured ~20 GB/s for 3
      A100 over PCIe Gen4, not 2x).

   Two GPUs use both directions of their link (one ring of two): the pair's figure.
   NVSwitch nodes (every pair the same NV#) are all-to-all: the NV# is the GPU's links to
   the switches, not to each peer, so any k GPUs get the pair figure, the bandwidth one
   GPU can move.
2. Table figures are line rates; NCCL achieves LINK_EFFICIENCY = 0.78 of them (NCCL's own
   model in src/graph/topo.h: 20 GB/s per NVLink for SM70/SM80 against 25.78/25 line, 12
   GB/s for PCIe Gen3 x16 against 15.7). Measured ``bandwidthGBps`` figures are scaled
   too: they are copy bandwidths of a peer-to-peer test (koordinator's DGX-1 figures: NV1
   48 GB/s both ways, 0.93 of line), which NCCL's reduction kernels do not reach either,
   and an annotation and an ACK report of one node must predict the same. One factor for
   everything, so rankings inside a node never move.
3. One GPU needs no communication. So that the solver still has a total order, its "bus
   bandwidth" is defined as the best link of its node (the largest off-diagonal entry; for a
   one-GPU node, the PIX figure of its generation). It never enters a multi-node formula.
4. Across nodes NCCL's ring crosses each node's network once per channel and pipelines
   everything: every intra-node hop and every NIC carries the same 2(n-1)/n of the data
   (NCCL maintainers, NVIDIA/nccl #209), so the gang's bus bandwidth is the slowest of
   its parts: ``min(min_i B_i, N)``, with ``B_i`` the bus bandwidth of node i's share
   (shares of one GPU do not limit) and ``N`` the slowest node's *effective* network in
   GB/s: line rate x transport efficiency (gputopo.topology.transport: tcp 0.25, rdma
   0.50, gdr 0.94) / 8 x the span factor. NCCL's trees on exactly 2 nodes can beat this (up to 2x
   the network, #209); the model keeps the ring figure, the conservative one.
5. Span factors for the network (:data:`SPAN_FACTOR`): same rack 1.0 (a non-blocking
   top-of-rack switch), same zone 0.5 (2:1 oversubscribed spine), cluster-wide 0.25
   (cross-zone links). They are assumptions, chosen conservative, not measurements.
6. Time: ``allreduce_time_s = S * 2(n-1)/n / busbw``; no latency term (gradients are large
   messages; for small messages the model is optimistic).
7. Step time: ``compute + comm - hidden``, where ``hidden = min(overlap * comm, compute)``:
   a fraction ``overlap`` of the all-reduce runs under the backward pass (gradient
   bucketing in Horovod/DDP), but never more than the compute time itself. Compute comes
   from a measured single-GPU rate (:func:`compute_time_s`); the seeds' case is worked out
   in docs/topology.md.
8. NVLink domains across nodes (GB200/GB300 NVL72: 18 trays of 4 GPUs behind NVLink switch
   trays): GPUs of different nodes of one domain reach each other at their full NVLink
   bandwidth through the switches, as inside an NVSwitch node, so a gang inside one domain
   gets ``min(worst share, the slowest GPU's NVLink line rate x LINK_EFFICIENCY)``
   (:func:`domain_gbps`) and no network term. NCCL's MNNVL path needs matching fabric
   cluster UUID and clique id and an IMEX channel in the pod (docs/placement.md). Across
   domains the network path (assumption 4) holds. Published: 8 GPUs on 2 GB200 trays ~811
   GB/s, 72 GPUs ~835-847 (model: 746; the calibration table).

Everything here is pure and fast: the solver calls :func:`ring_bus_bandwidth` in hot loops,
so results are cached on ``(topology, frozenset(gpus))`` (Topology hashes once). The ring
packing (nvlink_packing.py) and ring order (ring_order.py) searches are plain graph code
beside it; explanation.py says in words how a figure came about (``topology explain``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from gputopo.errors import TopologyError
from gputopo.names import DEFAULT_NETWORK_TRANSPORT
from gputopo.topology.bandwidth import (
    infer_generation,
    is_all_to_all,
    link_bandwidth,
    nvlink_count,
)
from gputopo.topology.fabric import fabric_gbps
from gputopo.topology.model import Topology
from gputopo.topology.nvlink_packing import (
    connected,
    greedy_packing,
    hamiltonian_cycles,
    simplex_packing,
)
from gputopo.topology.ring_order import (
    all_equal,
    best_order,
    greedy_order,
    split_above_slowest_pair,
)
from gputopo.topology.transport import (
    effective_network_gbps,
)

#: Network bandwidth multiplier by the widest locality a gang spans (assumption 5).
SPAN_FACTOR: dict[str, float] = {"node": 1.0, "nvlink-domain": 1.0, "rack": 1.0, "zone": 0.5,
                                 "cluster": 0.25}
SPANS: tuple[str, ...] = tuple(SPAN_FACTOR)
#: Share of a table (line-rate) figure NCCL achieves inside a node (assumption 2).
LINK_EFFICIENCY = 0.78
#: Largest GPU set whose NVLink rings are packed exactly (K8 has 2,520 Hamiltonian
#: cycles); larger sets count the single-ring figure only. No NVLink mesh without a switch
#: joins more than 8 GPUs (NVSwitch nodes take the all-to-all rule).
MAX_CHANNEL_GPUS = 8


# --- intra-node ring --------------------------------------------------------------------
@dataclass(frozen=True)
class _Ring:
    bus_gbps: float
    order: tuple[int, ...]  # driver indices in ring order
    bottleneck: tuple[int, int] | None  # driver indices of the slowest edge


def ring_bus_bandwidth(topology: Topology, gpus: Sequence[int]) -> float:
    """Predicted all-reduce bus bandwidth (GB/s) of ``gpus`` of one node (assumptions 1-3).

    ``gpus`` are driver indices; order does not matter (the best channels are searched).
    Unknown or repeated indices raise :class:`TopologyError`. The name stays from the
    single-ring model; the figure is the channel model's.
    """
    return _bus(topology, _key(topology, gpus)).bus_gbps


def _key(topology: Topology, gpus: Iterable[int]) -> frozenset[int]:
    gpus = list(gpus)
    key = frozenset(gpus)
    if not key:
        raise TopologyError("no GPUs given")
    if len(key) != len(gpus):
        raise TopologyError(f"GPU indices repeat in {sorted(gpus)}")
    if not key <= set(topology.indices):
        missing = sorted(key - set(topology.indices))
        raise TopologyError(
            f"GPU {', '.join(map(str, missing))} not on this node "
            f"(it has {', '.join(map(str, topology.indices))})"
        )
    return key


@lru_cache(maxsize=1024)
def symmetric_weights(
    topology: Topology,
) -> tuple[dict[int, int], tuple[tuple[float, ...], ...]]:
    """(position of each driver index, per-position matrix of min(bw(a,b), bw(b,a))).

    Why: hot loops over thousands of GPU sets read this plain matrix instead of calling
    Topology.bandwidth per pair (a third of the solver's cold time on 16-GPU nodes).
    """
    m = topology.bandwidth_matrix
    n = len(m)
    pos = {g: p for p, g in enumerate(topology.indices)}
    return pos, tuple(tuple(min(m[a][b], m[b][a]) for b in range(n)) for a in range(n))


def _weight(topology: Topology, i: int, j: int) -> float:
    # A ring uses each edge in one direction; with asymmetric measurements take the worse.
    return min(topology.bandwidth(i, j), topology.bandwidth(j, i))


def single_gpu_bandwidth(topology: Topology) -> float:
    """Assumption 3: the "bus bandwidth" of one GPU is the best link of its node."""
    best = max((x for row in topology.bandwidth_matrix for x in row), default=0.0)
    if best > 0:
        return best
    return link_bandwidth("PIX", infer_generation(topology))


@lru_cache(maxsize=1 << 16)
def _ring(topology: Topology, key: frozenset[int]) -> _Ring:
    nodes = sorted(key)
    k = len(nodes)
    if k == 1:
        return _Ring(single_gpu_bandwidth(topology), tuple(nodes), None)
    pos, sym = symmetric_weights(topology)
    ps = [pos[g] for g in nodes]
    w = [[sym[a][b] if a != b else 0.0 for b in ps] for a in ps]
    if k == 2:
        return _Ring(w[0][1], tuple(nodes), (nodes[0], nodes[1]))
    if all_equal(w):
        order = list(range(k))
    elif split_above_slowest_pair(w):
        # Every ring reaches the set's slowest pair, and none can stay above it: any order is
        # optimal; greedy keeps close GPUs adjacent.
        order = greedy_order(w)
    else:
        order = best_order(w)
    bus, edge = math.inf, (0, 1)
    for p in range(k):
        a, b = order[p], order[(p + 1) % k]
        if w[a][b] < bus:
            bus, edge = w[a][b], (a, b)
    return _Ring(bus, tuple(nodes[p] for p in order), (nodes[edge[0]], nodes[edge[1]]))


# --- intra-node channels ----------------------------------------------------------------
@dataclass(frozen=True)
class _Bus:
    bus_gbps: float  # predicted (achieved) bus bandwidth, GB/s
    kind: str  # "single", "pair", "nvswitch", "nvlink-rings", "ring"
    ring: _Ring  # the best single ring (line-rate figures)
    nvlink_rings_gbps: float  # 2 x the NVLink ring packing, line rate; 0 if none
    efficiency: float  # the factor applied (assumption 2)


def link_efficiency(topology: Topology) -> float:
    """Assumption 2: the share of a node's link figures NCCL achieves (one per node)."""
    return LINK_EFFICIENCY


@lru_cache(maxsize=1024)
def all_to_all(topology: Topology) -> bool:
    """:func:`gputopo.topology.bandwidth.is_all_to_all`, worked out once per topology (it
    walks the whole legend matrix; the objective asks for every new free-GPU mask)."""
    return is_all_to_all(topology)


@lru_cache(maxsize=1024)
def _nvlink_flags(topology: Topology) -> tuple[tuple[bool, ...], ...]:
    """Per position pair: is the link an NVLink bond (NV#)?"""
    return tuple(tuple(nvlink_count(c) > 0 for c in row) for row in topology.links)


@lru_cache(maxsize=1 << 16)
def _bus(topology: Topology, key: frozenset[int]) -> _Bus:
    ring = _ring(topology, key)
    k = len(key)
    eff = link_efficiency(topology)
    if k == 1:
        return _Bus(ring.bus_gbps, "single", ring, 0.0, 1.0)
    if k == 2:
        return _Bus(ring.bus_gbps * eff, "pair", ring, 0.0, eff)
    if all_to_all(topology):
        return _Bus(ring.bus_gbps * eff, "nvswitch", ring, 0.0, eff)
    rings = 2 * _nvlink_packing(topology, key)
    if rings > ring.bus_gbps:
        return _Bus(rings * eff, "nvlink-rings", ring, rings, eff)
    return _Bus(ring.bus_gbps * eff, "ring", ring, rings, eff)


def _nvlink_packing(topology: Topology, key: frozenset[int]) -> float:
    """Most ring bandwidth (GB/s, one direction) that fits into the set's NVLinks.

    A fractional packing of Hamiltonian cycles of the NVLink graph: each undirected cycle H
    at rate y_H, every link's load sum(y_H : H uses it) within its per-direction figure.
    Exact: one cycle is its slowest link; a greedy packing that reaches the bound "every
    GPU's NVLinks / 2" is optimal; otherwise a small simplex. Exactness is what makes the
    model monotone (a faster link never lowers the figure: tests/topology/test_cost.py).
    """
    k = len(key)
    if k < 3 or k > MAX_CHANNEL_GPUS:
        return 0.0
    pos, sym = symmetric_weights(topology)
    nv = _nvlink_flags(topology)
    ps = [pos[g] for g in sorted(key)]
    edges: dict[tuple[int, int], int] = {}
    caps: list[float] = []
    adj: list[list[int]] = [[] for _ in range(k)]
    for a in range(k):
        for b in range(a + 1, k):
            pa, pb = ps[a], ps[b]
            if nv[pa][pb] and sym[pa][pb] > 0:
                edges[(a, b)] = len(caps)
                caps.append(sym[pa][pb])
                adj[a].append(b)
                adj[b].append(a)
    if any(len(n) < 2 for n in adj) or not connected(adj):
        return 0.0
    cycles = hamiltonian_cycles(adj, edges)
    if not cycles:
        return 0.0
    if len(cycles) == 1:
        return min(caps[e] for e in cycles[0])
    bound = min(sum(caps[edges[min(a, b), max(a, b)]] for b in adj[a]) for a in range(k)) / 2
    greedy = greedy_packing(cycles, caps)
    if greedy >= bound * (1 - 1e-12):
        return round(bound, 9)
    return round(simplex_packing(cycles, caps), 9)


def bus_upper_bound(topology: Topology, gpus: Sequence[int]) -> float:
    """A cheap bound the bus bandwidth of ``gpus`` never exceeds (inf below 3 GPUs).

    A single ring uses two links at every GPU, so it is never faster than any GPU's
    second-fastest link inside the set; NVLink rings never carry more than any GPU's NVLinks
    inside the set. Lets the objective skip most sets of 12- and 16-GPU nodes unrated.
    """
    if len(gpus) < 3:
        return math.inf
    pos, sym = symmetric_weights(topology)
    ps = [pos[g] for g in gpus]
    rings = len(ps) <= MAX_CHANNEL_GPUS and not all_to_all(topology)
    nv = _nvlink_flags(topology)
    ring = nv_cap = math.inf
    for v in ps:
        row, flags = sym[v], nv[v]
        first = second = nv_sum = 0.0
        for u in ps:
            x = row[u]  # 0 on the diagonal
            if x > first:
                first, second = x, first
            elif x > second:
                second = x
            if flags[u]:
                nv_sum += x
        if second < ring:
            ring = second
        if nv_sum < nv_cap:
            nv_cap = nv_sum
    bound = max(ring, nv_cap) if rings else ring
    return bound * link_efficiency(topology)


@lru_cache(maxsize=1024)
def is_hierarchical(topology: Topology) -> bool:
    """True when every GPU set's bus bandwidth is decided by its slowest pair alone.

    That holds on ultrametric nodes (:func:`is_ultrametric`: PCIe trees, NVLink-bridged
    pairs, NVSwitch) as long as no NVLink rings can form (the NVLink graph is a forest) or
    the node is all-to-all; the objective's per-class block counting relies on it.
    """
    if not is_ultrametric(topology):
        return False
    if all_to_all(topology):
        return True
    nv = _nvlink_flags(topology)
    n = len(topology.gpus)
    parent = list(range(n))

    def root(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a in range(n):
        for b in range(a + 1, n):
            if nv[a][b]:
                ra, rb = root(a), root(b)
                if ra == rb:
                    return False  # an NVLink cycle: some set has rings
                parent[ra] = rb
    return True


@lru_cache(maxsize=1024)
def is_ultrametric(topology: Topology) -> bool:
    """True when the node's links form a strict hierarchy: w(i,k) >= min(w(i,j), w(j,k)).

    Why it matters: PCIe trees (PIX < PXB < PHB/NODE < SYS), NVLink-bridged pairs and
    NVSwitch nodes all have this shape. Then "linked at >= t" is an equivalence relation
    for every t, so above a set's slowest pair its GPUs split into classes no ring edge can
    join, and at that pair every edge qualifies: the best ring's bottleneck IS the slowest
    pair. That replaces an exponential Hamiltonian-cycle search with O(k^2) — the
    difference between seconds and microseconds on 16-GPU PCIe nodes. The DGX-1 hybrid
    cube-mesh is not ultrametric and keeps the exact search.
    """
    idx = topology.indices
    w = [[_weight(topology, a, b) if a != b else math.inf for b in idx] for a in idx]
    n = len(idx)
    for j in range(n):
        wj = w[j]
        for i in range(n):
            wij = wj[i]
            wi = w[i]
            for k in range(n):
                if wi[k] < min(wij, wj[k]):
                    return False
    return True


def best_ring_subset(
    topology: Topology, size: int, among: Iterable[int] | None = None
) -> tuple[tuple[int, ...], float]:
    """The ``size`` GPUs (of ``among``, default all) with the highest ring bus bandwidth.

    Exhaustive over combinations, ties to the lexicographically smallest set: meant for
    ``topology explain`` ("what a better set would give"), not for the solver's hot loop.
    """
    pool = sorted(among if among is not None else topology.indices)
    if not 1 <= size <= len(pool):
        raise TopologyError(f"cannot choose {size} GPUs out of {len(pool)}")
    if all_to_all(topology) and topology.measured is None:
        chosen = tuple(pool[:size])
        return chosen, ring_bus_bandwidth(topology, chosen)
    best: tuple[tuple[int, ...], float] | None = None
    for combo in combinations(pool, size):
        bw = ring_bus_bandwidth(topology, combo)
        if best is None or bw > best[1]:
            best = (combo, bw)
    assert best is not None
    return best


# --- across nodes -----------------------------------------------------------------------
@dataclass(frozen=True)
class NodeShare:
    """The GPUs a gang gets on one node, with that node's network line rate in Gbit/s and
    its transport ("tcp", "rdma" or "gdr", gputopo.topology.transport).

    A gang has at most one share per node: two replicas on one node are one share.
    """

    topology: Topology
    gpus: tuple[int, ...]
    network_gbps: float
    transport: str = DEFAULT_NETWORK_TRANSPORT
    efficiency: float | None = None  # the node's measured share (network-efficiency)
    share: float | None = None  # the admitting policy's share for the transport

    @property
    def effective_gbps(self) -> float:
        """What the all-reduce gets of the line rate (Gbit/s)."""
        return effective_network_gbps(self.network_gbps, self.transport, self.efficiency,
                                      self.share)


@lru_cache(maxsize=1024)
def domain_gbps(topology: Topology) -> float:
    """Assumption 8: what one GPU of this node gets of an NVLink domain's fabric, as an
    effective rate in Gbit/s like a network's (so that :func:`multi_node_bus_bandwidth`
    and the solver treat both alike): its NVLink line rate (gputopo.topology.fabric) x
    LINK_EFFICIENCY x 8. GB200: 956.25 GB/s x 0.78 = 745.9 GB/s bus bandwidth."""
    return fabric_gbps(topology) * link_efficiency(topology) * 8.0


def multi_node_bus_bandwidth(worst_share_gbps: float, effective_gbps: float, span: str) -> float:
    """Assumption 4: the bus bandwidth (GB/s) of a gang over two or more nodes.

    ``worst_share_gbps`` is the lowest bus bandwidth of a node share of 2+ GPUs (inf when
    every share is one GPU); ``effective_gbps`` the slowest node's effective network in
    Gbit/s. The solver evaluates exactly this function.
    """
    return min(worst_share_gbps, effective_gbps / 8.0 * SPAN_FACTOR[span])


def gang_bus_bandwidth(shares: Sequence[NodeShare], *, span: str) -> float:
    """Predicted all-reduce bus bandwidth (GB/s) of a gang spread over ``shares``.

    ``span`` is the widest locality the gang crosses: "node" (exactly one share),
    "nvlink-domain" (nodes of one NVLink fabric: assumption 8), "rack", "zone" or "cluster".
    Assumptions 4, 5 and 8 of the module docstring.
    """
    if span not in SPAN_FACTOR:
        raise ValueError(f"span must be one of {', '.join(SPANS)}, not {span!r}")
    if not shares:
        raise ValueError("a gang needs at least one node share")
    if len(shares) == 1:
        return ring_bus_bandwidth(shares[0].topology, shares[0].gpus)
    if span == "node":
        raise ValueError(f"span 'node' with {len(shares)} node shares")
    worst = math.inf
    for s in shares:
        if len(s.gpus) > 1:
            worst = min(worst, ring_bus_bandwidth(s.topology, s.gpus))
        else:
            _key(s.topology, s.gpus)  # still validate the index
    if span == "nvlink-domain":
        slowest = min(domain_gbps(s.topology) for s in shares)
        return multi_node_bus_bandwidth(worst, slowest, span)
    if min(s.network_gbps for s in shares) <= 0:
        raise ValueError("network_gbps must be positive")
    slowest = min(s.effective_gbps for s in shares)
    return multi_node_bus_bandwidth(worst, slowest, span)


# --- time -------------------------------------------------------------------------------
def allreduce_time_s(bus_bw_gbps: float, nbytes: float, n_gpus: int) -> float:
    """Seconds to all-reduce ``nbytes`` over ``n_gpus`` at bus bandwidth ``bus_bw_gbps``.

    ``S * 2(n-1)/n / busbw`` (assumption 6); 0 for one GPU or no data.
    """
    if n_gpus < 1 or nbytes < 0:
        raise ValueError("n_gpus must be >= 1 and nbytes >= 0")
    if n_gpus == 1 or nbytes == 0:
        return 0.0
    if bus_bw_gbps <= 0:
        raise ValueError("bus bandwidth must be positive")
    return nbytes * 2 * (n_gpus - 1) / n_gpus / (bus_bw_gbps * 1e9)


def step_time_s(
    *,
    params: float,
    bytes_per_param: int,
    compute_s: float,
    bus_bw_gbps: float,
    n_gpus: int,
    overlap: float,
) -> float:
    """Predicted data-parallel training step: compute plus the gradient all-reduce not hidden.

    ``compute_s`` is forward+backward of one GPU's batch; gradients are ``params *
    bytes_per_param`` bytes; ``overlap`` in [0, 1] is the share of the all-reduce that can
    run under the backward pass (assumption 7).
    """
    if not 0.0 <= overlap <= 1.0:
        raise ValueError("overlap must be within [0, 1]")
    if compute_s < 0 or params < 0 or bytes_per_param < 0:
        raise ValueError("params, bytes_per_param and compute_s must be >= 0")
    comm = allreduce_time_s(bus_bw_gbps, params * bytes_per_param, n_gpus)
    hidden = min(overlap * comm, compute_s)
    return compute_s + comm - hidden


def compute_time_s(batch_per_gpu: int, images_per_s_one_gpu: float) -> float:
    """Seconds of forward+backward for one GPU's batch, from a measured single-GPU rate."""
    if batch_per_gpu <= 0 or images_per_s_one_gpu <= 0:
        raise ValueError("batch and images/s must be positive")
    return batch_per_gpu / images_per_s_one_gpu
