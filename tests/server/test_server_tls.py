"""TLS of the running server: no plaintext, TLS 1.2 floor, certificates rotated in place."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from serverkit import (
    TEST_RELOAD_INTERVAL,
    RunningServer,
    StandInAdmitter,
    make_pair,
    project_secret,
    start_server,
)

from gputopo.errors import InputError
from webhook.tls import CertificateReloader


def presented_serial(port: int) -> int:
    """Serial of the certificate a NEW handshake with the server presents."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # we only read the certificate here
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def serial_of(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


def reloads(client: httpx.Client, result: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'gputopo_certificate_reloads_total{{result="{result}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_for(condition: Callable[[], bool], *, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(TEST_RELOAD_INTERVAL / 2)
    return condition()


def tls_client(ca_pem: bytes, base_url: str) -> httpx.Client:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    return httpx.Client(base_url=base_url, verify=context, timeout=5)


def test_plaintext_http_gets_no_answer(standin_server: RunningServer) -> None:
    with pytest.raises(httpx.TransportError), httpx.Client(timeout=5) as plain:
        plain.get(f"http://127.0.0.1:{standin_server.port}/healthz")
    with socket.create_connection(("127.0.0.1", standin_server.port), timeout=5) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = raw.recv(1024)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/")


def _handshake(port: int, ca_file: Path, version: ssl.TLSVersion) -> str:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the CLIENT offer old protocols at all
    context.minimum_version = version
    context.maximum_version = version
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return str(tls.version())


def test_tls_1_2_and_1_3_are_served(standin_server: RunningServer) -> None:
    port, ca = standin_server.port, standin_server.ca_file
    assert _handshake(port, ca, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    assert _handshake(port, ca, ssl.TLSVersion.TLSv1_3) == "TLSv1.3"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["tls1.0", "tls1.1"]
)
def test_tls_below_1_2_is_refused(standin_server: RunningServer, version: ssl.TLSVersion) -> None:
    with pytest.raises(ssl.SSLError) as refused:
        _handshake(standin_server.port, standin_server.ca_file, version)
    assert "PROTOCOL" in str(refused.value).upper()


@pytest.fixture()
def rotating_server(tmp_path: Path) -> Iterator[tuple[RunningServer, Path]]:
    """A server of its own: rotation changes its CA, which the shared server must keep."""
    secret = tmp_path / "secret"
    first = make_pair(tmp_path / "first")
    project_secret(secret, first)
    running = start_server(StandInAdmitter(), secret, tmp_path / "first" / "ca.crt")
    yield running, tmp_path
    running.stop()


def test_rotated_certificate_is_served_without_restart(
    rotating_server: tuple[RunningServer, Path],
) -> None:
    running, work = rotating_server
    secret = running.cert_dir
    first = {name: (secret / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    assert presented_serial(running.port) == serial_of(first["tls.crt"])

    with tls_client(first["ca.crt"], running.base_url) as old_client:
        assert old_client.get("/healthz").status_code == 200  # connection now open
        successes = reloads(old_client, "success")

        second = make_pair(work / "second")
        project_secret(secret, second)
        assert wait_for(lambda: presented_serial(running.port) == serial_of(second["tls.crt"]))

        # The open keep-alive connection goes on; new handshakes need the new CA.
        assert old_client.get("/healthz").status_code == 200
        assert reloads(old_client, "success") == successes + 1
    with tls_client(second["ca.crt"], running.base_url) as new_client:
        assert new_client.get("/healthz").status_code == 200
    with pytest.raises(httpx.ConnectError), tls_client(first["ca.crt"], running.base_url) as c:
        c.get("/healthz")


def test_broken_pair_is_rejected_and_the_old_one_kept(
    rotating_server: tuple[RunningServer, Path],
) -> None:
    running, work = rotating_server
    secret = running.cert_dir
    good = {name: (secret / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    other = make_pair(work / "other")
    with tls_client(good["ca.crt"], running.base_url) as client:
        failures = reloads(client, "failure")

        # A certificate with somebody else's key: OpenSSL would take the certificate and
        # refuse the key, leaving a broken context if loaded in place.
        project_secret(secret, {**good, "tls.crt": other["tls.crt"]})
        assert wait_for(lambda: reloads(client, "failure") == failures + 1)
        # Not garbage either.
        project_secret(secret, {**good, "tls.key": b"-----BEGIN PRIVATE KEY-----\nno\n"})
        assert wait_for(lambda: reloads(client, "failure") == failures + 2)
        time.sleep(TEST_RELOAD_INTERVAL * 3)  # a rejected pair is counted once, not per poll
        assert reloads(client, "failure") == failures + 2

        assert presented_serial(running.port) == serial_of(good["tls.crt"])
    with tls_client(good["ca.crt"], running.base_url) as fresh:  # new handshake, old pair
        assert fresh.get("/healthz").status_code == 200

    project_secret(secret, other)  # and a good pair after a bad one is taken
    assert wait_for(lambda: presented_serial(running.port) == serial_of(other["tls.crt"]))


def test_broken_initial_pair_is_an_input_error_naming_the_directory(tmp_path: Path) -> None:
    one, two = make_pair(tmp_path / "one"), make_pair(tmp_path / "two")
    secret = tmp_path / "secret"
    project_secret(secret, {"tls.crt": one["tls.crt"], "tls.key": two["tls.key"]})
    with pytest.raises(InputError) as error:
        CertificateReloader(secret)
    assert str(secret) in str(error.value)
    with pytest.raises(InputError, match="cannot read"):
        CertificateReloader(tmp_path / "missing")


def test_rotation_under_load_drops_no_request(
    rotating_server: tuple[RunningServer, Path],
) -> None:
    """Clients that trust both CAs (as during a CA roll-over) hammer the server with fresh
    handshakes while the Secret rotates: every request before, during and after the swap is
    answered."""
    running, work = rotating_server
    secret = running.cert_dir
    first = {name: (secret / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    second = make_pair(work / "second")
    context = ssl.create_default_context(cadata=(first["ca.crt"] + second["ca.crt"]).decode())
    errors: list[BaseException] = []
    served = 0
    stop = threading.Event()

    def hammer() -> None:
        nonlocal served
        while not stop.is_set():
            try:
                # A new client each time: a new TCP connection and TLS handshake.
                with httpx.Client(base_url=running.base_url, verify=context, timeout=5) as c:
                    assert c.get("/healthz").status_code == 200
                served += 1
            except BaseException as exc:
                errors.append(exc)
                return

    workers = [threading.Thread(target=hammer) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.3)
        project_secret(secret, second)
        assert wait_for(lambda: presented_serial(running.port) == serial_of(second["tls.crt"]))
        time.sleep(0.3)
    finally:
        stop.set()
        for worker in workers:
            worker.join(10)
    assert errors == []
    assert served > 10


def _rsa_pair(work_dir: Path) -> dict[str, bytes]:
    """A self-signed RSA serving pair for localhost/127.0.0.1 (cert-manager's default
    key type; ``generate certs`` makes ECDSA)."""
    import datetime as dt
    import ipaddress

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
        .sign(key, hashes.SHA256())
    )
    crt = cert.public_bytes(serialization.Encoding.PEM)
    return {"ca.crt": crt, "tls.crt": crt, "tls.key": key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())}


def _serial_seen(port: int, *, rsa_only: bool, sni: bool) -> int | None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if rsa_only:  # a TLS 1.2 client that can only verify RSA signatures
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384")
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost" if sni else None) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except ssl.SSLError:
        return None
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_rotation_to_another_key_type_stops_presenting_the_old_certificate(
    tmp_path: Path,
) -> None:
    """RSA -> ECDSA (and back): an SSLContext keeps one certificate per key type, so a
    pair loaded over one of another type used to leave the OLD certificate presented to
    clients preferring that type — after rotation, after its expiry, forever."""
    secret = tmp_path / "secret"
    first = _rsa_pair(tmp_path)
    project_secret(secret, first)
    (tmp_path / "ca.crt").write_bytes(first["ca.crt"])
    running = start_server(StandInAdmitter(), secret, tmp_path / "ca.crt")
    try:
        old = serial_of(first["tls.crt"])
        assert _serial_seen(running.port, rsa_only=True, sni=True) == old
        second = make_pair(tmp_path / "ecdsa")
        project_secret(secret, second)
        new = serial_of(second["tls.crt"])
        assert wait_for(lambda: presented_serial(running.port) == new)
        for sni in (True, False):  # by name, and by IP (no SNI sent)
            assert _serial_seen(running.port, rsa_only=False, sni=sni) == new
            assert _serial_seen(running.port, rsa_only=True, sni=sni) != old
        third = _rsa_pair(tmp_path / "again")
        project_secret(secret, third)
        assert wait_for(lambda: presented_serial(running.port) == serial_of(third["tls.crt"]))
        assert _serial_seen(running.port, rsa_only=True, sni=False) == serial_of(
            third["tls.crt"])
    finally:
        running.stop()


def test_an_encrypted_key_is_refused_in_one_line_never_prompted_for(tmp_path: Path) -> None:
    """OpenSSL asks for the password of an encrypted key on the terminal: ``gputopo serve``
    hung there (or, without a terminal, died with a bare OSError traceback), and a rotation
    to such a key would have hung the event loop."""
    from cryptography.hazmat.primitives import serialization

    good = make_pair(tmp_path / "good")
    key = serialization.load_pem_private_key(good["tls.key"], password=None)
    encrypted = key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"secret"))
    bad_dir = tmp_path / "bad"
    project_secret(bad_dir, {**good, "tls.key": encrypted})
    with pytest.raises(InputError, match=r"tls\.key is encrypted"):
        CertificateReloader(bad_dir)

    secret = tmp_path / "secret"
    project_secret(secret, good)
    reloader = CertificateReloader(secret)
    project_secret(secret, {**good, "tls.key": encrypted})
    assert reloader.check() is False  # rejected, the good pair stays
    assert reloader.serial == serial_of(good["tls.crt"])
