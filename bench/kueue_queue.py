"""Kueue as a hardware-aware admin sets it up, with Kueue's own queueing: the strongest
realistic Kueue baseline of the cluster replay.

Why this module: the replay's first Kueue baseline (``kueue-tas``, one resource flavor
over all hardware, a *preferred* rack, the product's queue) was configured blind, and it
started multi-node gangs on 25 GbE TCP servers no admin would give them (issue 36). This
is the setup an admin who knows the hardware writes:

- **A ResourceFlavor per node kind** (``nodeLabels`` select the kind), each with the
  cluster's Topology (levels zone > rack > ``kubernetes.io/hostname``), one ClusterQueue
  whose ``nominalQuota`` per flavor is that flavor's GPUs, the flavors listed in the
  admin's order (:class:`KueueSetup`).
- **Jobs that fit one node** carry ``kueue.x-k8s.io/podset-required-topology:
  kubernetes.io/hostname``: all their pods on one host, or they wait.
- **Gangs over one node** carry a node affinity to the GPUDirect RDMA node kinds (Kueue
  skips a flavor whose ``nodeLabels`` the pod's affinity rules out) and
  ``podset-preferred-topology`` at the rack level.
- **Kueue's own queueing**: ``BestEffortFIFO`` (the default): pending workloads in
  creation order; one that does not fit is set aside and the next is tried; no slot is
  held for the head (no starvation guard, unlike the product's queue).

How Kueue admits a workload (sources read at kubernetes-sigs/kueue ff69552):

- ``pkg/scheduler/flavorassigner/flavorassigner.go`` (``findFlavorForPodSets``,
  ``checkFlavorForPodSets``): flavors in the ClusterQueue's order, starting after the one
  tried last (``NextFlavorToTryForPodSetResource``); a flavor whose node labels the pod's
  affinity excludes is skipped; the first whose quota holds the request is chosen
  (``FlavorFungibility``: stop at the first that fits without borrowing). TAS is then run
  on that flavor only (``FindTopologyAssignmentsForWorkload`` in ``assignFlavors``); when
  the topology does not fit, the workload is requeued at once with the next flavor to try
  (``pkg/cache/queue/cluster_queue.go``: ``LastAssignment.PendingFlavors()``). Between two
  cluster events nothing changes, so this is modelled as: the flavors in order, quota
  first, then TAS, the first flavor where both fit.
- ``pkg/cache/scheduler/tas_flavor_snapshot.go``: the placement inside the flavor
  (:func:`bench.baselines.rack_pack.tas_place`, required and preferred levels).
- GPU ids on the node: the NVIDIA device plugin's go-gpuallocator BestEffort.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from bench.baselines.rack_pack import tas_place
from bench.gang_queue import Started
from gputopo.cluster.gang_reservation import GangReservation
from gputopo.cluster.reservations import GangKey
from gputopo.placement.types import GangRequest, NodeState, Placement


@dataclass(frozen=True)
class Flavor:
    """A ResourceFlavor: the nodes its ``nodeLabels`` select, and whether they run NCCL
    over GPUDirect RDMA (what a multi-node gang's affinity asks for)."""

    name: str
    nodes: frozenset[str]
    gdr: bool


@dataclass(frozen=True)
class KueueSetup:
    """The ClusterQueue's flavors in the admin's order, and the podset annotations."""

    flavors: tuple[Flavor, ...]
    #: one-node jobs: podset-required-topology at the host level
    host_required: bool = True
    #: multi-node gangs: only GPUDirect flavors (node affinity)
    gangs_on_gdr: bool = True
    #: multi-node gangs: podset-preferred-topology at this level
    gang_level: str = "rack"


def flavors_by_kind(nodes: Sequence[NodeState], order: Sequence[str],
                    kind: Callable[[NodeState], str]) -> tuple[Flavor, ...]:
    """One flavor per node kind, in ``order`` (kinds not named come last, by name)."""
    kinds: dict[str, list[NodeState]] = {}
    for n in nodes:
        kinds.setdefault(kind(n), []).append(n)
    ranked = [k for k in order if k in kinds] + sorted(k for k in kinds if k not in order)
    return tuple(Flavor(k, frozenset(n.name for n in kinds[k]),
                        all(n.network_transport == "gdr" for n in kinds[k])) for k in ranked)


@dataclass
class KueueQueue:
    """Admission and queueing of one cluster as Kueue does them (module docstring), with
    the interface of :class:`bench.gang_queue.GangQueue` the replays use."""

    nodes: list[NodeState]
    setup: KueueSetup
    waiting: list[tuple[GangKey, GangRequest, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._held: dict[str, set[int]] = {}
        self._running: dict[GangKey, GangReservation] = {}
        self._quota = {f.name: sum(len(n.topology.gpus) for n in self.nodes
                                   if n.name in f.nodes) for f in self.setup.flavors}
        self._used = dict.fromkeys(self._quota, 0)
        self._flavor_of: dict[GangKey, str] = {}
        self._node_gpus = max(len(n.topology.gpus) for n in self.nodes)
        self.denied: list[GangKey] = []  # Kueue never gives up on a workload
        self._version = 0
        self._states: dict[str, tuple[int, list[NodeState]]] = {}

    def arrive(self, key: GangKey, gang: GangRequest, now: float) -> Started | None:
        made = self._admit(key, gang, now, "admission")
        if made is None:
            self.waiting.append((key, gang, now))
        return made

    def serve(self, now: float) -> list[Started]:
        """BestEffortFIFO: every pending workload in creation order, each admitted if it
        fits now; none holds room for another."""
        out: list[Started] = []
        still = []
        for key, gang, since in self.waiting:
            made = self._admit(key, gang, now, "queue")
            if made is None:
                still.append((key, gang, since))
            else:
                out.append(made)
        self.waiting[:] = still
        return out

    def release(self, key: GangKey) -> None:
        r = self._running.pop(key, None)
        if r is None:
            return
        for s in r.slots:
            self._held[s.node].difference_update(s.gpus)
        self._used[self._flavor_of.pop(key)] -= sum(len(s.gpus) for s in r.slots)
        self._version += 1

    def held_gpus(self) -> dict[str, set[int]]:
        return {n: set(g) for n, g in self._held.items() if g}

    # --- helpers -------------------------------------------------------------------------
    def _admit(self, key: GangKey, gang: GangRequest, now: float, how: str) -> Started | None:
        one_node = gang.total_gpus <= self._node_gpus
        for f in self.setup.flavors:
            if not one_node and self.setup.gangs_on_gdr and not f.gdr:
                continue  # the gang's node affinity excludes the flavor's labels
            if self._used[f.name] + gang.total_gpus > self._quota[f.name]:
                continue  # quota: try the next flavor
            p = self._place(f, gang, one_node)
            if p.feasible:
                return self._start(key, f, p, now, how)
        return None

    def _flavor_nodes(self, f: Flavor) -> list[NodeState]:
        """The flavor's nodes with their GPUs in use (rebuilt only after a start or end:
        a pass tries every pending workload on the same state)."""
        hit = self._states.get(f.name)
        if hit is None or hit[0] != self._version:
            hit = self._states[f.name] = (self._version, [
                replace(n, used=frozenset(self._held.get(n.name, ())))
                for n in self.nodes if n.name in f.nodes])
        return hit[1]

    def _place(self, f: Flavor, gang: GangRequest, one_node: bool) -> Placement:
        nodes = self._flavor_nodes(f)
        if one_node and self.setup.host_required:
            return tas_place(nodes, gang, level="hostname", required=True)
        return tas_place(nodes, gang, level=self.setup.gang_level, required=False)

    def _start(self, key: GangKey, f: Flavor, p: Placement, now: float, how: str) -> Started:
        r = GangReservation(key=key, slots=p.slots, bus_bandwidth_gbps=p.bus_bandwidth_gbps,
                            reason="kueue")
        for s in p.slots:
            self._held.setdefault(s.node, set()).update(s.gpus)
        self._running[key] = r
        self._flavor_of[key] = f.name
        self._used[f.name] += sum(len(s.gpus) for s in p.slots)
        self._version += 1
        return Started(key, now, r, how)
