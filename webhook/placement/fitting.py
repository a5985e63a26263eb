"""The nodes a pod fits, with the GPUs reservations hold marked used: the pieces
:class:`webhook.placement.reserve.GangReserver` remembers between gangs.

Why a module of its own: every new gang starts from "which nodes may its pods go to, and
which of their GPUs are free"; over 1,000 nodes that was as much CPU as the solve (node
labels and taints re-read, one NodeState copy per node holding reserved GPUs). These
functions answer it from the nodes' own facts and keep what did not change since the last
gang (:class:`Fit`, :func:`refreshed_fit`, :func:`exclude_held`'s memo), and the reserver keeps one
answer per pod constraints. They read nodes and pods only: no solve, no reservation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import is_, is_not
from typing import Any

from gputopo.cluster.node_fit import NodeFacts, PodConstraints
from gputopo.cluster.source import ClusterReader
from gputopo.placement.solver import GroupedNodes
from gputopo.placement.types import NodeState, with_transport_shares
from gputopo.topology.transport import TransportShares

#: Per node name: (the node as read, the reserved GPUs, the node with them marked used)
HeldMemo = dict[str, tuple[NodeState, frozenset[int], NodeState]]


def exclude_held(nodes: Sequence[NodeState], held: Mapping[str, set[int]] | Mapping[
                 str, frozenset[int]], memo: HeldMemo | None = None, *,
                 keep_memo: bool = False) -> list[NodeState]:
    """Nodes with reserved GPUs marked used, so the solver never offers them again.

    ``memo`` (the reserver's, refilled on every call) keeps the NodeState made for a
    node whose state and reserved GPUs did not change since the last gang: a third of a
    1,000-node cluster holds reserved GPUs, and one frozen-dataclass copy each is ~0.5 ms
    per new gang; with the memo only the few nodes that changed are copied.
    ``keep_memo``: add to the memo without forgetting other nodes (``nodes`` is a few
    nodes redone, not the whole cluster).
    """
    old = memo if memo is not None else {}
    fresh: HeldMemo = {}
    out = []
    for n in nodes:
        extra = held.get(n.name)
        if not extra:
            out.append(n)
            continue
        hit = old.get(n.name)
        if hit is None or hit[0] is not n or (hit[1] is not extra and hit[1] != extra):
            # built directly: dataclasses.replace re-runs field introspection per node,
            # twice the cost of the whole loop at 1,000 nodes (bench/admission.py); every
            # field is passed on (tests/placement_step/test_exclude_held.py checks that)
            hit = (n, frozenset(extra), NodeState(
                name=n.name, topology=n.topology, used=n.used | frozenset(extra), zone=n.zone,
                rack=n.rack, network_gbps=n.network_gbps,
                network_transport=n.network_transport, facts=n.facts,
                host_ports=n.host_ports, network_efficiency=n.network_efficiency,
                transport_share=n.transport_share, nvlink_domain=n.nvlink_domain,
                resources=n.resources, gpu_cap=n.gpu_cap, gpu_model=n.gpu_model,
                gpu_ids=n.gpu_ids, gpu_handout=n.gpu_handout, dra_devices=n.dra_devices))
        fresh[n.name] = hit
        out.append(hit[2])
    if memo is not None:
        if not keep_memo:
            memo.clear()
        memo.update(fresh)
    return out


def nodes_for(cluster: ClusterReader, pod: Mapping[str, Any],
              shares: TransportShares | None = None) -> tuple[list[NodeState], int]:
    """The topology nodes ``pod`` could be scheduled on at all (its nodeSelector, required
    node affinity and tolerations), and how many were ruled out. A node whose object the
    cluster view does not hold is kept: nothing is known against it. ``shares``: the
    admitting policy's transport shares (``placement.transportShare``), applied to the
    nodes returned.

    Why the facts on each NodeState: this runs over every node of the cluster for each new
    gang, inside its admission; looking each Node object up and re-reading its labels and
    taints cost ~3 ms at 1,000 nodes, about as much as the solve itself.
    """
    nodes = cluster.node_states()
    fit, _ = fit_nodes(cluster, nodes, pod_constraints(pod))
    return with_transport_shares(fit, shares), len(nodes) - len(fit)


def pod_constraints(pod: Mapping[str, Any]) -> PodConstraints:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    return PodConstraints.of(spec)


def fit_nodes(cluster: ClusterReader, nodes: Sequence[NodeState], constraints: PodConstraints
         ) -> tuple[list[NodeState], bool]:
    """The nodes ``constraints`` admit, and whether every answer came from the nodes'
    own facts (so that the same node objects always give the same answer)."""
    fit = []
    own = True
    for n in nodes:
        facts = n.facts
        if facts is None:  # a reader that builds bare NodeStates: read the object
            own = False
            node = cluster.object(api_version="v1", kind="Node", namespace=None, name=n.name)
            facts = NodeFacts.of(node) if node is not None else None
        if n.gpu_handout != constraints.handout:
            continue  # GPUs handed out another way than the pod asks them
        if facts is None or constraints.admits(facts):
            fit.append(n)
    return fit, own


def same_nodes(a: Sequence[NodeState], b: Sequence[NodeState]) -> bool:
    """True when ``a`` and ``b`` hold the very same NodeState objects in the same order.

    Identity, not equality: NodeState equality leaves out ``facts`` and ``host_ports``, and
    a reader replaces a node's object whenever anything about it changes. The readers hand
    out one tuple until a node changes, so the same sequence is the common answer; else a
    pointer walk at C speed (~20 us at 1,000 nodes, ~60 cold)."""
    return a is b or (len(a) == len(b) and all(map(is_, a, b)))


def kept_nodes(nodes: Sequence[NodeState]) -> Sequence[NodeState]:
    """``nodes`` to remember: a reader's tuple as it is (the same object next time when no
    node changed), anything else copied (the caller may change its list)."""
    return nodes if isinstance(nodes, tuple) else list(nodes)


@dataclass(frozen=True)
class Fit:
    """One pod-constraints' answer of :func:`nodes_for` for one list of node objects."""

    source: Sequence[NodeState]  # the reader's node objects it was computed from
    fit: list[NodeState]
    excluded: int
    where: dict[str, int]  # node name -> position in ``fit``


