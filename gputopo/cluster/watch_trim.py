"""What the cluster view keeps of each Pod and Node it watches (client-go's SetTransform).

Why: a big cluster has tens of thousands of pods and nodes whose objects run to tens of
KiB (images, conditions, managed fields); the view keeps only what admission reads — where
a pod runs, its phase, the GPUs, host ports and requests it holds — so memory stays small.
"""

from __future__ import annotations

from typing import Any

from gputopo import names
from gputopo.cluster import objects as ob
from gputopo.cluster.node_resources import CPU, PODS

_META_KEPT = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences")


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the view needs of a pod: where it runs, its phase, the GPUs it holds."""
    m = ob.meta(pod)
    ann = ob.annotations(pod)
    keep = {k: m[k] for k in _META_KEPT if k in m}
    if names.GPU_GROUP_ANNOTATION in ann:
        keep["annotations"] = {
            k: ann[k]
            for k in (names.GPU_GROUP_ANNOTATION, names.PLACEMENT_ANNOTATION)
            if k in ann
        }
    if names.PLACEMENT_ANNOTATION in ann and "annotations" not in keep:
        keep["annotations"] = {names.PLACEMENT_ANNOTATION: ann[names.PLACEMENT_ANNOTATION]}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    kept_spec: dict[str, Any] = {"nodeName": spec.get("nodeName")} if spec.get("nodeName") else {}
    if any(isinstance(g, dict) and g.get("name") == names.PLACEMENT_GATE
           for g in spec.get("schedulingGates") or ()):
        # gated by gputopo: a waiting gang's pod (gputopo.cluster.waiters)
        kept_spec["schedulingGates"] = [{"name": names.PLACEMENT_GATE}]
    held = ob.host_ports_held_by_pod(pod)
    kept: dict[str, Any] = {}
    if held is not None:  # the host ports it holds, in the shape the API gives them
        kept["ports"] = [{"containerPort": n, "hostPort": n, "protocol": proto}
                         for proto, n in sorted(held[1])]
    asks = ob.requests_held_by_pod(pod)
    if asks is not None:  # its effective request (init containers, overhead) as one
        kept["resources"] = {"requests": {
            k: f"{v}m" if k == CPU else str(v) for k, v in asks[1].items() if k != PODS}}
    if kept:
        kept_spec["containers"] = [{"name": "kept", **kept}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": keep, "spec": kept_spec,
            "status": {"phase": status.get("phase")} if status.get("phase") else {}}


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """A node without its images, conditions and daemon endpoints (often 10s of KiB)."""
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    out = {k: v for k, v in node.items() if k != "status"}
    out["status"] = {k: status[k] for k in ("allocatable", "capacity") if k in status}
    m = out.get("metadata")
    if isinstance(m, dict) and "managedFields" in m:
        out["metadata"] = {k: v for k, v in m.items() if k != "managedFields"}
    return out
