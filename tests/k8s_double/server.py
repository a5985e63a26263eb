"""TEST DOUBLE of the Kubernetes REST API — for tests and failure drills only, never for use.

Why: gputopo talks to the API server through the official ``kubernetes`` client. To test
that path for real (HTTP, JSON wire format, resourceVersions, watches, 409s, 410s) without
a cluster, this module serves a small, faithful subset of the REST API on 127.0.0.1:

* core/v1 nodes, namespaces (cluster-scoped), pods, configmaps, events (a create is
  checked as the API server checks a core/v1 Event: :func:`event_create_errors`);
  batch/v1 jobs;
  coordination.k8s.io/v1 leases; kubeflow.org/v1 pytorchjobs, tfjobs, mpijobs and
  kubeflow.org/v2beta1 mpijobs; trainer.kubeflow.org/v1alpha1 trainjobs;
  jobset.x-k8s.io/v1alpha2 jobsets; scheduling.x-k8s.io/v1alpha1 podgroups (the
  scheduler-plugins CRD, served CRD-style like the Kubeflow jobs); resource.nvidia.com/
  v1beta1 computedomains (NVIDIA's DRA driver for GPUs, CRD-style); resource.k8s.io/v1
  deviceclasses, resourceslices (cluster-scoped), resourceclaims, resourceclaimtemplates
  (Dynamic Resource Allocation, built in: list items carry no apiVersion/kind).
* Pod updates over HTTP (PUT, PATCH) follow the API server's rules
  (:func:`pod_update_errors`): scheduling gates may only be removed, a gated pod's node
  selector and required node affinity may only gain requirements, the rest of the spec is
  immutable. Seeding helpers (:meth:`KubeApiDouble.apply`) act as the other controllers
  (scheduler binding, kubelet) and are not checked.
* GET, LIST (labelSelector, fieldSelector basics), WATCH (``?watch=1``: chunked JSON lines,
  ADDED/MODIFIED/DELETED/BOOKMARK/ERROR, resourceVersion, allowWatchBookmarks,
  timeoutSeconds), POST, PUT (409 Conflict on a stale resourceVersion), PATCH (JSON patch,
  merge patch; strategic merge treated as merge), DELETE (with preconditions).
* Errors as ``Status`` objects: 404 NotFound, 409 AlreadyExists / Conflict, 410 Gone
  ("too old resource version") for a watch from a compacted resourceVersion.

Knobs for failure drills: :meth:`KubeApiDouble.compact` (forget history: older watches get
410), ``latency`` (seconds added to every request), :meth:`set_down` (``"503"``: answer
every request 503; ``"refuse"``: close the listening socket and reset open connections;
``None``: back up), ``forbidden`` (resources answered 403, as missing RBAC would). The same
knobs are reachable over HTTP under ``/_double/`` so a double in another process can be
driven too (except "refuse", which only the owning process can undo).

Not modelled: authentication, admission, finalizers, pagination, server-side apply,
namespace existence checks, defaulting.

About 900 lines: one HTTP handler and one store, because the wire rules (resourceVersions,
watches, 409s, 410s) are what the tests rely on being the API server's, in one place.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def custom(self) -> bool:
        """A CRD's resource: its list items carry apiVersion and kind on the wire."""
        return self.group in ("kubeflow.org", "scheduling.x-k8s.io", "trainer.kubeflow.org",
                              "jobset.x-k8s.io", "resource.nvidia.com")


RESOURCES = [
    Resource("", "v1", "nodes", "Node", False),
    Resource("", "v1", "namespaces", "Namespace", False),
    Resource("", "v1", "pods", "Pod", True),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "events", "Event", True),
    Resource("batch", "v1", "jobs", "Job", True),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", False),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True),
    Resource("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", True),
    # built in since 1.34 (GA): list items without apiVersion/kind, as for core kinds
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
    Resource("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", True),
    Resource("kubeflow.org", "v1", "tfjobs", "TFJob", True),
    Resource("kubeflow.org", "v1", "mpijobs", "MPIJob", True),
    Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", True),
    Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", True),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True),
]
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(code: int, reason: str, message: str, details: dict | None = None
                  ) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure" if code >= 300 else "Success",
                           "message": message, "reason": reason, "code": code}
    if details:
        out["details"] = details
    return out


