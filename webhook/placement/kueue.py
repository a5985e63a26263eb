"""Kueue's Topology Aware Scheduling (TAS): the pods whose node Kueue chooses.

Why: with TAS, Kueue assigns each pod set a topology domain (a rack, a block, a node) and
creates its pods behind the scheduling gate ``kueue.x-k8s.io/topology``; its ungater later
adds a ``nodeSelector`` for the assigned domain by a pod update
(``pkg/controller/tas/topology_ungater.go``, Kueue v0.19). A pin written at admission could
name a node outside that domain, and the pod would never schedule. So gputopo leaves the
node of such a pod to Kueue and pins nothing: the kubelet (through the device plugin)
chooses the pod's GPUs once the node is known, and the placement record says so. Pods
that only carry a flavor's ``nodeSelector``/tolerations (Kueue without TAS) are placed as
usual: the solver only considers nodes the pod may run on (``gputopo.cluster.node_fit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"


def tas_reason(pod: Mapping[str, Any]) -> str | None:
    """Why the pod's node is Kueue's to choose (TAS), or None when it is not."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    ann = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    gates = spec.get("schedulingGates") if isinstance(spec.get("schedulingGates"), list) else []
    gated = any(isinstance(g, Mapping) and g.get("name") == TOPOLOGY_GATE for g in gates)
    level = ann.get(REQUIRED_TOPOLOGY) or ann.get(PREFERRED_TOPOLOGY)
    if not gated and not level:
        return None
    what = f"{'required' if ann.get(REQUIRED_TOPOLOGY) else 'preferred'} topology {level}" \
        if level else f"the scheduling gate {TOPOLOGY_GATE}"
    return (f"Kueue Topology Aware Scheduling assigns this pod's node ({what}); gputopo "
            f"leaves the node to Kueue and pins none, so it is never outside Kueue's "
            f"domain; the GPUs are chosen on the node when the kubelet allocates them")
