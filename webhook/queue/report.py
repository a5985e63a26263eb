"""What ``gputopo queue`` shows: the waiting gangs, their position, and why not now.

Why separate from the placer: the table is read from a cluster file as well as from a live
cluster, and explaining a gang must never write anything. Why not now is what the queue's
next pass (:mod:`webhook.queue.placer`) would decide: the same :meth:`GangReserver.judge`
that its :meth:`GangReserver.reserve` takes the placement from, with the same arguments
(the gang's network from its records, the nodes its volumes reach, the requests of other
gangs' pods still coming, its bar and its waiting rule's share). A report that solved its
own way said "fits now" for gangs the pass left waiting; this one says what is missing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from gputopo.cluster.node_resources import capped_by_resources, pod_demand
from gputopo.cluster.node_volumes import pod_volumes
from gputopo.cluster.source import ClusterReader
from gputopo.placement import starvation
from gputopo.placement.waiting import against_typical
from webhook.placement.reserve import GangReserver, kept_free, ruled_out
from webhook.queue.gangs import WaitingGang, settled_network


@dataclass(frozen=True)
class Row:
    position: int
    job: str
    demand: str
    pods: int
    since: str
    waited_seconds: float
    why: str


def why_not_now(gang: WaitingGang, cluster: ClusterReader, reserver: GangReserver, *,
                now: float | None = None, avoid: frozenset[str] = frozenset()) -> str:
    """Why ``gang`` is not placed now, in a sentence (no side effects): what the queue's
    next pass would answer, as :meth:`webhook.queue.placer.PlacementQueue.run_once` calls
    :meth:`GangReserver.reserve`, at the share its waiting rule asks at ``now`` (default:
    the clock), after the pass's own first two questions: is the job still there, and has
    the gang a reservation already (then the pass places it on those GPUs). The pass tries
    ``minShare`` first and, once overdue with ``takeBest``, the floor; a placement good
    enough for the first is good enough for the second, so the share at ``now`` decides
    alone. The pass's retry when a node's host-port range is used up (``PortsUsedUp``) is
    not followed: a gated gang's network plan is settled from its records, so it never
    asks for new ports. ``avoid``: the nodes starving gangs ahead of it keep (the pass
    solves it without their GPUs: :func:`kept_ahead`)."""
    key = gang.key
    exists = getattr(cluster, "job_exists", None)  # a live view can tell; a file cannot
    if exists is not None and exists(key) is False:  # the pass gives it nothing
        return f"its job {key.kind} {key.namespace}/{key.name} is gone"
    if reserver.store.get(key) is not None:  # a pod of it admitted since got its GPUs
        return "fits now: its GPUs are reserved (placed at the next pass)"
    pod = gang.pods[0].pod
    need = gang.rule.start_share(overdue=gang.overdue(time.time() if now is None else now))
    demand = pod_demand(pod)
    volumes = pod_volumes(cluster, pod)
    net = settled_network(gang.pods[0].record)
    fit, free, excluded = reserver.fit_and_free(cluster, pod, gang.transport_share)
    if avoid:
        free = kept_free(free, avoid)
    judged = reserver.judge(fit, free, gang.request, demand, volumes, net=net,
                            good_share=need, typical=against_typical(gang.rule, need),
                            pack_share=gang.rule.min_share)
    placement, nodes = judged.placement, judged.nodes
    if placement.feasible:
        if judged.poor is not None:
            return judged.poor.reason
        return "fits now (placed at the next pass)"
    # the solver's reason when it names more than GPUs: nodes the volumes refuse, the pods'
    # other requests (their own or those of other gangs' pods still coming), unread claims
    if (nodes.refused or volumes.notes or judged.pending
            or capped_by_resources(nodes.free, demand, gang.request)[1]):
        reason = placement.reason or "no feasible placement"
    else:
        per_node = sorted((len(n.free) for n in nodes.free), reverse=True)
        reason = (f"needs {gang.request.replicas} x {gang.request.gpus_per_replica} GPU(s); "
                  f"free now: {sum(per_node)} GPU(s), at most "
                  f"{per_node[0] if per_node else 0} on one node")
    left = len(fit) - len(nodes.bound)
    if left and net is not None:  # the GPUs counted above are on the other nodes only
        ports = ", ".join(f"{proto} {port}" for proto, port in sorted(net.need.fixed))
        reason += (f"; {left} node(s) left out: another pod holds a host port the gang "
                   f"cannot move there ({ports})")
    return ruled_out(reason, nodes.bound, excluded)


def rows(gangs: list[WaitingGang], cluster: ClusterReader, reserver: GangReserver, *,
         now: float | None = None) -> list[Row]:
    t = time.time() if now is None else now
    out, avoid = [], frozenset[str]()
    for i, g in enumerate(gangs, start=1):
        why = why_not_now(g, cluster, reserver, now=t, avoid=avoid)
        if avoid and not why.startswith("fits now"):
            why = f"{why} (the nodes a starving gang ahead keeps left out)"
        out.append(Row(position=i, job=f"{g.key.kind} {g.key.namespace}/{g.key.name}",
                       demand=g.demand, pods=len(g.pods),
                       since=datetime.fromtimestamp(g.since, UTC).strftime(
                           "%Y-%m-%dT%H:%M:%SZ"),
                       waited_seconds=round(g.waited(t), 1), why=why))
        avoid |= kept_ahead(g, why, cluster, reserver, t)
    return out


def kept_ahead(gang: WaitingGang, why: str, cluster: ClusterReader, reserver: GangReserver,
               now: float) -> frozenset[str]:
    """The nodes ``gang`` keeps from the gangs behind it in the queue's pass (it starves
    and does not start: :func:`webhook.queue.gangs.serve_pass`), as the placer computes
    them; none otherwise."""
    if why.startswith("fits now") or not starvation.holds(gang.waited(now),
                                                          gang.max_wait_seconds):
        return frozenset()
    nodes = cluster.node_states()
    if gang.request.total_gpus > sum(len(n.topology.gpus) for n in nodes):
        return frozenset()
    return reserver.kept_for(nodes, gang.request, gang.rule.min_share)


def table(found: list[Row]) -> str:
    """A plain-text table (the columns of ``kubectl get``)."""
    if not found:
        return "no gangs waiting for a placement\n"
    head = ("POS", "JOB", "DEMAND", "GATED PODS", "WAITING SINCE", "WAITED", "WHY NOT NOW")
    body = [(str(r.position), r.job, r.demand, str(r.pods), r.since,
             f"{r.waited_seconds:.0f}s", r.why) for r in found]
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head) - 1)]
    lines = ["   ".join([*(c.ljust(w) for c, w in zip(x[:-1], widths, strict=True)), x[-1]])
             for x in (head, *body)]
    return "\n".join(line.rstrip() for line in lines) + "\n"
