"""A reserved slot whose node is gone: find the replica a new home near its gang.

Why: a gang is placed once, but its pods come later and come again. A node deleted (scaled
down, replaced) or cordoned after the placement, or one whose GPUs stopped being usable,
would otherwise keep every pod of that slot pinned to it — Pending for ever, the operator
recreating it with the same replica index and the same slot. The placement step checks the
slot's node each time it hands a slot out; when the node cannot take the pod any more, the
slot moves (``ReservationStore.move_slot``) to the best free GPUs for ONE replica, looked
for first on the nodes the gang already uses, then in their racks, their zones, and last
anywhere — the cost model ranks the same way (NVLink/PCIe, then rack, zone, cluster).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gputopo.cluster.node_fit import PodConstraints
from gputopo.placement.types import NodeState, ReplicaSlot
from gputopo.topology.gpus import gpu_model_key


def slot_node_problem(state: NodeState | None, pod_spec: Mapping[str, Any],
                      slot: ReplicaSlot) -> str:
    """Why the slot's node (``state``, as the cluster reader has it) can no longer take this
    pod ("" when it still can).

    None: deleted, deactivated, or its GPU data unusable (the view leaves such nodes out).
    Present: the pod's own nodeSelector, required affinity and tolerations
    against it — a cordon or a new taint since the gang was placed, or a replica type
    whose constraints differ from those of the pod that placed the gang.
    """
    if state is None:
        return f"node {slot.node} is gone from the topology nodes of the cluster"
    facts = state.facts
    if facts is not None and not PodConstraints.of(pod_spec).admits(facts):
        return (f"node {slot.node} no longer admits this pod (cordoned, tainted, or outside "
                "its nodeSelector or required node affinity)")
    return ""


def repair_scopes(free: Sequence[NodeState], others: Sequence[ReplicaSlot],
                  per_node: int, *, mix_models: bool = False) -> list[list[NodeState]]:
    """Candidate node sets for the moved replica, nearest to the rest of the gang first.

    ``free`` are the nodes the pod fits with every reserved GPU marked used; ``others``
    the gang's other slots; a node already holding ``per_node`` of them is left out (the
    host-port cap of the gang). Unless the gang may span GPU models (``mix_models``), only
    nodes of the GPU model of its other slots' nodes (gputopo.placement.generations: the
    slowest GPU paces every step).
    """
    count: dict[str, int] = {}
    for s in others:
        count[s.node] = count.get(s.node, 0) + 1
    room = [n for n in free if count.get(n.name, 0) < per_node]
    if not mix_models:
        models = {gpu_model_key(n.gpu_model) for n in free if n.name in count}
        if len(models) == 1:
            (model,) = models
            room = [n for n in room if gpu_model_key(n.gpu_model) == model]
    near = [n for n in room if n.name in count]
    by_name = {n.name: n for n in free}
    homes = [by_name[name] for name in count if name in by_name]
    racks = {(n.zone, n.rack) for n in homes if n.rack is not None}
    zones = {n.zone for n in homes if n.zone is not None}
    tiers = [near,
             [n for n in room if n.rack is not None and (n.zone, n.rack) in racks],
             [n for n in room if n.zone is not None and n.zone in zones],
             room]
    out: list[list[NodeState]] = []
    seen: set[frozenset[str]] = set()
    for tier in tiers:
        names = frozenset(n.name for n in tier)
        if names and names not in seen:
            seen.add(names)
            out.append(tier)
    return out
