"""CPU, memory and other requests held on a node by reserved slots whose pods are not there yet.

Why: a gang is solved and reserved at its first pod's admission, but its other pods are
created one by one afterwards. Until a pod exists, the node's requested sums (kept from the
pods the cluster view sees: bound, or pinned by a placement record) do not hold its CPU or
memory, so another gang admitted in between could be pinned beside it onto a node that
cannot run both; the scheduler then keeps one of them Pending for ever ("Insufficient
cpu"). The reservation keeps one replica's requests (``GangReservation.requests``, the
first pod's :func:`~gputopo.cluster.node_resources.pod_demand`), so each slot holds them on
its node until its pod takes over.

A slot counts here while no replica has been given it (``assigned``): a pod is given its
slot at its own admission and carries the placement record from then on, so from that
moment the view counts the pod's own requests, never both. (Between the admission and the
view's watch delivering the pod, a few milliseconds to a second, the slot counts nowhere;
the scheduler, which sees the pod, still refuses an overfull node.) Records written before
requests were kept hold none, and count nothing, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gputopo.cluster.gang_reservation import GangReservation
from gputopo.cluster.node_resources import Limits, Requests, add_requests, node_lookup
from gputopo.placement.types import NodeState


def pending_requests(reservations: Iterable[GangReservation]) -> dict[str, Requests]:
    """node -> the summed requests of the slots no replica has been given yet."""
    out: dict[str, Requests] = {}
    for res in reservations:
        if not res.requests:
            continue
        for slot in res.unassigned:
            add_requests(out.setdefault(slot.node, {}), res.requests)
    return out


def summed(per_gang: Iterable[Mapping[str, Mapping[str, int]]]) -> dict[str, Requests]:
    """node -> requests, added up over several gangs' :func:`pending_requests` (each kept
    by a store from the gang's last change, so a new gang's admission adds a few small
    dicts instead of asking every incomplete reservation for its free slots again)."""
    out: dict[str, Requests] = {}
    for per_node in per_gang:
        for node, asks in per_node.items():
            add_requests(out.setdefault(node, {}), asks)
    return out


def pending_limits(nodes: Sequence[NodeState], pending: Mapping[str, Mapping[str, int]],
                   demand: Mapping[str, int], most: int) -> Limits:
    """The nodes of ``nodes`` that ``pending`` names where, beside the requests ``pending``
    holds there, fewer than ``most`` pods asking for ``demand`` fit: how many, and what
    rules the next out (:data:`~gputopo.cluster.node_resources.Limits`, which
    :func:`~gputopo.cluster.node_resources.solve_fitting` takes as ``pending``). Elsewhere
    the pending requests change no cap and no reason. Why no copies of the nodes: a few
    gangs' pods are still arriving at nearly every new gang, and copying their nodes every
    time made the solver regroup and re-rate them twice per gang (about a third of a new
    gang's admission CPU, bench/admission_profile.py --components). The nodes are found by
    name (:func:`~gputopo.cluster.node_resources.node_lookup`): a walk over every node of
    the cluster for the few that ``pending`` names was, with 1,000 nodes, about a fifth of
    the Python a review runs (``--opcodes``). Nodes without resource data are left out:
    nothing is known of them."""
    if not pending:
        return {}
    lookup = node_lookup(nodes)
    out: Limits = {}
    for name, more in pending.items():
        n = lookup(name)
        if n is None or not more or n.resources is None:
            continue
        count, why = n.resources.fits(demand, most, beside=more)
        if count < most:
            out[name] = (count, why)
    return out
