"""The solver's one pass over the nodes: alike nodes become one group.

Why: nodes with the same topology, used GPUs, network, NVLink domain and per-node GPU cap
are interchangeable for the objective, so everything after this pass (feasibility, the
one-node search, the scopes' classes) works on a few hundred groups instead of thousands of
nodes. A node's *kind* (topology and used GPUs) is cached across solves with what it costs
to work out (free mask, best one-node share); :class:`_Tally` counts what the feasibility
reasons and the first bound read.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Any

from gputopo.errors import InputError
from gputopo.placement.objective import ROUND, Score
from gputopo.placement.solver.options import _Option, _options, _value
from gputopo.placement.types import UNCAPPED, NodeState
from gputopo.topology.cost import domain_gbps
from gputopo.topology.model import Topology


@dataclass(eq=False)
class _Kind:
    """What every node of one topology with one set of used GPUs shares, whatever its name.

    Why cached across solves (``_KINDS``): a busy cluster has a few hundred such kinds
    for thousands of nodes, and between two admissions most nodes keep theirs, so the free
    mask, its count and the best one-node option are worked out once per kind, not once per
    node and call.
    """

    topology: Topology
    used: frozenset[int]
    free_mask: int
    free: int  # free GPUs
    size: int  # GPUs on the node
    opened: bool  # no GPU in use yet

    def __post_init__(self) -> None:
        #: per gang size n: (one-node key, best n-GPU share), see :meth:`one_node`
        self.rated: dict[int, tuple[tuple[float, float, int, int, int, int, int], _Option]] = {}
        self._head: tuple[str, tuple[int, ...]] | None = None
        #: what :func:`scopes.bound` reads: per (g, jmin, jmax) the best pair, per (g, jmin,
        #: jmax, pair) the best blocks (:meth:`best_pair`, :meth:`best_blocks`)
        self._pairs: dict[tuple[int, int, int], float] = {}
        self._blocks: dict[tuple[int, int, int, float], int | None] = {}
        #: per g, and per (g, pair): :meth:`count_pairs`, :meth:`count_values`
        self._count_pairs: dict[int, tuple[float, ...]] = {}
        self._count_values: dict[tuple[int, float], tuple[int | float, ...]] = {}
        #: per (gang size, share, node network): a one-node placement's (score, bus
        #: bandwidth), see :func:`one_node.one_node`
        self.scored: dict[tuple[Any, ...], tuple[Score, float]] = {}

    def best_pair(self, g: int, jmin: int, jmax: int) -> float:
        """The best slowest pair of any share of ``jmin``..``jmax`` replicas of ``g`` GPUs
        on such a node (the Pareto options keep it): what :func:`scopes.bound` bounds a
        scope's pair term with."""
        got = self._pairs.get((g, jmin, jmax))
        if got is None:
            got = self._pairs[(g, jmin, jmax)] = max(
                o.pair for o in self._shares(g, jmin, jmax))
        return got

    def best_blocks(self, g: int, jmin: int, jmax: int, pair: float) -> int | None:
        """The best encoded blocks delta of the shares of ``jmin``..``jmax`` replicas of
        ``g`` GPUs whose slowest pair is at least ``pair``; None if none reaches it.

        Why not the best blocks of any share: the objective compares the slowest pair
        before the blocks, so a placement that ties a scope's pair bound uses only shares
        at least that good, and keeps at most their blocks. An NVLink quad left whole by
        four loose GPUs on a PCIe pair is a bound no such placement reaches: on a busy
        cluster every rack stayed above the best found and was planned in vain (a 2 x 4
        gang: ~100 racks, ~15 ms). The Pareto options (ring, pair, blocks) hold the best
        blocks of every pair threshold."""
        got = self._blocks.get((g, jmin, jmax, pair))
        if got is None:
            got = self._blocks[(g, jmin, jmax, pair)] = max(
                (o.health for o in self._shares(g, jmin, jmax) if o.pair >= pair),
                default=None)
        return got

    def count_pairs(self, g: int) -> tuple[float, ...]:
        """Per count j of replicas of ``g`` GPUs (1, 2, ... as many as fit), the best
        slowest pair of its shares: what the scopes' tight bound (:func:`scopes._tight`)
        reads, a row of numbers per node rather than a call per count."""
        got = self._count_pairs.get(g)
        if got is None:
            got = self._count_pairs[g] = tuple(
                self.best_pair(g, j, j) for j in range(1, self.free // g + 1))
        return got

    def count_values(self, g: int, pair: float) -> tuple[int | float, ...]:
        """Per count j as :meth:`count_pairs`, the best value (blocks, opened, left:
        options._value) of its shares whose slowest pair is at least ``pair``; -inf
        where none reaches it."""
        got = self._count_values.get((g, pair))
        if got is None:
            values: list[int | float] = []
            for j in range(1, self.free // g + 1):
                health = self.best_blocks(g, j, j, pair)
                values.append(-math.inf if health is None else
                              _value(health, int(self.opened), self.free - j * g))
            got = self._count_values[(g, pair)] = tuple(values)
        return got

    def _shares(self, g: int, jmin: int, jmax: int) -> list[_Option]:
        """The Pareto options of every share of ``jmin``..``jmax`` replicas of ``g`` GPUs."""
        return [o for j in range(jmin, jmax + 1)
                for o in _options(self.topology, self.free_mask, j * g)]

    def one_node(self, n: int) -> tuple[tuple[float, float, int, int, int, int, int], _Option]:
        """The best ``n``-GPU share of the free GPUs (the first Pareto option) and its key
        for the one-node search: (ring bandwidth, slowest pair, free NVLink domains opened
        (0 here: it is the node's domain's, not its kind's; :func:`_best_single` sets it),
        solo_fit (fit for one GPU, else 0), blocks kept, packing, fit: minus the GPUs left
        free)."""
        got = self.rated.get(n)
        if got is None:
            opt = _options(self.topology, self.free_mask, n)[0]
            k1 = 0.0 if n == 1 else round(opt.bw, ROUND)
            fit = n - self.free  # minus the GPUs left free; first for one GPU (solo_fit)
            got = self.rated[n] = ((k1, opt.pair, 0, fit if n == 1 else 0, opt.health,
                                    -int(self.opened), fit), opt)
        return got

    def head(self) -> tuple[str, tuple[int, ...]]:
        """(topology JSON, sorted used GPUs): the classes' sort key without the network."""
        if self._head is None:
            self._head = (_topology_json(self.topology), tuple(sorted(self.used)))
        return self._head


def _kind(topology: Topology, used: frozenset[int]) -> _Kind:
    """A new kind; used indices the topology does not have are ignored, as before."""
    idx = topology.indices
    pos = {g: p for p, g in enumerate(idx)}
    mask = ((1 << len(idx)) - 1) & ~sum(1 << pos[u] for u in used if u in pos)
    return _Kind(topology, used, mask, mask.bit_count(), len(idx), not used)


#: Kinds by topology, then by used set. Two levels, not one lru_cache on (topology, used):
#: a Topology hashes in Python, a frozenset's hash is cached, and the inner lookup runs once
#: per group and solve. Bounded by clearing: losing an entry costs only its recomputation.
_KINDS: dict[Topology, dict[frozenset[int], _Kind]] = {}
_KINDS_TOPOLOGIES = 256
_KINDS_PER_TOPOLOGY = 1 << 13


def _kinds_of(topology: Topology) -> dict[frozenset[int], _Kind]:
    """The cached kinds of one topology (an empty dict to fill for a new one)."""
    kinds = _KINDS.get(topology)
    if kinds is None:
        if len(_KINDS) >= _KINDS_TOPOLOGIES:
            _KINDS.clear()
        kinds = _KINDS[topology] = {}
    elif len(kinds) >= _KINDS_PER_TOPOLOGY:
        kinds.clear()
    return kinds


@lru_cache(maxsize=1 << 10)
def _topology_json(topology: Topology) -> str:
    return topology.to_json()


_Loc = tuple[str | None, str | None]  # (zone, rack)


@dataclass(eq=False)
class _Group:
    """The nodes of one solve that share a kind and a network: one pass over the nodes
    builds these, and everything after it (feasibility, one-node search, scopes) works on
    groups."""

    kind: _Kind
    network_gbps: float
    nodes: list[NodeState]
    domain: str | None = None  # the NVLink domain of every node here (part of the key)
    cap: int = UNCAPPED  # most GPUs of the gang one of its nodes may hold (NodeState.gpu_cap)

    def __post_init__(self) -> None:
        self._canon: tuple[str, tuple[int, ...], float, int] | None = None
        self._first: NodeState | None = None
        self._racks: dict[_Loc, int] | None = None
        self._firsts: dict[_Loc, str] | None = None
        self.free = min(self.kind.free, self.cap)  # GPUs the gang may take on one node

    def racks(self) -> dict[_Loc, int]:
        """Its count of nodes per (zone, rack): the multi-node search's scopes are racks and
        unions of racks (racks.of_groups counts a plain list's racks from these). Counted
        once, when first asked, and kept with the group. Counts, not lists of nodes: a
        search looks at the nodes of a few racks (:meth:`within`)."""
        if self._racks is None:
            counts: dict[_Loc, int] = {}
            for node in self.nodes:
                loc = (node.zone, node.rack)
                counts[loc] = counts.get(loc, 0) + 1
            self._racks = counts
        return self._racks

    def within(self, locs: Container[_Loc]) -> list[NodeState]:
        """Its nodes in the racks ``locs`` ((zone, rack) each), in their order."""
        return [n for n in self.nodes if (n.zone, n.rack) in locs]

    def first_at(self, loc: _Loc) -> str:
        """The smallest name of its nodes in rack ``loc``: the multi-node search asks it of
        every rack that ties with the best placement found (a hundred racks of one-GPU
        replicas on a busy cluster), so one pass finds it for every rack of the group, and
        the group keeps them."""
        if self._firsts is None:
            firsts: dict[_Loc, str] = {}
            for node in self.nodes:
                at = (node.zone, node.rack)
                first = firsts.get(at)
                if first is None or node.name < first:
                    firsts[at] = node.name
            self._firsts = firsts
        return self._firsts[loc]

    def reach(self) -> float:
        """The fastest rate its nodes can reach another node at: the effective network,
        or inside an NVLink domain the fabric (cost.domain_gbps), whichever is higher."""
        if self.domain is None:
            return self.network_gbps
        return max(self.network_gbps, domain_gbps(self.kind.topology))

    def first(self) -> str:
        """The smallest node name (the one-node search's tie-break; a GroupedNodes keeps
        groups across solves, so it is looked for once)."""
        return self.first_node().name

    def first_node(self) -> NodeState:
        """The node of the smallest name (names are unique: one node)."""
        if self._first is None:
            self._first = min(self.nodes, key=_NAME)
        return self._first

    def carry_first(self, was: _Group, changed: Container[str],
                    came: Iterable[NodeState]) -> None:
        """Know the first node from ``was``, this group before a replacement: when its
        first node is still here unchanged (its name not ``changed``), the first is the
        smaller of it and the nodes that ``came``. Why: the group a gang just took a node
        from is rebuilt for every new gang, and holds hundreds of alike nodes (the empty
        ones); looking for the smallest name among them again is a pass over all of
        them."""
        first = was._first
        if first is not None and first.name not in changed:
            self._first = min((first, *came), key=_NAME)

    def canon(self) -> tuple[str, tuple[int, ...], float, int]:
        """The classes' sort key and memo signature: (topology JSON, used, network, cap)."""
        if self._canon is None:
            self._canon = (*self.kind.head(), self.network_gbps, self.cap)
        return self._canon


_NAME = attrgetter("name")


def _check_names(nodes: Sequence[NodeState]) -> None:
    names = [n.name for n in nodes]
    if len(set(names)) == len(names):
        return  # the common case, checked at C speed
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputError(f"node {name!r} appears twice")
        seen.add(name)


def _free_domains(groups: Iterable[_Group]) -> frozenset[str]:
    """The NVLink domains none of whose groups has a GPU in use (objective.free_domains)."""
    seen: set[str] = set()
    used: set[str] = set()
    for grp in groups:
        if grp.domain is not None:
            seen.add(grp.domain)
            if not grp.kind.opened:
                used.add(grp.domain)
    return frozenset(seen - used)


def _merge_twins(groups: list[_Group]) -> list[_Group]:
    """One group per (topology, used, network) when equal topologies came as several
    objects (nodes whose annotations were parsed one by one). The groups given are left as
    they are (a :class:`GroupedNodes` keeps them for later solves)."""
    merged: dict[tuple[Topology, frozenset[int], float, str | None, int], _Group] = {}
    for grp in groups:
        key = (grp.kind.topology, grp.kind.used, grp.network_gbps, grp.domain, grp.cap)
        have = merged.get(key)
        merged[key] = grp if have is None else _Group(have.kind, have.network_gbps,
                                                      have.nodes + grp.nodes, have.domain,
                                                      have.cap)
    return list(merged.values())


_BucketKey = tuple[int, frozenset[int], float, str | None, int]


def _bucket_key(node: NodeState) -> _BucketKey:
    """What makes nodes alike for the solver: topology (by object: its __hash__ is a Python
    call; equal topologies of different objects are merged later), used GPUs, network,
    NVLink domain (None on nodes without one: their grouping is as before), and the most
    GPUs of this gang the node's other resources let it hold (``gpu_cap``)."""
    return (id(node.topology), node.used, node.effective_gbps, node.nvlink_domain,
            node.gpu_cap)


def _group(key: _BucketKey, members: list[NodeState],
           kinds_by_id: dict[int, dict[frozenset[int], _Kind]]) -> _Group:
    tid, used, net, domain, cap = key
    kinds = kinds_by_id.get(tid)
    if kinds is None:
        kinds = kinds_by_id[tid] = _kinds_of(members[0].topology)
    kind = kinds.get(used)
    if kind is None:
        kind = kinds[used] = _kind(members[0].topology, used)
    return _Group(kind, net, members, domain, cap)


def _group_nodes(nodes: Iterable[NodeState]) -> list[_Group]:
    """The solver's one pass over every node: nodes alike in topology, used GPUs and
    network land in one group (a busy 1,000-node cluster has a few hundred)."""
    buckets: dict[_BucketKey, list[NodeState]] = {}
    for node in nodes:
        key = _bucket_key(node)
        members = buckets.get(key)
        if members is None:
            buckets[key] = [node]
        else:
            members.append(node)
    kinds_by_id: dict[int, dict[frozenset[int], _Kind]] = {}
    groups = [_group(key, members, kinds_by_id) for key, members in buckets.items()]
    if len({id(k) for k in kinds_by_id.values()}) < len(kinds_by_id):
        groups = _merge_twins(groups)
    return groups


@dataclass(frozen=True)
class _Tally:
    """Nodes per GPU count, per free-GPU count and per effective network: all that the
    feasibility reasons and the multi-node search's first bound read of the groups."""

    sizes: dict[int, int]
    frees: dict[int, int]
    nets: dict[float, int]

    @classmethod
    def of(cls, groups: Iterable[_Group]) -> _Tally:
        sizes: dict[int, int] = {}
        frees: dict[int, int] = {}
        nets: dict[float, int] = {}
        for grp in groups:  # one pass, every solve of a plain list: kept plain
            kind, count = grp.kind, len(grp.nodes)
            net = grp.network_gbps if grp.domain is None else grp.reach()
            sizes[kind.size] = sizes.get(kind.size, 0) + count
            frees[grp.free] = frees.get(grp.free, 0) + count
            nets[net] = nets.get(net, 0) + count
        return cls(sizes, frees, nets)

    def copy(self) -> _Tally:
        return _Tally(dict(self.sizes), dict(self.frees), dict(self.nets))

    def add(self, grp: _Group, count: int) -> None:
        """Count ``count`` nodes like those of ``grp`` in (or out, if negative)."""
        _count(self.sizes, grp.kind.size, count)
        _count(self.frees, grp.free, count)
        _count(self.nets, grp.reach(), count)


def _count_in(table: dict[str, tuple[int, int]], node: NodeState, sign: int) -> None:
    """Count ``node`` in (``sign`` 1) or out (-1) of its NVLink domain's (nodes, nodes
    with a GPU in use); a domain left with no node is dropped."""
    domain = node.nvlink_domain
    assert domain is not None
    nodes, used = table.get(domain, (0, 0))
    nodes, used = nodes + sign, used + sign * bool(node.used)
    if nodes:
        table[domain] = (nodes, used)
    else:
        del table[domain]


def _count(table: dict[Any, int], value: Any, count: int) -> None:
    """``table[value] += count``, the entry gone at zero (``max`` reads only the keys)."""
    left = table.get(value, 0) + count
    if left:
        table[value] = left
    else:
        del table[value]
