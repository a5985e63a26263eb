"""Fixtures for the device plugin tests: the DGX-1 through fake NVML, the API test double,
a short socket directory and the fake kubelet."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # the API double is a package under tests/
    sys.path.insert(0, str(TESTS))

from fake_kubelet import FakeKubelet  # noqa: E402
from k8s_double import KubeApiDouble, api_client  # noqa: E402
from plugin_kit import POD_RESOURCES, SEED, FixtureNvml, fixture_topology  # noqa: E402

from gputopo.cli import main  # noqa: E402
from gputopo.topology.model import Topology  # noqa: E402
from gputopo.topology.nvml import topology_from_nvml  # noqa: E402
from gputopo.yamlio import load_documents_text  # noqa: E402


@pytest.fixture
def dgx1() -> Topology:
    """The DGX-1 as the plugin sees it: through (fake) NVML, from the fixture's wiring."""
    return topology_from_nvml(FixtureNvml(fixture_topology("dgx1-v100.txt")))



@pytest.fixture
def core(kube: KubeApiDouble) -> Iterator[client.CoreV1Api]:
    ac = api_client(kube.url)
    try:
        yield client.CoreV1Api(ac)
    finally:
        ac.close()


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory: UNIX socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(socket_dir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(socket_dir, pod_resources=socket_dir / POD_RESOURCES).start()
    try:
        yield k
    finally:
        k.stop()




@pytest.fixture(scope="session")
def seed_workers() -> list[dict]:
    """The four worker pods exactly as the webhook's dry run mutates them."""
    import contextlib
    import io
    from pathlib import Path

    out = io.StringIO()
    root = Path(__file__).resolve().parents[2]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["mutate", str(root / SEED)]) == 0
    pods = [p for p in load_documents_text(out.getvalue()) if "-worker-" in p["metadata"]["name"]]
    assert len(pods) == 4
    return sorted(pods, key=lambda p: p["metadata"]["name"])
