"""Which pod an allocation is for, and writing the answer back: the plugin's API edge.

Why through the API: the kubelet's ``GetPreferredAllocation`` and ``Allocate`` carry device
IDs and a size, never the pod. The kubelet admits pods one at a time, in the order they
reach it (binding order), so the pod an allocation is for is the oldest-bound pod on this
node that still waits for GPUs of that size — the rule the open GPU-sharing plugins use
(FACTS.md, "Kubelet device plugins"). Once allocated, the pod is marked
(``gputopo.io/allocated-gpus``) so the next call finds the next pod, and its GPU index
annotations say what it really got, which is what the cluster view counts.

Only app containers count: a GPU request on an init container is not tracked (the kubelet
hands an init container's devices on to the app containers; see docs/device-plugin.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from gputopo import names
from gputopo.cluster.objects import TERMINAL_PHASES, annotations, labels, meta, parse_gpu_list

log = logging.getLogger(__name__)

EVENT_COMPONENT = names.DEVICE_PLUGIN_NAME


@dataclass(frozen=True)
class PodClaim:
    """A pod bound to this node, as the device plugin sees it."""

    namespace: str
    name: str
    uid: str
    order: tuple[str, str, str]  # (bound at, created at, ns/name): oldest binding first
    sizes: tuple[tuple[str, int], ...]  # GPU app containers in spec order: (name, count)
    allocated: tuple[int, ...] = ()
    group: tuple[int, ...] | None = None  # this pod's GPUs by its gputopo placement here
    visible: tuple[int, ...] | None = None
    record: dict[str, Any] | None = None
    gang: str | None = None
    env: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)
    started: bool = False  # the kubelet already reported containers: admitted long ago

    @property
    def placed(self) -> bool:
        return self.group is not None

    @property
    def placement_gpus(self) -> tuple[int, ...]:
        """The GPUs the webhook placed this pod on, even after the plugin corrected
        ``gpu-group`` to what the kubelet gave (the record keeps them)."""
        original = (self.record or {}).get("placementGpus")
        if isinstance(original, list) and all(isinstance(g, int) for g in original):
            return tuple(original)
        return self.group or ()

    @property
    def total(self) -> int:
        return sum(n for _, n in self.sizes)

    def next_container(self) -> tuple[str, int] | None:
        """(name, count) of the first GPU container not yet allocated; None when done.

        A pod whose containers the kubelet already reported, yet which carries no mark, was
        admitted without this plugin marking it (installed later, or the PATCH failed): it
        waits for nothing, and must not take the place of the pod really being admitted.
        """
        if self.started and not self.allocated:
            return None
        given = len(self.allocated)
        for name, n in self.sizes:
            if given < n:
                return (name, n) if given == 0 else None  # a half-given container: confused
            given -= n
        return None

    def wanted(self, size: int) -> tuple[int, ...]:
        """The next ``size`` GPUs of the placement not yet given to this pod."""
        if self.group is None:
            return ()
        return tuple(g for g in self.group if g not in self.allocated)[:size]


def claim_of(pod: Mapping[str, Any], *, node: str, resource: str) -> PodClaim | None:
    """The claim of a pod on ``node`` that asks for ``resource``; None for any other pod."""
    md = meta(pod)
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    if spec.get("nodeName") != node or status.get("phase") in TERMINAL_PHASES:
        return None
    sizes, env = [], {}
    for c in spec.get("containers") or []:
        n = _request(c, resource)
        if n > 0:
            sizes.append((str(c.get("name", "")), n))
            env[str(c.get("name", ""))] = _literal_env(c)
    if not sizes:
        return None
    ann, lab = annotations(pod), labels(pod)
    allocated: tuple[int, ...] = ()
    raw = ann.get(names.ALLOCATED_GPUS_ANNOTATION)
    if raw:
        try:
            allocated = parse_gpu_list(raw)
        except ValueError:
            log.warning("pod %s/%s: unreadable %s=%r, taken as allocated", md.get("namespace"),
                        md.get("name"), names.ALLOCATED_GPUS_ANNOTATION, raw)
            allocated = tuple(range(sum(n for _, n in sizes)))
    group, visible, record = _placement(ann, node)
    bound = next((str(c.get("lastTransitionTime") or "") for c in status.get("conditions") or []
                  if isinstance(c, Mapping) and c.get("type") == "PodScheduled"), "")
    created = str(md.get("creationTimestamp") or "")
    ns, name = str(md.get("namespace") or "default"), str(md.get("name") or "")
    return PodClaim(
        namespace=ns, name=name, uid=str(md.get("uid") or ""),
        order=(bound or created, created, f"{ns}/{name}"),
        sizes=tuple(sizes), allocated=allocated, group=group, visible=visible, record=record,
        gang=lab.get(names.GANG_LABEL), env=env,
        started=bool(status.get("containerStatuses")) or status.get("phase") == "Running",
    )


def _request(container: Mapping[str, Any], resource: str) -> int:
    res = container.get("resources") if isinstance(container.get("resources"), Mapping) else {}
    for part in ("limits", "requests"):  # extended resources: requests must equal limits
        values = res.get(part) if isinstance(res.get(part), Mapping) else {}
        if resource in values:
            try:
                return int(str(values[resource]))
            except ValueError:
                return 0
    return 0


def _literal_env(container: Mapping[str, Any]) -> dict[str, str | None]:
    """The GPU env a container's spec sets: the literal value, or None for ``valueFrom``."""
    out: dict[str, str | None] = {}
    for item in container.get("env") or []:
        if isinstance(item, Mapping) and item.get("name") in (
                names.NVIDIA_VISIBLE_DEVICES_ENV, names.CUDA_VISIBLE_DEVICES_ENV):
            out[str(item["name"])] = None if "valueFrom" in item else str(item.get("value", ""))
    return out


