"""The API test double itself, through the official client: the wire behaviour the view,
the reservation store and later failure drills rely on must be the API server's."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from cluster_helpers import bound_pod, node
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines


def events(call: Any, **kw: Any) -> list[dict[str, Any]]:
    resp = call(watch=True, _preload_content=False, **kw)
    return [json.loads(line) for line in iter_resp_lines(resp) if line]


def test_crud_errors_are_status_objects(kube, kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    cm = core.create_namespaced_config_map("gputopo-system", {"metadata": {"name": "a"},
                                                               "data": {"k": "1"}})
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map("gputopo-system", {"metadata": {"name": "a"}})
    assert exists.value.status == 409 and json.loads(exists.value.body)["reason"] == \
        "AlreadyExists"
    cm.data["k"] = "2"
    core.replace_namespaced_config_map("a", "gputopo-system", cm)
    with pytest.raises(ApiException) as stale:  # same resourceVersion again: stale
        core.replace_namespaced_config_map("a", "gputopo-system", cm)
    body = json.loads(stale.value.body)
    assert (stale.value.status, body["kind"], body["reason"]) == (409, "Status", "Conflict")
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("zz", "gputopo-system")
    assert missing.value.status == 404
    # strategic-merge (treated as merge) and JSON patch
    core.patch_namespaced_config_map("a", "gputopo-system", {"data": {"x": "y"}})
    core.patch_namespaced_config_map("a", "gputopo-system",
                                     [{"op": "remove", "path": "/data/k"}])
    assert core.read_namespaced_config_map("a", "gputopo-system").data == {"x": "y"}
    # delete with a stale precondition is refused; with none it goes
    with pytest.raises(ApiException) as pre:
        core.delete_namespaced_config_map(
            "a", "gputopo-system", body={"preconditions": {"resourceVersion": "1"}})
    assert pre.value.status == 409
    core.delete_namespaced_config_map("a", "gputopo-system")
    assert core.list_namespaced_config_map("gputopo-system").items == []


def test_list_selectors_and_wire_format(kube, kube_client) -> None:
    kube.apply(node("a", topology="{}", zone="z1"))
    kube.apply(node("b", topology="{}", zone="z2", activated=False))
    kube.apply(bound_pod("p", "a", "0"))
    core = client.CoreV1Api(kube_client)
    raw = json.loads(core.list_node(_preload_content=False).data)
    assert raw["kind"] == "NodeList" and raw["metadata"]["resourceVersion"]
    assert "kind" not in raw["items"][0]  # built-in list items carry no TypeMeta
    sel = core.list_node(label_selector="ack.node.gpu.schedule=topology").items
    assert [n.metadata.name for n in sel] == ["a"]
    sel = core.list_node(label_selector="topology.kubernetes.io/zone in (z2,z3)").items
    assert [n.metadata.name for n in sel] == ["b"]
    sel = core.list_node(label_selector="!gputopo.io/rack").items
    assert sel == []
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=a").items
    assert [p.metadata.name for p in pods] == ["p"]
    assert core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=a").items == []


def test_watch_from_resource_version_with_bookmarks_and_410(kube, kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    rv = json.loads(core.list_node(_preload_content=False).data)["metadata"]["resourceVersion"]

    def writer() -> None:
        time.sleep(0.1)
        kube.apply(node("a", topology="{}"))
        kube.apply(node("a", topology="{}", activated=False))  # stops matching: DELETED
        kube.apply(node("a", topology="{}"))                   # matches again: ADDED

    threading.Thread(target=writer).start()
    evs = events(core.list_node, resource_version=rv, allow_watch_bookmarks=True,
                 timeout_seconds=1, label_selector="ack.node.gpu.schedule=topology")
    kinds = [e["type"] for e in evs]
    assert kinds[:3] == ["ADDED", "DELETED", "ADDED"]
    assert "BOOKMARK" in kinds
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
    assert rvs == sorted(rvs)
    kube.compact()
    gone = events(core.list_node, resource_version=rv, timeout_seconds=1)
    assert gone[0]["type"] == "ERROR" and gone[0]["object"]["code"] == 410


def test_custom_objects_and_knobs(kube, kube_client) -> None:
    custom = client.CustomObjectsApi(kube_client)
    custom.create_namespaced_custom_object(
        "kubeflow.org", "v2beta1", "default", "mpijobs",
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "j"}})
    got = custom.list_cluster_custom_object("kubeflow.org", "v2beta1", "mpijobs")
    assert got["kind"] == "MPIJobList" and got["items"][0]["kind"] == "MPIJob"
    core = client.CoreV1Api(kube_client)
    kube.latency = 0.2
    t0 = time.monotonic()
    core.list_node()
    assert time.monotonic() - t0 >= 0.2
    kube.latency = 0.0
    kube.set_down("503")
    with pytest.raises(ApiException) as down:
        core.list_node()
    assert down.value.status == 503
    kube.set_down("refuse")
    with pytest.raises(Exception) as refused:  # urllib3 MaxRetryError: nothing listens
        core.list_node(_request_timeout=1)
    assert not isinstance(refused.value, ApiException)
    kube.set_down(None)
    assert core.list_node().items == []
