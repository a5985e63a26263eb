"""Placement across GPU generations: one GPU model per gang, the fast GPUs for the jobs
that gain from them, GPU memory as a hard limit.

Why a layer above the solver and not a term inside it: the solver's search is exact for
its objective over nodes it treats as interchangeable by wiring and network
(gputopo.placement.solver); a gang spread over two GPU models runs every synchronous step
at the slower one's pace, so by default a gang never mixes models. That makes the models
*partitions* of the cluster: :func:`solve_models` solves each with the unchanged solver
and picks among the answers by predicted throughput (gputopo.placement.throughput). With
one model (or none known) it is the solver's answer itself — the same placement, the same
cost — so homogeneous clusters answer exactly as before.

Who gets the fast GPUs (docs/placement.md, "GPU generations"; after Gavel, Narayanan et
al., OSDI 2020, which allocates by effective throughput per GPU type, and Sia, Jayaram
Subramanya et al., SOSP 2023, which weighs each job's speed-up per type):

1. every partition's best placement is rated by its throughput, ``1 / step``, with the
   job's compute share (its stated one, or :data:`~gputopo.placement.throughput.
   DEFAULT_COMPUTE_SHARE` carried over to the fastest answer's TFLOPS,
   :func:`~gputopo.placement.throughput.default_share`) against the best compute any
   answer gives (GPUs compared by what they train at, ``GpuModel.training_tflops``) and
   the gang's bandwidth placed well (``GangRequest.well_gbps``, its best on the empty
   nodes, which the webhook sets; else the best any answer gives);
2. answers within :data:`TIE_BAND` of the best throughput count as tied: among them the
   one that opens fewer empty nodes, then leaves fewer GPUs free on the nodes it touches
   (the objective's packing and fit), then the faster, wins. So a job that gains under
   ``TIE_BAND`` from a faster model (one bound by its communication on equal wiring, or
   two models of one chip: A100 40 and 80 GB) fills partly used nodes of either, and a
   compute-bound job takes the faster model while it is free;
3. with ``mixGpuModels`` the gang's best on all nodes together is a candidate too, rated
   by its slowest GPU; the record says when it was taken.

Memory: a gang with ``min_memory_mib`` never goes to a node whose GPUs have less, nor to
one whose GPU memory is unknown (no GPU Feature Discovery label, no reporter or DRA figure
and a product the table does not know, ``GpuModel.memory_mib`` 0: a hard limit cannot be
met by a guess); the reason names the nodes ruled out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gputopo.placement.solver import GroupedNodes, solve
from gputopo.placement.throughput import (
    Speed,
    share_or_default,
    step,
)
from gputopo.placement.types import GangRequest, NodeState, Placement
from gputopo.topology.gpus import FALLBACK, GpuModel, gpu_model_key

Solver = Callable[[Sequence[NodeState], GangRequest], Placement]

#: Answers on different GPU models within this share of the best throughput are tied and
#: packing decides (module docstring, 2): 1 - the waiting rule's default minShare (0.9),
#: the same "close enough to the best" the rule starts a gang at.
TIE_BAND = 0.1
#: Names listed in a reason before "and N more"
_SHOWN = 8


def tflops_of(model: GpuModel | None) -> float:
    """The TFLOPS a node's GPUs train at (:attr:`~gputopo.topology.gpus.GpuModel.
    training_tflops`: tensor TFLOPS and memory bandwidth); a node whose model nothing says,
    among nodes that do say theirs, as the slowest model of the table (conservative)."""
    return (FALLBACK if model is None else model).training_tflops


def partitions(nodes: Sequence[NodeState]) -> list[Sequence[NodeState]] | None:
    """``nodes`` by GPU model (``gpu_model_key``), in order of first appearance; None when
    they are all of one model (or none says its model): the common case, one pass of
    identity checks (equal labels give the very same GpuModel, gpu_model's cache), or none
    for the webhook's kept grouping, which knows it (``GroupedNodes.one_model``)."""
    if isinstance(nodes, GroupedNodes):
        return None if nodes.one_model() else list(nodes.by_model())
    it = iter(nodes)
    first = next(it, None)
    if first is None:
        return None
    model = first.gpu_model
    for n in it:
        m = n.gpu_model
        if m is not model and gpu_model_key(m) != gpu_model_key(model):
            break
    else:
        return None
    parts: dict[tuple[str, float] | None, list[NodeState]] = {}
    for n in nodes:
        parts.setdefault(gpu_model_key(n.gpu_model), []).append(n)
    return list(parts.values()) if len(parts) > 1 else None


def memory_ruled_out(nodes: Sequence[NodeState], need_mib: int | None) -> list[str]:
    """Names of the ``nodes`` whose GPUs have less than ``need_mib`` MiB, or whose memory
    is unknown (module docstring)."""
    if not need_mib:
        return []
    return [n.name for n in nodes
            if n.gpu_model is None or n.gpu_model.memory_mib < need_mib]


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown if len(names) <= _SHOWN else f"{shown} and {len(names) - _SHOWN} more"


def memory_note(nodes: Sequence[NodeState], ruled: Sequence[str], need_mib: int) -> str:
    """The clause naming the nodes ruled out by GPU memory, by model."""
    by_name = {n.name: n for n in nodes}
    groups: dict[str, list[str]] = {}
    for name in ruled:
        m = by_name[name].gpu_model
        what = (f"{m.name} {m.memory_mib} MiB" if m is not None and m.memory_mib else
                "GPU memory unknown (no nvidia.com/gpu.memory label)")
        groups.setdefault(what, []).append(name)
    parts = "; ".join(f"{what}: {_names(names)}" for what, names in groups.items())
    return (f"{len(ruled)} node(s) ruled out for GPU memory under the {need_mib} MiB "
            f"per GPU the job needs ({parts})")


def solve_models(nodes: Sequence[NodeState], gang: GangRequest, *,
                 solver: Solver = solve) -> Placement:
    """``gang`` placed on ``nodes`` with the GPU-generation rules of the module docstring;
    ``solver`` solves one partition (the exact solver by default)."""
    ruled = memory_ruled_out(nodes, gang.min_memory_mib)
    usable: Sequence[NodeState] = nodes
    note = ""
    if ruled:
        out = set(ruled)
        usable = [n for n in nodes if n.name not in out]
        note = memory_note(nodes, ruled, gang.min_memory_mib or 0)
        if not usable:
            return Placement(feasible=False, reason=note,
                             details={"ruledOutByGpuMemory": ruled})
    parts = partitions(usable)
    if parts is None:
        placement = solver(usable, gang)
        model = usable[0].gpu_model if usable else None
        if model is not None and placement.feasible:
            placement = _rated(placement, gang, [placement], tflops_of(model), [model])
        return _noted(placement, ruled, note)
    answers: list[tuple[Placement, float, list[GpuModel | None]]] = []
    tried: list[tuple[GpuModel | None, Placement]] = []
    for part in parts:
        p = solver(part, gang)
        tried.append((part[0].gpu_model, p))
        if p.feasible:
            answers.append((p, tflops_of(part[0].gpu_model), [part[0].gpu_model]))
    if gang.mix_models:
        p = solver(usable, gang)
        if p.feasible:
            answers.append(_paced(p, usable))
    if not answers:
        return _noted(_no_model_holds(usable, tried, gang, solver), ruled, note)
    chosen = _choose(answers, gang)
    placement, tflops, models = answers[chosen]
    rated = _rated(placement, gang, [a[0] for a in answers], tflops, models,
                   others=[(a[1], a[0].bus_bandwidth_gbps) for a in answers])
    return _noted(rated, ruled, note)


def _paced(p: Placement, nodes: Sequence[NodeState]
           ) -> tuple[Placement, float, list[GpuModel | None]]:
    """A placement over all models, rated by its slowest GPU."""
    touched = {s.node for s in p.slots}
    models: list[GpuModel | None] = []
    seen: set[tuple[str, float] | None] = set()
    for n in nodes:
        if n.name in touched and gpu_model_key(n.gpu_model) not in seen:
            seen.add(gpu_model_key(n.gpu_model))
            models.append(n.gpu_model)
    return p, min(tflops_of(m) for m in models), models


def _ranking_ref(answers: Sequence[tuple[Placement, float, Any]], gang: GangRequest
                 ) -> Speed:
    """The reference the answers are rated against: the best compute any of them gives, and
    the gang's bandwidth placed well (``GangRequest.well_gbps``), or the best any answer
    gives when the caller did not say (module docstring, 1)."""
    return Speed(max(a[1] for a in answers),
                 max(gang.well_gbps or 0.0, *(a[0].bus_bandwidth_gbps for a in answers)))


def _share(p: Placement, tflops: float, ref: Speed, gang: GangRequest) -> float:
    c = share_or_default(gang.compute_share, ref.tflops)
    return step(Speed(tflops, p.bus_bandwidth_gbps), ref, c).share


def _choose(answers: Sequence[tuple[Placement, float, Any]], gang: GangRequest) -> int:
    """The index of the answer to take (module docstring, 2)."""
    ref = _ranking_ref(answers, gang)
    shares = [_share(p, t, ref, gang) for p, t, _ in answers]
    best = max(shares)
    tied = [i for i, s in enumerate(shares) if s >= best * (1 - TIE_BAND) - 1e-12]

    def packing(i: int) -> tuple[int, int, float, int]:
        score = answers[i][0].details.get("score") or {}
        return (int(score.get("emptyNodesOpened", 0)), int(score.get("freeGpusLeft", 0)),
                -shares[i], i)

    return min(tied, key=packing)


def _rated(placement: Placement, gang: GangRequest, answers: Sequence[Placement],
           tflops: float, models: Sequence[GpuModel | None], *,
           others: Sequence[tuple[float, float]] | None = None) -> Placement:
    """``placement`` with its compute pace and the ``throughput`` the record shows: the GPU
    model(s), the step's parts and its throughput as a share of the best answer free now
    (``others``: every answer's (TFLOPS, bus bandwidth); just this one when None)."""
    speeds = others if others is not None else [(tflops, placement.bus_bandwidth_gbps)]
    ref = Speed(max(t for t, _ in speeds), max(b for _, b in speeds))
    c = share_or_default(gang.compute_share, ref.tflops)
    mine = step(Speed(tflops, placement.bus_bandwidth_gbps), ref, c)
    best = max(step(Speed(t, b), ref, c).share for t, b in speeds)
    names = [m.name if m is not None else "unknown" for m in models]
    sheet = min((m or FALLBACK).tflops for m in models)
    info: dict[str, Any] = {
        "gpuModel": names[0] if len(names) == 1 else names,
        "tflops": sheet,
        "trainingTflops": round(tflops, 1),
        "computeShare": round(c, 3),
        "computeShareStated": gang.compute_share is not None,
        "step": {"compute": round(mine.compute, 4),
                 "communication": round(mine.communication, 4),
                 "total": round(mine.total, 4)},
        "shareOfBestNow": round(mine.share / best, 4) if best > 0 else 1.0,
    }
    if len(models) > 1:
        info["mixedGpuModels"] = True
    if any(m is None or not m.known for m in models):
        info["unknownGpuModel"] = True
    reason = placement.reason
    if len(models) > 1:
        reason += (f"; spans GPU models {', '.join(names)} (placement.mixGpuModels): every "
                   f"step is paced by the slowest, {sheet:g} TFLOPS")
    elif len(answers) > 1:
        reason += (f"; on {names[0]} ({sheet:g} TFLOPS), predicted throughput "
                   f"{info['shareOfBestNow']:.0%} of the best GPU model free now")
    return replace(placement, tflops=tflops, throughput=info, reason=reason)


def _noted(placement: Placement, ruled: Sequence[str], note: str) -> Placement:
    """``placement`` with the nodes the memory need ruled out named. An infeasible one's
    reason speaks of the nodes left ("cluster full: all 16 GPUs are in use" on a 32-GPU
    cluster whose other 16 are too small), so it says which nodes it speaks of."""
    if not ruled:
        return placement
    details = {**placement.details, "ruledOutByGpuMemory": list(ruled)}
    reason = placement.reason
    if not placement.feasible and reason:
        reason = f"on the nodes with enough GPU memory, {reason}"
    return replace(placement, reason=f"{reason}; {note}", details=details)


def _no_model_holds(nodes: Sequence[NodeState],
                    tried: Sequence[tuple[GpuModel | None, Placement]],
                    gang: GangRequest, solver: Solver) -> Placement:
    """Why no partition holds the gang (``tried``: each partition's model and answer);
    whether all models together would."""
    # each reason speaks of one model's nodes, not the whole cluster the user knows
    each = [f"{m.name if m is not None else 'unknown model'}: "
            f"{p.reason.replace('the whole cluster has only', 'its nodes have only')}"
            for m, p in tried]
    reason = f"no one GPU model can hold the gang ({'; '.join(each)})"
    if not gang.mix_models and solver(nodes, gang).feasible:
        reason += ("; it would fit across GPU models, paced by the slowest: "
                   "placement.mixGpuModels: true allows that")
    return Placement(feasible=False, reason=reason)
