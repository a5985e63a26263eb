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


def _wrong(path: str, value: object, kind: type) -> _Bad:
    """The problem of a field that holds ``value`` where ``kind`` belongs."""
    got = "a boolean" if kind is not bool and isinstance(value, bool) else type(value).__name__
    return _Bad(path, f"expected {_type_name(kind)}, got {got}")


def _typed(obj: Mapping[str, Any], fields: tuple[tuple[str, type], ...], path: str) -> None:
    """Each of ``fields`` (key, type) of ``obj`` is absent, null or of its type. Why a
    table: a pod has some thirty such fields, mostly absent, and one loop over them costs
    a fraction of a call per field (the webhook checks every pod it reads)."""
    for key, kind in fields:
        value = obj.get(key)
        if value is not None and (not isinstance(value, kind)
                                  or (kind is not bool and isinstance(value, bool))):
            raise _wrong(f"{path}.{key}", value, kind)


def _opt(obj: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    value = obj.get(key)
    if value is not None and (not isinstance(value, kind)
                              or (kind is not bool and isinstance(value, bool))):
        raise _wrong(f"{path}.{key}", value, kind)
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


_META_FIELDS = (("name", str), ("generateName", str), ("namespace", str), ("uid", str))
_SPEC_FIELDS = (("hostNetwork", bool), ("hostIPC", bool), ("hostPID", bool),
                ("dnsPolicy", str), ("schedulerName", str), ("nodeName", str),
                ("securityContext", dict), ("affinity", dict), ("nodeSelector", dict))
_RESOURCE_FIELDS = (("requests", dict), ("limits", dict))


def _check_metadata(pod: Mapping[str, Any]) -> None:
    meta = _opt(pod, "metadata", dict, "")
    if meta is None:
        return
    _typed(meta, _META_FIELDS, ".metadata")
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
    if resources:
        _typed(resources, _RESOURCE_FIELDS, f"{path}.resources")
        for part in ("requests", "limits"):
            for k, v in (resources.get(part) or {}).items():
                if not isinstance(k, str):
                    raise _Bad(f"{path}.resources.{part}",
                               f"resource name {k!r} is not a string")
                try:
                    parse_quantity(v)
                except ValueError:
                    raise _Bad(f"{path}.resources.{part}.{k}",
                               f"not a quantity: {v!r}") from None
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
    _typed(spec, _SPEC_FIELDS, ".spec")
    _str_map(spec, "nodeSelector", ".spec")


def check_pod(pod: Mapping[str, Any]) -> Problem | None:
    """None when the pod has the shape the pipeline relies on, else (field path, reason)
    of the first field that is wrong."""
    try:
        _check_metadata(pod)
        _check_spec(pod)
    except _Bad as bad:
        return bad.path, bad.reason
    return None
