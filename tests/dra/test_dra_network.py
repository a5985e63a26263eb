"""The network plan of DRA jobs: a replica type whose pods get their GPUs through claims is
a GPU replica type like any other (webhook.jobs.dra_gpus_by_type).

Why it matters (found by tests/e2e/test_dra.py through the live path): the ``dra`` policy
turns on ``hostNetwork``, and the API server then defaults ``hostPort = containerPort`` on
every declared port (``pkg/apis/core/v1/defaults.go``, ``defaultHostNetworkPorts``), so
Trainer's torch plugin's ``containerPort: 29500`` on every ``node`` pod
(``pkg/runtime/framework/plugins/torch/torch.go``) becomes one host port claimed by both
pods of a 2 x 4 TrainJob pinned to one node, and kube-scheduler's NodePorts filter
(``pkg/scheduler/framework/plugins/nodeports``) keeps the second off it for ever: "didn't
have free ports for the requested pod ports". Counting only extended resources, the plan
saw no GPU replica type and left the port as it was; a DRA PyTorchJob's master lost its
declared ``pytorchjob-port`` ("the master is not placed by gputopo"), so two such masters
could meet on one node's ``MASTER_PORT`` with no NodePorts guard. Checked here through
``gputopo mutate`` and the real 1.36 scheduler (schedsim136).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dra_cluster as dc
import yaml
from test_dra_jobs import _schedule

EXAMPLES = dc.REPO / "examples"


def _mutated(tmp: Path, job: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = dc.nodes()
    slices = [dc.resource_slice(n["metadata"]["name"]) for n in nodes]
    cluster = dc.write(tmp / "cluster.yaml", [*nodes, dc.device_class(), *slices])
    r = dc.mutate("--platform", "dra", "--cluster", str(cluster), str(job))
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    return ([d for d in docs if d["kind"] == "Pod"],
            [d for d in docs if d["kind"] == "ResourceClaim"])


def _host_ports(pod: dict[str, Any]) -> list[int]:
    return [p["hostPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []
            if "hostPort" in p]


def _env(pod: dict[str, Any], name: str) -> str:
    [value] = {e["value"] for c in pod["spec"]["containers"] for e in c.get("env") or []
               if e["name"] == name}
    return value


def _record(pod: dict[str, Any]) -> dict[str, Any]:
    return json.loads(pod["metadata"]["annotations"]["gputopo.io/placement"])


def test_a_dra_trainjob_on_one_node_holds_one_rendezvous_port_and_binds(
        tmp_path: Path) -> None:
    pods, claims = _mutated(tmp_path, EXAMPLES / "dra-trainjob.yaml")
    records = [_record(p) for p in pods]
    assert len({r["node"] for r in records}) == 1 and all(r["placed"] for r in records)
    assert {r["network"].get("role") for r in records} == {"trainer-torch"}
    # rank 0 alone declares the rendezvous port, and every pod's PET_MASTER_PORT names it
    rank0, other = pods
    [port] = _host_ports(rank0)
    assert _host_ports(other) == []
    assert {_env(p, "PET_MASTER_PORT") for p in pods} == {str(port)}
    for i, pod in enumerate(pods):  # schedsim reports pods by name: give them theirs
        pod["metadata"]["name"] = f"{pod['metadata']['generateName']}{i}"
    nodes = dc.nodes()
    objects = [dc.device_class(), *(dc.resource_slice(n["metadata"]["name"]) for n in nodes),
               *claims]
    results = _schedule(tmp_path, nodes, objects, pods)
    assert [r["status"] for r in results] == ["Bound", "Bound"], results
    assert {r["node"] for r in results} == {records[0]["node"]}


def test_a_dra_pytorchjob_master_declares_its_rendezvous_port(tmp_path: Path) -> None:
    pods, _ = _mutated(tmp_path, EXAMPLES / "dra-pytorchjob.yaml")
    master, worker = pods
    assert {_record(p)["network"].get("role") for p in pods} == {"pytorch"}
    [port] = _host_ports(master)
    assert _host_ports(worker) == []
    for pod in pods:
        assert _env(pod, "MASTER_PORT") == _env(pod, "PET_MASTER_PORT") == str(port)
