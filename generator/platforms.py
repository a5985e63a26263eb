"""Platform profiles: what ``gputopo generate manifests --platform ack|tke|generic`` ships.

Why profiles: the GPU resource name and the node agents differ by platform, and shipping
every policy everywhere is wrong — ACK's policy renames ``nvidia.com/gpu`` to
``aliyun.com/gpu``, a resource TKE nodes do not advertise, so a TACO job on TKE would
never be scheduled. A profile names, in one place, the policy files that ship (paths under
the policies directory, byte for byte), the GPU resource the scheduler packs by, the node
agents (DaemonSets) that run on GPU nodes, and what enforces the GPU indices the webhook
chooses (said in ``docs/install.md``).

Node agents are registered by name with :func:`register_node_agent`, which also says which
platforms ship them, so adding one (the device plugin) is one call next to its builder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gputopo import names
from gputopo.errors import InputError

#: Builds a node agent's objects from the generator's options (a ManifestOptions).
AgentBuilder = Callable[[Any], list[dict[str, Any]]]


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
        gpu_enforcement="the device plugin on the node: with NVIDIA's, the kubelet picks "
                        "the GPUs and the webhook's choice is advice (NVIDIA_VISIBLE_DEVICES "
                        "and the annotations say which GPUs were meant)",
    ),
    "generic": Platform(
        name="generic",
        policies=("platforms/generic/generic-gpu-topology.yaml",),
        gpu_resource=names.SOURCE_GPU_RESOURCE,
        gpu_enforcement="the device plugin on the node: with NVIDIA's, the kubelet picks "
                        "the GPUs and the webhook's choice is advice (NVIDIA_VISIBLE_DEVICES "
                        "and the annotations say which GPUs were meant)",
    ),
}
DEFAULT_PLATFORM = "ack"

#: name -> (file written, builder), in registration order
_AGENTS: dict[str, tuple[str, AgentBuilder]] = {}


def register_node_agent(name: str, *, file: str, build: AgentBuilder,
                        platforms: Iterable[str]) -> None:
    """Make a node agent known and ship it on ``platforms`` (idempotent)."""
    _AGENTS[name] = (file, build)
    for key in platforms:
        p = PLATFORMS[key]
        if name not in p.node_agents:
            PLATFORMS[key] = dataclasses.replace(p, node_agents=(*p.node_agents, name))


def node_agent(name: str) -> tuple[str, AgentBuilder]:
    """(file, builder) of a registered node agent."""
    return _AGENTS[name]


def platform(name: str) -> Platform:
    """The profile called ``name``; InputError naming --platform otherwise."""
    try:
        return PLATFORMS[name]
    except KeyError:
        raise InputError(f"{name!r} is not a platform; one of {', '.join(PLATFORMS)}",
                         obj="--platform") from None
