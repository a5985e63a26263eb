"""Replicas packed on one node must start there: the network plan (issue 9).

Every pod here is made by ``gputopo.operators.expand`` exactly as training-operator v1.8 /
mpi-operator v2beta1 make them (ports on every replica type, MASTER_PORT, TF_CONFIG), goes
through ``gputopo mutate`` (the server's admission path) on the seeds' two DGX-1 nodes, and
is checked as the API server would STORE it (``apiserver_rules.stored``: hostPort defaulted
to containerPort under host networking) and as the NodePorts filter would judge it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import combinations
from typing import Any

from apiserver_rules import assert_node_ports_free, host_ports, stored
from placement_checks import gpu_group, pinned_node, record

from gputopo.operators import expand, with_identity

IMAGE = "registry.cn-hangzhou.aliyuncs.com/kubernetes-image-hub/pytorch-dist-nccl"


def _replica(container: str, gpus: int, replicas: int, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": container, "image": IMAGE,
                         "resources": {"limits": {"nvidia.com/gpu": gpus}}, **extra}
    return {"replicas": replicas, "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [c]}}}


def pytorchjob(name: str, *, workers: int = 1, gpus: int = 1, **extra: Any) -> dict[str, Any]:
    """The ACK seed's job shape (pytorch-dist-nccl): a Master and Workers."""
    return with_identity({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {
            "Master": _replica("pytorch", gpus, 1, **extra),
            "Worker": _replica("pytorch", gpus, workers, **extra)}}})


def tfjob(name: str, *, workers: int = 4) -> dict[str, Any]:
    return with_identity({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {"Worker": _replica("tensorflow", 1, workers)}}})


def mpijob_v2(name: str, *, workers: int = 4) -> dict[str, Any]:
    launcher = {"replicas": 1, "template": {"spec": {"containers": [{
        "name": "launcher", "image": IMAGE, "command": ["mpirun", "python", "train.py"]}]}}}
    worker = _replica("worker", 1, workers)
    worker["template"]["spec"]["containers"][0]["command"] = ["/usr/sbin/sshd", "-De"]
    return with_identity({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {"Launcher": launcher,
                                                          "Worker": worker}}})


