"""The gang placement solver: the best placement of a gang by the objective in ``objective.py``.

Why it is built this way: the objective (see :mod:`gputopo.placement.objective`) is
lexicographic, and its first two terms are bottlenecks (a max of per-node costs, a min of
per-node pair speeds), so an exact search can enumerate *thresholds* instead of
assignments. Nodes with the same topology, used GPUs and network are interchangeable, so the
search runs over node *classes* and over how many replicas go to each class, never over
individual nodes; per (topology, free GPUs, k) the Pareto-best k-GPU subsets are cached.

Every solve of a plain list walks the nodes once, grouping them by (topology, used GPUs,
network); a busy cluster of thousands of nodes has a few hundred such groups, and the
feasibility reasons, the one-node search and the scopes' classes all work on groups. The
webhook solves the whole cluster for every new gang, so it keeps the grouping between
solves (:class:`GroupedNodes`: only the nodes a reservation changed are regrouped, and the
tallies and the best one-node share carry over). Only a multi-node search that gets past
its first bound walks the nodes of a plain list again, once, to count each group's nodes
per rack; a kept grouping keeps its racks' counts (per rack, nodes per free GPUs and
network, and per group: solver/racks.py) and brings them up to date node by node. A
scope's groups are listed only for the scopes bounded past their first level, and the
nodes of a rack only for the scopes planned.

The search, for ``R`` replicas of ``G`` GPUs (``n = R*G``):

1. One node. For every class with ``n`` free GPUs, its best ``n``-subset by (bus
   bandwidth, slowest pair, blocks kept); the best class wins.
2. Several nodes, inside each *scope*: every NVLink domain (nodes of one NVLink fabric,
   a GB200 NVL72 rack's trays: between them the fabric's rate, cost.domain_gbps, stands
   where the network's does below), every rack (one that is exactly a domain is searched
   as the domain), every zone, the whole cluster (a scope's
   span is an upper bound of the placement's real span; a placement that is narrower is also
   found in the narrower scope, where it is rated exactly). The cost model's gang bandwidth
   for ``m`` nodes is ``f(m, I, N) = min(-I, N x span factor / 8)`` where ``I`` is the worst
   share's cost (minus its bus bandwidth; -inf for one GPU) and ``N`` the slowest effective
   network (line rate x transport share): non-increasing in ``I``, increasing in ``N``,
   the same for every ``m`` (NCCL's rings pipeline; the objective then prefers the fewest
   nodes). Nodes are grouped by their effective network. So:

   a. for every node count m and network threshold N, the smallest intra-cost threshold I
      such that exactly ``m`` nodes with network >= N can hold the ``R`` replicas with every
      share's cost <= I (a reachability DP over classes and replica counts, one big
      integer as the bitset of (nodes, replicas); feasibility only grows with I, so binary
      search). The best ``f(m, I, N)`` is the best bandwidth;
      every feasible triple with the same rounded value ties, and of those only the
      smallest ``m`` (the objective's ``nodes`` term) goes on;
   b. among those, the highest slowest-pair threshold that stays feasible;
   c. among those, a DP over classes that minimises the NVLink domains touched (a class
      is of one domain, and a domain's classes come together: a domain costs once), then
      the free domains opened (a domain with no GPU in use costs once more), then
      maximises the blocks kept, then packing, then fit (fewest GPUs left free on the
      touched nodes).

   Scopes are visited best upper bound first — a bound of the whole objective, term by
   term (``scopes.bound``, read from the scope's groups: classes are built only for the
   scopes planned) — and the search stops at the first that cannot win; scopes with the
   same multiset of classes share one search, and one score per real span. The bound
   comes in three levels, each tighter and costlier, and a scope is bounded further only
   while it is the best left (a heap): the bandwidth and the fewest nodes from the count
   of nodes per replicas they hold; every term from each node's best share; every term
   with the replicas counted (the m nodes hold R between them: a 64 x 1 gang on 8-GPU
   nodes takes whole nodes, not the one GPU that keeps every block). The last makes the
   racks that can only tie with the best found tie on the bound, and the node names rule
   them out unplanned.
3. The best candidate by the objective (rated with :func:`objective.score` itself), ties by
   node names and GPU indices.

Exactness is proved against brute force on small clusters
(tests/placement/test_solver_oracle.py); tests/placement/test_solver_reference.py pins every
answer to the solver as it was before the one-pass rework, on clusters of 20-60 nodes.
Known cost: the DPs are polynomial in ``R`` (replicas), per scope planned; with the replicas
counted in the bound a gang plans one to three scopes on a busy 10,000-node cluster, and
the rest of a solve is the passes over the nodes and the bounds of ~400 scopes
(docs/benchmarks.md, "10,000 nodes": a median of 20-35 ms for a plain list, 12-25 ms for a
kept grouping; stage c's knapsack over ~160 NVLink domains is what a 256-GPU gang waits on).
"""

from __future__ import annotations

from collections.abc import Sequence

from gputopo.placement.solver.candidate import _placement
from gputopo.placement.solver.feasibility import _check_input, _infeasible_reason
from gputopo.placement.solver.grouped_nodes import GroupedNodes
from gputopo.placement.solver.options import distinct_subsets, interchangeable_groups
from gputopo.placement.solver.search import _Search
from gputopo.placement.types import GangRequest, NodeState, Placement

__all__ = ["GroupedNodes", "distinct_subsets", "interchangeable_groups", "solve"]


def solve(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
    """Place ``gang`` on ``nodes``: the optimum of the objective, or infeasible with a reason.

    Pure and deterministic: the same nodes and gang always give the same placement.
    Raises :class:`InputError` for a malformed request (non-positive sizes, duplicate nodes).
    """
    _check_input(nodes, gang)
    solver = _Search(nodes, gang)
    reason = _infeasible_reason(solver.groups, solver.tally, gang, len(nodes))
    if reason:
        return Placement(feasible=False, reason=reason)
    best = solver.single_node()
    if gang.replicas > 1:
        best = solver.multi_node(best)
    assert best is not None  # _infeasible_reason guarantees one fits
    return _placement(gang, best)
