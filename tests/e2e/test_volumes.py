"""A gang whose claim pins it to one node: ``gputopo mutate`` and ``gputopo place`` answer
what the live webhook answers (issue 34, "the dry run reaches the nodes the live webhook
reaches").

The claim ``data`` is bound to a local PersistentVolume whose node affinity names one node
(the scheduler's VolumeBinding filter keeps the pods off every other node:
gputopo/cluster/node_volumes.py). The live answer is ``gputopo serve``'s on the API double
(its view GETs the claim and the volume), each pod sent by the real admission chain; the
dry run's is ``gputopo mutate --cluster FILE`` on a file of the same objects. The node the
volume cannot reach must neither hold the gang nor set its bar for a good placement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import (
    DEMO_CLUSTER,
    REPO,
    admit_jobs,
    dump,
    gpu_group,
    namespace,
    nodes_of,
    pinned_node,
    placement,
    running_pod,
)

JOBS = Path(__file__).resolve().parent / "jobs"
JOB = JOBS / "pytorch-local-volume.yaml"
NODES = nodes_of(DEMO_CLUSTER)
NODE_A, NODE_B = (n["metadata"]["name"] for n in NODES)
#: what the live and the dry-run answers are compared on (not the job's uid, nor a
#: waiting gang's clock)
SAME = ("placed", "waiting", "node", "gpus", "gpuVisible", "busBandwidthGBps", "reason")


def storage(node: str) -> list[dict[str, Any]]:
    """The claim ``data`` bound to a local volume on ``node``."""
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-local"},
         "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteOnce"],
                  "storageClassName": "local-nvme", "local": {"path": "/mnt/nvme0"},
                  "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem",
                  "claimRef": {"namespace": "default", "name": "data"},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "kubernetes.io/hostname", "operator": "In",
                       "values": [node]}]}]}}},
         "status": {"phase": "Bound"}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "data", "namespace": "default"},
         "spec": {"volumeName": "pv-local", "accessModes": ["ReadWriteOnce"],
                  "storageClassName": "local-nvme", "volumeMode": "Filesystem",
                  "resources": {"requests": {"storage": "1Ti"}}},
         "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                    "capacity": {"storage": "1Ti"}}},
    ]


def _same(pod: dict[str, Any]) -> dict[str, Any]:
    record = placement(pod)
    assert record is not None, pod["metadata"]["name"]
    return {k: record.get(k) for k in SAME}


def _mutate(cluster: Path) -> list[dict[str, Any]]:
    p = subprocess.run([sys.executable, "-m", "gputopo", "mutate", "--cluster", str(cluster),
                        "-o", "yaml", str(JOB)], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def _place(cluster: Path) -> tuple[dict[str, Any], str]:
    p = subprocess.run([sys.executable, "-m", "gputopo", "place", "--cluster", str(cluster),
                        "-o", "json", str(JOB)], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout), p.stderr


@pytest.mark.parametrize("case", ["waits", "placed"])
def test_mutate_and_place_answer_what_the_live_webhook_answers(programs, deployments, kube,
                                                               tmp_path, case):
    """``waits``: the volume is on node A, where only GPUs 0,1 are free (an NV1 pair, 20.1
    GB/s, under 90 % of the DGX-1's 40.2): the live webhook gates the gang, though node B
    is idle; a preview judging B would place it there. ``placed``: the volume is on node
    B, both nodes idle: the gang goes to B, although A is as good (and first by name)."""
    busy = [running_pod("busy", NODE_A, [2, 3, 4, 5, 6, 7], resource="aliyun.com/gpu")] \
        if case == "waits" else []
    objects = storage(NODE_A if case == "waits" else NODE_B)
    for obj in objects:
        kube.apply(obj)
    live, _ = admit_jobs(programs, deployments["ack"], kube, tmp_path, nodes=NODES,
                         job_files=[JOB], running=busy)
    cluster = dump(tmp_path / "cluster.yaml", [namespace(), *NODES, *objects, *busy])
    dry = _mutate(cluster)
    assert [p["metadata"]["name"] for p in dry] == [p["metadata"]["name"] for p in live]
    assert [_same(p) for p in dry] == [_same(p) for p in live]
    answer, note = _place(cluster)
    if case == "waits":
        for pod in live:
            assert placement(pod)["waiting"] is True
            assert "a good placement gives 40.2 GB/s" in placement(pod)["reason"]
        # place shows the best there is now, on the volume's node, and says it waits
        assert {s["node"] for s in answer["placements"]} == {NODE_A}
        assert "the gang waits, gated, for a good placement" in note
    else:
        assert {pinned_node(p) for p in live} == {NODE_B}
        assert [{"node": pinned_node(p), "gpus": gpu_group(p)} for p in live] == [
            {"node": s["node"], "gpus": s["gpus"]} for s in answer["placements"]]
        assert "waits" not in note
