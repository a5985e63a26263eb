"""Open-loop HTTPS load for the admission benchmark, run as its own process.

Why a process of its own: the client's CPU must not be the server's CPU time (the GIL of one
process would mix both into the latencies). Why open loop: the API server sends a review
when a pod is created, whether or not the webhook has answered the previous one; a closed
loop (send, wait, send) slows down when the server does and hides its queueing. Request
``i`` is due at ``start + i / rate``; its latency is measured from that due time to the last
byte of the answer, so time spent waiting for a free connection counts (no coordinated
omission). ``service`` latency (send to answer) is reported too.

Why raw asyncio streams and hand-written HTTP/1.1: a client library's per-request overhead
on a 2-core machine is of the order of the server's; this client does one ``write`` and two
reads per request over keep-alive TLS connections, like the API server's HTTP/1.1 client.

Usage (what ``bench/admission.py`` runs): ``python bench/admission_load.py --port N --ca FILE
--path /mutate --rate 200 --duration 8 --connections 16 BODIES`` where BODIES holds one
AdmissionReview JSON per line; prints one JSON object with per-request timings summarised.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: The API server gives up on a webhook after its timeoutSeconds (5 in our manifests).
WEBHOOK_TIMEOUT_S = 5.0


@dataclass
class Sample:
    index: int
    due: float
    sent: float = 0.0
    done: float = 0.0
    status: int = 0
    error: str = ""


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return status, body


class Connection:
    """One keep-alive TLS connection; reconnects (counted) if the server closed it."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        self.host, self.port, self.context = host, port, context
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.connects = 0

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.context, server_hostname="localhost")
        self.connects += 1

    async def request(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None or self.writer.is_closing():
            await self.open()
        assert self.reader is not None and self.writer is not None
        head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        await self.writer.drain()
        status, payload = await _read_response(self.reader)
        return status, payload


async def run(host: str, port: int, context: ssl.SSLContext, path: str, bodies: list[bytes],
              rate: float, connections: int, drain_s: float) -> tuple[list[Sample], float, int]:
    """Send ``bodies`` at ``rate`` per second; (samples, wall seconds, connects)."""
    conns = [Connection(host, port, context) for _ in range(connections)]
    await asyncio.gather(*(c.open() for c in conns))
    queue: asyncio.Queue[Sample | None] = asyncio.Queue()
    samples = [Sample(i, 0.0) for i in range(len(bodies))]

    async def worker(conn: Connection) -> None:
        while True:
            sample = await queue.get()
            if sample is None:
                return
            sample.sent = time.perf_counter()
            try:
                sample.status, _ = await conn.request(path, bodies[sample.index])
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError, ValueError) as exc:
                sample.error = type(exc).__name__
                if conn.writer is not None:
                    conn.writer.close()
                conn.writer = None
            sample.done = time.perf_counter()

    workers = [asyncio.create_task(worker(c)) for c in conns]
    start = time.perf_counter() + 0.05
    for sample in samples:
        sample.due = start + sample.index / rate
    i = 0
    while i < len(samples):
        now = time.perf_counter()
        while i < len(samples) and samples[i].due <= now:
            queue.put_nowait(samples[i])
            i += 1
        if i < len(samples):
            await asyncio.sleep(max(0.0, samples[i].due - time.perf_counter()))
    for _ in workers:
        queue.put_nowait(None)
    try:
        await asyncio.wait_for(asyncio.gather(*workers), timeout=drain_s)
    except TimeoutError:
        for w in workers:
            w.cancel()
    wall = time.perf_counter() - start
    for c in conns:
        if c.writer is not None:
            c.writer.close()
    return samples, wall, sum(c.connects for c in conns)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def summarise(samples: list[Sample], wall: float, connects: int,
              kinds: list[str] | None = None) -> dict[str, object]:
    """Throughput, latency percentiles (ms, from due time), errors; per kind when given."""
    done = [s for s in samples if s.done and not s.error]

    def stats(group: list[Sample]) -> dict[str, float]:
        lat = sorted((s.done - s.due) * 1000 for s in group)
        svc = sorted((s.done - s.sent) * 1000 for s in group)
        return {"n": len(group), "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
                "p99_ms": percentile(lat, 99), "max_ms": lat[-1] if lat else 0.0,
                "service_p50_ms": percentile(svc, 50), "service_p99_ms": percentile(svc, 99)}

    out: dict[str, object] = {
        "sent": len(samples), "answered": len(done),
        "errors": sum(1 for s in samples if s.error),
        "unanswered": sum(1 for s in samples if not s.done),
        "over_timeout": sum(1 for s in done if s.done - s.due > WEBHOOK_TIMEOUT_S),
        "status": {str(k): sum(1 for s in done if s.status == k)
                   for k in sorted({s.status for s in done})},
        "throughput_per_s": len(done) / wall if wall > 0 else 0.0,
        "wall_s": wall, "connects": connects, "all": stats(done),
    }
    if kinds is not None:
        out["by_kind"] = {k: stats([s for s in done if kinds[s.index] == k])
                          for k in sorted(set(kinds))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ca", type=Path, required=True, help="CA that signed the server's cert")
    ap.add_argument("--path", default="/mutate")
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--drain", type=float, default=15.0,
                    help="seconds to wait for answers after the last request is due")
    ap.add_argument("--kinds", type=Path, help="one request kind per line, for by_kind")
    ap.add_argument("bodies", type=Path, help="one AdmissionReview JSON per line")
    args = ap.parse_args(argv)
    bodies = [line.encode() for line in args.bodies.read_text().splitlines() if line]
    kinds = args.kinds.read_text().split() if args.kinds else None
    context = ssl.create_default_context(cafile=str(args.ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    samples, wall, connects = asyncio.run(run(
        args.host, args.port, context, args.path, bodies, args.rate, args.connections,
        args.drain))
    print(json.dumps(summarise(samples, wall, connects, kinds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
