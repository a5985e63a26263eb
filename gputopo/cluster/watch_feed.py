"""Objects of one kind kept from a list+watch and from the store's own writes, newest wins.

Why a shared base: the Kubernetes reservation store answers two questions per new gang from
memory instead of a LIST — which GPUs the ledgers hold (:mod:`gputopo.cluster.ledger_feed`)
and which GPUs other gangs' records hand out (:mod:`gputopo.cluster.gang_record_feed`).
Both are fed the same way and must follow the same rules, written once here:

* The cluster view's informer calls :meth:`WatchFeed.relisted` with every full LIST and
  :meth:`WatchFeed.watched` with every event; the store calls :meth:`WatchFeed.observe`
  with every object the API returned to it (a read or a write) and :meth:`WatchFeed.deleted`
  for every object it deleted (write-through), so its own writes are seen at once.
* Writes through and watch events race: a watch event may arrive after a newer version of
  the same object was applied from a write. Versions are ordered by
  ``metadata.resourceVersion``, compared as integers when both are integers (etcd's are:
  its revision) and otherwise taken as newer — Kubernetes calls resourceVersions opaque,
  so without integers there is no order to trust and the latest call wins.
* A deletion is remembered (a tombstone with its version) until a LIST newer than it
  settles it, so a late write-through or watch event of the deleted object cannot bring it
  back; a version newer than the deletion (created again) applies.
* ``synced`` is True once a full list went in and while the watch is not known broken
  (:meth:`WatchFeed.pause`); a store serves from a feed only then, else it lists itself.

A subclass says what it keeps of an object (:meth:`WatchFeed._parse`) and maintains its
answers from the changes (:meth:`WatchFeed._changed`, then :meth:`WatchFeed._settled` once
per batch), all under the feed's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")


def _versions(a: str | None, b: str | None) -> tuple[int, int] | None:
    """Both versions as integers (etcd revisions), or None: opaque versions have no order
    to trust, and then the latest call wins."""
    try:
        return int(a), int(b)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def older(rv: str | None, than: str | None) -> bool:
    """True when version ``rv`` is known to precede ``than``."""
    both = _versions(rv, than)
    return both is not None and both[0] < both[1]


def not_newer(rv: str | None, than: str | None) -> bool:
    """True when version ``rv`` is known to be ``than`` or to precede it."""
    both = _versions(rv, than)
    return both is not None and both[0] <= both[1]


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


class WatchFeed(Generic[V]):
    """name -> (version, what is kept of the object), fed by a watch and by write-through.

    Thread-safe (one lock, microseconds per change).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[str | None, V]] = {}
        self._gone: dict[str, str | None] = {}  # name -> version of its deletion
        self._listed = False
        self._paused = False
        self.lists = 0

    @property
    def synced(self) -> bool:
        return self._listed and not self._paused

    # --- what a subclass defines (called under the lock) -------------------------------------
    def _parse(self, obj: Mapping[str, Any]) -> V:
        raise NotImplementedError

    def _changed(self, name: str, old: V | None, new: V | None) -> None:
        """Object ``name`` went from ``old`` to ``new`` (None: absent)."""

    def _settled(self) -> None:
        """The end of one batch of changes (one call from outside): publish answers."""

    # --- changes ---------------------------------------------------------------------------
    def observe(self, obj: Mapping[str, Any]) -> None:
        """An object as the API returned it (a read, a write, a watch event)."""
        with self._lock:
            self._put(obj)
            self._settled()

    def deleted(self, name: str, resource_version: str | None = None) -> None:
        """Object ``name`` was deleted (at ``resource_version``, when known)."""
        with self._lock:
            self._drop(name, resource_version)
            self._settled()

    def watched(self, etype: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED / MODIFIED / DELETED) of the informer."""
        if etype == "DELETED":
            self.deleted(str(meta(obj).get("name") or ""), meta(obj).get("resourceVersion"))
        elif etype in ("ADDED", "MODIFIED"):
            self.observe(obj)

    def relisted(self, items: Iterable[Mapping[str, Any]], resource_version: str | None
                 ) -> None:
        """A full LIST taken at ``resource_version`` (the first one, or after 410 Gone or a
        reconnect): afterwards the feed holds exactly the listed objects, except versions
        applied here that are newer than the list (a write-through that raced it)."""
        with self._lock:
            listed = {str(meta(o).get("name") or ""): o for o in items}
            for name, (rv, _) in list(self._objects.items()):
                if name not in listed and not older(resource_version, rv):
                    self._drop(name, resource_version)
            for obj in listed.values():
                self._put(obj)
            # tombstones the list covers are settled: the list no longer holds them
            self._gone = {n: rv for n, rv in self._gone.items()
                          if older(resource_version, rv)}
            self._settled()
            self._listed = True
            self._paused = False
            self.lists += 1

    def pause(self) -> None:
        """The watch broke (API away, 403 on watch): not synced until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        """The watch is connected again (it replays what it missed from its version)."""
        self._paused = False

    def _put(self, obj: Mapping[str, Any]) -> None:
        m = meta(obj)
        name = str(m.get("name") or "")
        rv = m.get("resourceVersion")
        rv = None if rv is None else str(rv)
        if name in self._gone and not_newer(rv, self._gone[name]):
            return  # a version from before its deletion (equal: the deleted one itself)
        cur = self._objects.get(name)
        if cur is not None and older(rv, cur[0]):
            return  # an older event than what a write-through already applied
        self._gone.pop(name, None)
        new = self._parse(obj)
        self._objects[name] = (rv, new)
        self._changed(name, None if cur is None else cur[1], new)

    def _drop(self, name: str, rv: str | None) -> None:
        cur = self._objects.get(name)
        if cur is not None and rv is not None and older(rv, cur[0]):
            return  # deleted before a version applied since: that version stands
        self._gone[name] = rv if rv is not None else (cur[0] if cur is not None else None)
        if cur is None:
            return
        del self._objects[name]
        self._changed(name, cur[1], None)
