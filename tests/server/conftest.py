"""Fixtures of the server tests: real webhook servers over TLS, one of each per session.

``real_server`` runs the real admission pipeline; ``standin_server`` runs a stand-in
admitter, for what only the server decides (probes, limits, TLS, the internal-error path).
Helpers live in ``serverkit.py``; tests talk real HTTPS to the servers with httpx.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serverkit import (
    SEED_RESOURCES,
    RunningServer,
    StandInAdmitter,
    make_pair,
    project_secret,
    start_server,
)

from gputopo import yamlio
from gputopo.cluster.demo import demo_snapshot
from webhook.assembly import build_admitter, default_policies_dir
from webhook.placement.step import placement_step_for


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


@pytest.fixture(scope="session")
def seed_pods() -> dict[str, dict[str, Any]]:
    """The seed's pods by name (master, worker), as the training operator creates them."""
    docs = yamlio.load_documents(SEED_RESOURCES)
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Pod"}


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The server around the REAL pipeline, assembled the way ``gputopo serve`` does: the
    shipped policies, the demo cluster plus the seed's Namespace and PyTorchJob, the
    placement step with an in-memory reservation store."""
    cluster = demo_snapshot()
    for doc in yamlio.load_documents(SEED_RESOURCES):
        if doc["kind"] != "Pod":
            cluster.add(doc)
    admitter = build_admitter(
        default_policies_dir(), cluster, placement=placement_step_for(cluster)
    )
    work = tmp_path_factory.mktemp("certs-real")
    project_secret(work / "secret", make_pair(work / "made"))
    running = start_server(admitter, work / "secret", work / "made" / "ca.crt")
    yield running
    running.stop()
    admitter.close()


@pytest.fixture(scope="session")
def real_client(real_server: RunningServer) -> Iterator[httpx.Client]:
    with real_server.client() as client:
        yield client
