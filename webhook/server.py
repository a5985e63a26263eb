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

The admitter runs on ONE worker thread (``webhook.admitter_thread``): calls are serialized
(gang bookkeeping never sees two admissions at once) and a slow decision never stalls the
event loop, so probes still answer.
Reviews that can be answered without waiting and without side effects (bad input, out of
scope by what the cluster view holds in memory) are answered on the event loop itself
(``Admitter.answer_at_once``); everything that mutates a pod or touches reservations still
goes to the one admitter thread.

Why ``POST /mutate`` (and the benchmark's ``POST /noop``) are plain ASGI handlers in front
of FastAPI: every admission pays for the framework's request machinery — eight middleware
layers, routing, dependency solving, a Request object, a JSONResponse — about 0.1 ms of CPU
on the event loop per review in a py-spy profile (``git show 5b1c38e:docs/benchmarks.md``,
"Where the CPU goes"), for two routes that only move bytes in and out. Everything else (the
probes, ``/metrics``, 404/405 answers, the exception handler, the lifespan that shuts the
admitter down) stays FastAPI.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gputopo.cluster.reservations import run_by
from webhook.admitter_thread import AdmitterThread
from webhook.metrics import LATENCY, REQUESTS
from webhook.review import decode_json
from webhook.tls import CertificateReloader

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

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


#: Bodies up to this size may be decided on the event loop (``answer_at_once``): parsing
#: one costs well under a millisecond. A bigger one (a real Pod review is a few KiB) is
#: parsed on the admitter thread, so the loop never stalls on a huge body.
AT_ONCE_MAX_BYTES = 64 * 1024


class Admitter(Protocol):
    """What the server needs of the admission pipeline (``webhook.pipeline.Admitter``).

    Optional, used when present: ``answer_at_once(body)`` returns the answer when it is
    ready without waiting (out of scope, bad input) or a parsed request (with what was
    read to find it in scope), which the server then passes to ``handle_request(request)``
    on the admitter thread.
    """

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


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


def create_app(
    admitter: Admitter,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    enable_noop: bool = False,
) -> ASGIApp:
    """The ASGI app of the webhook.

    ``enable_noop`` adds ``POST /noop``, which parses the review and allows it untouched: the
    floor the latency benchmark measures the real pipeline against, on the same server and
    through the same plain ASGI path as ``/mutate``.
    """
    worker = AdmitterThread("admitter")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        worker.shutdown()

    api = FastAPI(
        title="gputopo admission webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )

    async def mutate(scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        answer_by = time.monotonic() + ADMISSION_BUDGET_SECONDS
        try:
            body = await read_asgi_body(scope, receive, max_body_bytes)
        except BodyTooLarge as exc:
            REQUESTS.labels(outcome="bad_request").inc()
            await send_json(send, 400, {"error": str(exc)}, close=True)
            return
        try:
            at_once = getattr(admitter, "answer_at_once", None)
            answer = at_once(body) if at_once and len(body) <= AT_ONCE_MAX_BYTES else None
            if isinstance(answer, tuple):
                status, payload = answer
            else:
                if answer is None:
                    call, arg = admitter.handle_body, body
                else:  # parsed, in scope: mutations and steps on the admitter thread
                    call, arg = admitter.handle_request, answer  # type: ignore[attr-defined]
                status, payload = await worker.run(run_by, answer_by, call, arg)
        except RecursionError:
            # Only the input's nesting depth drives recursion this deep (a real Pod nests
            # ~20 levels): bad input, not a bug of ours.
            log.warning("refused a review nested too deeply for the pipeline (RecursionError)")
            REQUESTS.labels(outcome="bad_request").inc()
            await send_json(send, 400, {
                "error": "request body nests too deeply to be a Kubernetes object"})
            return
        except Exception:
            log.exception("admission failed on an internal error")
            REQUESTS.labels(outcome="error").inc()
            await send_json(send, 500, {
                "error": "internal error while admitting; see the webhook's log"})
            return
        # REQUESTS of answered reviews are the admitter's to count: only it can tell
        # "skipped" (out of scope) from "unchanged". The server counts what never reached it.
        LATENCY.observe(time.perf_counter() - started)
        await send_json(send, status, payload)

    async def noop(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_asgi_body(scope, receive, max_body_bytes)
        except BodyTooLarge as exc:
            await send_json(send, 400, {"error": str(exc)}, close=True)
            return
        try:
            uid = decode_json(body)["request"]["uid"]
        except (ValueError, TypeError, KeyError, RecursionError):
            await send_json(send, 400, {"error": "not an AdmissionReview with request.uid"})
            return
        await send_json(send, 200, {
            "apiVersion": ADMISSION_API_VERSION,
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True},
        })

    fast: dict[str, Callable[[Scope, Receive, Send], Awaitable[None]]] = {"/mutate": mutate}
    if enable_noop:
        fast["/noop"] = noop

    @api.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @api.get("/readyz")
    async def readyz() -> Response:
        if admitter.ready:
            return JSONResponse({"status": "ready"})
        return JSONResponse(
            {"status": "not ready: policies (or cluster view) not loaded"}, status_code=503
        )

    @api.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @api.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> Response:
        log.error("internal error", exc_info=exc)
        return _error(500, "internal error; see the webhook's log")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        handler = fast.get(scope.get("path", "")) if scope["type"] == "http" else None
        if handler is None:
            await api(scope, receive, send)
        elif scope["method"] != "POST":
            await send_json(send, 405, {"detail": "Method Not Allowed"},
                            headers=[(b"allow", b"POST")])
        else:
            try:
                await handler(scope, receive, send)
            except ClientGone:
                return  # nobody to answer
            except Exception:  # a bug of ours: logged, and a JSON 500 if nothing was sent
                log.exception("internal error")
                with contextlib.suppress(Exception):
                    await send_json(send, 500, {"error": "internal error; see the webhook's log"})

    return app


async def read_asgi_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, refused with :class:`BodyTooLarge` as soon as it passes ``limit``
    (at once when Content-Length already says so), without reading the rest."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            if value.isdigit() and int(value) > limit:
                raise BodyTooLarge(
                    f"request body of {int(value)} bytes exceeds the limit of {limit}")
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def encode_json(payload: Any) -> bytes:
    """``payload`` as JSON bytes: orjson, or what Starlette's JSONResponse writes when orjson
    refuses a value (raising as it would on what JSON cannot carry)."""
    try:
        return orjson.dumps(payload)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(payload, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")


async def send_json(send: Send, status: int, payload: Any, *, close: bool = False,
                    headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """One complete JSON response; ``close`` ends the connection (its unread body is
    abandoned)."""
    body = encode_json(payload)
    head = [(b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode())]
    if close:
        head.append((b"connection", b"close"))
    if headers:
        head.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


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


class _QuietServer(uvicorn.Server):
    """uvicorn's Server, waking once a second while idle instead of ten times.

    Why: uvicorn's main loop sleeps 0.1 s between ticks that refresh the ``Date`` header
    (once a second) and look whether to stop. A webhook idles most of its life, and each of
    those wake-ups of an idle process costs far more than its few lines: 2.1 of the idle
    server's 2.7 ms of CPU a second here, 0.04 ms per review at 50 reviews/s
    (``git show 5b1c38e:docs/benchmarks.md``, "Idle wake-ups"). Here the tick sleeps a
    second (the header is refreshed on every tick, so it is as fresh as uvicorn's), and a
    stop — ours, or uvicorn's own signal handler — wakes it at once instead of within the
    tick. Each tick also adds the durations the reviews queued (``LATENCY``, a
    :class:`webhook.deferred_histogram.DeferredHistogram`) in one batch.
    """

    TICK_SECONDS = 1.0

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._ticker: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    async def main_loop(self) -> None:
        wake = asyncio.Event()
        self._ticker = (asyncio.get_running_loop(), wake)
        counter = 0  # on_tick refreshes the Date header when counter % 10 == 0: every tick
        while not await self.on_tick(counter):
            LATENCY.settle()  # the reviews' queued durations, added in one warm batch
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.TICK_SECONDS)

    def wake(self) -> None:
        """Have the main loop look at ``should_exit`` now (from any thread, or a signal
        handler: ``call_soon_threadsafe`` is safe in both)."""
        ticker = self._ticker
        if ticker is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                ticker[0].call_soon_threadsafe(ticker[1].set)

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self.wake()


class WebhookServer:
    """The app served over HTTPS only, with the certificate reloader on the same loop.

    :meth:`bind` takes the port at once (``port=0``: any free port, see :attr:`port`);
    :meth:`serve` runs until :meth:`stop`. There is no plaintext listener, ever.
    """

    def __init__(
        self,
        app: ASGIApp,
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
            # httptools (C) rather than h11 (pure Python) parses HTTP/1.1: 0.2-0.3 ms less
            # CPU per request on the /noop floor at 200 req/s (git show
            # 5b1c38e:docs/benchmarks.md, "Where the CPU goes")
            http="httptools",
            lifespan="on",
            access_log=False,
            # no X-Forwarded-* rewriting: nothing here reads the client address, and the
            # middleware costs every request (the API server connects directly anyway)
            proxy_headers=False,
            server_header=False,
            log_level=log_level,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            timeout_graceful_shutdown=5,
        )
        self._server = _QuietServer(config)

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
        # bench/admission.py at 200 req/s: p99 about 1.8x lower (git show
        # 5b1c38e:docs/benchmarks.md, "After the fact: a frozen heap, and how noisy this
        # machine is").
        gc.collect()
        gc.freeze()
        reloader = asyncio.create_task(self.tls.run(), name="certificate-reloader")
        log.info("serving HTTPS on %s:%d", self.host, self.port)
        try:
            await self._server.serve(sockets=[sock])
        finally:
            reloader.cancel()
            sock.close()

    def run(self) -> None:
        """:meth:`serve` on a new event loop until stopped."""
        asyncio.run(self.serve())

    def stop(self) -> None:
        """Ask the server to finish (safe from another thread)."""
        self._server.should_exit = True
        self._server.wake()