def _placement(ann: Mapping[str, str], node: str
               ) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None, dict[str, Any] | None]:
    """(gpu-group, gpu-visible, record) of a gputopo placement on ``node``, else Nones."""
    try:
        record = json.loads(ann.get(names.PLACEMENT_ANNOTATION) or "null")
    except ValueError:
        return None, None, None
    if not isinstance(record, dict) or record.get("placed") is not True \
            or record.get("node") != node:
        return None, None, None
    try:
        group = parse_gpu_list(ann.get(names.GPU_GROUP_ANNOTATION))
    except ValueError:
        return None, None, record
    try:
        visible = parse_gpu_list(ann.get(names.GPU_VISIBLE_ANNOTATION))
    except ValueError:
        visible = group
    return group, visible, record


class PodDirectory:
    """The pods bound to one node, read and annotated through the API."""

    def __init__(self, api: client.CoreV1Api, *, node: str, resource: str,
                 timeout: float = 5.0) -> None:
        self.api, self.node, self.resource, self.timeout = api, node, resource, timeout

    def claims(self) -> list[PodClaim]:
        """Every pod on this node asking for the resource, oldest binding first."""
        resp = self.api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}", _preload_content=False,
            _request_timeout=self.timeout)
        items = json.loads(resp.data).get("items") or []
        out = [c for p in items
               if (c := claim_of(p, node=self.node, resource=self.resource)) is not None
               and not (p.get("metadata") or {}).get("deletionTimestamp")]
        return sorted(out, key=lambda c: c.order)

    def annotate(self, claim: PodClaim, values: Mapping[str, str]) -> None:
        """Merge ``values`` into the pod's annotations (one PATCH)."""
        body = {"metadata": {"annotations": dict(values)}}
        self.api.patch_namespaced_pod(claim.name, claim.namespace, body,
                                      _preload_content=False, _request_timeout=self.timeout)

    def event(self, claim: PodClaim, *, reason: str, message: str,
              kind: str = "Warning") -> None:
        """A core/v1 Event on the pod; failures are logged, never raised."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": f"{claim.name}.", "namespace": claim.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": claim.name,
                               "namespace": claim.namespace, "uid": claim.uid},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": EVENT_COMPONENT, "host": self.node},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            self.api.create_namespaced_event(claim.namespace, body, _preload_content=False,
                                             _request_timeout=self.timeout)
        except (ApiException, OSError, ValueError) as exc:
            log.warning("pod %s/%s: cannot write event %s: %s", claim.namespace, claim.name,
                        reason, exc)
