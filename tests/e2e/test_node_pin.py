"""gputopo's node pin only narrows where a pod may run, judged by the real kube-scheduler.

A required nodeSelectorTerm that is empty (``{}``) matches no node, and terms are ORed, so
a pod with ``[A, {}]`` may run only where A holds. ``gputopo mutate`` with a hand-written
cluster file whose Nodes lack the ``kubernetes.io/hostname`` label cannot judge A (a
requirement on a kubelet label it lacks holds there: gputopo.cluster.node_fit) and pins
the gang to a node A excludes. With the pin written into the empty term as well, that term
alone matched the pinned node and ``schedsim`` bound the pods there, outside A; with the
empty term left empty the pods stay unschedulable, as their own terms say.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from harness import DEMO_CLUSTER, dump, gputopo, key, nodes_of, pinned_node, schedule

from gputopo import names

NODES = nodes_of(DEMO_CLUSTER)
FIRST, SECOND = (n["metadata"]["name"] for n in NODES)
#: the user's own term: the second node only
MINE = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                              "values": [SECOND]}]}


def _job(path: Path) -> Path:
    replica = {"replicas": 1, "template": {"spec": {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [MINE, {}]}}},
        "containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.7.1",
                        "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}
    return dump(path, [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                        "metadata": {"name": "pt", "namespace": "default"},
                        "spec": {"pytorchReplicaSpecs": {"Master": replica,
                                                         "Worker": replica}}}])


def test_a_pin_outside_the_users_terms_leaves_the_pod_unschedulable(programs, tmp_path):
    docs = [d for d in yaml.safe_load_all(DEMO_CLUSTER.read_text()) if d]
    for d in docs:  # a hand-written cluster file: Nodes without the kubelet's hostname
        if d["kind"] == "Node":
            d["metadata"]["labels"].pop("kubernetes.io/hostname")
    cluster = dump(tmp_path / "cluster.yaml", docs)
    out = gputopo("mutate", "--cluster", str(cluster), str(_job(tmp_path / "job.yaml")))
    pods = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "Pod"]
    assert {pinned_node(p) for p in pods} == {FIRST}, "the case needs a pin outside A"
    config = dump(tmp_path / "scheduler.yaml", [{
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": names.SCHEDULER_NAME}]}])
    results = schedule(programs, nodes=NODES, pods=pods, config=config,
                       work=tmp_path / "sched", timeout="3s")
    for pod in pods:
        result = results[key(pod)]
        assert result["status"] != "Bound" or result["node"] == SECOND, result
        assert "node affinity" in result["reason"], result