# --- selectors ---------------------------------------------------------------------------
_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def label_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality, inequality, set (in/notin) and existence requirements, ANDed."""
    if not selector:
        return True
    for req in _split_selector(selector):
        m = _SET_RE.match(req)
        if m:
            key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in" and labels.get(key) not in vals:
                return False
            if op == "notin" and key in labels and labels[key] in vals:
                return False
        elif "!=" in req:
            k, v = (s.strip() for s in req.split("!=", 1))
            if labels.get(k) == v:
                return False
        elif "=" in req:
            k, v = (s.strip() for s in req.replace("==", "=").split("=", 1))
            if labels.get(k) != v:
                return False
        elif req.startswith("!"):
            if req[1:].strip() in labels:
                return False
        elif req not in labels:
            return False
    return True


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def field_matches(selector: str | None, obj: dict[str, Any]) -> bool:
    """``a.b=v`` / ``a.b==v`` / ``a.b!=v`` requirements, ANDed (metadata.name, spec.nodeName...)."""
    if not selector:
        return True
    for req in _split_selector(selector):
        if "!=" in req:
            k, v = req.split("!=", 1)
            if _field(obj, k.strip()) == v.strip():
                return False
        else:
            k, v = req.replace("==", "=").split("=", 1)
            if _field(obj, k.strip()) != v.strip():
                return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also used for strategic merge in simple cases)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# --- Pod update rules (pkg/apis/core/validation/validation.go) ---------------------------
def _bare(value: Any) -> Any:
    """Drop None, empty lists and empty maps, recursively: apiequality.Semantic.DeepEqual
    treats nil and empty slices and maps alike."""
    if isinstance(value, dict):
        out = {k: _bare(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_bare(v) for v in value]
    return value


def _required_terms(spec: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The pod's required nodeSelectorTerms, or None when it has no required node affinity."""
    node_aff = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    req = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if req is None else list(req.get("nodeSelectorTerms") or [])


