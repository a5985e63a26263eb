"""The command line as a whole: every contract command exists, and a closed pipe is quiet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputopo.cli import build_parser

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [
    ["serve"], ["mutate", "x.yaml"], ["policy", "test", "policies"],
    ["topology", "parse", "f"], ["topology", "explain", "--topology", "f", "--gpus", "0"],
    ["place", "--cluster", "f", "--replicas", "1", "--gpus-per-replica", "1"],
    ["generate", "scheduler-config"], ["generate", "manifests"], ["generate", "certs"],
])
def test_every_contract_command_is_registered(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert callable(args.func)


def test_output_into_a_closed_pipe_is_not_an_error() -> None:
    """`gputopo topology parse F | true`: the reader is gone before the first write (the
    interpreter takes far longer to start than the reader to exit); no traceback, exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputopo", "topology", "parse",
         str(REPO / "tests" / "fixtures" / "topologies" / "dgx-a100.txt")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err
