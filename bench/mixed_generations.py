"""The cluster replay on a cluster of GPU generations (``cluster_replay.py --cluster
mixed-generations``): where compute speed, not only wiring, decides a job's run time.

Why: the homogeneous replay charges no compute for older GPUs, so a policy that sends an
8-GPU job to a T4 server instead of an idle H100 pays nothing for it (issue 32, item 6).
Here:

- **The cluster**: H100 (NVSwitch, 8 x 400 Gbit/s GPUDirect), DGX A100 (NVSwitch, 800
  Gbit/s GPUDirect), DGX-1 V100 (hybrid cube mesh, 100 Gbit/s GPUDirect), L40S and T4
  two-socket PCIe servers (100 and 25 GbE, TCP); racks of four nodes of one kind. Each node
  carries GPU Feature Discovery's labels (``nvidia.com/gpu.product``, ``.memory``,
  ``.compute.major/minor``) and its :class:`~gputopo.placement.types.NodeState` gets its
  ``gpu_model`` the way the product's cluster view does
  (:func:`gputopo.cluster.gpu_facts.gpu_model_of`).
- **Jobs have a compute share** ``c`` (seeded per job, uniform 0.2-1.0): on a GPU model the
  step's compute takes ``c`` x (the reference's TFLOPS / its TFLOPS) + (1 - c) x (the
  reference's memory bandwidth / its memory bandwidth) of the reference's time (a
  roofline mix, the model table's own figures, gputopo.topology.gpus). A gang computes at
  its slowest GPU's pace; its step is that compute plus the exposed communication at the
  placement's (true) bandwidth. **Work is counted in reference-GPU time** (V100-SXM2: the
  replay's models' compute figures are V100 batches), so goodput stays comparable across
  policies (and may exceed 1 on faster GPUs).
- **Load**: the reference-GPU work demanded (at each job's best bandwidth) over the
  cluster's capacity in reference-GPU time (each GPU's speed at the median share, 0.6).
- **Heterogeneity-aware baselines**, both with the admin's pod affinity and GPUDirect rule
  (bench.baselines.admin) and best-fit inside a GPU model: *fastest-first* (FIFO, best
  effort: the fastest model with room) and *gavel-greedy*, a non-preemptive greedy of
  Gavel's max-throughput policy (Narayanan et al., OSDI 2020): each pass, the waiting
  (job, GPU model) pairs by the job's speed-up on that model over the reference, highest
  first, each job placed on the first model of its pairs with room. Kueue as an admin sets
  it up for this cluster: a flavor per GPU product, fastest first.

gputopo's rows are the product's decisions exactly as the webhook makes them: the
GangReserver's solver (gputopo.placement.generations.solve_models: one GPU model per gang,
models rated by predicted throughput), its waiting rule with GPU-model-aware references,
and the job's needs read from its annotations (gputopo.placement.job_needs). Two compute
shares must not be confused: the replay's ground truth, :func:`job_share`, splits a job's
*compute* between the part that scales with TFLOPS and the part that scales with memory
bandwidth, and the product is never told it; the product's ``gputopo.io/compute-share`` is
the share of the *step* spent computing rather than in the all-reduce when placed well
(gputopo.placement.throughput). Row ``gputopo``: jobs state nothing (the product's
default); row ``gputopo-stated``: each job states its own (:func:`stated_share`, measured
on the cluster's fastest GPUs at its best bandwidth, as a user who timed it there would).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bench.baselines.admin import admin_configured
from bench.baselines.best_fit import place as best_fit
from bench.gang_queue import Started
from bench.kueue_queue import KueueQueue, KueueSetup, flavors_by_kind
from bench.placement import FIXTURES
from gputopo import names
from gputopo.cluster.gang_reservation import GangReservation
from gputopo.cluster.gpu_facts import gpu_model_of
from gputopo.cluster.node_fit import NodeFacts
from gputopo.cluster.reservations import GangKey
from gputopo.placement.job_needs import with_needs
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.topology.gpus import MODELS, GpuModel
from gputopo.topology.load import read_topology_file


@dataclass(frozen=True)
class Server:
    """A kind of server: wiring fixture, GFD's labels for its GPUs, network, how many."""

    fixture: str
    product: str  # nvidia.com/gpu.product as GFD writes it
    memory_mib: int
    compute: tuple[int, int]
    network_gbps: float
    transport: str
    count: int


