"""The user's own rules between pods: required pod (anti-)affinity and topology spread.

Why: gputopo pins every replica of a gang to a node. When the pod itself says "never two
of us on one node" (a required pod anti-affinity on ``kubernetes.io/hostname`` whose
selector matches the replicas' labels) or "at most maxSkew more of us on one node than on
another" (``topologySpreadConstraints`` with ``whenUnsatisfiable: DoNotSchedule``), a pin
that packs two replicas together leaves the second Pending for ever: the scheduler's
InterPodAffinity and PodTopologySpread filters keep it off the node it is pinned to. So:

- anti-affinity on the hostname between the replicas: at most one replica per node;
- spread on the hostname between the replicas: at most ``maxSkew`` per node (the skew
  counts from the emptiest eligible node, which, with more nodes than the gang spans,
  holds none of it: ``pkg/scheduler/framework/plugins/podtopologyspread/filtering.go``);
- anything gputopo cannot judge against a pin — required pod affinity (to other pods, or
  to the gang's own on any key), anti-affinity or spread on another key (zone, rack) — is
  said, and the gang is left unplaced for the scheduler to place (never a pin that may
  contradict it).

Selectors follow ``metav1.LabelSelector``: ``matchLabels`` and ``matchExpressions`` (In,
NotIn, Exists, DoesNotExist) all hold; an empty selector matches every pod, a missing one
none. A term restricted to other namespaces (``namespaces`` without the pod's own, or a
``namespaceSelector``) does not count the replicas. Pure: a pod spec in, a limit out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HOSTNAME = "kubernetes.io/hostname"


def _mapping(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(obj: object, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def selects(selector: object, labels: Mapping[str, Any]) -> bool:
    """True when the LabelSelector ``selector`` matches ``labels``."""
    if not isinstance(selector, Mapping):
        return False
    for k, v in _mapping(selector, "matchLabels").items():
        if labels.get(k) != v:
            return False
    for req in _list(selector, "matchExpressions"):
        if not isinstance(req, Mapping):
            return False
        key, op = req.get("key"), req.get("operator")
        values = req.get("values") if isinstance(req.get("values"), list) else []
        have = labels.get(key) if isinstance(key, str) else None
        if op == "In" and (have is None or have not in values):
            return False
        if op == "NotIn" and have is not None and have in values:
            return False
        if op == "Exists" and have is None:
            return False
        if op == "DoesNotExist" and have is not None:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _counts_replicas(term: Mapping[str, Any], namespace: str, labels: Mapping[str, Any]
                     ) -> bool:
    """The (anti-)affinity term's selector takes in the gang's own pods."""
    spaces = term.get("namespaces")
    if isinstance(spaces, list) and spaces and namespace not in spaces:
        return False
    if "namespaceSelector" in term and term.get("namespaceSelector") != {}:
        return False  # other namespaces by label: not judged here
    return selects(term.get("labelSelector"), labels)


@dataclass(frozen=True)
class Spread:
    """What the pod's own rules allow: ``per_node`` replicas at most on one node (None: no
    limit), why, and ``unjudged``: a rule a pin might break, which leaves the gang
    unplaced ("" when none)."""

    per_node: int | None = None
    why: str = ""
    unjudged: str = ""


NO_RULES = Spread()


def spread_of(pod: Mapping[str, Any]) -> Spread:
    """The limits a pod's required pod anti-affinity and DoNotSchedule topology spread set
    between the replicas of its gang (which share its labels), and what gputopo cannot
    judge (see the module docstring)."""
    spec = _mapping(pod, "spec")
    affinity = _mapping(spec, "affinity")
    spreads = _list(spec, "topologySpreadConstraints")
    if not affinity and not spreads:
        return NO_RULES  # the common pod: two lookups
    meta = _mapping(pod, "metadata")
    labels = _mapping(meta, "labels")
    namespace = str(meta.get("namespace") or "default")
    cap: int | None = None
    why: list[str] = []
    unjudged: list[str] = []
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    if _list(_mapping(affinity, "podAffinity"), req):
        unjudged.append("the pod has a required pod affinity, which gputopo does not judge "
                        "against a pin")
    for term in _list(_mapping(affinity, "podAntiAffinity"), req):
        if not isinstance(term, Mapping) or not _counts_replicas(term, namespace, labels):
            continue
        key = term.get("topologyKey")
        if key == HOSTNAME:
            cap = 1
            why.append("its required pod anti-affinity keeps its replicas on separate nodes")
        else:
            unjudged.append(f"its required pod anti-affinity on {key!r} keeps replicas "
                            f"apart across domains gputopo does not place by")
    for c in spreads:
        if not isinstance(c, Mapping) or c.get("whenUnsatisfiable", "DoNotSchedule") \
                != "DoNotSchedule" or not selects(c.get("labelSelector"), labels):
            continue
        skew = c.get("maxSkew")
        key = c.get("topologyKey")
        if key == HOSTNAME and isinstance(skew, int) and not isinstance(skew, bool) \
                and skew >= 1:
            cap = skew if cap is None else min(cap, skew)
            why.append(f"its topology spread (maxSkew {skew} per node, DoNotSchedule) "
                       f"allows at most {skew} replica(s) per node")
        else:
            unjudged.append(f"its topology spread on {key!r} (DoNotSchedule) spreads "
                            f"replicas across domains gputopo does not place by")
    return Spread(per_node=cap, why="; ".join(why), unjudged="; ".join(unjudged))


def tighter(a: int | None, b: int | None) -> int | None:
    """The smaller of two per-node limits (None: none)."""
    if a is None:
        return b
    return a if b is None else min(a, b)
