"""Host ports of a gang: which replicas can never share a node.

Why: a pod claims its host ports on the node it runs on (``hostPort``, and every container
port once the policy turns ``hostNetwork`` on). The scheduler's NodePorts filter keeps two
pods claiming one port off the same node, so a gang whose replicas collide on a port must
be spread one replica per node — if the webhook pinned them together they would stay
Pending for ever.

Evidence, not guesses: a replica type's ports are those of its template plus, for the
pod being admitted, its own. training-operator adds its default port (PyTorchJob
``pytorchjob-port`` 23456, TFJob ``tfjob-port`` 2222) to every replica type when it
creates the pods, without always writing it back to the job's spec; when the admitted pod
carries that named port, the other replica types are taken to carry it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: training-operator's default port per job kind: (port name, number), added by its
#: SetDefaults_*Job to every replica type (pkg/apis/kubeflow.org/v1/*_defaults.go).
OPERATOR_DEFAULT_PORTS: dict[str, tuple[str, int]] = {
    "PyTorchJob": ("pytorchjob-port", 23456),
    "TFJob": ("tfjob-port", 2222),
}

Port = tuple[str, int]  # (protocol, port number)


def claimed_ports(spec: Mapping[str, Any], *, host_network: bool) -> set[Port]:
    """Host ports a pod spec claims: every container port under hostNetwork, else the
    explicit hostPorts."""
    out: set[Port] = set()
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else []:
        ports = c.get("ports") if isinstance(c, Mapping) else None
        for p in ports if isinstance(ports, list) else []:
            if not isinstance(p, Mapping):
                continue
            number = p.get("containerPort") if host_network else p.get("hostPort")
            if isinstance(number, int) and not isinstance(number, bool) and number > 0:
                out.add((str(p.get("protocol") or "TCP"), number))
    return out


def _port_names(spec: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else []:
        ports = c.get("ports") if isinstance(c, Mapping) else None
        for p in ports if isinstance(ports, list) else []:
            if isinstance(p, Mapping) and isinstance(p.get("name"), str):
                names.add(p["name"])
    return names


def replicas_per_node_cap(
    *,
    kind: str,
    replica_specs: Mapping[str, Any],
    gpu_types: Iterable[str],
    pod_type: str | None,
    pod_spec: Mapping[str, Any],
) -> tuple[int | None, str]:
    """(1, why) when two GPU replicas of the job would claim one host port, else (None, "").

    ``replica_specs`` is the job's ``*ReplicaSpecs`` map, ``gpu_types`` the replica types
    that request GPUs (the gang), ``pod_type``/``pod_spec`` the pod being admitted — its
    own ports, after the policy's mutations, stand for its replica type.
    """
    host_network = pod_spec.get("hostNetwork") is True
    default = OPERATOR_DEFAULT_PORTS.get(kind)
    defaulted = host_network and default is not None and default[0] in _port_names(pod_spec)
    users: dict[Port, int] = {}
    for rtype in gpu_types:
        rs = replica_specs.get(rtype)
        template = rs.get("template") if isinstance(rs, Mapping) else None
        tspec = template.get("spec") if isinstance(template, Mapping) else None
        tspec = tspec if isinstance(tspec, Mapping) else {}
        ports = claimed_ports(tspec, host_network=host_network)
        if pod_type is not None and rtype.lower() == pod_type.lower():
            ports |= claimed_ports(pod_spec, host_network=host_network)
        elif defaulted and default is not None and default[0] not in _port_names(tspec):
            ports.add(("TCP", default[1]))
        count = rs.get("replicas", 1) if isinstance(rs, Mapping) else 1
        count = count if isinstance(count, int) and not isinstance(count, bool) else 1
        for port in ports:
            users[port] = users.get(port, 0) + max(count, 0)
    shared = sorted(p for p, n in users.items() if n >= 2)
    if not shared:
        return None, ""
    shown = ", ".join(f"{num}/{proto}" for proto, num in shared)
    return 1, (f"its GPU replicas all claim host port {shown}"
               f"{' (hostNetwork)' if host_network else ''}, so at most one fits per node")
