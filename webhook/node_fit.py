"""Could the scheduler ever run this pod on that node? Its own node constraints, checked.

Why: the placement step pins a replica to one node (a required ``metadata.name`` term added
to every nodeSelectorTerm). If the pod's own ``nodeSelector``, required node affinity or
missing tolerations already rule that node out, the pin leaves it Pending for ever. So the
gang is solved over the nodes the pod could land on anyway, judged by the same rules as the
scheduler's NodeAffinity and TaintToleration filters (k8s.io/component-helpers
scheduling/corev1: nodeaffinity, FindMatchingUntoleratedTaint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def _labels(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
    labels = meta.get("labels")
    return labels if isinstance(labels, Mapping) else {}


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


def _term(term: object, labels: Mapping[str, Any], name: str) -> bool:
    """A nodeSelectorTerm: all its requirements hold; an empty term matches nothing."""
    if not isinstance(term, Mapping):
        return False
    exprs = term.get("matchExpressions") if isinstance(term.get("matchExpressions"), list) else []
    fields = term.get("matchFields") if isinstance(term.get("matchFields"), list) else []
    if not exprs and not fields:
        return False
    unknown = KUBELET_LABELS - set(labels)
    return (all(_requirement(r, labels, unknown) for r in exprs)
            and all(_requirement(r, {"metadata.name": name}) for r in fields))


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


def node_fits(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """True when neither the pod's nodeSelector, its required node affinity nor a taint it
    does not tolerate keeps it off ``node`` (a Node object)."""
    meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
    name = str(meta.get("name") or "")
    labels = _labels(node)
    selector = pod_spec.get("nodeSelector")
    unknown = KUBELET_LABELS - set(labels)
    if isinstance(selector, Mapping) and any(
            labels.get(k) != v for k, v in selector.items() if k not in unknown):
        return False
    affinity = pod_spec.get("affinity") if isinstance(pod_spec.get("affinity"), Mapping) else {}
    node_aff = affinity.get("nodeAffinity")
    required = (node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(node_aff, Mapping) else None)
    if isinstance(required, Mapping):
        terms = required.get("nodeSelectorTerms")
        if isinstance(terms, list) and terms and not any(_term(t, labels, name) for t in terms):
            return False
    spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
    taints = list(spec.get("taints")) if isinstance(spec.get("taints"), list) else []
    if spec.get("unschedulable") is True:  # cordoned: the NodeUnschedulable filter
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    tolerations = pod_spec.get("tolerations")
    tolerations = tolerations if isinstance(tolerations, list) else []
    for taint in taints:
        if (isinstance(taint, Mapping) and taint.get("effect") in BLOCKING_EFFECTS
                and not any(_tolerates(t, taint) for t in tolerations)):
            return False
    return True
