"""What the gang solver takes and gives: plain values, no Kubernetes, no I/O.

Why separate from the solver: the cluster view (``gputopo.cluster``) builds these from API
objects, the webhook turns a :class:`Placement` into pod mutations, the benchmarks build
them synthetically; none of them should depend on how the solver searches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gputopo.names import DEFAULT_NETWORK_GBPS, DEFAULT_NETWORK_TRANSPORT
from gputopo.topology.gpus import GpuIdentity, GpuModel
from gputopo.topology.model import Topology
from gputopo.topology.transport import TransportShares, effective_network_gbps, share_for

if TYPE_CHECKING:
    from gputopo.cluster.dra import DraDevice
    from gputopo.cluster.node_fit import NodeFacts
    from gputopo.cluster.node_resources import NodeResources

#: ``NodeState.gpu_cap`` of a node whose other resources do not limit the gang
UNCAPPED = 1 << 30


@dataclass(frozen=True)
class NodeState:
    """One activated node as the solver sees it.

    ``used`` holds driver indices of GPUs that are taken (bound pods and reservations);
    ``network_gbps`` is the node's network line rate in Gbit/s (annotation
    ``gputopo.io/network-gbps``) and ``network_transport`` how NCCL crosses it ("tcp",
    "rdma" or "gdr", annotation ``gputopo.io/network-transport``); ``effective_gbps`` is
    what the all-reduce gets of it (gputopo.topology.transport: the node's own
    ``network_efficiency``, else ``transport_share`` — the admitting policy's share for
    its transport, :func:`with_transport_shares` — else the transport's default), worked
    out once here because the solver groups thousands of nodes by it on every solve.
    ``facts`` is what the scheduler's node filters read of the Node object (labels, taints),
    kept beside the state so that a pod's nodeSelector and tolerations can be checked
    against 1,000s of nodes without looking each object up; None for nodes built without
    one (benchmarks, tests). Not part of equality: the solver never reads it.
    ``nvlink_domain`` names the NVLink fabric the node's GPUs share with other nodes (an
    NVL72 rack's trays); GPUs of one domain reach each other over NVLink, not the network.
    ``host_ports`` are the (protocol, port) pairs pods on the node hold on its network
    (host-network pods' ports, explicit hostPorts): a gang's network plan must not hand
    them out again (the scheduler's NodePorts filter would keep its pod off the node).
    ``resources`` is the node's allocatable and what pods there request (CPU, memory,
    extended resources: gputopo.cluster.node_resources), None when not known; not part of
    equality either. ``gpu_cap`` is the most GPUs of the gang being solved the node may
    hold because its other resources fit only so many of the gang's pods (set per gang by
    gputopo.cluster.node_resources; :data:`UNCAPPED` otherwise): the solver groups
    nodes by it and never puts more replicas on a node than it allows.
    ``gpu_model`` is what the node's GPUs are (gputopo.topology.gpus: compute, memory),
    from GPU Feature Discovery's labels (gputopo.cluster.gpu_facts); None when nothing says
    (benchmarks, tests, nodes without GFD): such nodes are alike to each other and rated
    by their wiring alone. ``gpu_ids`` ties driver indices to the GPUs' uuid and PCI bus id
    (what a DRA device names); empty when unknown; not part of equality (a per-node fact:
    it must not split nodes the solver treats as alike).
    ``gpu_handout`` is how the node's GPUs are handed out: ``device-plugin`` (an extended
    resource) or ``dra`` (its GPU driver's ResourceSlices; gputopo.cluster.dra), and
    ``dra_devices`` each driver index's DRA device (driver, pool, name, uuid) on a ``dra``
    node. Neither is part of equality: the solver never reads them (a pod's nodes are
    chosen by them before it solves).
    """

    name: str
    topology: Topology
    used: frozenset[int] = frozenset()
    zone: str | None = None
    rack: str | None = None
    network_gbps: float = DEFAULT_NETWORK_GBPS
    network_transport: str = DEFAULT_NETWORK_TRANSPORT
    facts: NodeFacts | None = field(default=None, compare=False, repr=False)
    host_ports: frozenset[tuple[str, int]] = field(default=frozenset(), compare=False,
                                                   repr=False)
    network_efficiency: float | None = None  # the node's measured share of its line rate
    transport_share: float | None = None  # the admitting policy's share for its transport
    #: the NVLink domain its GPUs share with other nodes' (GB200 NVL72: a rack's 18 trays),
    #: gputopo.cluster.nvlink_domain; None: an island, everything between nodes is network
    nvlink_domain: str | None = None
    resources: NodeResources | None = field(default=None, compare=False, repr=False)
    gpu_cap: int = UNCAPPED
    gpu_model: GpuModel | None = None
    gpu_ids: tuple[GpuIdentity, ...] = field(default=(), compare=False, repr=False)
    gpu_handout: str = field(default="device-plugin", compare=False)
    dra_devices: Mapping[int, DraDevice] | None = field(default=None, compare=False,
                                                         repr=False)
    effective_gbps: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        effective = effective_network_gbps(self.network_gbps, self.network_transport,
                                           self.network_efficiency, self.transport_share)
        object.__setattr__(self, "effective_gbps", effective)

    @property
    def free(self) -> tuple[int, ...]:
        """Driver indices of free GPUs, ascending."""
        return tuple(i for i in self.topology.indices if i not in self.used)


#: node name -> (the node as read, its copy under one share table): see with_transport_shares
SharesMemo = dict[str, tuple["NodeState", "NodeState"]]


def with_transport_shares(nodes: Sequence[NodeState], shares: TransportShares | None,
                          memo: SharesMemo | None = None) -> list[NodeState]:
    """``nodes`` as a policy with transport ``shares`` sees them (``placement.
    transportShare``): each node's ``transport_share`` set from the table; nodes the table
    does not change come back as they are (the same objects).

    Why a copy per node and not a parameter of the solver: ``effective_gbps`` is what the
    solver groups nodes by, so it stays precomputed; a policy's view is built once per node
    list and remembered by the caller (webhook/placement/reserve.py), not per evaluation.
    ``memo`` (one per share table, refilled on every call) keeps the copy of a node whose
    object did not change: a binding pod replaces one node object, and copying the other
    999 again cost ~1.9 ms at 1,000 nodes.
    """
    old = memo if memo is not None else {}
    fresh: SharesMemo = {}
    out: list[NodeState] = []
    for n in nodes:
        share = share_for(shares, n.network_transport)
        if share == n.transport_share:
            out.append(n)
            continue
        hit = old.get(n.name)
        if hit is None or hit[0] is not n:
            # built directly, every field passed on (dataclasses.replace is twice as slow)
            hit = (n, NodeState(
                name=n.name, topology=n.topology, used=n.used, zone=n.zone, rack=n.rack,
                network_gbps=n.network_gbps, network_transport=n.network_transport,
                facts=n.facts, host_ports=n.host_ports,
                network_efficiency=n.network_efficiency, transport_share=share,
                nvlink_domain=n.nvlink_domain, resources=n.resources, gpu_cap=n.gpu_cap,
                gpu_model=n.gpu_model, gpu_ids=n.gpu_ids, gpu_handout=n.gpu_handout,
                dra_devices=n.dra_devices))
        fresh[n.name] = hit
        out.append(hit[1])
    if memo is not None:
        memo.clear()
        memo.update(fresh)
    return out


@dataclass(frozen=True)
class GangRequest:
    """A training job's GPU demand: ``replicas`` pods of ``gpus_per_replica`` GPUs each.

    ``max_replicas_per_node`` caps how many replicas may share a node (None: no cap). Why:
    replicas that claim the same host port (host-network pods of a TFJob all listen on
    2222) can never run on one node; the scheduler would keep such a gang pending forever.

    ``good_gbps``: the bus bandwidth (GB/s) at which a one-node placement on its node's
    best GPU set is good enough, so that packing decides among such placements (the
    objective's ``good`` terms, gputopo.placement.objective); None: bandwidth first, as
    for every placement. Worked out once per solve by the caller: the waiting rule's
    ``minShare`` of the gang's minShare reference (webhook/placement/reserve.py).

    ``well_gbps``: the gang's bus bandwidth placed well, its best on the empty nodes it may
    use; on a cluster of several GPU models the bandwidth the models' answers are rated
    against (gputopo.placement.generations), set by the caller with ``good_gbps``; None:
    the best of the answers.
    """

    replicas: int
    gpus_per_replica: int
    max_replicas_per_node: int | None = None
    good_gbps: float | None = None
    well_gbps: float | None = None
    #: the share of the job's step spent computing when placed well (policy key
    #: ``placement.computeShare``, annotation ``gputopo.io/compute-share``); None: not
    #: stated (gputopo.placement.throughput: the default ranks GPU models, the waiting rule
    #: takes the worst case)
    compute_share: float | None = None
    #: whether one gang may span GPU models (``placement.mixGpuModels``); by default never
    mix_models: bool = False
    #: the least GPU memory (MiB) each GPU must have (``placement.minGpuMemory``,
    #: annotation ``gputopo.io/gpu-memory``): smaller GPUs, and GPUs of unknown memory, are
    #: ruled out (gputopo.placement.generations)
    min_memory_mib: int | None = None

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def per_node(self) -> int:
        """Most replicas one node may hold."""
        cap = self.max_replicas_per_node
        return self.replicas if cap is None else min(self.replicas, cap)


@dataclass(frozen=True)
class ReplicaSlot:
    """Where one replica goes: a node and the driver indices of its GPUs."""

    replica: int
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """The solver's answer: every replica's slot, or infeasible with a reason.

    ``bus_bandwidth_gbps`` is the predicted all-reduce bus bandwidth of the whole gang
    (GB/s); ``reason`` explains the choice (or why there is none) in a sentence.
    ``tflops``: the TFLOPS the placement's slowest GPU trains at (what paces every
    synchronous step; ``GpuModel.training_tflops``: the data sheet's dense FP16/BF16
    TFLOPS blended with the memory bandwidth), None when no node says its GPU model.
    ``throughput``: the GPU model, the predicted step time's parts and the share of the best
    placement free now (gputopo.placement.generations), empty when no node says its GPU
    model.
    """

    feasible: bool
    slots: tuple[ReplicaSlot, ...] = ()
    bus_bandwidth_gbps: float = 0.0
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    tflops: float | None = None
    throughput: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The ``gputopo place -o json`` shape (CONTRACT.md)."""
        return {
            "feasible": self.feasible,
            "placements": [
                {"replica": s.replica, "node": s.node, "gpus": list(s.gpus)} for s in self.slots
            ],
            "busBandwidthGBps": round(self.bus_bandwidth_gbps, 3),
            "reason": self.reason,
            **({"throughput": self.throughput} if self.throughput else {}),
            **({"ruledOutByGpuMemory": self.details["ruledOutByGpuMemory"]}
               if self.details.get("ruledOutByGpuMemory") else {}),
        }
