"""Which GPUs every gang record hands out, kept from a watch of the records, not a LIST per gang.

Why: before claiming GPUs on a node's ledger, the Kubernetes store asks which GPUs of that
node other gangs' records hand out (``_recorded_elsewhere``): a ledger deleted or emptied by
hand forgets them, and claiming by the ledger alone would hand them out twice. Answered by
a LIST of every gang record and a JSON parse of each, that cost 7-11 ms CPU per new gang at
250 gangs — the biggest cost of a new gang once held GPUs came from the ledger feed. The
cluster view watches the records (ConfigMaps in ``gputopo-system`` labelled
``gputopo.io/reservation=gang``) into this feed, which keeps node -> GPU -> the entry each
record implies, and the store asks it only for the nodes it is about to claim on. The
feeding rules (write-through of the store's own record writes and deletions, version
order, tombstones, re-list after 410, synced) are :mod:`gputopo.cluster.watch_feed`'s.

What a record holds is exactly what the LIST path computes (:func:`record_holds`, used by
both); when two records name one GPU (never written by gputopo), the record whose name
sorts last wins, as in a LIST (the API server lists by name).

Why an answer a few milliseconds behind is acceptable here (docs/reservations.md, "Why no
GPU is handed out twice"): this check is not what keeps two gangs off one GPU — the
ledger's compare-and-swap is, and it does not read the feed (every claim reads its ledger,
and an entry is taken over only after a GET of its gang record says it is dead). The check
only repairs a ledger an operator lost by hand. Lag can err two ways:

* a record the feed already dropped or changed but which still names the GPU (released,
  slot moved): the store would restore an entry for a GPU nobody holds — and for a moved
  slot, with the gang's live token, held until the gang ends. So before restoring, the
  store GETs each record concerned and restores only what the fresh record still names
  (the LIST path does the same: it had this race too, between its LIST and the claim).
* a record the feed has not seen yet (created within the lag): missed only if its node's
  ledger was also lost by hand within the same milliseconds — the same race the LIST had
  between its LIST and the claim, a few ms wider. A watch that stalls without an error
  would widen it to about five minutes (the watch's timeout, 300 s, or the read timeout
  30 s later; the view then reconnects and replays): so when the ledger is **absent**
  (deleted by hand — gputopo never deletes one; or the node's first reservation) the store
  lists the records as before, and only a ledger **emptied** by hand while the watch
  silently stalls relies on the feed: the entries of a record created during the stall
  can then be claimed by the next gang (the one case this check is weaker than a LIST).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from gputopo import names
from gputopo.cluster.reservations import GangReservation
from gputopo.cluster.reserved_requests import pending_requests, summed
from gputopo.cluster.watch_feed import WatchFeed, meta

log = logging.getLogger(__name__)

GANG_KIND = "gang"  # the value of names.RESERVATION_LABEL on a gang record
GANG_SELECTOR = f"{names.RESERVATION_LABEL}={GANG_KIND}"
RECORD_KEY = "reservation"  # the record's data key: the GangReservation as JSON

#: GPU -> the ledger entry a record implies for it, per node.
NodeEntries = dict[int, str]


def parse_record(cm: Mapping[str, Any] | None) -> GangReservation | None:
    """The reservation a gang record holds; None when absent or unreadable (edited by hand:
    logged, and skipped as a LIST skips it)."""
    if cm is None:
        return None
    m = meta(cm)
    try:
        return GangReservation.from_json(json.loads(cm["data"][RECORD_KEY]),
                                         version=m["resourceVersion"])
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        log.warning("reservation %s unreadable: %s", m.get("name"), exc)
        return None


def record_holds(res: GangReservation) -> dict[str, NodeEntries]:
    """node -> {GPU: entry}: the committed ledger entries the record ``res`` hands out."""
    entry = json.dumps({"gang": res.key.uid, "token": res.token, "state": "committed",
                        "at": res.created_at}, sort_keys=True)
    return {node: dict.fromkeys(gpus, entry) for node, gpus in res.gpus().items()}


def is_gang_record(cm: Mapping[str, Any]) -> bool:
    """True for a ConfigMap the gang-record LIST (and watch) selects."""
    labels = meta(cm).get("labels") or {}
    return labels.get(names.RESERVATION_LABEL) == GANG_KIND


#: What the feed keeps of one record: its gang's uid, what it hands out, and the requests
#: its slots without a replica hold per node (None: unreadable).
Kept = tuple[str, dict[str, NodeEntries], dict[str, dict[str, int]]] | None


class GangRecordFeed(WatchFeed[Kept]):
    """node -> GPU -> record -> entry, from the gang records; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        # node -> GPU -> record name -> (uid, entry); a GPU is normally in one record only
        self._by_node: dict[str, dict[int, dict[str, tuple[str, str]]]] = {}
        # record name -> node -> requests of its slots without a replica (non-empty only:
        # the few gangs whose pods are still coming)
        self._pending: dict[str, dict[str, dict[str, int]]] = {}

    def _parse(self, obj: Mapping[str, Any]) -> Kept:
        res = parse_record(obj)
        return None if res is None else (res.key.uid, record_holds(res),
                                         pending_requests([res]))

    def _changed(self, name: str, old: Kept, new: Kept) -> None:
        if old == new:
            return
        self._pending.pop(name, None)
        if new is not None and new[2]:
            self._pending[name] = new[2]
        if old is not None:
            for node, gpus in old[1].items():
                on_node = self._by_node[node]
                for g in gpus:
                    on_node[g].pop(name, None)
                    if not on_node[g]:
                        del on_node[g]
                if not on_node:
                    del self._by_node[node]
        if new is not None:
            uid, holds, _ = new
            for node, gpus in holds.items():
                on_node = self._by_node.setdefault(node, {})
                for g, entry in gpus.items():
                    on_node.setdefault(g, {})[name] = (uid, entry)

    def pending_requests(self) -> dict[str, dict[str, int]]:
        """node -> requests of every record's slots without a replica (the store's
        :meth:`pending_requests`, from memory)."""
        with self._lock:
            return summed(self._pending.values())

    def records(self) -> int:
        """How many gang records the feed knows (readable or not)."""
        return len(self._objects)

    def recorded_elsewhere(self, uid: str, nodes: Iterable[str] | None = None
                           ) -> dict[str, NodeEntries]:
        """node -> {GPU: entry} of every record of a gang other than ``uid``, on ``nodes``
        (every node when None): the answer of a LIST of the records, from memory."""
        out: dict[str, NodeEntries] = {}
        with self._lock:
            for node in (list(self._by_node) if nodes is None else nodes):
                for g, by_name in (self._by_node.get(node) or {}).items():
                    others = [n for n, (u, _) in by_name.items() if u != uid]
                    if others:
                        out.setdefault(node, {})[g] = by_name[max(others)][1]
        return out
