"""The API TEST DOUBLE in its own process, for tests with several processes (webhook
replicas, drills that kill things): start it, learn its URL, drive its knobs over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]


@dataclass
class DoubleProcess:
    url: str
    process: subprocess.Popen[str]

    def _post(self, what: str) -> Any:
        req = urllib.request.Request(f"{self.url}/_double/{what}", method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def compact(self) -> int:
        """Forget history: watches from older resourceVersions get 410 Gone."""
        return int(self._post("compact")["resourceVersion"])

    def set_latency(self, seconds: float) -> None:
        self._post(f"latency?seconds={seconds}")

    def set_down(self, mode: str | None) -> None:
        """``"503"`` or None (``"refuse"`` needs the in-process double, or kill the process)."""
        self._post(f"down?mode={mode or ''}")

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.url}/_double/stats", timeout=5) as resp:
            return json.loads(resp.read())


@contextmanager
def double_process(*, bookmark_interval: float = 1.0) -> Iterator[DoubleProcess]:
    """``python -m k8s_double`` on a free port; terminated on exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "k8s_double", "--bookmark-interval", str(bookmark_interval)],
        cwd=TESTS, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        port = json.loads(proc.stdout.readline())["port"]
        yield DoubleProcess(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
