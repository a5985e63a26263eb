"""YAML document → :class:`Policy`, reporting every problem at once.

Why all errors at once, each with file and field path: a policy author fixing one typo per
reload cycle (or per failed rollout) loses an afternoon; scheduler-plugins' args validation
returns a field.ErrorList for the same reason. Unknown fields are errors too: a misspelt
``hostNetwrok`` silently ignored would be a policy that quietly does nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from gputopo.errors import PolicyError
from gputopo.placement.waiting import (
    AFTER_MAX_WAIT,
    DEFAULT_AFTER_MAX_WAIT,
    DEFAULT_FLOOR_SHARE,
    DEFAULT_MIN_SHARE,
    WaitingRule,
)
from gputopo.quantity import gpu_memory_mib, parse_quantity
from gputopo.topology.transport import (
    TRANSPORT_EFFICIENCY,
    TRANSPORT_ORDER,
    TransportShares,
    order_problem,
)
from webhook.policy import schema as s

log = logging.getLogger(__name__)

_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
#: a DNS-1123 subdomain (what a TrainingRuntime's name is), at most 253 characters
_RUNTIME_NAME = re.compile(
    r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
#: core/v1 SecurityContext (container) fields and, for the scalar ones, their JSON type.
_SECURITY_CONTEXT: dict[str, type | None] = {
    "allowPrivilegeEscalation": bool, "privileged": bool, "readOnlyRootFilesystem": bool,
    "runAsNonRoot": bool, "runAsUser": int, "runAsGroup": int, "procMount": str,
    "capabilities": dict, "seLinuxOptions": dict, "seccompProfile": dict,
    "appArmorProfile": dict, "windowsOptions": dict,
}


class _Errors:
    """Collects (path, reason) for one file."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[PolicyError] = []

    def add(self, path: str, reason: str) -> None:
        self.items.append(PolicyError(reason, file=self.source, obj=path))


def _keys(raw: Mapping[str, Any], allowed: tuple[str, ...], path: str, err: _Errors) -> None:
    for key in raw:
        if key not in allowed:
            err.add(f"{path}.{key}" if path else str(key),
                    f"unknown field (allowed: {', '.join(allowed)})")


def _mapping(raw: Any, path: str, err: _Errors) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        err.add(path, "must be a mapping")
        return {}
    return raw


def _bool(raw: Any, path: str, err: _Errors, default: bool | None) -> bool | None:
    if raw is None:
        return default
    if not isinstance(raw, bool):
        err.add(path, f"must be true or false, got {raw!r}")
        return default
    return raw


def _choice(raw: Any, path: str, err: _Errors, choices: tuple[str, ...], default: Any) -> Any:
    if raw is None:
        return default
    if raw not in choices:
        err.add(path, f"must be one of {', '.join(choices)}; got {raw!r}")
        return default
    return raw


def _labels(raw: Any, path: str, err: _Errors) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in _mapping(raw, path, err).items():
        if not isinstance(key, str) or not _QUALIFIED.match(key):
            err.add(f"{path}.{key}", "not a valid label key")
        elif not isinstance(value, str) or not _LABEL_VALUE.match(value) or len(value) > 63:
            err.add(f"{path}.{key}", f"label value must be a string of at most 63 "
                    f"alphanumerics, '-', '_' or '.'; got {value!r}")
        else:
            out[key] = value
    return out


def _list(raw: Any, path: str, err: _Errors) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        err.add(path, "must be a list")
        return []
    return raw


