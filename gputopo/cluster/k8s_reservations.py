"""Gang reservations kept in the Kubernetes API, safe for any number of webhook replicas.

Why ConfigMaps with optimistic concurrency: every webhook replica must see every other's
promises, survive restarts, and never hand out one GPU twice. The API server gives exactly
one primitive for that: an update carrying ``metadata.resourceVersion`` succeeds only if
nobody wrote the object since it was read (else 409 Conflict, and we re-read and retry).

Layout (docs/reservations.md has the full argument), all in ``gputopo-system``:

* one **ledger** ConfigMap per node (``gputopo-gpus-<node>-<hash>``): data key = GPU index,
  value = JSON ``{"gang": uid, "token": t, "state": "claimed"|"committed", "at": epoch}``.
  A GPU is held by exactly one entry, so two writers racing for it collide on the same
  object and one of them gets 409. Per node (not one ledger) because 5,000 nodes x 8 GPUs
  would not fit the 1 MiB object limit and every reservation would contend on one object.
* one **gang** ConfigMap per job (``gputopo-gang-<job uid>``): the slots, which replica got
  which slot, TTL, and the ``token`` of the attempt that won. Creating it is the commit
  point: if two replicas reserve the same gang, one create gets 409 AlreadyExists and rolls
  back.

``reserve``: claim each node's GPUs in sorted node order (state "claimed", unique token),
roll back on any conflict; create the gang ConfigMap; mark the claims "committed".
An entry is dead (free to take) when it is not a claim younger than the claim grace and
no gang ConfigMap names its token (released; a loser that crashed before rolling back; a
writer that died before creating the record). A claim whose record exists stays live (its
writer died between record and commit; the sweep commits it). A slow writer whose claim
was taken over finds out when it commits (its entry is no longer its own) and aborts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from gputopo.cluster.gang_record_feed import (
    GANG_KIND,
)
from gputopo.cluster.k8s_ledgers import (
    DATA_KEY,
    GANG_PREFIX,
    MAX_ATTEMPTS,
    TRANSPORT_ERRORS,
    ConfigMapLedgers,
    gang_name,
    ledger_name,
)
from gputopo.cluster.ledger_feed import NODE_KEY
from gputopo.cluster.reservations import (
    GangKey,
    GangReservation,
    HeldSnapshot,
    ReplicaKey,
    ReservationConflict,
    ReservationUnavailable,
    pick_slot,
)
from gputopo.cluster.reserved_requests import pending_requests
from gputopo.placement.types import Placement, ReplicaSlot

log = logging.getLogger(__name__)

#: also importable from here, where they were first
__all__ = ["DATA_KEY", "GANG_PREFIX", "KubernetesReservationStore", "gang_name", "ledger_name"]

class KubernetesReservationStore(ConfigMapLedgers):
    """:class:`~gputopo.cluster.reservations.ReservationStore` on ConfigMaps: the gang
    records and slots on top of the ledgers of :class:`~gputopo.cluster.k8s_ledgers.
    ConfigMapLedgers` (whose constructor it takes)."""

    # --- reserve ----------------------------------------------------------------------------
    def get(self, key: GangKey) -> GangReservation | None:
        try:
            cm = self._read(gang_name(key))
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            raise ReservationUnavailable(f"reading reservation of {key}: {exc}") from exc
        return self._parse_gang(cm)

    def reserve(
        self, key: GangKey, placement: Placement, *, ttl_seconds: float | None = None,
        now: float | None = None, order: Iterable[str] = (),
        network: Mapping[str, Any] | None = None, requests: Mapping[str, int] | None = None,
    ) -> GangReservation:
        t = self._now(now)
        ttl = self.ttl_seconds if ttl_seconds is None else float(ttl_seconds)
        token = uuid.uuid4().hex
        res = GangReservation.from_placement(key, placement, now=t, ttl_seconds=ttl,
                                             token=token, order=order, network=network,
                                             requests=requests)
        try:
            existing = self.get(key)
            if existing is not None:
                return existing
            try:
                got = self._reserve(res)
                self._held_add(got)
                return got
            except ReservationConflict:
                self._drop_held()
                # Often the "other gang" is this gang, reserved by another webhook replica
                # a moment ago: then its reservation is the answer, not a re-solve.
                existing = self.get(key)
                if existing is not None:
                    return existing
                raise
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            raise ReservationUnavailable(f"reserving GPUs for {key}: {exc}") from exc

    def _reserve(self, res: GangReservation) -> GangReservation:
        wanted = res.gpus()
        claimed: list[str] = []
        written: dict[str, dict[str, Any]] = {}  # node -> its ledger as the claim wrote it
        created: dict[str, Any] | None = None
        try:
            started = float(self._clock())
            recorded = self._recorded_elsewhere(res.key.uid, wanted)
            for node in sorted(wanted):
                written[node] = self._claim(node, wanted[node], res, recorded.get(node, {}))
                claimed.append(node)
            if float(self._clock()) - started > self.claim_grace_seconds / 2:
                # So slow that others may soon take these claims for abandoned: give up
                # before creating the record, rather than find out after.
                raise ReservationConflict(f"{res.key}: claiming took longer than half the "
                                          "claim grace; retry")
            created = self._create({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": gang_name(res.key), "namespace": self.namespace,
                             "labels": self._labels("gang")},
                "data": {DATA_KEY: json.dumps(res.to_json(), sort_keys=True)},
            })
            if created is None:  # another webhook replica reserved this gang first
                self._rollback(claimed, res.token)
                claimed = []
                winner = self.get(res.key)
                if winner is None:
                    raise ReservationConflict(f"{res.key}: reserved concurrently, then gone")
                return winner
            for node in sorted(wanted):
                self._commit(node, wanted[node], res, written.pop(node))
        except BaseException:
            if created is not None:
                self._delete(created["metadata"]["name"], uid=created["metadata"]["uid"])
            with contextlib.suppress(ApiException, *TRANSPORT_ERRORS):
                self._rollback(claimed, res.token)
            raise
        self._count("reserved")
        return GangReservation.from_json(res.to_json(),
                                         version=created["metadata"]["resourceVersion"])

    # --- slots, release, expiry -------------------------------------------------------------
    def assign_slot(
        self, key: GangKey, replica: ReplicaKey, *, now: float | None = None
    ) -> tuple[GangReservation, ReplicaSlot] | None:
        t = self._now(now)
        try:
            for _ in range(MAX_ATTEMPTS):
                cm = self._read(gang_name(key))
                res = self._parse_gang(cm)
                if cm is None or res is None:
                    return None
                n = pick_slot(res, replica)
                if n is None:
                    return None
                if replica in res.assigned:
                    return res, res.slot(n)
                new = res.with_assignment(replica, n, now=t)
                cm["data"] = {DATA_KEY: json.dumps(new.to_json(), sort_keys=True)}
                try:
                    done = self._replace(cm)
                except ApiException as exc:
                    if exc.status == 404:  # released meanwhile (job gone, TTL)
                        return None
                    raise
                if done is not None:
                    new = GangReservation.from_json(new.to_json(),
                                                    version=done["metadata"]["resourceVersion"])
                    return new, new.slot(n)
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            raise ReservationUnavailable(f"assigning a slot of {key}: {exc}") from exc
        raise ReservationUnavailable(f"{key}: gave up after {MAX_ATTEMPTS} conflicts")

    def move_slot(
        self, key: GangKey, number: int, node: str, gpus: tuple[int, ...], *, from_node: str
    ) -> GangReservation | None:
        """Claim the new GPUs with the gang's token, point the slot at them in the gang
        record (compare-and-swap), commit them, then drop the old node's entries.

        Why this order: a claim carrying the token of an existing gang record is never
        taken for abandoned (see ``_dead``), and a crash before the record names the new
        GPUs leaves only entries that die with the gang (the sweep removes them after its
        release) — never a GPU handed out twice."""
        want = frozenset(gpus)
        try:
            cm = self._read(gang_name(key))
            res = self._parse_gang(cm)
            if cm is None or res is None:
                return None
            if res.slot(number).node != from_node:
                return res
            own = want & res.gpus().get(node, frozenset())
            if own:
                raise ReservationConflict(f"{key}: GPUs {sorted(own)} of {node} already "
                                          "belong to another slot of the gang", {node: own})
            old = frozenset(res.slot(number).gpus)
            self._claim(node, want, res,
                        self._recorded_elsewhere(key.uid, [node]).get(node, {}))
            try:
                done = None
                for _ in range(MAX_ATTEMPTS):
                    assert cm is not None and res is not None
                    moved = res.with_slot_moved(number, node, tuple(gpus))
                    cm["data"] = {DATA_KEY: json.dumps(moved.to_json(), sort_keys=True)}
                    done = self._replace(cm)
                    if done is not None:
                        break
                    cm = self._read(gang_name(key))
                    res = self._parse_gang(cm)
                    if cm is None or res is None or res.slot(number).node != from_node:
                        # released, or another webhook replica moved it first
                        self._unclaim(node, moved.token, want)
                        return res
                if done is None:
                    raise ReservationUnavailable(f"{key}: gave up after {MAX_ATTEMPTS} "
                                                 "conflicts")
            except BaseException:
                with contextlib.suppress(ApiException, *TRANSPORT_ERRORS):
                    self._unclaim(node, res.token, want)
                raise
            self._commit(node, want, moved)
            self._unclaim(from_node, moved.token, old)
        except ApiException as exc:
            if exc.status == 404:  # released while we wrote it (the claim is undone above)
                return None
            raise ReservationUnavailable(f"moving slot {number} of {key}: {exc}") from exc
        except TRANSPORT_ERRORS as exc:
            raise ReservationUnavailable(f"moving slot {number} of {key}: {exc}") from exc
        self._count("moved")
        self._drop_held()
        return GangReservation.from_json(moved.to_json(),
                                         version=done["metadata"]["resourceVersion"])

    def release(self, key: GangKey) -> bool:
        """Delete the gang ConfigMap (the commit point: its ledger entries are dead from
        then on), then clean its ledger entries; a crash in between leaves only dead entries
        that the next :meth:`expire` sweep removes."""
        try:
            cm = self._read(gang_name(key))
            res = self._parse_gang(cm)
            if cm is None or not self._delete(cm["metadata"]["name"],
                                              uid=cm["metadata"]["uid"]):
                return False
            if res is not None:
                for node in sorted(res.gpus()):
                    self._unclaim(node, res.token)
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            raise ReservationUnavailable(f"releasing {key}: {exc}") from exc
        self._count("released")
        self._drop_held()
        return True

    def list(self) -> list[GangReservation]:
        try:
            items = self._list(GANG_KIND)
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            raise ReservationUnavailable(f"listing reservations: {exc}") from exc
        out = [r for r in self._parse_listed(items) if r is not None]
        return sorted(out, key=lambda r: r.key)

    def _drop_held(self) -> None:
        with self._cache_lock:
            self._held = None

    def _held_add(self, res: GangReservation) -> None:
        with self._cache_lock:
            if self._held is not None:
                for node, gpus in res.gpus().items():
                    self._held[1].setdefault(node, set()).update(gpus)

    def held_gpus(self) -> dict[str, set[int]]:
        """Every GPU with a ledger entry (conservative: a dead entry still counts until the
        next sweep removes it).

        From the held-GPU feed while it is synced; else one LIST of the ledgers, or a cache
        at most ``held_cache_seconds`` old, which this store's own reservations update and
        any conflict or release drops."""
        feed = self.held_feed
        if feed is not None and feed.synced:
            return feed.held_gpus()
        now = time.monotonic()
        with self._cache_lock:
            if self._held is not None and now - self._held[0] < self.held_cache_seconds:
                return {n: set(g) for n, g in self._held[1].items()}
        fresh = self._held_fresh()
        with self._cache_lock:
            self._held = (now, fresh)
        return {n: set(g) for n, g in fresh.items()}

    def held_snapshot(self, since: int | None = None) -> HeldSnapshot:
        """:meth:`held_gpus` as a mapping never modified afterwards, with its revision and
        the nodes changed after revision ``since`` — from the feed while it is synced.
        Without a synced feed: one LIST, revision -1 and ``changed`` None (unknown: the
        caller redoes every node, as with :meth:`held_gpus`)."""
        feed = self.held_feed
        if feed is not None and feed.synced:
            return feed.snapshot(since)
        return HeldSnapshot(-1, {n: frozenset(g) for n, g in self.held_gpus().items()},
                            None)

    def pending_requests(self) -> dict[str, dict[str, int]]:
        """node -> requests of reserved slots no replica has been given yet: from the
        gang-record feed while it is synced, else from one LIST of the records."""
        feed = self.gang_feed
        if feed is not None and feed.synced:
            return feed.pending_requests()
        return pending_requests(self.list())

    def _held_fresh(self) -> dict[str, set[int]]:
        try:
            ledgers = self._list("ledger")
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            raise ReservationUnavailable(f"listing GPU ledgers: {exc}") from exc
        out: dict[str, set[int]] = {}
        for cm in ledgers:
            node = (cm.get("data") or {}).get(NODE_KEY)
            if not node:
                continue
            for g in self._entries(cm):
                out.setdefault(node, set()).add(g)
        return out

    def expire(self, now: float | None = None) -> list[GangKey]:
        """Release reservations past their TTL, then sweep dead ledger entries.

        Called with no ``now`` (the placement step does, before each gang it solves) it
        runs at most once per ``expire_interval_seconds``: it lists every gang and ledger,
        ~0.3 s at 1,000 nodes, which must not land on every admission. With an explicit
        ``now`` (the view's reconciler, tests) it always runs."""
        mono = time.monotonic()
        if now is None and mono - self._last_expire < self.expire_interval_seconds:
            return []
        self._last_expire = mono
        t = self._now(now)
        gone: list[GangKey] = []
        for res in self.list():
            if res.expired(t) and self.release(res.key):
                gone.append(res.key)
        try:
            self._sweep(float(self._clock()))
        except (ApiException, *TRANSPORT_ERRORS) as exc:
            log.warning("ledger sweep failed (next one retries): %s", exc)
        return gone

    def _sweep(self, t: float) -> None:
        # Ledgers first, gangs second: an entry "committed" in this ledger snapshot was
        # written after its gang ConfigMap was created, so the gang list taken afterwards
        # holds it unless it was released — no live entry is mistaken for a dead one.
        ledgers = self._list("ledger")
        tokens: dict[str, str | None] = {}
        for res in self._parse_listed(self._list(GANG_KIND)):
            if res is not None:
                tokens[res.key.uid] = res.token
        for cm in ledgers:
            entries = self._entries(cm)
            live = {g: e for g, e in entries.items()
                    if self._young_claim(e, t) or e.get("gang") == "?"
                    or tokens.get(str(e.get("gang"))) == e.get("token")}
            dead = [g for g in entries if g not in live]
            # an old claim with its record: its writer died before committing; finish it
            promote = [g for g, e in live.items() if e.get("state") == "claimed"
                       and not self._young_claim(e, t)]
            if not dead and not promote:
                continue
            data = dict(cm.get("data") or {})
            for g in dead:
                data.pop(str(g), None)
            for g in promote:
                data[str(g)] = json.dumps(dict(entries[g], state="committed"), sort_keys=True)
            cm["data"] = data
            if self._replace(cm) is not None:  # 409: someone wrote it; next sweep
                self.stats["swept"] += len(dead)
                self.stats["promoted"] += len(promote)
