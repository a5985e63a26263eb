"""A CA and a serving certificate for the webhook Service, made with ``cryptography``.

Why here: the API server only calls a webhook over HTTPS and checks its certificate against
the ``caBundle`` of the webhook configuration, so every deployment (and ``gputopo serve``
on a laptop) needs a CA and a certificate whose SANs name the Service. Clusters with
cert-manager mount its Secret instead; the layout is the same (``tls.crt``, ``tls.key``,
``ca.crt``: a ``kubernetes.io/tls`` Secret), so the server cannot tell the difference.

Choices: ECDSA P-256 keys (small, fast handshakes, accepted by every Go TLS stack the API
server runs); SAN-only names (Go ignores the CN since 1.15); ``serverAuth`` EKU; a CA limited
to path length 0. The CA key is never written: exactly the three files of the contract are,
so a leaked output directory cannot mint more certificates.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gputopo.errors import InputError
from gputopo.names import GPUTOPO_NAMESPACE, WEBHOOK_SERVICE

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"

#: Certificates start this far in the past so a node whose clock runs a little behind
#: does not reject a certificate made a second ago.
CLOCK_SKEW = dt.timedelta(minutes=5)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_NAME = re.compile(
    r"^(\*\.)?[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$"
)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a client inside the cluster may use for ``service`` in ``namespace``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def write_serving_certs(
    out_dir: Path,
    *,
    service: str = WEBHOOK_SERVICE,
    namespace: str = GPUTOPO_NAMESPACE,
    days: int = 365,
    extra_dns: Sequence[str] = (),
) -> None:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` (mode 0600) into ``out_dir``.

    ``extra_dns`` adds SANs: DNS names, or IP literals (``127.0.0.1``, ``::1``) which become
    IP SANs, as ``gputopo serve`` needs for ``https://127.0.0.1:8443``.
    Raises :class:`InputError` for a name that is not a DNS label or a non-positive ``days``.
    """
    for what, value in (("service", service), ("namespace", namespace)):
        if not _DNS_LABEL.match(value):
            raise InputError(f"{what} {value!r} is not a DNS-1123 label", obj="certificates")
    if days < 1:
        raise InputError(f"days must be at least 1, got {days}", obj="certificates")
    sans = _subject_alt_names([*service_dns_names(service, namespace), *extra_dns])

    now = dt.datetime.now(dt.UTC)
    try:
        not_before, not_after = now - CLOCK_SKEW, now + dt.timedelta(days=days)
    except OverflowError as exc:  # past the year 9999, the last date X.509 can express
        raise InputError(f"days {days} ends after the year 9999", obj="certificates") from exc

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")])
        )
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a directory", file=str(out_dir))
    pem = serialization.Encoding.PEM
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _write(out_dir / CA_FILE, ca_cert.public_bytes(pem), mode=0o644)
        _write(out_dir / CERT_FILE, cert.public_bytes(pem), mode=0o644)
        _write(
            out_dir / KEY_FILE,
            key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            mode=0o600,
        )
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=str(out_dir)) from exc


def _subject_alt_names(names: Sequence[str]) -> list[x509.GeneralName]:
    """DNS and IP SANs in the order given, without duplicates."""
    seen: set[str] = set()
    result: list[x509.GeneralName] = []
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        try:
            result.append(x509.IPAddress(ipaddress.ip_address(name)))
            continue
        except ValueError:
            pass
        if not _DNS_NAME.match(name) or len(name) > 253:
            raise InputError(f"{name!r} is neither a DNS name nor an IP address", obj="SAN")
        result.append(x509.DNSName(name))
    return result


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write(path: Path, data: bytes, *, mode: int) -> None:
    """Replace ``path`` with ``data`` in one step (a reader sees the old file or the new one,
    never half of one), with ``mode`` from the first byte on: a key is never world-readable,
    not even for a moment."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), mode)  # a left-over temp file keeps its mode through O_CREAT
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
