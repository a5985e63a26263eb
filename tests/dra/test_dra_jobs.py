"""DRA GPU jobs through ``gputopo mutate`` and the real kube-scheduler 1.36 (schedsim136).

The done-when of issue 33: a 2 x 4 PyTorchJob whose pods take GPUs from a
ResourceClaimTemplate, on two DGX-1 nodes served by NVIDIA's DRA driver (slices as the
driver publishes them, device names not in NVLink order): both pods on one node, each on an
NVLink quad, each pod's claim allocated exactly its four devices; a 1 x 2 job never takes a
device another claim holds; a user's own claim is respected; on a mixed cluster each pod
goes where its request can be served.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import dra_cluster as dc
import yaml

SCHED_NAME = "gpu-topology-scheduler"


def _run(tmp: Path, cluster: list[dict[str, Any]], job: list[dict[str, Any]],
         *extra: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    c = dc.write(tmp / "cluster.yaml", cluster)
    j = dc.write(tmp / "job.yaml", job)
    r = dc.mutate("--cluster", str(c), *extra, str(j))
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    pods = [d for d in docs if d["kind"] == "Pod"]
    claims = [d for d in docs if d["kind"] == "ResourceClaim"]
    # the claims come after every pod, as the issue asks
    assert [d["kind"] for d in docs] == ["Pod"] * len(pods) + ["ResourceClaim"] * len(claims)
    return pods, claims, r.stderr


def _record(pod: dict[str, Any]) -> dict[str, Any]:
    return json.loads(pod["metadata"]["annotations"]["gputopo.io/placement"])


def _uuids_of(claim: dict[str, Any]) -> list[str]:
    [req] = claim["spec"]["devices"]["requests"]
    [sel] = req["exactly"]["selectors"]
    expr = sel["cel"]["expression"]
    return [part.strip(" '") for part in expr.split(" in [", 1)[1].rstrip("]").split(",")]


def _schedule(tmp: Path, nodes: list[dict[str, Any]], objects: list[dict[str, Any]],
              pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods through the real 1.36 scheduler, with a profile of our scheduler's name
    (in-tree plugins: DynamicResources on)."""
    config = {"apiVersion": "kubescheduler.config.k8s.io/v1",
              "kind": "KubeSchedulerConfiguration", "leaderElection": {"leaderElect": False},
              "profiles": [{"schedulerName": SCHED_NAME}, {"schedulerName": "default-scheduler"}]}
    args = []
    for name, docs in (("nodes", nodes), ("objects", objects), ("pods", pods),
                       ("config", [config])):
        args += [f"--{name}", str(dc.write(tmp / f"sim-{name}.yaml", docs))]
    p = subprocess.run([str(dc.k8s_bin() / "schedsim136"), *args, "--timeout", "20s",
                        "--settle", "2s"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _devices(result: dict[str, Any]) -> set[str]:
    return {d["device"] for c in result["claims"] for d in c["devices"]}


def _minors(indices: list[int]) -> set[str]:
    back = {i: m for m, i in dc.MINOR_TO_INDEX.items()}
    return {f"gpu-{back[i]}" for i in indices}


def test_2x4_dra_job_on_one_node_each_pod_on_a_quad_and_scheduled_so(tmp_path: Path) -> None:
    nodes = dc.nodes()
    slices = [dc.resource_slice(n["metadata"]["name"]) for n in nodes]
    pods, claims, _ = _run(tmp_path, [*nodes, dc.device_class(), *slices],
                           [dc.pytorchjob("train", 2, "four-gpus"), dc.template()])
    records = [_record(p) for p in pods]
    assert all(r["placed"] for r in records)
    assert len({r["node"] for r in records}) == 1
    assert sorted(set(r["gpus"]) in dc.QUADS for r in records) == [True, True]
    assert {frozenset(r["gpus"]) for r in records} == {frozenset(q) for q in dc.QUADS}
    node = records[0]["node"]
    by_name = {c["metadata"]["name"]: c for c in claims}
    for pod, rec in zip(pods, records, strict=True):
        [entry] = pod["spec"]["resourceClaims"]
        assert "resourceClaimTemplateName" not in entry
        claim = by_name[entry["resourceClaimName"]]
        assert _uuids_of(claim) == [dc.uuid(node, i) for i in rec["gpus"]]
        assert claim["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
        # the DRA driver hands out devices through CDI: no visible-devices env of ours
        env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        assert "NVIDIA_VISIBLE_DEVICES" not in env
    results = _schedule(tmp_path, nodes, [dc.device_class(), *slices, *claims], pods)
    for result, rec in zip(results, records, strict=True):
        assert result["status"] == "Bound", result
        assert result["node"] == node
        assert _devices(result) == _minors(rec["gpus"])


def test_unpinned_the_scheduler_takes_devices_in_slice_order_across_quads(
        tmp_path: Path) -> None:
    """Why pinning matters: the same pod left to the allocator gets gpu-0..gpu-3, which
    are indices 4,1,5,0 here: two quads."""
    nodes = dc.nodes(("dgx-a",))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "plain", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "x",
                                    "resources": {"claims": [{"name": "gpus"}]}}],
                    "resourceClaims": [{"name": "gpus",
                                        "resourceClaimTemplateName": "four-gpus"}]}}
    [result] = _schedule(tmp_path, nodes, [dc.device_class(), dc.resource_slice("dgx-a"),
                                           dc.template()], [pod])
    got = {dc.MINOR_TO_INDEX[int(d.split("-")[1])] for d in _devices(result)}
    assert not any(got <= q for q in dc.QUADS)


