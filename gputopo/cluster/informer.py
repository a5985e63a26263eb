"""List, then watch, one kind of object, forever: the loop under the cluster view.

Why its own module: the view is what admission asks (node states, objects, reservations
housekeeping); how each kind is kept current is a separate matter with its own failure
modes (410 Gone, an API away, a CRD not installed) and is read on its own when a watch
misbehaves. The loop follows client-go's reflector: list, watch from the list's
resourceVersion, follow bookmarks, re-list on 410, back off while the API is away, and keep
serving the last known state meanwhile. Every change is handed to the view under its lock.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from gputopo import names
from gputopo.cluster import objects as ob
from gputopo.cluster.watch_feed import WatchFeed

if TYPE_CHECKING:  # the view owns its informers: imported for types only
    from gputopo.cluster.view import ClusterView

log = logging.getLogger("gputopo.cluster.view")  # its messages, as before the split

TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError, ValueError)


class _Gone(Exception):
    """The watch's resourceVersion was compacted away (410): list again."""


@dataclass(frozen=True)
class WatchedKind:
    """One list+watch: which API call, which selector, what the objects are."""

    name: str
    api_version: str
    kind: str
    list_call: Callable[..., Any]
    args: tuple[Any, ...] = ()
    label_selector: str | None = None
    optional: bool = False  # a CRD that may not be installed: 404 means "none"
    #: What is kept of each object (client-go's SetTransform): pods and nodes are trimmed
    #: to the fields admission reads, so memory stays small in big clusters.
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: Also told every list and event, under the view's lock (the reservation store's feeds:
    #: held GPUs from the ledgers, GPUs handed out from the gang records).
    feed: WatchFeed[Any] | None = None


class Informer:
    """List, then watch from the list's resourceVersion, forever (until stopped).

    ``store`` maps (namespace, name) → object; ``on_change(old, new)`` is called for every
    change (``new`` None on delete) under the view's lock.
    """

    def __init__(self, view: ClusterView, kind: WatchedKind) -> None:
        self.view = view
        self.kind = kind
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv: str | None = None
        self.synced = threading.Event()
        self.lists = 0
        self.watches = 0
        self.errors = 0
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind.name}",
                                        daemon=True)
        self._absent_logged = False

    def start(self) -> None:
        self._thread.start()

    def interrupt(self) -> None:
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # best effort on the way out
                log.debug("closing %s watch", self.kind.name, exc_info=True)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # --- the loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        view = self.view
        backoff = view.backoff_initial
        while not view._stopping.is_set():
            try:
                if self.rv is None:
                    self._list()
                self._watch()
                backoff = view.backoff_initial
            except _Gone:
                log.info("watch %s: resourceVersion %s too old (410): re-listing",
                         self.kind.name, self.rv)
                self.rv = None
            except ApiException as exc:
                if exc.status in (403, 404) and self.kind.optional:
                    self._absent(exc)
                    view._stopping.wait(view.absent_retry_seconds)
                    continue
                if exc.status == 410:
                    self.rv = None
                    continue
                self._failed(exc, backoff)
                backoff = min(backoff * 2, view.backoff_max)
            except TRANSPORT_ERRORS as exc:
                if view._stopping.is_set():
                    break
                self._failed(exc, backoff)
                backoff = min(backoff * 2, view.backoff_max)

    def _failed(self, exc: Exception, backoff: float) -> None:
        self.errors += 1
        if self.kind.feed is not None:
            self.kind.feed.pause()
        log.warning("watch %s: API unavailable (%s): serving the last known state, retrying "
                    "in %.1fs", self.kind.name, short_error(exc), backoff)
        self.view._stopping.wait(backoff)

    def _absent(self, exc: ApiException) -> None:
        if not self._absent_logged:
            log.warning("watch %s: %s %s: treated as empty", self.kind.name, exc.status,
                        exc.reason)
            self._absent_logged = True
        with self.view._lock:
            for key, old in list(self.store.items()):
                del self.store[key]
                # Out of sight is not deleted: a job's reservation is released only when
                # the reconciler confirms the job gone (a 403 may be an RBAC hiccup).
                if self.kind.kind not in names.GANG_OWNER_KINDS:
                    self.view._changed(self.kind, old, None)
        self.synced.set()
        self.view._note_synced()

    def _shape(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.kind.transform is not None:
            obj = self.kind.transform(obj)
        obj.setdefault("apiVersion", self.kind.api_version)
        obj.setdefault("kind", self.kind.kind)
        return obj

    def _call(self, **kwargs: Any) -> Any:
        k = self.kind
        if k.label_selector:
            kwargs["label_selector"] = k.label_selector
        return k.list_call(*k.args, _preload_content=False, **kwargs)

    def _list(self) -> None:
        resp = self._call(_request_timeout=self.view.request_timeout)
        body = json.loads(resp.data)
        items = body.get("items") or []
        fresh: dict[tuple[str, str], dict[str, Any]] = {}
        for item in items:
            item = self._shape(item)
            fresh[key_of(item)] = item
        with self.view._lock:
            for key, old in list(self.store.items()):
                if key not in fresh:
                    del self.store[key]
                    self.view._changed(self.kind, old, None)
            for key, new in fresh.items():
                old = self.store.get(key)
                if old is None or ob.meta(old).get("resourceVersion") != \
                        ob.meta(new).get("resourceVersion"):
                    self.store[key] = new
                    self.view._changed(self.kind, old, new)
            rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
            if self.kind.feed is not None:
                self.kind.feed.relisted(fresh.values(), rv)
        self.rv = rv
        self.lists += 1
        self.synced.set()
        self.view._note_synced()

    def _watch(self) -> None:
        view = self.view
        resp = self._call(
            watch=True, resource_version=self.rv, allow_watch_bookmarks=True,
            timeout_seconds=max(1, int(view.watch_timeout_seconds)),
            _request_timeout=(view.request_timeout, view.watch_timeout_seconds + 30))
        self._resp = resp
        self.watches += 1
        if self.kind.feed is not None:  # it replays what it missed from self.rv
            self.kind.feed.resume()
        try:
            for line in _lines(resp):
                if view._stopping.is_set():
                    return
                self._event(json.loads(line))
        finally:
            self._resp = None
            resp.release_conn()

    def _event(self, ev: dict[str, Any]) -> None:
        etype, obj = ev.get("type"), ev.get("object") or {}
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone()
            raise ApiException(status=code or 500, reason=str(obj.get("message")))
        rv = ob.meta(obj).get("resourceVersion")
        if etype == "BOOKMARK":
            if rv:
                self.rv = str(rv)
            return
        obj = self._shape(obj)
        key = key_of(obj)
        with self.view._lock:
            old = self.store.get(key)
            if etype == "DELETED":
                if old is not None:
                    del self.store[key]
                    self.view._changed(self.kind, old, None)
            else:  # ADDED / MODIFIED
                self.store[key] = obj
                self.view._changed(self.kind, old, obj)
            if self.kind.feed is not None:
                self.kind.feed.watched(str(etype), obj)
        if rv:
            self.rv = str(rv)


def _lines(resp: Any) -> Iterator[str]:
    for line in iter_resp_lines(resp):
        if line:
            yield line


def key_of(obj: dict[str, Any]) -> tuple[str, str]:
    m = ob.meta(obj)
    return (str(m.get("namespace") or ""), str(m.get("name") or ""))


def short_error(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {str(exc)[:120]}"
