"""The waiting rule: does a gang start now on the best placement free, or wait for a better one?

Why one pure module: the same question is asked at a gang's first admission
(webhook/placement/step.py, through :class:`webhook.placement.reserve.GangReserver`), by the
placement queue on every pass (webhook/queue/gangs.py ``serve_pass``) and by the
benchmark's cluster replay, which must queue exactly as the product does. All three call
these functions; none of them holds a threshold of its own.

The measure is the gang's **share**: the predicted all-reduce bus bandwidth of the best
placement among the free GPUs, divided by a **reference**, the gang placed well on one kind
of node it may use (:func:`node_kind`: GPU wiring and network as the all-reduce sees it;
for every kind among the nodes its pod's constraints admit, the gang's best on the nodes of
that kind alone with every GPU free, whole nodes of one zone rather than a rack of them
(:func:`unracked`);
kinds too small to hold it alone are skipped, and when none can, the best on all of them
together counts, :func:`reference_bandwidth`). Two references, one per bar:

- ``minShare`` is measured against the **typical** kind: those bests in rising order, the
  one at which half of the kinds' GPUs is reached (the kind of the median GPU) — except for
  a gang that **one node of the slowest kind holds** (:func:`one_node_holds`), measured
  against the slowest kind as well;
- the floor of ``takeBest`` (after ``maxWaitSeconds``) against the **slowest** kind — for a
  gang that spans nodes (one node of the slowest kind does not hold it) on GPUs of one
  model, the slowest kind whose network is not TCP sockets (:func:`over_tcp`) when one can
  hold it.

A job's communication runs at that share; the whole step slows down at most as much
(compute does not depend on the placement — on GPUs of one model).

GPU models (gputopo.placement.generations): a node's kind includes its GPU model, a
reference is a :class:`~gputopo.placement.throughput.Speed` (the slowest GPU's TFLOPS and
the bus bandwidth), and the share is :func:`~gputopo.placement.throughput.judged_share`:
for a job that states no compute share the worst case over every share,
``min(R/R_ref, B/B_ref)`` — the bandwidth share itself wherever the models are equal, so
everything below holds unchanged on a cluster of one model (or of none known) — and for a
job that states one its throughput share. Callers that know no model pass bandwidths
(:func:`reference_bandwidth`, :func:`starts` with floats), as the benchmarks' replays do.

Why the typical kind for ``minShare``: a gang started on hardware far below most of the
cluster's holds its GPUs for a long time. Measured against the slowest kind alone, a 32-GPU
gang spread over four PCIe servers on 25 GbE TCP was "share 1" (it is the best those
servers give it) and started at 12-20 % of its speed while DGX-1 racks freed up within the
hour (cluster replay, load 0.7, seed 5: two such gangs, at 12 and 20 %, held 657 of the
1,914 GPU-hours held; docs/benchmarks.md). Half the cluster's GPUs being at least as good,
such hardware frees up often, so the gang waits for it — at most ``maxWaitSeconds``.

Why not for a gang one node of the slowest kind holds: its reference there is a set of
GPUs inside one machine, wired as well as that machine allows; its all-reduce never
crosses the slowest network, and that is where placement costs several-fold. In the cost
model a 1 x 8 job on a two-socket PCIe server runs at 68-93 % of its speed on a DGX-1
(BERT-large to ResNet-50), a 4 x 8 gang over four of them on 25 GbE TCP at 15-64 % of its
speed on four DGX-1s on GPUDirect. Measured against the typical kind, the one-node jobs
took the DGX-1s (the slowest good-enough sets there, objective term 0) and the 16-32-GPU
gangs, finding no DGX-1 rack free, waited ``maxWaitSeconds`` and took the PCIe servers over
TCP (cluster replay, load 0.9, seed 1: six 4 x 8 gangs at 12-20 %, 503 of the 1,604
GPU-hours held). Measured against the slowest kind, one-node jobs fill the PCIe servers
first and the NVLink servers on fast networks stay free for the gangs whose speed depends
on them (goodput 0.90-0.91 at every load of the replay, docs/benchmarks.md). The price: a
one-node job takes the slowest servers' best set while faster ones are free (8-GPU jobs'
p95 completion time 3.45 -> 3.69 h at load 0.5). Where the slowest-wired servers also have
the slowest GPUs and the nodes say their GPU model, the solver's choice between models
(gputopo.placement.generations) sends jobs to the faster models first; the reference and
the share weigh the compute too (above).

Why the slowest kind for the floor, and not the fastest anywhere: the rule guards against
a *placement* that wastes GPUs, not against older GPUs. Against the fastest kind, a 4-GPU
gang on a free DGX-1 NVLink quad (all a DGX-1 can give it) scored 0.34 of a DGX A100 and
would wait, below even the floor, for one of a few A100 nodes however long; against the
typical kind after ``maxWaitSeconds`` a gang would never start on the slower servers at
all. So once it waited its time, a gang placed well on any hardware it may use starts, and
one scattered (two DGX-1 pairs instead of a quad; eight GPUs over three PCIe servers on
TCP) still falls below the gang placed well on the slowest hardware, and waits.

Why no rack in the reference: a gang that spans nodes placed well is on whole nodes of a
kind in one zone; a rack of them to itself is a bonus the solver still prefers (its
locality term), not a bar to wait for. With the rack in the reference (a 2 x 8 gang on two
DGX-1s of two racks: half the bandwidth of one rack, under ``minShare``), the cluster
replay's 16-32-GPU gangs waited for a rack of whole nodes to drain while Kueue, set up by
an admin with a flavor per node kind, started them on GPUDirect nodes in any rack; waiting
gangs left GPUs idle, and the starvation guard kept nodes in one zone on which the gang
then could not start (docs/benchmarks.md, "Cluster replay"). Zone and cluster spans still
count: nodes of two zones are below the reference, and an NVLink domain stays one.

Why not TCP for the floor of a gang that spans nodes: over NCCL's socket transport the
all-reduce gets a quarter of a line rate itself a fraction of GPUDirect's; "half the best
on the slowest kind" there is a few per cent of the gang's speed on the GPUDirect nodes
beside them. The replay's fallback started 16- and 32-GPU gangs on 25 GbE TCP at 7-21 %
of their speed (87 GPU-hours held for 8 of work); Kueue set up by an admin never does
(gangs over 8 GPUs only on the GPUDirect flavors). Such a gang waits for GPUDirect nodes
instead. On a cluster whose nodes all use TCP the floor is the slowest kind's, as before;
and where the kinds' GPU models differ too, the rule compares speeds, and servers of faster
GPUs on TCP may train a gang faster than older GPUs on GPUDirect (the mixed-generation
replay's L40S servers on 100 GbE beside DGX-1s: with the TCP kinds left out there, its
gangs waited longer for GPUDirect nodes and the tuning seeds' p95 completion time against
Kueue's rose from 0.99x to 1.00x at load 0.7 and from 1.02x to 1.04x at 0.9), so there
the floor stays the slowest kind's.

Why one reference per bar for the gang, whatever placement is asked about: measured
against the best of the placement's own kinds, the rule was not monotone: a 2 x 8 gang
turned down two DGX-1s in different racks (short of two in one rack) and later started on
two PCIe servers over TCP at a seventh of that speed, "share 1" of theirs. With one
reference a faster placement is never refused where a slower one would start. Which
hardware a job may run on is the owner's choice (nodeSelector, affinity); nodes it rules
out are no part of either reference.

- ``minShare`` (default 0.9): the gang starts now only at or above it;
- ``afterMaxWait`` — what a gang that waited ``maxWaitSeconds`` does:

  ``takeBest`` (default)
      starts on the best placement free if its share (of the slowest kind's reference;
      off TCP for a gang that spans nodes) is at least ``floorShare`` (default 0.5), else
      keeps waiting: the default never starts a gang below half its best speed on the
      slowest hardware it may use, nor (on GPUs of one model) one that spans nodes over
      TCP while GPUDirect (or RDMA) nodes it may use could hold it;
  ``keepWaiting``
      keeps waiting for ``minShare``: never starts below ``minShare``;
  ``deny``
      gives up: its pods stay gated (never start) and say why, until the job is deleted.

No gang is ever released without a placement: a gated pod's GPU env reads annotations only
a placement writes, so an unpinned release would run the job without its GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

from gputopo.placement.throughput import (
    Speed,
    judged_share,
    share_or_default,
    throughput_share,
)
from gputopo.placement.types import GangRequest, NodeState
from gputopo.topology.gpus import gpu_model_key
from gputopo.topology.model import Topology

AfterMaxWait = Literal["takeBest", "keepWaiting", "deny"]
TAKE_BEST: AfterMaxWait = "takeBest"
KEEP_WAITING: AfterMaxWait = "keepWaiting"
DENY: AfterMaxWait = "deny"
AFTER_MAX_WAIT: tuple[AfterMaxWait, ...] = (TAKE_BEST, KEEP_WAITING, DENY)

DEFAULT_MIN_SHARE = 0.9
DEFAULT_AFTER_MAX_WAIT: AfterMaxWait = TAKE_BEST
DEFAULT_FLOOR_SHARE = 0.5
#: Shares are ratios of two solver outputs: the same placement computed twice may differ in
#: the last bits, so a share within this of the bar meets it.
TOLERANCE = 1e-9


@dataclass(frozen=True)
class WaitingRule:
    """A policy's waiting rule (``spec.placement.minShare``, ``afterMaxWait``,
    ``floorShare``); the defaults are the documented ones."""

    min_share: float = DEFAULT_MIN_SHARE
    after_max_wait: AfterMaxWait = DEFAULT_AFTER_MAX_WAIT
    floor_share: float = DEFAULT_FLOOR_SHARE

    @property
    def floor(self) -> float:
        """The least share this rule ever starts a gang at."""
        if self.after_max_wait == TAKE_BEST:
            return min(self.floor_share, self.min_share)
        return self.min_share

    def start_share(self, *, overdue: bool) -> float:
        """The share a placement needs to be taken now (``overdue``: the gang waited its
        ``maxWaitSeconds``)."""
        return self.floor if overdue else self.min_share

    def gives_up(self, *, overdue: bool) -> bool:
        """True when a gang that cannot start now is to be denied rather than kept waiting."""
        return overdue and self.after_max_wait == DENY

    def to_json(self) -> dict[str, object]:
        """The record keys of a waiting pod (webhook/placement/step.py ``waiting_record``)."""
        return {"minShare": self.min_share, "afterMaxWait": self.after_max_wait,
                "floorShare": self.floor_share}


def share(bandwidth_gbps: float, best_gbps: float) -> float:
    """``bandwidth`` as a share of the gang's ``best``; 1 when there is no best to miss (a
    one-GPU gang moves no all-reduce traffic)."""
    if best_gbps <= 0:
        return 1.0
    return bandwidth_gbps / best_gbps


def starts(bandwidth_gbps: float | Speed, best_gbps: float | Speed, need: float | None,
           compute_share: float | None = None) -> bool:
    """THE decision: a placement of ``bandwidth`` is taken when its share of ``best`` is at
    least ``need`` (None: the gang may not wait, any feasible placement is taken). Given
    as :class:`~gputopo.placement.throughput.Speed` (GPU model and bandwidth), the share is
    :func:`~gputopo.placement.throughput.judged_share` with the job's ``compute_share``:
    the bandwidth share itself wherever the GPU models are equal."""
    if need is None:
        return True
    if isinstance(bandwidth_gbps, Speed) or isinstance(best_gbps, Speed):
        got = bandwidth_gbps if isinstance(bandwidth_gbps, Speed) else Speed(None,
                                                                                bandwidth_gbps)
        ref = best_gbps if isinstance(best_gbps, Speed) else Speed(None, best_gbps)
        return judged_share(got, ref, compute_share) >= need - TOLERANCE
    return share(bandwidth_gbps, best_gbps) >= need - TOLERANCE


def rule_from_record(record: object) -> WaitingRule:
    """The rule a waiting pod's record carries (:meth:`WaitingRule.to_json`); a value that
    is absent (a record of a webhook older than the keys) or not one a valid policy could
    give falls back to its default, field by field."""
    rec = record if isinstance(record, dict) else {}

    def fraction(key: str, default: float) -> float:
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
            return default
        return float(v)

    after = rec.get("afterMaxWait")
    return WaitingRule(
        min_share=fraction("minShare", DEFAULT_MIN_SHARE),
        after_max_wait=after if after in AFTER_MAX_WAIT else DEFAULT_AFTER_MAX_WAIT,
        floor_share=fraction("floorShare", DEFAULT_FLOOR_SHARE))


def after_max_wait_text(rule: WaitingRule, max_wait_seconds: float) -> str:
    """What happens to a waiting gang, in a clause of a user-facing sentence."""
    wait = f"{max_wait_seconds:.0f} s"
    if rule.after_max_wait == TAKE_BEST:
        return (f"it starts at {rule.min_share:.0%} of its best predicted bus bandwidth; "
                f"after {wait} at {rule.floor:.0%}")
    if rule.after_max_wait == DENY:
        return (f"it starts at {rule.min_share:.0%} of its best predicted bus bandwidth; "
                f"after {wait} it is denied (its pods stay gated)")
    return f"it starts at {rule.min_share:.0%} of its best predicted bus bandwidth, however long"


class NodeKind(NamedTuple):
    """A kind of node (:func:`node_kind`)."""

    topology: Topology
    effective_gbps: float
    network_transport: str
    in_nvlink_domain: bool
    #: the GPU model (name, TFLOPS: gputopo.topology.gpus.gpu_model_key); None: unknown
    gpu_model: tuple[str, float] | None = None


def node_kind(node: NodeState) -> NodeKind:
    """What makes two nodes alike for the reference: the GPU model (name and throughput),
    the GPU wiring (the topology: NVLink/NVSwitch, PCIe, sockets), the network as the
    all-reduce sees it (the effective rate and the transport) and whether it is part of a
    multi-node NVLink domain. Not its name, rack, zone or which domain: where a node is,
    is what a placement chooses."""
    return NodeKind(node.topology, node.effective_gbps, node.network_transport,
                    node.nvlink_domain is not None, gpu_model_key(node.gpu_model))


def one_node_holds(kind: Hashable, gang: GangRequest) -> bool:
    """Whether one node of ``kind`` (a :class:`NodeKind`) holds all of ``gang``: its GPUs
    are enough and its replicas may share a node (``max_replicas_per_node``). The pods'
    other requests (CPU, memory) are not looked at."""
    return (isinstance(kind, NodeKind) and gang.per_node == gang.replicas
            and gang.total_gpus <= len(kind.topology.gpus))


def over_tcp(kind: Hashable) -> bool:
    """Whether ``kind`` (a :class:`NodeKind`) reaches other nodes over TCP sockets (NCCL's
    socket transport: gputopo.topology.transport)."""
    return isinstance(kind, NodeKind) and kind.network_transport == "tcp"


def one_model(kinds: Iterable[Hashable]) -> bool:
    """Whether ``kinds`` (:class:`NodeKind`) all have GPUs of one model (or none says its
    model)."""
    return len({k.gpu_model if isinstance(k, NodeKind) else None for k in kinds}) <= 1


def unracked(nodes: Iterable[NodeState]) -> list[NodeState]:
    """``nodes`` (of one kind) as the reference sees them: whole nodes of one zone, not a
    rack of them to itself (module docstring) — so in a zone where they fill several racks,
    without their racks; where one rack holds all of the zone's, that rack is the zone and
    they keep it. Nodes without a rack come back as they are."""
    nodes = list(nodes)
    racks: dict[object, set[str]] = {}
    for n in nodes:
        if n.rack is not None:
            racks.setdefault(n.zone, set()).add(n.rack)
    several = {z for z, r in racks.items() if len(r) > 1}
    if not several:
        return nodes
    return [replace(n, rack=None) if n.rack is not None and n.zone in several else n
            for n in nodes]


def node_kinds(nodes: Iterable[NodeState]) -> list[Hashable]:
    """The kinds of ``nodes``, each once, in order: what :func:`reference_bandwidth` takes."""
    return list(dict.fromkeys(node_kind(n) for n in nodes))


def reference_nodes(nodes: Sequence[NodeState], kinds: Collection[Hashable]
                    ) -> list[NodeState]:
    """The nodes of ``nodes`` of one of ``kinds``; all of them when ``kinds`` is empty
    (nothing to narrow by)."""
    if not kinds:
        return list(nodes)
    return [n for n in nodes if node_kind(n) in kinds]


def reference_bandwidth(kinds: Sequence[Hashable],
                        best_on: Callable[[frozenset[Hashable]], float],
                        gpus: Mapping[Hashable, int] | None = None,
                        gang: GangRequest | None = None) -> float:
    """THE reference of a gang that may use nodes of ``kinds``, in bus bandwidth:
    :func:`reference_speed` with ``best_on(ks)`` the gang's best bus bandwidth on the nodes
    of kinds ``ks`` with every GPU free (0 when it does not fit there). What a caller that
    knows no GPU model takes (the benchmarks' replays)."""
    def speed_on(ks: frozenset[Hashable]) -> Speed | None:
        b = best_on(ks)
        return Speed(None, b) if b > 0 else None

    ref = reference_speed(kinds, speed_on, gpus, gang)
    return 0.0 if ref is None else ref.gbps


def reference_speed(kinds: Sequence[Hashable],
                    best_on: Callable[[frozenset[Hashable]], Speed | None],
                    gpus: Mapping[Hashable, int] | None = None,
                    gang: GangRequest | None = None) -> Speed | None:
    """THE reference of a gang that may use nodes of ``kinds`` (every kind of the nodes its
    pods may use). Without ``gpus``, the **slowest** kind's: the least of its bests on each
    kind alone that can hold it. With ``gpus`` (each kind's GPU count), the **typical**
    kind's: those bests in rising order, the one at which the kinds' GPUs reach half of
    their total (the kind of the median GPU; at exactly half, the slower) — except for a
    ``gang`` that one node of the slowest kind holds (:func:`one_node_holds`): the slowest
    kind's for it too (its all-reduce stays inside one node; module docstring). When no
    kind can hold it alone, both are its best on all of them together.
    ``best_on(ks)``: the gang's best on the nodes of kinds ``ks`` with every GPU free, as
    its slowest GPU's TFLOPS and its bus bandwidth (None when it does not fit there).
    Kinds are ordered by the gang's predicted throughput on each (:func:`~gputopo.
    placement.throughput.throughput_share` with its compute share, the default carried
    over to the best kind's TFLOPS when it states none (``throughput.default_share``),
    against the best compute and bandwidth of any kind; not the worst case
    the decision takes, which is no order: at compute share 0 a T4 box wired better than a
    V100 one would rank above it): on GPUs of one model that is the bandwidth's order."""
    if len(kinds) > 1:
        bests = [best_on(frozenset((k,))) for k in kinds]
        fits = [(b, i) for i, b in enumerate(bests) if b is not None]
        top = Speed(max((b.tflops for b, _ in fits if b.tflops is not None), default=None),
                    max((b.gbps for b, _ in fits), default=0.0))
        c = share_or_default(None if gang is None else gang.compute_share, top.tflops)
        alone = sorted(fits, key=lambda bi: (throughput_share(bi[0], top, c), bi[0].gbps,
                                             bi[1]))
        if alone and gpus is None and gang is not None and \
                not one_node_holds(kinds[alone[0][1]], gang) and one_model(kinds):
            # the floor of a gang that spans nodes, on GPUs of one model: the slowest kind
            # off TCP sockets when one can hold it (module docstring)
            off_tcp = next((b for b, i in alone if not over_tcp(kinds[i])), None)
            if off_tcp is not None:
                return off_tcp
        if alone and (gpus is None or (
                gang is not None and one_node_holds(kinds[alone[0][1]], gang))):
            return alone[0][0]
        if alone and gpus is not None:
            total = sum(gpus.get(kinds[i], 0) for _, i in alone)
            seen = 0
            for b, i in alone:
                seen += gpus.get(kinds[i], 0)
                if 2 * seen >= total:
                    return b
    return best_on(frozenset(kinds))


def against_typical(rule: WaitingRule, need: float) -> bool:
    """Whether a bar of ``need`` (:meth:`WaitingRule.start_share`) is measured against the
    typical kind's reference (``minShare``) or the slowest kind's (the floor of
    ``takeBest`` after ``maxWaitSeconds``, when it is below ``minShare``)."""
    return need >= rule.min_share - TOLERANCE


def kind_gpus(nodes: Iterable[NodeState]) -> dict[Hashable, int]:
    """Each kind's GPU count among ``nodes``: what the typical reference weighs kinds by."""
    out: dict[Hashable, int] = {}
    for n in nodes:
        k = node_kind(n)
        out[k] = out.get(k, 0) + len(n.topology.gpus)
    return out
