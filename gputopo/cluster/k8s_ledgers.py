"""Each node's GPU ledger in the API (claim, commit, roll back) and the store's API calls.

Why apart from :mod:`gputopo.cluster.k8s_reservations`: the ledger protocol (a GPU is held
by exactly one entry of its node's ConfigMap; a claim is written with the
``resourceVersion`` it read, so two writers racing for a GPU collide and one gets 409; an
entry is dead when no gang record names its token) is what keeps a GPU from being handed
out twice, and is read and reviewed on its own. The store
(:class:`~gputopo.cluster.k8s_reservations.KubernetesReservationStore`) builds the
``ReservationStore`` protocol on it: gang records, slots, release and expiry.
docs/reservations.md has the whole algorithm.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from gputopo import names
from gputopo.cluster.configmap_calls import ConfigMapCalls
from gputopo.cluster.gang_record_feed import (
    GANG_KIND,
    RECORD_KEY,
    GangRecordFeed,
    NodeEntries,
    is_gang_record,
    parse_record,
    record_holds,
)
from gputopo.cluster.ledger_feed import NODE_KEY, LedgerFeed, is_ledger, ledger_entries
from gputopo.cluster.metrics import RESERVATION_CONFLICTS
from gputopo.cluster.reservations import (
    DEFAULT_TTL_SECONDS,
    GangKey,
    GangReservation,
    ReservationConflict,
    ReservationUnavailable,
    admission_deadline,
)

log = logging.getLogger("gputopo.cluster.k8s_reservations")  # its messages, as before the split

#: A "claimed" ledger entry older than this belongs to a writer that died mid-reserve.
DEFAULT_CLAIM_GRACE_SECONDS = 60.0
MAX_ATTEMPTS = 100  # 409 retries per object before giving up (ReservationUnavailable)
GANG_PREFIX = "gputopo-gang-"
LEDGER_PREFIX = "gputopo-gpus-"
DATA_KEY = RECORD_KEY


def ledger_name(node: str) -> str:
    """A valid ConfigMap name for ``node``'s ledger: readable prefix + hash (names may clash
    after sanitising, and node names may be up to 253 characters)."""
    safe = re.sub(r"[^a-z0-9.-]", "-", node.lower()).strip(".-")[:200]
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"{LEDGER_PREFIX}{safe}-{digest}"


def gang_name(key: GangKey) -> str:
    """The gang ConfigMap's name: from the job uid alone, so a recreated job is a new gang."""
    return gang_name_for_uid(key.uid)


def gang_name_for_uid(uid: str) -> str:
    safe = re.sub(r"[^a-z0-9-]", "-", uid.lower()).strip("-")[:200]
    digest = hashlib.sha256(uid.encode()).hexdigest()[:8]
    return f"{GANG_PREFIX}{safe}-{digest}"


TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


