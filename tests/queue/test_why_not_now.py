"""``gputopo queue``'s WHY NOT NOW says what the queue's next pass does, when the pods'
volumes, host ports or the CPUs of another gang's pods still coming rule nodes out.

Why these clusters: the pass (``PlacementQueue.run_once`` -> ``GangReserver.reserve``)
solves a gang on the nodes its pods' volumes reach and its host ports allow, and measures
"good" against the kinds of the nodes it can use only. A report that solved on every node
the pod's constraints admit said "fits now" for a gang whose only room is on a node its
volume cannot reach (or where another pod holds its host port, or another gang's pod
still coming holds the CPUs it needs), and for a pair that waits
for a DGX-1's NV2 pair because PCIe servers it cannot use would have made an NV1 pair good
enough. Each worker mounts a claim bound to a local PersistentVolume
(VolumeBinding: gputopo/cluster/node_volumes.py). Everything runs on the API TEST DOUBLE,
through the same view and reservation store the queue uses (and the command on a cluster
file), and the real pass is run right after the report to show what it does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from placement_checks import admit, pinned_node
from placement_jobs import mpijob, worker_pod
from queue_kit import (
    NODE_A,
    NODE_B,
    admit_and_create,
    busy_cluster,
    busy_pod,
    gated,
    pods_of,
    wait_for,
    waiting_gang,
)
from test_placement_live import demo_docs, live_admitter

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.reservations import GangKey
from gputopo.topology.nvidia_smi import parse_nvidia_smi
from gputopo.yamlio import dump_documents
from webhook.queue.placer import PlacementQueue
from webhook.queue.report import rows

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topologies"
#: PCIe servers (PIX pairs under host bridges): slower than a DGX-1 for any pair
PCIE = ["cn-shanghai.192.168.16.180", "cn-shanghai.192.168.16.181"]


def storage(*on: str) -> list[dict[str, Any]]:
    """The claim ``data``, bound to a local volume that nodes ``on`` reach."""
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "data", "namespace": "default"},
             "spec": {"volumeName": "pv-data", "accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "1Ti"}}},
             "status": {"phase": "Bound"}}
    volume = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-data"},
              "spec": {"capacity": {"storage": "1Ti"}, "local": {"path": "/mnt/nvme0"},
                       "accessModes": ["ReadWriteOnce"],
                       "nodeAffinity": {"required": {"nodeSelectorTerms": [{
                           "matchExpressions": [{"key": "kubernetes.io/hostname",
                                                 "operator": "In", "values": list(on)}]}]}}}}
    return [claim, volume]


def mounting(name: str, workers: int = 4) -> dict[str, Any]:
    """A ``workers`` x 1-GPU MPIJob whose workers mount the claim ``data``."""
    job = mpijob(name, workers=workers)
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return job


def gated_gang(kube: Any, admitter: Any, job: dict[str, Any]) -> GangKey:
    """Every worker of ``job`` admitted and created; all of them wait, gated."""
    for i in range(job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]):
        pod, warnings = admit_and_create(admitter, kube, worker_pod(job, i))
        assert gated(pod) and any("waits for a placement" in w for w in warnings), warnings
    return GangKey("default", "MPIJob", job["metadata"]["name"], job["metadata"]["uid"])


def used(view: Any) -> int:
    return sum(len(n.used) for n in view.node_states())


def node_like(demo: list[dict[str, Any]], name: str, fixture: str) -> dict[str, Any]:
    """The demo node A's object (labels, network, allocatable) with another name and the
    wiring of ``fixture`` (``nvidia-smi topo -m`` text in tests/fixtures/topologies)."""
    node = copy.deepcopy(next(d for d in demo if d["kind"] == "Node"))
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    wiring = parse_nvidia_smi((FIXTURES / fixture).read_text(encoding="utf-8"))
    node["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION] = wiring.to_json()
    return node


def test_room_only_where_the_volume_is_not_is_no_fit(kube, tmp_path, capsys):
    """The volume is on node A, which has 2 GPUs free; node B frees all 8. The next pass
    leaves the gang waiting (B is refused), and WHY NOT NOW says so, in the pass's words."""
    demo_docs(kube)
    for obj in storage(NODE_A):
        kube.apply(obj)
    kube.apply(busy_pod("holder", NODE_A, "0,1,2,3,4,5"))
    busy_b = kube.apply(busy_pod("busy-b", NODE_B, "0,1,2,3,4,5"))
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: used(view) == 12)
        key = gated_gang(kube, admitter, kube.apply(mounting("waiter")))
        kube.remove(busy_b)  # node B is idle: room for the gang, out of its volume's reach
        assert wait_for(lambda: used(view) == 6)
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        (row,) = rows(queue.waiting(), view, queue.reserver)
        result = queue.run_once()
        assert view.reservations.get(key) is None
    assert "fits now" not in row.why
    assert f"{NODE_B}: volume pv-data (claim data) is not reachable there" in row.why
    assert result.placed == [] and result.waiting == {str(key): row.why}
    assert all(gated(p) for p in pods_of(kube, "waiter"))

    path = tmp_path / "cluster.yaml"  # the command on a cluster file says the same
    path.write_text(dump_documents([*kube.objects("v1", "Node"), *kube.objects("v1", "Pod"),
                                    *kube.objects("v1", "PersistentVolumeClaim"),
                                    *kube.objects("v1", "PersistentVolume")]))
    capsys.readouterr()
    assert main(["queue", "--cluster", str(path)]) == 0
    head, line = capsys.readouterr().out.splitlines()
    assert head.endswith("WHY NOT NOW") and line.endswith(f"   {row.why}")


