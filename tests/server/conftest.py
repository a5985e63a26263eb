"""Fixtures of the server tests: one real webhook server over TLS per session.

Helpers live in ``serverkit.py``; tests talk real HTTPS to the server with httpx.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from serverkit import RunningServer, StandInAdmitter, make_pair, project_secret, start_server


@pytest.fixture(scope="session")
def standin_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The server around the stand-in admitter: TLS, limits, probes, metrics."""
    work = tmp_path_factory.mktemp("certs-standin")
    files = make_pair(work / "made")
    secret = work / "secret"
    project_secret(secret, files)
    running = start_server(StandInAdmitter(), secret, work / "made" / "ca.crt", enable_noop=True)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def standin_client(standin_server: RunningServer) -> Iterator[httpx.Client]:
    with standin_server.client() as client:
        yield client
