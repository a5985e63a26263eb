"""A node list with the solver's grouping kept up to date between solves (the webhook's).

Why a module of its own: it is the state the webhook carries from one gang to the next,
with its own rules for what may be carried over (the tallies, each group's first node, the
best one-node key per gang size, the NVLink domains in use) and tests of each
(tests/placement/test_grouped_nodes.py, test_grouped_nodes_upkeep.py).
"""

from __future__ import annotations

import copy
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from gputopo.placement.solver.grouping import (
    _bucket_key,
    _BucketKey,
    _check_names,
    _count_in,
    _Group,
    _group,
    _Kind,
    _merge_twins,
    _Tally,
)
from gputopo.placement.solver.one_node import _best_single, _Order, _Tied
from gputopo.placement.solver.options import _Option
from gputopo.placement.solver.racks import RackCounts, moved, of_buckets
from gputopo.placement.types import NodeState
from gputopo.topology.gpus import gpu_model_key
from gputopo.topology.model import Topology

#: Per gang size: (best one-node key, the groups tied for it, their name order or None,
#: the bucket keys touched since the ties were worked out)
_Single = tuple[tuple | None, _Tied, _Order | None, frozenset[_BucketKey]]
#: Touched keys an entry may gather before it is dropped (worked out again when asked)
_STALE_KEYS = 64


def _reordered(order: _Order | None, tied: _Tied, gone: Iterable[object],
               fresh: _Tied) -> _Order | None:
    """``order`` (of ``tied``) without the groups ``gone`` and with those of ``fresh``, or
    None (worked out when asked) when there was none.

    Why kept up to date rather than rebuilt: the winner's group is the one a gang just
    took a node of, so it is replaced after almost every one-node gang, and a minimum over
    every tied group (a few hundred for one GPU on the benchmark's cluster) then cost
    ~2,800 bytecodes per new gang (bench/admission_profile.py --opcodes); a removal and an
    insertion by bisection are a few dozen. A copy: the order of ``tied`` stays valid for
    the copy it belongs to."""
    if order is None:
        return None
    if not gone and not fresh:
        return order
    out = list(order)
    for key in gone:
        del out[bisect_left(out, (tied[key][0].first(), key))]
    for key, (grp, _) in fresh.items():
        insort(out, (grp.first(), key))
    return out


