"""Good-enough one-node placements (objective term 0) on the pods as the API server stores
them: the gang fills the fullest node whose best set is good enough for it, but only where
the scheduler lets the pinned pods run.

The seed PyTorchJob (examples/ack-pytorch.yaml: a Master and a Worker of one GPU each,
host networking from the shipped policy) through ``gputopo mutate`` on a cluster of one
empty DGX-1 and two 2-socket PCIe servers, one of them partly used. The PCIe servers are
the slowest kind and one holds the gang, so a PIX pair is good enough (the waiting rule's
reference, gputopo/placement/waiting.py) and the busy server is the fullest. When a pod
without GPUs holds most of its CPUs, the gang goes to the other PCIe server instead: the
stored pods pass NodeResourcesFit and NodePorts (tests/placement_step/apiserver_rules.py,
from fit.go and nodeports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apiserver_rules import assert_node_ports_free, assert_resources_fit
from placement_checks import gpu_group, pinned_node, record
from test_placement_node_resources import PODS, other_pod, seed_job

from gputopo import names
from gputopo.topology.nvidia_smi import parse_nvidia_smi
from gputopo.yamlio import dump_documents

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
WIRING = {"dgx1": "dgx1-v100.txt", "pcie-busy": "pcie-2socket-phb.txt",
          "pcie-idle": "pcie-2socket-phb.txt"}
ALLOCATABLE = {"cpu": "94", "memory": "503Gi", "pods": "110"}


def cluster(tmp_path: Path, busy_cpu: str) -> tuple[Path, list[dict[str, Any]]]:
    """The three nodes, and a running pod on ``pcie-busy`` holding its GPUs 0 and 1 and
    ``busy_cpu`` CPUs (the bound pods are returned too: they count on their node)."""
    docs: list[dict[str, Any]] = []
    for name, fixture in WIRING.items():
        topology = parse_nvidia_smi((FIXTURES / fixture).read_text(encoding="utf-8"))
        docs.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE,
                names.ZONE_LABEL: "zone-a", names.RACK_LABEL: "rack-1"},
                "annotations": {names.TOPOLOGY_ANNOTATION: topology.to_json(),
                                names.NETWORK_GBPS_ANNOTATION: "25"}},
            "status": {"allocatable": {**ALLOCATABLE,
                                       names.TOPOLOGY_GPU_RESOURCE: str(len(topology.gpus))}},
        })
    busy = other_pod("busy", "pcie-busy", busy_cpu)
    busy["metadata"]["annotations"] = {names.GPU_GROUP_ANNOTATION: "0,1"}
    path = tmp_path / f"cluster-{busy_cpu}.yaml"
    path.write_text(dump_documents([*docs, busy]))
    return path, [busy]


def placed(result: Any, bound: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Pods by the node they are pinned to (or bound to), after checking the pinned ones
    against the scheduler's NodeResourcesFit and NodePorts as the API server stores them."""
    assert result.rc == 0, result.stderr
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in bound:
        by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
    for p in PODS:
        assert record(result.pods[p])["placed"] is True, record(result.pods[p])
        by_node.setdefault(pinned_node(result.pods[p]), []).append(result.pods[p])
    assert_resources_fit(by_node, {n: ALLOCATABLE for n in WIRING}, ("cpu", "memory", "pods"))
    assert_node_ports_free(by_node)
    return by_node


def test_the_gang_fills_the_busy_pcie_server_on_a_pix_pair(mutate, tmp_path):
    path, bound = cluster(tmp_path, "1")
    result = mutate([seed_job({"cpu": "10"})], cluster=path)
    by_node = placed(result, bound)
    assert len(by_node["pcie-busy"]) == 3  # both replicas beside the running pod
    gpus = sorted(g for p in PODS for g in gpu_group(result.pods[p]))
    assert gpus in ([2, 3], [4, 5], [6, 7])  # a PIX pair: the node's best pair


def test_where_the_busy_server_has_no_cpu_left_the_gang_takes_the_idle_one(mutate, tmp_path):
    """80 of pcie-busy's 94 CPUs are held: two replicas of 10 CPUs do not fit there, so the
    good-enough rule's fullest node is not the answer; the other PCIe server is (the next
    good-enough node), not the DGX-1."""
    path, bound = cluster(tmp_path, "80")
    result = mutate([seed_job({"cpu": "10"})], cluster=path)
    by_node = placed(result, bound)
    assert [p["metadata"]["name"] for p in by_node["pcie-idle"]] == list(PODS)
    assert "dgx1" not in by_node
