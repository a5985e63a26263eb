"""Pods whose node another component chooses: Kueue's Topology Aware Scheduling (TAS) and
JobSet's exclusive placement.

Why: a pin written at admission must never contradict the component that owns the node
choice, or the pod never schedules.

* **Kueue TAS** (v0.19): Kueue assigns each pod set a topology domain (a rack, a block, a
  node) and creates its pods behind the scheduling gate ``kueue.x-k8s.io/topology``; its
  ungater later adds a ``nodeSelector`` for the assigned domain by a pod update
  (``pkg/controller/tas/topology_ungater.go``). The pods carry
  ``kueue.x-k8s.io/podset-required-topology`` or ``podset-preferred-topology``.
* **JobSet exclusive placement** (v0.8+): a JobSet (or replicated job) annotated
  ``alpha.jobset.sigs.k8s.io/exclusive-topology: <node label>`` has JobSet's pod webhook
  give each child Job's index-0 pod pod-affinity/anti-affinity (one Job per domain) and
  the Job's other pods a ``nodeSelector`` on the leader's domain, known only once the
  leader is scheduled. Packing two Jobs on one node would break it.

For such a pod gputopo leaves the node alone and pins nothing: the kubelet (through the
device plugin) chooses its GPUs once the node is known, and the placement record says so.
Pods that only carry a Kueue flavor's ``nodeSelector``/tolerations (Kueue without TAS) are
placed as usual: the solver only considers nodes the pod may run on
(``gputopo.cluster.node_fit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
_GPUS_LATER = "the GPUs are chosen on the node when the kubelet allocates them"


def chosen_elsewhere(pod: Mapping[str, Any]) -> str | None:
    """Why the pod's node is another component's to choose, or None when it is gputopo's."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    ann = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    gates = spec.get("schedulingGates") if isinstance(spec.get("schedulingGates"), list) else []
    gated = any(isinstance(g, Mapping) and g.get("name") == TOPOLOGY_GATE for g in gates)
    level = ann.get(REQUIRED_TOPOLOGY) or ann.get(PREFERRED_TOPOLOGY)
    if gated or level:
        what = f"{'required' if ann.get(REQUIRED_TOPOLOGY) else 'preferred'} topology " \
               f"{level}" if level else f"the scheduling gate {TOPOLOGY_GATE}"
        return (f"Kueue Topology Aware Scheduling assigns this pod's node ({what}); gputopo "
                f"leaves the node to Kueue and pins none, so it is never outside Kueue's "
                f"domain; {_GPUS_LATER}")
    exclusive = ann.get(EXCLUSIVE_TOPOLOGY)
    if exclusive:
        return (f"JobSet exclusive placement ({EXCLUSIVE_TOPOLOGY}: {exclusive}) gives each "
                f"child Job a {exclusive} domain of its own, chosen with its leader pod; "
                f"gputopo pins none, so no two Jobs are packed into one domain; {_GPUS_LATER}")
    return None