class GroupedNodes(Sequence[NodeState]):
    """A list of nodes with the solver's grouping pass done, kept up to date node by node.

    Why: the webhook solves the whole cluster for every new gang, and between two gangs
    only the few nodes a reservation touched change. The pass that groups 1,000 nodes was
    half of a one-node solve, and the loops over a few hundred groups that follow it (the
    feasibility reasons, the best one-node share) most of the rest (`git show
    5b1c38e:docs/benchmarks.md`, "Solver state kept across gangs"). :meth:`replaced`
    redoes the groups of the changed nodes only and carries the tallies and the best
    one-node key per gang size over (with the tied groups in name order, brought up to
    date when the size is asked);
    :func:`solve` given a GroupedNodes starts from them. Answers are the same as for the
    plain list (the search never depends on the order of groups or of their nodes;
    tests/placement/test_grouped_nodes.py, test_grouped_nodes_upkeep.py).

    Read-only: a change is a new GroupedNodes (:meth:`replaced`); the old one stays valid.
    """

    __slots__ = ("_alike", "_buckets", "_domain_used", "_free", "_groups", "_list", "_nodes",
                 "_parts", "_racks", "_single", "_tally", "_tops", "_twins", "_where")

    def __init__(self, nodes: Iterable[NodeState]) -> None:
        self._nodes = list(nodes)
        self._where = {n.name: i for i, n in enumerate(self._nodes)}
        if len(self._where) != len(self._nodes):
            _check_names(self._nodes)
        buckets: dict[_BucketKey, dict[str, NodeState]] = {}
        for node in self._nodes:
            key = _bucket_key(node)
            members = buckets.get(key)
            if members is None:
                buckets[key] = {node.name: node}
            else:
                members[node.name] = node
        self._buckets = buckets
        #: per NVLink domain, (its nodes, those with a GPU in use): a free domain's is (n, 0)
        self._domain_used: dict[str, tuple[int, int]] = {}
        for node in self._nodes:
            if node.nvlink_domain is not None:
                _count_in(self._domain_used, node, 1)
        self._free: frozenset[str] | None = None
        kinds_by_id: dict[int, dict[frozenset[int], _Kind]] = {}
        self._groups = {key: _group(key, list(members.values()), kinds_by_id)
                        for key, members in buckets.items()}
        self._tally = _Tally.of(self._groups.values())
        self._single: dict[tuple[int, float | None], _Single] = {}  # per (n, bar)
        self._list: list[_Group] | None = None
        # the topologies of the last twin check, by id (held, so no id is reused meanwhile)
        self._tops: dict[int, Topology] = {}
        self._twins = False
        #: (every node of one GPU model, the first node's model key), None until asked
        self._alike: tuple[bool, tuple[str, float] | None] | None = None
        #: per GPU model (key), its nodes as a GroupedNodes of their own; None until asked
        self._parts: dict[tuple[str, float] | None, GroupedNodes] | None = None
        #: the racks' counts of nodes (racks.RackCounts, by bucket key), None until asked
        self._racks: RackCounts | None = None

    def rack_counts(self) -> RackCounts | None:
        """Per rack, its nodes per offer and per group (:mod:`racks`): what the multi-node
        search's scopes are built from. Counted when first asked, then kept up to date by
        :meth:`replaced` node by node. Why kept: counting each rebuilt group's nodes per
        rack, and walking every (group, rack) piece, was a third of a kept solve of a
        multi-node gang at 10,000 nodes. None when :meth:`groups` merged twin topologies
        (the bucket keys are not the solver's groups then: counted from the groups)."""
        self.groups()
        if self._twins:
            return None
        if self._racks is None:
            self._racks = of_buckets({k: m.values() for k, m in self._buckets.items()},
                                     self._groups)
        return self._racks

    def one_model(self) -> bool:
        """Whether every node's GPU model is one (by ``gpu_model_key``; all unknown counts
        as one): worked out once, then carried over by :meth:`replaced` while the nodes it
        changes keep that model. Why kept: the GPU-generation layer asks it of every solve
        (gputopo.placement.generations.partitions), and a pass over 1,000 nodes was 7 % of
        a new gang's admission (bench/admission_ab.py)."""
        if self._alike is None:
            key = gpu_model_key(self._nodes[0].gpu_model) if self._nodes else None
            self._alike = (all(gpu_model_key(n.gpu_model) == key for n in self._nodes), key)
        return self._alike[0]

    def by_model(self) -> list[GroupedNodes]:
        """The nodes per GPU model (``gpu_model_key``), each a GroupedNodes of its own, in
        order of first appearance: what the GPU-generation layer solves one by one
        (gputopo.placement.generations). Made once, then kept up to date by
        :meth:`replaced` part by part, so a mixed cluster keeps the grouping between gangs
        as a cluster of one model does (a one-node solve on 1,000 nodes of three models:
        ~1-2 ms on plain lists, tens of microseconds kept)."""
        if self._parts is None:
            lists: dict[tuple[str, float] | None, list[NodeState]] = {}
            for n in self._nodes:
                lists.setdefault(gpu_model_key(n.gpu_model), []).append(n)
            self._parts = {k: GroupedNodes(v) for k, v in lists.items()}
        return list(self._parts.values())

    def __len__(self) -> int:
        return len(self._nodes)

    @overload
    def __getitem__(self, i: int) -> NodeState: ...

    @overload
    def __getitem__(self, i: slice) -> list[NodeState]: ...

    def __getitem__(self, i: int | slice) -> NodeState | list[NodeState]:
        return self._nodes[i]

    def __iter__(self) -> Iterator[NodeState]:
        return iter(self._nodes)

    def get(self, name: str) -> NodeState | None:
        """The node of that name, or None: a lookup, where a caller that needs a few nodes
        by name would otherwise walk all of them."""
        at = self._where.get(name)
        return None if at is None else self._nodes[at]

    def _replaced_parts(self, final: dict[str, NodeState]
                        ) -> dict[tuple[str, float] | None, GroupedNodes] | None:
        """:meth:`by_model`'s parts with ``final`` (name -> node) in place, each part that
        holds a changed node replaced, the others shared; None (made again when asked)
        when a node changes GPU model."""
        assert self._parts is not None
        changed: dict[tuple[str, float] | None, list[NodeState]] = {}
        for name, node in final.items():
            old = self._nodes[self._where[name]]
            if old is node:
                continue
            key = gpu_model_key(node.gpu_model)
            if key != gpu_model_key(old.gpu_model):
                return None
            changed.setdefault(key, []).append(node)
        if not changed:
            return self._parts
        return {k: part.replaced(changed[k]) if k in changed else part
                for k, part in self._parts.items()}

    def replaced(self, nodes: Iterable[NodeState]) -> GroupedNodes:
        """A copy with each of ``nodes`` in the place of the node of its name (which must
        be here): the groups of untouched nodes are shared, not rebuilt."""
        final: dict[str, NodeState] = {}
        for node in nodes:
            if node.name not in self._where:
                raise ValueError(f"node {node.name!r} is not one of these nodes")
            final[node.name] = node
        # A shallow copy shares every field (the same names at the same places, the
        # topologies of the twin check, the per-domain counts until one changes); those
        # this change modifies are copied first.
        new = copy.copy(self)
        alike = self._alike
        if alike is not None and not (alike[0] and all(
                gpu_model_key(n.gpu_model) == alike[1] for n in final.values())):
            new._alike = None  # worked out again when asked
        new._parts = self._replaced_parts(final) if self._parts is not None else None
        new._nodes = list(self._nodes)
        new._buckets = dict(self._buckets)
        new._groups = dict(self._groups)
        new._tally = self._tally.copy()
        new._list = None
        # the touched buckets, each with its group before this change (None: new bucket)
        touched: dict[_BucketKey, _Group | None] = {}
        came: dict[_BucketKey, list[NodeState]] = {}  # the nodes each bucket gained
        #: (old node, its bucket key, new node, its bucket key) per changed node
        moves: list[tuple[NodeState, _BucketKey, NodeState, _BucketKey]] = []
        for name, node in final.items():
            at = self._where[name]
            old = self._nodes[at]
            if old is node:
                continue
            new._nodes[at] = node
            if old.nvlink_domain is not None or node.nvlink_domain is not None:
                if new._domain_used is self._domain_used:
                    new._domain_used, new._free = dict(self._domain_used), None
                for n, sign in ((old, -1), (node, 1)):
                    if n.nvlink_domain is not None:
                        _count_in(new._domain_used, n, sign)
            old_key, new_key = _bucket_key(old), _bucket_key(node)
            if self._racks is not None:
                moves.append((old, old_key, node, new_key))
            for key, add in ((old_key, False), (new_key, True)):
                members = new._buckets.get(key)
                if key not in touched:
                    touched[key] = new._groups.get(key)
                    members = new._buckets[key] = dict(members) if members is not None else {}
                assert members is not None
                if add:
                    members[name] = node
                    came.setdefault(key, []).append(node)
                else:
                    del members[name]
        kinds_by_id: dict[int, dict[frozenset[int], _Kind]] = {}
        for key, was in touched.items():
            # the tally counts by what the key fixes (GPU count, free count, network), so a
            # bucket's change is one count: its new size less its old
            members = new._buckets[key]
            if not members:
                del new._buckets[key]
                if was is not None:
                    del new._groups[key]
                    new._tally.add(was, -len(was.nodes))
                continue
            # overwritten in place, not popped and added: a dict with deleted entries is
            # copied entry by entry (4x slower), and every replacement copies these
            grp = new._groups[key] = _group(key, list(members.values()), kinds_by_id)
            change = len(grp.nodes) - (len(was.nodes) if was is not None else 0)
            if change:
                new._tally.add(grp, change)
            if was is not None:
                grp.carry_first(was, final, came.get(key, ()))
        if self._racks is not None:
            new._racks = moved(self._racks, new._groups, (
                (old, old_key, self._groups[old_key], node, key)
                for old, old_key, node, key in moves))
        if any(key[0] not in self._tops for key in touched):
            new._tops = {}  # a topology object not seen yet: look for twins again
        # The best one-node key per gang size is brought up to date when that size is
        # asked (:meth:`best_single`), from the keys touched since: sizes not asked
        # between two gangs cost a set union here, not a pass over their ties.
        # a domain that became free or stopped being free changes the one-node key of
        # every group in it (rare: its first node taken, its last released)
        flipped = (new.free_domains() ^ self.free_domains()) if new._free is None else ()
        touched_keys = set(touched).union(
            key for key in new._groups if key[3] in flipped) if flipped else touched
        new._single = {}
        for n, (best, tied, order, stale) in self._single.items():
            stale = stale.union(touched_keys)
            if len(stale) <= _STALE_KEYS:
                new._single[n] = (best, tied, order, stale)
        return new

    def groups(self) -> list[_Group]:
        """The solver's groups of these nodes (built once per bucket, shared by copies)."""
        if self._list is None:
            out = list(self._groups.values())
            if self._groups and not self._tops:
                # which topologies are equal but not the same object: merged below
                tops = {key[0]: grp.kind.topology for key, grp in self._groups.items()}
                self._tops, self._twins = tops, len(set(tops.values())) < len(tops)
            self._list = _merge_twins(out) if self._twins else out
        return self._list

    def tally(self) -> _Tally:
        """Nodes per GPU count, free-GPU count and network (read, never modify)."""
        return self._tally

    def free_domains(self) -> frozenset[str]:
        """The NVLink domains none of whose nodes has a GPU in use."""
        if self._free is None:
            self._free = frozenset(d for d, (_, used) in self._domain_used.items() if not used)
        return self._free

    def best_single(self, n: int, good: float | None = None
                    ) -> tuple[_Group, _Option] | None:
        """The one-node winner for ``n`` GPUs (and the gang's bar ``good``, its
        ``good_gbps``): of the groups that reach the best one-node key, the one holding the
        smallest node name (names are unique, so that alone breaks the tie), with its best
        share; None when no node has ``n`` free GPUs."""
        at = (n, good)
        got = self._single.get(at)
        if got is not None and got[3]:
            got = self._refreshed(at, *got)
        if got is None:
            best, tied = _best_single(self._groups.items(), n, self.free_domains(), good)
            got = (best, tied, None, frozenset())
        best, tied, order, _ = got
        if tied and order is None:
            order = sorted([(grp.first(), key) for key, (grp, _) in tied.items()])
            got = (best, tied, order, frozenset())
        self._single[at] = got
        return tied[order[0][1]] if tied and order else None

    def _refreshed(self, at: tuple[int, float | None], best: tuple | None, tied: _Tied,
                   order: _Order | None, stale: frozenset[_BucketKey]) -> _Single | None:
        """The entry for ``at`` (gang size, bar) made for an earlier copy, brought up to
        date: the groups of the ``stale`` keys (touched since) leave the ties and are rated
        again; the others are the same groups as then. None when every group at the best changed
        and none reaches it now (worked out again over every group)."""
        gone = tied.keys() & stale  # at C speed: stale is a few keys, tied hundreds
        top, fresh = _best_single(((key, self._groups[key]) for key in stale
                                   if key in self._groups), at[0], self.free_domains(),
                                  at[1])
        if top is not None and (best is None or top > best):
            return top, fresh, None, frozenset()
        if top is None or top != best:
            fresh = {}  # below the best: not among the ties
            if tied and len(gone) == len(tied):
                return None
        kept = tied
        if gone or fresh:  # one copy of the ties (hundreds), never two
            kept = dict(tied)
            for key in gone - fresh.keys():  # still tied: overwritten in place
                del kept[key]
            kept.update(fresh)
        return best, kept, _reordered(order, tied, gone, fresh), frozenset()
