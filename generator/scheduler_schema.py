"""The rules kube-scheduler applies when it loads a KubeSchedulerConfiguration, as data.

Why this exists: we cannot run kube-scheduler here (no Go toolchain, no container runtime,
and Debian ships no kube-scheduler package), yet a configuration that kube-scheduler rejects
takes the topology scheduler down at start-up. So the upstream types and validation rules
that matter for the file we write are copied here, as data and small checks, and every
file we emit (or merge into) is checked against them before it is written.

Read from (kubernetes v1.34 / scheduler-plugins v0.34, the versions the manifests pin):

- ``kubernetes/kubernetes`` ``staging/src/k8s.io/kube-scheduler/config/v1/types.go``:
  the fields of KubeSchedulerConfiguration, KubeSchedulerProfile, Plugins, PluginSet,
  Plugin, PluginConfig (kube-scheduler decodes strictly: an unknown field is fatal).
- same repo, ``staging/src/k8s.io/kube-scheduler/config/v1/types_pluginargs.go``: the args
  of DefaultPreemption, InterPodAffinity, NodeResourcesFit, PodTopologySpread,
  NodeResourcesBalancedAllocation, VolumeBinding, NodeAffinity.
- same repo, ``pkg/scheduler/apis/config/validation/validation.go``
  (ValidateKubeSchedulerConfiguration): parallelism > 0, profiles with unique non-empty
  schedulerName, one queueSort plugin, the *same* queueSort plugin set and args in every
  profile, unique pluginConfig names, plugins removed in v1 refused, leader election only
  with ``resourceLock: leases``, percentages in [0, 100], backoff ordering.
- same repo, ``pkg/scheduler/apis/config/validation/validation_pluginargs.go``: scoring
  strategy types, resource weights in (0, 100], BalancedAllocation weights exactly 1,
  hardPodAffinityWeight in [0, 100], minCandidateNodes* ranges, defaultingType.
- same repo, ``pkg/scheduler/framework/runtime/framework.go``: a plugin enabled at an
  extension point it does not implement fails with "plugin X does not extend Y plugin".
- ``kubernetes-sigs/scheduler-plugins`` ``apis/config/v1/types.go`` (CoschedulingArgs:
  permitWaitingTimeSeconds, podGroupBackoffSeconds), ``apis/config/validation/
  validation_pluginargs.go`` (both must not be negative), ``cmd/scheduler/main.go`` (the
  plugin names registered in the scheduler-plugins image) and
  ``manifests/coscheduling/scheduler-config.yaml`` (Coscheduling at queueSort, preFilter,
  postFilter, permit and reserve; default queue sort disabled with ``"*"``).

Not reproduced: the args of plugins gputopo never configures are checked for their field
names only; extenders are accepted as written; feature-gated fields are refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

GROUP = "kubescheduler.config.k8s.io"
API_VERSIONS = (f"{GROUP}/v1", f"{GROUP}/v1beta3")
KIND = "KubeSchedulerConfiguration"

# --- types.go: field names (strict decoding) ---------------------------------------------
CONFIG_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "parallelism",
        "leaderElection",
        "clientConnection",
        # componentbaseconfigv1alpha1.DebuggingConfiguration, inlined
        "enableProfiling",
        "enableContentionProfiling",
        "percentageOfNodesToScore",
        "podInitialBackoffSeconds",
        "podMaxBackoffSeconds",
        "profiles",
        "extenders",
        "delayCacheUntilActive",
    }
)
LEADER_ELECTION_FIELDS = frozenset(
    {
        "leaderElect",
        "leaseDuration",
        "renewDeadline",
        "retryPeriod",
        "resourceLock",
        "resourceName",
        "resourceNamespace",
    }
)
CLIENT_CONNECTION_FIELDS = frozenset(
    {"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}
)
PROFILE_FIELDS = frozenset({"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"})
PLUGIN_SET_FIELDS = frozenset({"enabled", "disabled"})
PLUGIN_FIELDS = frozenset({"name", "weight"})
PLUGIN_CONFIG_FIELDS = frozenset({"name", "args"})

#: Extension points of ``Plugins`` (types.go), in upstream order.
EXTENSION_POINTS = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
)

# --- plugin registries -------------------------------------------------------------------
#: In-tree plugins (pkg/scheduler/framework/plugins/names/names.go) and the extension
#: points each implements (the ``var _ framework.XPlugin = &Plugin{}`` assertions).
IN_TREE_PLUGINS: Mapping[str, frozenset[str]] = {
    "PrioritySort": frozenset({"queueSort"}),
    "DefaultBinder": frozenset({"bind"}),
    "DefaultPreemption": frozenset({"preEnqueue", "postFilter"}),
    "DynamicResources": frozenset(
        {"preEnqueue", "preFilter", "filter", "postFilter", "preScore", "score", "reserve",
         "preBind"}
    ),
    "ImageLocality": frozenset({"score"}),
    "InterPodAffinity": frozenset({"preFilter", "filter", "preScore", "score"}),
    "NodeAffinity": frozenset({"preFilter", "filter", "preScore", "score"}),
    "NodeName": frozenset({"filter"}),
    "NodePorts": frozenset({"preFilter", "filter"}),
    "NodeResourcesBalancedAllocation": frozenset({"preScore", "score"}),
    "NodeResourcesFit": frozenset({"preFilter", "filter", "preScore", "score"}),
    "NodeUnschedulable": frozenset({"filter"}),
    "NodeVolumeLimits": frozenset({"preFilter", "filter"}),
    "PodTopologySpread": frozenset({"preFilter", "filter", "preScore", "score"}),
    "SchedulingGates": frozenset({"preEnqueue"}),
    "TaintToleration": frozenset({"filter", "preScore", "score"}),
    "VolumeBinding": frozenset({"preFilter", "filter", "reserve", "preBind", "preScore", "score"}),
    "VolumeRestrictions": frozenset({"preFilter", "filter"}),
    "VolumeZone": frozenset({"preFilter", "filter"}),
}

#: Removed from kubescheduler.config.k8s.io/v1 (validation.go invalidPluginsByVersion).
REMOVED_PLUGINS = frozenset({"AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits"})

#: Registered by the scheduler-plugins image (cmd/scheduler/main.go). Extension points are
#: listed for the plugins gputopo configures; ``None`` means "not checked".
SCHEDULER_PLUGINS: Mapping[str, frozenset[str] | None] = {
    # pkg/coscheduling/coscheduling.go: QueueSort, PreFilter, PostFilter, Permit, Reserve
    "Coscheduling": frozenset({"queueSort", "preFilter", "postFilter", "permit", "reserve"}),
    "CapacityScheduling": None,
    "LoadVariationRiskBalancing": None,
    "LowRiskOverCommitment": None,
    "NetworkOverhead": None,
    "NodeResourcesAllocatable": None,
    "NodeResourceTopologyMatch": None,
    "NodeResourcesFitPlus": None,
    "Peaks": None,
    "PodState": None,
    "PreemptionToleration": None,
    "QOSSort": None,
    "ScarceResourceAvoidance": None,
    "SySched": None,
    "TargetLoadPacking": None,
    "TopologicalSort": None,
}

KNOWN_PLUGINS: Mapping[str, frozenset[str] | None] = {**IN_TREE_PLUGINS, **SCHEDULER_PLUGINS}

# --- args: field name -> expected JSON type ----------------------------------------------
_INT, _BOOL, _STR, _LIST, _OBJ = "integer", "boolean", "string", "list", "object"

PLUGIN_ARGS_FIELDS: Mapping[str, Mapping[str, str]] = {
    # scheduler-plugins apis/config/v1/types.go
    "Coscheduling": {"permitWaitingTimeSeconds": _INT, "podGroupBackoffSeconds": _INT},
    # kube-scheduler config/v1/types_pluginargs.go
    "NodeResourcesFit": {
        "ignoredResources": _LIST,
        "ignoredResourceGroups": _LIST,
        "scoringStrategy": _OBJ,
    },
    "NodeResourcesBalancedAllocation": {"resources": _LIST},
    "PodTopologySpread": {"defaultConstraints": _LIST, "defaultingType": _STR},
    "DefaultPreemption": {"minCandidateNodesPercentage": _INT, "minCandidateNodesAbsolute": _INT},
    "InterPodAffinity": {
        "hardPodAffinityWeight": _INT,
        "ignorePreferredTermsOfExistingPods": _BOOL,
    },
    "NodeAffinity": {"addedAffinity": _OBJ},
    "VolumeBinding": {"bindTimeoutSeconds": _INT},
}
SCORING_STRATEGY_FIELDS = frozenset({"type", "resources", "requestedToCapacityRatio"})
SCORING_STRATEGY_TYPES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
RESOURCE_SPEC_FIELDS = frozenset({"name", "weight"})

#: Resource weights in NodeResourcesFit's scoring strategy: (0, 100] (validateResources).
RESOURCE_WEIGHT_RANGE = (1, 100)
#: Score plugin weights. Upstream only forbids overflow and treats 0 as 1; gputopo keeps
#: them in the same range as resource weights so no single scorer can swamp the others.
PLUGIN_WEIGHT_RANGE = (1, 100)

_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def is_extended_resource_name(name: str) -> bool:
    """True for a valid extended resource like ``aliyun.com/gpu`` (core/v1/helper rules).

    Extended resources are domain-prefixed qualified names outside ``kubernetes.io/``
    and not ``requests.``-prefixed.
    """
    if "/" not in name or not _QUALIFIED_NAME.match(name) or len(name.split("/", 1)[0]) > 253:
        return False
    domain = name.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return False
    return not name.startswith("requests.")


def is_resource_name(name: str) -> bool:
    """A native (``cpu``, ``memory``, ...) or extended resource name."""
    return name in {"cpu", "memory", "ephemeral-storage"} or is_extended_resource_name(name)


def validate_config(doc: Any) -> list[str]:
    """All the reasons kube-scheduler would refuse ``doc``, as ``path: message`` lines.

    An empty list means every rule listed in this module's docstring holds.
    """
    errs: list[str] = []
    if not isinstance(doc, dict):
        return ["<root>: a KubeSchedulerConfiguration must be a mapping"]
    if doc.get("apiVersion") not in API_VERSIONS:
        errs.append(f"apiVersion: must be one of {', '.join(API_VERSIONS)}")
    if doc.get("kind") != KIND:
        errs.append(f"kind: must be {KIND}")
    errs += _unknown(doc, CONFIG_FIELDS, "")
    errs += _check_top_level(doc)
    profiles = doc.get("profiles") or []
    if not isinstance(profiles, list):
        return [*errs, "profiles: must be a list"]
    names: dict[str, int] = {}
    for i, profile in enumerate(profiles):
        path = f"profiles[{i}]"
        if not isinstance(profile, dict):
            errs.append(f"{path}: must be a mapping")
            continue
        errs += _check_profile(profile, path)
        name = profile.get("schedulerName")
        if isinstance(name, str) and name in names:
            errs.append(f"{path}.schedulerName: duplicate of profiles[{names[name]}].schedulerName")
        elif isinstance(name, str):
            names[name] = i
    errs += _check_common_queue_sort([p for p in profiles if isinstance(p, dict)])
    return errs


def _unknown(obj: dict, allowed: frozenset[str], path: str) -> list[str]:
    prefix = f"{path}." if path else ""
    return [f"{prefix}{k}: unknown field (strict decoding)" for k in obj if k not in allowed]


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_top_level(doc: dict) -> list[str]:
    errs: list[str] = []
    if "parallelism" in doc and (not _int(doc["parallelism"]) or doc["parallelism"] <= 0):
        errs.append("parallelism: should be an integer value greater than zero")
    errs += _check_percentage(doc, "percentageOfNodesToScore", "percentageOfNodesToScore")
    initial = doc.get("podInitialBackoffSeconds", 1)
    maximum = doc.get("podMaxBackoffSeconds", 10)
    if not _int(initial) or initial <= 0:
        errs.append("podInitialBackoffSeconds: must be greater than 0")
    elif not _int(maximum) or maximum < initial:
        errs.append(
            "podMaxBackoffSeconds: must be greater than or equal to PodInitialBackoffSeconds"
        )
    le = doc.get("leaderElection")
    if le is not None:
        if not isinstance(le, dict):
            errs.append("leaderElection: must be a mapping")
        else:
            errs += _unknown(le, LEADER_ELECTION_FIELDS, "leaderElection")
            if le.get("leaderElect", True) and le.get("resourceLock", "leases") != "leases":
                errs.append('leaderElection.resourceLock: resourceLock value must be "leases"')
    cc = doc.get("clientConnection")
    if cc is not None:
        if not isinstance(cc, dict):
            errs.append("clientConnection: must be a mapping")
        else:
            errs += _unknown(cc, CLIENT_CONNECTION_FIELDS, "clientConnection")
    return errs


def _check_percentage(obj: dict, key: str, path: str) -> list[str]:
    if key not in obj:
        return []
    value = obj[key]
    if not _int(value) or not 0 <= value <= 100:
        return [f"{path}: not in valid range [0-100]"]
    return []


def _check_profile(profile: dict, path: str) -> list[str]:
    errs = _unknown(profile, PROFILE_FIELDS, path)
    name = profile.get("schedulerName")
    if not isinstance(name, str) or not name:
        errs.append(f"{path}.schedulerName: Required value")
    errs += _check_percentage(
        profile, "percentageOfNodesToScore", f"{path}.percentageOfNodesToScore"
    )
    plugins = profile.get("plugins")
    if plugins is not None:
        if not isinstance(plugins, dict):
            errs.append(f"{path}.plugins: must be a mapping")
        else:
            errs += _check_plugins(plugins, f"{path}.plugins")
    errs += _check_plugin_config(profile.get("pluginConfig"), f"{path}.pluginConfig")
    return errs


def _check_plugins(plugins: dict, path: str) -> list[str]:
    errs: list[str] = []
    for point, pset in plugins.items():
        ppath = f"{path}.{point}"
        if point not in EXTENSION_POINTS:
            errs.append(f"{ppath}: unknown extension point (strict decoding)")
            continue
        if not isinstance(pset, dict):
            errs.append(f"{ppath}: must be a mapping with enabled/disabled")
            continue
        errs += _unknown(pset, PLUGIN_SET_FIELDS, ppath)
        for key in ("enabled", "disabled"):
            entries = pset.get(key) or []
            if not isinstance(entries, list):
                errs.append(f"{ppath}.{key}: must be a list")
                continue
            for j, plugin in enumerate(entries):
                errs += _check_plugin(plugin, point, key, f"{ppath}.{key}[{j}]")
        enabled = pset.get("enabled") or []
        if point == "queueSort" and isinstance(enabled, list) and len(enabled) > 1:
            errs.append(f"{ppath}.enabled: only one queue sort plugin can be enabled")
    return errs


def _check_plugin(plugin: Any, point: str, key: str, path: str) -> list[str]:
    if not isinstance(plugin, dict) or not isinstance(plugin.get("name"), str):
        return [f"{path}: must be a mapping with a name"]
    errs = _unknown(plugin, PLUGIN_FIELDS, path)
    name = plugin["name"]
    if name == "*":
        if key == "enabled":
            errs.append(f'{path}.name: "*" can only disable plugins')
    elif name in REMOVED_PLUGINS:
        errs.append(f"{path}.name: {name} was removed in kubescheduler.config.k8s.io/v1")
    elif name not in KNOWN_PLUGINS:
        errs.append(f"{path}.name: {name} is not a plugin of kube-scheduler or scheduler-plugins")
    elif key == "enabled" and point != "multiPoint":
        points = KNOWN_PLUGINS[name]
        if points is not None and point not in points:
            errs.append(f"{path}.name: plugin {name} does not extend the {point} extension point")
    if "weight" in plugin:
        weight = plugin["weight"]
        low, high = PLUGIN_WEIGHT_RANGE
        if point not in ("score", "multiPoint"):
            errs.append(f"{path}.weight: only score plugins take a weight")
        elif not _int(weight) or not low <= weight <= high:
            errs.append(f"{path}.weight: not in valid range [{low}, {high}]")
    return errs


def _check_plugin_config(configs: Any, path: str) -> list[str]:
    if configs is None:
        return []
    if not isinstance(configs, list):
        return [f"{path}: must be a list"]
    errs: list[str] = []
    seen: set[str] = set()
    for i, cfg in enumerate(configs):
        cpath = f"{path}[{i}]"
        if not isinstance(cfg, dict) or not isinstance(cfg.get("name"), str):
            errs.append(f"{cpath}: must be a mapping with a name")
            continue
        errs += _unknown(cfg, PLUGIN_CONFIG_FIELDS, cpath)
        name = cfg["name"]
        if name in seen:
            errs.append(f"{cpath}: Duplicate value: {name!r}")
        seen.add(name)
        if name in REMOVED_PLUGINS:
            errs.append(f"{cpath}: {name} was removed in kubescheduler.config.k8s.io/v1")
            continue
        if name not in KNOWN_PLUGINS:
            errs.append(
                f"{cpath}.name: {name} is not a plugin of kube-scheduler or scheduler-plugins"
            )
            continue
        args = cfg.get("args")
        if args is None:
            continue
        if not isinstance(args, dict):
            errs.append(f"{cpath}.args: must be a mapping")
            continue
        errs += _check_args(name, args, f"{cpath}.args")
    return errs


_JSON_TYPES = {_INT: _int, _BOOL: lambda v: isinstance(v, bool), _STR: lambda v: isinstance(v, str),
               _LIST: lambda v: isinstance(v, list), _OBJ: lambda v: isinstance(v, dict)}


def _check_args(name: str, args: dict, path: str) -> list[str]:
    fields = PLUGIN_ARGS_FIELDS.get(name)
    if fields is None:
        return []  # a plugin gputopo never configures: its args are not modelled here
    errs: list[str] = []
    for key, value in args.items():
        if key in ("apiVersion", "kind"):
            continue
        if key not in fields:
            errs.append(f"{path}.{key}: unknown field of {name}Args (strict decoding)")
        elif not _JSON_TYPES[fields[key]](value):
            errs.append(f"{path}.{key}: must be of type {fields[key]}")
    if errs:
        return errs
    checker = _ARGS_CHECKS.get(name)
    return checker(args, path) if checker else []


def _coscheduling(args: dict, path: str) -> list[str]:
    return [
        f"{path}.{key}: must be greater than 0"
        for key in ("permitWaitingTimeSeconds", "podGroupBackoffSeconds")
        if args.get(key, 0) < 0
    ]


def _node_resources_fit(args: dict, path: str) -> list[str]:
    errs: list[str] = []
    for key in ("ignoredResources", "ignoredResourceGroups"):
        for i, res in enumerate(args.get(key, [])):
            if not isinstance(res, str) or not _QUALIFIED_NAME.match(res):
                errs.append(f"{path}.{key}[{i}]: not a valid label name")
            elif key == "ignoredResourceGroups" and "/" in res:
                errs.append(f"{path}.{key}[{i}]: resource group name can't contain '/'")
    strategy = args.get("scoringStrategy")
    spath = f"{path}.scoringStrategy"
    if strategy is None:
        return [*errs, f"{spath}: ScoringStrategy field is required"]
    errs += _unknown(strategy, SCORING_STRATEGY_FIELDS, spath)
    stype = strategy.get("type")
    if stype not in SCORING_STRATEGY_TYPES:
        errs.append(f"{spath}.type: Unsupported value {stype!r}: "
                    f"supported values: {', '.join(SCORING_STRATEGY_TYPES)}")
    if stype == "RequestedToCapacityRatio" and "requestedToCapacityRatio" not in strategy:
        errs.append(f"{spath}.requestedToCapacityRatio: must be specified when type is "
                    "RequestedToCapacityRatio")
    elif stype != "RequestedToCapacityRatio" and "requestedToCapacityRatio" in strategy:
        errs.append(f"{spath}.requestedToCapacityRatio: must be nil when type is not "
                    "RequestedToCapacityRatio")
    errs += _resources(
        strategy.get("resources", []), f"{spath}.resources", weights=RESOURCE_WEIGHT_RANGE
    )
    return errs


def _resources(resources: Any, path: str, *, weights: tuple[int, int]) -> list[str]:
    if not isinstance(resources, list):
        return [f"{path}: must be a list"]
    errs: list[str] = []
    seen: set[str] = set()
    low, high = weights
    for i, res in enumerate(resources):
        rpath = f"{path}[{i}]"
        if not isinstance(res, dict) or not isinstance(res.get("name"), str):
            errs.append(f"{rpath}: must be a mapping with a name")
            continue
        errs += _unknown(res, RESOURCE_SPEC_FIELDS, rpath)
        if res["name"] in seen:
            errs.append(f"{rpath}.name: Duplicate value: {res['name']!r}")
        seen.add(res["name"])
        weight = res.get("weight", 1)
        if not _int(weight) or not low <= weight <= high:
            span = f"must be {low}" if low == high else f"not in valid range ({low - 1}, {high}]"
            errs.append(f"{rpath}.weight: resource weight of {res['name']} {span}")
    return errs


def _balanced_allocation(args: dict, path: str) -> list[str]:
    return _resources(args.get("resources", []), f"{path}.resources", weights=(1, 1))


def _pod_topology_spread(args: dict, path: str) -> list[str]:
    dtype = args.get("defaultingType", "System")
    if dtype not in ("System", "List"):
        return [
            f"{path}.defaultingType: Unsupported value {dtype!r}: supported values: List, System"
        ]
    if dtype == "System" and args.get("defaultConstraints"):
        return [f"{path}.defaultingType: Invalid value when .defaultConstraints are not empty"]
    return []


def _default_preemption(args: dict, path: str) -> list[str]:
    errs: list[str] = []
    pct = args.get("minCandidateNodesPercentage", 10)
    absolute = args.get("minCandidateNodesAbsolute", 100)
    if not 0 <= pct <= 100:
        errs.append(f"{path}.minCandidateNodesPercentage: not in valid range [0, 100]")
    if absolute < 0:
        errs.append(f"{path}.minCandidateNodesAbsolute: not in valid range [0, inf)")
    if pct == 0 and absolute == 0:
        errs.append(f"{path}: minCandidateNodesPercentage and minCandidateNodesAbsolute "
                    "cannot both be zero")
    return errs


def _inter_pod_affinity(args: dict, path: str) -> list[str]:
    if not 0 <= args.get("hardPodAffinityWeight", 1) <= 100:
        return [f"{path}.hardPodAffinityWeight: not in valid range [0, 100]"]
    return []


def _volume_binding(args: dict, path: str) -> list[str]:
    if args.get("bindTimeoutSeconds", 600) < 0:
        return [f"{path}.bindTimeoutSeconds: invalid BindTimeoutSeconds, should not be negative"]
    return []


_ARGS_CHECKS = {
    "Coscheduling": _coscheduling,
    "NodeResourcesFit": _node_resources_fit,
    "NodeResourcesBalancedAllocation": _balanced_allocation,
    "PodTopologySpread": _pod_topology_spread,
    "DefaultPreemption": _default_preemption,
    "InterPodAffinity": _inter_pod_affinity,
    "VolumeBinding": _volume_binding,
}


def queue_sort_of(profile: dict) -> Any:
    """The profile's queueSort plugin set as kube-scheduler compares it (absent == empty)."""
    plugins = profile.get("plugins")
    pset = plugins.get("queueSort") if isinstance(plugins, dict) else None
    pset = pset if isinstance(pset, dict) else {}  # a malformed set is reported elsewhere
    return {"enabled": pset.get("enabled") or [], "disabled": pset.get("disabled") or []}


