"""Helpers for the first-hour tests: the real command line on files written here."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEEDS = Path("/work/shared/seeds")


@pytest.fixture
def repo() -> Path:
    return REPO
