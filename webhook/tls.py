"""The webhook's serving certificate: loaded from a mounted Secret and reloaded when it rotates.

Why: the API server refuses a webhook whose certificate has expired, and every Pod creation
in the served namespaces then fails. Certificates are rotated by cert-manager or by hand by
replacing the Secret; the kubelet then swaps the mounted files atomically (``tls.crt`` ->
``..data/tls.crt``, with ``..data`` a symlink re-pointed to a new timestamped directory).
A webhook that reads its certificate once breaks at the first renewal, so this module polls
the files and hands a changed pair to every new handshake on the :class:`ssl.SSLContext` the
server listens with (through its SNI callback, below), without a restart.

A new pair is first loaded into a scratch context: OpenSSL replaces the certificate before
it checks the key, so loading a mismatched pair straight into the live context would leave
it with the new certificate and the old key (and break every handshake). A good new pair
goes into a FRESH context that the listening context's SNI callback (called on every
handshake, with or without SNI) switches each new connection to: an SSLContext holds one
certificate PER KEY TYPE, so loading an ECDSA pair over an RSA one would keep presenting
the old (possibly expired) RSA certificate to clients that prefer RSA. A rejected pair is
logged and counted (``CERT_RELOADS{result="failure"}``) and the old one stays in force.
Loads run on the event loop thread, the only thread that starts handshakes, so the context
is never changed under a handshake being set up.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from gputopo.errors import InputError
from webhook.metrics import CERT_RELOADS

log = logging.getLogger(__name__)

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
#: Seconds between two looks at the files. The kubelet refreshes mounted Secrets about once a
#: minute; a few seconds more is nothing next to a certificate's lifetime.
DEFAULT_RELOAD_INTERVAL = 5.0


@dataclass(frozen=True)
class CertificatePair:
    """One certificate chain and its key as read from disk, with what the logs report."""

    cert_pem: bytes
    key_pem: bytes
    serial: int
    not_after: dt.datetime

    @property
    def digest(self) -> str:
        return _digest(self.cert_pem, self.key_pem)


def server_context() -> ssl.SSLContext:
    """A server context with gputopo's TLS floor: TLS 1.2 minimum, no compression, no
    renegotiation, HTTP/1.1 over ALPN. No certificate yet."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(["http/1.1"])
    return context


def read_pair(cert_dir: Path) -> CertificatePair:
    """Read and check ``tls.crt``/``tls.key`` of ``cert_dir``.

    Raises :class:`InputError` naming the file when a file is missing or unreadable, the
    certificate does not parse, has expired, or the key does not belong to it.
    """
    cert_path, key_path = cert_dir / CERT_FILE, cert_dir / KEY_FILE
    try:
        cert_pem = cert_path.read_bytes()
        key_pem = key_path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(exc.filename)) from exc
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise InputError(f"not a PEM certificate: {exc}", file=str(cert_path)) from exc
    not_after = cert.not_valid_after_utc
    if not_after <= dt.datetime.now(dt.UTC):
        raise InputError(f"certificate expired at {not_after.isoformat()}", file=str(cert_path))
    _check_loadable(cert_pem, key_pem, source=str(cert_dir))
    return CertificatePair(cert_pem, key_pem, cert.serial_number, not_after)


def load_pair(context: ssl.SSLContext, pair: CertificatePair) -> None:
    """Make ``context`` present ``pair`` on its next handshakes."""
    with _as_files(pair.cert_pem, pair.key_pem) as (cert_file, key_file):
        context.load_cert_chain(cert_file, key_file, password=_no_password)


