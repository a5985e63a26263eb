"""The placement queue tests' imports: the Kubernetes API TEST DOUBLE (its ``kube`` fixture
is tests/conftest.py's), and the placement tests' job/pod builders."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS, TESTS / "placement_step"):  # k8s_double; placement_jobs, checks
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
