"""The step protocol: what a pipeline step (the placement step) sees and may do.

Why a protocol: the pipeline owns the order (review → match → job identity → mutations →
steps → patch); a step such as topology placement only needs the working pod and the facts
already established about it. It mutates ``ctx.pod`` in place, appends ``ctx.warnings``,
or calls ``ctx.deny(message)``. The pipeline computes the patch from ``ctx.original`` to
``ctx.pod`` afterwards, so a step never builds patches itself.

When steps run: after the policy mutations, only for pods that request a GPU, belong to a
training job whose size is known (``ctx.job`` is not None) and whose primary policy has
``placement.enabled``. In audit mode (``ctx.audit``) the pipeline passes a scratch copy of
the pod and reports the step's changes as warnings instead of patching; a step should then
also avoid lasting side effects (reservations). ``ctx.request.dry_run`` likewise means "no
side effects" (the webhook declares ``sideEffects: NoneOnDryRun``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gputopo.cluster.dra import DraAsk
from gputopo.cluster.source import ClusterReader
from webhook.policy.schema import Policy
from webhook.review import AdmissionRequest


@dataclass(frozen=True)
class JobInfo:
    """The training job a pod belongs to, established from its controller ownerReference.

    ``replica_type`` is the key in the job's replica specs (``Master``, ``Worker``,
    ``Launcher``...), ``role`` its lower-case form (what policies match). ``gang_size`` is
    the number of GPU-requesting pods of the whole job, from the job's spec;
    ``gpus_per_pod`` the GPUs this pod requests.
    """

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str
    replica_type: str | None
    replica_index: int | None
    role: str | None
    gang_size: int
    gpus_per_pod: int
    requests_gpu: bool
    labels: dict[str, str] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: a TrainJob's ``spec.runtimeRef.name`` ("" for any other job): policies may match it
    runtime: str = ""
    #: the job's own annotations (what it says of its GPUs' work: gputopo.io/compute-share,
    #: gputopo.io/gpu-memory; gputopo.placement.job_needs)
    annotations: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: what this pod's DRA claims ask of GPUs (gputopo.cluster.dra), None without claims;
    #: its GPUs are counted in ``gpus_per_pod``
    dra: DraAsk | None = field(default=None, compare=False, repr=False)
    #: GPUs per pod each replica type of the job's spec asks through DRA claims (its
    #: template's ``resourceClaims``), spec order; empty for a job without claims. The
    #: placement step counts them with the extended resources (gpu_counts_by_replica_type)
    dra_types: dict[str, int] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class AdmissionContext:
    """One pod's admission, handed to each step in turn."""

    request: AdmissionRequest
    pod: dict[str, Any]
    original: dict[str, Any]
    namespace: dict[str, Any] | None
    job: JobInfo | None
    policy: Policy | None
    cluster: ClusterReader
    warnings: list[str] = field(default_factory=list)
    audit: bool = False
    denied: str | None = None

    def deny(self, message: str) -> None:
        """Refuse the pod with ``message`` (shown to the user by the API server)."""
        self.denied = message


class Step(Protocol):
    """A pipeline step; ``name`` labels its warnings and metrics."""

    name: str

    def apply(self, ctx: AdmissionContext) -> None:
        """Mutate ``ctx.pod`` in place, append ``ctx.warnings`` or call ``ctx.deny``."""
        ...