class ConfigMapLedgers:
    """The reservation store's API access and its per-node GPU ledgers (the base of
    :class:`~gputopo.cluster.k8s_reservations.KubernetesReservationStore`).

    ``stats`` counts what happened (``api_409`` retries, ``gpu_taken`` conflicts, ...), for
    tests and the drills; the same counts go to the ``gputopo_reservation_conflicts_total``
    metric.
    """

    def __init__(
        self, api_client: client.ApiClient, *, namespace: str = names.GPUTOPO_NAMESPACE,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        claim_grace_seconds: float = DEFAULT_CLAIM_GRACE_SECONDS,
        request_timeout: float = 10.0, clock: Callable[[], float] = time.time,
        held_cache_seconds: float = 0.0, expire_interval_seconds: float = 10.0,
        held_feed: LedgerFeed | None = None, gang_feed: GangRecordFeed | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        # the same requests as self.core's generated methods, without their per-call
        # validation and re-serialisation (gputopo/cluster/configmap_calls.py)
        self.calls = ConfigMapCalls(api_client, namespace)
        self.namespace = namespace
        self.ttl_seconds = float(ttl_seconds)
        self.claim_grace_seconds = float(claim_grace_seconds)
        self.request_timeout = request_timeout
        self._clock = clock
        self.stats: Counter[str] = Counter()
        # held_gpus() is read once per gang solved; listing every ledger each time costs
        # ~70 ms at 1,000 nodes. A short cache (opt-in) is safe for correctness: reserve()
        # re-checks every GPU on the ledger itself, so a stale view only costs a conflict,
        # and a conflict drops the cache. But a stale view also hides GPUs another process
        # released a moment ago, which can make a gang look unplaceable: hence off by
        # default (docs/reservations.md, Limits). A cluster view watching the ledgers makes
        # both moot: ``held_feed`` (attached by gputopo.cluster.view.connect) answers from
        # memory while its watch is synced, and every ledger this store reads or writes is
        # applied to it at once (write-through), so its own reservations and a conflict's
        # fresh read are seen by the very next gang.
        self.held_feed = held_feed
        # Likewise ``gang_feed`` (also attached by connect) answers which GPUs other gangs'
        # records hand out, asked before every claim, instead of a LIST of every record;
        # every record this store reads, writes or deletes is applied to it at once. Why a
        # feed that lags is safe for that check: gputopo/cluster/gang_record_feed.py.
        self.gang_feed = gang_feed
        self.held_cache_seconds = float(held_cache_seconds)
        self.expire_interval_seconds = float(expire_interval_seconds)
        self._held: tuple[float, dict[str, set[int]]] | None = None
        # record name -> (resourceVersion, its reservation JSON, the parsed reservation) of
        # the last LIST of the records: a LIST (list(), the sweep, the record check without
        # the feed) re-parses only the records that changed since (see _parse_listed)
        self._parsed: dict[str, tuple[Any, Any, GangReservation]] = {}
        self._last_expire = float("-inf")
        self._cache_lock = threading.Lock()
        self._budget = threading.local()  # .until: this thread's deadline (see deadline())

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Every API call this thread makes inside the block ends within ``seconds`` from
        now; a call that cannot start in time raises ReservationUnavailable at once.

        Why: the webhook must answer within its ``timeoutSeconds`` (5) even when the API
        server is slow; an admission makes several calls (read the gang, claim ledgers,
        assign a slot), each of which alone may wait ``request_timeout``. Cut short, the
        store is left as after any lost connection: claims without a gang record die after
        the claim grace, a recorded gang lives until its TTL.
        """
        until = time.monotonic() + seconds
        arrived_by = admission_deadline()  # the request's own, counted from its arrival
        self._budget.until = until if arrived_by is None else min(until, arrived_by)
        try:
            yield
        finally:
            self._budget.until = None

    def _timeout(self) -> float:
        until = getattr(self._budget, "until", None)
        if until is None:
            return self.request_timeout
        left = until - time.monotonic()
        if left <= 0:
            raise ReservationUnavailable("the API server answers too slowly: this "
                                         "admission's time for reservations is spent")
        return min(self.request_timeout, left)

    # --- raw API helpers (dicts, not models: cheaper and keeps the wire form) ---------------
    def _count(self, what: str) -> None:
        self.stats[what] += 1
        if what in ("api_409", "gpu_taken", "lost_claim"):
            RESERVATION_CONFLICTS.labels(what).inc()

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            data = self.calls.read(name, timeout=self._timeout())
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self._seen(orjson.loads(data))

    def _seen(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` as the API just returned it; a ledger goes to the held-GPU feed too, a
        gang record to the gang-record feed."""
        feed = self.held_feed
        if feed is not None and is_ledger(obj):
            feed.observe(obj)
        gangs = self.gang_feed
        if gangs is not None and is_gang_record(obj):
            gangs.observe(obj)
        return obj

    def _create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The created object, or None when it already exists (409 AlreadyExists)."""
        return self._write(lambda: self.calls.create(body, timeout=self._timeout()))

    def _replace(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The updated object, or None on 409 Conflict (stale resourceVersion)."""
        return self._write(lambda: self.calls.replace(obj["metadata"]["name"], obj,
                                                      timeout=self._timeout()))

    def _write(self, call: Callable[[], bytes]) -> dict[str, Any] | None:
        """The object a write returned, or None (counted) when the API answered 409."""
        try:
            data = call()
        except ApiException as exc:
            if exc.status == 409:
                self._count("api_409")
                return None
            raise
        return self._seen(orjson.loads(data))

    def _delete(self, name: str, *, uid: str | None = None) -> bool:
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self.calls.delete(name, body, timeout=self._timeout())
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        if self.held_feed is not None and name.startswith(LEDGER_PREFIX):
            self.held_feed.deleted(name)
        if self.gang_feed is not None and name.startswith(GANG_PREFIX):
            self.gang_feed.deleted(name)
        return True

    def _list(self, kind: str) -> list[dict[str, Any]]:
        data = self.calls.list(f"{names.RESERVATION_LABEL}={kind}", timeout=self._timeout())
        return list(orjson.loads(data).get("items") or [])

    def _labels(self, kind: str) -> dict[str, str]:
        return {names.RESERVATION_LABEL: kind, names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}

    def _now(self, now: float | None) -> float:
        return float(self._clock()) if now is None else float(now)

    # --- ledger entries -----------------------------------------------------------------------
    _entries = staticmethod(ledger_entries)

    def _gang_token(self, uid: str, cache: dict[str, str | None]) -> str | None:
        if uid not in cache:
            cm = self._find_gang_by_uid(uid)
            cache[uid] = self._token_of(cm)
        return cache[uid]

    @staticmethod
    def _token_of(cm: dict[str, Any] | None) -> str | None:
        if cm is None:
            return None
        try:
            return str(json.loads(cm["data"][DATA_KEY]).get("token", ""))
        except (KeyError, ValueError, TypeError, AttributeError):
            return None

    def _find_gang_by_uid(self, uid: str) -> dict[str, Any] | None:
        return self._read(gang_name_for_uid(uid))

    def _young_claim(self, entry: dict[str, Any], now: float) -> bool:
        return entry.get("state") == "claimed" and \
            now - float(entry.get("at", 0)) <= self.claim_grace_seconds

    def _dead(self, entry: dict[str, Any], now: float, cache: dict[str, str | None]) -> bool:
        """True when the entry no longer holds its GPU: it is not a claim still within its
        grace, and no gang record names its token (released, lost the race, or its writer
        died before creating the record). A claim whose record exists is live even when
        old: its writer died between the record and the commit, and a restarted webhook
        may already be handing out its slots."""
        if self._young_claim(entry, now) or entry.get("gang") == "?":
            return False
        return self._gang_token(str(entry.get("gang")), cache) != entry.get("token")

    _parse_gang = staticmethod(parse_record)

    def _parse_listed(self, items: list[dict[str, Any]]) -> list[GangReservation | None]:
        """:func:`parse_record` of each listed record, reusing the last LIST's answer for
        a record whose resourceVersion and reservation JSON are both unchanged (the two
        inputs of the parse: the same inputs, the same reservation).

        Why: the placement step lists the records for every gang that finds no room (its
        in-flight analysis), and parsing 250 records costs ~7 ms while nearly all of them
        are the ones parsed last time. Unreadable records are not kept (re-parsed, and
        logged, at every LIST, as before); the memo holds the last LIST's records only.
        """
        last, memo = self._parsed, {}
        out: list[GangReservation | None] = []
        for cm in items:
            m = cm.get("metadata") if isinstance(cm, dict) else None
            data = cm.get("data") if isinstance(cm, dict) else None
            name = m.get("name") if isinstance(m, dict) else None
            rv = m.get("resourceVersion") if isinstance(m, dict) else None
            text = data.get(DATA_KEY) if isinstance(data, dict) else None
            hit = last.get(name) if name and rv and isinstance(text, str) else None
            if hit is not None and hit[0] == rv and hit[1] == text:
                res: GangReservation | None = hit[2]
            else:
                res = self._parse_gang(cm)
            if res is not None and name and rv and isinstance(text, str):
                memo[name] = (rv, text, res)
            out.append(res)
        self._parsed = memo
        return out

    def _recorded_elsewhere(self, uid: str, nodes: Iterable[str] | None = None, *,
                            listed: bool = False) -> dict[str, NodeEntries]:
        """node → {GPU: entry} of every OTHER gang's record, on ``nodes`` (all when None):
        what the ledgers must hold.

        Why: a ledger deleted or emptied by hand (or lost) forgets GPUs whose gang record
        still hands them out; claiming by the ledger alone would give them out twice.
        From the gang-record feed while it is synced (unless ``listed``), else one LIST of
        the records.
        """
        feed = self.gang_feed
        if not listed and feed is not None and feed.synced:
            return feed.recorded_elsewhere(uid, nodes)
        wanted = None if nodes is None else set(nodes)
        out: dict[str, NodeEntries] = {}
        for other in self._parse_listed(self._list(GANG_KIND)):
            if other is None or other.key.uid == uid:
                continue
            for node, entries in record_holds(other).items():
                if wanted is None or node in wanted:
                    out.setdefault(node, {}).update(entries)
        return out

    def _still_recorded(self, node: str, missing: NodeEntries) -> NodeEntries:
        """Of ``missing`` (GPUs of ``node`` that records held a moment ago but its ledger
        lacks), those a fresh GET of their record still names, with its entry now.

        Why: the records were read earlier (a LIST, or the feed, which may lag); a gang
        released or whose slot moved since must not get an entry back — for a moved slot
        it would carry the gang's live token and hold the GPU until the gang ends."""
        uids: dict[str, list[int]] = {}
        for g, e in missing.items():
            try:
                uid = str(json.loads(e)["gang"])
            except (ValueError, KeyError, TypeError):
                continue
            uids.setdefault(uid, []).append(g)
        out: NodeEntries = {}
        for uid, gpus in uids.items():
            res = self._parse_gang(self._find_gang_by_uid(uid))
            holds = record_holds(res).get(node, {}) if res is not None else {}
            out.update({g: holds[g] for g in gpus if g in holds})
        return out

    def _claim(self, node: str, gpus: frozenset[int], res: GangReservation,
               recorded: NodeEntries | None = None) -> dict[str, Any]:
        """Claim ``gpus`` of ``node`` for ``res`` (step 2 of docs/reservations.md); the
        ledger as the API returned it after the claim was written."""
        # Ledger timestamps are always wall-clock (never the caller's ``now``): the claim
        # grace is about real time passing for a writer that may have died.
        t = float(self._clock())
        entry = json.dumps({"gang": res.key.uid, "token": res.token, "state": "claimed",
                            "at": t}, sort_keys=True)
        name = ledger_name(node)
        recorded = recorded or {}
        relisted = False
        for _ in range(MAX_ATTEMPTS):
            cm = self._read(name)
            if cm is None and self.gang_feed is not None and not relisted:
                # No ledger: deleted by hand (gputopo never deletes one) or the node's
                # first use. The feed may lag (a stalled watch: up to its timeout), so
                # here, rarely, the records are listed as without a feed.
                recorded = self._recorded_elsewhere(res.key.uid, [node], listed=True
                                                    ).get(node, {})
                relisted = True
            entries = self._entries(cm) if cm is not None else {}
            # GPUs another gang's record holds but this ledger forgot: put them back
            missing = {g: e for g, e in recorded.items() if g not in entries}
            if missing:
                missing = self._still_recorded(node, missing)
            cache: dict[str, str | None] = {}
            taken = sorted(g for g in gpus if (g in entries
                           and entries[g].get("token") != res.token
                           and not self._dead(entries[g], t, cache)) or g in missing)
            data = dict(cm.get("data") or {}) if cm is not None else {NODE_KEY: node}
            data.update({str(g): e for g, e in missing.items()})
            if not taken:
                data.update({str(g): entry for g in gpus})
            elif not missing:
                self._count("gpu_taken")
                raise ReservationConflict(
                    f"{res.key}: GPUs {taken} of node {node} are held by another gang",
                    {node: taken})
            if cm is None:
                written = self._create({"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": name, "namespace": self.namespace,
                                                     "labels": self._labels("ledger")},
                                        "data": data})
            else:
                cm["data"] = data
                written = self._replace(cm)
            if written is None:
                continue
            if missing:
                log.warning("ledger %s: restored GPUs %s of other gangs' records",
                            name, sorted(missing))
            if taken:
                self._count("gpu_taken")
                raise ReservationConflict(
                    f"{res.key}: GPUs {taken} of node {node} are held by another gang",
                    {node: taken})
            return written
        raise ReservationUnavailable(f"ledger {name}: gave up after {MAX_ATTEMPTS} conflicts")

    def _commit(self, node: str, gpus: frozenset[int], res: GangReservation,
                known: dict[str, Any] | None = None) -> None:
        """Mark this attempt's claims on ``node`` committed (step 4), failing with
        ReservationConflict when one of them was taken over.

        ``known``: the ledger as this attempt's claim wrote it, taken as the first read
        instead of a GET. Why that is the same check: the commit is a PUT carrying the
        ``resourceVersion`` of what was checked, so it lands only if nobody wrote the
        ledger since the claim — i.e. only if ``known`` is still the ledger. Any write in
        between (another gang's claim, a takeover, a deletion) makes it fail with 409 (404
        when deleted), and then the ledger is read and checked afresh, as before."""
        name = ledger_name(node)
        for _ in range(MAX_ATTEMPTS):
            cm, known = (known, None) if known is not None else (self._read(name), None)
            entries = self._entries(cm) if cm is not None else {}
            lost = sorted(g for g in gpus if entries.get(g, {}).get("token") != res.token)
            if cm is None or lost:
                self._count("lost_claim")
                raise ReservationConflict(
                    f"{res.key}: claim on GPUs {lost} of node {node} was taken over "
                    "(this writer was slower than the claim grace)", {node: lost})
            data = dict(cm.get("data") or {})
            for g in gpus:
                e = dict(entries[g], state="committed")
                data[str(g)] = json.dumps(e, sort_keys=True)
            cm["data"] = data
            try:
                if self._replace(cm) is not None:
                    return
            except ApiException as exc:
                if exc.status != 404:
                    raise
                # deleted since it was read (only possible for a ``known`` ledger, or by
                # hand): the next read finds it gone and reports the lost claim
        raise ReservationUnavailable(f"ledger {name}: gave up after {MAX_ATTEMPTS} conflicts")

    def _rollback(self, nodes: list[str], token: str) -> None:
        for node in nodes:
            self._unclaim(node, token)
        if nodes:
            self._count("rollback")

    def _unclaim(self, node: str, token: str, only: frozenset[int] | None = None) -> None:
        """Remove this token's entries (of GPUs ``only``, if given) from the node's ledger
        (no-op when none are left)."""
        name = ledger_name(node)
        for _ in range(MAX_ATTEMPTS):
            cm = self._read(name)
            if cm is None:
                return
            data = dict(cm.get("data") or {})
            mine = [k for k, e in self._entries(cm).items() if e.get("token") == token
                    and (only is None or k in only)]
            if not mine:
                return
            for g in mine:
                data.pop(str(g), None)
            cm["data"] = data
            if self._replace(cm) is not None:
                return