#: The mixed-generation cluster: 32 nodes, 256 GPUs.
SERVERS = {
    "h100": Server("hopper-nv18.tsv", "NVIDIA-H100-80GB-HBM3", 81559, (9, 0), 3200.0, "gdr", 4),
    "a100": Server("dgx-a100.txt", "NVIDIA-A100-SXM4-80GB", 81920, (8, 0), 800.0, "gdr", 8),
    "v100": Server("dgx1-v100.txt", "Tesla-V100-SXM2-32GB", 32768, (7, 0), 100.0, "gdr", 8),
    "l40s": Server("pcie-2socket-phb.txt", "NVIDIA-L40S", 46068, (8, 9), 100.0, "tcp", 6),
    "t4": Server("pcie-2socket-phb.txt", "Tesla-T4", 15360, (7, 5), 25.0, "tcp", 6),
}
#: The GPU the work is counted in (the replay's models' compute figures are V100 batches).
REFERENCE: GpuModel = MODELS["V100-SXM2-32GB"]
SHARE_RANGE = (0.2, 1.0)


def node_object(name: str, server: Server) -> dict[str, Any]:
    """The Node as the API server has it: GFD's labels."""
    major, minor = server.compute
    return {"metadata": {"name": name, "labels": {
        names.GPU_PRODUCT_LABEL: server.product,
        names.GPU_MEMORY_LABEL: str(server.memory_mib),
        names.GPU_COMPUTE_MAJOR_LABEL: str(major),
        names.GPU_COMPUTE_MINOR_LABEL: str(minor),
        "nvidia.com/gpu.count": "8",
    }}}


def mixed_cluster(servers: dict[str, Server] | None = None, *, rack_size: int = 4,
                  racks_per_zone: int = 4) -> list[NodeState]:
    """Empty nodes, racks of one kind, GPU models read off their GFD labels."""
    nodes: list[NodeState] = []
    rack = 0
    for kind, server in (servers or SERVERS).items():
        topo = read_topology_file(str(FIXTURES / server.fixture))
        for start in range(0, server.count, rack_size):
            for i in range(start, min(server.count, start + rack_size)):
                obj = node_object(f"{kind}-{i:04d}", server)
                nodes.append(NodeState(
                    name=obj["metadata"]["name"], topology=topo,
                    zone=f"zone-{rack // racks_per_zone}", rack=f"rack-{rack:03d}",
                    network_gbps=server.network_gbps, network_transport=server.transport,
                    facts=NodeFacts.of(obj), gpu_model=gpu_model_of(obj)))
            rack += 1
    return nodes


def speed(model: GpuModel | None, share: float) -> float:
    """How many times faster than the reference this GPU computes a job of ``share``."""
    m = model or REFERENCE
    return 1.0 / (share * REFERENCE.tflops / m.tflops
                  + (1.0 - share) * REFERENCE.memory_gbps / m.memory_gbps)


def job_share(seed: int, job_id: int) -> float:
    """The job's compute share, from its own generator (the stream stays the replay's)."""
    return random.Random(f"compute-share/{seed}/{job_id}").uniform(*SHARE_RANGE)


def capacity_ratio(cluster: Sequence[NodeState]) -> float:
    """The cluster's reference-GPU capacity / its GPU count (at the median share)."""
    mid = statistics.fmean(SHARE_RANGE)
    gpus = sum(len(n.topology.gpus) for n in cluster)
    return sum(len(n.topology.gpus) * speed(n.gpu_model, mid) for n in cluster) / gpus


def product(n: NodeState) -> str:
    return n.gpu_model.name if n.gpu_model is not None else "unknown"


def by_speed(cluster: Sequence[NodeState]) -> list[str]:
    """GPU products, fastest (TFLOPS) first."""
    models = {product(n): n.gpu_model for n in cluster}
    return sorted(models, key=lambda k: -(models[k].tflops if models[k] else 0.0))