class CertificateReloader:
    """The live server context of one certificate directory, kept in step with the files.

    Build it before the server starts (a broken initial pair raises :class:`InputError`, so
    ``gputopo serve`` refuses to start with one line); hand :attr:`context` to the server;
    run :meth:`run` on the server's event loop.
    """

    def __init__(self, cert_dir: Path, *, interval: float = DEFAULT_RELOAD_INTERVAL) -> None:
        self.cert_dir = cert_dir
        self.interval = interval
        self.context = server_context()
        self._current = read_pair(cert_dir)
        load_pair(self.context, self._current)
        #: the context new handshakes are switched to (see the module docstring)
        self._active = self.context
        self.context.sni_callback = self._switch
        self._rejected_digest: str | None = None
        log.info(
            "serving certificate serial %x from %s, valid until %s",
            self._current.serial,
            cert_dir,
            self._current.not_after.isoformat(),
        )

    @property
    def serial(self) -> int:
        """Serial number of the certificate new handshakes present."""
        return self._current.serial

    def check(self) -> bool:
        """Look at the files once; load them if they changed and are good.

        Returns True when a new certificate was loaded. A pair caught in the middle of a
        swap (the resolved paths moved while reading) is left for the next look; a bad pair
        is counted once, not at every look.
        """
        cert_path, key_path = self.cert_dir / CERT_FILE, self.cert_dir / KEY_FILE
        before = (os.path.realpath(cert_path), os.path.realpath(key_path))
        try:
            cert_pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
        except OSError as exc:
            log.warning("certificate files unreadable, keeping the current pair: %s", exc)
            return False
        if before != (os.path.realpath(cert_path), os.path.realpath(key_path)):
            return False
        digest = _digest(cert_pem, key_pem)
        if digest in (self._current.digest, self._rejected_digest):
            return False
        try:
            pair = read_pair(self.cert_dir)
            if pair.digest != digest:  # changed again since the first read: next look
                return False
        except InputError as exc:
            self._rejected_digest = digest
            CERT_RELOADS.labels(result="failure").inc()
            log.error(
                "rejected new serving certificate, still serving serial %x: %s",
                self._current.serial,
                exc,
            )
            return False
        fresh = server_context()
        load_pair(fresh, pair)
        self._active, self._current, self._rejected_digest = fresh, pair, None
        CERT_RELOADS.labels(result="success").inc()
        log.info(
            "serving certificate reloaded: serial %x, valid until %s",
            pair.serial,
            pair.not_after.isoformat(),
        )
        return True

    def _switch(self, ssl_object: ssl.SSLObject, server_name: str | None,
                context: ssl.SSLContext) -> None:
        """SNI callback of the listening context: hand the handshake the current pair."""
        active = self._active
        if active is not context:
            ssl_object.context = active

    async def run(self) -> None:
        """Poll until cancelled. An unexpected error is logged and polling goes on: the
        server must keep serving with the certificate it has."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:
                log.exception("certificate reload check failed")


def _check_loadable(cert_pem: bytes, key_pem: bytes, *, source: str) -> None:
    """Load the pair into a throw-away context: OpenSSL's own verdict on it."""
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        with _as_files(cert_pem, key_pem) as (cert_file, key_file):
            scratch.load_cert_chain(cert_file, key_file, password=_no_password)
    except _EncryptedKey as exc:
        raise InputError(str(exc), file=source) from exc
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        raise InputError(
            f"{CERT_FILE}/{KEY_FILE} do not form a usable pair: {reason}", file=source
        ) from exc


class _EncryptedKey(Exception):
    pass


def _no_password() -> bytes:
    """Asked for when the key is encrypted. Without it OpenSSL prompts on the terminal
    (a hang, in the event loop) or, with none, fails with a bare OSError."""
    raise _EncryptedKey(f"{KEY_FILE} is encrypted; a kubernetes.io/tls Secret holds the key "
                        "unencrypted")


@contextlib.contextmanager
def _as_files(cert_pem: bytes, key_pem: bytes) -> Iterator[tuple[str, str]]:
    """Paths holding exactly these bytes, for ``load_cert_chain`` (which reads paths only).

    Loading from our own copy, not from the mounted files, guarantees the bytes checked are
    the bytes loaded even if the files change meanwhile. On Linux the copies live in memory
    (``memfd``); elsewhere in a private temporary directory removed at once.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds = [os.memfd_create(name) for name in (CERT_FILE, KEY_FILE)]
        try:
            for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
                with open(fd, "wb", closefd=False) as file:
                    file.write(data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="gputopo-tls-") as tmp:  # pragma: no cover
        cert_file, key_file = os.path.join(tmp, CERT_FILE), os.path.join(tmp, KEY_FILE)
        for path, data in ((cert_file, cert_pem), (key_file, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
        yield cert_file, key_file


def _digest(cert_pem: bytes, key_pem: bytes) -> str:
    return hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
