"""The live cluster: list+watch of the API server, answering the admission pipeline from memory.

Why a watch cache: the webhook answers every pod creation within its timeout; reading the
API server per request would make the webhook as slow as the API and as unavailable. So
:class:`ClusterView` keeps what admission needs — activated Nodes (topology annotation or
ACK report ConfigMap, locality), the GPUs bound pods hold, Namespaces, the Kubeflow
training jobs — current through list+watch with the official ``kubernetes`` client, the
way client-go informers do: list, then watch from the list's resourceVersion, follow
bookmarks, re-list on 410 Gone, reconnect with backoff when the API server is away (and
keep answering from the last known state meanwhile). The watch handlers and the
reservation release and reconcile they drive stay in one class; the list+watch loop, the
trimming, what pods hold per node (:mod:`gputopo.cluster.pod_holdings`), the on-demand
GETs and the memory-only reader are modules of their own.

Node data goes through :mod:`gputopo.cluster.objects`, the same functions the file-backed
snapshot uses, so both agree on activation, GPUs in use and bad data (a node with a corrupt
annotation is left out with a warning and ``gputopo_node_data_errors_total``, never a crash).

``node_states()`` subtracts GPUs held by bound pods only; GPUs promised by reservations are
the caller's to subtract (the placement step does ``exclude_held(view.node_states(),
store.held_gpus())``) because the reservation store, not the watch, is the authority on
them (``reserve`` re-checks every GPU on its ledger). The view does feed the store's answer:
with ``ledger_feed=`` it also watches the GPU ledgers (:mod:`gputopo.cluster.ledger_feed`),
and with ``gang_feed=`` the gang records (:mod:`gputopo.cluster.gang_record_feed`), so the
Kubernetes store need not list either for every gang. The view releases reservations
whose job was deleted or finished (``reservations=`` store), and calls the store's TTL expiry.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gputopo import names
from gputopo.cluster import dra
from gputopo.cluster import objects as ob
from gputopo.cluster.dra_index import DraIndex
from gputopo.cluster.gang_record_feed import GANG_SELECTOR, GangRecordFeed
from gputopo.cluster.informer import (
    TRANSPORT_ERRORS,
    Informer,
    WatchedKind,
    short_error,
)
from gputopo.cluster.ledger_feed import LEDGER_SELECTOR, LedgerFeed
from gputopo.cluster.memory_reader import MemoryOnlyReader
from gputopo.cluster.metrics import NODE_DATA_ERRORS, RESERVATION_RELEASES
from gputopo.cluster.node_resources import NodeResources, sum_requests
from gputopo.cluster.object_gets import get_object, job_exists_by_get
from gputopo.cluster.pod_holdings import PodHoldings
from gputopo.cluster.reservations import (
    GangKey,
    ReservationStore,
    ReservationUnavailable,
    admission_deadline,
)
from gputopo.cluster.snapshot import object_key
from gputopo.cluster.source import namespace_opted_in
from gputopo.cluster.waiters import by_gang
from gputopo.cluster.watch_trim import trim_node, trim_pod
from gputopo.errors import TopologyError
from gputopo.kubeaccess import NoClusterAccess, cluster_configuration
from gputopo.placement.starvation import Waiter
from gputopo.placement.types import NodeState

log = logging.getLogger(__name__)

#: Seconds a reservation may exist without its job in the view before it is released:
#: the first pod of a job can be admitted before the watch has delivered the job itself.
JOB_GRACE_SECONDS = 120.0
#: Of an admission's budget, what an on-demand GET leaves for the reservation store after
#: it, and the least time worth starting a GET with (a queued review may have none left).
FETCH_RESERVE_SECONDS = 1.0
MIN_FETCH_SECONDS = 0.05


class ClusterView:
    """A :class:`~gputopo.cluster.source.ClusterReader` kept current by list+watch.

    ``api_client`` is the official client it talks through (the placement step builds its
    KubernetesReservationStore on it). ``reservations``, when given, is released for jobs
    that are deleted or finish; :meth:`reconcile_reservations` also runs its TTL expiry.
    ``ledger_feed``, when given, is kept current from a watch of the GPU ledgers (the
    KubernetesReservationStore's ``held_feed``), ``gang_feed`` from a watch of the gang
    records (its ``gang_feed``); :func:`connect` wires them all.
    """

    def __init__(
        self, api_client: client.ApiClient, *,
        reservations: ReservationStore | None = None,
        watch_timeout_seconds: float = 300.0, request_timeout: float = 10.0,
        backoff_initial: float = 0.2, backoff_max: float = 10.0,
        absent_retry_seconds: float = 60.0, job_cache_seconds: float = 30.0,
        fetch_timeout: float = 2.0,
        reconcile_interval_seconds: float = 30.0,
        job_grace_seconds: float = JOB_GRACE_SECONDS,
        clock: Callable[[], float] = time.time,
        ledger_feed: LedgerFeed | None = None,
        gang_feed: GangRecordFeed | None = None,
    ) -> None:
        self.api_client = api_client
        self.reservations = reservations
        self.watch_timeout_seconds = watch_timeout_seconds
        self.request_timeout = request_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.absent_retry_seconds = absent_retry_seconds
        self.job_cache_seconds = job_cache_seconds
        self.fetch_timeout = fetch_timeout
        self.reconcile_interval_seconds = reconcile_interval_seconds
        self.job_grace_seconds = job_grace_seconds
        self._clock = clock
        self._by_name: dict[str, NodeState] = {}
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self.warnings: dict[str, str] = {}  # node → why it is left out
        self.released: list[GangKey] = []  # reservations this view released, for the record
        # derived indexes, maintained by _changed under the lock: what pods hold per node
        self._holdings = PodHoldings()
        self._base: dict[str, NodeState | None] = {}  # node → state without usage (None: bad)
        self._final: dict[str, NodeState] = {}  # node → state with its used GPUs
        self._states: tuple[NodeState, ...] | None = None
        #: each node's GPU driver's devices (gputopo.cluster.dra), kept up to date change by
        #: change; only nodes whose answer changed are rebuilt
        self._dra = DraIndex(lambda name: self._informers["nodes"].store.get(("", name)))
        #: Namespace name -> opted in, for every Namespace the watch holds (kept by
        #: _changed; filled in place, never replaced: the memory-only reader hands out its
        #: ``get``). Why: see :attr:`MemoryOnlyReader.namespace_opted_in`.
        self._opted_in: dict[str, bool] = {}
        self._quick: MemoryOnlyReader | None = None
        self._on_demand: dict[tuple[str, str, str, str], tuple[float, dict[str, Any] | None]] = {}
        self._api_quiet_until = 0.0
        #: Called with the watched kind's name after every change, under the view's lock
        #: (keep them cheap: the placement queue sets an Event to re-solve).
        self.listeners: list[Callable[[str], None]] = []
        core = client.CoreV1Api(api_client)
        custom = client.CustomObjectsApi(api_client)
        kinds = [
            WatchedKind("nodes", "v1", "Node", core.list_node, transform=trim_node),
            WatchedKind("pods", "v1", "Pod", core.list_pod_for_all_namespaces,
                        transform=trim_pod),
            WatchedKind("namespaces", "v1", "Namespace", core.list_namespace),
            WatchedKind("node-reports", "v1", "ConfigMap", core.list_namespaced_config_map,
                        (names.ACK_REPORT_NAMESPACE,),
                        f"{names.NODE_ACTIVATION_LABEL}={names.NODE_ACTIVATION_VALUE}",
                        optional=True),
        ]
        if ledger_feed is not None:  # held GPUs for the reservation store, from memory
            kinds.append(WatchedKind("ledgers", "v1", "ConfigMap",
                                     core.list_namespaced_config_map,
                                     (names.GPUTOPO_NAMESPACE,), LEDGER_SELECTOR,
                                     feed=ledger_feed))
        if gang_feed is not None:  # GPUs other gangs' records hand out, from memory
            kinds.append(WatchedKind("gang-records", "v1", "ConfigMap",
                                     core.list_namespaced_config_map,
                                     (names.GPUTOPO_NAMESPACE,), GANG_SELECTOR,
                                     feed=gang_feed))
        kinds.append(WatchedKind(
            "podgroups", f"{names.POD_GROUP_API_GROUP}/{names.POD_GROUP_VERSION}", "PodGroup",
            custom.list_cluster_custom_object,
            (names.POD_GROUP_API_GROUP, names.POD_GROUP_VERSION, names.POD_GROUP_PLURAL),
            optional=True))
        for version, plural, kind in (("v1", "pytorchjobs", "PyTorchJob"),
                                      ("v1", "tfjobs", "TFJob"), ("v1", "mpijobs", "MPIJob"),
                                      ("v2beta1", "mpijobs", "MPIJob")):
            kinds.append(WatchedKind(
                f"{plural}.{version}", f"{names.KUBEFLOW_GROUP}/{version}", kind,
                custom.list_cluster_custom_object, (names.KUBEFLOW_GROUP, version, plural),
                optional=True))
        for group, version, plural, kind in (
                (names.TRAINER_GROUP, names.TRAINER_VERSION, "trainjobs", "TrainJob"),
                (names.JOBSET_GROUP, names.JOBSET_VERSION, "jobsets", "JobSet")):
            kinds.append(WatchedKind(
                f"{plural}.{version}", f"{group}/{version}", kind,
                custom.list_cluster_custom_object, (group, version, plural), optional=True))
        group, version = dra.RESOURCE_API.split("/")
        for plural, kind in (("resourceslices", "ResourceSlice"),
                             ("resourceclaims", "ResourceClaim"),
                             ("resourceclaimtemplates", "ResourceClaimTemplate")):
            # Dynamic Resource Allocation (gputopo.cluster.dra): optional, as before 1.34
            kinds.append(WatchedKind(plural, dra.RESOURCE_API, kind,
                                     custom.list_cluster_custom_object,
                                     (group, version, plural), optional=True))
        self._informers = {k.name: Informer(self, k) for k in kinds}
        self._reconciler = threading.Thread(target=self._reconcile_loop,
                                            name="reservation-reconciler", daemon=True)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> ClusterView:
        for inf in self._informers.values():
            inf.start()
        if self.reservations is not None:
            self._reconciler.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        for inf in self._informers.values():
            inf.interrupt()
        deadline = time.monotonic() + timeout
        for inf in self._informers.values():
            inf.join(max(0.0, deadline - time.monotonic()))

    @property
    def synced(self) -> bool:
        """True once every watched kind has been listed at least once."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def _note_synced(self) -> None:
        if not self._synced.is_set() and all(i.synced.is_set()
                                             for i in self._informers.values()):
            self.node_states()  # parse every topology now, not in the first admission
            self._synced.set()

    def stats(self) -> dict[str, dict[str, int]]:
        """Lists, watches and errors per watched kind (for drills and debugging)."""
        return {n: {"lists": i.lists, "watches": i.watches, "errors": i.errors,
                    "objects": len(i.store)} for n, i in self._informers.items()}

    # --- change handling (under the lock) ----------------------------------------------------
    def _changed(self, kind: WatchedKind, old: dict[str, Any] | None,
                 new: dict[str, Any] | None) -> None:
        obj = new if new is not None else old
        assert obj is not None
        for listener in self.listeners:
            listener(kind.name)
        if kind.name == "nodes":
            name = str(ob.meta(obj).get("name", ""))
            self._invalidate_node(name)
            self._dra.node_changed(name, new)  # its uuids tie its devices to indices
        elif kind.name == "resourceslices":
            self._dra.slice_changed(old, new)
        elif kind.name == "resourceclaims":
            self._dra.claim_changed(old, new)
        elif kind.name == "node-reports":
            name = str(ob.meta(obj).get("name", ""))
            if name.endswith(names.ACK_REPORT_SUFFIX):
                self._invalidate_node(name[: -len(names.ACK_REPORT_SUFFIX)])
        elif kind.name == "pods":
            self._pod_changed(old, new)
        elif kind.name == "namespaces":
            name = str(ob.meta(obj).get("name", ""))
            if new is None:
                self._opted_in.pop(name, None)
            else:
                self._opted_in[name] = namespace_opted_in(new)
        elif kind.kind in names.GANG_OWNER_KINDS and new is not None:
            # Not for jobs found finished by the first list (often thousands, kept for
            # their logs): one release thread and LIST each at every start; the reconciler
            # releases those (after the grace) from one LIST.
            first_list = not self._informers[kind.name].synced.is_set()
            if _finished(new) and not first_list and (old is None or not _finished(old)):
                self._release_job(new, "finished")
        elif kind.kind in names.GANG_OWNER_KINDS and new is None and old is not None:
            self._release_job(old, "deleted")

    def _invalidate_node(self, node: str) -> None:
        self._base.pop(node, None)
        self._final.pop(node, None)
        self._states = None

    def _pod_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        changed = self._holdings.pod_changed(old, new)
        for node in changed:
            self._final.pop(node, None)
        if changed:
            self._states = None

    def waiting_gangs(self) -> list[Waiter]:
        """The gangs waiting in the placement queue, one per gang (their gated pods)."""
        with self._lock:
            waiters = self._holdings.waiters
            return by_gang(waiters.values()) if waiters else []

    def _release_job(self, job: dict[str, Any], why: str) -> None:
        store = self.reservations
        m = ob.meta(job)
        if store is None or not m.get("uid"):
            return
        key = GangKey(str(m.get("namespace") or ""), str(job.get("kind") or ""),
                      str(m.get("name") or ""), str(m["uid"]))
        # Off the watch thread: the store talks to the API, the lock must not wait on it.
        threading.Thread(target=self._release, args=(str(m["uid"]), why, key),
                         daemon=True).start()

    def _release(self, uid: str, why: str, key: GangKey | None = None) -> None:
        """Release the reservation of the job with this uid (the uid is what identifies a
        gang; kind spellings or versions in keys do not matter). A record that ``list()``
        cannot read (edited by hand) is released by the job's own ``key``: the Kubernetes
        store names records by uid alone, so it is found and deleted all the same."""
        store = self.reservations
        try:
            found = False
            for res in store.list() if store is not None else []:
                if res.key.uid == uid and store is not None:
                    found = True
                    if store.release(res.key):
                        log.info("reservation of %s released: job %s", res.key, why)
                        RESERVATION_RELEASES.labels(why).inc()
                        with self._lock:
                            self.released.append(res.key)
            if not found and key is not None and store is not None and store.release(key):
                log.info("unreadable reservation of %s released: job %s", key, why)
                RESERVATION_RELEASES.labels(why).inc()
                with self._lock:
                    self.released.append(key)
        except ReservationUnavailable as exc:
            log.warning("releasing the reservation of job uid %s (%s) failed; the "
                        "reconciler retries: %s", uid, why, exc)

    # --- reservations housekeeping -----------------------------------------------------------
    def reconcile_reservations(self, now: float | None = None) -> list[GangKey]:
        """TTL expiry, then release reservations whose job is gone or finished.

        Only once synced (an unsynced view would think every job is gone), and only for
        reservations older than ``job_grace_seconds`` (the job may be in flight in the watch).
        """
        store = self.reservations
        if store is None or not self.synced:
            return []
        t = self._clock() if now is None else now
        gone = list(store.expire(t))
        for key in gone:
            log.info("reservation of %s released: expired (its pods never all came "
                     "within the TTL)", key)
            RESERVATION_RELEASES.labels("expired").inc()
        alive: dict[str, dict[str, Any]] = {}
        with self._lock:
            for inf in self._informers.values():
                if inf.kind.kind in names.GANG_OWNER_KINDS:
                    for job in inf.store.values():
                        alive[str(ob.meta(job).get("uid"))] = job
        for res in store.list():
            if t - res.created_at < self.job_grace_seconds:
                continue
            job = alive.get(res.key.uid)
            if job is None:  # not watched (yet)? ask the API before letting GPUs go
                exists = self._job_exists(res.key)
                if exists is not False:
                    continue
            elif not _finished(job):
                continue
            if store.release(res.key):
                why = "job_gone" if job is None else "job_finished"
                log.info("reservation of %s released by the reconcile pass: %s", res.key,
                         "its job is gone" if job is None else "its job finished")
                RESERVATION_RELEASES.labels(why).inc()
                gone.append(res.key)
                with self._lock:
                    self.released.append(res.key)
        return gone

    def job_exists(self, key: GangKey) -> bool | None:
        """Whether the job of ``key`` (by uid) exists: the watch's copy, else a GET; None
        when neither can say. The placement queue asks right before it reserves: a job
        deleted while its gang waited must get no GPUs (its pods live on for a while)."""
        with self._lock:
            for inf in self._informers.values():
                job = (inf.store.get((key.namespace, key.name))
                       if inf.kind.kind == key.kind else None)
                if job is not None and str(ob.meta(job).get("uid")) == key.uid:
                    return True
        return self._job_exists(key)

    def _job_exists(self, key: GangKey) -> bool | None:
        """Whether the job with this uid exists, by GET; None when the API cannot say."""
        return job_exists_by_get(self.api_client, key, self.fetch_timeout)

    def _reconcile_loop(self) -> None:
        while not self._stopping.wait(self.reconcile_interval_seconds):
            try:
                self.reconcile_reservations()
            except ReservationUnavailable as exc:
                log.warning("reservation reconcile failed (next round retries): %s", exc)
            except Exception:  # never let one bad round end releasing for good
                log.exception("reservation reconcile failed (next round retries)")

    # --- ClusterReader -----------------------------------------------------------------------
    def namespace(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            ns = self._informers["namespaces"].store.get(("", name))
        if ns is None:
            ns = self._fetch("v1", "Namespace", None, name)
        return ns

    def pod_group(self, namespace: str, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(known, PodGroup): from the watch alone, never an API call (it runs in admission).
        ``known`` is False until the PodGroup watch has listed once; with the CRD absent the
        watch counts as listed and empty (there is then no PodGroup)."""
        inf = self._informers["podgroups"]
        with self._lock:
            return inf.synced.is_set(), inf.store.get((namespace, name))

    def object(
        self, *, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        with self._lock:
            obj = self._stored(api_version, kind, namespace, name)
        if obj is not None:
            return obj
        return self._fetch(api_version, kind, namespace, name)

    def _stored(self, api_version: str, kind: str, namespace: str | None, name: str
                ) -> dict[str, Any] | None:
        """The object as a watch delivered it, or None (call under the lock)."""
        want = object_key(api_version, kind, namespace, name)
        for inf in self._informers.values():
            k = inf.kind
            if k.kind == kind and object_key(k.api_version, k.kind, namespace, name) == want:
                obj = inf.store.get((namespace or "", name))
                if obj is not None:
                    return obj
        return None

    def memory_only(self) -> MemoryOnlyReader:
        """A reader of what the watches hold that never waits: no GET for what they do not
        hold, no waiting for the lock while a watch writes; it raises
        :class:`~gputopo.cluster.source.WouldBlock` instead. For the server's event loop,
        which decides out-of-scope reviews at once and must never block. One reader per
        view (it holds no state of its own)."""
        quick = self._quick
        if quick is None:
            quick = self._quick = MemoryOnlyReader(self)
        return quick

    def _fetch(self, api_version: str, kind: str, namespace: str | None, name: str
               ) -> dict[str, Any] | None:
        """One GET for what the watches do not hold (batch Jobs; a job or namespace the
        watch has not delivered yet), cached briefly. None when absent or unreachable."""
        key = (api_version, kind, namespace or "", name)
        now = time.monotonic()
        hit = self._on_demand.get(key)
        if hit is not None and now - hit[0] < self.job_cache_seconds:
            return hit[1]
        if now < self._api_quiet_until:  # the API just failed: answer from memory, fast
            return None
        timeout = self.fetch_timeout
        until = admission_deadline()  # inside an admission: its answer-by, from arrival
        if until is not None:
            timeout = min(timeout, until - now - FETCH_RESERVE_SECONDS)
            if timeout < MIN_FETCH_SECONDS:
                log.warning("GET %s %s/%s skipped: the admission's time is spent", kind,
                            namespace, name)
                return None
        try:
            resp = get_object(self.api_client, api_version, kind, namespace, name, timeout)
        except ApiException as exc:
            if exc.status not in (403, 404):
                log.warning("GET %s %s/%s: %s", kind, namespace, name, short_error(exc))
                self._api_quiet_until = now + self.backoff_max
            return None
        except TRANSPORT_ERRORS as exc:
            log.warning("GET %s %s/%s: %s", kind, namespace, name, short_error(exc))
            self._api_quiet_until = now + self.backoff_max
            return None
        if resp is None:
            return None
        obj = json.loads(resp.data)
        if len(self._on_demand) > 10_000:
            self._on_demand.clear()
        self._on_demand[key] = (now, obj)
        return obj

    def node_states(self) -> tuple[NodeState, ...]:
        """Activated nodes with usable topology, GPUs of bound pods marked used.

        Cached: a node's topology is parsed once per change of the node (or its report),
        its used GPUs recomputed once per change of its pods, and the tuple rebuilt only
        after some change — it is read once per gang, at 1,000 nodes. The same tuple until
        then, so a caller that remembers an answer per node list knows by identity that no
        node changed (webhook/placement/reserve.py ``same_nodes``).
        """
        with self._lock:
            if self._dra.dirty:
                for name in self._dra.refresh():
                    self._invalidate_node(name)
            if self._states is not None:
                return self._states
            reports = self._informers["node-reports"].store
            out: list[NodeState] = []
            for (_, name), node in sorted(self._informers["nodes"].store.items()):
                if not ob.is_activated(node):
                    self.warnings.pop(name, None)
                    continue
                final = self._final.get(name)
                if final is None:
                    if name not in self._base:
                        self._base[name] = self._build(name, node, reports.get(
                            (names.ACK_REPORT_NAMESPACE, f"{name}{names.ACK_REPORT_SUFFIX}")))
                    base = self._base[name]
                    if base is None:
                        continue
                    final = base
                    used = self._holdings.used.get(name)
                    if used:
                        known = set(base.topology.indices)
                        final = replace(base, used=base.used | frozenset(
                            g for gs in used.values() for g in gs if g in known))
                    ports = self._holdings.ports.get(name)
                    if ports:
                        final = replace(final, host_ports=frozenset().union(*ports.values()))
                    asked = self._holdings.asked.get(name)
                    if asked and base.resources is not None:
                        final = replace(final, resources=NodeResources(
                            base.resources.allocatable, sum_requests([asked])))
                    self._final[name] = final
                out.append(final)
            self._states = tuple(out)
            self._by_name = {n.name: n for n in out}
            return self._states

    def node_state(self, name: str) -> NodeState | None:
        """One node of :meth:`node_states` by name (a dict lookup, not a pass over every
        node: the placement step checks a slot's node for every pod it admits)."""
        with self._lock:
            if self._states is None or self._dra.dirty:  # a DRA change not yet applied
                self.node_states()
            return self._by_name.get(name)

    def _build(self, name: str, node: dict[str, Any], report: dict[str, Any] | None
               ) -> NodeState | None:
        try:
            state = ob.node_state(node, (), report, dra=self._dra.get(name))
        except TopologyError as exc:
            reason = ("no_topology" if exc.reason.startswith("no ") else
                      "allocatable" if exc.reason.startswith("allocatable") else "bad_topology")
            self.warnings[name] = exc.reason
            NODE_DATA_ERRORS.labels(reason).inc()
            log.warning("node %s: left out of placement: %s", name, exc.reason)
            return None
        self.warnings.pop(name, None)
        # used all the same, with the documented default: said once per change of the node,
        # as `gputopo nodes` and `place` say it for a file
        for problem in ob.network_annotation_problems(node):
            log.warning("node %s: %s", name, problem)
        return state


_FINISHED = ("Succeeded", "Failed", "Completed", "Complete")


def _finished(job: dict[str, Any]) -> bool:
    """A training job whose Succeeded or Failed condition is True (training-operator and
    mpi-operator both report terminal state as conditions; a JobSet says Completed, a
    TrainJob Complete)."""
    status = job.get("status") if isinstance(job.get("status"), dict) else {}
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") in _FINISHED and \
                str(cond.get("status")) == "True":
            return True
    return False


def connect(kubeconfig: str | None = None, **kwargs: Any) -> ClusterView | None:
    """A started ClusterView for the cluster this process can reach, or None.

    In-cluster service account first (as client-go does), then ``kubeconfig`` (or
    ``$KUBECONFIG`` / ``~/.kube/config``). None when neither exists: ``gputopo serve`` then
    falls back to the embedded demo. The view gets a KubernetesReservationStore on the same
    client, so deleted jobs release their GPUs.
    """
    try:
        cfg = cluster_configuration(kubeconfig)
    except NoClusterAccess as exc:
        log.info("no in-cluster account and no usable kubeconfig: %s", exc.__cause__)
        return None
    # 11 long-lived watches share the pool with reservation writes and GETs: the default
    # (5 x CPUs) would churn connections ("connection pool is full") on small machines.
    cfg.connection_pool_maxsize = max(int(cfg.connection_pool_maxsize or 0), 32)
    # No silent urllib3 retries (3 by default, each waiting the full timeout): the view and
    # the reservation store retry on their own terms, and an admission's store deadline
    # must bound the call (measured: a 2 s API made one admission take 6 s instead of 3).
    cfg.retries = False
    api = client.ApiClient(cfg)
    from gputopo.cluster.k8s_reservations import KubernetesReservationStore

    if "reservations" not in kwargs:  # the store answers from the view's watches
        feed = kwargs.setdefault("ledger_feed", LedgerFeed())
        gangs = kwargs.setdefault("gang_feed", GangRecordFeed())
        kwargs["reservations"] = KubernetesReservationStore(api, held_feed=feed,
                                                            gang_feed=gangs)
    return ClusterView(api, **kwargs).start()
