"""The embedded demo cluster: what ``gputopo serve`` and ``mutate`` use without a cluster.

Why a packaged cluster file rather than code: it is exactly the format users write for
``--cluster``, so the demo doubles as the worked example of one.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from gputopo.cluster.snapshot import ClusterSnapshot


def demo_cluster_path() -> Path:
    """Path of the packaged demo cluster file (two 8x V100 DGX-1 nodes)."""
    return Path(str(resources.files("gputopo.cluster") / "data" / "demo-cluster.yaml"))


def demo_snapshot() -> ClusterSnapshot:
    """A fresh snapshot of the demo cluster."""
    return ClusterSnapshot.from_file(demo_cluster_path())


def cluster_or_demo(path: str | Path | None) -> ClusterSnapshot:
    """The cluster file ``path``, or the demo cluster with one line on stderr saying so:
    what every command taking ``--cluster`` does when it is not given."""
    if path is not None and str(path):
        return ClusterSnapshot.from_file(path)
    print("gputopo: no --cluster given: using the embedded demo cluster "
          "(two 8x V100 DGX-1 nodes)", file=sys.stderr)
    return demo_snapshot()
