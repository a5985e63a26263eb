"""``gputopo generate certs`` and gputopo.certs, checked with cryptography as a client would."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from gputopo.certs import write_serving_certs
from gputopo.cli import main
from gputopo.errors import InputError
from gputopo.names import GPUTOPO_NAMESPACE, WEBHOOK_SERVICE


def load(out: Path) -> tuple[x509.Certificate, x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    key = serialization.load_pem_private_key((out / "tls.key").read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return ca, cert, key


def test_generate_certs_command_writes_exactly_the_secret_layout(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert main(["generate", "certs", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600

    ca, cert, key = load(out)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    service, ns = WEBHOOK_SERVICE, GPUTOPO_NAMESPACE
    assert sans.get_values_for_type(x509.DNSName) == [
        service, f"{service}.{ns}", f"{service}.{ns}.svc", f"{service}.{ns}.svc.cluster.local"
    ]
    # The chain verifies: the CA signed the serving certificate, for serverAuth.
    cert.verify_directly_issued_by(ca)
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    # The key is the certificate's key.
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    # Valid now, for about a year.
    now = dt.datetime.now(dt.UTC)
    assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
    assert dt.timedelta(days=364) < cert.not_valid_after_utc - now <= dt.timedelta(days=365)


def test_extra_names_become_dns_and_ip_sans_and_overwrite_keeps_key_private(
    tmp_path: Path,
) -> None:
    (tmp_path / "tls.key").write_text("old")
    (tmp_path / "tls.key").chmod(0o644)
    write_serving_certs(
        tmp_path, service="hook", namespace="ops", days=2,
        extra_dns=("localhost", "127.0.0.1", "::1", "hook.example.com"),
    )
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    _, cert, _ = load(tmp_path)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "hook", "hook.ops", "hook.ops.svc", "hook.ops.svc.cluster.local",
        "localhost", "hook.example.com",
    ]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"service": "Bad_Name"}, "DNS-1123"),
        ({"namespace": "-x"}, "DNS-1123"),
        ({"days": 0}, "days"),
        ({"extra_dns": ("not a name",)}, "neither a DNS name nor an IP"),
    ],
)
def test_bad_options_are_input_errors(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        write_serving_certs(tmp_path, **kwargs)
    assert not (tmp_path / "tls.key").exists()


def test_generate_certs_bad_days_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["generate", "certs", "-o", str(tmp_path), "--days", "0"]) == 2
    assert capsys.readouterr().err.startswith("gputopo: error:")
