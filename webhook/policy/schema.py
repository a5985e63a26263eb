"""The ``gputopo.io/v1alpha1`` ``TopologyPolicy`` as typed, validated, defaulted values.

Why typed values: the YAML is checked once, when it is loaded (see ``validate.py``); the
pipeline then works with these frozen objects and never meets a missing key or a wrong type.
Defaults live here, next to the fields, as scheduler-plugins keeps them next to its args.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, Literal, NamedTuple

from gputopo import names
from gputopo.placement.waiting import WaitingRule
from gputopo.topology.transport import TransportShares

API_VERSION = "gputopo.io/v1alpha1"
KIND = "TopologyPolicy"

Mode = Literal["enforce", "audit"]
WhenFull = Literal["wait", "admit", "deny"]
PodGroupPolicy = Literal["create", "require", "off"]
ComputeDomainPolicy = Literal["create", "off"]
#: How long a gang waits for a placement of ``minShare`` before ``afterMaxWait`` applies.
DEFAULT_MAX_WAIT_SECONDS = 3600

#: Replica roles a policy may name: the lower-cased replica types of the Kubeflow jobs, and
#: ``node`` (the replicated job of Trainer v2's runtimes that runs the training).
ROLES = ("master", "worker", "launcher", "chief", "ps", "evaluator", "node")

#: (apiVersion, kind) of every owner the pipeline understands, and where each keeps its
#: replica specs. The v2beta1 MPIJob launcher pod is owned by a batch/v1 Job that the MPIJob
#: owns; the pipeline follows that chain. A JobSet's pods are owned by its batch/v1 Jobs (and
#: a TrainJob owns its JobSet): their replicated jobs become replica specs under "podSets"
#: (webhook/jobset_gangs.py).
OWNER_KINDS: dict[tuple[str, str], str] = {
    ("kubeflow.org/v1", "PyTorchJob"): "pytorchReplicaSpecs",
    ("kubeflow.org/v1", "TFJob"): "tfReplicaSpecs",
    ("kubeflow.org/v1", "MPIJob"): "mpiReplicaSpecs",
    ("kubeflow.org/v2beta1", "MPIJob"): "mpiReplicaSpecs",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "podSets",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "podSets",
}
DEFAULT_PRIORITY = 100
DEFAULT_RENAME = {names.SOURCE_GPU_RESOURCE: names.TOPOLOGY_GPU_RESOURCE}


class OwnerKind(NamedTuple):
    """An owner kind a policy matches: compares equal to the ``(apiVersion, kind)`` pair
    of a job, so matching is a membership test (``in``) over the policy's owners."""

    api_version: str
    kind: str


@dataclass(frozen=True)
class Match:
    """Which pods a policy applies to; every field narrows (AND), never widens.

    The namespace opt-in label ``gputopo.io/inject=enabled`` is always required in addition
    to ``namespace_labels``: a policy cannot reach a namespace that did not opt in.
    """

    namespace_labels: dict[str, str] = field(default_factory=dict)
    owners: tuple[OwnerKind, ...] = tuple(OwnerKind(a, k) for a, k in OWNER_KINDS)
    roles: tuple[str, ...] = ()  # empty: any role
    pod_labels: dict[str, str] = field(default_factory=dict)
    job_labels: dict[str, str] = field(default_factory=dict)
    #: TrainJob runtimes (``spec.runtimeRef.name``); non-empty: only TrainJob gangs on one
    #: of them match
    runtimes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScaledQuantity:
    """``base + perGPU x (GPUs of the container)``: the one arithmetic a policy may ask for."""

    base: Fraction = Fraction(0)
    per_gpu: Fraction = Fraction(0)

    def value(self, gpus: int) -> Fraction:
        return self.base + self.per_gpu * gpus


@dataclass(frozen=True)
class Mutations:
    """What a matching policy does to a GPU-requesting pod of a training job.

    ``None`` / empty means "leave alone". Volume mounts, the container securityContext and
    resources go to the containers that request a GPU.
    """

    rename_resources: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_RENAME))
    host_network: bool | None = None
    host_ipc: bool | None = None
    host_pid: bool | None = None
    dns_policy: str | None = None
    gang_labels: bool = True
    scheduler_name: str | None = names.SCHEDULER_NAME
    volumes: tuple[dict[str, Any], ...] = ()
    volume_mounts: tuple[dict[str, Any], ...] = ()
    security_context: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, ScaledQuantity] = field(default_factory=dict)
    limits: dict[str, ScaledQuantity] = field(default_factory=dict)


