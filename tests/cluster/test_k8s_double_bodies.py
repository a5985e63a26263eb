"""The API test double refuses create/update bodies a real API server refuses.

Why it matters: a writer SIGKILLed after its request headers went out leaves an empty
body. The double once took that for ``{}`` and replaced a ConfigMap with a label-less
blank, so the crash drill failed on something no real cluster does.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
from k8s_double import KubeApiDouble

PATH = "/api/v1/namespaces/gputopo-system/configmaps"


def _send(kube: KubeApiDouble, method: str, path: str, body: bytes) -> tuple[int, dict]:
    u = urlsplit(kube.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize("body", [b"", b"null", b"[1]", b'{"metadata": {"name": "x'])
def test_empty_or_non_object_update_is_400_and_the_object_stays(kube, body: bytes) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "keep", "labels": {"a": "b"}}, "data": {"k": "v"}}
    assert _send(kube, "POST", PATH, json.dumps(cm).encode())[0] == 201
    code, status = _send(kube, "PUT", f"{PATH}/keep", body)
    assert (code, status["kind"], status["reason"]) == (400, "Status", "BadRequest")
    assert _send(kube, "POST", PATH, body)[0] == 400
    code, got = _send(kube, "GET", f"{PATH}/keep", b"")
    assert code == 200 and got["metadata"]["labels"] == {"a": "b"} and got["data"] == cm["data"]


def test_update_naming_another_object_is_400(kube) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one"}}
    assert _send(kube, "POST", PATH, json.dumps(cm).encode())[0] == 201
    other = {**cm, "metadata": {"name": "two"}}
    assert _send(kube, "PUT", f"{PATH}/one", json.dumps(other).encode())[0] == 400
