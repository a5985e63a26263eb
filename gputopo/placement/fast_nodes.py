"""Who gets the fast nodes: a one-node job takes the fastest placement while the cluster's
gang nodes are mostly idle and cover the gangs waiting for them, and keeps off them when
they do not.

Why a rule of its own: "slowest good-enough" for every one-node job (the objective's
``good`` terms) keeps the nodes multi-node gangs need free even when no gang needs them,
so at low load 2-8-GPU jobs ran up to 10 % slower than on the idle DGX A100s for nothing
(the homogeneous cluster replay, load 0.5); "fastest always" (the GPU-generation ranking
of a compute-bound job) hands the GPUDirect nodes to one-node jobs while multi-node gangs
wait for them (the mixed-generation replay, loads 0.7 and 0.9). What a fast node is worth
depends on who else wants it (Gavel, Narayanan et al., OSDI 2020; Sia, Jayaram Subramanya
et al., SOSP 2023): here, the gangs over one node that wait in the queue.

The rule (docs/placement.md, "Who gets the fast nodes"):

- **gang nodes**: nodes whose network carries a multi-node all-reduce without the CPU in
  the way (``network_transport`` GPUDirect RDMA or RDMA: :data:`GANG_TRANSPORTS`), the
  only nodes a gang over one node runs well on; *empty* ones have no GPU in use or held;
- a job that fits one node is **free to take the fastest placement** (its bandwidth, then
  its GPU model's speed, first: no packing bar) when at least :data:`IDLE_SHARE` of the
  gang nodes' GPUs are on empty nodes (low load: keeping them free buys nothing) and,
  after it took one whole empty gang node, the empty ones still hold the waiting gangs
  that span nodes (more GPUs than the largest node has);
- otherwise the fast nodes are **scarce**: it is placed on the slowest good-enough set
  (the objective's ``good`` terms, as before the rule) and, on a cluster of several GPU
  models, an answer that opens an empty gang node is passed over for one that does not
  when that one gives at least :data:`SCARCE_FLOOR` of the best throughput
  (gputopo.placement.generations);
- the rule does not apply (None) to gangs over one node, nor on clusters without gang
  nodes (all TCP: the Alibaba trace's, the demo's): their answers are as before.

Tuned on the cluster replays' seeds 1-5 (docs/benchmarks.md): ``IDLE_SHARE`` 0.4, 0.5 and
0.6 and a reserve of whole nodes beyond the waiting gangs (0, 1, 2, 4) were tried; with the
waiting gangs alone (no idle share) small jobs took the DGX A100s at load 0.9 and the
homogeneous replay lost 3 % of its goodput.

Cost: three counts the webhook's ``GroupedNodes`` keeps up to date node by node as
reservations change (``gang_gpus``; a pass over a plain list of nodes otherwise); the
waiting gangs' sizes come from the view's waiting list (the queue's records) the
starvation guard reads too, asked only when the counts leave the answer open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gputopo.placement.solver import GroupedNodes
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.transport import GANG_TRANSPORTS

#: The fast nodes are free for a one-node job only while at least this share of the gang
#: nodes' GPUs is on empty nodes (module docstring): at low load keeping them free buys
#: nothing, at high load the next gang needs them.
IDLE_SHARE = 0.5
#: When they are scarce, a GPU model's answer that opens no empty gang node is taken
#: before one that does if it gives at least this share of the best throughput (the
#: waiting rule's default ``floorShare``: gputopo.placement.waiting); a slower one is not
#: worth the node kept.
SCARCE_FLOOR = 0.5


def empty_gang_gpus(nodes: Sequence[NodeState]) -> tuple[int, int, int]:
    """(GPUs of the empty gang nodes, GPUs of all gang nodes, GPUs of the largest node) of
    ``nodes``: kept up to date between gangs by the webhook's ``GroupedNodes``
    (``gang_gpus``), else one pass over the nodes."""
    if isinstance(nodes, GroupedNodes):
        return nodes.gang_gpus()
    empty = total = biggest = 0
    for n in nodes:
        size = len(n.topology.gpus)
        biggest = max(biggest, size)
        if n.network_transport in GANG_TRANSPORTS:
            total += size
            if not n.used:
                empty += size
    return empty, total, biggest


#: The GPU counts of the waiting gangs, asked only when the rule applies
Waiting = Callable[[], Iterable[int]]


def no_gangs_waiting() -> Iterable[int]:
    return ()


def fast_free(nodes: Sequence[NodeState], gang: GangRequest,
              waiting: Waiting = no_gangs_waiting) -> bool | None:
    """Whether ``gang`` may take the fastest placement on ``nodes`` (their GPUs in use or
    held marked used) while gangs of the GPU counts ``waiting()`` wait; None when the rule
    does not apply (module docstring)."""
    if gang.per_node < gang.replicas:
        return None
    empty, gang_gpus, biggest = empty_gang_gpus(nodes)
    if not gang_gpus or gang.total_gpus > biggest:
        return None
    if empty < IDLE_SHARE * gang_gpus:
        return False
    return empty - biggest >= sum(g for g in waiting() if g > biggest)