def test_a_1x2_job_never_takes_a_device_another_claim_holds(tmp_path: Path) -> None:
    nodes = dc.nodes(("dgx-a",))
    held = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "someone-else", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 2}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "dgx-a",
                 "device": f"gpu-{m}"} for m in (3, 1)]}}}}  # indices 0 and 1
    user_pin = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "users-own", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "count": 2, "selectors": [
                        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].uuid in "
                                 f"['{dc.uuid('dgx-a', 2)}', '{dc.uuid('dgx-a', 3)}']"}}]}}]}}}
    cluster = [*nodes, dc.device_class(), dc.resource_slice("dgx-a"), held, user_pin]
    pods, claims, _ = _run(tmp_path, cluster, [dc.pytorchjob("small", 1, "two-gpus"),
                                               dc.template("two-gpus", 2)])
    [rec] = [_record(p) for p in pods]
    assert rec["placed"]
    assert not set(rec["gpus"]) & {0, 1, 2, 3}
    assert set(rec["gpus"]) in ({4, 5}, {4, 6}, {4, 7}, {5, 6}, {5, 7}, {6, 7})
    results = _schedule(tmp_path, nodes, [dc.device_class(), dc.resource_slice("dgx-a"),
                                          held, *claims], pods)
    assert results[0]["status"] == "Bound"
    assert _devices(results[0]) == _minors(rec["gpus"])


def test_a_pod_naming_its_own_claim_is_left_to_the_scheduler_with_the_reason(
        tmp_path: Path) -> None:
    own = dc.template("mine", 4)
    own["kind"] = "ResourceClaim"
    own["spec"] = own["spec"]["spec"]
    job = dc.pytorchjob("byo", 1, "x")
    tspec = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    tspec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "mine"}]
    nodes = dc.nodes(("dgx-a",))
    pods, claims, _ = _run(tmp_path, [*nodes, dc.device_class(), dc.resource_slice("dgx-a")],
                           [job, own])
    [rec] = [_record(p) for p in pods]
    assert not rec["placed"] and "ResourceClaim mine" in rec["reason"]
    assert pods[0]["spec"]["resourceClaims"] == tspec["resourceClaims"]
    assert claims == []