def _match(raw: Any, err: _Errors) -> s.Match:
    path = "spec.match"
    m = _mapping(raw, path, err)
    _keys(m, ("namespaceLabels", "owners", "roles", "podLabels", "jobLabels", "runtimes"),
          path, err)
    owners: list[s.OwnerKind] = []
    for i, o in enumerate(_list(m.get("owners"), f"{path}.owners", err)):
        where = f"{path}.owners[{i}]"
        if not isinstance(o, Mapping):
            err.add(where, "must be a mapping with apiVersion and kind")
            continue
        _keys(o, ("apiVersion", "kind"), where, err)
        key = (o.get("apiVersion"), o.get("kind"))
        if key not in s.OWNER_KINDS:
            known = ", ".join(f"{a} {k}" for a, k in s.OWNER_KINDS)
            err.add(where, f"unsupported owner {key[0]} {key[1]} (supported: {known})")
            continue
        owners.append(s.OwnerKind(str(key[0]), str(key[1])))
    if m.get("owners") == []:
        err.add(f"{path}.owners", "must name at least one owner kind (omit it for all)")
    roles: list[str] = []
    for i, r in enumerate(_list(m.get("roles"), f"{path}.roles", err)):
        if r not in s.ROLES:
            err.add(f"{path}.roles[{i}]", f"must be one of {', '.join(s.ROLES)}; got {r!r}")
        else:
            roles.append(r)
    runtimes: list[str] = []
    for i, r in enumerate(_list(m.get("runtimes"), f"{path}.runtimes", err)):
        if not isinstance(r, str) or not _RUNTIME_NAME.fullmatch(r):
            err.add(f"{path}.runtimes[{i}]", f"must be a TrainingRuntime name (lower-case "
                    f"alphanumerics, '-' and '.', at most 253); got {r!r}")
        else:
            runtimes.append(r)
    if m.get("runtimes") == []:
        err.add(f"{path}.runtimes", "must name at least one runtime (omit it for any)")
    default = s.Match()
    return s.Match(
        namespace_labels=_labels(m.get("namespaceLabels"), f"{path}.namespaceLabels", err),
        owners=tuple(owners) if owners else default.owners,
        roles=tuple(roles),
        pod_labels=_labels(m.get("podLabels"), f"{path}.podLabels", err),
        job_labels=_labels(m.get("jobLabels"), f"{path}.jobLabels", err),
        runtimes=tuple(runtimes),
    )


def _scaled(raw: Any, path: str, err: _Errors) -> s.ScaledQuantity | None:
    """A quantity string, or {base: Q, perGPU: Q} meaning base + perGPU x GPUs."""
    if isinstance(raw, Mapping):
        _keys(raw, ("base", "perGPU"), path, err)
        parts = {}
        for key in ("base", "perGPU"):
            try:
                parts[key] = parse_quantity(raw.get(key, 0))
            except ValueError:
                err.add(f"{path}.{key}", f"not a quantity: {raw.get(key)!r}")
                return None
            if parts[key] < 0:
                err.add(f"{path}.{key}", "must not be negative")
                return None
        return s.ScaledQuantity(base=parts["base"], per_gpu=parts["perGPU"])
    try:
        value = parse_quantity(raw)
    except ValueError:
        err.add(path, f"must be a quantity or {{base, perGPU}}; got {raw!r}")
        return None
    if value < 0:
        err.add(path, "must not be negative")
        return None
    return s.ScaledQuantity(base=value)


def _quantities(raw: Any, path: str, err: _Errors) -> dict[str, s.ScaledQuantity]:
    out: dict[str, s.ScaledQuantity] = {}
    for name, value in _mapping(raw, path, err).items():
        if not isinstance(name, str) or not _QUALIFIED.match(name):
            err.add(f"{path}.{name}", "not a valid resource name")
            continue
        q = _scaled(value, f"{path}.{name}", err)
        if q is not None:
            out[name] = q
    return out


def _named_items(raw: Any, path: str, err: _Errors, *, required: tuple[str, ...],
                 check: Callable[[Mapping[str, Any], str], None] | None = None,
                 ) -> tuple[dict[str, Any], ...]:
    out: list[dict[str, Any]] = []
    for i, item in enumerate(_list(raw, path, err)):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            err.add(where, "must be a mapping")
            continue
        missing = [k for k in required if not isinstance(item.get(k), str) or not item.get(k)]
        for k in missing:
            err.add(f"{where}.{k}", "required (a non-empty string)")
        if check is not None:
            check(item, where)
        if not missing:
            out.append(dict(item))
    return tuple(out)