def plugin_args(profile: dict, name: str) -> Any:
    """The args a profile gives plugin ``name`` (None when it gives none)."""
    configs = profile.get("pluginConfig")
    for cfg in configs if isinstance(configs, list) else []:
        if isinstance(cfg, dict) and cfg.get("name") == name:
            return cfg.get("args")
    return None


def _check_common_queue_sort(profiles: list[dict]) -> list[str]:
    """validateCommonQueueSort: every profile has the first profile's queueSort and args."""
    if len(profiles) < 2:
        return []
    errs: list[str] = []
    canon = queue_sort_of(profiles[0])
    enabled = canon["enabled"]
    first = enabled[0] if isinstance(enabled, list) and enabled else None
    sort_name = first.get("name") if isinstance(first, dict) else None
    canon_args = plugin_args(profiles[0], sort_name) if sort_name else None
    for i, profile in enumerate(profiles[1:], start=1):
        if queue_sort_of(profile) != canon:
            errs.append(f"profiles[{i}].plugins.queueSort: must be the same for all profiles")
        configs = profile.get("pluginConfig")
        if sort_name and any(
            isinstance(c, dict) and c.get("name") == sort_name
            for c in (configs if isinstance(configs, list) else [])
        ) and plugin_args(profile, sort_name) != canon_args:
            errs.append(f"profiles[{i}].pluginConfig.args: queueSort must be the same for all "
                        "profiles")
    return errs
