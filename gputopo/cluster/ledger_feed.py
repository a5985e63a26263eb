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

The feeding rules (write-through, version order, tombstones, re-list, synced) are the
shared ones of :mod:`gputopo.cluster.watch_feed`; this module only says what a ledger holds.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from gputopo import names
from gputopo.cluster.reservations import HELD_LOG, HeldSnapshot
from gputopo.cluster.watch_feed import WatchFeed

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


#: What the feed keeps of one ledger: the node it names (None: none) and its GPUs held.
Held = tuple[str | None, frozenset[int]]


class LedgerFeed(WatchFeed[Held]):
    """node -> held GPUs from the ledgers, fed by a watch and by the store's own writes.

    Thread-safe (one lock, microseconds per change). ``synced`` is True once a full list
    went in and while the watch is not known broken (:meth:`pause`); a store serves from the
    feed only then, else it lists the ledgers itself.
    """

    def __init__(self, log_size: int = HELD_LOG) -> None:
        super().__init__()
        self._names: dict[str, set[str]] = {}  # node -> ledgers naming it (normally one)
        self._held: dict[str, frozenset[int]] = {}  # published: never mutated once out
        self._rev = 0
        self._log: deque[tuple[int, frozenset[str]]] = deque(maxlen=log_size)
        self._touched: set[str] = set()  # nodes changed in the batch being applied

    @property
    def revision(self) -> int:
        return self._rev

    # --- changes (under the lock) ----------------------------------------------------------
    def _parse(self, obj: Mapping[str, Any]) -> Held:
        got = held_of(obj)
        return (got[0], got[1]) if got is not None else (None, frozenset[int]())

    def _changed(self, name: str, old: Held | None, new: Held | None) -> None:
        if old == new:
            return
        if old is not None and old[0] is not None and (new is None or old[0] != new[0]):
            self._names[old[0]].discard(name)
            self._touched.add(old[0])
        if new is not None and new[0] is not None:
            self._names.setdefault(new[0], set()).add(name)
            self._touched.add(new[0])

    def _settled(self) -> None:
        touched, self._touched = self._touched, set()
        if not touched:
            return
        held = dict(self._held)
        for node in touched:
            names_ = self._names.get(node)
            gpus = frozenset[int]().union(*(self._objects[n][1][1] for n in names_)) \
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
