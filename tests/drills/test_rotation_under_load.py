"""Drills under load: the serving certificate rotated, the policies replaced by broken ones.

Four client threads keep admitting pods over HTTPS (each request on a NEW connection, so
every request is a handshake with whatever certificate is current) while the files are
swapped the way the kubelet swaps a mounted Secret or ConfigMap (``..data`` re-pointed).

- Certificates: zero failed requests beyond handshakes the client retries, and the new
  serial is seen by new handshakes without a restart.
- Policies: a broken policy set is refused (``gputopo_policy_reload_failures_total``) and
  the last good set keeps serving: every answer under the broken files is the answer the
  good set gives; a later good set is then picked up.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from admitkit import (
    client_for,
    cluster_with,
    metric,
    patch_of,
    pytorchjob,
    real_server,
    review,
    worker_pod,
)
from cryptography import x509
from drillkit import wait_for
from serverkit import make_pair, project_secret

from webhook.assembly import default_policies_dir

JOB = pytorchjob("steady", workers=4, gpus=1)
THREADS = 4


class Load:
    """Threads admitting ``pods`` round-robin over fresh TLS connections until stopped."""

    def __init__(self, port: int, cas: list[bytes], pods: list[dict[str, Any]]) -> None:
        self.port, self.cas, self.pods = port, cas, pods
        self.stop = threading.Event()
        self.answers: list[tuple[float, str, dict[str, Any]]] = []  # (time, pod, answer)
        self.failures: list[str] = []
        self.retried = Counter[str]()
        self.serials: set[int] = set()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True)
                         for k in range(THREADS)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def _context(self) -> ssl.SSLContext:
        with self._lock:
            cadata = b"".join(self.cas).decode()
        return ssl.create_default_context(cadata=cadata)

    def _one(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """One admission on a new connection; None when the handshake failed (retried)."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10,
                                           context=self._context())
        try:
            try:
                conn.connect()
            except (ssl.SSLError, ConnectionError) as exc:
                self.retried[type(exc).__name__] += 1
                return None
            der = conn.sock.getpeercert(binary_form=True)
            body = json.dumps(review(pod))
            conn.request("POST", "/mutate", body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")
            with self._lock:
                self.serials.add(x509.load_der_x509_certificate(der).serial_number)
            return json.loads(data)
        finally:
            conn.close()

    def _run(self, k: int) -> None:
        n = k
        while not self.stop.is_set():
            pod = self.pods[n % len(self.pods)]
            n += THREADS
            try:
                answer = None
                for _ in range(5):
                    answer = self._one(pod)
                    if answer is not None:
                        break
                if answer is None:
                    raise RuntimeError("handshake failed 5 times in a row")
            except Exception as exc:  # every failure is counted; the assertion is zero
                with self._lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            with self._lock:
                self.answers.append((time.monotonic(), pod["metadata"]["name"], answer))

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def wait_more(self, n: int, timeout: float = 5.0) -> bool:
        start = self.count()
        return wait_for(lambda: self.count() >= start + n, timeout)


def _serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


def test_certificates_rotated_under_load_fail_no_request(tmp_path: Path) -> None:
    pods = [worker_pod(JOB, i) for i in range(4)]
    with real_server(cluster_with(JOB), tmp_path) as server, client_for(server) as client:
        first_ca = (tmp_path / "made" / "ca.crt").read_bytes()
        reloads = metric(client, "gputopo_certificate_reloads_total", result="success")
        cas = [first_ca]
        new_serials = []
        with Load(server.port, cas, pods) as load:
            assert load.wait_more(20)
            for n in range(2):
                files = make_pair(tmp_path / f"rotated-{n}")
                cas.append(files["ca.crt"])  # the caBundle is updated before the rotation
                project_secret(server.cert_dir, files)
                new_serials.append(_serial(files["tls.crt"]))
                assert wait_for(lambda s=new_serials[-1]: s in load.serials, 5), \
                    "the new certificate never reached a handshake"
                assert load.wait_more(20)
        assert load.failures == []
        assert load.count() >= 60
        assert set(new_serials) <= load.serials
        assert metric(client, "gputopo_certificate_reloads_total",
                      result="success") == reloads + 2
        for _, _, answer in load.answers:
            assert answer["response"]["allowed"] is True
        print(f"\ncertificate rotation under load: {load.count()} admissions, 0 failed, "
              f"handshakes retried {dict(load.retried)}, serials seen {len(load.serials)}")


def _policy_files(mode: str = "enforce", broken: bool = False) -> dict[str, bytes]:
    text = (default_policies_dir() / "ack-gpu-topology.yaml").read_text()
    if broken:  # valid YAML, invalid policy: the validator must refuse it
        text = text.replace("mode: enforce", "mode: sometimes")
    else:
        text = text.replace("mode: enforce", f"mode: {mode}")
    return {"ack-gpu-topology.yaml": text.encode()}


def _answers_since(load: Load, since: float) -> list[tuple[str, dict[str, Any]]]:
    with load._lock:
        return [(name, a) for t, name, a in load.answers if t >= since]


def test_policy_replaced_by_a_broken_one_under_load_keeps_the_last_good_set(
    tmp_path: Path,
) -> None:
    policies = tmp_path / "policies"
    project_secret(policies, _policy_files())
    pods = [worker_pod(JOB, i) for i in range(4)]
    with real_server(cluster_with(JOB), tmp_path / "server", policies=policies,
                     reload_interval_s=0.1) as server, client_for(server) as client:
        failures = metric(client, "gputopo_policy_reload_failures_total")
        with Load(server.port, [(tmp_path / "server" / "made" / "ca.crt").read_bytes()],
                  pods) as load:
            assert load.wait_more(20)
            good: dict[str, list[dict[str, Any]]] = {
                name: patch_of(a) for name, a in _answers_since(load, 0)}
            assert all(good.values()), "the good set mutates every worker"

            broken_at = time.monotonic()
            project_secret(policies, _policy_files(broken=True))
            assert wait_for(lambda: metric(
                client, "gputopo_policy_reload_failures_total") > failures, 5)
            assert load.wait_more(40)
            assert client.get("/readyz").status_code == 200
            under_broken = _answers_since(load, broken_at)

            fixed_at = time.monotonic()
            project_secret(policies, _policy_files(mode="audit"))
            check: Callable[[], bool] = lambda: any(  # noqa: E731
                not patch_of(a) for _, a in _answers_since(load, fixed_at))
            assert wait_for(check, 5), "the next good set (audit) was never picked up"
        assert load.failures == []
        assert len(under_broken) >= 40
        wrong = [name for name, a in under_broken if patch_of(a) != good[name]]
        assert wrong == [], "answers changed while the broken set was on disk"
        assert metric(client, "gputopo_policy_reload_failures_total") == failures + 1
