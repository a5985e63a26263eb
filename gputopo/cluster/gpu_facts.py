"""What a Node says about its GPUs' model and identity, read once for the solver.

Why here, beside ``objects.py``: the file-backed snapshot and the live view build
:class:`~gputopo.placement.types.NodeState` through ``objects.node_state``, and both must
read a node's GPU model the same way. Sources, in the order they are trusted:

1. GPU Feature Discovery's labels (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory``
   in MiB, ``nvidia.com/gpu.compute.major`` / ``.minor``): what NVIDIA's own node agent
   read off NVML, and what users already select on;
2. the topology annotation's per-GPU ``name`` and ``memoryMiB``, which gputopo's reporter
   writes from NVML where GFD does not run;
3. what a DRA driver publishes in the node's ResourceSlice (NVIDIA's ``productName``,
   capacity ``memory``, ``cudaComputeCapability``; :class:`gputopo.cluster.dra.
   PublishedGpu`): a node whose GPUs DRA hands out runs no device plugin and so often no
   GFD; last because the slice is read apart from the Node and only for the GPUs the
   reporter's identities tie it to.

A node with none of them has no model (``None``): it is rated by its wiring alone, as before
GPU generations were known, and ``gputopo nodes`` says so. A product the table does not
know is rated conservatively from its compute capability (gputopo.topology.gpus).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gputopo import names
from gputopo.cluster.dra import PublishedGpu
from gputopo.topology.gpus import GpuIdentity, GpuModel, gpu_model, identities_from_annotation


def _meta_map(node: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    meta = node.get("metadata")
    found = meta.get(key) if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _int(raw: object) -> int | None:
    try:
        value = int(str(raw).strip())
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def _annotation(node: Mapping[str, Any]) -> Mapping[str, Any]:
    raw = _meta_map(node, "annotations").get(names.TOPOLOGY_ANNOTATION)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, Mapping) else {}


def gpu_model_of(node: Mapping[str, Any], published: PublishedGpu | None = None
                 ) -> GpuModel | None:
    """The node's GPU model (module docstring), None when nothing names one;
    ``published``: what its DRA driver's ResourceSlice says of its GPUs."""
    lab = _meta_map(node, "labels")
    product = lab.get(names.GPU_PRODUCT_LABEL)
    memory = _int(lab.get(names.GPU_MEMORY_LABEL))
    major, minor = _int(lab.get(names.GPU_COMPUTE_MAJOR_LABEL)), _int(
        lab.get(names.GPU_COMPUTE_MINOR_LABEL))
    compute = (major, minor or 0) if major is not None else None
    if not (isinstance(product, str) and product.strip()):
        gpus = _annotation(node).get("gpus")
        first = gpus[0] if isinstance(gpus, list) and gpus else None
        if isinstance(first, Mapping) and isinstance(first.get("name"), str):
            product = first["name"]
            memory = memory or _int(first.get("memoryMiB"))
        elif published is not None and published.product:
            product = published.product
        elif memory is None and compute is None and published is None:
            return None
        else:
            product = None
    if published is not None:
        memory = memory or published.memory_mib
        compute = compute or published.compute
    return gpu_model(product, memory, compute)


def gpu_identities_of(node: Mapping[str, Any]) -> tuple[GpuIdentity, ...]:
    """Driver index -> uuid / PCI bus id of the node's GPUs, from the topology annotation
    (the reporter writes both per GPU when NVML is available); empty when unknown."""
    return identities_from_annotation(_annotation(node))
