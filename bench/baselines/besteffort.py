"""NVIDIA go-gpuallocator's BestEffort policy, rebuilt in Python for comparison.

Source read: NVIDIA/go-gpuallocator ``gpuallocator/besteffort_policy.go`` and
``internal/links/device.go``; link facts as in docs/topology.md. The NVIDIA device
plugin uses it to choose GPU ids *on the node kube-scheduler already chose*, so here it sits
behind the default scheduler's LeastAllocated node choice, pod by pod.

How it works (as upstream):

- Pair score: 100 per NVLink between the two GPUs, plus a PCIe term from NVML's common
  ancestor: cross-CPU 10, same CPU 20, host bridge 30, multiple switches 40, single switch
  50, same board 60. Set score = sum of its pair scores.
- ``Allocate(available, required=[], size)``: pad the free GPUs with empty slots to a
  multiple of ``size``, walk *every* partition of them into ``size``-sets (sets hold either
  no padding or all of it), keep the partition with the highest total score (first one on
  ties), and return its best-scoring set.
- One GPU: every "partition" scores 0, so the first free GPU wins: topology is ignored.
- NVSwitch: NVML reports the NVLink's remote end as the switch, not the peer GPU, so the
  NVLink term is 0 for every pair (upstream: ``TODO(klueska): Handle NVSwitch semantics``).

What our input cannot say: ``nvidia-smi topo -m`` shows ``NV#`` instead of the PCIe path for
NVLink-connected pairs, so their PCIe term is taken as same-CPU (20) when both GPUs are on
one NUMA node, else cross-CPU (10). Upstream would crash on a padded best set; we never
return one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations

from bench.baselines.common import least_allocated, place_replicas
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.topology.bandwidth import is_all_to_all, nvlink_count
from gputopo.topology.model import Topology

#: PCIe term of the pair score by legend code (links.GetP2PLink -> calculateGPUPairScore).
P2P_SCORE = {"PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10, "SOC": 10}
NVLINK_SCORE = 100

Set = tuple[int | None, ...]


def pair_score(topology: Topology, a: int | None, b: int | None) -> int:
    """calculateGPUPairScore: what BestEffort thinks a pair of GPUs is worth."""
    if a is None or b is None or a == b:
        return 0
    code = topology.link(a, b)
    links = nvlink_count(code)
    if not links:
        return P2P_SCORE[code]
    numa = {g.index: g.numa for g in topology.gpus}
    same_cpu = numa[a] is not None and numa[a] == numa[b]
    p2p = P2P_SCORE["NODE"] if same_cpu else P2P_SCORE["SYS"]
    nvswitch = is_all_to_all(topology)  # NVLinks end at the switch: invisible to upstream
    return p2p + (0 if nvswitch else NVLINK_SCORE * links)


def set_score(topology: Topology, gpus: Set) -> int:
    return sum(pair_score(topology, a, b) for a, b in combinations(gpus, 2))


def partitions(devices: list[int], size: int) -> Iterator[list[Set]]:
    """iterateGPUPartitions: every split of the padded device list into ``size``-sets."""
    if size <= 0 or size > len(devices):
        return
    if size == 1:
        for d in devices:
            yield [(d,)]
        return
    padded: list[int | None] = list(devices)
    while len(padded) % size:
        padded.append(None)
    padding = padded.count(None)

    def walk(devs: list[int | None], acc: list[Set]) -> Iterator[list[Set]]:
        if size == len(devs):
            yield [*acc, tuple(devs)]
            return
        first, rest = devs[0], devs[1:]
        for combo in combinations(rest, size - 1):
            chosen = (first, *combo)
            p = chosen.count(None)
            if p not in (0, padding):
                continue
            remaining = [d for d in devs if d not in chosen]
            yield from walk(remaining, [*acc, chosen])

    yield from walk(padded, [])


def allocate(topology: Topology, available: Sequence[int], size: int) -> tuple[int, ...]:
    """bestEffortPolicy.Allocate with no required devices; () when it cannot."""
    if size <= 0 or len(available) < size:
        return ()
    best: list[Set] | None = None
    best_score = 0
    for candidate in partitions(sorted(available), size):
        if not any(None not in s for s in candidate):
            continue
        score = sum(set_score(topology, s) for s in candidate)
        if best is None or score > best_score:
            best, best_score = candidate, score
    assert best is not None
    full_sets = [s for s in best if None not in s]
    chosen = full_sets[0]
    for s in full_sets[1:]:
        if set_score(topology, s) > set_score(topology, chosen):
            chosen = s
    return tuple(sorted(i for i in chosen if i is not None))


def _pick_gpus(node: NodeState, free: list[int], g: int) -> tuple[int, ...]:
    return allocate(node.topology, free, g)


def place(nodes: Sequence[NodeState], gang: GangRequest) -> Placement:
    return place_replicas(nodes, gang, least_allocated, _pick_gpus)


