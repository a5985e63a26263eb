"""The generator's side of platform profiles (data in :mod:`gputopo.platforms`): the node
agents (DaemonSets) each platform ships.

Node agents are registered by name with :func:`register_node_agent`, which also says which
platforms ship them, so adding one (the device plugin) is one call next to its builder, e.g.
``register_node_agent("device-plugin", file="device-plugin.yaml", build=...,
platforms=("generic", "tke"))``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from gputopo.platforms import DEFAULT_PLATFORM, PLATFORMS, Platform, platform

__all__ = [
    "DEFAULT_PLATFORM",
    "PLATFORMS",
    "Platform",
    "node_agent",
    "platform",
    "register_node_agent",
]

#: Builds a node agent's objects from the generator's options (a ManifestOptions).
AgentBuilder = Callable[[Any], list[dict[str, Any]]]

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
