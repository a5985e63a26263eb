"""A user's host-network pod reads the same with ``hostPort`` written or defaulted.

The API server defaults ``hostPort = containerPort`` on every port of a host-network pod
(``pkg/apis/core/v1/defaults.go``, ``defaultHostNetworkPorts``), before the webhook sees the
pod and again after its patch; ``gputopo mutate`` reads a job file as written, without it.
Both must get one answer, and so must ``mutate`` over its own defaulted output. Read as an
explicit hostPort of the user's, the operator's ``pytorchjob-port`` 23456 (which the host
plan moves) kept a 2 x 8 gang off the node where another pod holds 23456, so the server
made it wait where ``mutate`` placed it; and a port of the user's that the plan does not
move (a ``metrics`` 9090 on every replica) was claimed on the node only when defaulted, so
``mutate`` put a replica where another pod holds 9090 (the NodePorts filter then keeps it
Pending). (webhook/placement/network.py ``needs``)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver_rules import host_ports, stored
from placement_checks import record
from placement_jobs import mpijob
from test_network_plan import pytorchjob
from test_readmission import _cluster as readmission_cluster
from test_readmission import _job_and_pods, _running, admit_policies
from test_trainjob_gangs import NODES

from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import load_documents


def _host_network(job: dict[str, Any]) -> dict[str, Any]:
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"]["spec"]["hostNetwork"] = True
    return job


def _cluster(tmp_path: Path, port: int) -> Path:
    """The demo's two nodes; the second runs a host-network pod holding ``port``."""
    path = tmp_path / f"cluster-{port}.yaml"
    path.write_text(yaml.safe_dump_all([*load_documents(demo_cluster_path()),
                                        _running("exporter", NODES[1], None, [port])]))
    return path


def _same(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods as stored, a waiting record's ``since`` (the clock) left out."""
    out = [stored(p) for p in pods]
    for pod in out:
        rec = record(pod)
        if rec is not None and "since" in rec:
            del rec["since"]
            pod["metadata"]["annotations"]["gputopo.io/placement"] = rec
    return out


CASES = [
    # the operator's 23456 (moved by the plan) held on the second node: placed over both
    ("pytorchjob-2x8", lambda: _host_network(pytorchjob("pt", gpus=8)), 23456, True),
    # the user's 9090 on both replicas (one per node) held on the second node: no place
    ("pytorchjob-2x2-metrics", lambda: _host_network(pytorchjob(
        "pt", gpus=2, ports=[{"name": "metrics", "containerPort": 9090}])), 9090, False),
]


@pytest.mark.parametrize(("case", "make", "held", "placed"), CASES, ids=[c[0] for c in CASES])
def test_written_and_defaulted_host_ports_get_one_answer(mutate, tmp_path, case, make, held,
                                                         placed):
    owners, pods = _job_and_pods(make())
    where = _cluster(tmp_path, held)
    as_written = mutate([*owners, *pods], cluster=where)
    defaulted = mutate([*owners, *(stored(p) for p in pods)], cluster=where)
    assert as_written.rc == 0 and defaulted.rc == 0, defaulted.stderr
    out = [d for d in as_written.docs if d.get("kind") == "Pod"]
    assert _same(out) == _same([d for d in defaulted.docs if d.get("kind") == "Pod"]), (
        f"{case}\n--- as written\n{as_written.stderr}\n--- defaulted\n{defaulted.stderr}")
    assert all(record(p)["placed"] is placed for p in out), as_written.stderr
    for pod in out:  # never on a node where another pod holds a port it claims
        if record(pod)["placed"] and record(pod)["node"] == NODES[1]:
            assert ("TCP", held) not in host_ports(pod)
    if placed:
        again = mutate([*owners, *(stored(p) for p in out)], cluster=where)
        assert again.rc == 0, again.stderr
        assert _same([d for d in again.docs if d.get("kind") == "Pod"]) == _same(out), (
            again.stderr)


def test_host_networking_the_policy_gave_is_taken_back_with_its_defaulted_host_ports(
        mutate, tmp_path):
    """MPI over SSH under ``network: auto``, spread one worker per node (each node's GPUs
    0-3 held): the policy gave it host networking, so the API server made the workers'
    ``metrics`` port 9090 a hostPort. Re-admitted as stored on the emptied cluster, the
    workers share a node and take the pod network: the hostPort host networking made goes
    with it (left, the two packed workers would hold one host port: one stays Pending), and
    9090 is no host port of the user's that keeps them one per node."""
    job = mpijob("mpi", workers=2, gpus=4)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "ports"] = [{"name": "metrics", "containerPort": 9090}]
    owners, pods = _job_and_pods(job)
    half = readmission_cluster(tmp_path, "gpus-0-3-held")
    policies = admit_policies(tmp_path)
    first = mutate([*owners, *pods], "--policies", str(policies), cluster=half)
    spread = [stored(d) for d in first.docs if (record(d) or {}).get("placed")]
    assert len({record(p)["node"] for p in spread}) == 2
    assert all(host_ports(p) == {("TCP", 9090)} for p in spread)
    empty = readmission_cluster(tmp_path, "empty")
    again = mutate([*owners, *(stored(d) for d in first.docs if d.get("kind") == "Pod")],
                   "--policies", str(policies), cluster=empty)
    assert again.rc == 0, again.stderr
    packed = [stored(d) for d in again.docs if (record(d) or {}).get("placed")]
    assert len(packed) == 2 and len({record(p)["node"] for p in packed}) == 1, again.stderr
    for pod in packed:
        assert record(pod)["network"]["plan"] == "pod"
        assert "hostNetwork" not in pod["spec"] and not host_ports(pod)
