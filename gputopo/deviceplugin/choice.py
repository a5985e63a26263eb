"""Pure decisions of the device plugin: which GPUs to prefer, which env a container gets.

Why pure: the kubelet calls ``GetPreferredAllocation`` and ``Allocate`` with device IDs and
nothing else; everything the plugin answers follows from those IDs, the node's topology and
what the pod's annotations say. Keeping that arithmetic free of gRPC and of the API makes it
testable as data, and makes the fallback exactly the webhook's choice: the gang solver
(:func:`gputopo.placement.solver.solve`) on this one node, with the unavailable GPUs as used.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.model import Topology


def best_set(topology: Topology, available: Iterable[int], size: int,
             must: Iterable[int] = ()) -> tuple[int, ...]:
    """The solver's best ``size`` GPUs among ``available`` that include ``must``.

    ``must`` (the kubelet's must-include IDs, devices an init container already holds) is
    kept; the rest is the solver's best among the others. Fewer available than ``size``:
    what there is (the kubelet then fails the admission itself, as it should).
    """
    pool = sorted(set(available) | set(must))
    kept = sorted(set(must))[:size]
    need = size - len(kept)
    rest = [i for i in pool if i not in kept]
    if need <= 0:
        return tuple(kept)
    if len(rest) <= need:
        return tuple(sorted(kept + rest))
    used = frozenset(i for i in topology.indices if i not in rest)
    placement = solve([NodeState(name="local", topology=topology, used=used)],
                      GangRequest(replicas=1, gpus_per_replica=need))
    chosen = list(placement.slots[0].gpus) if placement.feasible else rest[:need]
    return tuple(sorted(kept + chosen))


def preferred_within(topology: Topology, wanted: Sequence[int], gang: Iterable[int],
                     available: Iterable[int], size: int,
                     must: Iterable[int] = ()) -> tuple[int, ...]:
    """The pod's placement when the kubelet can give it; else the best of the gang's GPUs.

    ``wanted``: this container's GPUs by the placement. ``gang``: the GPUs the gang holds on
    this node and has not been given yet (a peer the kubelet gave other GPUs leaves its own
    placement's GPUs free for the next one). Then the solver over everything available.
    """
    avail, must_set = set(available), set(must)
    if len(wanted) == size and set(wanted) <= avail and must_set <= set(wanted):
        return tuple(sorted(wanted))
    pool = (set(gang) | set(wanted)) & avail
    if len(pool | must_set) >= size and must_set <= avail:
        return best_set(topology, pool, size, must_set)
    return best_set(topology, avail, size, must_set)


def gpu_list(gpus: Iterable[int]) -> str:
    """``{5, 4}`` → ``"4,5"`` (ascending, the annotation form)."""
    return ",".join(str(i) for i in sorted(set(gpus)))


def container_env(*, visible: Iterable[int], own: Iterable[int]) -> dict[str, str]:
    """``NVIDIA_VISIBLE_DEVICES`` = the gang's GPUs on the node (so NVLink peers can use P2P),
    ``CUDA_VISIBLE_DEVICES`` = positions of the container's own GPUs among them."""
    order = sorted(set(visible) | set(own))
    return {
        "NVIDIA_VISIBLE_DEVICES": gpu_list(order),
        "CUDA_VISIBLE_DEVICES": ",".join(str(order.index(g)) for g in sorted(set(own))),
    }