def _mutations(raw: Any, err: _Errors) -> s.Mutations:
    path = "spec.mutations"
    m = _mapping(raw, path, err)
    allowed = ("renameResources", "hostNetwork", "hostIPC", "hostPID", "dnsPolicy",
               "gangLabels", "schedulerName", "volumes", "volumeMounts", "securityContext",
               "resources")
    _keys(m, allowed, path, err)
    default = s.Mutations()
    rename = dict(default.rename_resources)
    if "renameResources" in m:
        rename = {}
        for src, dst in _mapping(m.get("renameResources"), f"{path}.renameResources",
                                 err).items():
            if not all(isinstance(x, str) and _QUALIFIED.match(x) for x in (src, dst)):
                err.add(f"{path}.renameResources.{src}", "both names must be resource names")
            elif src == dst:
                err.add(f"{path}.renameResources.{src}", "renames a resource to itself")
            else:
                rename[src] = dst
        if set(rename) & set(rename.values()):
            err.add(f"{path}.renameResources", "a name is both renamed and a rename target")

    def volume_check(item: Mapping[str, Any], where: str) -> None:
        if len(item) != 2:
            err.add(where, "a volume needs exactly one source (hostPath, emptyDir, ...)")
        host = item.get("hostPath")
        if host is not None and not (isinstance(host, Mapping) and isinstance(
                host.get("path"), str) and host["path"].startswith("/")):
            err.add(f"{where}.hostPath.path", "must be an absolute path")

    volumes = _named_items(m.get("volumes"), f"{path}.volumes", err, required=("name",),
                           check=volume_check)
    mounts = _named_items(m.get("volumeMounts"), f"{path}.volumeMounts", err,
                          required=("name", "mountPath"))
    known = {v["name"] for v in volumes}
    for i, mount in enumerate(mounts):
        if mount["name"] not in known:
            err.add(f"{path}.volumeMounts[{i}].name",
                    f"no volume {mount['name']!r} among this policy's volumes")
    dns = m.get("dnsPolicy")
    if dns is not None and dns not in _DNS_POLICIES:
        err.add(f"{path}.dnsPolicy", f"must be one of {', '.join(_DNS_POLICIES)}; got {dns!r}")
        dns = None
    sched = m.get("schedulerName", default.scheduler_name)
    if sched is not None and (not isinstance(sched, str) or (sched and not
                                                            _DNS1123.match(sched))):
        err.add(f"{path}.schedulerName", f"must be a DNS-1123 name or empty; got {sched!r}")
        sched = default.scheduler_name
    res = _mapping(m.get("resources"), f"{path}.resources", err)
    _keys(res, ("requests", "limits"), f"{path}.resources", err)
    sec = _mapping(m.get("securityContext"), f"{path}.securityContext", err)
    _keys(sec, tuple(_SECURITY_CONTEXT), f"{path}.securityContext", err)
    for key, value in sec.items():
        kind = _SECURITY_CONTEXT.get(key)
        if kind is not None and (not isinstance(value, kind) or (
                kind is int and isinstance(value, bool))):
            err.add(f"{path}.securityContext.{key}", f"has the wrong type ({value!r})")
    return s.Mutations(
        rename_resources=rename,
        host_network=_bool(m.get("hostNetwork"), f"{path}.hostNetwork", err, None),
        host_ipc=_bool(m.get("hostIPC"), f"{path}.hostIPC", err, None),
        host_pid=_bool(m.get("hostPID"), f"{path}.hostPID", err, None),
        dns_policy=dns,
        gang_labels=bool(_bool(m.get("gangLabels"), f"{path}.gangLabels", err, True)),
        scheduler_name=sched or None,
        volumes=volumes,
        volume_mounts=mounts,
        security_context=dict(sec),
        requests=_quantities(res.get("requests"), f"{path}.resources.requests", err),
        limits=_quantities(res.get("limits"), f"{path}.resources.limits", err),
    )


