"""Done-when checks of issue 6 through ``gputopo mutate`` on the demo cluster (2 x DGX-1).

The DGX-1 hybrid cube-mesh has exactly two sets of four GPUs that are all NVLink-connected
to each other ({0,1,2,3} and {4,5,6,7}); the checks read the links from the cluster file,
not from this test.
"""

from __future__ import annotations

from itertools import combinations

import pytest
from placement_checks import env, gpu_group, gpu_visible, pinned_node, record, terms
from placement_jobs import V1, V2BETA1, gang, launcher_objects, mpijob, worker_pod

from gputopo import names


def _workers(result, job_name: str, n: int = 4):
    pods = result.pods
    return [pods[f"{job_name}-worker-{i}"] for i in range(n)]


def _launcher(result, job_name: str):
    return next(p for name, p in result.pods.items() if name.startswith(f"{job_name}-launcher"))


def _check_gang_slot(workers, topologies) -> tuple[str, frozenset[int]]:
    """All workers on one node, distinct GPUs, fully NVLinked, consistent annotations/env."""
    nodes = {pinned_node(w) for w in workers}
    assert len(nodes) == 1, f"workers spread over {nodes}"
    node = nodes.pop()
    groups = [gpu_group(w) for w in workers]
    assert all(len(g) == 1 for g in groups)
    gpus = [g[0] for g in groups]
    assert len(set(gpus)) == len(gpus), f"a GPU handed out twice: {gpus}"
    topo = topologies[node]
    for a, b in combinations(gpus, 2):
        assert topo.link(a, b).startswith("NV"), f"GPUs {a},{b} linked by {topo.link(a, b)}"
    visible = {gpu_visible(w) for w in workers}
    assert visible == {tuple(sorted(gpus))}, "gpu-visible must be the job's GPUs on the node"
    for w in workers:
        rec = record(w)
        assert rec["placed"] is True and rec["node"] == node and tuple(rec["gpus"]) == gpu_group(w)
        assert rec["busBandwidthGBps"] > 0
        assert w["spec"]["schedulerName"] == names.SCHEDULER_NAME
        (container,) = w["spec"]["containers"]
        e = env(container, w)
        vis = gpu_visible(w)
        assert e[names.NVIDIA_VISIBLE_DEVICES_ENV] == ",".join(map(str, vis))
        positions = [int(x) for x in e[names.CUDA_VISIBLE_DEVICES_ENV].split(",")]
        assert tuple(vis[p] for p in positions) == gpu_group(w)
    return node, frozenset(gpus)


@pytest.mark.parametrize("version", [V2BETA1, V1])
def test_four_workers_share_one_nvlink_quad_and_launcher_gets_no_slot(
    mutate, demo_topologies, version
):
    result = mutate(gang(mpijob("tf-topo-4-vgg16", version=version)))
    assert result.rc == 0, result.stderr
    _check_gang_slot(_workers(result, "tf-topo-4-vgg16"), demo_topologies)
    launcher = _launcher(result, "tf-topo-4-vgg16")
    ann = launcher["metadata"].get("annotations") or {}
    assert names.GPU_GROUP_ANNOTATION not in ann and names.PLACEMENT_ANNOTATION not in ann
    assert terms(launcher) == []
    for c in launcher["spec"]["containers"]:
        assert names.NVIDIA_VISIBLE_DEVICES_ENV not in env(c)


