"""The first-hour tests run the real command line on files written here; the Kubernetes
API test double (a package under tests/) backs ``gputopo nodes --live``."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # the double is a package under tests/
    sys.path.insert(0, str(TESTS))
