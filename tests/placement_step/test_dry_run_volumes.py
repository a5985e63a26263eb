"""Dry run = live when the pods' volumes rule nodes out: a ``dryRun: true`` review (what
audit mode and ``kubectl --dry-run=server`` see) answers the node, the GPUs, or "waits",
that the live admission of the same pod gives on a fresh copy of the same cluster.

Why these clusters: the gang's bar for a good one-node placement and the waiting check are
measured against a reference made of the kinds of the nodes it may use (the typical kind's,
or the slowest kind's when one node of it holds the gang: gputopo/placement/waiting.py).
The live path (``GangReserver.reserve``) takes those kinds from the nodes the pods'
volumes can reach; a preview that took them from every node the pod's constraints admit
would see servers the gang can never run on: here refused PCIe servers lower the
reference (the preview places a gang the webhook gates), and refused DGX A100s raise it
(the preview shows an A100 where the webhook picks the DGX-1). Each pod mounts a claim
bound to a zonal PersistentVolume (VolumeZone: gputopo/cluster/node_volumes.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from apiserver_rules import assert_node_ports_free, assert_resources_fit, stored
from placement_checks import admit, gpu_group, pinned_node, record
from placement_jobs import mpijob, worker_pod

from gputopo import names
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.topology.nvidia_smi import parse_nvidia_smi
from gputopo.yamlio import dump_documents
from webhook.assembly import build_admitter
from webhook.placement.step import PlacementStep

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
#: A 4-GPU PCIe server: two PIX pairs under one host bridge.
PCIE_4 = """\
        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity
GPU0     X      PIX     PHB     PHB     0-13,28-41      0
GPU1    PIX      X      PHB     PHB     0-13,28-41      0
GPU2    PHB     PHB      X      PIX     0-13,28-41      0
GPU3    PHB     PHB     PIX      X      0-13,28-41      0
"""
#: The volume's zone; every other node is in ``OTHER`` (VolumeZone refuses it)
ZONE, OTHER = "zone-a", "zone-b"


def node(name: str, wiring: str, zone: str) -> dict[str, Any]:
    """An activated node of ``wiring`` (``nvidia-smi topo -m`` text) in ``zone``."""
    topology = parse_nvidia_smi(wiring)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE,
                names.ZONE_LABEL: zone, "kubernetes.io/hostname": name},
                "annotations": {names.TOPOLOGY_ANNOTATION: topology.to_json(),
                                names.NETWORK_GBPS_ANNOTATION: "25"}},
            "status": {"allocatable": {"cpu": "94", "memory": "503Gi", "pods": "110",
                                       names.TOPOLOGY_GPU_RESOURCE: str(len(topology.gpus))}}}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def running(name: str, on: str, gpus: str) -> dict[str, Any]:
    """A running pod holding ``gpus`` of node ``on``."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {names.GPU_GROUP_ANNOTATION: gpus}},
            "spec": {"nodeName": on, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


#: The namespace (opted in), the claim ``data`` and its volume in ``ZONE``.
STORAGE = [
    {"apiVersion": "v1", "kind": "Namespace",
     "metadata": {"name": "default", "labels": {names.INJECT_LABEL: "enabled"}}},
    {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
     "metadata": {"name": "data", "namespace": "default"},
     "spec": {"volumeName": "pv-data", "accessModes": ["ReadWriteOnce"],
              "resources": {"requests": {"storage": "1Ti"}}},
     "status": {"phase": "Bound"}},
    {"apiVersion": "v1", "kind": "PersistentVolume",
     "metadata": {"name": "pv-data", "labels": {names.ZONE_LABEL: ZONE}},
     "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteOnce"]}},
]


def mounting(name: str, *, workers: int, gpus: int) -> dict[str, Any]:
    """An MPIJob whose workers mount the claim ``data``."""
    job = mpijob(name, workers=workers, gpus=gpus)
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return job


def admitted(tmp_path: Path, objects: list[dict[str, Any]], job: dict[str, Any], *,
             dry_run: bool) -> list[dict[str, Any]]:
    """Every worker of ``job`` admitted in order on a fresh copy of the cluster, as the
    webhook of a live cluster admits them (a placement queue runs: gangs may wait)."""
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents(objects))
    cluster = ClusterSnapshot.from_file(path)
    cluster.add(copy.deepcopy(job))
    admitter = build_admitter(None, cluster, placement=PlacementStep(can_wait=True),
                              reload_interval_s=0)
    try:
        workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
        return [admit(admitter, worker_pod(job, i), dry_run=dry_run) for i in range(workers)]
    finally:
        admitter.close()


def without_time(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod with its record's ``since`` (a waiting gang's clock) left out."""
    out = json.loads(json.dumps(pod))
    rec = json.loads(out["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
    rec.pop("since", None)
    out["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] = rec
    return out


def test_a_gang_the_webhook_gates_is_gated_by_the_dry_run_too(tmp_path):
    """Two DGX-1 in the volume's zone with only an NV1 pair free each (20.1 GB/s, half of
    the NV2 pair a DGX-1 gives); two PCIe servers the volume cannot reach. Against the
    DGX-1 the gang waits; against the PCIe servers' PIX pair (12.2 GB/s) it would start."""
    dgx1 = fixture("dgx1-v100.txt")
    cluster = [*STORAGE, node("dgx-1", dgx1, ZONE), node("dgx-2", dgx1, ZONE),
               node("pcie-1", fixture("pcie-2socket-phb.txt"), OTHER),
               node("pcie-2", fixture("pcie-2socket-phb.txt"), OTHER),
               running("busy-1", "dgx-1", "2,3,4,5,6,7"),
               running("busy-2", "dgx-2", "2,3,4,5,6,7")]
    job = mounting("gated", workers=2, gpus=1)
    live = admitted(tmp_path, cluster, job, dry_run=False)
    dry = admitted(tmp_path, cluster, job, dry_run=True)
    for pod in (*live, *dry):
        rec = record(pod)
        assert rec["placed"] is False and rec["waiting"] is True, rec
        assert "a good placement gives 40.2 GB/s" in rec["reason"]
    assert [without_time(p) for p in dry] == [without_time(p) for p in live]


