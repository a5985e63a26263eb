"""The API test double refuses the Pod updates the real API server refuses, and serves
PodGroups and Leases like the CRD / built-in resources they are (through the official client).

Rules from ``ValidatePodUpdate`` (kubernetes pkg/apis/core/validation/validation.go); see
``tests/k8s_double/server.py``, ``pod_update_errors``.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

GATE = "gputopo.io/placement"


def _pod(name: str = "p", *, gated: bool = True, affinity: dict[str, Any] | None = None,
         node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox:1"}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if affinity is not None:
        spec["affinity"] = affinity
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


def _pin(node: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def _put(core: client.CoreV1Api, body: dict[str, Any]) -> dict[str, Any]:
    out = core.api_client.sanitize_for_serialization(
        core.replace_namespaced_pod(body["metadata"]["name"], "default", body))
    return out


def _created(core: client.CoreV1Api, pod: dict[str, Any]) -> dict[str, Any]:
    core.create_namespaced_pod("default", pod)
    return core.api_client.sanitize_for_serialization(
        core.read_namespaced_pod(pod["metadata"]["name"], "default"))


def test_a_gate_may_be_removed_but_never_added(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    cur = _created(core, _pod("ungated", gated=False))
    cur["spec"]["schedulingGates"] = [{"name": GATE}]
    with pytest.raises(ApiException) as err:
        _put(core, cur)
    assert err.value.status == 422 and "only deletion is allowed" in err.value.body

    gated = _created(core, _pod("gated"))
    gated["spec"]["schedulingGates"] = []
    assert not _put(core, gated)["spec"].get("schedulingGates")


def test_a_gated_pod_may_gain_node_affinity_and_selectors(kube_client: client.ApiClient
                                                          ) -> None:
    core = client.CoreV1Api(kube_client)
    # no affinity before: anything may be set
    cur = _created(core, _pod("a"))
    cur["spec"]["affinity"] = _required({"matchFields": [_pin("n1")]})
    cur["spec"]["nodeSelector"] = {"zone": "z1"}
    _put(core, cur)
    # existing terms: each term may gain requirements (narrowed), not be changed or grow
    user = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    cur = _created(core, _pod("b", affinity=_required(user, dict(user)),
                              node_selector={"zone": "z1"}))
    narrowed = [{**user, "matchFields": [_pin("n1")]}, {**user, "matchFields": [_pin("n1")]}]
    cur["spec"]["affinity"] = _required(*narrowed)
    cur["spec"]["nodeSelector"] = {"zone": "z1", "rack": "r1"}
    cur = _put(core, cur)
    for bad, why in (
        (_required(*narrowed, dict(user)), "no additions/deletions"),
        (_required({"matchFields": [_pin("n1")]}, narrowed[1]), "only additions are allowed"),
    ):
        attempt = {**cur, "spec": {**cur["spec"], "affinity": bad}}
        with pytest.raises(ApiException) as err:
            _put(core, attempt)
        assert err.value.status == 422 and why in err.value.body
    attempt = {**cur, "spec": {**cur["spec"], "nodeSelector": {"zone": "z2"}}}
    with pytest.raises(ApiException) as err:
        _put(core, attempt)
    assert "only additions to spec.nodeSelector" in err.value.body


def test_an_ungated_pod_keeps_its_scheduling_directives(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    cur = _created(core, _pod("free", gated=False))
    cur["spec"]["affinity"] = _required({"matchFields": [_pin("n1")]})
    with pytest.raises(ApiException) as err:
        _put(core, cur)
    assert err.value.status == 422 and "may not change fields" in err.value.body


def test_the_rest_of_the_spec_is_immutable_but_images_labels_annotations_are_not(
        kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    cur = _created(core, _pod("env"))
    changed = {**cur, "spec": {**cur["spec"], "containers": [
        {**cur["spec"]["containers"][0], "env": [{"name": "X", "value": "1"}]}]}}
    with pytest.raises(ApiException) as err:
        _put(core, changed)
    assert "containers" in err.value.body
    # a JSON patch goes through the same rules
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("env", "default", [
            {"op": "add", "path": "/spec/hostNetwork", "value": True}])
    assert err.value.status == 422
    cur["spec"]["containers"][0]["image"] = "busybox:2"
    cur["metadata"]["annotations"] = {"a": "b"}
    cur["metadata"]["labels"] = {"l": "v"}
    out = _put(core, cur)
    assert out["spec"]["containers"][0]["image"] == "busybox:2"


def test_podgroups_are_served_crd_style(kube_client: client.ApiClient) -> None:
    api = client.CustomObjectsApi(kube_client)
    args = ("scheduling.x-k8s.io", "v1alpha1", "default", "podgroups")
    body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "job-1"}, "spec": {"minMember": 4}}
    made = api.create_namespaced_custom_object(*args, body)
    assert made["spec"]["minMember"] == 4
    with pytest.raises(ApiException) as err:
        api.create_namespaced_custom_object(*args, body)
    assert err.value.status == 409
    listed = api.list_namespaced_custom_object(*args)
    assert [i["kind"] for i in listed["items"]] == ["PodGroup"]
    stale = dict(made, spec={"minMember": 2})
    api.replace_namespaced_custom_object(*args, "job-1", dict(made, spec={"minMember": 3}))
    with pytest.raises(ApiException) as err:
        api.replace_namespaced_custom_object(*args, "job-1", stale)
    assert err.value.status == 409
    api.delete_namespaced_custom_object(*args, "job-1")
    with pytest.raises(ApiException) as err:
        api.get_namespaced_custom_object(*args, "job-1")
    assert err.value.status == 404


def test_leases_compare_and_swap(kube_client: client.ApiClient) -> None:
    coord = client.CoordinationV1Api(kube_client)
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="l", namespace="default"),
                           spec=client.V1LeaseSpec(holder_identity="a",
                                                   lease_duration_seconds=10))
    made = coord.create_namespaced_lease("default", lease)
    made.spec.holder_identity = "b"
    coord.replace_namespaced_lease("l", "default", made)
    made.spec.holder_identity = "c"  # same, now stale, resourceVersion
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("l", "default", made)
    assert err.value.status == 409
    assert coord.read_namespaced_lease("l", "default").spec.holder_identity == "b"