@dataclass(frozen=True)
class Free:
    """:func:`exclude_held` of one ``Fit.fit`` list at one revision of the held GPUs,
    with the solver's grouping of it kept for the next gang's changes (GroupedNodes)."""

    fit: list[NodeState]
    revision: int
    free: GroupedNodes


def refreshed_fit(hit: Fit, nodes: Sequence[NodeState], constraints: PodConstraints,
           shares: TransportShares | None) -> Fit | None:
    """``hit`` brought up to date with ``nodes`` when only a few node objects changed (a
    live view replaces a node's object whenever a pod binds there) and every one of them
    still fits or still does not: the changed nodes are checked, the others kept. None when
    that does not hold (other names, more than a quarter changed, a node without facts, a
    node that now fits or no longer does): the caller refits every node."""
    src = hit.source
    if len(src) != len(nodes):
        return None
    at = list(compress(range(len(nodes)), map(is_not, src, nodes)))
    if len(at) > len(nodes) // 4:
        return None
    fit = list(hit.fit)
    for i in at:
        old, new = src[i], nodes[i]
        if old.name != new.name or new.facts is None:
            return None
        was = hit.where.get(new.name)
        if (was is not None) != (new.gpu_handout == constraints.handout
                                 and constraints.admits(new.facts)):
            return None
        if was is not None:
            fit[was] = with_transport_shares([new], shares)[0] if shares else new
    return Fit(source=kept_nodes(nodes), fit=fit, excluded=hit.excluded, where=hit.where)


#: Distinct pod constraints remembered (most pods have none: one entry serves them all).
FIT_MEMO_SIZE = 64
