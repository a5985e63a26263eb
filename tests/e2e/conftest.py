"""Fixtures of the end-to-end tests: the real Kubernetes programs (``../shared/k8s``), what
``gputopo generate`` writes for a deployment (a Kubernetes API TEST DOUBLE per test:
``kube``, from tests/conftest.py).

Without the programs every test here is skipped with one line saying what to provide.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
if str(TESTS) not in sys.path:  # k8s_double
    sys.path.insert(0, str(TESTS))

from harness import Deployment, Programs, find_programs, make_deployment  # noqa: E402


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip every test here, from this one place, when the programs are missing: pytest
    then folds the skips into one line of its summary (a fixture's skip would be reported
    at each test's own line)."""
    found = find_programs()
    if isinstance(found, str):
        pytest.skip(found)


@pytest.fixture(scope="session")
def k8s_bin() -> Path:
    found = find_programs()
    assert isinstance(found, Path)
    return found


@pytest.fixture(scope="session")
def programs(k8s_bin: Path) -> Programs:
    return Programs(k8s_bin)


class _Deployments(dict):
    """Per platform, made on first use (a run of some tests makes only the platforms they
    use): each ``gputopo generate`` call is a process of about a second."""

    def __init__(self, work: Path) -> None:
        super().__init__()
        self.work = work

    def __missing__(self, name: str) -> Deployment:
        self[name] = made = make_deployment(self.work, name)
        return made


@pytest.fixture(scope="session")
def deployments(tmp_path_factory: pytest.TempPathFactory, programs: Programs
                ) -> dict[str, Deployment]:
    """Per platform (``ack``, ``tke``, ``dra``, ...): the MutatingWebhookConfiguration, the
    KubeSchedulerConfiguration and the policies ``gputopo generate`` writes; each platform
    its own CA (``generate certs``)."""
    del programs  # only made when the programs exist (else skipped before any work)
    return _Deployments(tmp_path_factory.mktemp("deploy"))
