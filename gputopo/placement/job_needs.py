"""What a job says about its GPUs' work: its compute share and its per-GPU memory need.

Why one module: a policy states them for every job it admits (``spec.placement.
computeShare``, ``minGpuMemory``), a job or its pod template may state its own (the
annotations ``gputopo.io/compute-share``, ``gputopo.io/gpu-memory``; an annotation wins),
and ``gputopo place``, the admission step and the queue (from the waiting record) must read
them the same way into the :class:`~gputopo.placement.types.GangRequest`. Pure: plain
mappings in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gputopo import names
from gputopo.placement.types import GangRequest
from gputopo.quantity import gpu_memory_mib


def needs_annotations(meta: Mapping[str, object]) -> dict[str, str]:
    """The annotations of an object's ``metadata`` that say what its GPUs do."""
    raw = meta.get("annotations")
    found = raw if isinstance(raw, Mapping) else {}
    return {k: str(found[k]) for k in (names.COMPUTE_SHARE_ANNOTATION,
                                       names.GPU_MEMORY_ANNOTATION) if k in found}


def compute_share_of(raw: object) -> float:
    """A compute share: a number in [0, 1] (a string of one too); ValueError otherwise."""
    if isinstance(raw, bool):
        raise ValueError(f"not a share: {raw!r}")
    try:
        value = float(raw.strip()) if isinstance(raw, str) else float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"not a number from 0 to 1: {raw!r}") from None
    if not 0 <= value <= 1:
        raise ValueError(f"not a number from 0 to 1: {raw!r}")
    return value


def annotated_needs(annotations: Mapping[str, object]
                    ) -> tuple[float | None, int | None, list[str]]:
    """(compute share, per-GPU memory MiB, problems) from ``annotations``; a value that
    does not parse is None with its problem said (the policy's value then applies)."""
    problems: list[str] = []
    share = memory = None
    raw = annotations.get(names.COMPUTE_SHARE_ANNOTATION)
    if raw is not None:
        try:
            share = compute_share_of(raw)
        except ValueError as exc:
            problems.append(f"{names.COMPUTE_SHARE_ANNOTATION}: {exc}")
    raw = annotations.get(names.GPU_MEMORY_ANNOTATION)
    if raw is not None:
        try:
            memory = gpu_memory_mib(raw)
        except ValueError as exc:
            problems.append(f"{names.GPU_MEMORY_ANNOTATION}: {exc} (give MiB or a quantity "
                            f"such as 40Gi)")
    return share, memory, problems


def with_needs(gang: GangRequest, *sources: Mapping[str, object] | None,
               compute_share: float | None = None, min_memory_mib: int | None = None,
               mix_models: bool = False) -> tuple[GangRequest, list[str]]:
    """``gang`` with the needs the policy states (keywords) and the annotations of
    ``sources`` (the pod's, then the job's: the first that states one wins) say; and the
    problems of annotations that did not parse."""
    problems: list[str] = []
    share = memory = None
    for found in sources:
        if not found:
            continue
        s, m, p = annotated_needs(found)
        problems += p
        share = share if share is not None else s
        memory = memory if memory is not None else m
    share = share if share is not None else compute_share
    memory = memory if memory is not None else min_memory_mib
    if (share, memory, mix_models) == (gang.compute_share, gang.min_memory_mib,
                                       gang.mix_models):
        return gang, problems
    return replace(gang, compute_share=share, min_memory_mib=memory,
                   mix_models=mix_models), problems


def recorded_needs(gang: Mapping[str, object]) -> dict[str, object]:
    """The ``GangRequest`` keywords a waiting record's ``gang`` keeps (``computeShare``,
    ``minGpuMemoryMiB``, ``mixGpuModels``; webhook/placement/records.py); a value that is
    absent (a record of an older webhook) or not one a valid policy gives is left out."""
    out: dict[str, object] = {}
    try:
        if gang.get("computeShare") is not None:
            out["compute_share"] = compute_share_of(gang["computeShare"])
    except ValueError:
        pass
    memory = gang.get("minGpuMemoryMiB")
    if isinstance(memory, int) and not isinstance(memory, bool) and memory > 0:
        out["min_memory_mib"] = memory
    if gang.get("mixGpuModels") is True:
        out["mix_models"] = True
    return out
