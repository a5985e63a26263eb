"""Per rack, the counts of nodes the multi-node search's scopes are built from.

Why a module of its own: a rack's room for a gang (nodes per count of its replicas they can
hold) and its rate depend only on how many of its nodes offer each number of free GPUs on
each network, whatever their group: ~7 numbers per rack on a busy 10,000-node cluster,
against ~18 (group, rack) pieces. :func:`scopes.scopes` reads these numbers for every rack,
zone and the cluster (~2,000 reads instead of ~5,800 pieces, each with four dict updates),
and lists a rack's groups (:meth:`RackCounts.held`: what a bound past level 0, a first name
and a plan read) only for the few dozen scopes the search looks at. A
:class:`GroupedNodes` keeps its counts between solves and brings them up to date node by
node (:func:`moved`), so a solve of a kept grouping does not count the nodes of the groups a
change rebuilt.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from gputopo.placement.solver.grouping import _Group, _Loc
from gputopo.placement.types import NodeState

#: (GPUs of the gang one node may take: its group's ``free``, network Gbit/s)
Offer = tuple[int, float]


@dataclass(eq=False)
class RackCounts:
    """Per (zone, rack): its nodes (``size``), its nodes per :data:`Offer` (``offers``),
    and its nodes per group key (``pieces``; a key is the group itself, or a bucket key
    of ``groups``). Read-only once built: a kept grouping's copy shares the racks a change
    did not touch. Counted for one gang (:func:`of_groups`), ``offers`` and ``pieces``
    may leave out what has no room for its replicas. Why a table of offers per rack and
    not one keyed by (rack, offer): a plain list's count then made a key per (group,
    rack) piece (~5,800 at 10,000 nodes), ~1 ms and a garbage collection more per solve,
    and a kept grouping's copy of one node's change copied all ~2,100 entries."""

    size: dict[_Loc, int]
    offers: dict[_Loc, dict[Offer, int]]
    pieces: dict[_Loc, dict[Hashable, int]]
    groups: Mapping[Hashable, _Group] | None = None  # key -> group; None: keys are groups

    def held(self, loc: _Loc, g: int) -> dict[_Group, int]:
        """The groups of rack ``loc`` with room for a replica of ``g`` GPUs, each with its
        count of nodes there."""
        out: dict[_Group, int] = {}
        groups = self.groups
        for key, k in self.pieces.get(loc, {}).items():
            grp = key if groups is None else groups[key]
            assert isinstance(grp, _Group)
            if grp.free >= g:
                out[grp] = k
        return out


def of_groups(groups: Iterable[_Group], g: int) -> RackCounts:
    """The counts of a plain list's groups for replicas of ``g`` GPUs: a group with room
    for one counted per rack once (:meth:`_Group.racks`), one without room only into the
    racks' sizes, straight from its nodes. Why apart: an 8 x 8 gang has room on few
    groups, and a dict of racks per group for the others was ~6 ms of a plain solve at
    10,000 nodes."""
    size: dict[_Loc, int] = {}
    offers: dict[_Loc, dict[Offer, int]] = {}
    pieces: dict[_Loc, dict[Hashable, int]] = {}
    for grp in groups:
        if grp.free < g:
            for node in grp.nodes:
                loc = (node.zone, node.rack)
                size[loc] = size.get(loc, 0) + 1
            continue
        offer = _offer(grp)
        for loc, k in grp.racks().items():
            size[loc] = size.get(loc, 0) + k
            here = pieces.get(loc)
            if here is None:
                pieces[loc], offers[loc] = {grp: k}, {offer: k}
                continue
            here[grp] = k
            at = offers[loc]
            at[offer] = at.get(offer, 0) + k
    return RackCounts(size, offers, pieces)


def of_buckets(buckets: Mapping[Hashable, Iterable[NodeState]],
               groups: Mapping[Hashable, _Group]) -> RackCounts:
    """The counts of a kept grouping: ``buckets`` (bucket key -> nodes), ``groups`` (bucket
    key -> its group, one per bucket)."""
    counts = RackCounts({}, {}, {}, groups)
    for key, members in buckets.items():
        grp = groups[key]
        for node in members:
            _add(counts, (node.zone, node.rack), key, grp, 1)
    return counts


def moved(counts: RackCounts, groups: Mapping[Hashable, _Group],
          changes: Iterable[tuple[NodeState, Hashable, _Group, NodeState, Hashable]]
          ) -> RackCounts:
    """A copy of ``counts`` with each change (old node, its bucket key, its group before
    the change, new node, its bucket key) counted: one node out of its old key's rack,
    one into its new key's; ``groups`` is the copy's key -> group. The racks no change
    touches share their ``pieces`` with ``counts``. Why node by node: a change of 200
    nodes touches most groups (each rebuilt), but each node moves one count in two
    racks."""
    # the sizes are shared until a node changes rack (rare)
    new = RackCounts(counts.size, dict(counts.offers), dict(counts.pieces), groups)
    offers, pieces = new.offers, new.pieces
    copied: set[_Loc] = set()  # the racks whose pieces and offers are this copy's own
    for old, old_key, was, node, key in changes:
        grp = groups[key]
        old_loc, loc = (old.zone, old.rack), (node.zone, node.rack)
        if old_loc != loc:  # moved to another rack (rare): out of one, into the other
            if new.size is counts.size:
                new.size = dict(counts.size)
            for at, k, of, sign in ((old_loc, old_key, was, -1), (loc, key, grp, 1)):
                if at not in copied:
                    copied.add(at)
                    if at in pieces:
                        pieces[at], offers[at] = dict(pieces[at]), dict(offers[at])
                _add(new, at, k, of, sign)
            continue
        if old_key == key:
            continue  # the same bucket (and so the same offer) in the same rack
        # the same rack (the common case: GPUs taken or freed): its size stays
        here, at = pieces[loc], offers[loc]
        if loc not in copied:
            copied.add(loc)
            here, at = pieces[loc], offers[loc] = dict(here), dict(at)
        _bump(here, old_key, -1)
        _bump(here, key, 1)
        gone, came = _offer(was), _offer(grp)
        if gone != came:
            _bump(at, gone, -1)
            _bump(at, came, 1)
    return new


def _add(counts: RackCounts, loc: _Loc, key: Hashable, grp: _Group, sign: int) -> None:
    """Count one node of ``key`` (of group ``grp``) into (``sign`` 1) or out of (-1) rack
    ``loc``; an entry left at zero is dropped (a rack with no node too)."""
    offer = _offer(grp)
    pieces = counts.pieces.get(loc)
    if pieces is None:
        counts.size[loc], counts.pieces[loc], counts.offers[loc] = 1, {key: 1}, {offer: 1}
        return
    left = counts.size[loc] + sign
    if not left:
        del counts.size[loc], counts.pieces[loc], counts.offers[loc]
        return
    counts.size[loc] = left
    _bump(pieces, key, sign)
    _bump(counts.offers[loc], offer, sign)


def _offer(grp: _Group) -> Offer:
    """What a node of ``grp`` offers a replica: its free GPUs for the gang and its network."""
    return (grp.free, grp.network_gbps)


def _bump(table: dict, key: Hashable, sign: int) -> None:
    left = table.get(key, 0) + sign
    if left:
        table[key] = left
    else:
        del table[key]
