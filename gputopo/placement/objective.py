"""What a good gang placement is: the solver's objective, written once and used by everyone.

Why a module of its own: the solver searches cleverly, the brute-force oracle in the tests
searches stupidly, and both must mean exactly the same thing by "best". So the objective is
defined here as a plain function of a finished placement, :func:`score`, and the solver's
search is proved against it (tests/placement/test_solver_oracle.py).

A placement gives each touched node a *share*: the union of the GPUs of the gang's replicas
on that node. Its :class:`Score` is compared lexicographically, larger is better:

0. ``good``: 1 when the placement is *good enough* — the whole gang on one node, on a GPU
   set as good as any of that size on that node (its ring bus bandwidth and slowest pair
   are :func:`best_quality`'s) and with a bus bandwidth at or above the gang's
   ``good_gbps`` (:class:`GangRequest`: the caller's bar, the waiting rule's ``minShare``
   of the gang's minShare reference, webhook/placement/reserve.py) — else 0 (always 0
   without a bar, for one GPU and over several nodes). Among good placements, before
   the bandwidth: ``good_spare``, minus the bus bandwidth (the slowest good-enough set
   first), then ``good_packing`` (minus the empty nodes opened) and ``good_fit`` (minus
   the free GPUs the node keeps); all three are 0 when ``good`` is. This is best-fit in
   both dimensions: the job takes the least bandwidth that is good enough for it, on the
   fullest node that gives it, and leaves the faster sets to the gangs whose bar only
   they meet and the empty nodes to the jobs that need whole ones. On the Alibaba 2023
   trace a 2- or 4-GPU pod then takes a partly used PCIe server's PIX pair, not an NVLink
   pair that opens an empty DGX-1; in the cluster replay 2-8-GPU jobs (measured against
   the slowest kind, one node of which holds them: gputopo.placement.waiting) take the
   PCIe servers' sets first and leave the DGX-1 racks and the DGX A100s to the 16-32-GPU
   gangs (docs/benchmarks.md). Below the bar, and for gangs over several nodes, the
   bandwidth comes first as before: a gang gets the fastest set whenever nothing good
   enough is free.
   Why a bar and not "slowest or fullest first" for every one-node gang: the waiting rule
   starts a gang at ``minShare`` of its reference, so a slower placement would
   make it wait while a good one was free; with the bar at that share, the placement
   chosen starts exactly when the fastest would (docs/placement.md). Why "its node's
   best set": packing must never give a job a worse set on its node than that node could
   (two DGX-1 GPUs linked by PCIe only, say). The bar speaks of bandwidth only: the
   solver runs on nodes of one GPU model at a time (gputopo.placement.generations
   chooses between models by throughput; docs/placement.md, "GPU generations").
1. ``bus_bandwidth``: the predicted all-reduce bus bandwidth of the whole gang,
   :func:`gputopo.topology.cost.gang_bus_bandwidth` over the shares with the gang's span
   (NCCL-like channels inside a node, the slower of the worst share and the effective
   network across nodes, rounded to 1e-6 GB/s). A one-GPU gang does not communicate, so
   this term is 0 for every placement of it and the later terms decide (the cost model's
   "best link of the node" for one GPU would otherwise pull every single-GPU job onto the
   most precious NVSwitch nodes).
   ``nodes``: minus the number of nodes touched. NCCL's pipelined rings give 2 nodes and 4
   nodes the same bus bandwidth when the network is the limit, but every extra node is
   another NIC loaded and another machine the job depends on: fewer nodes win.
2. ``bottleneck_pair``: the slowest link between any two GPUs of one share (the worst share
   counts; koordinator's quality measure). A set whose every pair is NVLink-connected wins
   over one of the same bus bandwidth that needs a PCIe or SYS link. A share of one GPU has
   no pairs and does not limit it.
3. ``locality``: minus the span rank, node (0) < NVLink domain (1) < rack (2) < zone (3)
   < cluster (4): a multi-node gang prefers one NVLink domain (nodes of one NVLink fabric,
   a GB200 NVL72 rack's trays), then one rack, then one zone. Nodes without a domain, rack
   or zone are never assumed to share one.
   ``domains``: minus the number of NVLink domains a multi-node gang touches (nodes
   without one count for none; a one-node gang uses no fabric: 0): a gang larger than any
   domain uses the fewest, and one that may take domained or plain nodes leaves the
   domains whole.
   ``domains_opened``: minus the number of NVLink domains the placement touches that had
   no GPU in use before (on any of their nodes, touched or not): a gang that fits in a
   domain already in use goes there, not into a wholly free one, so small jobs fill the
   used racks and whole domains stay free for the gangs that need a whole fabric. It is
   the largest free block there is (up to 72 GPUs on one NVLink fabric), so it counts
   before the blocks inside nodes, as an 8-GPU block counts before 4-GPU ones. Nodes
   without a domain open none.
   ``solo_fit``: for a one-GPU gang only (0 for any other), minus the free GPUs its node
   keeps: a job with no all-reduce goes to the most allocated node that fits, as
   best-fit packs; the blocks term then picks its GPU on that node (the loose one, not
   one of an intact NVLink pair). Why before the blocks and not after: the blocks term
   counts every well-connected block alike, a PCIe PIX pair as much as an NVLink quad, so
   ahead of packing it sent one-GPU pods to a loose GPU on an emptier node rather than
   break a 2-GPU pair on a nearly full one; on the Alibaba 2023 trace (98 % one-GPU pods)
   that left more nodes partly used than best-fit (docs/benchmarks.md, the Alibaba table).
   A gang that all-reduces keeps the blocks term first: it is what keeps its set whole.
4. ``blocks``: cluster health after the placement. For every block size k in
   :data:`BLOCK_SIZES` (largest first), the change on the touched nodes of the number of
   disjoint free *well-connected* k-GPU blocks, compared lexicographically. A k-block is
   well-connected when its quality (ring bus bandwidth, then slowest pair) equals the best
   any k GPUs of that node can have, e.g. a DGX-1 NVLink quad, an A100-PCIe NVLink pair,
   any k GPUs of an NVSwitch node. This is koordinator's "keep the large free blocks"
   score made exact: losing an 8-block outweighs any number of 4-blocks, and so on. It is
   what keeps a one-GPU job off an intact NVLink pair when a loose GPU exists on the node
   ``solo_fit`` chose.
5. ``packing``: minus the number of touched nodes that had no GPU in use before: fill
   nodes already partly used before opening empty ones.
6. ``fit``: minus the free GPUs the touched nodes keep after the placement: best-fit, the
   most allocated nodes that fit first (for a one-GPU job ``solo_fit`` already decided
   it). A gang given nodes where every term before ties takes the fullest, keeping the
   emptier ones whole for a larger job, instead of the first node by name.

Ties after that are broken by the sorted list of (node name, GPU indices) of the shares,
smallest first, so the answer is deterministic (not part of :class:`Score`).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from operator import sub

from gputopo.errors import InputError
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.cost import (
    NodeShare,
    all_to_all,
    bus_upper_bound,
    gang_bus_bandwidth,
    is_hierarchical,
    ring_bus_bandwidth,
    symmetric_weights,
)
from gputopo.topology.model import Topology

#: Block sizes whose free, well-connected count the health term tracks, largest first.
BLOCK_SIZES: tuple[int, ...] = (64, 32, 16, 8, 4, 2)
#: Span names from narrowest to widest; the rank is the index.
SPANS: tuple[str, ...] = ("node", "nvlink-domain", "rack", "zone", "cluster")
SPAN_RANK: dict[str, int] = {s: r for r, s in enumerate(SPANS)}
#: Decimal places kept of bandwidths before comparing, so float noise never decides.
ROUND = 6
#: Slowest pair of a set without pairs (one GPU): it never limits the gang.
NO_PAIR = float("inf")
#: The keys of ``blocksDelta`` in :meth:`Score.to_json` (made once, not per placement).
_BLOCK_KEYS = tuple(str(k) for k in BLOCK_SIZES)


@dataclass(frozen=True, order=True)
class Score:
    """The objective of one placement, compared field by field (larger is better)."""

    good: int
    good_spare: float
    good_packing: int
    good_fit: int
    bus_bandwidth: float
    nodes: int
    bottleneck_pair: float
    locality: int
    domains: int
    domains_opened: int
    solo_fit: int
    blocks: tuple[int, ...]
    packing: int
    fit: int

    def to_json(self) -> dict[str, object]:
        return {
            "goodEnough": bool(self.good),
            "busBandwidthGBps": self.bus_bandwidth,
            "nodes": -self.nodes,
            "bottleneckPairGBps": None if self.bottleneck_pair == NO_PAIR else self.bottleneck_pair,
            "span": SPANS[-self.locality],
            "nvlinkDomains": -self.domains,
            "freeNvlinkDomainsOpened": -self.domains_opened,
            "soloFreeGpusLeft": -self.solo_fit,
            "blocksDelta": dict(zip(_BLOCK_KEYS, self.blocks, strict=True)),
            "emptyNodesOpened": -self.packing,
            "freeGpusLeft": -self.fit,
        }


# --- per-set quality --------------------------------------------------------------------
def min_pair_bandwidth(topology: Topology, gpus: Iterable[int]) -> float:
    """Slowest per-direction link between any two of ``gpus`` (rounded); NO_PAIR for one."""
    return _min_pair(topology, tuple(sorted(gpus)))


@lru_cache(maxsize=1 << 16)
def _min_pair(topology: Topology, gpus: tuple[int, ...]) -> float:
    if len(gpus) < 2:
        return NO_PAIR
    pos, sym = symmetric_weights(topology)
    ps = [pos[g] for g in gpus]
    return round(min(sym[a][b] for a, b in combinations(ps, 2)), ROUND)


def set_quality(topology: Topology, gpus: Iterable[int]) -> tuple[float, float]:
    """(ring bus bandwidth, slowest pair) of a GPU set of one node, both rounded."""
    g = tuple(sorted(gpus))
    return round(ring_bus_bandwidth(topology, g), ROUND), min_pair_bandwidth(topology, g)


def _ring_upper_bound(topology: Topology, gpus: tuple[int, ...]) -> float:
    """Cheap bound on the bus bandwidth (rounded), cost.bus_upper_bound."""
    return round(bus_upper_bound(topology, gpus), ROUND)


@lru_cache(maxsize=4096)
def _contenders(
    topology: Topology, size: int
) -> tuple[tuple[tuple[int, ...], tuple[float, float]], ...]:
    """Every ``size``-subset that can be the best, with its quality; the rest are skipped by
    :func:`_ring_upper_bound` (keeps 12- and 16-GPU PCIe nodes from rating 10^4 rings)."""
    best_ring = -1.0
    out = []
    for combo in combinations(topology.indices, size):
        if _ring_upper_bound(topology, combo) < best_ring:
            continue
        q = set_quality(topology, combo)
        best_ring = max(best_ring, q[0])
        out.append((combo, q))
    return tuple(out)


@lru_cache(maxsize=4096)
def best_quality(topology: Topology, size: int) -> tuple[float, float] | None:
    """The best :func:`set_quality` any ``size`` GPUs of the node have; None if too few."""
    idx = topology.indices
    if size > len(idx):
        return None
    if all_to_all(topology) and topology.measured is None:
        return set_quality(topology, idx[:size])
    classes = _hierarchy_classes(topology, size)
    if classes is not None:
        first = classes[0]
        return set_quality(topology, [g for p, g in enumerate(idx) if first >> p & 1][:size])
    return max(q for _, q in _contenders(topology, size))


@lru_cache(maxsize=4096)
def _hierarchy_classes(topology: Topology, size: int) -> tuple[int, ...] | None:
    """On a hierarchical (ultrametric) node: position bitmasks of the classes whose
    ``size``-subsets are exactly the well-connected ``size``-blocks; None on other nodes.

    Why: on such a node a set's quality is its slowest pair (cost.is_ultrametric), GPUs
    "linked at >= t" form classes, and the best ``size``-sets are the subsets of the
    classes at the highest t where some class still holds ``size`` GPUs. Counting free
    blocks then is arithmetic per class instead of a search over 10^4 subsets (a 16-GPU
    PCIe node went from seconds to microseconds); tests/placement check it against the
    exhaustive path.
    """
    if size < 2 or size > len(topology.gpus) or not is_hierarchical(topology):
        return None
    idx = topology.indices
    n = len(idx)
    w = [
        [min(topology.bandwidth(a, b), topology.bandwidth(b, a)) for b in idx] for a in idx
    ]
    for t in sorted({w[a][b] for a in range(n) for b in range(a + 1, n)}, reverse=True):
        classes: list[int] = []
        seen = 0
        for a in range(n):
            if seen >> a & 1:
                continue
            # ultrametric: "w >= t" is transitive, so a's neighbours at t are its class
            mask = sum(1 << b for b in range(n) if b == a or w[a][b] >= t)
            seen |= mask
            classes.append(mask)
        big = tuple(c for c in classes if c.bit_count() >= size)
        if big:
            return big
    return None


@lru_cache(maxsize=4096)
def _best_blocks(topology: Topology, size: int) -> tuple[int, ...]:
    """Bitmasks (by position) of every well-connected ``size``-block of the node."""
    best = best_quality(topology, size)
    return tuple(
        position_mask(topology, combo)
        for combo, q in _contenders(topology, size)
        if q == best
    )


@lru_cache(maxsize=1 << 16)
def _max_disjoint(topology: Topology, size: int, free_mask: int) -> int:
    """Most disjoint well-connected ``size``-blocks inside ``free_mask`` (exact, memoised)."""
    if free_mask.bit_count() < size:
        return 0
    low = free_mask & -free_mask
    # Either the lowest free GPU is in no block, or in one of the blocks that contain it.
    best = _max_disjoint(topology, size, free_mask & ~low)
    for block in _best_blocks(topology, size):
        if block & low and block & free_mask == block:
            best = max(best, 1 + _max_disjoint(topology, size, free_mask & ~block))
    return best


def position_mask(topology: Topology, gpus: Iterable[int]) -> int:
    """Bitmask over GPU positions of a set of driver indices."""
    return sum(map(_bits(topology).__getitem__, gpus))


@lru_cache(maxsize=1024)
def _bits(topology: Topology) -> dict[int, int]:
    """Driver index -> its position's bit, made once per topology (read, never modified):
    building the positions per call was half of :func:`position_mask`, which rates every
    share, and the sum of the bits then runs at C speed."""
    return {g: 1 << p for p, g in enumerate(topology.indices)}


@lru_cache(maxsize=1 << 14)
def _free(topology: Topology, used: frozenset[int]) -> tuple[frozenset[int], int]:
    """A node's free GPUs (driver indices) and their position mask, per (topology, used
    GPUs): what :func:`check_shares` and :func:`score_by_name` read of every touched node.
    Why cached: ``NodeState.free`` walks the topology's GPUs in Python at each read (~13
    bytecodes a GPU), three reads per share rated; alike nodes share one entry."""
    free = tuple(i for i in topology.indices if i not in used)
    return frozenset(free), position_mask(topology, free)


@lru_cache(maxsize=1 << 16)
def free_blocks(topology: Topology, free_mask: int) -> tuple[int, ...]:
    """Disjoint well-connected free blocks per size in BLOCK_SIZES, for a free-GPU bitmask.

    NVSwitch nodes (all pairs alike, no measured matrix) take the shortcut ``free // k``.
    """
    n_free = free_mask.bit_count()
    if all_to_all(topology) and topology.measured is None:
        return tuple(n_free // k if k <= len(topology.gpus) else 0 for k in BLOCK_SIZES)
    if is_hierarchical(topology):
        return tuple(
            sum((c & free_mask).bit_count() // k for c in _hierarchy_classes(topology, k) or ())
            for k in BLOCK_SIZES
        )
    return free_blocks_exhaustive(topology, free_mask)


def free_blocks_exhaustive(topology: Topology, free_mask: int) -> tuple[int, ...]:
    """:func:`free_blocks` by exact search over the well-connected blocks, on any node."""
    return tuple(
        _max_disjoint(topology, k, free_mask) if k <= len(topology.gpus) else 0
        for k in BLOCK_SIZES
    )


def blocks_delta(topology: Topology, free_before: int, taken: int) -> tuple[int, ...]:
    """Change in :func:`free_blocks` when the GPUs in bitmask ``taken`` are allocated."""
    before = free_blocks(topology, free_before)
    after = free_blocks(topology, free_before & ~taken)
    return tuple(map(sub, after, before))  # both one count per block size


# --- whole placement --------------------------------------------------------------------
def span_of(nodes: Sequence[NodeState]) -> str:
    """Widest locality a set of nodes crosses: node, nvlink-domain, rack, zone or cluster."""
    if len(nodes) == 1:
        return "node"
    domain = nodes[0].nvlink_domain
    if domain is not None and all(n.nvlink_domain == domain for n in nodes):
        return "nvlink-domain"
    racks = {(n.zone, n.rack) for n in nodes}
    if len(racks) == 1 and nodes[0].rack is not None:
        return "rack"
    zones = {n.zone for n in nodes}
    if len(zones) == 1 and nodes[0].zone is not None:
        return "zone"
    return "cluster"


def check_shares(
    by_name: Mapping[str, NodeState], gang: GangRequest, shares: Mapping[str, Sequence[int]]
) -> None:
    """InputError unless ``shares`` is a valid placement of ``gang`` on the named nodes."""
    total = 0
    for name, gpus in shares.items():
        node = by_name.get(name)
        if node is None:
            raise InputError(f"share on unknown node {name!r}")
        g = set(gpus)
        if len(g) != len(gpus) or not gpus:
            raise InputError(f"node {name}: share must be a non-empty set of GPUs")
        free = _free(node.topology, node.used)[0]
        if not g <= free:
            raise InputError(f"node {name}: GPUs {sorted(g - free)} are not free")
        if len(g) % gang.gpus_per_replica:
            raise InputError(f"node {name}: {len(g)} GPUs is not a multiple of the replica size")
        if len(g) > gang.per_node * gang.gpus_per_replica:
            raise InputError(f"node {name}: more than {gang.per_node} replicas on one node")
        total += len(g)
    if total != gang.total_gpus:
        raise InputError(f"shares hold {total} GPUs, the gang needs {gang.total_gpus}")


def free_domains(nodes: Iterable[NodeState]) -> frozenset[str]:
    """The NVLink domains none of whose nodes has a GPU in use (``domains_opened``)."""
    seen: set[str] = set()
    used: set[str] = set()
    for n in nodes:
        if n.nvlink_domain is not None:
            seen.add(n.nvlink_domain)
            if n.used:
                used.add(n.nvlink_domain)
    return frozenset(seen - used)


def score(
    nodes: Sequence[NodeState], gang: GangRequest, shares: Mapping[str, Sequence[int]]
) -> Score:
    """The objective (module docstring) of placing ``gang`` as ``shares`` (node -> GPUs)."""
    return score_by_name({n.name: n for n in nodes}, gang, shares)


def score_by_name(
    by_name: Mapping[str, NodeState], gang: GangRequest, shares: Mapping[str, Sequence[int]],
    *, free: Container[str] | None = None,
) -> Score:
    """:func:`score` with the nodes already indexed by name (the solver's hot path).

    ``free``: the NVLink domains with no GPU in use (:func:`free_domains`); when None it is
    worked out from ``by_name``, which must then hold every node of the touched domains."""
    check_shares(by_name, gang, shares)
    touched = [by_name[name] for name in sorted(shares)]
    span = span_of(touched)
    node_shares = [
        NodeShare(n.topology, tuple(sorted(shares[n.name])), n.network_gbps, n.network_transport,
                  n.network_efficiency, n.transport_share)
        for n in touched
    ]
    # One GPU does not communicate (module docstring, term 1).
    bus = 0.0 if gang.total_gpus == 1 else round(gang_bus_bandwidth(node_shares, span=span), ROUND)
    pair = min(min_pair_bandwidth(n.topology, shares[n.name]) for n in touched)
    blocks = [0] * len(BLOCK_SIZES)
    opened = 0
    left = 0
    for n in touched:
        free_mask = _free(n.topology, n.used)[1]
        delta = blocks_delta(n.topology, free_mask, position_mask(n.topology, shares[n.name]))
        blocks = [a + b for a, b in zip(blocks, delta, strict=True)]
        opened += not n.used
        left += free_mask.bit_count() - len(shares[n.name])
    domains = {n.nvlink_domain for n in touched if n.nvlink_domain is not None}
    solo = gang.total_gpus == 1  # no all-reduce: the solo_fit term
    if domains and free is None:
        free = free_domains(by_name.values())
    good = len(touched) == 1 and good_enough(touched[0].topology, shares[touched[0].name],
                                             bus, gang.good_gbps)
    return Score(
        good=int(good),
        good_spare=-bus if good else 0.0,
        good_packing=-opened if good else 0,
        good_fit=-left if good else 0,
        bus_bandwidth=bus,
        nodes=-len(touched),
        bottleneck_pair=pair,
        locality=-SPAN_RANK[span],
        domains=0 if len(touched) == 1 else -len(domains),
        domains_opened=-sum(d in free for d in domains) if free is not None else 0,
        solo_fit=-left if solo else 0,
        blocks=tuple(blocks),
        packing=-opened,
        fit=-left,
    )


def good_enough(topology: Topology, gpus: Sequence[int], bus: float,
                bar: float | None) -> bool:
    """The ``good`` term for a gang placed wholly on one node as ``gpus`` with bus bandwidth
    ``bus`` (rounded): at or above the ``bar`` (``GangRequest.good_gbps``; None: no bar)
    and as good a set as any of its size on the node. One GPU never is (no all-reduce)."""
    if bar is None or len(gpus) < 2 or bus < bar:
        return False
    return set_quality(topology, gpus) == best_quality(topology, len(gpus))


def tie_break(shares: Mapping[str, Sequence[int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The deterministic last resort: smaller (node name, GPUs) list wins."""
    return tuple((name, tuple(sorted(shares[name]))) for name in sorted(shares))
