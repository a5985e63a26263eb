"""The shape a Pod must have before the pipeline touches it.

Why: the API server decodes pods before calling webhooks, but our endpoint is also reachable
by anything that can send HTTPS, and the dry run reads user files. Checking every field the
mutations read, once, up front, means a malformed pod becomes a clear 400 ("which field,
what is wrong") instead of a crash deep inside a mutation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import repeat
from operator import methodcaller
from typing import Any

from webhook.quantity import parse_quantity

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

    Why two ways: a well-formed pod is vouched for in one pass that leaves the per-field
    work to C (:func:`_well_formed`, ~190 bytecodes for the benchmark's pods against
    ~1,300 for :func:`check_pod_in_detail`); anything it does not vouch for goes to
    :func:`check_pod_in_detail`, which decides and words every problem, so what passes
    and every message stay that function's by construction."""
    try:
        if _well_formed(pod):
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
# Each (key, accepted types) pair below is one _opt/_str_map/_list_of_dicts call of the
# detailed checker; isinstance with (NoneType, T) accepts exactly what _opt(..., T) does
# (None or a T; a JSON boolean is no str, dict or list). map/all/isinstance run in C.
_NONE = type(None)
_STR, _DICT, _LIST, _BOOL = (_NONE, str), (_NONE, dict), (_NONE, list), (_NONE, bool)
_STRINGS, _DICTS = repeat(str), repeat(dict)
_META_KEYS = ("name", "generateName", "namespace", "uid", "labels", "annotations",
              "ownerReferences")
_META_TYPES = (_STR, _STR, _STR, _STR, _DICT, _DICT, _LIST)
_REF_KEYS = ("apiVersion", "kind", "name", "uid", "controller")
_REF_TYPES = (str, str, str, _STR, _BOOL)
_REF_REQUIRED = ("apiVersion", "kind", "name")  # and not empty
_SPEC_KEYS = ("containers", "initContainers", "volumes", "nodeSelector", "hostNetwork",
              "hostIPC", "hostPID", "dnsPolicy", "schedulerName", "nodeName",
              "securityContext", "affinity")
_SPEC_TYPES = (list, _LIST, _LIST, _DICT, _BOOL, _BOOL, _BOOL, _STR, _STR, _STR, _DICT,
               _DICT)
_CONTAINER_KEYS = ("resources", "volumeMounts", "env", "name", "securityContext")
_CONTAINER_TYPES = (_DICT, _LIST, _LIST, str, _DICT)
_PARTS = ("requests", "limits")
_name = methodcaller("get", "name")
_mount_path = methodcaller("get", "mountPath")
#: (type, value) of the quantities parse_quantity accepted: the type keeps 1, 1.0 and True
#: apart. The values are the client's, so the set is kept small.
_QUANTITIES: set[tuple[type, Any]] = set()


def _strings_only(mapping: dict[Any, Any]) -> bool:
    return all(map(isinstance, mapping, _STRINGS)) and all(
        map(isinstance, mapping.values(), _STRINGS))


def _named_dicts(items: list[Any]) -> bool:
    return all(map(isinstance, items, _DICTS)) and all(
        map(isinstance, map(_name, items), _STRINGS))


def _quantities(values: Iterable[Any]) -> bool:
    """True when every value is a quantity parse_quantity accepts."""
    if _QUANTITIES.issuperset(zip(map(type, values), values, strict=True)):
        return True  # (an unhashable value raised TypeError)
    for value in values:
        try:
            parse_quantity(value)
        except ValueError:
            return False
        if len(_QUANTITIES) >= 4096:
            _QUANTITIES.clear()
        _QUANTITIES.add((type(value), value))
    return True


def _well_formed(pod: Mapping[str, Any]) -> bool:
    """True only when :func:`check_pod_in_detail` finds nothing wrong with ``pod``; False
    (or an exception) when unsure, never a wrong True."""
    meta = pod.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            return False
        fields = tuple(map(meta.get, _META_KEYS))
        if not all(map(isinstance, fields, _META_TYPES)):
            return False
        _, _, _, _, labels, annotations, refs = fields
        if (labels and not _strings_only(labels)) or (
                annotations and not _strings_only(annotations)):
            return False
        if refs:
            if not all(map(isinstance, refs, _DICTS)):
                return False
            for ref in refs:
                if not all(map(isinstance, map(ref.get, _REF_KEYS), _REF_TYPES)) or not all(
                        map(ref.get, _REF_REQUIRED)):
                    return False
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    fields = tuple(map(spec.get, _SPEC_KEYS))
    if not all(map(isinstance, fields, _SPEC_TYPES)):
        return False
    containers, init_containers, volumes, node_selector = fields[:4]
    if (node_selector and not _strings_only(node_selector)) or (
            volumes and not _named_dicts(volumes)):
        return False
    if init_containers:
        containers = containers + init_containers
    if not all(map(isinstance, containers, _DICTS)):
        return False
    for container in containers:
        resources, mounts, env, _, _ = fields = tuple(map(container.get, _CONTAINER_KEYS))
        if not all(map(isinstance, fields, _CONTAINER_TYPES)):
            return False
        if resources:
            for values in map(resources.get, _PARTS):
                if values is not None and not (isinstance(values, dict)
                                               and all(map(isinstance, values, _STRINGS))
                                               and _quantities(values.values())):
                    return False
        if mounts and not (_named_dicts(mounts) and all(
                map(isinstance, map(_mount_path, mounts), _STRINGS))):
            return False
        if env and not _named_dicts(env):
            return False
    return True