@dataclass
class ModelQueue:
    """Best-effort placement of whole jobs on one GPU model at a time, for the
    heterogeneity-aware baselines (module docstring): ``order(job, models with a free
    GPU)`` says which models to try for a job, first to last; ``greedy`` ranks the waiting
    jobs by their best pair's speed-up (Gavel-style) instead of arrival order."""

    nodes: list[NodeState]
    shares: dict[GangKey, float]
    greedy: bool
    waiting: list[tuple[GangKey, GangRequest, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._held: dict[str, set[int]] = {}
        self._running: dict[GangKey, Placement] = {}
        self._place = admin_configured(best_fit)
        self._models = {product(n): n.gpu_model for n in self.nodes}
        self._fastest = by_speed(self.nodes)
        self.denied: list[GangKey] = []

    def arrive(self, key: GangKey, gang: GangRequest, now: float) -> Started | None:
        self.waiting.append((key, gang, now))
        return None

    def release(self, key: GangKey) -> None:
        for s in self._running.pop(key).slots:
            self._held[s.node].difference_update(s.gpus)

    def held_gpus(self) -> dict[str, set[int]]:
        return {n: set(g) for n, g in self._held.items() if g}

    def serve(self, now: float) -> list[Started]:
        pairs = []
        for i, (key, _gang, _) in enumerate(self.waiting):
            for rank, m in enumerate(self._fastest):
                gain = speed(self._models[m], self.shares[key])
                # greedy: the highest speed-up pairs first; else arrival order, fastest first
                pairs.append((-gain, i, m) if self.greedy else (i, rank, m))
        pairs.sort()
        out, placed = [], set()
        states: dict[str, list[NodeState]] = {}  # per model, rebuilt after a start
        for pair in pairs:
            i, m = (pair[1], pair[2]) if self.greedy else (pair[0], pair[2])
            if i in placed:
                continue
            key, gang, _ = self.waiting[i]
            if m not in states:
                states[m] = [replace(n, used=frozenset(self._held.get(n.name, ())))
                             for n in self.nodes if product(n) == m]
            p = self._place(states[m], gang)
            if p.feasible:
                placed.add(i)
                states.pop(m)
                for s in p.slots:
                    self._held.setdefault(s.node, set()).update(s.gpus)
                self._running[key] = p
                out.append(Started(key, now, GangReservation(
                    key=key, slots=p.slots, bus_bandwidth_gbps=p.bus_bandwidth_gbps), "queue"))
        self.waiting[:] = [w for i, w in enumerate(self.waiting) if i not in placed]
        return out


def queue_factory(seed: int, jobs: Sequence[Any]) -> Callable[[str, list[NodeState]], Any]:
    """The mixed mode's own queues: None for the policies bench.cluster_replay makes."""
    shares = {j.key: job_share(seed, j.id) for j in jobs}

    def make(policy: str, cluster: list[NodeState]) -> Any:
        if policy == "fastest-first":
            return ModelQueue(cluster, shares, greedy=False)
        if policy == "gavel-greedy":
            return ModelQueue(cluster, shares, greedy=True)
        if policy == "kueue-admin":
            return KueueQueue(cluster, KueueSetup(flavors_by_kind(cluster, by_speed(cluster),
                                                                  product)))
        return None

    return make


def clock_for(seed: int, overlap: float, step_s: Callable[..., float]) -> Callable[..., Any]:
    """Run time on mixed GPUs: compute at the slowest GPU's pace for the job's share, plus
    the exposed communication; work counted in reference-GPU time."""

    def clock(job: Any, true_bw: float, nodes: Sequence[NodeState], error: float
              ) -> tuple[float, float]:
        pace = min(speed(n.gpu_model, job_share(seed, job.id)) for n in nodes)
        compute = job.model.compute_s / pace
        step = step_s(params=job.model.params, compute_s=compute, bus_gbps=true_bw,
                      gpus=job.gang.total_gpus, overlap=overlap, error=error)
        return job.model.compute_s / step, job.work_s * step / job.model.compute_s

    return clock


def stated_share(seed: int, job: Any, best_gbps: float, cluster: Sequence[NodeState],
                 overlap: float, step_s: Callable[..., float]) -> float:
    """The compute share ``job`` states (``gputopo.io/compute-share``) in the product's
    sense (gputopo.placement.throughput): the share of its step spent computing when placed
    well on the GPUs it is rated against, the fastest model of the cluster, with its best
    bus bandwidth ``best_gbps`` (no model error: what the job measured); 1 for one GPU.
    Not :func:`job_share`, the replay's own split of the compute between TFLOPS and memory
    bandwidth, which the product is never told."""
    if job.gang.total_gpus == 1:
        return 1.0
    fastest = max((n.gpu_model for n in cluster if n.gpu_model is not None),
                  key=lambda m: m.tflops)
    compute = job.model.compute_s / speed(fastest, job_share(seed, job.id))
    step = step_s(params=job.model.params, compute_s=compute, bus_gbps=best_gbps,
                  gpus=job.gang.total_gpus, overlap=overlap)
    return compute / step


def stating(jobs: Sequence[Any], shares: Callable[[Any], float]) -> list[Any]:
    """``jobs`` with their gangs as the admission step reads them when each job states its
    compute share with the annotation (gputopo.placement.job_needs.with_needs)."""
    out = []
    for j in jobs:
        gang, problems = with_needs(j.gang, {names.COMPUTE_SHARE_ANNOTATION:
                                             f"{shares(j):.3f}"})
        assert not problems, problems
        out.append(replace(j, gang=gang))
    return out


#: The mixed mode's policies (gputopo's solver and the product's queue come from
#: bench.cluster_replay): "gputopo" with jobs that state no compute share (the product's
#: default), "gputopo-stated" with each job's stated (:func:`stated_share`).
POLICIES = ("gputopo", "gputopo-stated", "kueue-admin", "fastest-first", "gavel-greedy")
