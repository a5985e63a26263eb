"""Could the scheduler ever run this pod on that node? Its own node constraints, checked.

Why: the placement step pins a replica to one node (a required ``metadata.name`` term added
to every nodeSelectorTerm). If the pod's own ``nodeSelector``, required node affinity or
missing tolerations already rule that node out, the pin leaves it Pending for ever. So the
gang is solved over the nodes the pod could land on anyway, judged by the same rules as the
scheduler's NodeAffinity and TaintToleration filters (k8s.io/component-helpers
scheduling/corev1: nodeaffinity, FindMatchingUntoleratedTaint).

Why two halves: a new gang's first pod is checked against every node of the cluster (1,000s)
inside an admission. The node half (:class:`NodeFacts`) is read once per change of the Node
object and travels on its ``NodeState``; the pod half (:class:`PodConstraints`) is read once
per pod. Checking one against the other is then a few attribute reads — for the common pod
with no selector on an untainted node, one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputopo import names

#: GPU extended resources (the device plugin's): a pod asking one is no DRA pod
GPU_RESOURCE_NAMES = frozenset({names.SOURCE_GPU_RESOURCE, names.TOPOLOGY_GPU_RESOURCE})
#: Taint effects that keep a pod that does not tolerate them off a node.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: Labels the kubelet puts on every node. A Node object without one (a hand-written cluster
#: file, the embedded demo) says nothing about it, so a pod's requirement on it is not held
#: against the node — ``nodeSelector: {kubernetes.io/os: linux}`` is in countless charts.
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


@dataclass(frozen=True, eq=False)
class NodeFacts:
    """What the scheduler's node filters read of one Node object.

    ``unknown`` are the kubelet labels the object lacks (requirements on them hold);
    ``blocking_taints`` only the NoSchedule/NoExecute taints, plus the cordon taint.
    """

    name: str
    labels: Mapping[str, Any]
    unknown: frozenset[str]
    blocking_taints: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeFacts:
        meta = _mapping(node, "metadata")
        labels = _mapping(meta, "labels")
        spec = _mapping(node, "spec")
        taints = [t for t in _list(spec, "taints")
                  if isinstance(t, Mapping) and t.get("effect") in BLOCKING_EFFECTS]
        if spec.get("unschedulable") is True:  # cordoned: the NodeUnschedulable filter
            taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        return cls(name=str(meta.get("name") or ""), labels=dict(labels),
                   unknown=KUBELET_LABELS - set(labels), blocking_taints=tuple(taints))


def _int(text: object) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _requirement(req: object, value_of: Mapping[str, Any],
                 unknown: frozenset[str] = frozenset()) -> bool:
    """One NodeSelectorRequirement against label (or field) values; a requirement on an
    ``unknown`` key holds."""
    if not isinstance(req, Mapping):
        return False
    key, op = req.get("key"), req.get("operator")
    if not isinstance(key, str):
        return False
    if key in unknown:
        return True
    values = req.get("values") if isinstance(req.get("values"), list) else []
    have = value_of.get(key)
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(values) == 1:
        left, right = _int(have), _int(values[0])
        if left is None or right is None:
            return False
        return left > right if op == "Gt" else left < right
    return False


def _term(term: object, node: NodeFacts) -> bool:
    """A nodeSelectorTerm: all its requirements hold; an empty term matches nothing."""
    if not isinstance(term, Mapping):
        return False
    exprs, fields = _list(term, "matchExpressions"), _list(term, "matchFields")
    if not exprs and not fields:
        return False
    return (all(_requirement(r, node.labels, node.unknown) for r in exprs)
            and all(_requirement(r, {"metadata.name": node.name}) for r in fields))


def _tolerates(toleration: object, taint: Mapping[str, Any]) -> bool:
    if not isinstance(toleration, Mapping):
        return False
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    op = toleration.get("operator") or "Equal"
    if not key:
        return op == "Exists"  # an empty key with Exists tolerates every taint
    if key != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


@dataclass(frozen=True)
class PodConstraints:
    """A pod spec's nodeSelector, required node-affinity terms and tolerations.

    ``terms`` is None when the pod has no required node affinity (every node passes it);
    an empty list is a required affinity with no terms, which upstream also ignores.
    """

    selector: Mapping[str, Any] | None
    terms: list[Any] | None
    tolerations: list[Any]
    #: how the pod's GPUs must be handed out: ``device-plugin`` or ``dra`` (a pod whose
    #: GPUs come through claims, gputopo.cluster.dra); nodes of the other kind never fit
    handout: str = "device-plugin"

    @classmethod
    def of(cls, pod_spec: Mapping[str, Any]) -> PodConstraints:
        selector = pod_spec.get("nodeSelector")
        node_aff = _mapping(_mapping(pod_spec, "affinity"), "nodeAffinity")
        required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
        terms = _list(required, "nodeSelectorTerms") if isinstance(required, Mapping) else []
        return cls(selector=selector if isinstance(selector, Mapping) and selector else None,
                   terms=terms or None, tolerations=_list(pod_spec, "tolerations"),
                   handout=_handout(pod_spec) if pod_spec.get("resourceClaims") else
                   "device-plugin")

    def admits(self, node: NodeFacts) -> bool:
        """True when neither the selector, the required node affinity nor a taint the pod
        does not tolerate keeps it off ``node``."""
        if self.selector is not None and any(
                node.labels.get(k) != v for k, v in self.selector.items()
                if k not in node.unknown):
            return False
        if self.terms is not None and not any(_term(t, node) for t in self.terms):
            return False
        if not node.blocking_taints:  # most nodes: no generator to build
            return True
        return all(any(_tolerates(t, taint) for t in self.tolerations)
                   for taint in node.blocking_taints)


def _handout(pod_spec: Mapping[str, Any]) -> str:
    """``dra`` for a pod with claims and no GPU extended resource, else ``device-plugin``
    (a pod asking ``nvidia.com/gpu`` beside other claims, an RDMA NIC say)."""
    for key in ("containers", "initContainers"):
        for c in _list(pod_spec, key):
            res = _mapping(c, "resources") if isinstance(c, Mapping) else {}
            for part in ("limits", "requests"):
                if any(k in GPU_RESOURCE_NAMES for k in _mapping(res, part)):
                    return "device-plugin"
    return "dra"


def node_fits(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """True when neither the pod's nodeSelector, its required node affinity nor a taint it
    does not tolerate keeps it off ``node`` (a Node object)."""
    return PodConstraints.of(pod_spec).admits(NodeFacts.of(node))


def matches_terms(terms: list[Any], node: NodeFacts) -> bool:
    """True when ``node`` matches one of the nodeSelectorTerms (ORed; each term's
    requirements ANDed), as required node affinity and a PersistentVolume's node affinity
    are judged."""
    return any(_term(t, node) for t in terms)
