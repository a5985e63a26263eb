"""The network plan's rows for Kubeflow Trainer v2's torch runtimes (issue 20).

Why: Trainer's torch plugin (``pkg/runtime/framework/plugins/torch/torch.go``, v2.2-v2.3)
gives every ``node`` pod of a TrainJob an unnamed ``containerPort: 29500`` and
``PET_MASTER_PORT=29500`` (``PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>``). Under host
networking the API server turns that port into ``hostPort: 29500`` on every pod, so two of
them could never share a node: the PyTorchJob problem, solved the same way
(:mod:`webhook.placement.network`): the TrainJob gets one rendezvous port, held by rank 0
(replica ``node/0``, completion index 0), written into ``PET_MASTER_PORT`` of every pod;
the other pods drop the declared 29500 (only rank 0 listens on it). Torchtune runtimes pass
the endpoint as ``--rdzv_endpoint`` in the args instead: not rewritten (they take the pod
plan when their pods share a node). A pod the plan wrote before (re-admission) carries the
plan's port in both places instead of 29500; its placement record says so
(:mod:`webhook.placement.readmission`), and it is moved the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

KIND = "TrainJob"
PORT = 29500
MASTER_PORT_ENV = "PET_MASTER_PORT"
RANK0 = "node/0"
ROLE = "trainer-torch"
WHY = "one rendezvous port per TrainJob, held by rank 0 (node/0) and written into " \
      "PET_MASTER_PORT of every pod"


def _containers(spec: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else ():
            if isinstance(c, dict):
                yield c


def _master_port(spec: Mapping[str, Any]) -> str | None:
    for c in _containers(spec):
        env = c.get("env")
        for item in env if isinstance(env, list) else ():
            if isinstance(item, dict) and item.get("name") == MASTER_PORT_ENV:
                value = item.get("value")
                return value if isinstance(value, str) else None
    return None


def torch_rendezvous(node_has_gpus: bool, pod_spec: Mapping[str, Any],
                     written: str | None = None) -> bool:
    """True for a TrainJob pod of a torch runtime whose port the plan moves: its ``node``
    replicated job asks for GPUs and the pod carries Trainer's ``PET_MASTER_PORT=29500``,
    or ``written``, the port an earlier plan of its gang wrote there."""
    have = _master_port(pod_spec)
    return node_has_gpus and have is not None and have in (str(PORT), written)


def apply(spec: dict[str, Any], port: int | None, replica: str,
          written: frozenset[int] = frozenset()) -> list[str]:
    """Rank 0 listens on ``port`` (container and host port); every pod's
    ``PET_MASTER_PORT`` names it; the other pods drop Trainer's 29500 (unnamed).
    ``written``: port numbers an earlier plan gave this pod (moved like 29500)."""
    if port is None:
        return []
    ours = {PORT, *written}
    for c in _containers(spec):
        ports = c.get("ports")
        if isinstance(ports, list):
            kept = []
            for p in ports:
                if isinstance(p, dict) and p.get("containerPort") in ours and not p.get("name"):
                    if replica != RANK0:
                        continue
                    p["containerPort"] = port
                    p["hostPort"] = port
                kept.append(p)
            if kept:
                c["ports"] = kept
            else:
                del c["ports"]
        env = c.get("env")
        for item in env if isinstance(env, list) else ():
            if isinstance(item, dict) and item.get("name") == MASTER_PORT_ENV and \
                    isinstance(item.get("value"), str):
                item["value"] = str(port)
    return []
