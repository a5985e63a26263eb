"""Writing a gang's network plan into one of its pods (the plan itself: :mod:`network`).

Why a module of its own: deciding the plan (before and after the solve) reads jobs and
nodes; writing it edits one pod — the host network taken back for a ``pod`` plan (with
``NCCL_HOSTID`` and ``NCCL_CUMEM_ENABLE=0`` for co-located pods), or, for a ``host`` plan,
the job's rendezvous or task ports rewritten: PyTorchJob's ``pytorchjob-port`` and
``MASTER_PORT``/``PET_MASTER_PORT``/``PET_RDZV_ENDPOINT``, TFJob's ``tfjob-port`` and
``TF_CONFIG``, a TrainJob's ``PET_MASTER_PORT`` (:mod:`webhook.placement.trainer_network`).
The admission step and the queue call :func:`apply` with the plan stored for the gang, so
every pod of the gang (a recreated one too) gets the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.placement import trainer_network
from webhook.placement.network import (
    HOST_NETWORK_DNS,
    MASTER_PORT_ENVS,
    NCCL_CUMEM_ENV,
    NCCL_HOSTID_ENV,
    POD,
    RDZV_ENV,
    TF_CONFIG_ENV,
    Job,
    Plan,
    all_containers,
    as_list,
    template_spec,
    type_named,
)
from webhook.placement.ports import OPERATOR_DEFAULT_PORTS
from webhook.placement.readmission import NOTHING_WRITTEN, WrittenPorts


def apply(pod: dict[str, Any], original: Mapping[str, Any], plan: Plan, job: Job,
          replica: str, gpu_containers: Sequence[dict[str, Any]],
          written: WrittenPorts = NOTHING_WRITTEN) -> list[str]:
    """Write ``plan`` into ``pod`` (the working copy; ``original`` as it came in).
    ``written``: what an earlier plan wrote into the pod (re-admission), rewritten too."""
    spec = pod.setdefault("spec", {})
    ospec = original.get("spec") if isinstance(original.get("spec"), dict) else {}
    if plan.kind == POD:
        if written.policy_host:  # the user's own pod: its template (see _pod_network)
            rtype = type_named(job.specs, replica.partition("/")[0])
            ospec = template_spec(job.specs, rtype) if rtype else {}
        return _pod_network(spec, ospec, gpu_containers, written.policy_host)
    if plan.role.startswith("pytorch"):
        return _pytorch(spec, plan, job, replica)
    if plan.role == "tfjob":
        return _tfjob(spec, plan, job, replica)
    if plan.role == trainer_network.ROLE:
        return trainer_network.apply(spec, plan.ports.get(trainer_network.RANK0), replica,
                                     frozenset(n for _, n in written.held))
    return []


def _pod_network(spec: dict[str, Any], ospec: Mapping[str, Any],
                 gpu_containers: Sequence[dict[str, Any]], policy_host: bool) -> list[str]:
    """Take back what the policy added for host networking; NCCL env for co-located pods.
    ``policy_host``: the pod came in with the policy's host networking from an earlier
    plan (re-admission: :mod:`webhook.placement.readmission`), taken back too; ``ospec``
    is then the replica's template (the pod as it came in holds the hostPort = containerPort
    that host networking gave every port: kept, two packed replicas would hold one host
    port)."""
    warnings: list[str] = []
    if spec.get("hostNetwork") is True and (ospec.get("hostNetwork") is not True
                                            or policy_host):
        if "hostNetwork" in ospec and not policy_host:
            spec["hostNetwork"] = ospec["hostNetwork"]
        else:
            del spec["hostNetwork"]
        if spec.get("dnsPolicy") == HOST_NETWORK_DNS and (
                ospec.get("dnsPolicy") != HOST_NETWORK_DNS or policy_host):
            if "dnsPolicy" in ospec and not policy_host:
                spec["dnsPolicy"] = ospec["dnsPolicy"]
            else:
                del spec["dnsPolicy"]
        for key in ("initContainers", "containers"):
            _restore_host_ports(spec.get(key), ospec.get(key))
    for c in gpu_containers:
        for name, value in ((NCCL_HOSTID_ENV, None), (NCCL_CUMEM_ENV, "0")):
            w = _set_env(c, name, value)
            if w:
                warnings.append(w)
    return warnings


def _restore_host_ports(items: object, before: object) -> None:
    """hostPorts the policy added (= containerPort, for host networking) are removed."""
    if not isinstance(items, list):
        return
    old = before if isinstance(before, list) else []
    for i, c in enumerate(items):
        if not isinstance(c, dict):
            continue
        oc = old[i] if i < len(old) and isinstance(old[i], dict) else {}
        oports = oc.get("ports") if isinstance(oc.get("ports"), list) else []
        for j, p in enumerate(as_list(c.get("ports"))):
            if not isinstance(p, dict) or "hostPort" not in p:
                continue
            op = oports[j] if j < len(oports) and isinstance(oports[j], dict) else {}
            if "hostPort" not in op:
                del p["hostPort"]


def _set_env(container: dict[str, Any], name: str, value: str | None) -> str | None:
    """``name=value`` (None: the node's name through the downward API) unless the user set
    ``name`` already (kept, with a warning when it differs)."""
    env = container.get("env")
    if not isinstance(env, list):
        env = container["env"] = []
    want: dict[str, Any] = ({"name": name, "value": value} if value is not None else
                            {"name": name, "valueFrom": {"fieldRef": {
                                "apiVersion": "v1", "fieldPath": "spec.nodeName"}}})
    for item in env:
        if isinstance(item, dict) and item.get("name") == name:
            if item == want:
                return None
            return (f"network: container {container.get('name', '?')}: kept the pod's "
                    f"{name}; the pod network plan would set it to "
                    f"{value if value is not None else 'the node name'}")
    env.append(want)
    return None


def _pytorch(spec: dict[str, Any], plan: Plan, job: Job, replica: str) -> list[str]:
    port_name = OPERATOR_DEFAULT_PORTS["PyTorchJob"][0]
    host = next(iter(plan.ports), None)
    port = plan.ports.get(host) if host else None
    for c in all_containers(spec):
        if port is None or plan.role == "pytorch-workers":
            _drop_port(c, port_name)  # the master is not ours: workers never listen on it
            continue
        if replica == host:
            for p in as_list(c.get("ports")):
                if isinstance(p, dict) and p.get("name") == port_name:
                    p["containerPort"] = port
                    p["hostPort"] = port
        else:
            _drop_port(c, port_name)
        for item in as_list(c.get("env")):
            if not isinstance(item, dict) or not isinstance(item.get("value"), str):
                continue
            if plan.role == "pytorch" and item.get("name") in MASTER_PORT_ENVS:
                item["value"] = str(port)
            elif plan.role == "pytorch-elastic" and item.get("name") == RDZV_ENV:
                where, _, _ = item["value"].rpartition(":")
                item["value"] = f"{where or item['value']}:{port}"
    return []


def _drop_port(container: dict[str, Any], port_name: str) -> None:
    ports = container.get("ports")
    if not isinstance(ports, list):
        return
    kept = [p for p in ports if not (isinstance(p, dict) and p.get("name") == port_name)]
    if len(kept) == len(ports):
        return
    if kept:
        container["ports"] = kept
    else:
        del container["ports"]


def _tfjob(spec: dict[str, Any], plan: Plan, job: Job, replica: str) -> list[str]:
    port_name = OPERATOR_DEFAULT_PORTS["TFJob"][0]
    mine = plan.ports.get(replica)
    for c in all_containers(spec):
        for p in as_list(c.get("ports")):
            if mine is not None and isinstance(p, dict) and p.get("name") == port_name:
                p["containerPort"] = mine
                p["hostPort"] = mine
        for item in as_list(c.get("env")):
            if isinstance(item, dict) and item.get("name") == TF_CONFIG_ENV and isinstance(
                    item.get("value"), str):
                item["value"] = rewrite_tf_config(item["value"], plan.ports)
    return []


def rewrite_tf_config(raw: str, ports: Mapping[str, int]) -> str:
    """``TF_CONFIG`` with the port of every task in ``ports`` (``worker/1`` → 23457)
    replaced; hosts and everything else kept. Compact JSON, as the operator writes it."""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw
    cluster = data.get("cluster") if isinstance(data, dict) else None
    if not isinstance(cluster, dict):
        return raw
    for rtype, tasks in cluster.items():
        if not isinstance(tasks, list):
            continue
        for i, address in enumerate(tasks):
            port = ports.get(f"{str(rtype).lower()}/{i}")
            if port is not None and isinstance(address, str):
                host = address.rpartition(":")[0] or address
                tasks[i] = f"{host}:{port}"
    return json.dumps(data, separators=(",", ":"))
