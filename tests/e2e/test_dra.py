"""DRA GPU jobs through the LIVE path: the API server's 1.36 admission (``admitcheck136``)
calling ``gputopo serve`` (``--platform dra`` policies) over TLS, the server's view watching
the ResourceSlices, ResourceClaims and templates in the API double and creating each
replica's pinned ResourceClaim there, then the real 1.36 kube-scheduler with DRA
(``schedsim136``) allocating the claims the server created, read back from the double.

The cluster is tests/dra's (``dra_cluster``): two DGX-1 nodes served by NVIDIA's DRA
driver, ResourceSlices shaped as the driver publishes them, device names ``gpu-<minor>``
not in NVLink order (the slice's first four devices cross both quads), the DeviceClass as
its chart installs it. What can fail here and nowhere else: that the server's live view
reads the slices and claims from its watches, that the claims it creates through the
official client are what the scheduler's allocator can satisfy with exactly the chosen
devices, that the API server accepts the patched pod and, on the queue path, the update
that lifts its gate, and that a pod re-created for its slot finds its claim (made, allocated
and reserved for the pod it replaces) and gets the same devices.

The scheduler runs the generated profile's in-tree part (:func:`harness.in_tree_profile`):
``schedsim136`` has no scheduler-plugins, so the gang's Permit (Coscheduling) is not in
these runs; the PodGroup the server made is checked in the double.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import (
    REPO,
    Deployment,
    Programs,
    Served,
    admit_and_store,
    check_update,
    expand_job_files,
    in_tree_profile,
    key,
    namespace,
    placement,
    pod_groups,
    schedule,
    serve,
    store_owners,
)

from gputopo import names

if str(REPO / "tests" / "dra") not in sys.path:
    sys.path.insert(0, str(REPO / "tests" / "dra"))
import dra_cluster as dc

EXAMPLES = REPO / "examples"
RESOURCE_API = "resource.k8s.io/v1"
NODES = dc.nodes()
NODE_A, NODE_B = (n["metadata"]["name"] for n in NODES)
#: NVML index -> the device NVIDIA's driver names for it (``gpu-<minor>``)
DEVICE = {index: f"gpu-{minor}" for minor, index in dc.MINOR_TO_INDEX.items()}
#: Kinds of a job file the API double does not serve and gputopo's server never reads
#: (a TrainJob's pods already carry what its runtime gave them).
NOT_SERVED = {"ClusterTrainingRuntime", "TrainingRuntime"}


def _cluster(kube: Any) -> list[dict[str, Any]]:
    """The opted-in Namespace, the Nodes, the DeviceClass and one ResourceSlice per node in
    the double; the DRA objects (what the scheduler gets besides claims and templates)."""
    dra = [dc.device_class(), *(dc.resource_slice(n) for n in (NODE_A, NODE_B))]
    for obj in [namespace(), *NODES, *dra]:
        kube.apply(obj)
    return dra


def _store_job(kube: Any, job_file: Path) -> list[dict[str, Any]]:
    """The job file expanded as its operators create the pods; the job, its controllers'
    objects and its ResourceClaimTemplates stored in the double; the pods to admit."""
    made, owners = expand_job_files([job_file])
    return store_owners(kube, [o for o in owners if o["kind"] not in NOT_SERVED], made)


def _admit(programs: Programs, deployment: Deployment, served: Served, kube: Any,
           pods: Sequence[Mapping[str, Any]], work: Path) -> list[dict[str, Any]]:
    return admit_and_store(programs, deployment, served, kube, namespace(), pods, work,
                           program="admitcheck136")


def _claims(kube: Any) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in kube.objects(RESOURCE_API, "ResourceClaim")}


def _schedule(programs: Programs, deployment: Deployment, kube: Any, dra: list[dict],
              pods: Sequence[Mapping[str, Any]], work: Path, *, settle: str | None = None,
              nodes: Sequence[Mapping[str, Any]] = NODES) -> dict[str, dict[str, Any]]:
    """The pods through ``schedsim136`` with the generated profile (in-tree part), beside
    every ResourceClaim and template in the double, read back as the scheduler would."""
    objects = [*dra, *kube.objects(RESOURCE_API, "ResourceClaimTemplate"),
               *kube.objects(RESOURCE_API, "ResourceClaim")]
    work.mkdir(parents=True, exist_ok=True)
    return schedule(programs, nodes=nodes, objects=objects, pods=pods,
                    config=in_tree_profile(deployment, work), work=work,
                    program="schedsim136", settle=settle)


def _pinned_uuids(claim: Mapping[str, Any]) -> list[str]:
    """The uuids of the claim's CEL pin (``device.attributes['gpu.nvidia.com'].uuid in
    [...]``), in the order written."""
    [request] = claim["spec"]["devices"]["requests"]
    [selector] = request["exactly"]["selectors"]
    expr = selector["cel"]["expression"]
    assert "uuid in [" in expr, expr
    return [u.strip(" '") for u in expr.split(" in [", 1)[1].rstrip("]").split(",")]


def _allocated(result: Mapping[str, Any], claim: str) -> set[str]:
    [entry] = [c for c in result.get("claims") or [] if c["name"] == claim]
    assert not entry.get("error"), entry
    assert {d["driver"] for d in entry["devices"]} == {"gpu.nvidia.com"}
    return {d["device"] for d in entry["devices"]}


def _check_bound_on_pinned_devices(results: Mapping[str, Mapping[str, Any]],
                                   pods: Sequence[Mapping[str, Any]],
                                   claims: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every pod Bound on the node gputopo pinned, its claim (the one the server created
    and the pod names) allocated exactly the devices of the claim's pinned uuids, which
    are the GPUs of the placement record. Returns pod name -> its placement record."""
    records = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        result = results[key(pod)]
        record = placement(pod)
        assert record and record["placed"], f"{name}: {record}"
        assert result["status"] == "Bound", f"{name}: {result}"
        assert result["node"] == record["node"], (
            f"{name} bound on {result['node']}, gputopo pinned {record['node']}")
        [entry] = pod["spec"]["resourceClaims"]
        claim_name = entry["resourceClaimName"]
        assert "resourceClaimTemplateName" not in entry
        claim = claims[claim_name]
        assert _pinned_uuids(claim) == [dc.uuid(record["node"], i) for i in record["gpus"]]
        assert _allocated(result, claim_name) == {DEVICE[i] for i in record["gpus"]}, name
        records[name] = record
    return records