def test_unreachable_slower_nodes_do_not_lower_the_bar_it_waits_for(kube):
    """A pair (2 x 1 GPU) whose volume is on the two DGX-1s, where only an NV1 pair is free
    (20.1 GB/s, half of the NV2 pair a DGX-1 gives); two busy PCIe servers are out of the
    volume's reach. Against the DGX-1 the pair waits, and the next pass leaves it waiting;
    against the PCIe servers' PIX pair (12.2 GB/s, the slowest kind, which holds the gang)
    it would fit now. WHY NOT NOW quotes the pass's reason, the DGX-1's reference."""
    demo = demo_docs(kube)
    for obj in storage(NODE_A, NODE_B):
        kube.apply(obj)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        for i, name in enumerate(PCIE):
            kube.apply(node_like(demo, name, "pcie-2socket-phb.txt"))
            kube.apply(busy_pod(f"busy-p{i}", name, "0,1,2,3,4,5,6,7"))
        kube.apply(busy_pod("busy-a", NODE_A, "2,3,4,5,6,7"))
        kube.apply(busy_pod("busy-b", NODE_B, "2,3,4,5,6,7"))
        assert wait_for(lambda: len(view.node_states()) == 4 and used(view) == 28)
        key = gated_gang(kube, admitter, kube.apply(mounting("pair", workers=2)))
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        (row,) = rows(queue.waiting(), view, queue.reserver)
        result = queue.run_once()
    assert row.why == ("best free now gives 20.1 GB/s bus bandwidth (1 node(s)); a good "
                       "placement gives 40.2 GB/s (waits for at least 90% of it)")
    assert result.placed == [] and result.waiting == {str(key): row.why}
    assert all(gated(p) for p in pods_of(kube, "pair"))


def test_room_only_where_its_host_port_is_held_is_no_fit(kube):
    """A 1 x 4-GPU MPIJob whose worker declares host port 29400; node B frees all 8 GPUs,
    but another pod holds that port there (NodePorts keeps the worker off it), and node A
    has 2 GPUs free. The next pass leaves the gang waiting; WHY NOT NOW counts A's GPUs
    only and says why B is left out."""
    demo_docs(kube)
    kube.apply(busy_pod("busy-a", NODE_A, "0,1,2,3,4,5"))
    busy_b = kube.apply(busy_pod("busy-b", NODE_B, "0,1,2,3,4,5"))
    porter = busy_pod("porter", NODE_B, "")
    del porter["metadata"]["annotations"]
    porter["spec"]["containers"][0]["ports"] = [{"containerPort": 29400, "hostPort": 29400}]
    kube.apply(porter)
    job = mpijob("ported", workers=1, gpus=4)
    (worker,) = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    worker["ports"] = [{"containerPort": 29400, "hostPort": 29400}]
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: used(view) == 12)
        key = gated_gang(kube, admitter, kube.apply(job))
        kube.remove(busy_b)
        assert wait_for(lambda: used(view) == 6)
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        (row,) = rows(queue.waiting(), view, queue.reserver)
        result = queue.run_once()
    assert row.why == ("needs 1 x 4 GPU(s); free now: 2 GPU(s), at most 2 on one node; 1 "
                       "node(s) left out: another pod holds a host port the gang cannot "
                       "move there (TCP 29400)")
    assert result.placed == [] and str(key) in result.waiting
    assert all(gated(p) for p in pods_of(kube, "ported"))


