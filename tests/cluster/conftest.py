"""Fixtures for the cluster tests: the Kubernetes API test double and clients for it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # the double is a package under tests/
    sys.path.insert(0, str(TESTS))

from k8s_double import KubeApiDouble, api_client  # noqa: E402


@pytest.fixture
def kube_client(kube: KubeApiDouble) -> Iterator[client.ApiClient]:
    """The official client pointed at the double."""
    ac = api_client(kube.url)
    try:
        yield ac
    finally:
        ac.close()


@pytest.fixture(scope="module")
def two_replicas() -> Iterator[dict]:
    """One double per test module for the random two-replica sequences of the feed tests
    (feed_helpers.two_replicas_on_a_double): hypothesis runs every example on it."""
    from feed_helpers import two_replicas_on_a_double

    yield from two_replicas_on_a_double()