def _as_scheduled(kube: Any, pod: Mapping[str, Any], result: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """What the scheduler and the kubelet write back, stored in the double: the pod bound
    and running on its node, each of its claims allocated the devices the scheduler
    reported and reserved for it (``status.allocation``, ``status.reservedFor``)."""
    stored = copy.deepcopy(dict(pod))
    stored["spec"]["nodeName"] = result["node"]
    stored["status"]["phase"] = "Running"
    stored = kube.apply(stored)
    for entry in result.get("claims") or []:
        claim = _claims(kube)[entry["name"]]
        claim["status"] = {
            "allocation": {
                "devices": {"results": entry["devices"]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [result["node"]]}]}]}},
            "reservedFor": [{"resource": "pods", "name": stored["metadata"]["name"],
                             "uid": stored["metadata"]["uid"]}]}
        kube.apply(claim)
    return stored


def _quad(gpus: Sequence[int]) -> int | None:
    return next((k for k, q in enumerate(dc.QUADS) if set(gpus) == q), None)


def test_a_2x4_dra_pytorchjob_on_one_node_a_quad_each_and_a_recreated_pod_the_same(
        programs, deployments, kube, tmp_path):
    deployment = deployments["dra"]
    dra = _cluster(kube)
    pods = _store_job(kube, EXAMPLES / "dra-pytorchjob.yaml")
    assert [p["spec"]["resourceClaims"] for p in pods] == [
        [{"name": "gpus", "resourceClaimTemplateName": "four-gpus"}]] * 2
    with serve(deployment, kube.url, tmp_path / "serve") as served:
        admitted = _admit(programs, deployment, served, kube, pods, tmp_path / "admit")
        claims = _claims(kube)
        assert sorted(claims) == ["dra-train-master-0-gpus", "dra-train-worker-0-gpus"]
        job_uid = pods[0]["metadata"]["ownerReferences"][0]["uid"]
        for claim in claims.values():  # goes with the job (garbage collector)
            [ref] = claim["metadata"]["ownerReferences"]
            assert (ref["kind"], ref["name"], ref["uid"]) == ("PyTorchJob", "dra-train",
                                                              job_uid)
        assert {g["metadata"]["name"] for g in pod_groups(kube)} == {"dra-train"}

        results = _schedule(programs, deployment, kube, dra, admitted, tmp_path / "sched")
        records = _check_bound_on_pinned_devices(results, admitted, claims)
        assert len({r["node"] for r in records.values()}) == 1, records
        assert sorted(_quad(r["gpus"]) for r in records.values()) == [0, 1], records
        for pod in admitted:
            assert pod["spec"]["schedulerName"] == names.SCHEDULER_NAME
            # the driver exposes the claimed devices through CDI: no GPU env of ours
            env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env") or []}
            assert not env & {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}, env

        # the master fails and training-operator re-creates it (same name, new uid) while
        # its claim is still allocated and reserved for the old pod
        master, worker = (_as_scheduled(kube, p, results[key(p)]) for p in admitted)
        kube.remove(master)
        [again] = _admit(programs, deployment, served, kube, [pods[0]], tmp_path / "again")
    assert again["metadata"]["uid"] != master["metadata"]["uid"]
    assert again["spec"]["resourceClaims"] == master["spec"]["resourceClaims"]
    assert placement(again)["gpus"] == records["dra-train-master-0"]["gpus"]
    assert _claims(kube)["dra-train-master-0-gpus"]["spec"] == \
        claims["dra-train-master-0-gpus"]["spec"]
    # the scheduler (its resourceclaim controller drops the gone pod's reservation) binds
    # the new master on the same devices, beside the running worker
    results = _schedule(programs, deployment, kube, dra, [worker, again],
                        tmp_path / "sched-again")
    _check_bound_on_pinned_devices(results, [again], _claims(kube))


