"""Fixtures of the failure drills: the Kubernetes API TEST DOUBLE, the live cluster view on
it, and the real webhook over HTTPS in front of them.

Helpers: ``drillkit.py`` here, ``tests/hardening/admitkit.py`` (reviews, jobs, the real
server) and ``tests/server/serverkit.py`` (certificates as a mounted Secret).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS / "server", TESTS / "hardening", TESTS / "drills", TESTS):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from k8s_double import KubeApiDouble, running_double  # noqa: E402


@pytest.fixture
def kube() -> Iterator[KubeApiDouble]:
    """A fresh API test double on a free loopback port, with gputopo's namespace."""
    with running_double() as api:
        yield api
