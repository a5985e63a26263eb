"""The ConfigMap calls of the Kubernetes reservation store, made through the official
client's ``ApiClient.call_api`` without the generated methods' per-call machinery.

Why: reserving a new gang is a dozen small API calls on the admitting thread (the record
GET, per node a ledger GET and a claim PUT, the record POST, per node a commit PUT). The
generated ``CoreV1Api`` methods validate every argument with pydantic and re-serialise the
headers, the path and the body (``sanitize_for_serialization`` walks every field) on each
call: ~0.03 ms of a GET's and ~0.13 ms of a PUT's ~0.4-0.5 ms client-side CPU on loopback
(measured: ``git show 5b1c38e:docs/benchmarks.md``, "Held GPUs from a watch of the
ledgers, on the live path"; today's figures: docs/benchmarks.md, "Reservations on the live
path"). This module sends the very
same requests — method, URL, headers (the client's default headers, cookie and auth, the
token refresh hook included), the body encoded by the client's REST layer — through the
same ``ApiClient.call_api``, so TLS, proxies, timeouts and retries stay the client's; it
answers the response bytes and raises ``ApiException`` (the same subclass, from the same
``ApiException.from_response``) for a non-2xx status, as the generated methods do with
``_preload_content=False``. ``tests/cluster/test_configmap_calls.py`` checks the requests
against the generated methods'.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.rest import ApiException

#: The generated ConfigMap methods' auth settings (every core/v1 operation has these).
AUTH_SETTINGS = ["BearerToken"]
#: The generated methods' ``Accept``: the first JSON type of what the operation produces.
ACCEPT = "application/json"


class ConfigMapCalls:
    """GET, LIST, POST, PUT and DELETE of ConfigMaps in one namespace; bytes in, bytes out."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.api = api_client
        self.namespace = namespace
        self._safe = api_client.configuration.safe_chars_for_path_param
        self._base = f"/api/v1/namespaces/{quote(namespace, safe=self._safe)}/configmaps"

    def read(self, name: str, *, timeout: float) -> bytes:
        return self._call("GET", self._named(name), timeout=timeout)

    def list(self, label_selector: str, *, timeout: float) -> bytes:
        return self._call("GET", self._base, query=[("labelSelector", label_selector)],
                          timeout=timeout)

    def create(self, body: dict[str, Any], *, timeout: float) -> bytes:
        return self._call("POST", self._base, body=body, timeout=timeout)

    def replace(self, name: str, body: dict[str, Any], *, timeout: float) -> bytes:
        return self._call("PUT", self._named(name), body=body, timeout=timeout)

    def delete(self, name: str, body: dict[str, Any] | None, *, timeout: float) -> bytes:
        return self._call("DELETE", self._named(name), body=body, timeout=timeout)

    def _named(self, name: str) -> str:
        return f"{self._base}/{quote(str(name), safe=self._safe)}"

    def _call(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: dict[str, Any] | None = None, timeout: float) -> bytes:
        """What ``ApiClient.param_serialize`` + ``_call_with_legacy_options`` do for these
        operations, minus validation and re-serialisation of values that are already
        plain JSON."""
        api = self.api
        headers = {"Accept": ACCEPT, **api.default_headers}
        if api.cookie:
            headers["Cookie"] = api.cookie
        queries = list(query or ())
        api.update_params_for_auth(headers, queries, AUTH_SETTINGS, path, method, body)
        url = api.configuration.host + path
        if queries:
            url += "?" + api.parameters_to_url_query(queries, {})
        resp = api.call_api(method, url, headers, body, [],
                            _request_timeout=timeout)
        if not 200 <= resp.status <= 299:
            resp.read()
            raise ApiException.from_response(http_resp=resp, body=None, data=None)
        return resp.response.data
