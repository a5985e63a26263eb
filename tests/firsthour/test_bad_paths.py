"""Unreadable or unwritable paths, anywhere on the command line: one line, exit 2, never a
traceback (issue 12: ``generate certs -o``, ``generate manifests -o``, ``mutate
--policies``, ``serve --policies`` raised tracebacks).

Two ways to make a path fail: under a regular file (fails for root too, in process), and a
directory without permissions, run as a process that cannot bypass them. Tests run as root
here, so that process drops the capabilities that let root ignore file modes
(``setpriv --bounding-set -dac_override,-dac_read_search``); skipped where that is not
possible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputopo.cli import main

REPO = Path(__file__).resolve().parents[2]
JOB = str(REPO / "examples" / "ack-pytorch.yaml")

# {P} is the failing path; every file and directory argument of every command
COMMANDS = [
    "generate certs -o {P}/certs",
    "generate manifests -o {P}/m",
    "generate manifests --policies {P}/pol -o {OUT}/m",
    "generate scheduler-config -o {P}/s.yaml",
    "generate scheduler-config --merge-into {P}/s.yaml",
    "mutate --policies {P}/pol " + JOB,
    "mutate --cluster {P}/c.yaml " + JOB,
    "mutate {P}/job.yaml",
    "place --cluster {P}/c.yaml --replicas 1 --gpus-per-replica 1",
    "place {P}/job.yaml",
    "policy test {P}/pol",
    "topology parse {P}/t.txt",
    "topology explain --topology {P}/t.txt --gpus 0,1",
    "nodes --cluster {P}/c.yaml",
]
SERVE = ["serve --policies {P}/pol", "serve --cluster {P}/c.yaml",
         "serve --cert-dir {P}/certs"]


def _argv(template: str, failing: Path, out: Path) -> list[str]:
    return template.replace("{P}", str(failing)).replace("{OUT}", str(out)).split()


@pytest.mark.parametrize("template", COMMANDS)
def test_a_path_under_a_regular_file_is_one_line_and_exit_2(template, tmp_path, capsys):
    plain = tmp_path / "plain-file"
    plain.write_text("x\n")
    code = main(_argv(template, plain, tmp_path))
    err = capsys.readouterr().err
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("gputopo: error:")]
    assert len(errors) == 1 and str(plain) in errors[0], err
    assert err.strip().splitlines()[-1] == errors[0] and "Traceback" not in err


def _can_drop_privileges() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("setpriv") is not None


@pytest.mark.skipif(not _can_drop_privileges(), reason="needs root and setpriv to drop "
                    "CAP_DAC_OVERRIDE (as a non-root user every path below is unreadable anyway)")
@pytest.mark.parametrize("template", COMMANDS + SERVE)
def test_a_directory_without_permission_is_one_line_and_exit_2(template, tmp_path):
    locked = tmp_path / "locked"
    (locked / "pol").mkdir(parents=True)
    (locked / "c.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    locked.chmod(0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(
            ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", sys.executable,
             "-m", "gputopo", *_argv(template, locked, tmp_path), "--port", "0"]
            if template.startswith("serve") else
            ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", sys.executable,
             "-m", "gputopo", *_argv(template, locked, tmp_path)],
            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    finally:
        locked.chmod(0o700)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and str(locked) in errors[0], proc.stderr