def _placement(raw: Any, err: _Errors) -> s.PlacementSettings:
    path = "spec.placement"
    p = _mapping(raw, path, err)
    _keys(p, ("enabled", "whenFull", "maxWaitSeconds", "podGroup", "onUnplaceable",
              "network", "hostPorts", "gpuEnv", "transportShare", "computeDomain", "minShare",
              "afterMaxWait", "floorShare", "computeShare", "mixGpuModels", "minGpuMemory",
              "gpuDeviceClasses"), path, err)
    when_full = _choice(p.get("whenFull"), f"{path}.whenFull", err, ("wait", "admit", "deny"),
                        None)
    old = _choice(p.get("onUnplaceable"), f"{path}.onUnplaceable", err, ("admit", "deny"),
                  None)
    if old is not None:
        if p.get("whenFull") is not None:
            err.add(f"{path}.onUnplaceable", "deprecated alias of whenFull; set only whenFull")
        else:
            log.warning("%s: spec.placement.onUnplaceable is deprecated; use whenFull: %s "
                        "(wait | admit | deny)", err.source, old)
            when_full = old
    wait = p.get("maxWaitSeconds", s.DEFAULT_MAX_WAIT_SECONDS)
    if isinstance(wait, bool) or not isinstance(wait, int) or not 0 < wait <= 604_800:
        err.add(f"{path}.maxWaitSeconds", f"must be an integer from 1 to 604800 (a week); "
                f"got {wait!r}")
        wait = s.DEFAULT_MAX_WAIT_SECONDS
    return s.PlacementSettings(
        enabled=bool(_bool(p.get("enabled"), f"{path}.enabled", err, True)),
        when_full=when_full or "wait",
        max_wait_seconds=wait,
        pod_group=_choice(p.get("podGroup"), f"{path}.podGroup", err,
                          ("create", "require", "off"), "create"),
        network=_choice(p.get("network"), f"{path}.network", err, ("auto", "host", "pod"),
                        "auto"),
        host_ports=_port_range(p.get("hostPorts"), f"{path}.hostPorts", err),
        gpu_env=_choice(p.get("gpuEnv"), f"{path}.gpuEnv", err, ("pod", "plugin"), "pod"),
        transport_share=_transport_share(p.get("transportShare"), f"{path}.transportShare",
                                         err),
        compute_domain=_choice(p.get("computeDomain"), f"{path}.computeDomain", err,
                               ("create", "off"), "off"),
        waiting=_waiting_rule(p, path, err),
        compute_share=_compute_share(p.get("computeShare"), f"{path}.computeShare", err),
        mix_gpu_models=bool(_bool(p.get("mixGpuModels"), f"{path}.mixGpuModels", err,
                                  False)),
        min_gpu_memory_mib=_gpu_memory(p.get("minGpuMemory"), f"{path}.minGpuMemory", err),
        gpu_device_classes=_device_classes(p.get("gpuDeviceClasses"),
                                           f"{path}.gpuDeviceClasses", err),
    )


def _compute_share(raw: Any, path: str, err: _Errors) -> float | None:
    """``computeShare``: a number from 0 to 1 (gputopo.placement.throughput)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw <= 1:
        err.add(path, f"must be a number from 0 to 1 (the share of a job's step spent "
                      f"computing); got {raw!r}")
        return None
    return float(raw)


def _gpu_memory(raw: Any, path: str, err: _Errors) -> int | None:
    """``minGpuMemory``: a quantity ("40Gi") or MiB (40960), above 0."""
    if raw is None:
        return None
    try:
        return gpu_memory_mib(raw)
    except ValueError:
        err.add(path, f"must be a memory size per GPU: a quantity such as 40Gi, or MiB as "
                      f"nvidia.com/gpu.memory writes it; got {raw!r}")
        return None


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _device_classes(raw: Any, path: str, err: _Errors) -> tuple[str, ...]:
    """DeviceClass names (DNS subdomains, at least one); absent: NVIDIA's ``gpu.nvidia.com``."""
    if raw is None:
        return s.PlacementSettings().gpu_device_classes
    items = _list(raw, path, err)
    out = []
    for k, item in enumerate(items):
        if not isinstance(item, str) or len(item) > 253 or not _DNS_SUBDOMAIN.fullmatch(item):
            err.add(f"{path}[{k}]", f"must be a DeviceClass name (a DNS subdomain); got "
                    f"{item!r}")
        else:
            out.append(item)
    if isinstance(raw, list) and not raw:
        err.add(path, "must name at least one DeviceClass (leave it out for gpu.nvidia.com)")
    return tuple(dict.fromkeys(out)) or s.PlacementSettings().gpu_device_classes


def _waiting_rule(p: Mapping[str, Any], path: str, err: _Errors) -> WaitingRule:
    """``minShare`` and ``floorShare``: shares of the gang's best bus bandwidth, from 0 to
    1, a floor set no higher than ``minShare``; ``afterMaxWait``: takeBest | keepWaiting |
    deny (gputopo.placement.waiting)."""
    def share(key: str, default: float) -> float:
        v = p.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
            err.add(f"{path}.{key}", f"must be a number from 0 to 1 (a share of the gang's "
                    f"best predicted bus bandwidth); got {v!r}")
            return default
        return float(v)

    low, high = share("floorShare", DEFAULT_FLOOR_SHARE), share("minShare", DEFAULT_MIN_SHARE)
    if low > high and "floorShare" in p:  # the default floor merely follows minShare down
        err.add(f"{path}.floorShare", f"must not exceed minShare ({high:g}); got {low:g}")
    return WaitingRule(
        min_share=high, floor_share=min(low, high),
        after_max_wait=_choice(p.get("afterMaxWait"), f"{path}.afterMaxWait", err,
                               AFTER_MAX_WAIT, DEFAULT_AFTER_MAX_WAIT))


