"""Fixtures of the hardening tests: the real pipeline behind the real HTTPS server.

The server helpers come from ``tests/server/serverkit.py`` and the shared builders from
``admitkit.py`` (also used by ``tests/drills``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS / "server", TESTS / "hardening", TESTS):  # serverkit, admitkit, k8s_double
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from admitkit import FUZZ_JOBS, client_for, cluster_with, real_server  # noqa: E402
from serverkit import RunningServer  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One real webhook per test module (the demo cluster, two opted-in test jobs)."""
    with real_server(cluster_with(*FUZZ_JOBS), tmp_path_factory.mktemp("hardening")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with client_for(server) as c:
        yield c
