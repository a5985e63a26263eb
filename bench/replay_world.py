"""The replay's "true" world: how fast a placed job really runs, apart from what the
policies predicted when they placed it.

Why: the replay's clock used to run on gputopo's own cost model, the model gputopo
optimizes, so any error in it counted for gputopo (issue 36: "the ruler is our own
model"). Here every policy decides on the cost model's predictions (gputopo's solver, the
waiting rule, the load), and a job's run time comes from a :class:`World` that may differ:

- **model error**: a seeded per-job factor, log-normal with ``error_sigma``, on the
  exposed (not overlapped) communication time of each step: the true step time is
  compute + exposed communication x factor. A one-GPU job has no communication and runs
  as predicted; the factor is the job's own (its code, its batch), the same wherever it is
  placed, and drawn from its own generator so the job stream does not change with it.
- **sensitivity**: the network shares NCCL gets over TCP (``tcp_share``, the model says
  0.25) and the bandwidth factor by the widest locality a gang spans (``span_factor``,
  the model says rack 1.0, zone 0.5, cluster 0.25) as the world has them. The policies
  keep deciding on the model's values: this is the case of an admin who did not measure
  (a measured TCP share can be stated per node: ``gputopo.io/network-efficiency``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gputopo.placement.objective import span_of
from gputopo.placement.types import NodeState, ReplicaSlot
from gputopo.topology.cost import SPAN_FACTOR, domain_gbps, ring_bus_bandwidth, step_time_s
from gputopo.topology.transport import TRANSPORT_EFFICIENCY


@dataclass(frozen=True)
class World:
    """What the clock runs on (module docstring); the defaults are the cost model's."""

    name: str = "model"
    error_sigma: float = 0.0
    tcp_share: float = TRANSPORT_EFFICIENCY["tcp"]
    span_factor: Mapping[str, float] = field(default_factory=lambda: dict(SPAN_FACTOR))

    def error(self, seed: int, job_id: int) -> float:
        """The job's factor on its exposed communication time (1 without error)."""
        if self.error_sigma <= 0:
            return 1.0
        return random.Random(f"model-error/{seed}/{job_id}").lognormvariate(
            0.0, self.error_sigma)

    def bandwidth(self, nodes: Mapping[str, NodeState], slots: Sequence[ReplicaSlot]
                  ) -> float:
        """The placement's all-reduce bus bandwidth (GB/s) in this world: the cost model's
        formula (gputopo.topology.cost.gang_bus_bandwidth) with this world's TCP share and
        span factors."""
        shares: dict[str, list[int]] = {}
        for s in slots:
            shares.setdefault(s.node, []).extend(s.gpus)
        if len(shares) == 1:
            (name, gpus), = shares.items()
            return ring_bus_bandwidth(nodes[name].topology, gpus) if len(gpus) > 1 else 0.0
        touched = [nodes[n] for n in sorted(shares)]
        worst = min((ring_bus_bandwidth(nodes[n].topology, g) for n, g in shares.items()
                     if len(g) > 1), default=math.inf)
        span = span_of(touched)
        if span == "nvlink-domain":  # the fabric, not the network (cost.gang_bus_bandwidth)
            slowest = min(domain_gbps(n.topology) for n in touched)
        else:
            slowest = min(self._effective_gbps(n) for n in touched)
        return min(worst, slowest / 8.0 * self.span_factor[span])

    def _effective_gbps(self, n: NodeState) -> float:
        if n.network_transport == "tcp" and n.network_efficiency is None:
            return n.network_gbps * self.tcp_share
        return n.effective_gbps


def step_s(*, params: float, compute_s: float, bus_gbps: float, gpus: int,
           overlap: float, error: float = 1.0) -> float:
    """One training step's time: compute, plus the exposed communication x ``error``."""
    if gpus == 1:
        return compute_s
    step = step_time_s(params=params, bytes_per_param=4, compute_s=compute_s,
                       bus_bw_gbps=bus_gbps, n_gpus=gpus, overlap=overlap)
    return compute_s + (step - compute_s) * error


#: The replay's worlds: the main table's (model error, sigma 0.3) and the sensitivity rows.
WORLDS: dict[str, World] = {w.name: w for w in (
    World("error 0.3", error_sigma=0.3),
    World("exact"),
    World("tcp 0.5", error_sigma=0.3, tcp_share=0.5),
    World("tcp 0.8", error_sigma=0.3, tcp_share=0.8),
    World("span 1.0", error_sigma=0.3, span_factor=dict.fromkeys(SPAN_FACTOR, 1.0)),
)}
MAIN_WORLD = "error 0.3"
