"""One policy's mutations applied to the working copy of a pod.

Why one function per kind of change: each is reported by name (the ``kind`` label of
``gputopo_mutations_total``, the audit warnings), so a reader — and an operator looking at
metrics — can tell which part of a policy did what. Every change follows ``merge.py``'s
rule: add what is missing, keep what the user wrote, warn on disagreement.

Values the API server fills in by default are not the user's choice and are replaced:
``dnsPolicy: ClusterFirst``, ``schedulerName: default-scheduler``, and ``false`` for the
host namespaces (the API server cannot even tell an explicit ``false`` from an absent one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gputopo import names
from gputopo.quantity import format_quantity, parse_quantity
from webhook.jobs import container_gpus
from webhook.merge import contains, merge_missing, normalize_path
from webhook.policy.schema import Policy, ScaledQuantity
from webhook.steps import JobInfo

DEFAULT_DNS_POLICY = "ClusterFirst"
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass
class Result:
    """Kinds of change made (in order, no repeats) and the conflicts met."""

    kinds: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def did(self, kind: str) -> None:
        if kind not in self.kinds:
            self.kinds.append(kind)


def _dict_at(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def _containers(spec: dict[str, Any], *keys: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key in keys:
        items = spec.get(key)
        for c in items if isinstance(items, list) else []:
            if isinstance(c, dict):
                out.append((f"{key[:-1]} {c.get('name')!r}", c))
    return out


def rename_resources(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    rename = policy.mutations.rename_resources
    for where, c in _containers(spec, "containers", "initContainers"):
        res = c.get("resources")
        if not isinstance(res, dict):
            continue
        for part in ("requests", "limits"):
            values = res.get(part)
            if not isinstance(values, dict):
                continue
            for src, dst in rename.items():
                if src not in values:
                    continue
                if dst in values:
                    r.conflicts.append(f"{where}: {part} has both {src} and {dst}; left as is")
                    continue
                # rebuild to keep the key in place: a stable, readable patch
                items = [(dst if k == src else k, v) for k, v in values.items()]
                values.clear()
                values.update(items)
                r.did("rename-resources")


def host_namespaces(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    m = policy.mutations
    changed = False
    for key, want in (("hostNetwork", m.host_network), ("hostIPC", m.host_ipc),
                      ("hostPID", m.host_pid)):
        if want is None:
            continue
        have = spec.get(key)
        if have is want:
            continue
        if want is True and spec.get("hostUsers") is False:
            # the API server forbids every host namespace "when pod.Spec.HostUsers is false"
            r.conflicts.append(f"spec.hostUsers is false, which forbids {key}; {key} not set")
        elif want is True and key == "hostPID" and spec.get("shareProcessNamespace") is True:
            # the API server rejects the pair: "ShareProcessNamespace and HostPID cannot
            # both be enabled"
            r.conflicts.append("spec.shareProcessNamespace is true, which hostPID forbids; "
                               "hostPID not set")
        elif want is True and have in (None, False):
            spec[key] = True
            changed = True
        elif want is False and have is True:
            r.conflicts.append(f"spec.{key} is true (policy wants false); kept")
    if changed:
        r.did("host-namespaces")
    if spec.get("hostNetwork") is True:
        host_ports(spec, r)


def host_ports(spec: dict[str, Any], r: Result) -> None:
    """With hostNetwork every container port must name itself as hostPort.

    Why: the API server validates ``hostPort == containerPort`` for every port of a
    hostNetwork pod, but it defaulted the ports while the pod still had no host network,
    so operator-made ports (PyTorchJob's 23456, TFJob's 2222) arrive with no hostPort and
    the pod would be rejected after our change.
    """
    changed = False
    for where, c in _containers(spec, "containers", "initContainers"):
        ports = c.get("ports")
        for port in ports if isinstance(ports, list) else []:
            if not isinstance(port, dict) or not isinstance(port.get("containerPort"), int):
                continue
            have = port.get("hostPort")
            if have in (None, 0):
                port["hostPort"] = port["containerPort"]
                changed = True
            elif have != port["containerPort"]:
                r.conflicts.append(
                    f"{where} port {port['containerPort']} has hostPort {have}, which "
                    "hostNetwork forbids (it must equal containerPort); kept"
                )
    if changed:
        r.did("host-ports")


def _set_unless_chosen(spec: dict[str, Any], key: str, want: str | None, default: str,
                       kind: str, r: Result) -> None:
    """Set ``spec[key]`` when it is absent or the API server's default; a user's own
    choice is kept, with a warning."""
    have = spec.get(key)
    if want is None or have == want:
        return
    if have in (None, "", default):
        spec[key] = want
        r.did(kind)
    else:
        r.conflicts.append(f"spec.{key} is {have!r} (policy wants {want!r}); kept")


def dns_policy(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    _set_unless_chosen(spec, "dnsPolicy", policy.mutations.dns_policy, DEFAULT_DNS_POLICY,
                       "dns-policy", r)


def scheduler_name(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    _set_unless_chosen(spec, "schedulerName", policy.mutations.scheduler_name,
                       DEFAULT_SCHEDULER, "scheduler-name", r)


def gang_labels(pod: dict[str, Any], policy: Policy, job: JobInfo, r: Result) -> None:
    if not policy.mutations.gang_labels:
        return
    if job.gang_size < 1:
        r.conflicts.append(f"{job.kind} {job.name} has no GPU replicas in its spec; "
                           "no gang labels added")
        return
    labels = _dict_at(_dict_at(pod, "metadata"), "labels")
    changed = False
    for key, value in ((names.GANG_LABEL, job.name),
                       (names.GANG_REPLICA_LABEL, str(job.gang_size)),
                       (names.POD_GROUP_LABEL, job.name)):
        have = labels.get(key)
        if have is None:
            labels[key] = value
            changed = True
        elif have != value:
            r.conflicts.append(f"label {key} is {have!r} (gputopo computed {value!r}); kept")
    if changed:
        r.did("gang-labels")


def volumes(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    if not policy.mutations.volumes:
        return
    existing = spec.get("volumes")
    if not isinstance(existing, list):
        existing = []
    by_name = {v.get("name"): v for v in existing if isinstance(v, dict)}
    for want in policy.mutations.volumes:
        have = by_name.get(want["name"])
        if have is None:
            existing.append(dict(want))
            by_name[want["name"]] = want
            spec["volumes"] = existing
            r.did("volumes")
        elif not contains(have, want):
            r.conflicts.append(f"volume {want['name']!r} differs from the policy's; kept")


def _gpu_containers(spec: dict[str, Any], policy: Policy) -> list[tuple[str, dict[str, Any]]]:
    gpus = policy.gpu_resources
    return [(w, c) for w, c in _containers(spec, "containers") if container_gpus(c, gpus) > 0]


def volume_mounts(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    if not policy.mutations.volume_mounts:
        return
    for where, c in _gpu_containers(spec, policy):
        mounts = c.get("volumeMounts")
        if not isinstance(mounts, list):
            mounts = []
        by_path = {normalize_path(str(m.get("mountPath"))): m for m in mounts
                   if isinstance(m, dict)}
        for want in policy.mutations.volume_mounts:
            have = by_path.get(normalize_path(want["mountPath"]))
            if have is None:
                mounts.append(dict(want))
                by_path[normalize_path(want["mountPath"])] = want
                c["volumeMounts"] = mounts
                r.did("volume-mounts")
            elif have.get("name") != want["name"] or not contains(
                    {**have, "mountPath": normalize_path(str(have.get("mountPath")))},
                    {**want, "mountPath": normalize_path(want["mountPath"])}):
                r.conflicts.append(
                    f"{where}: mount at {want['mountPath']} differs from the policy's; kept")


def _escalation_clash(sc: dict[str, Any]) -> bool:
    """The API server rejects ``privileged: true`` with ``allowPrivilegeEscalation: false``."""
    return sc.get("privileged") is True and sc.get("allowPrivilegeEscalation") is False


def security_context(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    want = policy.mutations.security_context
    if not want:
        return
    for where, c in _gpu_containers(spec, policy):
        conflicts: list[str] = []
        sc = c.get("securityContext")
        if not isinstance(sc, dict):
            sc = {}
        wanted = want
        present = {k: v for k, v in sc.items() if v is not None}
        if not _escalation_clash(sc) and _escalation_clash({**want, **present}):
            clash = [k for k in ("privileged", "allowPrivilegeEscalation") if k not in present]
            conflicts.append(f"securityContext.{clash[0]} not set: the API server rejects "
                             "privileged: true with allowPrivilegeEscalation: false")
            wanted = {k: v for k, v in want.items() if k not in clash}
        if merge_missing(sc, wanted, "securityContext", conflicts):
            c["securityContext"] = sc
            r.did("security-context")
        r.conflicts.extend(f"{where}: {text}; kept" for text in conflicts)


def _add_quantities(c: dict[str, Any], part: str, wanted: dict[str, ScaledQuantity],
                    gpus: int, where: str, r: Result) -> None:
    if not wanted:
        return
    res = _dict_at(c, "resources")
    values = _dict_at(res, part)
    for name, scaled in wanted.items():
        value = scaled.value(gpus)
        have = values.get(name)
        if have is None:
            values[name] = format_quantity(value)
            r.did("resources")
            continue
        try:
            same = parse_quantity(have) == value
        except ValueError:
            same = False
        if not same:
            r.conflicts.append(f"{where}: {part}.{name} is {have!r} (policy computes "
                               f"{format_quantity(value)!r}); kept")


def _asks_cpu_or_memory(c: dict[str, Any], *adding: dict[str, ScaledQuantity]) -> bool:
    res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    have = [res.get(part) for part in ("requests", "limits")]
    return any(name in ("cpu", "memory") for values in (*have, *adding)
               if isinstance(values, dict) for name in values)


def _without_hugepages(wanted: dict[str, ScaledQuantity]) -> dict[str, ScaledQuantity]:
    return {k: v for k, v in wanted.items() if not k.startswith("hugepages-")}


def resources(spec: dict[str, Any], policy: Policy, r: Result) -> None:
    """Add the policy's requests and limits to GPU containers.

    The API server rejects a container with hugepages but neither cpu nor memory ("HugePages
    require cpu or memory"): there the hugepages are not added, with a warning, rather than
    turning an admissible pod into one the API server refuses.
    """
    m = policy.mutations
    if not (m.requests or m.limits):
        return
    for where, c in _gpu_containers(spec, policy):
        gpus = container_gpus(c, policy.gpu_resources)
        requests, limits = m.requests, m.limits
        if not _asks_cpu_or_memory(c, requests, limits):
            huge = sorted({*requests, *limits} - {*_without_hugepages(requests),
                                                   *_without_hugepages(limits)})
            if huge:
                r.conflicts.append(
                    f"{where}: {', '.join(huge)} not added: the container asks for no cpu "
                    "or memory, and the API server accepts hugepages only with one of them")
                requests, limits = _without_hugepages(requests), _without_hugepages(limits)
        _add_quantities(c, "requests", requests, gpus, where, r)
        _add_quantities(c, "limits", limits, gpus, where, r)


def apply_policy(pod: dict[str, Any], policy: Policy, job: JobInfo) -> Result:
    """Apply ``policy`` to ``pod`` in place; what changed and what conflicted."""
    r = Result()
    spec = _dict_at(pod, "spec")
    rename_resources(spec, policy, r)
    host_namespaces(spec, policy, r)
    dns_policy(spec, policy, r)
    gang_labels(pod, policy, job, r)
    scheduler_name(spec, policy, r)
    volumes(spec, policy, r)
    volume_mounts(spec, policy, r)
    security_context(spec, policy, r)
    resources(spec, policy, r)
    return r