def test_the_dry_run_shows_the_node_and_gpus_the_webhook_pins(tmp_path):
    """A 2 x 4-GPU gang; in the volume's zone an idle DGX-1 (120.7 GB/s over its 8 GPUs)
    and an idle DGX A100 (234 GB/s). The slowest kind it may use, the DGX-1, holds it, so
    its bar is 90 % of the DGX-1's best: both are good enough and the slower good set wins
    (the objective's good terms), the DGX-1. Out of reach: two 4-GPU PCIe servers (one of
    them cannot hold the gang, so the typical kind's reference applies) and two more DGX
    A100s, which make the A100 the typical kind: against it only the A100 is good."""
    a100, pcie4 = fixture("dgx-a100.txt"), PCIE_4
    cluster = [*STORAGE, node("dgx-1", fixture("dgx1-v100.txt"), ZONE),
               node("a100-1", a100, ZONE), node("a100-2", a100, OTHER),
               node("a100-3", a100, OTHER), node("pcie-1", pcie4, OTHER),
               node("pcie-2", pcie4, OTHER)]
    job = mounting("pinned", workers=2, gpus=4)
    live = admitted(tmp_path, cluster, job, dry_run=False)
    dry = admitted(tmp_path, cluster, job, dry_run=True)
    assert [pinned_node(p) for p in live] == ["dgx-1", "dgx-1"]
    assert sorted(g for p in live for g in gpu_group(p)) == list(range(8))
    assert all(record(p)["placed"] is True for p in live)
    assert [(pinned_node(p), gpu_group(p)) for p in dry] == [
        (pinned_node(p), gpu_group(p)) for p in live]
    assert dry == live
    # the pinned pods as the API server stores them pass the scheduler's filters: the
    # node is in the volume's zone (VolumeZone: pkg/scheduler/framework/plugins/volumezone,
    # a node whose zone label differs from the PV's is filtered out), NodeResourcesFit
    # and NodePorts (tests/placement_step/apiserver_rules.py)
    zones = {n["metadata"]["name"]: n["metadata"]["labels"][names.ZONE_LABEL]
             for n in cluster if n["kind"] == "Node"}
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in live:
        by_node.setdefault(pinned_node(stored(pod)), []).append(pod)
    assert {zones[n] for n in by_node} == {ZONE}
    assert_resources_fit(by_node, {n["metadata"]["name"]: n["status"]["allocatable"]
                                   for n in cluster if n["kind"] == "Node"},
                         ("cpu", "memory", "pods"))
    assert_node_ports_free(by_node)


def test_place_answers_the_node_the_webhook_pins_and_says_when_it_waits(tmp_path, capsys):
    """``gputopo place JOB`` solves and judges the job's gang as the webhook does
    (``GangReserver.judge``): on the nodes its volume reaches, with the bar of their kinds.
    It used to solve over every node: the A100s out of the volume's reach (issue 34)."""
    from gputopo.cli import main

    a100, pcie4 = fixture("dgx-a100.txt"), PCIE_4
    cluster = [*STORAGE, node("dgx-1", fixture("dgx1-v100.txt"), ZONE),
               node("a100-1", a100, ZONE), node("a100-2", a100, OTHER),
               node("a100-3", a100, OTHER), node("pcie-1", pcie4, OTHER),
               node("pcie-2", pcie4, OTHER)]
    job = mounting("pinned", workers=2, gpus=4)
    live = admitted(tmp_path, cluster, job, dry_run=False)
    path, job_file = tmp_path / "cluster.yaml", tmp_path / "job.yaml"
    path.write_text(dump_documents(cluster))
    job_file.write_text(dump_documents([job]))
    capsys.readouterr()
    assert main(["place", "--cluster", str(path), "-o", "json", str(job_file)]) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert sorted((s["node"], s["gpus"]) for s in answer["placements"]) == sorted(
        (pinned_node(p), list(gpu_group(p))) for p in live)
    assert "waits" not in err
    # the gated cluster of the first test: place shows the best now and says it waits
    dgx1 = fixture("dgx1-v100.txt")
    gated = [*STORAGE, node("dgx-1", dgx1, ZONE), node("dgx-2", dgx1, ZONE),
             node("pcie-1", fixture("pcie-2socket-phb.txt"), OTHER),
             node("pcie-2", fixture("pcie-2socket-phb.txt"), OTHER),
             running("busy-1", "dgx-1", "2,3,4,5,6,7"),
             running("busy-2", "dgx-2", "2,3,4,5,6,7")]
    path.write_text(dump_documents(gated))
    job_file.write_text(dump_documents([mounting("gated", workers=2, gpus=1)]))
    assert main(["place", "--cluster", str(path), "-o", "json", str(job_file)]) == 0
    out, err = capsys.readouterr()
    assert {s["node"] for s in json.loads(out)["placements"]} <= {"dgx-1", "dgx-2"}
    assert "a good placement gives 40.2 GB/s" in err and "waits, gated" in err