def test_a_dra_trainjob_on_a_torch_runtime_binds_where_pinned(
        programs, deployments, kube, tmp_path):
    """Trainer v2: the runtime's node template asks a ResourceClaimTemplate; the pods come
    from the JobSet's Job (generateName), each gets its own pinned claim."""
    deployment = deployments["dra"]
    dra = _cluster(kube)
    pods = _store_job(kube, EXAMPLES / "dra-trainjob.yaml")
    assert len(pods) == 2 and all(not p["metadata"].get("name") for p in pods)
    with serve(deployment, kube.url, tmp_path / "serve") as served:
        admitted = _admit(programs, deployment, served, kube, pods, tmp_path / "admit")
    claims = _claims(kube)
    assert len(claims) == 2, sorted(claims)
    named = sorted(p["spec"]["resourceClaims"][0]["resourceClaimName"] for p in admitted)
    assert named == sorted(claims)
    results = _schedule(programs, deployment, kube, dra, admitted, tmp_path / "sched")
    records = _check_bound_on_pinned_devices(results, admitted, claims)
    assert len({r["node"] for r in records.values()}) == 1, records
    assert sorted(_quad(r["gpus"]) for r in records.values()) == [0, 1], records


def _users_pod_and_claim(kube: Any, name: str, node: str, indices: Sequence[int]
                         ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A user's own running pod on ``node`` with its own ResourceClaim (not gputopo's),
    allocated ``indices`` and reserved for the pod, as the scheduler leaves them (status
    ``allocation`` with the node selector, ``reservedFor`` the pod)."""
    pod = kube.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{
                     "name": "c", "image": "busybox",
                     "resources": {"claims": [{"name": "gpus"}]}}],
                 "resourceClaims": [{"name": "gpus", "resourceClaimName": name}]},
        "status": {"phase": "Running"}})
    claim = kube.apply({
        "apiVersion": RESOURCE_API, "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
            "count": len(indices)}}]}},
        "status": {
            "allocation": {
                "devices": {"results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node,
                     "device": DEVICE[i]} for i in indices]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
            "reservedFor": [{"resource": "pods", "name": name,
                             "uid": pod["metadata"]["uid"]}]}})
    return pod, claim


def test_a_1x2_dra_job_beside_a_users_claim_never_takes_its_devices(
        programs, deployments, kube, tmp_path):
    """The user's claims hold node B whole and the four devices of node A its slice lists
    first (what the allocator itself would take, indices 4,1,5,0): the job goes to node A
    on two of the four others, and the scheduler allocates exactly those."""
    deployment = deployments["dra"]
    dra = _cluster(kube)
    first_four = [dc.MINOR_TO_INDEX[m] for m in range(4)]
    users = [_users_pod_and_claim(kube, "users-a", NODE_A, first_four),
             _users_pod_and_claim(kube, "users-b", NODE_B, range(8))]
    pods = _store_job(kube, Path(__file__).parent / "jobs" / "dra-pytorch-1x2.yaml")
    with serve(deployment, kube.url, tmp_path / "serve") as served:
        admitted = _admit(programs, deployment, served, kube, pods, tmp_path / "admit")
    claims = _claims(kube)
    assert sorted(claims) == ["small-master-0-gpus", "users-a", "users-b"]
    for _, claim in users:  # the user's claims as they were: not touched
        assert claims[claim["metadata"]["name"]] == claim
    running = [pod for pod, _ in users]
    results = _schedule(programs, deployment, kube, dra, [*running, *admitted],
                        tmp_path / "sched")
    [record] = _check_bound_on_pinned_devices(results, admitted, claims).values()
    assert record["node"] == NODE_A
    assert not set(record["gpus"]) & set(first_four), record
    assert len(record["gpus"]) == 2


def _gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == names.PLACEMENT_GATE
               for g in pod["spec"].get("schedulingGates") or [])


def test_a_waiting_dra_gang_gets_its_claims_from_the_queue_and_binds(
        programs, deployments, kube, tmp_path):
    """Users' claims hold six GPUs of each node: a 2 x 4 DRA gang has no place and waits
    gated, its claims named in the pods (immutable after CREATE) but not made. When node
    A's user finishes (pod and claim gone), the server's queue places the gang, makes its
    claims and lifts the gates; the real API server accepts that update, and the real
    scheduler allocates the claims the queue made."""
    deployment = deployments["dra"]
    dra = _cluster(kube)
    user_a = _users_pod_and_claim(kube, "users-a", NODE_A, range(6))
    user_b = _users_pod_and_claim(kube, "users-b", NODE_B, range(6))
    pods = _store_job(kube, EXAMPLES / "dra-pytorchjob.yaml")
    with serve(deployment, kube.url, tmp_path / "serve") as served:
        admitted = _admit(programs, deployment, served, kube, pods, tmp_path / "admit")
        for pod in admitted:
            assert _gated(pod), pod["metadata"]["name"]
            assert placement(pod)["waiting"] is True
            assert pod["status"]["conditions"][0]["reason"] == "SchedulingGated"
            assert pod["spec"]["resourceClaims"][0]["resourceClaimName"]
        assert sorted(_claims(kube)) == ["users-a", "users-b"]
        gated = _schedule(programs, deployment, kube, dra,
                          [user_a[0], user_b[0], *admitted], tmp_path / "sched-gated",
                          settle="1s")
        assert {gated[key(p)]["status"] for p in admitted} == {"Gated"}

        for obj in user_a:  # node A's user is done
            kube.remove(obj)
        deadline = time.monotonic() + 30
        while True:
            now = {p["metadata"]["name"]: p for p in kube.objects("v1", "Pod")}
            released = [now[p["metadata"]["name"]] for p in admitted]
            if not any(_gated(p) for p in released):
                break
            assert time.monotonic() < deadline, f"the queue released nothing:\n{served.stderr()}"
            time.sleep(0.2)
    claims = _claims(kube)
    assert sorted(claims) == ["dra-train-master-0-gpus", "dra-train-worker-0-gpus", "users-b"]
    for old, new in zip(admitted, released, strict=True):
        check_update(programs, old, new, tmp_path / "update", program="podupdatecheck136")
    results = _schedule(programs, deployment, kube, dra, [user_b[0], *released],
                        tmp_path / "sched")
    records = _check_bound_on_pinned_devices(results, released, claims)
    assert {r["node"] for r in records.values()} == {NODE_A}
    assert sorted(_quad(r["gpus"]) for r in records.values()) == [0, 1], records


def test_a_mixed_cluster_places_each_job_where_its_request_is_served(
        programs, deployments, kube, tmp_path):
    """One device-plugin node (``nvidia.com/gpu`` in allocatable) and one DRA node (a
    ResourceSlice, no extended resource), ``--platform generic``: the DRA job is pinned to
    the DRA node by its claim, the device-plugin job to the plugin node; the scheduler binds
    each there (the DeviceClass maps ``nvidia.com/gpu`` to DRA devices too, KEP-5004, so the
    plugin job's pin is what keeps it off the DRA node's devices)."""
    deployment = deployments["generic"]
    nodes = dc.nodes(("plugin-node", "dra-node"), dra=(False, True))
    dra = [dc.device_class(), dc.resource_slice("dra-node")]
    for obj in [namespace(), *nodes, *dra]:
        kube.apply(obj)
    plugin_job = dc.pytorchjob("dp", 1, "unused")
    spec = plugin_job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    del spec["resourceClaims"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}
    job_file = dc.write(tmp_path / "jobs.yaml", [dc.template(), dc.pytorchjob("d", 1,
                                                                              "four-gpus"),
                                                 plugin_job])
    pods = _store_job(kube, job_file)
    with serve(deployment, kube.url, tmp_path / "serve") as served:
        admitted = _admit(programs, deployment, served, kube, pods, tmp_path / "admit")
    claims = _claims(kube)
    assert sorted(claims) == ["d-master-0-gpus"]
    by_name = {p["metadata"]["name"]: p for p in admitted}
    results = _schedule(programs, deployment, kube, dra, admitted, tmp_path / "sched",
                        nodes=nodes)
    [record] = _check_bound_on_pinned_devices(
        results, [by_name["d-master-0"]], claims).values()
    assert record["node"] == "dra-node"
    plugin_pod = by_name["dp-master-0"]
    assert placement(plugin_pod)["node"] == "plugin-node"
    result = results[key(plugin_pod)]
    assert (result["status"], result["node"]) == ("Bound", "plugin-node"), result
    assert not result.get("claims"), result  # nvidia.com/gpu from the device plugin
