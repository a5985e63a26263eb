"""A placement's predicted training throughput: compute paced by the slowest GPU, plus the
all-reduce the wiring allows.

Why a module of its own: bus bandwidth alone rated an 8-GPU job on eight T4s over PCIe as
well as on a DGX A100 (both "good enough" wiring), yet dense FP16/BF16 tensor throughput
differs 5x between them (gputopo.topology.gpus). The solver's choice between GPU models
(:mod:`gputopo.placement.generations`), the waiting rule (:mod:`gputopo.placement.waiting`),
the placement record and ``gputopo place`` all need the same figure, so it is written once.

The model (docs/placement.md, "GPU generations"). A job states ``c``, the share of its step
spent computing when placed well on its reference (policy key ``placement.computeShare``,
annotation ``gputopo.io/compute-share``). On a placement ``p`` whose slowest GPU gives
``R_p`` TFLOPS and whose all-reduce gets bus bandwidth ``B_p``, relative to a reference
``(R_ref, B_ref)``::

    step(p) = c x R_ref / R_p + (1 - c) x B_ref / B_p        share = 1 / step(p)

(the cost model's step, docs/topology.md, with its compute scaled by the GPU's throughput
and no overlap: the conservative end). A one-GPU gang has no all-reduce: share =
``R_p / R_ref``. Where the GPU models are equal (or unknown everywhere) the compute part is
the same for every placement and the ranking is the bandwidth's, as before.

The default ``c`` when a job says nothing, :data:`DEFAULT_COMPUTE_SHARE` = 0.96: the
seeds' VGG16 on a DGX-1 NVLink quad (docs/topology.md, worked example: 280.6 ms of compute,
10.3 ms of all-reduce per step, 4 x V100, batch 64 — the more communication-heavy of the
two measured models; ResNet-50 there is 0.99). It ranks GPU models; the waiting rule does
not rely on it (:func:`worst_share`).

That default was measured on V100s (125 TFLOPS), and a share is a property of the GPU it
was measured on: the same job on GPUs ``k`` times faster spends ``k`` times less time
computing and the same time in its all-reduce. So where the reference is another model,
the default is carried over to the reference's TFLOPS (:func:`default_share`; TFLOPS here
are what a GPU trains at, ``GpuModel.training_tflops``): 0.96 on a V100 is 0.91 on an A100
and 0.81 on an H100. Rated at the fastest model's TFLOPS with the V100's 0.96, the mixed
replay's 16-32-GPU gangs (bench/mixed_generations.py) ranked L40S servers on 100 GbE TCP
above DGX-1 V100s on GPUDirect (the compute weighed several times what it is on the
reference), which made the L40S kind their typical reference, one an A100 placement
never reached: they waited ``maxWaitSeconds`` for the four H100 nodes (docs/placement.md).
A stated share is the job's own, taken as measured on the reference (the best compute it
is rated against).
"""

from __future__ import annotations

from typing import NamedTuple

from gputopo.topology.gpus import FALLBACK, MODELS

#: A job's compute share when it states none (module docstring: the seeds' VGG16 on a
#: DGX-1 NVLink quad, 280.6 ms compute and 10.3 ms all-reduce per step)
DEFAULT_COMPUTE_SHARE = 0.96
#: The dense TFLOPS of the GPUs :data:`DEFAULT_COMPUTE_SHARE` was measured on (V100 SXM2)
DEFAULT_SHARE_TFLOPS = MODELS["V100-SXM2-32GB"].training_tflops


def share_at(compute_share: float, measured_tflops: float | None,
             ref_tflops: float | None) -> float:
    """A compute share measured on GPUs of ``measured_tflops``, carried over to GPUs of
    ``ref_tflops`` (the compute scales, the all-reduce does not); unchanged where either
    is unknown or they are equal."""
    if (measured_tflops is None or ref_tflops is None or ref_tflops <= 0
            or measured_tflops == ref_tflops or compute_share >= 1 or compute_share <= 0):
        return compute_share
    compute = compute_share * measured_tflops / ref_tflops
    return compute / (compute + (1.0 - compute_share))


