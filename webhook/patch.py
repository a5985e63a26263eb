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
    (``git show 5b1c38e:docs/benchmarks.md``, "Idle wake-ups"). This walk is ``_compare_dicts``,
    ``_compare_lists``, ``_compare_values``, ``_item_added``/``_removed``/``_replaced``,
    ``store_index``/``take_index`` and ``execute`` step for step, with the same set
    expressions (so keys come in the same order), on plain dicts in a list; it raises
    :class:`_ListShift` where jsonpatch would renumber list indices, and
    :func:`make_patch` then runs jsonpatch's own differ. tests/webhook/test_patch_equality.py
    compares both with jsonpatch on the seeds' pods, fuzzed pods and random documents.

    Move pairing without jsonpatch's index: jsonpatch files every added and removed value
    in a dict keyed by ``(value, type)`` (a list searched by ``==`` for dicts and lists, met
    through a TypeError) and ``take_index`` pops the most recent entry with an equal key.
    Here each side is one list searched from its end by the same ``(value, type) ==``
    test, which finds that same entry: for JSON scalars, equal keys are exactly the ``==``
    ones (equal values hash alike), and dicts and lists were searched that way already.
    A pod's diff adds a dozen values and removes one or none, so an add now costs an
    append, and a removal a short search. With equal scalars skipped inline and adds
    unrolled, the benchmark's pods take 3,314 bytecodes per patch instead of 3,712, 20
    instead of 28 us hot (``bench/admission_profile.py --opcodes``). Comparing every common
    value in C first (orjson bytes of both sides) ran fewer bytecodes but cost more: it
    serializes each subtree once per level.
    """

    __slots__ = ("adds", "dropped", "list_adds", "removes", "slots")

    def __init__(self) -> None:
        self.slots: list[dict[str, Any] | None] = []  # operations in order; None: dropped
        self.dropped = False
        self.list_adds: set[int] = set()  # slots of adds at a list position
        #: (value, type) and slot of each add / remove not yet paired, in order
        self.adds: list[tuple[tuple[Any, type], int]] = []
        self.removes: list[tuple[tuple[Any, type], int]] = []

    def ops(self) -> list[dict[str, Any]]:
        """``execute()``: the live operations in order. jsonpatch also merges a remove
        followed by an add at the same path into a replace; only a list position can be
        both removed and added (a dict's removed and added keys differ), and the walk
        leaves every list removal to jsonpatch."""
        if not self.dropped:
            return self.slots  # type: ignore[return-value]
        return [op for op in self.slots if op is not None]

    @staticmethod
    def _take(storage: list[tuple[tuple[Any, type], int]], value: Any) -> int | None:
        """``take_index``: the slot of the most recent entry equal to ``value``, removed."""
        typed_key = (value, type(value))
        for i in range(len(storage) - 1, -1, -1):
            if storage[i][0] == typed_key:
                return storage.pop(i)[1]
        return None

    def added(self, where: str, key: Any, item: Any) -> None:
        slots = self.slots
        if self.removes:
            at = self._take(self.removes, item)
            if at is not None:
                if type(key) is int:
                    raise _ListShift
                removed = slots[at]
                assert removed is not None
                slots[at] = None
                self.dropped = True
                if removed["path"] != where:
                    slots.append({"op": "move", "from": removed["path"], "path": where})
                return
        slot = len(slots)
        slots.append({"op": "add", "path": where, "value": item})
        if type(key) is int:
            self.list_adds.add(slot)
        self.adds.append(((item, type(item)), slot))

    def removed(self, where: str, item: Any) -> None:
        slots = self.slots
        at = self._take(self.adds, item) if self.adds else None
        slots.append({"op": "remove", "path": where})
        mine = len(slots) - 1
        if at is None:
            self.removes.append(((item, type(item)), mine))
            return
        if at in self.list_adds:
            raise _ListShift
        add = slots[at]
        assert add is not None
        slots[at] = None
        self.dropped = True
        if where != add["path"]:
            slots[mine] = {"op": "move", "from": where, "path": add["path"]}
        else:
            slots[mine] = None

    def values(self, path: str, key: Any, src: Any, dst: Any) -> None:
        if not unchanged(src, dst):
            self.differs(path, key, src, dst)

    def differs(self, path: str, key: Any, src: Any, dst: Any) -> None:
        """``values`` past its ``unchanged`` test (the caller knows it is False)."""
        kind = type(src)
        if kind not in _JSON_TYPES or type(dst) not in _JSON_TYPES:
            raise _ListShift  # not a parsed document: jsonpatch's isinstance rules decide
        if kind is type(dst) and (kind is dict or kind is list):
            where = _join(path, key)
            if kind is dict:
                self.dicts(where, src, dst)
            else:
                self.lists(where, src, dst)
        elif (kind is type(dst) and kind in _EXACT_SCALARS) or json.dumps(src) != json.dumps(dst):
            # two unequal strings (ints, bools) differ in JSON too; else as jsonpatch tells 1
            # from 1.0 and true: by their json.dumps
            self.slots.append({"op": "replace", "path": _join(path, key), "value": dst})

    def dicts(self, path: str, src: dict[str, Any], dst: dict[str, Any]) -> None:
        src_keys = set(src.keys())
        dst_keys = set(dst.keys())
        added_keys = dst_keys - src_keys
        removed_keys = src_keys - dst_keys
        for key in removed_keys:
            self.removed(_join(path, str(key)), src[key])
        slots, adds = self.slots, self.adds
        for key in added_keys:
            item = dst[key]
            part = key if type(key) is str else str(key)
            where = (f"{path}/{part}" if "~" not in part and "/" not in part
                     else _join(path, part))
            if self.removes:
                self.added(where, key, item)
            else:  # added() when nothing removed waits to pair: the commonest operation
                adds.append(((item, type(item)), len(slots)))
                slots.append({"op": "add", "path": where, "value": item})
        for key in src_keys & dst_keys:
            old, new = src[key], dst[key]
            kind = type(old)
            # unchanged() for the commonest case, inline: an equal str/int/bool/None
            if kind is type(new) and kind in _EXACT_SCALARS and old == new:
                continue
            self.values(path, key, old, new)

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
                    self.dicts(_join(path, key), old, new)
                elif kind is list and type(new) is list:
                    self.lists(_join(path, key), old, new)
                else:
                    raise _ListShift  # jsonpatch: remove + add of a list item
            else:
                self.added(f"{path}/{key}", key, dst[key])


def _join(path: str, key: Any) -> str:
    """``jsonpatch._path_join`` (None: the path itself; ``~`` and ``/`` escaped), without
    the two ``replace`` calls for the keys that have neither."""
    if key is None:
        return path
    part = str(key)
    if "~" in part or "/" in part:
        part = part.replace("~", "~0").replace("/", "~1")
    return f"{path}/{part}"


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
    is not a JSON type is handed to ``copy.deepcopy``. Scalars are taken as they are
    without a call of their own: most of a pod is strings (776 bytecodes per copy of the
    benchmark's pods instead of 1,014).
    """
    kind = type(doc)
    if kind is dict:
        return {k: v if type(v) in _IMMUTABLE else copy_document(v) for k, v in doc.items()}
    if kind is list:
        return [v if type(v) in _IMMUTABLE else copy_document(v) for v in doc]
    if kind in _IMMUTABLE:
        return doc
    return copy.deepcopy(doc)


#: JSON scalars: immutable, so a copy may share them.
_IMMUTABLE = frozenset({str, int, bool, float, type(None)})


def working_copy(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod as the pipeline reads it, a copy the pipeline changes): both without
    ``metadata.managedFields``.

    Why: the API server sends a pod with the field manager's record of who set which field
    (``k8s.io/apiserver/pkg/endpoints/handlers/create.go`` updates it before admission):
    about a third of a stored pod's bytes, which no policy or step reads or writes. Left
    out of both, it is neither copied nor diffed, and the patch computed between the two
    never names it, so the API server keeps it as it was. The read view shares everything
    else with ``pod``; the copy shares nothing (:func:`copy_document`)."""
    meta = pod.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        pod = {**pod, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return pod, copy_document(pod)
