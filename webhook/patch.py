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


#: The JSON types a parsed document is made of; anything else goes to jsonpatch itself.
_JSON_TYPES = frozenset({dict, list, str, int, float, bool, type(None)})
_ADD, _REMOVE = 0, 1  # jsonpatch's _ST_ADD, _ST_REMOVE


class _ListShift(Exception):
    """The diff removes a list item, or pairs an add and a remove where one of them is a
    list position: jsonpatch then renumbers the other operations' indices
    (``_on_undo_add``/``_on_undo_remove``), which only its own differ does."""


class _Walk:
    """jsonpatch 1.33's DiffBuilder for documents whose lists only grow or change in place.

    Why: a pod's diff is dict edits — keys added, values replaced, a resource renamed
    (a removed key and an added one with the same value: jsonpatch pairs them into a
    ``move``) — and lists that only grow (env, volumes, tolerations). For those, jsonpatch's
    operation objects, JSON pointers and linked list cost most of the diff
    (docs/benchmarks.md, "Idle wake-ups"). This walk is ``_compare_dicts``,
    ``_compare_lists``, ``_compare_values``, ``_item_added``/``_removed``/``_replaced``,
    ``store_index``/``take_index`` and ``execute`` step for step, with the same set
    expressions (so keys come in the same order), on plain dicts in a list; it raises
    :class:`_ListShift` where jsonpatch would renumber list indices, and
    :func:`make_patch` then runs jsonpatch's own differ. tests/webhook/test_patch_equality.py
    compares both with jsonpatch on the seeds' pods, fuzzed pods and random documents.
    """

    __slots__ = ("list_adds", "slots", "storage", "storage2")

    def __init__(self) -> None:
        self.slots: list[dict[str, Any] | None] = []  # operations in order; None: dropped
        self.list_adds: set[int] = set()  # slots of adds at a list position
        self.storage: tuple[dict[Any, list[int]], dict[Any, list[int]]] = ({}, {})
        self.storage2: tuple[list[tuple[Any, int]], list[tuple[Any, int]]] = ([], [])

    def ops(self) -> list[dict[str, Any]]:
        """``execute()``: the live operations in order. jsonpatch also merges a remove
        followed by an add at the same path into a replace; only a list position can be
        both removed and added (a dict's removed and added keys differ), and the walk
        leaves every list removal to jsonpatch."""
        return [op for op in self.slots if op is not None]

    def _store(self, value: Any, slot: int, st: int) -> None:
        typed_key = (value, type(value))
        try:
            stored = self.storage[st].get(typed_key)
            if stored is None:
                self.storage[st][typed_key] = [slot]
            else:
                stored.append(slot)
        except TypeError:  # a dict or list: unhashable, searched by == as jsonpatch does
            self.storage2[st].append((typed_key, slot))

    def _take(self, value: Any, st: int) -> int | None:
        typed_key = (value, type(value))
        try:
            stored = self.storage[st].get(typed_key)
            if stored:
                return stored.pop()
        except TypeError:
            storage = self.storage2[st]
            for i in range(len(storage) - 1, -1, -1):
                if storage[i][0] == typed_key:
                    return storage.pop(i)[1]
        return None

    def added(self, path: str, key: Any, item: Any) -> None:
        where = _path_join(path, key)
        at = self._take(item, _REMOVE)
        if at is not None:
            if type(key) is int:
                raise _ListShift
            removed = self.slots[at]
            assert removed is not None
            self.slots[at] = None
            if removed["path"] != where:
                self.slots.append({"op": "move", "from": removed["path"], "path": where})
            return
        self.slots.append({"op": "add", "path": where, "value": item})
        if type(key) is int:
            self.list_adds.add(len(self.slots) - 1)
        self._store(item, len(self.slots) - 1, _ADD)

    def removed(self, path: str, key: str, item: Any) -> None:
        where = _path_join(path, key)
        at = self._take(item, _ADD)
        self.slots.append({"op": "remove", "path": where})
        mine = len(self.slots) - 1
        if at is None:
            self._store(item, mine, _REMOVE)
            return
        if at in self.list_adds:
            raise _ListShift
        add = self.slots[at]
        assert add is not None
        self.slots[at] = None
        if where != add["path"]:
            self.slots[mine] = {"op": "move", "from": where, "path": add["path"]}
        else:
            self.slots[mine] = None

    def values(self, path: str, key: Any, src: Any, dst: Any) -> None:
        if unchanged(src, dst):
            return
        kind = type(src)
        if kind not in _JSON_TYPES or type(dst) not in _JSON_TYPES:
            raise _ListShift  # not a parsed document: jsonpatch's isinstance rules decide
        if kind is type(dst) and (kind is dict or kind is list):
            where = _path_join(path, key)
            if kind is dict:
                self.dicts(where, src, dst)
            else:
                self.lists(where, src, dst)
        elif json.dumps(src) != json.dumps(dst):  # as jsonpatch tells 1 from 1.0 and true
            self.slots.append({"op": "replace", "path": _path_join(path, key), "value": dst})

    def dicts(self, path: str, src: dict[str, Any], dst: dict[str, Any]) -> None:
        src_keys = set(src.keys())
        dst_keys = set(dst.keys())
        added_keys = dst_keys - src_keys
        removed_keys = src_keys - dst_keys
        for key in removed_keys:
            self.removed(path, str(key), src[key])
        for key in added_keys:
            self.added(path, str(key), dst[key])
        for key in src_keys & dst_keys:
            self.values(path, key, src[key], dst[key])

    def lists(self, path: str, src: list[Any], dst: list[Any]) -> None:
        len_src, len_dst = len(src), len(dst)
        if len_src > len_dst:
            raise _ListShift
        for key in range(len_dst):
            if key < len_src:
                old, new = src[key], dst[key]
                if old == new:  # jsonpatch's own test here: Python equality (1 == 1.0)
                    continue
                kind = type(old)
                if kind not in _JSON_TYPES or type(new) not in _JSON_TYPES:
                    raise _ListShift
                if kind is dict and type(new) is dict:
                    self.dicts(_path_join(path, key), old, new)
                elif kind is list and type(new) is list:
                    self.lists(_path_join(path, key), old, new)
                else:
                    raise _ListShift  # jsonpatch: remove + add of a list item
            else:
                self.added(path, key, dst[key])


def _walked(original: Any, mutated: Any) -> list[dict[str, Any]] | None:
    """The patch by :class:`_Walk`, or None where only jsonpatch's differ can tell."""
    walk = _Walk()
    try:
        walk.values("", None, original, mutated)
    except _ListShift:
        return None
    return walk.ops()


def make_patch(original: Any, mutated: Any) -> list[dict[str, Any]]:
    """The RFC 6902 patch from ``original`` to ``mutated`` (empty when equal): equal to
    ``list(jsonpatch.make_patch(original, mutated).patch)``.

    Like jsonpatch, the ``value`` of an operation is the mutated document's own object,
    not a copy. Unlike ``jsonpatch.make_patch``, the operations are not parsed back into a
    ``JsonPatch`` (a generated diff is well-formed; that parse cost as much as the diff).
    """
    if _FITS:
        ops = _walked(original, mutated)
        return ops if ops is not None else _fast(original, mutated)
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