def _term_has_only_additions(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """``validateNodeSelectorTermHasOnlyAdditions``: an empty old term stays empty; else the
    old matchExpressions and matchFields are a prefix of the new ones."""
    old_me, old_mf = _bare(old.get("matchExpressions") or []), _bare(old.get("matchFields") or [])
    new_me, new_mf = _bare(new.get("matchExpressions") or []), _bare(new.get("matchFields") or [])
    if not old_me and not old_mf and (new_me or new_mf):
        return False
    return new_me[:len(old_me)] == old_me and new_mf[:len(old_mf)] == old_mf \
        and len(new_me) >= len(old_me) and len(new_mf) >= len(old_mf)


def pod_update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why the API server would refuse this Pod update (empty: it accepts it).

    Written from ``ValidatePodUpdate`` in kubernetes pkg/apis/core/validation/validation.go:

    * ``validateOnlyDeletedSchedulingGates``: every gate of the new spec must already be in
      the old one (gates are removed, never added after creation);
    * while the OLD pod is gated (``len(oldPod.Spec.SchedulingGates) > 0``):
      ``validateNodeSelectorMutation`` (nodeSelector: additions only) and
      ``validateNodeAffinityMutation`` (no required node affinity before: anything; else the
      same number of nodeSelectorTerms, each only gaining requirements,
      ``validateNodeSelectorTermHasOnlyAdditions``); the rest of nodeAffinity is free;
    * the other mutable fields: container and init container ``image``,
      ``activeDeadlineSeconds``, ``terminationGracePeriodSeconds``, ``tolerations``
      (``validateOnlyAddedTolerations``: additions only); anything else of the spec must be
      unchanged ("pod updates may not change fields other than ...").
    """
    errors: list[str] = []
    o_spec, n_spec = old.get("spec") or {}, new.get("spec") or {}
    o_gates = {g.get("name") for g in o_spec.get("schedulingGates") or []}
    for i, gate in enumerate(n_spec.get("schedulingGates") or []):
        if gate.get("name") not in o_gates:
            errors.append(f"spec.schedulingGates[{i}].name: Forbidden: only deletion is "
                          f"allowed, but found new scheduling gate '{gate.get('name')}'")
    o_tol = _bare(o_spec.get("tolerations") or [])
    n_tol = _bare(n_spec.get("tolerations") or [])
    if any(t not in n_tol for t in o_tol):
        errors.append("spec.tolerations: Forbidden: existing toleration can not be modified "
                      "except its tolerationSeconds")
    munged = copy.deepcopy(n_spec)
    for field_name in ("containers", "initContainers"):
        olds = o_spec.get(field_name) or []
        for i, c in enumerate(munged.get(field_name) or []):
            if i < len(olds) and isinstance(c, dict):
                c["image"] = olds[i].get("image")
    for key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds", "tolerations",
                "schedulingGates"):
        munged[key] = o_spec.get(key)
    if o_gates:
        o_sel, n_sel = o_spec.get("nodeSelector") or {}, n_spec.get("nodeSelector") or {}
        if any(n_sel.get(k) != v for k, v in o_sel.items()):
            errors.append("spec.nodeSelector: Invalid value: only additions to "
                          "spec.nodeSelector are allowed (no mutations or deletions)")
        munged["nodeSelector"] = o_spec.get("nodeSelector")
        o_terms, n_terms = _required_terms(o_spec), _required_terms(n_spec) or []
        path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution" \
            ".nodeSelectorTerms"
        if o_terms:
            if len(o_terms) != len(n_terms):
                errors.append(f"{path}: Invalid value: no additions/deletions to non-empty "
                              "NodeSelectorTerms list are allowed")
            else:
                errors.extend(
                    f"{path}[{i}]: Invalid value: only additions are allowed (no mutations "
                    "or deletions)" for i, (nt, ot) in enumerate(zip(n_terms, o_terms,
                                                                      strict=True))
                    if not _term_has_only_additions(nt, ot))
        o_aff = o_spec.get("affinity") or {}
        aff = dict(munged.get("affinity") or {})
        aff["nodeAffinity"] = o_aff.get("nodeAffinity")
        munged["affinity"] = aff
    if _bare(munged) != _bare(o_spec):
        changed = sorted(k for k in set(munged) | set(o_spec)
                         if _bare(munged.get(k)) != _bare(o_spec.get(k)))
        errors.append(f"spec: Forbidden: pod updates may not change fields other than "
                      f"`spec.containers[*].image`, `spec.initContainers[*].image`, "
                      f"`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                      f"existing tolerations), `spec.terminationGracePeriodSeconds` (allow it "
                      f"to be set to 1 if it was previously negative) (changed: "
                      f"{', '.join(changed)})")
    return errors


# --- Event create rules (pkg/apis/core/validation/events.go) -----------------------------
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


def event_create_errors(event: dict[str, Any], namespace: str) -> list[str]:
    """Why the API server would refuse creating this core/v1 Event (empty: it accepts it).

    ``ValidateEventCreate`` for a core/v1 request runs ``legacyValidateEvent`` only: an Event
    without ``eventTime`` must be in its involvedObject's namespace (an involvedObject
    without one — a Node — goes to "" or "default"), and the namespace must be a DNS-1123
    subdomain. The events.k8s.io/v1 rules (eventTime, reportingController, note length)
    are not applied to core/v1 requests."""
    errors: list[str] = []
    involved = event.get("involvedObject") if isinstance(event.get("involvedObject"),
                                                         dict) else {}
    if not event.get("eventTime"):
        ins = involved.get("namespace") or ""
        if (not ins and namespace not in ("", "default")) or (ins and ins != namespace):
            errors.append(f"involvedObject.namespace: Invalid value: {ins!r}: does not "
                          f"match event.namespace")
    if not _DNS1123_SUBDOMAIN.match(namespace or "") or len(namespace) > 253:
        errors.append(f"metadata.namespace: Invalid value: {namespace!r}")
    return errors


@dataclass
class Event:
    rv: int
    type: str
    resource: Resource
    obj: dict[str, Any]
    prev: dict[str, Any] | None = None  # the state before a MODIFIED

    def seen_as(self, ns: str | None, ls: str | None, fs: str | None) -> str | None:
        """The event type a watch with these selectors receives, or None (filtered out).

        As the API server does: an object that starts matching arrives as ADDED, one that
        stops matching as DELETED."""
        def match(o: dict[str, Any] | None) -> bool:
            return o is not None and (ns is None or o["metadata"].get("namespace") == ns) \
                and KubeApiDouble._matches(o, ls, fs)

        now = match(self.obj)
        if self.type != "MODIFIED":
            return self.type if now else None
        before = match(self.prev)
        if now and before:
            return "MODIFIED"
        if now:
            return "ADDED"
        return "DELETED" if before else None


class _QuietServer(ThreadingHTTPServer):
    """Clients killed mid-request (crash drills) are normal here, not worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class KubeApiDouble:
    """The in-memory API server state plus the HTTP server that serves it.

    ``start()`` binds 127.0.0.1 (port 0 = any free port) and serves in a daemon thread;
    ``url`` is what a ``kubernetes.client.Configuration.host`` should be set to.
    """

    def __init__(self, *, port: int = 0, bookmark_interval: float = 1.0) -> None:
        self._lock = threading.Condition()
        self._objects: dict[Resource, dict[tuple[str, str], dict[str, Any]]] = {
            r: {} for r in RESOURCES}
        self._rv = 1
        self._history: list[Event] = []
        self._history_rvs: list[int] = []
        self._compacted = 0
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.latency = 0.0
        self.down: str | None = None
        #: "plural" or "namespace/plural" entries answered 403 Forbidden (RBAC drills)
        self.forbidden: set[str] = set()
        self._generation = 0  # bumped when the API "goes away": open watches are cut
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.stats: Counter[str] = Counter()
        #: (verb, apiGroup, resource, namespace or "") of every API request, as RBAC sees it
        self.verbs: Counter[tuple[str, str, str, str]] = Counter()
        self._conns: set[Any] = set()

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> KubeApiDouble:
        double = self

        class Handler(_Handler):
            api = double

        server = _QuietServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._stopping = False
        self._thread = threading.Thread(target=server.serve_forever, kwargs={
            "poll_interval": 0.05}, name="k8s-double", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._generation += 1
            self._lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _cut_connections(self) -> None:
        """Reset every open client connection, as a crashed or partitioned API server would."""
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def set_down(self, mode: str | None) -> None:
        """``"503"``: every API request answers 503; ``"refuse"``: nothing listens on the
        port; ``None``: serve again (same port, same state). Open watches are cut."""
        with self._lock:
            self._generation += 1
            self._lock.notify_all()
        if mode == "refuse":
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None
            self.down = "refuse"
            self._cut_connections()
            return
        if self.down == "refuse" and self._server is None:
            self.down = None
            self.start()
        self.down = mode

    # --- state -------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def compact(self) -> int:
        """Forget all history: a watch from any older resourceVersion now gets 410 Gone."""
        with self._lock:
            self._compacted = self._rv
            self._history.clear()
            self._history_rvs.clear()
            self._lock.notify_all()
            return self._rv

    def _record(self, etype: str, res: Resource, obj: dict[str, Any],
                prev: dict[str, Any] | None = None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._history.append(Event(rv, etype, res, copy.deepcopy(obj), prev))
        self._history_rvs.append(rv)
        if len(self._history) > 100_000:  # keep memory bounded like etcd compaction does
            self._compacted = self._history_rvs[49_999]
            del self._history[:50_000]
            del self._history_rvs[:50_000]
        self._lock.notify_all()

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def create(self, res: Resource, namespace: str | None, body: dict[str, Any]
               ) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
        name = md.get("name")
        if not name:
            raise ApiError(422, "Invalid", f"{res.kind} is invalid: metadata.name: Required value")
        ns = (namespace or md.get("namespace") or "default") if res.namespaced else ""
        if res.namespaced:
            md["namespace"] = ns
        if res.plural == "events" and (errors := event_create_errors(obj, ns)):
            raise ApiError(422, "Invalid", f'Event "{name}" is invalid: ' + "; ".join(errors))
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        with self._lock:
            store = self._objects[res]
            if (ns, name) in store:
                raise ApiError(409, "AlreadyExists", f'{res.plural} "{name}" already exists',
                               {"name": name, "kind": res.plural})
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            md["resourceVersion"] = self._next_rv()
            md.pop("deletionTimestamp", None)
            store[(ns, name)] = obj
            self._record("ADDED", res, obj)
            return copy.deepcopy(obj)

    def _get_locked(self, res: Resource, ns: str, name: str) -> dict[str, Any]:
        obj = self._objects[res].get((ns if res.namespaced else "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{res.plural} "{name}" not found',
                           {"name": name, "kind": res.plural})
        return obj

    def get(self, res: Resource, ns: str, name: str) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._get_locked(res, ns, name))

    def replace(self, res: Resource, ns: str, name: str, body: dict[str, Any], *,
                validate: bool = False) -> dict[str, Any]:
        """PUT. ``validate``: apply the API server's update rules (HTTP requests do)."""
        with self._lock:
            cur = self._get_locked(res, ns, name)
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != cur["metadata"]["resourceVersion"]:
                raise ApiError(
                    409, "Conflict",
                    f'Operation cannot be fulfilled on {res.plural} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and try "
                    "again", {"name": name, "kind": res.plural})
            if validate:
                self._validate_update(res, cur, body)
            return self._write_locked(res, cur, copy.deepcopy(body))

    @staticmethod
    def _validate_update(res: Resource, cur: dict[str, Any], new: dict[str, Any]) -> None:
        if res.kind != "Pod":
            return
        errors = pod_update_errors(cur, new)
        if errors:
            name = cur["metadata"]["name"]
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: ' + "; ".join(errors),
                           {"name": name, "kind": "pods"})

    def _write_locked(self, res: Resource, cur: dict[str, Any], obj: dict[str, Any]
                      ) -> dict[str, Any]:
        md = obj.setdefault("metadata", {})
        for k in ("name", "namespace", "uid", "creationTimestamp"):
            if k in cur["metadata"]:
                md[k] = cur["metadata"][k]
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        md["resourceVersion"] = self._next_rv()
        ns = md.get("namespace", "") if res.namespaced else ""
        self._objects[res][(ns, md["name"])] = obj
        self._record("MODIFIED", res, obj, prev=cur)
        return copy.deepcopy(obj)

    def patch(self, res: Resource, ns: str, name: str, body: Any, content_type: str, *,
              validate: bool = False) -> dict[str, Any]:
        with self._lock:
            cur = self._get_locked(res, ns, name)
            if "json-patch" in content_type:
                try:
                    new = jsonpatch.apply_patch(copy.deepcopy(cur), body)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    raise ApiError(422, "Invalid", f"json patch: {exc}") from exc
            else:
                new = merge_patch(cur, body)
            want = (new.get("metadata") or {}).get("resourceVersion")
            if want and want != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                               f'{res.plural} "{name}": the object has been modified',
                               {"name": name, "kind": res.plural})
            if validate:
                self._validate_update(res, cur, new)
            return self._write_locked(res, cur, new)

    def delete(self, res: Resource, ns: str, name: str, body: dict[str, Any] | None = None
               ) -> dict[str, Any]:
        with self._lock:
            cur = self._get_locked(res, ns, name)
            pre = (body or {}).get("preconditions") or {}
            if pre.get("resourceVersion") and pre["resourceVersion"] != \
                    cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                               f'{res.plural} "{name}": Precondition failed: '
                               "ResourceVersion mismatch", {"name": name, "kind": res.plural})
            if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f'Precondition failed: UID in precondition: '
                               f'{pre["uid"]}, UID in object meta: {cur["metadata"]["uid"]}',
                               {"name": name, "kind": res.plural})
            key = (cur["metadata"].get("namespace", "") if res.namespaced else "", name)
            del self._objects[res][key]
            gone = copy.deepcopy(cur)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            self._record("DELETED", res, gone)
            return status_object(200, "", "", {"name": name, "kind": res.plural,
                                                "uid": cur["metadata"]["uid"]})

    def list(self, res: Resource, ns: str | None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict[str, Any]], int]:
        with self._lock:
            items = [copy.deepcopy(o) for (ons, _), o in sorted(self._objects[res].items())
                     if (ns is None or ons == ns) and self._matches(o, label_selector,
                                                                    field_selector)]
            return items, self._rv

    @staticmethod
    def _matches(obj: dict[str, Any], ls: str | None, fs: str | None) -> bool:
        md = obj.get("metadata") or {}
        return label_matches(ls, md.get("labels") or {}) and field_matches(fs, obj)

    # --- convenience for tests ------------------------------------------------------------------
    def resource_for(self, obj: dict[str, Any]) -> Resource:
        return BY_KIND[(obj["apiVersion"], obj["kind"])]

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create, or replace unconditionally: seeds a cluster in a test."""
        res = self.resource_for(obj)
        md = obj.get("metadata") or {}
        ns = md.get("namespace", "default") if res.namespaced else ""
        try:
            return self.create(res, ns, obj)
        except ApiError as exc:
            if exc.code != 409:
                raise
            body = copy.deepcopy(obj)
            body.setdefault("metadata", {}).pop("resourceVersion", None)
            return self.replace(res, ns, md["name"], body)

    def remove(self, obj: dict[str, Any]) -> None:
        res = self.resource_for(obj)
        md = obj.get("metadata") or {}
        self.delete(res, md.get("namespace", "default") if res.namespaced else "", md["name"])

    def objects(self, api_version: str, kind: str) -> list[dict[str, Any]]:
        items, _ = self.list(BY_KIND[(api_version, kind)], None)
        return items


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiDouble
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else ~40 ms per response (delayed ACK)
    server_version = "k8s-api-test-double/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
        pass

    def setup(self) -> None:
        super().setup()
        with self.api._lock:
            self.api._conns.add(self.connection)

    def finish(self) -> None:
        with self.api._lock:
            self.api._conns.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    # --- plumbing ------------------------------------------------------------------------
    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.api.stats[f"{self.command} {code}"] += 1

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n and not self._body_read else b""
        self._body_read = True
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"body is not JSON: {exc}") from exc

    def _object_body(self) -> dict[str, Any]:
        """The body of a create or update: an object, as the real API server insists.

        Why: a writer killed after its headers went out leaves an empty body; taking that
        for ``{}`` replaced objects with label-less blanks no real API server would write.
        """
        body = self._body()
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "Object 'Kind' is missing in the request body "
                           "(empty or not a JSON object)")
        return body

    def _route(self) -> tuple[Resource, str | None, str | None, dict[str, str]]:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        segs = [s for s in parts.path.split("/") if s]
        if segs[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested "
                           f"resource ({parts.path})")
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", f"no resource in path {parts.path}")
        res = BY_PATH.get((group, version, rest[0]))
        if res is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested "
                           f"resource ({parts.path})")
        name = rest[1] if len(rest) > 1 else None
        return res, ns, name, query

    def _handle(self) -> None:
        api = self.api
        self._body_read = False
        if self.path.startswith("/_double/"):
            self._control()
            return
        if api.latency:
            time.sleep(api.latency)
        if api.down == "503":
            self._send_json(503, status_object(503, "ServiceUnavailable",
                                               "the API test double is down (drill)"))
            return
        try:
            res, ns, name, q = self._route()
            m = self.command
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete"}.get(m, "get" if name else (
                        "watch" if q.get("watch") in ("1", "true") else "list"))
            api.verbs[(verb, res.group, res.plural, ns or "")] += 1
            if res.plural in api.forbidden or f"{ns}/{res.plural}" in api.forbidden:
                raise ApiError(403, "Forbidden", f'{res.plural} is forbidden: User '
                               f'"system:serviceaccount:test" cannot {m.lower()} resource '
                               f'"{res.plural}" in namespace "{ns or ""}" (test double)')
            if m == "GET" and name is None:
                if q.get("watch") in ("1", "true"):
                    self._watch(res, ns, q)
                else:
                    self._list(res, ns, q)
            elif m == "GET":
                self._send_json(200, api.get(res, ns or "", name))
            elif m == "POST" and name is None:
                self._send_json(201, api.create(res, ns, self._object_body()))
            elif m == "PUT" and name:
                body = self._object_body()
                if (body.get("metadata") or {}).get("name", name) != name:
                    raise ApiError(400, "BadRequest", "the name of the object does not "
                                   "match the name on the URL")
                self._send_json(200, api.replace(res, ns or "", name, body, validate=True))
            elif m == "PATCH" and name:
                ctype = self.headers.get("Content-Type", "application/merge-patch+json")
                self._send_json(200, api.patch(res, ns or "", name, self._body(), ctype,
                                               validate=True))
            elif m == "DELETE" and name:
                self._send_json(200, api.delete(res, ns or "", name, self._body()))
            else:
                raise ApiError(405, "MethodNotAllowed", f"{m} not supported on {self.path}")
        except ApiError as exc:
            with contextlib.suppress(OSError):  # the client may be gone (killed mid-request)
                # a request refused before its body was read (403, 405): read it all the
                # same, or its bytes would be taken for the next request on the connection
                with contextlib.suppress(ApiError):
                    self._body()
                self._send_json(exc.code, exc.status())
        except OSError:  # BrokenPipe, ConnectionReset: the client went away
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def _list(self, res: Resource, ns: str | None, q: dict[str, str]) -> None:
        items, rv = self.api.list(res, ns, q.get("labelSelector"), q.get("fieldSelector"))
        if not res.custom:  # built-in list items carry no apiVersion/kind on the wire
            for it in items:
                it.pop("apiVersion", None)
                it.pop("kind", None)
        self._send_json(200, {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                              "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _chunk(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, res: Resource, ns: str | None, q: dict[str, str]) -> None:
        api = self.api
        ls, fs = q.get("labelSelector"), q.get("fieldSelector")
        timeout = float(q.get("timeoutSeconds") or 1800)
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        deadline = time.monotonic() + timeout
        rv_param = q.get("resourceVersion") or ""
        initial: list[dict[str, Any]] = []
        too_old = False
        with api._lock:
            gen = api._generation
            if rv_param in ("", "0"):
                initial = [copy.deepcopy(o) for (ons, _), o in sorted(api._objects[res].items())
                           if (ns is None or ons == ns) and api._matches(o, ls, fs)]
                last = api._rv
            else:
                try:
                    last = int(rv_param)
                except ValueError:
                    last = -1
                too_old = last < api._compacted
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        api.stats["WATCH 200"] += 1
        try:
            if rv_param not in ("", "0") and too_old:
                self._chunk({"type": "ERROR", "object": status_object(
                    410, "Expired", f"too old resource version: {rv_param} "
                    f"({api._compacted})")})
                api.stats["WATCH 410"] += 1
                self._end()
                return
            for o in initial:
                self._chunk({"type": "ADDED", "object": o})
            last_sent = time.monotonic()
            while True:
                with api._lock:
                    while True:
                        if api._stopping or api._generation != gen:
                            # the API went away: cut the stream without a clean end
                            self.close_connection = True
                            return
                        if last < api._compacted:
                            ev_list = None
                            break
                        i = bisect.bisect_right(api._history_rvs, last)
                        ev_list = [(t, e) for e in api._history[i:] if e.resource is res
                                   and (t := e.seen_as(ns, ls, fs)) is not None]
                        newest = api._rv
                        if ev_list or time.monotonic() >= deadline:
                            break
                        if bookmarks and time.monotonic() - last_sent >= api.bookmark_interval:
                            break
                        api._lock.wait(0.1)
                if ev_list is None:
                    self._chunk({"type": "ERROR", "object": status_object(
                        410, "Expired", f"too old resource version: {last}")})
                    break
                for etype, e in ev_list:
                    self._chunk({"type": etype, "object": e.obj})
                    last = e.rv
                if ev_list:
                    last_sent = time.monotonic()
                elif bookmarks and time.monotonic() - last_sent >= api.bookmark_interval:
                    last = max(last, newest)
                    self._chunk({"type": "BOOKMARK", "object": {
                        "kind": res.kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(last)}}})
                    last_sent = time.monotonic()
                if time.monotonic() >= deadline:
                    break
            self._end()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _control(self) -> None:
        parts = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        what = parts.path.removeprefix("/_double/")
        self._body()
        if what == "compact":
            self._send_json(200, {"resourceVersion": self.api.compact()})
        elif what == "latency":
            self.api.latency = float(q.get("seconds", "0"))
            self._send_json(200, {"latency": self.api.latency})
        elif what == "down":
            mode = q.get("mode") or None
            if mode == "refuse":
                self._send_json(400, {"error": "refuse can only be set in-process"})
                return
            self.api.set_down(mode)
            self._send_json(200, {"down": mode})
        elif what == "stats":
            self._send_json(200, dict(self.api.stats))
        else:
            self._send_json(404, {"error": f"unknown control {what}"})


@contextlib.contextmanager
def running_double(*, bookmark_interval: float = 0.2) -> Iterator[KubeApiDouble]:
    """A started double holding gputopo's namespace, stopped on exit: the fixture every
    test folder that talks to the API uses."""
    from gputopo import names

    api = KubeApiDouble(bookmark_interval=bookmark_interval).start()
    api.apply({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": names.GPUTOPO_NAMESPACE}})
    try:
        yield api
    finally:
        api.stop()
