"""The ``gpu-topology-scheduler`` profile and the KubeSchedulerConfiguration around it.

Why a profile of its own: the webhook decides *which* node and GPUs a gang gets; the
scheduler must then (1) hold the gang's pods until all of them fit (Coscheduling, from
scheduler-plugins: queueSort + preFilter + postFilter + permit + reserve, as upstream's
``manifests/coscheduling/scheduler-config.yaml`` enables it), (2) pack GPU pods onto the
fullest nodes so whole NVLink islands stay free for the next gang (NodeResourcesFit with
``MostAllocated`` weighing the renamed GPU resource), and (3) not undo the packing by
spreading (PodTopologySpread and NodeResourcesBalancedAllocation scoring off, or turned
down, for this profile only).

kube-scheduler requires every profile of one process to use the *same* queueSort plugin
with the same args (validateCommonQueueSort). A freshly generated file has one profile;
``merge_profile`` puts the profile into an existing file and refuses, with one clear line,
when another profile sorts its queue differently — unless asked to align them all.

Every result is checked with :func:`generator.scheduler_schema.validate_config`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from generator import scheduler_schema as schema
from gputopo.errors import InputError
from gputopo.names import GPUTOPO_NAMESPACE, SCHEDULER_NAME, TOPOLOGY_GPU_RESOURCE

COSCHEDULING = "Coscheduling"
#: Extension points at which upstream's example config enables Coscheduling.
COSCHEDULING_POINTS = ("queueSort", "preFilter", "postFilter", "permit", "reserve")
#: Default score plugins that spread pods out; they fight bin-packing of gangs.
SPREADING_SCORERS = ("PodTopologySpread", "NodeResourcesBalancedAllocation")


@dataclass(frozen=True)
class ProfileOptions:
    """What an operator may tune; defaults are the documented ones (docs/install.md)."""

    gpu_resource: str = TOPOLOGY_GPU_RESOURCE
    #: How long already-placed pods of a gang wait at Permit for the rest (CoschedulingArgs
    #: permitWaitingTimeSeconds; upstream default 60). Training operators create a job's
    #: pods one by one and each passes the webhook first, so gputopo allows longer.
    permit_wait_seconds: int = 120
    #: CoschedulingArgs podGroupBackoffSeconds; None leaves upstream's default (0).
    pod_group_backoff_seconds: int | None = None
    gpu_weight: int = 10
    cpu_weight: int = 1
    memory_weight: int = 1
    #: Score weight of NodeResourcesFit itself (default-scheduler uses 1).
    fit_weight: int = 10
    #: 0 disables the spreading scorers for this profile; 1-100 keeps them at that weight.
    spread_weight: int = 0
    api_version: str = f"{schema.GROUP}/v1"


def check_options(opts: ProfileOptions) -> None:
    """Refuse an option kube-scheduler would refuse, naming the flag."""
    if opts.api_version not in schema.API_VERSIONS:
        raise InputError(
            f"must be one of {', '.join(v.rsplit('/', 1)[1] for v in schema.API_VERSIONS)}",
            obj="--api-version",
        )
    if not schema.is_extended_resource_name(opts.gpu_resource):
        raise InputError(
            f"{opts.gpu_resource!r} is not an extended resource name (like aliyun.com/gpu)",
            obj="--gpu-resource",
        )
    low, high = schema.RESOURCE_WEIGHT_RANGE
    for flag, value in (("--gpu-weight", opts.gpu_weight), ("--cpu-weight", opts.cpu_weight),
                        ("--memory-weight", opts.memory_weight)):
        if not low <= value <= high:
            raise InputError(f"{value} is not in the valid range [{low}, {high}]", obj=flag)
    low, high = schema.PLUGIN_WEIGHT_RANGE
    if not low <= opts.fit_weight <= high:
        raise InputError(f"{opts.fit_weight} is not in the valid range [{low}, {high}]",
                         obj="--fit-weight")
    if not 0 <= opts.spread_weight <= high:
        raise InputError(
            f"{opts.spread_weight} is not in the valid range [0, {high}] (0 turns spreading off)",
            obj="--spread-weight",
        )
    if opts.permit_wait_seconds <= 0:
        raise InputError(f"{opts.permit_wait_seconds} must be greater than 0",
                         obj="--permit-wait-seconds")
    if opts.pod_group_backoff_seconds is not None and opts.pod_group_backoff_seconds < 0:
        raise InputError(f"{opts.pod_group_backoff_seconds} must not be negative",
                         obj="--pod-group-backoff-seconds")


def coscheduling_args(opts: ProfileOptions) -> dict[str, Any]:
    """CoschedulingArgs; also what every profile must share when Coscheduling sorts the queue."""
    args: dict[str, Any] = {"permitWaitingTimeSeconds": opts.permit_wait_seconds}
    if opts.pod_group_backoff_seconds is not None:
        args["podGroupBackoffSeconds"] = opts.pod_group_backoff_seconds
    return args


def queue_sort_set() -> dict[str, Any]:
    """Coscheduling sorts the queue; the default sort (PrioritySort) is switched off."""
    return {"enabled": [{"name": COSCHEDULING}], "disabled": [{"name": "*"}]}


def build_profile(opts: ProfileOptions) -> dict[str, Any]:
    """The ``gpu-topology-scheduler`` KubeSchedulerProfile."""
    check_options(opts)
    plugins: dict[str, Any] = {}
    for point in schema.EXTENSION_POINTS:  # upstream order keeps the output stable
        if point == "queueSort":
            plugins[point] = queue_sort_set()
        elif point in COSCHEDULING_POINTS:
            plugins[point] = {"enabled": [{"name": COSCHEDULING}]}
        elif point == "score":
            enabled = [{"name": "NodeResourcesFit", "weight": opts.fit_weight}]
            disabled = []
            for scorer in SPREADING_SCORERS:
                if opts.spread_weight:
                    enabled.append({"name": scorer, "weight": opts.spread_weight})
                else:
                    disabled.append({"name": scorer})
            plugins[point] = {"enabled": enabled, **({"disabled": disabled} if disabled else {})}
    resources = [
        {"name": opts.gpu_resource, "weight": opts.gpu_weight},
        {"name": "cpu", "weight": opts.cpu_weight},
        {"name": "memory", "weight": opts.memory_weight},
    ]
    return {
        "schedulerName": SCHEDULER_NAME,
        "plugins": plugins,
        "pluginConfig": [
            {"name": COSCHEDULING, "args": coscheduling_args(opts)},
            {
                "name": "NodeResourcesFit",
                "args": {"scoringStrategy": {"type": "MostAllocated", "resources": resources}},
            },
        ],
    }


def build_config(opts: ProfileOptions) -> dict[str, Any]:
    """A complete KubeSchedulerConfiguration for the gputopo scheduler Deployment.

    Leader election uses a lease of its own (``gpu-topology-scheduler`` in gputopo's
    namespace) so it never competes with the cluster's default kube-scheduler.
    """
    doc = {
        "apiVersion": opts.api_version,
        "kind": schema.KIND,
        "leaderElection": {
            "leaderElect": True,
            "resourceLock": "leases",
            "resourceName": SCHEDULER_NAME,
            "resourceNamespace": GPUTOPO_NAMESPACE,
        },
        "profiles": [build_profile(opts)],
    }
    ensure_valid(doc, source="<generated>")
    return doc


def ensure_valid(doc: Any, *, source: str) -> None:
    """Raise InputError with the first upstream rule ``doc`` breaks (all of them counted)."""
    errs = schema.validate_config(doc)
    if errs:
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise InputError(errs[0] + more, file=source)


def merge_profile(
    existing: Any, opts: ProfileOptions, *, source: str, align_queue_sort: bool = False
) -> dict[str, Any]:
    """``existing`` with the gputopo profile added (or replaced, so merging is idempotent).

    The existing file's apiVersion wins (it is what that scheduler already loads). When
    another profile sorts its queue differently, fail — or, with ``align_queue_sort``, give
    every profile Coscheduling's queue sort and args (Coscheduling orders pods that belong
    to no gang by priority then age, like the default PrioritySort).
    """
    if not isinstance(existing, dict) or existing.get("kind") != schema.KIND:
        raise InputError(f"not a {schema.KIND}", file=source)
    if existing.get("apiVersion") not in schema.API_VERSIONS:
        raise InputError(
            f"apiVersion {existing.get('apiVersion')!r} is not supported "
            f"(use {' or '.join(schema.API_VERSIONS)})",
            file=source,
        )
    ensure_valid(existing, source=source)
    doc = copy.deepcopy(existing)
    ours = build_profile(opts)
    profiles = [p for p in doc.get("profiles") or [] if p.get("schedulerName") != SCHEDULER_NAME]
    if not (doc.get("profiles") or []):
        # kube-scheduler's defaulting adds default-scheduler to a file without profiles;
        # keep that profile explicit so pods without a schedulerName are still scheduled.
        profiles = [{"schedulerName": "default-scheduler"}]
    for i, profile in enumerate(profiles):
        same_sort = schema.queue_sort_of(profile) == schema.queue_sort_of(ours)
        theirs = schema.plugin_args(profile, COSCHEDULING)
        same_args = theirs is None or theirs == coscheduling_args(opts)
        if same_sort and same_args:
            continue
        if not align_queue_sort:
            what = "queueSort plugins" if not same_sort else "Coscheduling args"
            raise InputError(
                f"its {what} differ from {SCHEDULER_NAME}'s (Coscheduling); kube-scheduler "
                "needs the same queueSort in every profile: rerun with --align-queue-sort "
                "to give every profile Coscheduling's queue sort",
                file=source,
                obj=f"profiles[{i}] ({profile.get('schedulerName')})",
            )
        _align(profile, opts)
    doc["profiles"] = [*profiles, ours]
    ensure_valid(doc, source=source)
    return doc


def _align(profile: dict[str, Any], opts: ProfileOptions) -> None:
    plugins = profile["plugins"] = profile.get("plugins") or {}  # `plugins: null` is valid
    plugins["queueSort"] = queue_sort_set()
    configs = [c for c in profile.get("pluginConfig") or [] if c.get("name") != COSCHEDULING]
    profile["pluginConfig"] = [*configs, {"name": COSCHEDULING, "args": coscheduling_args(opts)}]
