"""Held GPUs kept current from a watch of the GPU ledgers, instead of a LIST per new gang.

Why: the placement step asks the reservation store which GPUs are held for every new gang
it solves. The Kubernetes store answers that by listing every ledger ConfigMap and parsing
every entry (~70 ms at 1,000 nodes). The cluster view already keeps list+watch informers;
one more on the ledgers feeds this module, which keeps node -> held GPU indices as the
ledgers change, publishes it copy-on-write with a revision and a bounded log of the nodes
each change touched, and so answers ``held_snapshot(since)`` the way the in-memory store
does: the placement step then redoes only the nodes that changed.

What is held is exactly what a LIST would say (:func:`held_of`, the parsing the store has
always used): every entry of a ledger, an unreadable one included, under the node its
``data["node"]`` names. A stale answer is safe — ``reserve`` re-checks every GPU on the
ledger itself, so staleness only costs a conflict — but the store still writes through:
every ledger it reads or writes is applied here at once (its own reservations are seen by
the very next gang; a conflict's fresh read is seen by the re-solve).

Writes through and watch events race: a watch event may arrive after a newer version of the
same ledger was applied from a write. Versions are ordered by ``metadata.resourceVersion``,
compared as integers when both are integers (etcd's are: its revision) and otherwise taken
as newer — Kubernetes calls resourceVersions opaque, so without integers there is no order
to trust and the latest call wins.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from gputopo import names
from gputopo.cluster.reservations import HELD_LOG, HeldSnapshot

log = logging.getLogger(__name__)

#: The ledger's data key naming its node (every other key is a GPU index).
NODE_KEY = "node"
LEDGER_KIND = "ledger"  # the value of names.RESERVATION_LABEL on a ledger
LEDGER_SELECTOR = f"{names.RESERVATION_LABEL}={LEDGER_KIND}"


def ledger_entries(cm: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """GPU index -> entry of a ledger ConfigMap. An entry that is not a JSON object with a
    numeric ``at`` (edited by hand) is logged and returned as a committed entry of an
    unknown gang: whose GPU it was cannot be known, so it is never guessed free."""
    out: dict[int, dict[str, Any]] = {}
    for k, v in (cm.get("data") or {}).items():
        if k == NODE_KEY:
            continue
        try:
            entry = json.loads(v)
            # edited by hand? anything but an object with a numeric "at" is unreadable
            if not isinstance(entry, dict):
                raise TypeError(f"not a JSON object: {type(entry).__name__}")
            float(entry.get("at", 0))
            out[int(k)] = entry
        except (ValueError, TypeError):
            log.warning("ledger %s: unreadable entry %s=%r: treated as held",
                        (cm.get("metadata") or {}).get("name"), k, v)
            out[int(k) if k.isdigit() else -1] = {"gang": "?", "token": "?",
                                                  "state": "committed", "at": 0}
    return out


def held_of(cm: Mapping[str, Any]) -> tuple[str, frozenset[int]] | None:
    """(node, GPUs held) of one ledger; None when it names no node (a LIST skips it)."""
    node = (cm.get("data") or {}).get(NODE_KEY)
    if not node:
        return None
    return str(node), frozenset(ledger_entries(cm))


def is_ledger(cm: Mapping[str, Any]) -> bool:
    """True for a ConfigMap the ledger LIST (and watch) selects."""
    labels = (cm.get("metadata") or {}).get("labels") or {}
    return labels.get(names.RESERVATION_LABEL) == LEDGER_KIND


def _versions(a: str | None, b: str | None) -> tuple[int, int] | None:
    """Both versions as integers (etcd revisions), or None: opaque versions have no order
    to trust, and then the latest call wins."""
    try:
        return int(a), int(b)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _older(rv: str | None, than: str | None) -> bool:
    """True when version ``rv`` is known to precede ``than``."""
    both = _versions(rv, than)
    return both is not None and both[0] < both[1]


def _not_newer(rv: str | None, than: str | None) -> bool:
    """True when version ``rv`` is known to be ``than`` or to precede it."""
    both = _versions(rv, than)
    return both is not None and both[0] <= both[1]


def _meta(cm: Mapping[str, Any]) -> Mapping[str, Any]:
    m = cm.get("metadata")
    return m if isinstance(m, Mapping) else {}


class LedgerFeed:
    """node -> held GPUs from the ledgers, fed by a watch and by the store's own writes.

    Thread-safe (one lock, microseconds per change). ``synced`` is True once a full list
    went in and while the watch is not known broken (:meth:`pause`); a store serves from the
    feed only then, else it lists the ledgers itself.
    """

    def __init__(self, log_size: int = HELD_LOG) -> None:
        self._lock = threading.Lock()
        self._ledgers: dict[str, tuple[str | None, str | None, frozenset[int]]] = {}
        self._gone: dict[str, str | None] = {}  # ledger name -> version of its deletion
        self._names: dict[str, set[str]] = {}  # node -> ledgers naming it (normally one)
        self._held: dict[str, frozenset[int]] = {}  # published: never mutated once out
        self._rev = 0
        self._log: deque[tuple[int, frozenset[str]]] = deque(maxlen=log_size)
        self._listed = False
        self._paused = False
        self.lists = 0

    @property
    def synced(self) -> bool:
        return self._listed and not self._paused

    @property
    def revision(self) -> int:
        return self._rev

    # --- changes ---------------------------------------------------------------------------
    def observe(self, cm: Mapping[str, Any]) -> None:
        """A ledger as the API returned it (a read, a write, a watch event)."""
        with self._lock:
            touched: set[str] = set()
            self._put(cm, touched)
            self._publish(touched)

    def deleted(self, name: str, resource_version: str | None = None) -> None:
        """The ledger ``name`` was deleted (at ``resource_version``, when known)."""
        with self._lock:
            touched: set[str] = set()
            self._drop(name, resource_version, touched)
            self._publish(touched)

    def watched(self, etype: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED / MODIFIED / DELETED) of the ledger informer."""
        if etype == "DELETED":
            self.deleted(str(_meta(obj).get("name") or ""), _meta(obj).get("resourceVersion"))
        elif etype in ("ADDED", "MODIFIED"):
            self.observe(obj)

    def relisted(self, items: Iterable[Mapping[str, Any]], resource_version: str | None
                 ) -> None:
        """A full LIST taken at ``resource_version`` (the first one, or after 410 Gone or a
        reconnect): afterwards the feed holds exactly the listed ledgers, except versions
        applied here that are newer than the list (a write-through that raced it)."""
        with self._lock:
            touched: set[str] = set()
            listed = {str(_meta(cm).get("name") or ""): cm for cm in items}
            for name, (rv, _, _) in list(self._ledgers.items()):
                if name not in listed and not _older(resource_version, rv):
                    self._drop(name, resource_version, touched)
            for cm in listed.values():
                self._put(cm, touched)
            # tombstones the list covers are settled: the list no longer holds them
            self._gone = {n: rv for n, rv in self._gone.items()
                          if _older(resource_version, rv)}
            self._publish(touched)
            self._listed = True
            self._paused = False
            self.lists += 1

    def pause(self) -> None:
        """The watch broke (API away, 403 on watch): not synced until :meth:`resume`."""
        self._paused = True

    def resume(self) -> None:
        """The watch is connected again (it replays what it missed from its version)."""
        self._paused = False

    def _put(self, cm: Mapping[str, Any], touched: set[str]) -> None:
        m = _meta(cm)
        name = str(m.get("name") or "")
        rv = m.get("resourceVersion")
        rv = None if rv is None else str(rv)
        if name in self._gone and _not_newer(rv, self._gone[name]):
            return  # a version from before its deletion (equal: the deleted one itself)
        cur = self._ledgers.get(name)
        if cur is not None and _older(rv, cur[0]):
            return  # an older event than what a write-through already applied
        self._gone.pop(name, None)
        got = held_of(cm)
        node, gpus = (got[0], got[1]) if got is not None else (None, frozenset[int]())
        self._ledgers[name] = (rv, node, gpus)
        if cur is not None and (cur[1], cur[2]) == (node, gpus):
            return
        if cur is not None and cur[1] is not None and cur[1] != node:
            self._names[cur[1]].discard(name)
            touched.add(cur[1])
        if node is not None:
            self._names.setdefault(node, set()).add(name)
            touched.add(node)

    def _drop(self, name: str, rv: str | None, touched: set[str]) -> None:
        cur = self._ledgers.get(name)
        if cur is not None and rv is not None and _older(rv, cur[0]):
            return  # deleted before a version applied since: that version stands
        self._gone[name] = rv if rv is not None else (cur[0] if cur is not None else None)
        if cur is None:
            return
        del self._ledgers[name]
        if cur[1] is not None:
            self._names[cur[1]].discard(name)
            touched.add(cur[1])

    def _publish(self, touched: set[str]) -> None:
        if not touched:
            return
        held = dict(self._held)
        for node in touched:
            names_ = self._names.get(node)
            gpus = frozenset[int]().union(*(self._ledgers[n][2] for n in names_)) \
                if names_ else frozenset[int]()
            if not names_:
                self._names.pop(node, None)
            if gpus:
                held[node] = gpus
            else:
                held.pop(node, None)
        if held == self._held:
            return
        changed = frozenset(n for n in touched if held.get(n) != self._held.get(n))
        self._held = held
        self._rev += 1
        self._log.append((self._rev, changed))

    # --- answers ---------------------------------------------------------------------------
    def held_gpus(self) -> dict[str, set[int]]:
        """node -> GPUs held (a fresh copy, the caller's to modify)."""
        with self._lock:
            held = self._held
        return {node: set(gpus) for node, gpus in held.items()}

    def snapshot(self, since: int | None = None) -> HeldSnapshot:
        """The held GPUs now (a mapping never modified afterwards), the revision, and the
        nodes whose GPUs changed after revision ``since`` (None when not asked or when the
        change log no longer reaches back that far; empty when nothing changed)."""
        with self._lock:
            return HeldSnapshot.from_log(self._rev, self._held, self._log, since)
