"""The NVLink domain of this node as NVML's fabric info says it, for the reporter.

Why: on GB200/GB300 NVL72 racks the GPUs of several nodes share one NVLink fabric; NCCL
joins ranks into one multi-node NVLink clique when their fabric cluster UUID and clique id
match and the fabric state is completed (``src/mnnvl.cc``). GPU Feature Discovery labels
the node with the same pair (``nvidia.com/gpu.clique``, k8s-device-plugin
``internal/lm/imex.go``); the reporter writes it as ``gputopo.io/nvlink-domain-detected``
for clusters without GFD (gputopo.cluster.nvlink_domain reads the label first).

The rule, as GFD's: only fabric-attached GPUs count (state completed, status success);
they must all agree on the cluster UUID and the clique id, else the node says nothing. A
GPU whose fabric is still being set up (not started, in progress) makes the node say
nothing as well, until the next report: half-joined trays must not attract gangs.
"""

from __future__ import annotations

from gputopo.topology.nvml import NvmlSource

#: NVML_GPU_FABRIC_STATE_*: not supported, not started, in progress, completed
STATE_NOT_SUPPORTED, STATE_NOT_STARTED, STATE_IN_PROGRESS, STATE_COMPLETED = 0, 1, 2, 3
_NO_CLUSTER = "00000000-0000-0000-0000-000000000000"


def nvlink_domain_from_nvml(source: NvmlSource) -> str | None:
    """``<ClusterUUID>.<CliqueId>`` shared by this node's fabric-attached GPUs, or None."""
    seen: set[tuple[str, int]] = set()
    for i in range(source.device_count()):
        fabric = source.fabric(i)
        if fabric is None:
            continue
        uuid, clique, state, status = fabric
        if state == STATE_NOT_SUPPORTED:
            continue
        if state != STATE_COMPLETED or status != 0:
            return None  # not (yet) attached: say nothing
        seen.add((uuid.lower(), clique))
    if len(seen) != 1:
        return None
    uuid, clique = seen.pop()
    return None if uuid == _NO_CLUSTER else f"{uuid}.{clique}"
