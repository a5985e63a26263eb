"""Which NVLink domain a node's GPUs belong to, and its GPUs' generation from GFD's label.

Why here, beside ``objects.py``: the file-backed snapshot and the live view both turn Node
objects into :class:`~gputopo.placement.types.NodeState` through ``objects.node_state``, and
an NVL72 tray must land in its domain on both paths. Sources, the first found wins
(docs/topology.md, "NVLink domains across nodes"):

1. ``gputopo.io/nvlink-domain``, set by hand: the override (e.g. to keep a rack whose
   IMEX daemons are not set up out of cross-node placement, give each tray its own value);
2. ``nvidia.com/gpu.clique`` from GPU Feature Discovery, ``<ClusterUUID>.<CliqueId>``,
   kept whole because a clique id is unique only within its cluster UUID
   (k8s-device-plugin ``internal/lm/imex.go``);
3. ``gputopo.io/nvlink-domain-detected``, what ``gputopo topology report`` read of NVML's
   fabric info (same form; only GPUs whose fabric state is completed count).

A domain is used only on nodes whose NVLink generation is known (a named ``generation``, a
legend that shows it, or GFD's ``nvidia.com/gpu.product``): the fabric bandwidth between
trays is the generation's, and a guess would make a slow node look like an NVL72 tray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

from gputopo import names
from gputopo.topology.bandwidth import infer_generation
from gputopo.topology.fabric import generation_of_product
from gputopo.topology.model import Topology

_SOURCES = (
    ("annotations", names.NVLINK_DOMAIN_ANNOTATION),
    ("labels", names.GPU_CLIQUE_LABEL),
    ("annotations", names.NVLINK_DOMAIN_DETECTED_ANNOTATION),
)


def _meta_map(node: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    meta = node.get("metadata")
    found = meta.get(key) if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def nvlink_domain_of(node: Mapping[str, Any]) -> str | None:
    """The node's NVLink domain as written (module docstring), None when none says one."""
    for where, key in _SOURCES:
        raw = _meta_map(node, where).get(key)
        if isinstance(raw, str) and raw.strip():
            return raw.strip()
    return None


def topology_with_product(topology: Topology, node: Mapping[str, Any]) -> Topology:
    """``topology`` with the NVLink generation GFD's product label gives, when the topology
    does not name one itself (a named generation always wins); the same object otherwise.

    Why: the legend of a B200 node (NV18 between every pair) reads like an H100's, so the
    table would price its links at NVLink 4, half of what they are.
    """
    if topology.generation is not None:
        return topology
    generation = generation_of_product(_meta_map(node, "labels").get(names.GPU_PRODUCT_LABEL))
    if generation is None:
        return topology
    return _named(topology, generation)


@lru_cache(maxsize=1024)
def _named(topology: Topology, generation: str) -> Topology:
    """One shared object per (topology, generation): the solver groups nodes by topology
    object, and 1,000 trays of one model must stay one group."""
    return replace(topology, generation=generation)


def usable_domain(topology: Topology, domain: str | None) -> str | None:
    """``domain`` when the node's NVLink generation is known, else None (module docstring)."""
    if domain is None or infer_generation(topology) is None:
        return None
    return domain
