"""Suite-wide settings: hypothesis profiles bounded for a 2-core CI machine; the ``kube``
fixture every folder that talks to the Kubernetes API TEST DOUBLE uses."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # the Kubernetes API test double is a package under tests/
    sys.path.insert(0, str(TESTS))

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def kube() -> Iterator[Any]:
    """A fresh Kubernetes API TEST DOUBLE (tests/k8s_double) on a free loopback port, with
    gputopo's namespace."""
    from k8s_double import running_double

    with running_double() as api:
        yield api
