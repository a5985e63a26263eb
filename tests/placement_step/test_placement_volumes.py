"""A replica is pinned only to a node that can reach its volumes: a claim bound to a
PersistentVolume with node affinity (a local volume) or zone labels (a zonal disk) limits
the nodes, as the scheduler's VolumeBinding and VolumeZone filters do; an unbound
WaitForFirstConsumer claim is said in the record. The seed PyTorchJob through ``gputopo
mutate`` on the demo cluster, with the claims and volumes in the cluster file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from placement_checks import record
from test_placement_node_resources import FIRST, PODS, SECOND, nodes_of, seed_job

from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import dump_documents, load_documents


def mounting(claim: str) -> dict[str, Any]:
    """The seed job whose pods mount ``claim`` at /data."""
    job = copy.deepcopy(seed_job({}))
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        spec = rs["template"]["spec"]
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return job


def claim(name: str, *, volume: str | None = None, cls: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Ti"}}}
    if volume:
        spec["volumeName"] = volume
    if cls:
        spec["storageClassName"] = cls
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec,
            "status": {"phase": "Bound" if volume else "Pending"}}


def local_volume(name: str, node: str) -> dict[str, Any]:
    """A local PersistentVolume on ``node`` (what local-static-provisioner creates)."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Ti"}, "local": {"path": "/mnt/nvme0"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In",
                          "values": [node]}]}]}}}}


def cluster(tmp_path: Path, *objects: dict[str, Any]) -> Path:
    """The demo cluster, its nodes with the hostname label every kubelet sets."""
    docs = load_documents(demo_cluster_path())
    for doc in docs:
        if doc.get("kind") == "Node":
            doc["metadata"]["labels"]["kubernetes.io/hostname"] = doc["metadata"]["name"]
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents([*docs, *objects]))
    return path


def test_a_local_volume_on_one_node_takes_the_gang_there(mutate, tmp_path):
    path = cluster(tmp_path, claim("data", volume="pv-a"), local_volume("pv-a", SECOND))
    result = mutate([mounting("data")], cluster=path)
    assert result.rc == 0, result.stderr
    assert nodes_of(result) == [SECOND, SECOND]  # without the volume: FIRST (see below)
    assert f"{FIRST}: volume pv-a (claim data) is not reachable there" in record(
        result.pods[PODS[0]])["reason"]
    assert nodes_of(mutate([seed_job({})], cluster=path)) == [FIRST, FIRST]


def test_a_volume_no_topology_node_reaches_leaves_the_gang_unplaced_with_the_reason(
        mutate, tmp_path):
    zonal = local_volume("pv-z", "elsewhere")
    del zonal["spec"]["nodeAffinity"]
    zonal["metadata"]["labels"] = {"topology.kubernetes.io/zone": "cn-beijing-a__cn-beijing-b"}
    path = cluster(tmp_path, claim("data", volume="pv-z"), zonal)
    result = mutate([mounting("data")], cluster=path)
    for p in PODS:
        rec = record(result.pods[p])
        assert rec["placed"] is False
        assert "volume pv-z (claim data) is in topology.kubernetes.io/zone=cn-beijing-a/" \
               "cn-beijing-b" in rec["reason"]


def test_an_unbound_wait_for_first_consumer_claim_is_said_in_the_record(mutate, tmp_path):
    wffc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "local-nvme"}, "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer"}
    path = cluster(tmp_path, claim("data", cls="local-nvme"), wffc)
    result = mutate([mounting("data")], cluster=path)
    rec = record(result.pods[PODS[0]])
    assert rec["placed"] is True
    assert "claim data is bound where the pod lands (WaitForFirstConsumer)" in rec["reason"]