def test_all_and_selectors_are_left_to_the_scheduler_never_pinned(tmp_path: Path) -> None:
    nodes = dc.nodes(("dgx-a",))
    cluster = [*nodes, dc.device_class(), dc.resource_slice("dgx-a")]
    for tpl, words in ((dc.template(allocationMode="All"), "All devices"),
                       (dc.template(selectors=[{"cel": {"expression": "true"}}]),
                        "selectors")):
        pods, claims, _ = _run(tmp_path, cluster, [dc.pytorchjob("t", 1, "four-gpus"), tpl])
        [rec] = [_record(p) for p in pods]
        assert not rec["placed"] and words in rec["reason"], rec
        assert pods[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "four-gpus"
        assert claims == []


def test_mixed_cluster_each_pod_where_its_request_is_served(tmp_path: Path) -> None:
    nodes = dc.nodes(("plugin-node", "dra-node"), dra=(False, True))
    cluster = [*nodes, dc.device_class(), dc.resource_slice("dra-node")]
    plugin_job = dc.pytorchjob("dp", 1, "x")
    c = plugin_job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    del c["resourceClaims"]
    c["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}
    pods, claims, _ = _run(tmp_path, cluster, [dc.pytorchjob("d", 1, "four-gpus"),
                                               dc.template(), plugin_job],
                           "--platform", "generic")
    recs = {p["metadata"]["name"]: _record(p) for p in pods}
    assert recs["d-master-0"]["node"] == "dra-node"
    assert recs["dp-master-0"]["node"] == "plugin-node"
    assert len(claims) == 1
    results = {r["pod"]: r for r in _schedule(
        tmp_path, nodes, [dc.device_class(), dc.resource_slice("dra-node"), *claims], pods)}
    assert results["default/d-master-0"]["node"] == "dra-node"
    assert _devices(results["default/d-master-0"]) == _minors(recs["d-master-0"]["gpus"])
    # the device plugin's pod: nvidia.com/gpu from the node's allocatable, no claim
    assert results["default/dp-master-0"]["status"] == "Bound"
    assert results["default/dp-master-0"]["node"] == "plugin-node"
    assert results["default/dp-master-0"]["claims"] in ([], None)


def test_an_extended_resource_pod_on_dra_only_nodes_says_why_it_is_not_pinned(
        tmp_path: Path) -> None:
    """KEP-5004: on DRA nodes the scheduler meets ``nvidia.com/gpu`` from DRA devices
    through its own claim; gputopo cannot pin that, and the record says so (the pod is
    admitted unpinned, not gated for ever); the real scheduler then binds it that way."""
    nodes = dc.nodes(("dgx-a",))
    job = dc.pytorchjob("ext", 1, "x")
    spec = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    del spec["resourceClaims"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 2}}
    pods, claims, _ = _run(tmp_path, [*nodes, dc.device_class(), dc.resource_slice("dgx-a")],
                           [job], "--platform", "dra")
    [rec] = [_record(p) for p in pods]
    assert not rec["placed"] and "KEP-5004" in rec["reason"], rec
    assert "schedulingGates" not in pods[0]["spec"] and claims == []
    [result] = _schedule(tmp_path, nodes, [dc.device_class(), dc.resource_slice("dgx-a")],
                         pods)
    assert result["status"] == "Bound"
    assert [c.get("extendedResource") for c in result["claims"]] == [True]


def test_a_missing_claim_template_is_said_never_guessed(tmp_path: Path) -> None:
    nodes = dc.nodes(("dgx-a",))
    pods, claims, err = _run(tmp_path, [*nodes, dc.device_class(), dc.resource_slice("dgx-a")],
                             [dc.pytorchjob("lost", 1, "no-such-template")])
    assert "ResourceClaimTemplate default/no-such-template (claim 'gpus') not found" in err
    assert pods[0]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == \
        "no-such-template"
    assert "gputopo.io/placement" not in (pods[0]["metadata"].get("annotations") or {})
    assert claims == []


def test_a_placed_dra_pod_readmitted_with_its_claim_there_changes_nothing(
        tmp_path: Path) -> None:
    """Its claim names gputopo's pinned claim now; it is judged by the template it asked
    first (annotation gputopo.io/claim-templates), not as a pod naming its own claim."""
    nodes = dc.nodes(("dgx-a",))
    cluster = [*nodes, dc.device_class(), dc.resource_slice("dgx-a")]
    job = dc.pytorchjob("again", 2, "four-gpus")
    pods, claims, _ = _run(tmp_path, cluster, [job, dc.template()])
    owner = pods[0]["metadata"]["ownerReferences"][0]
    job["metadata"]["uid"] = owner["uid"]
    c = dc.write(tmp_path / "c2.yaml", [*cluster, *claims])
    j = dc.write(tmp_path / "j2.yaml", [job, dc.template(), *pods])
    r = dc.mutate("--cluster", str(c), "-o", "patch", str(j))
    assert r.returncode == 0, r.stderr
    patches = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert [p["patch"] for p in patches] == [[], []], patches


def test_place_on_a_mixed_cluster_uses_the_nodes_of_the_jobs_kind(tmp_path: Path) -> None:
    cluster = dc.write(tmp_path / "c.yaml", [
        *dc.nodes(("plugin-node", "dra-node"), dra=(False, True)), dc.device_class(),
        dc.resource_slice("dra-node")])
    for job, node in (("dra-pytorchjob.yaml", "dra-node"),
                      ("trainjob-torch-distributed.yaml", "plugin-node")):
        p = subprocess.run(["python", "-m", "gputopo", "place", "--cluster", str(cluster),
                            "-o", "json", str(dc.REPO / "examples" / job)],
                           capture_output=True, text=True, cwd=dc.REPO, timeout=60,
                           env={**dc.os.environ, "PYTHONPATH": str(dc.REPO)})
        assert p.returncode == 0, p.stderr
        assert {r["node"] for r in json.loads(p.stdout)["placements"]} == {node}, job