def default_share(ref_tflops: float | None) -> float:
    """:data:`DEFAULT_COMPUTE_SHARE` carried over to a reference of ``ref_tflops``
    (module docstring); the figure itself where the reference's model is unknown."""
    return share_at(DEFAULT_COMPUTE_SHARE, DEFAULT_SHARE_TFLOPS, ref_tflops)


def share_or_default(compute_share: float | None, ref_tflops: float | None) -> float:
    """The job's stated share, or the default carried over to the reference."""
    return default_share(ref_tflops) if compute_share is None else compute_share


class Speed(NamedTuple):
    """What a placement gives a gang: its slowest GPU's dense TFLOPS (None: no model known)
    and its all-reduce bus bandwidth in GB/s (0 for one GPU: no all-reduce)."""

    tflops: float | None
    gbps: float


class Step(NamedTuple):
    """A placement's predicted step time relative to the reference's (1.0), in parts."""

    compute: float
    communication: float

    @property
    def total(self) -> float:
        return self.compute + self.communication

    @property
    def share(self) -> float:
        """Throughput as a share of the reference's: 1 / step."""
        return 1.0 / self.total if self.total > 0 else 0.0


def _known(ref: float | None, got: float | None) -> float | None:
    """``got``'s TFLOPS to compare with ``ref``'s: an unknown model beside a known one is
    rated as the slowest of the table (conservative); None when the reference is unknown
    (nothing to scale by)."""
    if ref is None:
        return None
    return FALLBACK.training_tflops if got is None or got <= 0 else got


def _ratio(ref: float | None, got: float | None) -> float:
    """How many times longer the compute takes than on the reference (1 when the
    reference's GPU model is unknown: nothing to scale by)."""
    known = _known(ref, got)
    return 1.0 if ref is None or known is None else ref / known


def step(speed: Speed, ref: Speed, compute_share: float) -> Step:
    """``speed``'s step relative to ``ref``'s with compute share ``compute_share``."""
    compute = _ratio(ref.tflops, speed.tflops)
    if ref.gbps <= 0:  # the reference moves no all-reduce: the step is all compute
        return Step(compute, 0.0)
    if speed.gbps <= 0:
        return Step(compute_share * compute, float("inf"))
    return Step(compute_share * compute, (1 - compute_share) * ref.gbps / speed.gbps)


def throughput_share(speed: Speed, ref: Speed, compute_share: float) -> float:
    """Throughput of ``speed`` as a share of ``ref``'s (module docstring)."""
    return step(speed, ref, compute_share).share


def worst_share(speed: Speed, ref: Speed) -> float:
    """The least :func:`throughput_share` over every compute share in [0, 1]: the slower of
    the compute ratio ``R/R_ref`` and the bandwidth ratio ``B/B_ref`` (the step is a
    weighted mean of the two slow-downs, so it is at most the larger).

    Why the waiting rule takes it for a job that states no compute share: it is the rule's
    bandwidth share unchanged wherever the GPU models are equal (the same float: the
    compute ratio is left out), so a homogeneous cluster waits exactly as before, and a
    placement on slower GPUs is never judged better than its compute allows."""
    b = 1.0 if ref.gbps <= 0 else speed.gbps / ref.gbps
    got = _known(ref.tflops, speed.tflops)
    if ref.tflops is None or got is None or got == ref.tflops:
        return b
    r = got / ref.tflops
    return r if ref.gbps <= 0 else min(r, b)


def judged_share(speed: Speed, ref: Speed, compute_share: float | None) -> float:
    """The share the waiting rule compares: :func:`throughput_share` with the job's stated
    compute share, :func:`worst_share` when it states none."""
    if compute_share is None:
        return worst_share(speed, ref)
    return throughput_share(speed, ref, compute_share)
