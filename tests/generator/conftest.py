"""Fixtures for the generator tests: the repository's paths and a CLI runner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gputopo.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``gputopo`` in-process; returns (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run
