"""Platform profiles as data: which policy files, which GPU resource, what enforces the GPU
indices, which node agents — for ``gputopo generate manifests --platform`` and
``gputopo mutate --platform``.

Why here, in the core: the generator ships a platform's policies and the dry run must admit
through exactly those, so both read one table. Why profiles at all: ACK's policy renames
``nvidia.com/gpu`` to ``aliyun.com/gpu``, a resource TKE nodes do not advertise, so a TACO
job on TKE given every policy would never be scheduled. The generator's node-agent registry
(``generator/platforms.py``) adds agents to these profiles by name.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gputopo import names
from gputopo.errors import InputError


@dataclass(frozen=True)
class Platform:
    name: str
    #: policy files shipped, relative to the policies directory, in ConfigMap order
    policies: tuple[str, ...]
    #: the GPU resource pods ask for after the webhook (what the scheduler packs by)
    gpu_resource: str
    #: what makes the kubelet hand out the GPU indices the webhook chose
    gpu_enforcement: str
    #: names of the node agents (registered DaemonSets) shipped, in file order
    node_agents: tuple[str, ...] = ()


#: Off ACK: gputopo's own device plugin (``gputopo device-plugin``) on the activated nodes.
_GPUTOPO_PLUGIN = ("gputopo's device plugin (gputopo device-plugin, a DaemonSet on the "
                   "activated nodes), which prefers and allocates each pod's placement, sets "
                   "NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES itself and writes back what "
                   "the kubelet gave (docs/device-plugin.md)")

PLATFORMS: dict[str, Platform] = {
    "ack": Platform(
        name="ack",
        policies=("ack-gpu-topology.yaml",),
        gpu_resource=names.TOPOLOGY_GPU_RESOURCE,
        gpu_enforcement="ACK's GPU topology device plugin (cloud-native AI suite), which "
                        "advertises aliyun.com/gpu and allocates the indices in the pod's "
                        "topology.kubernetes.io/gpu-group annotation",
    ),
    "tke": Platform(
        name="tke",
        policies=("platforms/tke/tke-gpu-topology.yaml", "tke-taco-harp.yaml"),
        gpu_resource=names.SOURCE_GPU_RESOURCE,
        gpu_enforcement=_GPUTOPO_PLUGIN,
    ),
    "generic": Platform(
        name="generic",
        policies=("platforms/generic/generic-gpu-topology.yaml",),
        gpu_resource=names.SOURCE_GPU_RESOURCE,
        gpu_enforcement=_GPUTOPO_PLUGIN,
    ),
    "dra": Platform(
        name="dra",
        policies=("platforms/dra/dra-gpu-topology.yaml",),
        gpu_resource=names.SOURCE_GPU_RESOURCE,
        gpu_enforcement="a ResourceClaim per replica that only its chosen GPUs satisfy (a "
                        "CEL selector on the uuid NVIDIA's DRA driver publishes), allocated "
                        "by the scheduler's DynamicResources plugin and prepared by the "
                        "driver; no device plugin (gputopo/cluster/dra.py)",
    ),
}
DEFAULT_PLATFORM = "ack"



def platform(name: str) -> Platform:
    """The profile called ``name``; InputError naming --platform otherwise."""
    try:
        return PLATFORMS[name]
    except KeyError:
        raise InputError(f"{name!r} is not a platform; one of {', '.join(PLATFORMS)}",
                         obj="--platform") from None


def gather_policies(directory: Path, files: Sequence[str], into: Path) -> Path:
    """Copy a platform's policy ``files`` (relative to ``directory``) into the empty
    directory ``into`` under their base names: one directory, as the webhook loads it."""
    for name in files:
        src = directory / name
        if not src.is_file():
            raise InputError("no such policy file", file=str(src))
        dst = into / Path(name).name
        if dst.exists():
            raise InputError(f"two policy files named {dst.name}", file=str(src))
        shutil.copyfile(src, dst)
    return into
