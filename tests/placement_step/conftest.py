"""Fixtures for end-to-end admission tests with gang placement.

Everything goes through ``gputopo mutate`` (``gputopo.cli.main``) with the packaged demo
cluster — the seeds' two DGX-1 V100 nodes — as the cluster file: real YAML in, real YAML or
JSON patches out. Nothing of our own is mocked. The multi-process tests run real webhook
processes (``placement_worker.py``) against the Kubernetes API TEST DOUBLE.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.demo import demo_cluster_path
from gputopo.topology.model import Topology
from gputopo.yamlio import dump_documents, load_documents, load_documents_text


@dataclass
class MutateResult:
    rc: int
    docs: list[Any]
    stderr: str

    @property
    def pods(self) -> dict[str, dict[str, Any]]:
        """Output pods by name; a later pod of the same name (a recreation) wins."""
        return {d["metadata"].get("name"): d for d in self.docs
                if isinstance(d, dict) and d.get("kind") == "Pod"}


Mutate = Callable[..., MutateResult]


@pytest.fixture
def demo_topologies() -> dict[str, Topology]:
    """node name → Topology, read from the demo cluster file itself."""
    out = {}
    for doc in load_documents(demo_cluster_path()):
        if doc.get("kind") == "Node":
            ann = doc["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION]
            out[doc["metadata"]["name"]] = Topology.from_annotation(ann)
    return out


@pytest.fixture
def mutate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Mutate:
    """Run ``gputopo mutate`` on objects (written to a file, in order); parse its output."""
    counter = iter(range(1_000_000))

    def run(objects: Sequence[dict[str, Any]], *extra: str, output: str = "yaml",
            cluster: Path | None = None) -> MutateResult:
        path = tmp_path / f"input-{next(counter)}.yaml"
        path.write_text(dump_documents(objects))
        capsys.readouterr()
        rc = main(["mutate", "--cluster", str(cluster or demo_cluster_path()),
                   "-o", output, *extra, str(path)])
        out = capsys.readouterr()
        docs = load_documents_text(out.out, source="stdout") if out.out.strip() else []
        return MutateResult(rc=rc, docs=[d for d in docs if d is not None], stderr=out.err)

    return run


TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # the Kubernetes API test double is a package under tests/
    sys.path.insert(0, str(TESTS))
