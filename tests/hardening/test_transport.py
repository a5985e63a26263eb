"""The transport the real webhook offers: TLS 1.2+ only, no plaintext, bounded bodies.

Same claims as tests/server make of the server with a stand-in admitter, checked here on
the server built around the real pipeline: the limits hold whatever sits behind them.
"""

from __future__ import annotations

import json
import socket
import ssl

import httpx
import pytest
from admitkit import FUZZ_JOBS, post, review, worker_pod
from serverkit import TEST_MAX_BODY, RunningServer


def _handshake(server: RunningServer, version: ssl.TLSVersion) -> str:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the CLIENT offer old protocols at all
    context.minimum_version = context.maximum_version = version
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return str(tls.version())


def test_tls_1_2_and_1_3_handshake(server: RunningServer) -> None:
    assert _handshake(server, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    assert _handshake(server, ssl.TLSVersion.TLSv1_3) == "TLSv1.3"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1],
                         ids=["tls1.0", "tls1.1"])
def test_tls_below_1_2_is_refused(server: RunningServer, version: ssl.TLSVersion) -> None:
    with pytest.raises(ssl.SSLError):
        _handshake(server, version)


def test_plain_http_to_the_port_gets_no_http_answer(server: RunningServer) -> None:
    body = json.dumps(review(worker_pod(FUZZ_JOBS[0], 0))).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        try:
            answer = raw.recv(1024)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/")
    with pytest.raises(httpx.TransportError), httpx.Client(timeout=5) as plain:
        plain.post(f"http://127.0.0.1:{server.port}/mutate", content=body)


def test_oversized_review_is_a_json_400_and_the_server_goes_on(
    client: httpx.Client,
) -> None:
    pod = worker_pod(FUZZ_JOBS[0], 0)
    pod["metadata"]["annotations"] = {"padding": "x" * (TEST_MAX_BODY + 1)}
    resp = post(client, review(pod))
    assert resp.status_code == 400
    assert "limit" in resp.json()["error"]
    ok = post(client, review(worker_pod(FUZZ_JOBS[0], 0)))
    assert ok.status_code == 200 and ok.json()["response"]["allowed"] is True


def test_oversized_streamed_body_without_length_is_cut_off(client: httpx.Client) -> None:
    def chunks():
        for _ in range(2 * TEST_MAX_BODY // 4096 + 1):
            yield b"[" * 4096

    resp = client.post("/mutate", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 400
    assert "limit" in resp.json()["error"]