@pytest.mark.parametrize("version", [V2BETA1, V1])
def test_five_jobs_pack_quads_then_the_fifth_waits_gated(mutate, demo_topologies, version):
    jobs = [mpijob(f"job-{k}", version=version) for k in range(1, 6)]
    result = mutate([obj for job in jobs for obj in gang(job)])
    assert result.rc == 0, result.stderr
    placed = [_check_gang_slot(_workers(result, f"job-{k}"), demo_topologies) for k in (1, 2, 3, 4)]
    (n1, g1), (n2, g2), (n3, g3), (n4, g4) = placed
    assert n1 == n2, "the second job must pack onto the first job's node"
    assert g1.isdisjoint(g2)
    assert n3 == n4 != n1, "the third and fourth jobs go to the other node"
    assert g3.isdisjoint(g4)
    for w in _workers(result, "job-5"):
        rec = record(w)
        assert rec["placed"] is False and rec["node"] is None and rec["reason"]
        assert rec["waiting"] is True  # gputopo mutate answers as the live webhook
        assert {"name": names.PLACEMENT_GATE} in w["spec"]["schedulingGates"]
        assert terms(w) == [], "an unplaced pod must not be pinned"
        assert names.GPU_GROUP_ANNOTATION not in w["metadata"].get("annotations", {})
        assert w["metadata"]["labels"][names.GANG_LABEL] == "job-5"
        assert w["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "4"
    assert "job-5" in result.stderr and "waits for a placement" in result.stderr


def test_recreated_replica_gets_the_same_slot(mutate):
    job = mpijob("recreate")
    again = worker_pod(job, 2, pod_uid_tag="recreated")
    result = mutate([*gang(job), again])
    assert result.rc == 0, result.stderr
    pods = [d for d in result.docs if d["metadata"]["name"] == "recreate-worker-2"]
    assert len(pods) == 2
    first, second = pods
    assert pinned_node(first) == pinned_node(second)
    assert gpu_group(first) == gpu_group(second)
    others = {gpu_group(p) for n, p in result.pods.items()
              if "-worker-" in n and n != "recreate-worker-2"}
    assert gpu_group(second) not in others


def test_a_pod_copying_another_jobs_labels_cannot_take_its_slot(mutate):
    victim = mpijob("victim", workers=4)
    thief_job = mpijob("thief", workers=1)
    # The thief's pod carries the victim's labels and name pattern but is owned (as the
    # API server requires: with a uid) by the thief's own job.
    thief = worker_pod(thief_job, 0)
    thief["metadata"]["labels"] = dict(worker_pod(victim, 0)["metadata"]["labels"])
    thief["metadata"]["name"] = "victim-worker-0-copy"
    result = mutate([victim, thief_job, *gang(victim)[1:], thief])
    assert result.rc == 0, result.stderr
    victims = _workers(result, "victim")
    taken = {(pinned_node(w), gpu_group(w)[0]) for w in victims}
    stolen = result.pods["victim-worker-0-copy"]
    rec = record(stolen)
    assert rec["job"].endswith("/thief") and rec["jobUid"] == thief_job["metadata"]["uid"]
    assert all((pinned_node(stolen), g) not in taken for g in gpu_group(stolen))


def test_every_existing_node_selector_term_gets_the_pin(mutate):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": names.ZONE_LABEL, "operator": "In",
                                   "values": ["cn-shanghai-b"]}]},
            {"matchExpressions": [{"key": names.RACK_LABEL, "operator": "In",
                                   "values": ["rack-1"]}]},
        ]}}}
    job = mpijob("terms", worker_affinity=affinity)
    result = mutate(gang(job))
    assert result.rc == 0, result.stderr
    for w in _workers(result, "terms"):
        ts = terms(w)
        assert len(ts) == 2, "terms are ORed: the pin goes into each, none is added"
        node = pinned_node(w)  # asserts each term pins the same single node
        assert ts[0]["matchExpressions"][0]["key"] == names.ZONE_LABEL
        assert ts[1]["matchExpressions"][0]["key"] == names.RACK_LABEL
        assert node.startswith("cn-shanghai.")


def test_gpu_launcher_run_as_worker_gets_its_own_slot(mutate, demo_topologies):
    """mpi-operator v2beta1 ``runLauncherAsWorker: true`` with a GPU launcher: the launcher
    pod comes from its batch Job's ``generateName`` (no name yet at admission, no index
    label), yet it is the only Launcher replica, so it is a slot of the gang like a worker."""
    job = mpijob("law", workers=3)
    job["spec"]["runLauncherAsWorker"] = True
    launcher_spec = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher_spec["containers"][0]["resources"] = {"limits": {names.SOURCE_GPU_RESOURCE: 1}}
    batch_job, launcher = launcher_objects(job)
    meta = launcher["metadata"]
    meta["generateName"] = f"{meta.pop('name')[:-len('lmhjl')]}"
    workers = [worker_pod(job, i) for i in range(3)]
    result = mutate([job, batch_job, launcher, *workers])
    assert result.rc == 0, result.stderr
    (placed_launcher,) = [d for d in result.docs if d.get("kind") == "Pod"
                          and d["metadata"].get("generateName") == "law-launcher-"]
    assert placed_launcher["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "4"
    assert "left unplaced" not in result.stderr and "admitted unplaced" not in result.stderr
    _check_gang_slot([placed_launcher, *_workers(result, "law", 3)], demo_topologies)
