"""The webhook server process of the admission benchmark: what ``gputopo serve --cluster``
builds, plus the ``/noop`` floor route.

Why not ``gputopo serve`` itself: the command has no switch for ``/noop`` (the route exists
in ``webhook.server.create_app(enable_noop=True)`` for exactly this benchmark). Everything
else is built the way ``webhook.server_commands`` builds it: the shipped policies through
``webhook.assembly.build_admitter``, the placement step from ``placement_step_for`` (an
in-memory reservation store for a fixed cluster), a ``CertificateReloader`` on the
certificate directory and ``WebhookServer`` (TLS only, 1.2+).

Usage: ``python bench/admission_server.py --objects CLUSTER.json --cert-dir DIR``; prints
``{"port": N, "nodes": K}`` on stdout once it listens, serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path

from gputopo.cluster.snapshot import ClusterSnapshot
from webhook.assembly import build_admitter
from webhook.placement.step import placement_step_for
from webhook.server import WebhookServer, create_app
from webhook.tls import CertificateReloader


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=Path, required=True, help="JSON list of cluster objects")
    ap.add_argument("--cert-dir", type=Path, required=True)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    cluster = ClusterSnapshot.from_objects(json.loads(args.objects.read_text()),
                                           source=str(args.objects))
    nodes = len(cluster.node_states())  # parsed now, as a watch-fed view would have it
    admitter = build_admitter(None, cluster, placement=placement_step_for(cluster))
    server = WebhookServer(create_app(admitter, enable_noop=True), CertificateReloader(
        args.cert_dir), host="127.0.0.1", port=args.port, log_level="warning")
    server.bind()
    loop = asyncio.new_event_loop()
    loop.add_signal_handler(signal.SIGTERM, server.stop)
    print(json.dumps({"port": server.port, "nodes": nodes,
                      "startup_s": round(time.perf_counter() - started, 2)}), flush=True)
    try:
        loop.run_until_complete(server.serve())
    finally:
        admitter.close()
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
