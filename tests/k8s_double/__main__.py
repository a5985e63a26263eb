"""Run the Kubernetes API TEST DOUBLE as its own process (multi-process tests and drills).

``python -m k8s_double [--port N]``: prints ``{"port": N, "pid": P}`` on one line, then
serves until SIGTERM/SIGINT. Knobs: POST /_double/compact, /_double/latency?seconds=S,
/_double/down?mode=503 (empty mode: back up); GET /_double/stats.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from k8s_double.server import KubeApiDouble


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="k8s_double", description=__doc__)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--bookmark-interval", type=float, default=1.0)
    args = ap.parse_args(argv)
    api = KubeApiDouble(port=args.port, bookmark_interval=args.bookmark_interval).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print(json.dumps({"port": api.port, "pid": os.getpid()}), flush=True)
    done.wait()
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
