"""Imports of the failure drills: the Kubernetes API TEST DOUBLE (its ``kube`` fixture is
tests/conftest.py's), the live cluster view on it, and the real webhook over HTTPS in front
of them.

Helpers: ``drillkit.py`` here, ``tests/hardening/admitkit.py`` (reviews, jobs, the real
server) and ``tests/server/serverkit.py`` (certificates as a mounted Secret).
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS / "server", TESTS / "hardening", TESTS / "drills", TESTS):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