def cpu_job(name: str, *, workers: int, gpus: int, cpu: str) -> dict[str, Any]:
    """An MPIJob whose workers request ``cpu`` CPUs each besides their GPUs."""
    job = mpijob(name, workers=workers, gpus=gpus)
    (worker,) = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    worker["resources"]["requests"] = {"cpu": cpu}
    return job


def test_cpus_held_for_another_gangs_pods_still_coming_are_no_room(kube):
    """A 1 x 4-GPU gang asking for 60 CPUs (of a node's 94) waits; node B frees up and a
    2 x 2-GPU gang of 40 CPUs a pod is reserved there, only its first pod admitted so far.
    B has 4 GPUs free, but its second pod's 40 CPUs are held for it: the next pass leaves
    the gang waiting, and WHY NOT NOW gives the pass's reason."""
    demo_docs(kube)
    kube.apply(busy_pod("busy-a", NODE_A, "0,1,2,3,4,5,6,7"))
    busy_b = kube.apply(busy_pod("busy-b", NODE_B, "0,1,2,3,4,5,6,7"))
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: used(view) == 16)
        key = gated_gang(kube, admitter, kube.apply(cpu_job("waiter", workers=1, gpus=4,
                                                            cpu="60")))
        kube.remove(busy_b)
        assert wait_for(lambda: used(view) == 8)
        other = kube.apply(cpu_job("other", workers=2, gpus=2, cpu="40"))
        first = admit(admitter, worker_pod(other, 0), dry_run=False)  # its pods are coming
        assert pinned_node(first) == NODE_B
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        assert wait_for(lambda: view.reservations.pending_requests() != {})
        (row,) = rows(queue.waiting(), view, queue.reserver)
        result = queue.run_once()
    assert row.why == ("the GPUs are free, but too few nodes can take the gang's pods: "
                       f"{NODE_B}: cpu 100 of 94")
    assert result.placed == [] and result.waiting == {str(key): row.why}
    assert all(gated(p) for p in pods_of(kube, "waiter"))


def test_a_gang_whose_gpus_a_later_pod_reserved_fits_now(kube):
    """Three workers of a 4 x 1-GPU gang wait; the holder of node A's quad finishes and the
    fourth worker's admission reserves the quad for the whole gang. The next pass places
    the three on it, and WHY NOT NOW says so (it used to solve with the gang's own GPUs
    held, and said it waits)."""
    holder = busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: used(view) == 12)
        job = kube.apply(mpijob("waiter"))
        assert all(gated(admit_and_create(admitter, kube, worker_pod(job, i))[0])
                   for i in range(3))
        kube.remove(holder)
        assert wait_for(lambda: used(view) == 8)
        last, _ = admit_and_create(admitter, kube, worker_pod(job, 3))
        assert not gated(last) and pinned_node(last) == NODE_A
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        (row,) = rows(queue.waiting(), view, queue.reserver)
        result = queue.run_once()
    assert row.why == "fits now: its GPUs are reserved (placed at the next pass)"
    assert len(result.placed) == 1
    assert {pinned_node(p) for p in pods_of(kube, "waiter")} == {NODE_A}


def test_a_gang_whose_job_is_gone_is_not_said_to_fit(kube):
    """The job of a waiting gang is deleted while its pods live on, and room frees up: the
    next pass places nothing (its job is gone), and WHY NOT NOW says so."""
    holder = busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: used(view) == 12)
        job, _ = waiting_gang(kube, admitter)
        kube.remove(job)
        kube.remove(holder)
        assert wait_for(lambda: used(view) == 8)
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        (row,) = rows(queue.waiting(), view, queue.reserver)
        result = queue.run_once()
    assert row.why == "its job MPIJob default/waiter is gone"
    assert result.placed == [] and list(result.waiting.values()) == [row.why]
