"""DRA gangs through the server's wiring on the API TEST DOUBLE (resource.k8s.io/v1 served
as the API server serves it): the view reads ResourceSlices and ResourceClaims from its
watches, admission creates the pinned claims through the official client, and a waiting
gang gets its claims from the placement queue before its gates come off.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS, TESTS / "placement_step", TESTS / "queue"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import dra_cluster as dc  # noqa: E402
from k8s_double import KubeApiDouble  # noqa: E402
from queue_kit import admit_and_create, gated, wait_for  # noqa: E402
from test_placement_live import live_admitter  # noqa: E402

from gputopo.operators import expand  # noqa: E402
from webhook.queue.placer import PlacementQueue  # noqa: E402


def _cluster(kube: KubeApiDouble) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "default", "labels": {"gputopo.io/inject": "enabled"}}})
    for obj in [*dc.nodes(), dc.device_class(), dc.resource_slice("dgx-a"),
                dc.resource_slice("dgx-b"), dc.template()]:
        kube.apply(obj)


def _holder(node: str, minors: range) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"holder-{node}", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": len(minors)}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node,
                 "device": f"gpu-{m}"} for m in minors]}}}}


def _pods(kube: KubeApiDouble, name: str, replicas: int) -> list[dict[str, Any]]:
    job = kube.apply(dc.pytorchjob(name, replicas, "four-gpus"))
    return [o for o in expand(job) if o["kind"] == "Pod"]


def _claims(kube: KubeApiDouble) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in kube.objects("resource.k8s.io/v1",
                                                           "ResourceClaim")}


def test_admission_creates_the_pinned_claims_in_the_api(kube: KubeApiDouble) -> None:
    _cluster(kube)
    with live_admitter(kube) as (admitter, view):
        assert wait_for(lambda: all(n.gpu_handout == "dra" for n in view.node_states()))
        pods = _pods(kube, "train", 2)
        uid = pods[0]["metadata"]["ownerReferences"][0]["uid"]
        for pod in pods:
            admitted, _ = admit_and_create(admitter, kube, pod)
            [entry] = admitted["spec"]["resourceClaims"]
            assert entry["resourceClaimName"] == f"{pod['metadata']['name']}-gpus"
    claims = _claims(kube)
    assert sorted(claims) == ["train-master-0-gpus", "train-worker-0-gpus"]
    for claim in claims.values():
        ref = claim["metadata"]["ownerReferences"][0]
        # the job's uid: the garbage collector deletes the claim with the job
        assert (ref["kind"], ref["name"], ref["uid"]) == ("PyTorchJob", "train", uid)
        expr = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
        assert expr["expression"].count("'GPU-") == 4


def test_a_waiting_dra_gang_gets_its_claims_when_the_queue_places_it(
        kube: KubeApiDouble) -> None:
    _cluster(kube)
    holders = [kube.apply(_holder("dgx-a", range(0, 6))), kube.apply(_holder("dgx-b",
                                                                              range(0, 6)))]
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        pods = []
        for pod in _pods(kube, "waiter", 2):
            admitted, warnings = admit_and_create(admitter, kube, pod)
            assert gated(admitted), warnings
            # named at CREATE (immutable after), made only when the gang is placed
            assert admitted["spec"]["resourceClaims"][0]["resourceClaimName"]
            pods.append(admitted)
        assert not [c for c in _claims(kube) if c.startswith("waiter-")]
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        assert queue.run_once().placed == []
        for h in holders:
            kube.remove(h)
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 0)
        assert len(queue.run_once().placed) == 1
    claims = _claims(kube)
    for pod in kube.objects("v1", "Pod"):
        name = pod["spec"]["resourceClaims"][0]["resourceClaimName"]
        assert not gated(pod) and name in claims


def test_claims_the_api_refused_at_admission_are_made_by_the_queue(
        kube: KubeApiDouble) -> None:
    """The API refuses the claims at admission (403 here): the gang is gated, not pinned to
    claims that do not exist, and the queue makes them when it releases the gang."""
    _cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: len(view.node_states()) == 2)
        kube.forbidden = {"resourceclaims"}
        for pod in _pods(kube, "later", 2):
            admitted, warnings = admit_and_create(admitter, kube, pod)
            assert gated(admitted), warnings
            rec = json.loads(admitted["metadata"]["annotations"]["gputopo.io/placement"])
            assert "were not made" in rec["reason"] and "403" in rec["reason"]
        assert _claims(kube) == {}
        kube.forbidden = set()
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        assert len(queue.run_once().placed) == 1
    claims = _claims(kube)
    assert sorted(claims) == ["later-master-0-gpus", "later-worker-0-gpus"]
    for pod in kube.objects("v1", "Pod"):
        assert not gated(pod)
        assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] in claims


def test_a_claim_of_that_name_owned_by_another_job_is_never_taken_over(
        kube: KubeApiDouble) -> None:
    from k8s_double import api_client

    from gputopo.cluster.dra_claims import KubernetesClaims

    def claim(uid: str, uuid: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "j-worker-0-gpus", "namespace": "default",
                             "ownerReferences": [{"apiVersion": "kubeflow.org/v1",
                                                  "kind": "PyTorchJob", "name": "j",
                                                  "uid": uid}]},
                "spec": {"devices": {"requests": [{"name": "g", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "count": 1, "selectors": [
                        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].uuid "
                                               f"in ['{uuid}']"}}]}}]}}}

    api = api_client(kube.url)
    try:
        writer = KubernetesClaims(api)
        assert writer.ensure([claim("u-1", "GPU-a")]) == []
        assert writer.ensure([claim("u-1", "GPU-a")]) == []  # the same slot again
        [other] = writer.ensure([claim("u-2", "GPU-a")])  # a namesake job's
        assert "another owner" in other
        [moved] = writer.ensure([claim("u-1", "GPU-b")])  # the slot moved
        assert "other devices" in moved
    finally:
        api.close()


def test_the_live_view_knows_the_gpu_model_from_the_resourceslice(kube: KubeApiDouble
                                                                    ) -> None:
    """Nodes with no GFD labels and no GPU name in their topology annotation: the model and
    memory come from the slice's ``productName`` and capacity ``memory``; the driver's
    next generation of the slice saying another product changes it."""
    _cluster(kube)
    with live_admitter(kube) as (_admitter, view):
        assert wait_for(lambda: all(n.gpu_handout == "dra" for n in view.node_states()))
        models = {n.name: n.gpu_model for n in view.node_states()}
        assert {m.name if m else None for m in models.values()} == {"V100-SXM2-16GB"}
        assert {m.memory_mib for m in models.values() if m} == {16384}
        newer = dc.resource_slice("dgx-b")
        newer["spec"]["pool"]["generation"] = newer["spec"]["pool"].get("generation", 1) + 1
        for d in newer["spec"]["devices"]:
            d["attributes"]["productName"] = {"string": "Tesla V100-SXM2-32GB"}
            d["capacity"]["memory"] = {"value": "32Gi"}
        kube.apply(newer)

        def relabelled() -> bool:
            # one node by name, as the placement step reads a slot's node: the slice's
            # change is applied there too, not only in the whole list
            state = view.node_state("dgx-b")
            return (state is not None and state.gpu_model is not None
                    and state.gpu_model.name == "V100-SXM2-32GB")
        assert wait_for(relabelled)
        assert [n.gpu_model.name for n in view.node_states() if n.gpu_model] == [
            "V100-SXM2-16GB", "V100-SXM2-32GB"]
