"""Fixtures of the placement tests; the named topologies live in solver_helpers.py."""

from __future__ import annotations

import pytest
from solver_helpers import dgx1_v100, node

from gputopo.placement.types import NodeState


@pytest.fixture
def two_dgx1() -> list[NodeState]:
    """The seeds' cluster: two empty DGX-1 V100 nodes in one rack."""
    return [node("dgx1-a", dgx1_v100()), node("dgx1-b", dgx1_v100())]