def _transport_share(raw: Any, path: str, err: _Errors) -> TransportShares:
    """``{tcp: 0.3, rdma: 0.6, gdr: 0.95}``: known transports only, each share in (0, 1],
    and together with the defaults for the transports left out never ranking a faster
    transport below a slower one (gdr >= rdma >= tcp): a GPUDirect node must not look
    slower than a host-staged one."""
    table = _mapping(raw, path, err)
    out: dict[str, float] = {}
    for key, value in table.items():
        if key not in TRANSPORT_EFFICIENCY:
            err.add(f"{path}.{key}", f"unknown transport (known: {', '.join(TRANSPORT_ORDER)})")
        elif isinstance(value, bool) or not isinstance(value, int | float) or not (
                0 < value <= 1):
            err.add(f"{path}.{key}", f"must be a number greater than 0 and at most 1 (a "
                    f"share of the line rate); got {value!r}")
        else:
            out[str(key)] = float(value)
    problem = order_problem(out)
    if problem is not None:
        err.add(path, problem)
    return tuple(sorted(out.items()))


def _port_range(raw: Any, path: str, err: _Errors) -> tuple[int, int]:
    """``{first: N, last: M}``: at least 64 ports (one per GPU index of a node) within
    1024-65535 (no privileged ports: a training pod has no business binding one)."""
    if raw is None:
        return s.DEFAULT_HOST_PORTS
    r = _mapping(raw, path, err)
    _keys(r, ("first", "last"), path, err)
    first, last = r.get("first"), r.get("last")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (first, last)):
        err.add(path, f"needs integers first and last; got {dict(r)!r}")
        return s.DEFAULT_HOST_PORTS
    assert isinstance(first, int) and isinstance(last, int)
    if not (first >= 1024 and last <= 65535 and last - first + 1 >= 64):
        err.add(path, f"must lie within 1024-65535 and hold at least 64 ports; got "
                      f"{first}-{last}")
        return s.DEFAULT_HOST_PORTS
    return first, last


def validate_document(doc: Any, *, source: str) -> tuple[s.Policy | None, list[PolicyError]]:
    """The policy a document describes, or None, with every error found (file + path)."""
    err = _Errors(source)
    if not isinstance(doc, Mapping):
        err.add("(document)", "a policy document must be a mapping")
        return None, err.items
    _keys(doc, ("apiVersion", "kind", "metadata", "spec"), "", err)
    if doc.get("apiVersion") != s.API_VERSION:
        err.add("apiVersion", f"must be {s.API_VERSION!r}; got {doc.get('apiVersion')!r}")
    if doc.get("kind") != s.KIND:
        err.add("kind", f"must be {s.KIND!r}; got {doc.get('kind')!r}")
    meta = _mapping(doc.get("metadata"), "metadata", err)
    name = meta.get("name")
    if not isinstance(name, str) or not _DNS1123.match(name) or len(name) > 63:
        err.add("metadata.name", f"required: a DNS-1123 label; got {name!r}")
    spec = _mapping(doc.get("spec"), "spec", err)
    _keys(spec, ("mode", "priority", "match", "mutations", "placement"), "spec", err)
    mode = _choice(spec.get("mode"), "spec.mode", err, ("enforce", "audit"), "enforce")
    priority = spec.get("priority", s.DEFAULT_PRIORITY)
    if isinstance(priority, bool) or not isinstance(priority, int) or not (
            0 <= priority <= 1_000_000):
        err.add("spec.priority", f"must be an integer from 0 to 1000000; got {priority!r}")
        priority = s.DEFAULT_PRIORITY
    match = _match(spec.get("match"), err)
    mutations = _mutations(spec.get("mutations"), err)
    placement = _placement(spec.get("placement"), err)
    if err.items:
        return None, err.items
    return s.Policy(name=str(name), source=source, mode=mode, priority=priority, match=match,
                    mutations=mutations, placement=placement), []
