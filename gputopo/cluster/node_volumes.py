"""Which nodes can reach the pod's volumes? The scheduler's VolumeBinding and VolumeZone rules.

Why: a replica pinned to a node its PersistentVolume cannot be attached to (a local volume
of another node, a zonal disk of another zone) is Pending for ever, and under
Coscheduling its whole gang with it. So when a pod mounts claims, the nodes are judged as
the scheduler judges them:

- a claim bound to a PersistentVolume with ``spec.nodeAffinity.required``: the node must
  match one of its nodeSelectorTerms (VolumeBinding, ``volume_binding.go``; the same term
  rules as node affinity: gputopo.cluster.node_fit);
- the PV's zone and region labels (``topology.kubernetes.io/zone``, ``.../region`` and
  their ``failure-domain.beta`` forms; several zones joined by ``__``): a node that has
  any of those labels must carry one of the PV's values (VolumeZone, ``volume_zone.go``;
  a node with none of them passes);
- an unbound claim cannot be judged: with ``volumeBindingMode: WaitForFirstConsumer`` its
  volume is provisioned where the pod lands (the scheduler may still find no node the
  provisioner can serve); with ``Immediate`` the scheduler waits until it is bound; a
  missing claim keeps the pod Pending. Each is said in the placement record.

The objects are read through the cluster reader, one GET each on a live cluster (the view
watches no claims or volumes: only pods that mount claims need them, and few do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gputopo.cluster.node_fit import NodeFacts, matches_terms
from gputopo.cluster.source import ClusterReader

#: Labels VolumeZone compares (GA and beta)
ZONE_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region",
               "failure-domain.beta.kubernetes.io/zone",
               "failure-domain.beta.kubernetes.io/region")
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


def _mapping(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def claim_names(spec: Mapping[str, Any]) -> list[str]:
    """The PersistentVolumeClaims a pod spec mounts (``volumes[].persistentVolumeClaim``)."""
    volumes = spec.get("volumes")
    out = []
    for v in volumes if isinstance(volumes, list) else ():
        name = _mapping(v, "persistentVolumeClaim").get("claimName")
        if isinstance(name, str) and name:
            out.append(name)
    return out


@dataclass(frozen=True)
class VolumeRule:
    """One bound claim's limits: its PV's node affinity terms (None: none) and zone labels."""

    claim: str
    volume: str
    terms: tuple[Any, ...] | None
    zones: Mapping[str, frozenset[str]]

    def refuses(self, node: NodeFacts) -> str:
        """Why ``node`` cannot reach this volume ("" when it can)."""
        if self.terms is not None and not matches_terms(list(self.terms), node):
            return f"volume {self.volume} (claim {self.claim}) is not reachable there"
        if self.zones and any(k in node.labels for k in ZONE_LABELS):
            for key, values in self.zones.items():
                if node.labels.get(key) not in values:
                    return (f"volume {self.volume} (claim {self.claim}) is in "
                            f"{key}={'/'.join(sorted(values))}")
        return ""


@dataclass(frozen=True)
class Volumes:
    """What a pod's claims say: ``rules`` nodes must pass, ``notes`` that gputopo cannot
    judge (unbound claims), one sentence each."""

    rules: tuple[VolumeRule, ...] = ()
    notes: tuple[str, ...] = ()

    def refusals(self, nodes: Sequence[Any]) -> dict[str, str]:
        """Per node (a NodeState with facts) that cannot reach a volume, why."""
        out: dict[str, str] = {}
        if not self.rules:
            return out
        for n in nodes:
            facts = n.facts
            if facts is None:
                continue  # nothing known against it
            for rule in self.rules:
                why = rule.refuses(facts)
                if why:
                    out[n.name] = why
                    break
        return out


NO_VOLUMES = Volumes()


def pod_volumes(cluster: ClusterReader, pod: Mapping[str, Any]) -> Volumes:
    """The volume rules of ``pod``'s claims (no reads at all for a pod without claims)."""
    spec = _mapping(pod, "spec")
    claims = claim_names(spec)
    if not claims:
        return NO_VOLUMES
    namespace = str(_mapping(pod, "metadata").get("namespace") or "default")
    rules: list[VolumeRule] = []
    notes: list[str] = []
    for claim in claims:
        pvc = cluster.object(api_version="v1", kind="PersistentVolumeClaim",
                             namespace=namespace, name=claim)
        if pvc is None:
            notes.append(f"claim {claim} was not found: the scheduler keeps the pod "
                         f"Pending until it exists")
            continue
        volume = _mapping(pvc, "spec").get("volumeName")
        if not volume or _mapping(pvc, "status").get("phase") not in (None, "Bound"):
            cls = _mapping(pvc, "spec").get("storageClassName")
            sc = cluster.object(api_version="storage.k8s.io/v1", kind="StorageClass",
                                namespace=None, name=str(cls)) if cls else None
            if sc is not None and sc.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER:
                notes.append(f"claim {claim} is bound where the pod lands "
                             f"(WaitForFirstConsumer): gputopo cannot tell which nodes its "
                             f"storage class can provision on")
            else:
                notes.append(f"claim {claim} is not bound yet: the scheduler waits for it")
            continue
        pv = cluster.object(api_version="v1", kind="PersistentVolume", namespace=None,
                            name=str(volume))
        if pv is None:
            notes.append(f"volume {volume} of claim {claim} was not found: not judged")
            continue
        required = _mapping(_mapping(_mapping(pv, "spec"), "nodeAffinity"), "required")
        terms = required.get("nodeSelectorTerms") if required else None
        labels = _mapping(_mapping(pv, "metadata"), "labels")
        zones = {k: frozenset(str(labels[k]).split("__")) for k in ZONE_LABELS if k in labels}
        if isinstance(terms, list) or zones:
            rules.append(VolumeRule(claim=claim, volume=str(volume),
                                    terms=tuple(terms) if isinstance(terms, list) else None,
                                    zones=zones))
    return Volumes(rules=tuple(rules), notes=tuple(notes))
