"""The shape a Pod must have before the pipeline touches it.

Why: the API server decodes pods before calling webhooks, but our endpoint is also reachable
by anything that can send HTTPS, and the dry run reads user files. Checking every field the
mutations read, once, up front, means a malformed pod becomes a clear 400 ("which field,
what is wrong") instead of a crash deep inside a mutation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gputopo.quantity import parse_quantity

Problem = tuple[str, str]  # (field path suffix, reason)


class _Bad(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason


def _type_name(kind: type) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        kind, kind.__name__
    )


def _opt(obj: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    if kind is not bool and isinstance(value, bool):
        raise _Bad(f"{path}.{key}", f"expected {_type_name(kind)}, got a boolean")
    if not isinstance(value, kind):
        raise _Bad(f"{path}.{key}", f"expected {_type_name(kind)}, got {type(value).__name__}")
    return value


def _str_map(obj: Mapping[str, Any], key: str, path: str) -> None:
    value = _opt(obj, key, dict, path)
    for k, v in (value or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise _Bad(f"{path}.{key}", f"entry {k!r} must map a string to a string")


def _list_of_dicts(obj: Mapping[str, Any], key: str, path: str) -> list[dict[str, Any]]:
    value = _opt(obj, key, list, path) or []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise _Bad(f"{path}.{key}[{i}]", "expected a mapping")
    return value


def _check_metadata(pod: Mapping[str, Any]) -> None:
    meta = _opt(pod, "metadata", dict, "")
    if meta is None:
        return
    for key in ("name", "generateName", "namespace", "uid"):
        _opt(meta, key, str, ".metadata")
    _str_map(meta, "labels", ".metadata")
    _str_map(meta, "annotations", ".metadata")
    for i, ref in enumerate(_list_of_dicts(meta, "ownerReferences", ".metadata")):
        where = f".metadata.ownerReferences[{i}]"
        for key in ("apiVersion", "kind", "name"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                raise _Bad(f"{where}.{key}", "must be a non-empty string")
        _opt(ref, "uid", str, where)
        _opt(ref, "controller", bool, where)


def _check_container(c: Mapping[str, Any], path: str) -> None:
    if not isinstance(c.get("name"), str):
        raise _Bad(f"{path}.name", "must be a string")
    resources = _opt(c, "resources", dict, path)
    for part in ("requests", "limits"):
        values = _opt(resources or {}, part, dict, f"{path}.resources")
        for k, v in (values or {}).items():
            if not isinstance(k, str):
                raise _Bad(f"{path}.resources.{part}", f"resource name {k!r} is not a string")
            try:
                parse_quantity(v)
            except ValueError:
                raise _Bad(f"{path}.resources.{part}.{k}", f"not a quantity: {v!r}") from None
    for i, mount in enumerate(_list_of_dicts(c, "volumeMounts", path)):
        for key in ("name", "mountPath"):
            if not isinstance(mount.get(key), str):
                raise _Bad(f"{path}.volumeMounts[{i}].{key}", "must be a string")
    for i, env in enumerate(_list_of_dicts(c, "env", path)):
        if not isinstance(env.get("name"), str):
            raise _Bad(f"{path}.env[{i}].name", "must be a string")
    _opt(c, "securityContext", dict, path)


def _check_spec(pod: Mapping[str, Any]) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise _Bad(".spec", "missing or not a mapping")
    if not isinstance(spec.get("containers"), list):
        raise _Bad(".spec.containers", "missing or not a list")
    for key in ("containers", "initContainers"):
        for i, c in enumerate(_list_of_dicts(spec, key, ".spec")):
            _check_container(c, f".spec.{key}[{i}]")
    for i, vol in enumerate(_list_of_dicts(spec, "volumes", ".spec")):
        if not isinstance(vol.get("name"), str):
            raise _Bad(f".spec.volumes[{i}].name", "must be a string")
    for key in ("hostNetwork", "hostIPC", "hostPID"):
        _opt(spec, key, bool, ".spec")
    for key in ("dnsPolicy", "schedulerName", "nodeName"):
        _opt(spec, key, str, ".spec")
    for key in ("securityContext", "affinity", "nodeSelector"):
        _opt(spec, key, dict, ".spec")
    _str_map(spec, "nodeSelector", ".spec")


def check_pod(pod: Mapping[str, Any]) -> Problem | None:
    """None when the pod has the shape the pipeline relies on, else (field path, reason).

    Why two ways: a well-formed pod is vouched for in one straight pass
    (:func:`well_formed_pod`: ~2 us a benchmark pod hot, ~35 cold, against ~1,300 bytecodes
    for :func:`check_pod_in_detail`); anything it does not vouch for goes to
    :func:`check_pod_in_detail`, which decides and words every problem, so what passes
    and every message stay that function's by construction."""
    try:
        if well_formed_pod(pod):
            return None
    except Exception:  # anything unexpected is simply not vouched for
        pass
    return check_pod_in_detail(pod)


