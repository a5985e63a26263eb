"""A reserved slot whose pod does not exist yet holds its CPU and memory on its node.

Why: a gang is reserved at its first pod's admission; its other pods come later. Until they
exist, the node's requested sums (from the pods there) do not hold them, so another gang
admitted meanwhile could be pinned onto a node that cannot run both, and the scheduler
keeps one Pending for ever ("Insufficient cpu"). The reservation keeps one replica's
requests; its unassigned slots count them (gputopo/cluster/reserved_requests.py).

Gang A (PyTorchJob, master + worker, 60 CPUs each) fits only one pod per DGX-1 node (94
CPUs). Its master is admitted; then gang B (one pod, 60 CPUs) before A's worker: B fits on
neither node (A's master on one, A's worker's slot on the other), so it is unplaced; A's
worker then gets its slot. In memory (``gputopo mutate``) and against the Kubernetes API
test double (the live view and the ConfigMap store).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from apiserver_rules import assert_resources_fit
from placement_checks import admit, pinned_node, record
from placement_jobs import pytorch_pods, pytorchjob

from gputopo import names
from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import load_documents

FIRST, SECOND = "cn-shanghai.192.168.16.172", "cn-shanghai.192.168.16.173"


def with_cpu(job: dict[str, Any], cpu: str) -> dict[str, Any]:
    job = copy.deepcopy(job)
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return job


def jobs(b_cpu: str = "60") -> tuple[dict[str, Any], dict[str, Any]]:
    a = with_cpu(pytorchjob("gang-a", workers=1), "60")
    b = with_cpu(pytorchjob("gang-b", workers=0), b_cpu)
    return a, b


def assert_pinned_pods_fit(pods: dict[str, dict[str, Any]]) -> None:
    """The pods gputopo pinned, as the API server stores them, pass NodeResourcesFit's
    CPU and memory check on the demo nodes (fit.go; apiserver_rules)."""
    allocatable = {d["metadata"]["name"]: d["status"]["allocatable"]
                   for d in load_documents(demo_cluster_path()) if d.get("kind") == "Node"}
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in pods.values():
        if record(pod)["placed"]:
            by_node.setdefault(pinned_node(pod), []).append(pod)
    assert by_node
    assert_resources_fit(by_node, allocatable, ("cpu", "memory"))


def test_a_slot_whose_pod_is_not_created_yet_holds_its_cpus(mutate):
    a, b = jobs()
    a_master, a_worker = pytorch_pods(a)
    [b_master] = pytorch_pods(b)
    result = mutate([a, b, a_master, b_master, a_worker])
    assert result.rc == 0, result.stderr
    pods = result.pods
    first = record(pods["gang-a-master-0"])
    assert first["placed"] is True
    b_rec = record(pods["gang-b-master-0"])
    assert b_rec["placed"] is False, b_rec
    assert "cpu 120 of 94" in b_rec["reason"]
    worker = record(pods["gang-a-worker-0"])
    assert worker["placed"] is True
    assert {pinned_node(pods["gang-a-master-0"]), pinned_node(pods["gang-a-worker-0"])} \
        == {FIRST, SECOND}
    assert_pinned_pods_fit(pods)


def test_a_gang_that_fits_beside_the_slots_still_goes_there(mutate):
    """30 CPUs fit beside A's 60 on either node: the slot's requests limit, not forbid."""
    a, b = jobs("30")
    a_master, a_worker = pytorch_pods(a)
    [b_master] = pytorch_pods(b)
    result = mutate([a, b, a_master, b_master, a_worker])
    assert record(result.pods["gang-b-master-0"])["placed"] is True
    assert record(result.pods["gang-a-worker-0"])["placed"] is True
    assert_pinned_pods_fit(result.pods)


def test_live_view_and_configmap_store_hold_the_slots_cpus(kube):
    """The admitted pods are created in the API (as the API server does after admission),
    so the view counts A's master by its own requests and A's worker's slot by the
    reservation's: never both (B's reason says 120, not 180)."""
    from test_placement_live import _wait, demo_docs, live_admitter

    demo_docs(kube)
    a, b = (kube.apply(j) for j in jobs())
    a_master, a_worker = pytorch_pods(a)
    [b_master] = pytorch_pods(b)
    with live_admitter(kube) as (admitter, view):
        master = admit(admitter, a_master, dry_run=False)
        assert record(master)["placed"] is True
        kube.apply(master)
        home = pinned_node(master)
        assert _wait(lambda: view.node_state(home).resources.requested.get("cpu") == 60000)
        b_rec = record(admit(admitter, b_master, dry_run=False))
        assert b_rec["placed"] is False, b_rec
        assert "cpu 120 of 94" in b_rec["reason"] and "180" not in b_rec["reason"]
        # the record in the API holds the replica's requests (CPU in millicores)
        [cm] = [c for c in kube.objects("v1", "ConfigMap")
                if c["metadata"].get("labels", {}).get(names.RESERVATION_LABEL) == "gang"
                and "gang-a" in c["data"]["reservation"]]
        assert json.loads(cm["data"]["reservation"])["requests"] == {"cpu": 60000, "pods": 1}
        worker = admit(admitter, a_worker, dry_run=False)
        assert record(worker)["placed"] is True and pinned_node(worker) != home
