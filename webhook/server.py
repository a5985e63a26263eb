"""The HTTPS admission server: FastAPI routes around an admitter, served by uvicorn over TLS.

Why this shape: the admission decision lives in the pipeline (``webhook.pipeline``); this
module only moves bytes. It needs two things of the admitter — ``handle_body(body)`` and
``ready`` — so the same server runs the real pipeline, a benchmark's floor and a test's
stand-in. What it adds is what a webhook in the path of every Pod creation must guarantee:

- bodies are read with a size limit enforced while streaming: an oversized body is refused
  with HTTP 400 (a JSON ``{"error": ...}``) before it has all been read;
- bad input gets 400 from the admitter; an internal error becomes a logged JSON 500, never a
  crash or a dropped connection;
- ``/healthz`` (alive), ``/readyz`` (policies loaded), ``/metrics`` (Prometheus);
- TLS only, TLS 1.2 minimum, with the certificate reloaded in place (``webhook.tls``).

The admitter runs on ONE worker thread: calls are serialized (gang bookkeeping never sees two
admissions at once) and a slow decision never stalls the event loop, so probes still answer.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, Protocol

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gputopo.cluster.reservations import run_by
from webhook.metrics import LATENCY, REQUESTS
from webhook.tls import CertificateReloader

log = logging.getLogger(__name__)

#: The API server refuses request bodies above 3 MiB and etcd objects above 1.5 MiB, so an
#: AdmissionReview of a real Pod stays well under this; anything bigger is not from it.
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
DEFAULT_PORT = 8443
#: Idle keep-alive connections are kept longer than the API server's client keeps them
#: (client-go's transport: IdleConnTimeout 90 s), so the CLIENT always closes first. With
#: uvicorn's default of 5 s the server closes a connection the API server is about to reuse,
#: and that admission fails with "EOF" (knative/pkg#1509, kubernetes#127335).
KEEP_ALIVE_SECONDS = 120
ADMISSION_API_VERSION = "admission.k8s.io/v1"
#: Seconds from a review's arrival by which its calls to the API server must end: the
#: webhook's timeoutSeconds is 5, and admissions run one at a time, so one that queued
#: behind slow ones (API server slow) must not start a full budget of its own.
ADMISSION_BUDGET_SECONDS = 4.0


class Admitter(Protocol):
    """What the server needs of the admission pipeline (``webhook.pipeline.Admitter``)."""

    @property
    def ready(self) -> bool:
        """True once policies are loaded: only then may the API server send reviews."""
        ...

    def handle_body(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """HTTP status and JSON answer for one raw AdmissionReview body: 200 and a review
        response, or 400 and ``{"error": ...}`` for bad input."""
        ...


class BodyTooLarge(Exception):
    """A request body over the limit; carries the message the client gets."""


def create_app(
    admitter: Admitter,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    enable_noop: bool = False,
) -> FastAPI:
    """The ASGI app of the webhook.

    ``enable_noop`` adds ``POST /noop``, which parses the review and allows it untouched: the
    floor the latency benchmark measures the real pipeline against, on the same server.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="admitter")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="gputopo admission webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        started = time.perf_counter()
        answer_by = time.monotonic() + ADMISSION_BUDGET_SECONDS
        try:
            body = await read_body(request, max_body_bytes)
        except BodyTooLarge as exc:
            REQUESTS.labels(outcome="bad_request").inc()
            return _error(400, str(exc), close=True)
        try:
            loop = asyncio.get_running_loop()
            status, payload = await loop.run_in_executor(
                executor, run_by, answer_by, admitter.handle_body, body)
        except RecursionError:
            # Only the input's nesting depth drives recursion this deep (a real Pod nests
            # ~20 levels): bad input, not a bug of ours.
            log.warning("refused a review nested too deeply for the pipeline (RecursionError)")
            REQUESTS.labels(outcome="bad_request").inc()
            return _error(400, "request body nests too deeply to be a Kubernetes object")
        except Exception:
            log.exception("admission failed on an internal error")
            REQUESTS.labels(outcome="error").inc()
            return _error(500, "internal error while admitting; see the webhook's log")
        # REQUESTS of answered reviews are the admitter's to count: only it can tell
        # "skipped" (out of scope) from "unchanged". The server counts what never reached it.
        LATENCY.observe(time.perf_counter() - started)
        return JSONResponse(payload, status_code=status)

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        if admitter.ready:
            return JSONResponse({"status": "ready"})
        return JSONResponse(
            {"status": "not ready: policies (or cluster view) not loaded"}, status_code=503
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    if enable_noop:

        @app.post("/noop")
        async def noop(request: Request) -> Response:
            try:
                body = await read_body(request, max_body_bytes)
            except BodyTooLarge as exc:
                return _error(400, str(exc), close=True)
            try:
                uid = json.loads(body)["request"]["uid"]
            except (ValueError, TypeError, KeyError):
                return _error(400, "not an AdmissionReview with request.uid")
            return JSONResponse(
                {
                    "apiVersion": ADMISSION_API_VERSION,
                    "kind": "AdmissionReview",
                    "response": {"uid": uid, "allowed": True},
                }
            )

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> Response:
        log.error("internal error", exc_info=exc)
        return _error(500, "internal error; see the webhook's log")

    return app


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with :class:`BodyTooLarge` as soon as it passes ``limit``
    (at once when Content-Length already says so), without reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {int(declared)} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, message: str, *, close: bool = False) -> Response:
    """A JSON error answer; ``close`` ends the connection (its unread body is abandoned)."""
    headers = {"connection": "close"} if close else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _TLSConfig(uvicorn.Config):
    """uvicorn's Config serving with OUR SSLContext (the one :class:`CertificateReloader`
    reloads), instead of building its own from file names once.

    uvicorn builds ``self.ssl`` in :meth:`load` and passes it to ``create_server``; setting
    it right after is all it takes, and works on uvicorn versions without
    ``ssl_context_factory``.
    """

    def __init__(self, app: Any, *, ssl_context: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._ssl_context = ssl_context

    def load(self) -> None:
        super().load()
        self.ssl = self._ssl_context


class WebhookServer:
    """The app served over HTTPS only, with the certificate reloader on the same loop.

    :meth:`bind` takes the port at once (``port=0``: any free port, see :attr:`port`);
    :meth:`serve` runs until :meth:`stop`. There is no plaintext listener, ever.
    """

    def __init__(
        self,
        app: FastAPI,
        tls: CertificateReloader,
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        log_level: str = "info",
    ) -> None:
        self.tls = tls
        self.host = host
        self._requested_port = port
        self._socket: socket.socket | None = None
        config = _TLSConfig(
            app,
            ssl_context=tls.context,
            host=host,
            port=port,
            http="h11",
            lifespan="on",
            access_log=False,
            server_header=False,
            log_level=log_level,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)

    def bind(self) -> socket.socket:
        """Bind the listening socket (idempotent)."""
        if self._socket is None:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only
            # when the socket's proto says TCP; with proto 0, Nagle and delayed ACKs add
            # ~40 ms to every response (measured: 44 ms -> 1.7 ms per request).
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.host, self._requested_port))
            except OSError:
                sock.close()
                raise
            # Listen at once: a client that connects before uvicorn starts accepting (the
            # start-up message is printed first, and the heap is frozen after it) waits in
            # the backlog instead of being refused.
            sock.listen(2048)
            sock.set_inheritable(True)
            self._socket = sock
        return self._socket

    @property
    def port(self) -> int:
        """The port actually listened on."""
        return int(self.bind().getsockname()[1])

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    async def serve(self) -> None:
        """Serve until stopped; certificate reloads run alongside on this loop."""
        sock = self.bind()
        # Everything built so far (policies, the cluster view, topology caches) lives as
        # long as the process: move it out of the collector's sight, so the full
        # collections that admissions trigger stop rescanning it. Measured with
        # bench/admission.py at 200 req/s: p99 about 1.8x lower (docs/benchmarks.md).
        gc.collect()
        gc.freeze()
        reloader = asyncio.create_task(self.tls.run(), name="certificate-reloader")
        log.info("serving HTTPS on %s:%d", self.host, self.port)
        try:
            await self._server.serve(sockets=[sock])
        finally:
            reloader.cancel()
            sock.close()

    def stop(self) -> None:
        """Ask the server to finish (safe from another thread)."""
        self._server.should_exit = True
