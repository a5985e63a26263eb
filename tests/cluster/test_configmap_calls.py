"""``ConfigMapCalls`` (gputopo/cluster/configmap_calls.py) sends exactly the requests the
official client's generated ``CoreV1Api`` ConfigMap methods send — method, URL, headers
(auth from a token with its prefix and refresh hook, cookie, default headers), body,
timeout — through the same ``ApiClient.call_api``, answers the same bytes, and raises the
same ``ApiException`` subclasses; checked by recording ``call_api`` for both against the
API test double."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from k8s_double import KubeApiDouble
from k8s_double.client import configuration
from kubernetes import client
from kubernetes.client.rest import ApiException

from gputopo.cluster.configmap_calls import ConfigMapCalls

NS = "gputopo-system"


def recorded(api: client.ApiClient) -> list[tuple[Any, ...]]:
    """Every request ``api`` sends from now on: (method, url, headers, body, post params,
    timeout). ``call_api`` is the official client's, wrapped to record its arguments."""
    calls: list[tuple[Any, ...]] = []
    real = api.call_api

    def call_api(method: str, url: str, header_params: Any = None, body: Any = None,
                 post_params: Any = None, _request_timeout: Any = None) -> Any:
        # the body as the JSON it is sent as (the generated methods turn a dict body into
        # a model and back: the same object, its keys in another order)
        calls.append((method, url, dict(header_params or {}),
                      json.loads(json.dumps(body)), post_params, _request_timeout))
        return real(method, url, header_params, body, post_params,
                    _request_timeout=_request_timeout)

    api.call_api = call_api  # type: ignore[method-assign]
    return calls


@pytest.fixture
def clients(kube: KubeApiDouble) -> tuple[client.ApiClient, client.ApiClient]:
    """Two clients configured alike, with a token that the refresh hook rotates."""
    out = []
    for _ in range(2):
        cfg = configuration(kube.url)
        cfg.api_key = {"BearerToken": "t0"}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        turns = iter(range(1, 1000))
        cfg.refresh_api_key_hook = lambda c, turns=turns: c.api_key.update(
            BearerToken=f"t{next(turns)}")
        api = client.ApiClient(cfg, cookie="session=1")
        api.set_default_header("X-Test", "yes")
        out.append(api)
    return out[0], out[1]


def outcome(call: Callable[[], Any]) -> Any:
    try:
        got = call()
    except ApiException as exc:
        return type(exc).__name__, exc.status
    data = got if isinstance(got, bytes) else got.data
    obj = json.loads(data)
    meta = obj.get("metadata") or {}
    for k in ("uid", "creationTimestamp", "resourceVersion"):  # differ between the two
        meta.pop(k, None)
    (obj.get("details") or {}).pop("uid", None)  # a deletion's Status names the uid
    for item in obj.get("items") or []:
        for k in ("uid", "creationTimestamp", "resourceVersion"):
            item["metadata"].pop(k, None)
    return obj


def test_the_same_requests_answers_and_errors_as_the_generated_methods(clients) -> None:
    ours_api, theirs_api = clients
    ours, theirs = ConfigMapCalls(ours_api, NS), client.CoreV1Api(theirs_api)
    sent_ours, sent_theirs = recorded(ours_api), recorded(theirs_api)
    kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": 7.5}
    sel = "gputopo.io/reservation=ledger,app.kubernetes.io/managed-by=gputopo"

    def cm(name: str, theirs_side: bool) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": f"{name}-{'b' if theirs_side else 'a'}",
                             "namespace": NS,
                             "labels": {"gputopo.io/reservation": "ledger",
                                        "app.kubernetes.io/managed-by": "gputopo"}},
                "data": {"node": "n/0 ü", "0": json.dumps({"at": 1.5, "gang": "u"})}}

    steps: list[tuple[Callable[[], Any], Callable[[], Any]]] = [
        (lambda: ours.create(cm("x", False), timeout=7.5),
         lambda: theirs.create_namespaced_config_map(NS, cm("x", True), **kw)),
        (lambda: ours.create(cm("x", False), timeout=7.5),  # 409 AlreadyExists
         lambda: theirs.create_namespaced_config_map(NS, cm("x", True), **kw)),
        (lambda: ours.read("x-a", timeout=7.5),
         lambda: theirs.read_namespaced_config_map("x-b", NS, **kw)),
        (lambda: ours.read("absent", timeout=7.5),  # 404
         lambda: theirs.read_namespaced_config_map("absent", NS, **kw)),
        (lambda: ours.list(sel, timeout=7.5),
         lambda: theirs.list_namespaced_config_map(NS, label_selector=sel, **kw)),
        (lambda: ours.replace("x-a", {**cm("x", False), "data": {"node": "m"}}, timeout=7.5),
         lambda: theirs.replace_namespaced_config_map(
             "x-b", NS, {**cm("x", True), "data": {"node": "m"}}, **kw)),
        (lambda: ours.replace("x-a", {**cm("x", False), "metadata": {  # 409: stale version
            **cm("x", False)["metadata"], "resourceVersion": "1"}}, timeout=7.5),
         lambda: theirs.replace_namespaced_config_map("x-b", NS, {**cm("x", True), "metadata": {
             **cm("x", True)["metadata"], "resourceVersion": "1"}}, **kw)),
        (lambda: ours.delete("x-a", {"preconditions": {"uid": "nope"}}, timeout=7.5),  # 409
         lambda: theirs.delete_namespaced_config_map(
             "x-b", NS, body={"preconditions": {"uid": "nope"}}, **kw)),
        (lambda: ours.delete("x-a", None, timeout=7.5),
         lambda: theirs.delete_namespaced_config_map("x-b", NS, **kw)),
        (lambda: ours.delete("x-a", None, timeout=7.5),  # 404
         lambda: theirs.delete_namespaced_config_map("x-b", NS, **kw)),
    ]
    for i, (mine, generated) in enumerate(steps):
        a, b = outcome(mine), outcome(generated)
        if isinstance(a, dict) and "items" not in a:  # the names differ by their suffix
            a = json.loads(json.dumps(a).replace("x-a", "x-b"))  # (a LIST has both)
        assert a == b, i
    assert len(sent_ours) == len(sent_theirs) == len(steps)
    for i, (a, b) in enumerate(zip(sent_ours, sent_theirs, strict=True)):
        a = json.loads(json.dumps(a).replace("x-a", "x-b"))
        b = json.loads(json.dumps(b))
        assert a == b, i
    assert sent_ours[0][2]["authorization"] == "Bearer t1"  # the hook ran per request
    assert sent_ours[-1][2]["Cookie"] == "session=1"
