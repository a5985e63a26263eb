"""A cluster as a fixed set of objects: what ``mutate``, ``place`` and the demo run on.

Why: the offline commands must take the same decisions as the server, so they read the
same kinds of objects through the same :class:`~gputopo.cluster.source.ClusterReader`
interface; a cluster file is just what the API server would have returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputopo import names
from gputopo.cluster import objects as ob
from gputopo.cluster.dra import DraNode, gpu_inventory
from gputopo.cluster.gpu_facts import gpu_identities_of
from gputopo.cluster.source import namespace_opted_in
from gputopo.errors import InputError, TopologyError
from gputopo.placement.types import NodeState
from gputopo.yamlio import load_documents

Key = tuple[str, str, str, str]  # (apiVersion group, kind, namespace, name)


def object_key(api_version: str, kind: str, namespace: str | None, name: str) -> Key:
    """Index key; the version is dropped so v1 and v2beta1 of a kind meet (matchPolicy
    Equivalent) — a job is found whatever version its owner reference names."""
    group = api_version.split("/")[0] if "/" in api_version else ""
    return (group, kind, namespace or "", name)


@dataclass
class ClusterSnapshot:
    """Objects indexed for lookup; implements ClusterReader."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    source: str = "<objects>"
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._index: dict[Key, dict[str, Any]] = {}
        #: Namespace name -> its object, and -> whether it opted in: kept by ``add`` (the
        #: only way an object changes here), filled in place, never replaced, so that
        #: ``namespace_opted_in`` can be their own C ``get``.
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._opted_in: dict[str, bool] = {}
        #: The memory-only reader's opt-in answer per namespace name (None: no such
        #: Namespace here). Why a bound ``dict.get``: the server's event loop asks it of
        #: every review, and on the idle benchmark guest each Python function a review
        #: touches costs on its own cold (``namespace()`` and its key: ~10 us, against
        #: ~3 for this and no Namespace object read; ``git show 5b1c38e:docs/benchmarks.md``,
        #: "Cold CPU: the event loop's share").
        self.namespace_opted_in = self._opted_in.get
        self._states: tuple[NodeState, ...] | None = None  # node_states() until the next add()
        for obj in self.objects:
            self.add(obj)

    # --- building -----------------------------------------------------------------------
    @classmethod
    def from_objects(
        cls, objs: Iterable[Mapping[str, Any]], *, source: str = "<objects>"
    ) -> ClusterSnapshot:
        return cls(objects=[dict(o) for o in objs], source=source)

    @classmethod
    def from_file(cls, path: str | Path) -> ClusterSnapshot:
        """Load a multi-document YAML cluster file; InputError naming the file if bad."""
        docs = load_documents(path)
        for k, doc in enumerate(docs):
            check_object(doc, file=str(path), position=k)
        items: list[dict[str, Any]] = []
        for k, doc in enumerate(docs):  # a `kubectl get -o yaml` List is flattened
            if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
                for item in doc["items"]:
                    check_object(item, file=str(path), position=k)
                    items.append(item)
            else:
                items.append(doc)
        return cls(objects=items, source=str(path))

    def add(self, obj: dict[str, Any]) -> None:
        """Add or replace one object (later documents win, as a later write would)."""
        self._states = None
        m = ob.meta(obj)
        key = object_key(
            str(obj.get("apiVersion", "")), str(obj.get("kind", "")),
            m.get("namespace"), str(m.get("name", "")),
        )
        if key in self._index:
            self.objects = [o for o in self.objects if o is not self._index[key]]
            self.objects.append(obj)
        elif obj not in self.objects:
            self.objects.append(obj)
        self._index[key] = obj
        if key[0] == "" and key[1] == "Namespace" and key[2] == "":  # what namespace() finds
            self._namespaces[key[3]] = obj
            self._opted_in[key[3]] = namespace_opted_in(obj)

    def discard_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Take the Pod ``namespace/name`` out (``gputopo mutate`` admits it as a pod being
        created: :func:`webhook.dryrun.not_yet_created`); the pod taken, or None."""
        key = object_key("v1", "Pod", namespace, name)
        pod = self._index.pop(key, None)
        if pod is not None:
            self._states = None
            self.objects = [o for o in self.objects if o is not pod]
        return pod

    # --- ClusterReader ------------------------------------------------------------------
    def namespace(self, name: str) -> dict[str, Any] | None:
        return self._namespaces.get(name)  # the object_key("v1", "Namespace", None, name)

    def memory_only(self) -> ClusterSnapshot:
        """A reader that never waits (see ``ClusterView.memory_only``): a snapshot holds
        everything in memory already, so itself."""
        return self

    def object(
        self, *, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        # object_key, inline: every job pod's review asks this (one function fewer cold)
        group = api_version.split("/")[0] if "/" in api_version else ""
        return self._index.get((group, kind, namespace or "", name))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """All objects of one kind, in file order."""
        return [o for o in self.objects if o.get("kind") == kind]

    def node_states(self) -> tuple[NodeState, ...]:
        """Activated nodes with usable topology; others are left out with a warning.

        Computed once per change (``add``): it is read once per gang solved, and at 1,000
        nodes rebuilding it costs ~45 ms, more than the solve itself. The same tuple until
        the next change (see ClusterView.node_states)."""
        if self._states is not None:
            return self._states
        used: dict[str, set[int]] = {}
        ports: dict[str, set[tuple[str, int]]] = {}
        requested: dict[str, list[Mapping[str, int]]] = {}
        for pod in self.of_kind("Pod"):
            asks = ob.requests_held_by_pod(pod)
            if asks is not None:
                requested.setdefault(asks[0], []).append(asks[1])
            held = ob.gpus_held_by_pod(pod)
            if held is not None:
                used.setdefault(held[0], set()).update(held[1])
            on_net = ob.host_ports_held_by_pod(pod)
            if on_net is not None:
                ports.setdefault(on_net[0], set()).update(on_net[1])
        reports = {
            ob.meta(cm).get("name"): cm
            for cm in self.of_kind("ConfigMap")
            if ob.meta(cm).get("namespace") == names.ACK_REPORT_NAMESPACE
        }
        states: list[NodeState] = []
        self.warnings = []
        dra = self._dra_inventory()
        for node in self.of_kind("Node"):
            if not ob.is_activated(node):
                continue
            name = str(ob.meta(node).get("name", ""))
            report = reports.get(f"{name}{names.ACK_REPORT_SUFFIX}")
            try:
                states.append(ob.node_state(node, used.get(name, ()), report,
                                             ports.get(name, ()), requested.get(name, ()),
                                             dra.get(name)))
            except TopologyError as exc:
                self.warnings.append(f"node {name}: left out of placement: {exc.reason}")
                continue
            self.warnings.extend(f"node {name}: {problem}"
                                 for problem in ob.network_annotation_problems(node))
        self._states = tuple(states)
        self._by_name = {n.name: n for n in states}
        return self._states

    def _dra_inventory(self) -> dict[str, DraNode]:
        """Per node, the GPU driver's devices and the used ones (gputopo.cluster.dra);
        empty when the objects hold no ResourceSlice."""
        slices = self.of_kind("ResourceSlice")
        if not slices:
            return {}
        identities = {str(ob.meta(n).get("name")): gpu_identities_of(n)
                      for n in self.of_kind("Node")}
        return gpu_inventory(slices, self.of_kind("ResourceClaim"), identities)

    def node_state(self, name: str) -> NodeState | None:
        """One node of :meth:`node_states` by name (a dict lookup: see ClusterView)."""
        if self._states is None:
            self.node_states()
        return self._by_name.get(name)


def check_object(doc: object, *, file: str, position: int) -> None:
    """Every document of a cluster or input file must look like a Kubernetes object."""
    where = f"document {position + 1}"
    if not isinstance(doc, dict):
        raise InputError("not a Kubernetes object (expected a mapping)", file=file, obj=where)
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError("missing 'kind'", file=file, obj=where)
    if not isinstance(doc.get("apiVersion"), str):
        raise InputError("missing 'apiVersion'", file=file, obj=f"{where} ({kind})")
    if kind.endswith("List"):
        return
    m = doc.get("metadata")
    if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not m.get("name"):
        raise InputError("missing metadata.name", file=file, obj=f"{where} ({kind})")
    if m.get("namespace") is not None and not isinstance(m.get("namespace"), str):
        raise InputError("metadata.namespace must be a string", file=file,
                         obj=f"{where} ({kind} {m['name']})")