NetworkMode = Literal["auto", "host", "pod"]
GpuEnvSource = Literal["pod", "plugin"]
#: Host ports a network plan hands out (``placement.hostPorts``). It starts at
#: training-operator's PyTorchJob default, so the first job on a node keeps the port its
#: users know; 1,000 ports are 15 steps of 64 (webhook/placement/network.py).
DEFAULT_HOST_PORTS = (23456, 24455)


@dataclass(frozen=True)
class PlacementSettings:
    """Read by the placement step: whether to place, what to do when the gang does not fit
    now (``when_full``; the old ``onUnplaceable`` maps onto it), how long it may wait, and
    whether the PodGroup its pods are labelled for is made (``pod_group``), and how
    co-located replicas of a gang talk (``network``, see webhook/placement/network.py)."""

    enabled: bool = True
    when_full: WhenFull = "wait"
    max_wait_seconds: int = DEFAULT_MAX_WAIT_SECONDS
    pod_group: PodGroupPolicy = "create"
    network: NetworkMode = "auto"
    host_ports: tuple[int, int] = DEFAULT_HOST_PORTS
    #: who sets NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES: ``pod`` (the webhook, from
    #: the slot annotations; ACK's device plugin reads them) or ``plugin`` (gputopo's device
    #: plugin returns them from Allocate; the kubelet puts the spec's env after the plugin's,
    #: so the webhook must then write none: docs/device-plugin.md)
    gpu_env: GpuEnvSource = "pod"
    #: ``transportShare``: the share of a node's line rate NCCL gets, by the node's
    #: transport, replacing the built-in defaults (gputopo.topology.transport) for gangs
    #: this policy admits; a node's own ``gputopo.io/network-efficiency`` still wins.
    #: Sorted (transport, share) pairs; empty: the defaults.
    transport_share: TransportShares = ()
    #: ``computeDomain``: ``create`` makes a ComputeDomain (NVIDIA DRA driver) for a gang
    #: placed over trays of one NVLink domain and gives its pods the IMEX channel claim
    #: (webhook/placement/compute_domain.py); ``off`` (default) changes no pod
    compute_domain: ComputeDomainPolicy = "off"
    #: ``gpuDeviceClasses``: the DRA DeviceClasses whose devices are GPUs (a pod's claims
    #: on them count as its GPUs and are pinned, gputopo/cluster/dra.py); NVIDIA's driver
    #: installs ``gpu.nvidia.com``
    gpu_device_classes: tuple[str, ...] = ("gpu.nvidia.com",)
    #: ``minShare``, ``afterMaxWait``, ``floorShare``: when a gang that may wait takes the
    #: placement it can get (gputopo.placement.waiting)
    waiting: WaitingRule = field(default_factory=WaitingRule)
    #: ``computeShare``: the share of a job's step spent computing (0-1) for the jobs this
    #: policy admits (gputopo.placement.throughput); None: not stated (the default ranks
    #: GPU models, the waiting rule takes the worst case). The job's annotation
    #: ``gputopo.io/compute-share`` wins.
    compute_share: float | None = None
    #: ``mixGpuModels``: a gang may span GPU models, paced by the slowest (default: never)
    mix_gpu_models: bool = False
    #: ``minGpuMemory``: the least memory (MiB) each GPU must have ("40Gi" or MiB in the
    #: policy); the job's annotation ``gputopo.io/gpu-memory`` wins
    min_gpu_memory_mib: int | None = None


@dataclass(frozen=True)
class Policy:
    name: str
    source: str
    mode: Mode = "enforce"
    priority: int = DEFAULT_PRIORITY
    match: Match = field(default_factory=Match)
    mutations: Mutations = field(default_factory=Mutations)
    placement: PlacementSettings = field(default_factory=PlacementSettings)

    @cached_property
    def gpu_resources(self) -> frozenset[str]:
        """Resource names that mean "a GPU" for this policy (before and after renaming);
        made once per policy (read several times per review)."""
        return frozenset(
            {names.SOURCE_GPU_RESOURCE, names.TOPOLOGY_GPU_RESOURCE,
             *self.mutations.rename_resources, *self.mutations.rename_resources.values()}
        )