def _gpu_pods(result: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    uid = job["metadata"]["uid"]
    return [p for p in result.pods.values()
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences", []))
            and record(p) is not None]


def _by_node(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pods:
        out[pinned_node(p)].append(p)
    return out


def _env(pod: dict[str, Any], name: str) -> list[Any]:
    """Every value of env ``name`` across the pod's containers (valueFrom as a dict)."""
    out = []
    for key in ("initContainers", "containers"):
        for c in pod["spec"].get(key) or []:
            for e in c.get("env") or []:
                if e["name"] == name:
                    out.append(e.get("value", e.get("valueFrom")))
    return out


def _nvlinked(topo: Any, gpus: list[int]) -> bool:
    return all(topo.link(a, b).startswith("NV") for a, b in combinations(gpus, 2))


def test_seed_pytorchjob_packs_master_and_worker_on_one_nvlink_pair(mutate, demo_topologies):
    job = pytorchjob("pytorch-dist-nccl")
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    master = result.pods["pytorch-dist-nccl-master-0"]
    worker = result.pods["pytorch-dist-nccl-worker-0"]
    node = pinned_node(master)
    assert pinned_node(worker) == node, "one node: the seed's point"
    gpus = [gpu_group(master)[0], gpu_group(worker)[0]]
    assert _nvlinked(demo_topologies[node], gpus)
    for pod in (master, worker):
        assert stored(pod)["spec"]["hostNetwork"] is True
    assert_node_ports_free({node: [master, worker]})
    port = _env(master, "MASTER_PORT")[0]
    assert set(_env(master, "MASTER_PORT") + _env(worker, "MASTER_PORT")
               + _env(master, "PET_MASTER_PORT") + _env(worker, "PET_MASTER_PORT")) == {port}
    assert ("TCP", int(port)) in host_ports(master), "the master holds MASTER_PORT"
    assert not host_ports(worker), "workers do not listen on the rendezvous port"
    assert record(master)["network"]["plan"] == "host"


def test_two_pytorchjobs_each_on_one_node_with_different_master_ports(mutate):
    jobs = [pytorchjob("a"), pytorchjob("b")]
    result = mutate([jobs[0], jobs[1], *expand(jobs[0]), *expand(jobs[1])])
    assert result.rc == 0, result.stderr
    ports = []
    everyone = []
    for job in jobs:
        pods = _gpu_pods(result, job)
        assert len(pods) == 2 and len({pinned_node(p) for p in pods}) == 1
        master = next(p for p in pods if p["metadata"]["name"].endswith("master-0"))
        ports.append((pinned_node(master), _env(master, "MASTER_PORT")[0]))
        everyone += pods
    assert ports[0] != ports[1]
    assert_node_ports_free(_by_node(everyone))


def test_pytorchjob_of_two_times_four_gpus_takes_one_whole_node(mutate):
    job = pytorchjob("big", gpus=4)
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    pods = _gpu_pods(result, job)
    assert len({pinned_node(p) for p in pods}) == 1
    assert sorted(g for p in pods for g in gpu_group(p)) == list(range(8))
    assert_node_ports_free(_by_node(pods))


def test_tfjob_tasks_share_an_nvlink_quad_each_on_the_port_tf_config_names(
        mutate, demo_topologies):
    job = tfjob("tf")
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    pods = sorted(_gpu_pods(result, job), key=lambda p: p["metadata"]["name"])
    assert len(pods) == 4
    node = {pinned_node(p) for p in pods}
    assert len(node) == 1
    assert _nvlinked(demo_topologies[node.pop()], [gpu_group(p)[0] for p in pods])
    configs = [json.loads(_env(p, "TF_CONFIG")[0]) for p in pods]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs), "one cluster spec"
    addresses = configs[0]["cluster"]["worker"]
    assert len({a.rsplit(":", 1)[1] for a in addresses}) == 4, "four distinct task ports"
    for pod, config in zip(pods, configs, strict=True):
        task = config["task"]
        port = int(configs[0]["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
        assert host_ports(pod) == {("TCP", port)}, "each task holds the port TF_CONFIG gives"
    assert_node_ports_free(_by_node(pods))


def test_mpijob_v2beta1_workers_packed_on_one_node_use_the_pod_network(mutate):
    job = mpijob_v2("mpi")
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    workers = _gpu_pods(result, job)
    assert len(workers) == 4 and len({pinned_node(p) for p in workers}) == 1
    on_host = [p for p in workers if stored(p)["spec"].get("hostNetwork") is True]
    assert len(on_host) <= 1, "no two host-network sshd workers on one node"
    for pod in workers:
        assert pod["spec"].get("dnsPolicy") != "ClusterFirstWithHostNet"
        assert pod["spec"]["hostIPC"] is True, "shared /dev/shm for NCCL's SHM/P2P"
        assert _env(pod, "NCCL_HOSTID") == [
            {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}]
        assert _env(pod, "NCCL_CUMEM_ENABLE") == ["0"]
        assert record(pod)["network"]["plan"] == "pod"


def test_a_second_mutate_over_its_own_output_keeps_nodes_gpus_and_ports(mutate, tmp_path):
    jobs = [pytorchjob("a"), tfjob("t")]
    first = mutate([*jobs, *expand(jobs[0]), *expand(jobs[1])])
    assert first.rc == 0, first.stderr
    again = mutate([*jobs, *(d for d in first.docs if d.get("kind") == "Pod")])
    assert again.rc == 0, again.stderr
    for name, pod in first.pods.items():
        assert again.pods[name] == pod, f"{name} changed on re-admission"


def test_a_users_own_host_port_is_kept_and_never_shared_on_a_node(mutate):
    job = pytorchjob("own", workers=3, ports=[{"containerPort": 8080, "hostPort": 8080}])
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    pods = _gpu_pods(result, job)
    placed = [p for p in pods if record(p)["placed"]]
    assert all(("TCP", 8080) in host_ports(p) for p in pods), "the user's hostPort is kept"
    assert len({pinned_node(p) for p in placed}) == len(placed), "one per node"
    assert_node_ports_free(_by_node(placed))


def test_a_users_own_master_port_is_kept_with_a_warning(mutate):
    job = pytorchjob("mine", env=[{"name": "MASTER_PORT", "value": "29500"}])
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    assert "kept the pod's MASTER_PORT=29500" in result.stderr
    pods = _gpu_pods(result, job)
    assert all(_env(p, "MASTER_PORT")[0] == "29500" for p in pods)
    assert_node_ports_free(_by_node(pods))


def test_network_pod_policy_takes_back_host_networking(mutate, tmp_path):
    policy = (tmp_path / "policies")
    policy.mkdir()
    from webhook.assembly import default_policies_dir

    text = (default_policies_dir() / "ack-gpu-topology.yaml").read_text()
    assert "\n  placement:\n" in text
    (policy / "ack.yaml").write_text(text.replace("\n  placement:\n",
                                                  "\n  placement:\n    network: pod\n"))
    job = pytorchjob("podnet")
    result = mutate([job, *expand(job)], "--policies", str(policy))
    assert result.rc == 0, result.stderr
    for pod in _gpu_pods(result, job):
        spec = stored(pod)["spec"]
        assert "hostNetwork" not in spec and spec["dnsPolicy"] == "ClusterFirst"
        assert not host_ports(pod)
        assert _env(pod, "MASTER_PORT") == ["23456"], "the operator's port, in its own netns"


def test_elastic_pytorchjob_rendezvous_moves_with_worker_0(mutate):
    job = with_identity({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "el"},
        "spec": {"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 2},
                 "pytorchReplicaSpecs": {"Worker": _replica("pytorch", 1, 2)}}})
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    w0, w1 = result.pods["el-worker-0"], result.pods["el-worker-1"]
    assert pinned_node(w0) == pinned_node(w1)
    endpoints = set(_env(w0, "PET_RDZV_ENDPOINT") + _env(w1, "PET_RDZV_ENDPOINT"))
    assert len(endpoints) == 1
    host, port = endpoints.pop().rsplit(":", 1)
    assert host == "el-worker-0"
    assert host_ports(w0) == {("TCP", int(port))} and not host_ports(w1)
    assert_node_ports_free(_by_node([w0, w1]))


def _tf(name: str, replicas: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """A TFJob with replica type → (replicas, GPUs per pod)."""
    return with_identity({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {t: _replica("tensorflow", g, n)
                                    for t, (n, g) in replicas.items()}}})


def _tf_checks(result: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    pods = _gpu_pods(result, job)
    configs = [json.loads(_env(p, "TF_CONFIG")[0]) for p in pods]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    for pod, config in zip(pods, configs, strict=True):
        task = config["task"]
        port = int(config["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
        assert host_ports(pod) == {("TCP", port)}
    assert_node_ports_free(_by_node(pods))
    return pods


def test_tfjob_chief_and_workers_spanning_both_nodes_agree_on_every_port(mutate):
    job = _tf("span", {"Chief": (1, 1), "Worker": (11, 1)})
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    pods = _tf_checks(result, job)
    assert len(pods) == 12 and len({pinned_node(p) for p in pods}) == 2


def test_tfjob_with_a_parameter_server_without_gpus_uses_the_pod_network(mutate):
    job = _tf("ps", {"PS": (1, 0), "Worker": (4, 1)})
    job["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["resources"] = {}
    result = mutate([job, *expand(job)])
    assert result.rc == 0, result.stderr
    workers = _gpu_pods(result, job)
    assert len(workers) == 4 and len({pinned_node(p) for p in workers}) == 1
    for pod in workers:
        assert "hostNetwork" not in stored(pod)["spec"] and not host_ports(pod)
        assert json.loads(_env(pod, "TF_CONFIG")[0])["cluster"]["ps"] == [
            "ps-ps-0.default.svc:2222"], "TF_CONFIG untouched: the PS reads the same"
        assert record(pod)["network"]["plan"] == "pod"


def test_generic_platform_leaves_the_gpu_env_to_the_device_plugin(mutate):
    """--platform generic: placement annotations, no NVIDIA_/CUDA_VISIBLE_DEVICES (the
    kubelet would put them after the plugin's and they would win); a copied
    gputopo.io/allocated-gpus on a new pod is removed."""
    job = pytorchjob("plug")
    pods = expand(job)
    pods[0]["metadata"].setdefault("annotations", {})["gputopo.io/allocated-gpus"] = "7"
    result = mutate([job, *pods], "--platform", "generic")
    assert result.rc == 0, result.stderr
    for pod in _gpu_pods(result, job):
        assert record(pod)["placed"] and gpu_group(pod)
        assert not _env(pod, "NVIDIA_VISIBLE_DEVICES") and not _env(pod, "CUDA_VISIBLE_DEVICES")
        assert "gputopo.io/allocated-gpus" not in pod["metadata"]["annotations"]
        assert "nvidia.com/gpu" in pod["spec"]["containers"][0]["resources"]["limits"]
    assert "removed gputopo.io/allocated-gpus='7'" in result.stderr