def check_pod_in_detail(pod: Mapping[str, Any]) -> Problem | None:
    """:func:`check_pod`, field by field: the reference the fast pass agrees with."""
    try:
        _check_metadata(pod)
        _check_spec(pod)
    except _Bad as bad:
        return bad.path, bad.reason
    return None


# --- the fast pass ------------------------------------------------------------------------
# Why plain subscripts and comparisons, not map/all/isinstance over field tables (tried
# first: 285 bytecodes a pod against 609): the table version cost 5.1 us a pod hot and
# ~68 us cold (after 20 ms idle on the benchmark guest), this one 2.0 and ~35. The C
# helpers' own work is not in a bytecode count, and cold, each distinct one touched costs.
_META_STRINGS = ("name", "generateName", "namespace", "uid")
_META_MAPS = ("labels", "annotations")
_SPEC_BOOLS = ("hostNetwork", "hostIPC", "hostPID")
_SPEC_STRINGS = ("dnsPolicy", "schedulerName", "nodeName")
_SPEC_MAPS = ("securityContext", "affinity")  # nodeSelector: a string map, below
_PARTS = ("requests", "limits")
#: (type, value) of the quantities parse_quantity accepted: the type keeps 1, 1.0 and True
#: apart. The values are the client's, so the set is kept small.
_QUANTITIES: set[tuple[type, Any]] = set()


def _learn_quantity(value: Any) -> bool:
    """True when parse_quantity accepts ``value`` (then remembered)."""
    try:
        parse_quantity(value)
    except ValueError:
        return False
    if len(_QUANTITIES) >= 4096:
        _QUANTITIES.clear()
    _QUANTITIES.add((type(value), value))
    return True


def _string_map(value: Any) -> bool:
    if type(value) is not dict:
        return False
    for k, v in value.items():  # noqa: SIM110 - a loop, not a generator (see above)
        if type(k) is not str or type(v) is not str:
            return False
    return True


def well_formed_pod(pod: Mapping[str, Any]) -> bool:
    """True only when :func:`check_pod_in_detail` finds nothing wrong with ``pod``; False
    (or an exception) when unsure, never a wrong True. Every test is one the detailed
    checker makes, with ``type(x) is T`` for its ``isinstance`` (stricter: a subclass is
    not vouched for) and ``is True/False`` for a boolean."""
    meta = pod.get("metadata")
    if meta is not None:
        if type(meta) is not dict:
            return False
        for key in _META_STRINGS:
            value = meta.get(key)
            if value is not None and type(value) is not str:
                return False
        for key in _META_MAPS:
            value = meta.get(key)
            if value is not None and not _string_map(value):
                return False
        refs = meta.get("ownerReferences")
        if refs is not None:
            if type(refs) is not list:
                return False
            for ref in refs:
                if type(ref) is not dict:
                    return False
                api_version, kind, name = (ref.get("apiVersion"), ref.get("kind"),
                                           ref.get("name"))
                if not (type(api_version) is str and api_version and type(kind) is str and kind
                        and type(name) is str and name):
                    return False
                uid, controller = ref.get("uid"), ref.get("controller")
                if (uid is not None and type(uid) is not str) or not (
                        controller is None or controller is True or controller is False):
                    return False
    spec = pod.get("spec")
    if type(spec) is not dict:
        return False
    containers = spec.get("containers")
    if type(containers) is not list:
        return False
    init = spec.get("initContainers")
    if init is not None:
        if type(init) is not list:
            return False
        containers = containers + init
    for key in _SPEC_BOOLS:
        value = spec.get(key)
        if not (value is None or value is True or value is False):
            return False
    for key in _SPEC_STRINGS:
        value = spec.get(key)
        if value is not None and type(value) is not str:
            return False
    for key in _SPEC_MAPS:
        value = spec.get(key)
        if value is not None and type(value) is not dict:
            return False
    value = spec.get("nodeSelector")
    if value is not None and not _string_map(value):
        return False
    volumes = spec.get("volumes")
    if volumes is not None:
        if type(volumes) is not list:
            return False
        for vol in volumes:
            if type(vol) is not dict or type(vol.get("name")) is not str:
                return False
    for c in containers:
        if type(c) is not dict or type(c.get("name")) is not str:
            return False
        resources = c.get("resources")
        if resources is not None:
            if type(resources) is not dict:
                return False
            for part in _PARTS:
                values = resources.get(part)
                if values is not None:
                    if type(values) is not dict:
                        return False
                    for k, v in values.items():
                        if type(k) is not str:
                            return False
                        if (type(v), v) not in _QUANTITIES and not _learn_quantity(v):
                            return False
        mounts = c.get("volumeMounts")
        if mounts is not None:
            if type(mounts) is not list:
                return False
            for m in mounts:
                if (type(m) is not dict or type(m.get("name")) is not str
                        or type(m.get("mountPath")) is not str):
                    return False
        env = c.get("env")
        if env is not None:
            if type(env) is not list:
                return False
            for e in env:
                if type(e) is not dict or type(e.get("name")) is not str:
                    return False
        value = c.get("securityContext")
        if value is not None and type(value) is not dict:
            return False
    return True
