"""What the API server and the scheduler do to and with a pod after our webhook: a TEST
stand-in, written from the upstream code, so tests can check the pod as it is STORED.

* Defaulting runs again on the patched pod (``k8s.io/apiserver/pkg/admission/plugin/
  webhook/mutating/dispatcher.go``: the patched object is decoded and the scheme defaulter
  called). For a host-network pod ``defaultHostNetworkPorts``
  (``pkg/apis/core/v1/defaults.go``, Pods only since 1.28) sets ``hostPort =
  containerPort`` on every port of every container and init container that has none.
* Validation then requires ``hostPort == containerPort`` for every port of a host-network
  pod (``validatePodHostNetworkDeps`` in ``pkg/apis/core/validation/validation.go``).
* The scheduler's NodePorts filter (``pkg/scheduler/framework/plugins/nodeports``) never
  puts two pods holding one (protocol, hostPort) on 0.0.0.0 on the same node.
* Its NodeResourcesFit filter (``pkg/scheduler/framework/plugins/noderesources/fit.go``,
  requests from ``k8s.io/component-helpers/resource`` ``PodRequests``) keeps a pod off a
  node where the summed requests of its pods would pass the node's allocatable: a pod's
  request is the larger of its containers' sum and each init container's, plus
  ``spec.overhead``. Quantities are parsed with the official client's
  ``kubernetes.utils.parse_quantity``, not gputopo's parser, so the check stands apart.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kubernetes.utils import parse_quantity


def _ports(spec: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            yield from c.get("ports") or []


def stored(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod after the API server's second defaulting pass; AssertionError where its
    validation would reject it."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    if spec.get("hostNetwork") is True:
        for port in _ports(spec):
            if not port.get("hostPort"):
                port["hostPort"] = port["containerPort"]
            assert port["hostPort"] == port["containerPort"], (
                f"{out['metadata']['name']}: hostNetwork pod with hostPort "
                f"{port['hostPort']} != containerPort {port['containerPort']}")
    for port in _ports(spec):
        port.setdefault("protocol", "TCP")
    return out


def host_ports(pod: dict[str, Any]) -> set[tuple[str, int]]:
    """(protocol, hostPort) pairs the stored pod holds on its node."""
    return {(p.get("protocol", "TCP"), p["hostPort"]) for p in _ports(stored(pod)["spec"])
            if p.get("hostPort")}


def assert_node_ports_free(pods_by_node: dict[str, list[dict[str, Any]]]) -> None:
    """No two pods pinned to one node hold one host port (NodePorts would keep one out)."""
    for node, pods in pods_by_node.items():
        counts = Counter(p for pod in pods for p in host_ports(pod))
        clashes = sorted(p for p, n in counts.items() if n > 1)
        assert not clashes, f"{node}: pods share host ports {clashes}"


def pod_request(pod: dict[str, Any], resource: str) -> Any:
    """The scheduler's request of ``resource`` for one pod (fit.go, PodRequests; no
    restartable sidecars here)."""
    spec = pod["spec"]

    def of(c: dict[str, Any]) -> Any:
        return parse_quantity((c.get("resources", {}).get("requests") or {}).get(resource, 0))

    total = sum((of(c) for c in spec.get("containers") or []), start=parse_quantity(0))
    for c in spec.get("initContainers") or []:
        total = max(total, of(c))
    return total + parse_quantity((spec.get("overhead") or {}).get(resource, 0))


def assert_resources_fit(pods_by_node: dict[str, list[dict[str, Any]]],
                         allocatable: dict[str, dict[str, str]], resources: Iterable[str]
                         ) -> None:
    """Every node's stored pods ask for no more of ``resources`` than it has allocatable
    (NodeResourcesFit would keep one of them Pending)."""
    for node, pods in pods_by_node.items():
        for name in resources:
            asked = sum((pod_request(stored(p), name) for p in pods), start=parse_quantity(0))
            have = parse_quantity(allocatable[node].get(name, 0))
            assert asked <= have, f"{node}: {name} {asked} asked of {have} allocatable"
