"""The RFC 6902 patch from the pod as it came to the pod as the pipeline left it, and the
working copy it is computed against.

Why a module of its own: the patch is what the API server applies, so it must not change
when the pipeline gets faster. :func:`make_patch` returns exactly what
``jsonpatch.make_patch(original, mutated).patch`` returns, for ANY pair of JSON documents:
it runs jsonpatch's own differ (``jsonpatch.DiffBuilder``: the same removes, adds, moves
and replaces, in the same order) and only skips the subtrees that cannot produce an
operation. jsonpatch walks every key of the pod and compares every leaf by ``json.dumps``
(100-170 us per pod, a quarter of a later gang pod's admission); here a subtree that is
unchanged is recognised in C — ``src == dst`` (Python equality, which already lets 1 equal
1.0 and True) AND equal ``orjson`` bytes (which tell 1, 1.0 and true apart, as jsonpatch's
``json.dumps`` comparison does) — and not walked. When that check cannot decide (orjson
refuses a value: an integer beyond 64 bits, a lone surrogate, a non-string key), the
subtree is walked by jsonpatch as before. tests/webhook/test_patch_equality.py runs both on
the seeds' pods, the shipped policies' mutations and fuzzed documents and compares the
patches byte for byte.

Why the generality matters: the pipeline's steps keep adding kinds of change (env with
``valueFrom``, scheduling gates, removed ports, new annotations); a patch builder that knew
today's mutations would silently miss tomorrow's. This one knows none of them.

Documents are JSON: dicts with string keys, lists, str, int, float, bool, None. NaN and
Infinity are not JSON (the review parser refuses them) and are not supported here.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from jsonpatch import DiffBuilder, _path_join
from jsonpointer import JsonPointer, JsonPointerException

#: Values whose ``json.dumps`` is equal exactly when they are ``==`` and of the same type.
_EXACT_SCALARS = (str, int, bool, type(None))


def unchanged(src: Any, dst: Any) -> bool:
    """True when jsonpatch's differ would find no operation between ``src`` and ``dst``
    (a False only means "walk it and see")."""
    if src is dst:
        return True
    kind = type(src)
    if kind is not type(dst):
        return False
    if kind in _EXACT_SCALARS:
        return bool(src == dst)
    if kind is dict or kind is list:
        try:
            return bool(src == dst) and orjson.dumps(src) == orjson.dumps(dst)
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            return False
    return False


class _Pointer(JsonPointer):  # type: ignore[misc]
    """A JsonPointer for the paths the differ itself writes (``jsonpatch._path_join``
    escapes every ``~`` and ``/``), so the check for invalid escapes is skipped; the parts
    are unescaped exactly as ``jsonpointer.unescape`` does. One is made per operation."""

    def __init__(self, pointer: str) -> None:
        parts = pointer.split("/")
        if parts.pop(0) != "":
            raise JsonPointerException("Location must start with /")
        self.parts = [p.replace("~1", "/").replace("~0", "~") if "~" in p else p
                      for p in parts]


class _Differ(DiffBuilder):  # type: ignore[misc]
    """jsonpatch's DiffBuilder, told to skip the subtrees :func:`unchanged` vouches for.

    ``_compare_values`` is where jsonpatch descends into a dict's common keys (and where
    the whole documents enter): it skips what is unchanged and tells dicts from lists by
    type. Lists keep jsonpatch's own element-by-element walk, whose ``old == new`` test is
    already done in C. ``store_index``/``take_index`` (move detection) give jsonpatch's
    answers without its exception path.
    """

    def _compare_values(self, path: str, key: Any, src: Any, dst: Any) -> None:
        if unchanged(src, dst):
            return
        # jsonpatch tells dicts and lists by isinstance against the collections ABCs
        # (~0.5 us a check); for the two JSON containers themselves the answer is known.
        kind = type(src)
        if kind is type(dst) and (kind is dict or kind is list):
            where = _path_join(path, key)
            if kind is dict:
                self._compare_dicts(where, src, dst)
            else:
                self._compare_lists(where, src, dst)
            return
        super()._compare_values(path, key, src, dst)

    # jsonpatch keys its move detection by (value, type): a dict or list raises TypeError
    # when hashed and goes to a list searched by ==. The same, without raising, and with
    # no search when nothing of that kind was stored (a pod's patch rarely removes).
    def store_index(self, value: Any, index: Any, st: int) -> None:
        if type(value) is dict or type(value) is list:
            self.index_storage2[st].append(((value, type(value)), index))
        else:
            super().store_index(value, index, st)

    def take_index(self, value: Any, st: int) -> Any:
        if type(value) is dict or type(value) is list:
            storage = self.index_storage2[st]
            if storage:
                typed_key = (value, type(value))
                for i in range(len(storage) - 1, -1, -1):
                    if storage[i][0] == typed_key:
                        return storage.pop(i)[1]
            return None
        if not self.index_storage[st]:
            return None
        return super().take_index(value, st)


def _differ_fits() -> bool:
    """True when the installed jsonpatch's differ is the one :class:`_Differ` was written
    against (1.33: string paths joined by ``_path_join``, ``_compare_values(path, key, src,
    dst)``). Later releases rewrote those private internals (1.47 joins tuples); there the
    plain ``jsonpatch.make_patch`` is used: slower, never wrong. pyproject pins 1.33.x."""
    import jsonpatch

    try:
        return jsonpatch._path_join("", "a/b") == "/a~1b" and list(
            jsonpatch.make_patch({"a": 1}, {"a": 2}).patch) == _fast({"a": 1}, {"a": 2})
    except Exception:  # any mismatch of private internals: do not use them
        return False


def _fast(original: Any, mutated: Any) -> list[dict[str, Any]]:
    differ = _Differ(original, mutated, json.dumps, pointer_cls=_Pointer)
    differ._compare_values("", None, original, mutated)
    return list(differ.execute())


def make_patch(original: Any, mutated: Any) -> list[dict[str, Any]]:
    """The RFC 6902 patch from ``original`` to ``mutated`` (empty when equal): equal to
    ``list(jsonpatch.make_patch(original, mutated).patch)``.

    Like jsonpatch, the ``value`` of an operation is the mutated document's own object,
    not a copy. Unlike ``jsonpatch.make_patch``, the operations are not parsed back into a
    ``JsonPatch`` (a generated diff is well-formed; that parse cost as much as the diff).
    """
    if _FITS:
        return _fast(original, mutated)
    import jsonpatch

    return list(jsonpatch.make_patch(original, mutated).patch)


_FITS = _differ_fits()


def copy_document(doc: Any) -> Any:
    """A deep copy of a JSON document as the review parser builds it (a tree: no object
    appears twice), several times cheaper than ``copy.deepcopy``, which keeps a memo of
    every object to preserve sharing that a parsed document does not have. Anything that
    is not a JSON type is handed to ``copy.deepcopy``.
    """
    kind = type(doc)
    if kind is dict:
        return {k: copy_document(v) for k, v in doc.items()}
    if kind is list:
        return [copy_document(v) for v in doc]
    if kind in _EXACT_SCALARS or kind is float:
        return doc
    return copy.deepcopy(doc)
