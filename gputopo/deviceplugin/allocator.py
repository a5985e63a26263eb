"""The answers to ``GetPreferredAllocation`` and ``Allocate``, one container at a time.

Why one lock around identification and marking: the kubelet admits one pod at a time, but
gRPC serves calls on a thread pool; two overlapping calls must not both pick the same
oldest pod. Everything here is synchronous and short: one LIST of the node's pods, at most
one PATCH and one Event per call.

Preference (advice to the kubelet): the pod's placement when the kubelet still has those
GPUs; else the best set among its gang's GPUs on this node; else the solver's best among the
available ones — avoiding GPUs that placements of pods still waiting here hold.

Allocate (what the container gets): the IDs the kubelet chose, always. The env says them
(``NVIDIA_VISIBLE_DEVICES`` = the gang's GPUs on this node, ``CUDA_VISIBLE_DEVICES`` = the
container's positions among them); the pod is marked allocated, and when the kubelet gave
other GPUs than the placement, the pod's ``gpu-group``/``gpu-visible``/placement record are
corrected to what it got, with a Warning event and a metric, so that the cluster view
counts the GPUs really in use.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kubernetes.client.rest import ApiException
from prometheus_client import Counter

from gputopo import names
from gputopo.deviceplugin.choice import best_set, container_env, gpu_list, preferred_within
from gputopo.deviceplugin.pods import PodClaim, PodDirectory
from gputopo.topology.model import Topology

log = logging.getLogger(__name__)

ALLOCATIONS = Counter(
    "gputopo_device_plugin_allocations_total",
    "Container allocations by outcome: placement (the kubelet gave the placement's GPUs), "
    "corrected (it gave others; the pod's annotations were corrected), unplaced (a pod "
    "gputopo did not place; its GPUs were written back), unidentified (no waiting pod of "
    "that size on the node), write_failed (the pod could not be annotated), reconciled (a "
    "pod's annotations corrected to what the kubelet's PodResources API says it holds).",
    ["outcome"],
)
_API_ERRORS = (ApiException, OSError, ValueError)


class Allocator:
    """Decides preferences and allocations for one node's GPUs."""

    def __init__(self, *, topology: Topology, pods: PodDirectory) -> None:
        self.topology = topology
        self.pods = pods
        self._lock = threading.Lock()

    # --- GetPreferredAllocation --------------------------------------------------------
    def preferred(self, available: Sequence[int], size: int,
                  must: Sequence[int] = ()) -> tuple[int, ...]:
        with self._lock:
            claims = self._claims()
            claim = _next_claim(claims, size)
            # GPUs promised to the placements of other pods still waiting on this node
            promised = {g for c in claims if c.placed and c.next_container() is not None
                        and c is not claim for g in c.wanted(c.total)}
            if claim is not None and claim.placed:
                gang = (set(claim.visible or ()) | set(claim.group or ())) - promised
                return preferred_within(self.topology, claim.wanted(size), gang, available,
                                        size, must)
            # A pod gputopo did not place (or none identified): keep off the promised GPUs
            # when there is room elsewhere.
            free = [i for i in available if i not in promised]
            if len(set(free) | set(must)) >= size:
                return best_set(self.topology, free, size, must)
            return best_set(self.topology, available, size, must)

    # --- Allocate ----------------------------------------------------------------------
    def allocate(self, given: Sequence[int]) -> dict[str, str]:
        """The env for a container that got ``given``; marks the pod it is for."""
        given = tuple(sorted(given))
        with self._lock:
            claims = self._claims()
            claim = _next_claim(claims, len(given))
            if claim is None:
                ALLOCATIONS.labels("unidentified").inc()
                log.warning("Allocate %s: no pod on this node waits for %d GPU(s); the "
                            "GPUs are handed out but no pod is marked", gpu_list(given),
                            len(given))
                return container_env(visible=given, own=given)
            values, visible, outcome = self._values(claim, claims, given)
            env = container_env(visible=visible, own=given)
            try:
                self.pods.annotate(claim, values)
            except _API_ERRORS as exc:
                ALLOCATIONS.labels("write_failed").inc()
                log.error("pod %s/%s got GPUs %s but cannot be annotated: %s",
                          claim.namespace, claim.name, gpu_list(given), exc)
                return env
            if outcome == "corrected":
                message = (f"the kubelet gave GPUs {gpu_list(given)} instead of the "
                           f"placement's {gpu_list(claim.wanted(len(given)))} (its preference "
                           "is only advice); annotations now say "
                           f"{names.GPU_GROUP_ANNOTATION}={values[names.GPU_GROUP_ANNOTATION]}")
                log.warning("pod %s/%s: %s", claim.namespace, claim.name, message)
                self.pods.event(claim, reason="GPUPlacementNotHonoured", message=message)
            ALLOCATIONS.labels(outcome).inc()
            log.info("pod %s/%s: GPUs %s (%s)", claim.namespace, claim.name,
                     gpu_list(given), outcome)
            self._check_spec_env(claim, env)
            return env

    def _values(self, claim: PodClaim, claims: list[PodClaim], given: tuple[int, ...]
                ) -> tuple[dict[str, str], set[int], str]:
        """The annotations saying ``claim`` got ``given`` (on top of what it had), the gang's
        visible GPUs, and the outcome: placement, corrected or unplaced."""
        allocated = (*claim.allocated, *given)
        if not claim.placed:
            return ({names.GPU_GROUP_ANNOTATION: gpu_list(allocated),
                     names.GPU_VISIBLE_ANNOTATION: gpu_list(allocated),
                     names.ALLOCATED_GPUS_ANNOTATION: gpu_list(allocated)},
                    set(allocated), "unplaced")
        wanted = claim.wanted(len(given))
        group = claim.group or ()
        # this pod's GPUs: what it was given so far, then the placement's rest
        rest = [g for g in group if g not in allocated and g not in wanted]
        own = set(allocated) | set(rest[: max(0, len(group) - len(allocated))])
        # the gang's GPUs on this node: the placement's, with each peer bound here counted
        # by what it really got (or its placement while it waits)
        peers = [p for p in claims if p is not claim and p.placed and p.gang is not None
                 and p.gang == claim.gang and p.namespace == claim.namespace]
        visible = set(claim.visible or group) - set(claim.placement_gpus) | own
        for peer in peers:
            visible -= set(peer.placement_gpus)
        for peer in peers:
            visible |= set(peer.allocated or peer.group or ())
        values = {names.GPU_GROUP_ANNOTATION: gpu_list(own),
                  names.GPU_VISIBLE_ANNOTATION: gpu_list(visible),
                  names.ALLOCATED_GPUS_ANNOTATION: gpu_list(allocated)}
        if set(wanted) == set(given):
            return values, visible, "placement"
        record = dict(claim.record or {})
        record.setdefault("placementGpus", list(claim.placement_gpus))
        record.update(gpus=sorted(own), gpuVisible=sorted(visible),
                      allocatedBy=names.DEVICE_PLUGIN_NAME)
        values[names.PLACEMENT_ANNOTATION] = _record_json(record)
        return values, visible, "corrected"

    # --- reconciliation with the kubelet's own record ---------------------------------
    def reconcile(self, assigned: Mapping[tuple[str, str], Sequence[int]]) -> int:
        """Make pods' annotations say what the kubelet's PodResources API says they hold.

        ``assigned``: (namespace, name) → the resource's device IDs the kubelet assigned to
        the pod's containers. Fixes a pod whose mark is missing (the PATCH failed, or the
        plugin came later) or wrong (two pods of one size bound in the same second, admitted
        in the other order). Returns how many pods were corrected.
        """
        fixed = 0
        with self._lock:
            claims = self._claims()
            for claim in claims:
                got = tuple(sorted(assigned.get((claim.namespace, claim.name), ())))
                if not got or got == tuple(sorted(claim.allocated)):
                    continue
                fresh = replace(claim, allocated=(), started=False)
                values, _, _ = self._values(fresh, claims, got)
                try:
                    self.pods.annotate(claim, values)
                except _API_ERRORS as exc:
                    log.error("pod %s/%s: cannot correct its GPUs to %s: %s", claim.namespace,
                              claim.name, gpu_list(got), exc)
                    continue
                fixed += 1
                ALLOCATIONS.labels("reconciled").inc()
                message = (f"the kubelet assigned GPUs {gpu_list(got)} to this pod; its "
                           f"annotations said {gpu_list(claim.allocated) or 'nothing'} and now "
                           f"say {names.GPU_GROUP_ANNOTATION}="
                           f"{values[names.GPU_GROUP_ANNOTATION]}")
                log.warning("pod %s/%s: %s", claim.namespace, claim.name, message)
                self.pods.event(claim, reason="GPUAllocationReconciled", message=message)
        return fixed

    def _check_spec_env(self, claim: PodClaim, env: dict[str, str]) -> None:
        """The pod spec's own GPU env wins over the plugin's in the container (the kubelet
        appends spec env after device env): say so when they disagree."""
        name = claim.next_container()
        spec_env = claim.env.get(name[0], {}) if name else {}
        differs = [f"{k}={v}" for k, v in spec_env.items() if v is not None and v != env.get(k)]
        if differs:
            self.pods.event(claim, reason="GPUEnvOverridden", message=(
                f"container {name[0] if name else '?'} sets {', '.join(differs)} in its spec, "
                f"which overrides the device plugin's {_env_text(env)}; remove it "
                "(docs/device-plugin.md)"))

    def _claims(self) -> list[PodClaim]:
        try:
            return self.pods.claims()
        except _API_ERRORS as exc:
            log.error("cannot list the pods of node %s: %s", self.pods.node, exc)
            return []


def _next_claim(claims: Iterable[PodClaim], size: int) -> PodClaim | None:
    """The oldest-bound pod whose next GPU container asks for ``size`` GPUs."""
    for claim in claims:
        nxt = claim.next_container()
        if nxt is not None and nxt[1] == size:
            return claim
    return None


def _record_json(record: dict[str, Any]) -> str:
    import json

    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _env_text(env: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
