"""A scheduler-based baseline with the pod constraints a hardware-aware admin sets.

Why: kube-scheduler (with a coscheduling gang plugin) knows no GPU links, but an admin who
knows the cluster does not let it start a 32-GPU all-reduce on 25 GbE TCP servers, nor
spread a 4-GPU job's pods over four hosts. The two constraints such an admin writes into
the job templates (or a mutating policy writes for them):

- **a gang larger than one node**: a node affinity (``nodeSelector``) to the node kinds
  whose NCCL runs over GPUDirect RDMA;
- **a job that fits one node, one pod per GPU**: a required pod affinity with
  ``topologyKey: kubernetes.io/hostname`` to the job's own pods, so all of them land on the
  host the first one is scored onto (its filter sees only hosts with room for the whole
  job, as a gang plugin's PreFilter does).

Everything else (node scoring, the device plugin's GPU choice) is the wrapped baseline's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gputopo.placement.types import GangRequest, NodeState, Placement

Policy = Callable[[Sequence[NodeState], GangRequest], Placement]


def admin_configured(place: Policy, *, node_gpus: int = 8) -> Policy:
    """``place`` behind the admin's node selector and pod affinity (module docstring);
    ``node_gpus``: the most GPUs one node of the cluster has."""

    def placed(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
        if gang.total_gpus > node_gpus:
            return place([n for n in nodes if n.network_transport == "gdr"], gang)
        if gang.replicas == 1:
            return place(nodes, gang)
        room = [n for n in nodes if len(n.topology.gpus) - len(n.used) >= gang.total_gpus]
        first = place(room, GangRequest(1, gang.gpus_per_replica))
        if not first.feasible:
            return first
        host = next(n for n in room if n.name == first.slots[0].node)
        return place([host], gang)

    placed.__name__ = f"admin_{getattr(place, '__module__', 'policy').rsplit('.', 1)[-1]}"
    return placed
