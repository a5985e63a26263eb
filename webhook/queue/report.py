"""What ``gputopo queue`` shows: the waiting gangs, their position, and why not now.

Why separate from the placer: the table is read from a cluster file as well as from a live
cluster, and explaining a gang must never write anything — it solves on the same nodes the
queue would use (:meth:`GangReserver.free_nodes`: the pod's constraints, reserved GPUs
marked used) and says what is missing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from gputopo.cluster.node_resources import capped_by_resources, pod_demand, solve_fitting
from gputopo.cluster.source import ClusterReader
from gputopo.placement.waiting import against_typical
from webhook.placement.fitting import nodes_for
from webhook.placement.reserve import GangReserver, ruled_out
from webhook.queue.gangs import WaitingGang


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
                now: float | None = None) -> str:
    """Why ``gang`` is not placed now, in a sentence (no side effects); the bar is the one
    its waiting rule sets at ``now`` (default: the clock)."""
    pod = gang.pods[0].pod
    need = gang.rule.start_share(overdue=gang.overdue(time.time() if now is None else now))
    free, excluded = reserver.free_nodes(cluster, pod, gang.transport_share)
    demand = pod_demand(pod)
    placement = solve_fitting(reserver.solver, free, gang.request, demand)
    if placement.feasible:
        fit, _ = nodes_for(cluster, pod, gang.transport_share)
        poor = reserver.not_good(placement, fit, gang.request, need, demand,
                                 typical=against_typical(gang.rule, need))
        return poor.reason if poor is not None else "fits now (placed at the next pass)"
    if capped_by_resources(free, demand, gang.request)[1]:  # the reason names them
        return ruled_out(placement.reason, free, excluded)
    per_node = sorted((len(n.free) for n in free), reverse=True)
    best = per_node[0] if per_node else 0
    return ruled_out(
        f"needs {gang.request.replicas} x {gang.request.gpus_per_replica} GPU(s); free now: "
        f"{sum(per_node)} GPU(s), at most {best} on one node", free, excluded)


def rows(gangs: list[WaitingGang], cluster: ClusterReader, reserver: GangReserver, *,
         now: float | None = None) -> list[Row]:
    t = time.time() if now is None else now
    return [Row(position=i, job=f"{g.key.kind} {g.key.namespace}/{g.key.name}",
                demand=g.demand, pods=len(g.pods),
                since=datetime.fromtimestamp(g.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                waited_seconds=round(g.waited(t), 1),
                why=why_not_now(g, cluster, reserver, now=t))
            for i, g in enumerate(gangs, start=1)]


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
