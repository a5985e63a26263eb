"""Fixtures for the placement queue tests: the Kubernetes API TEST DOUBLE with the demo
cluster (the seeds' two DGX-1 nodes), and the placement tests' job/pod builders."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS, TESTS / "placement_step"):  # k8s_double; placement_jobs, checks
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from k8s_double import KubeApiDouble, running_double  # noqa: E402


@pytest.fixture
def kube() -> Iterator[KubeApiDouble]:
    with running_double() as api:
        yield api
