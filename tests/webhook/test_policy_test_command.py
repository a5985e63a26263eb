"""``gputopo policy test`` fails, with a FAIL row, when an expectation is not met."""

from __future__ import annotations

import shutil

from gputopo.cli import main
from tests.webhook.conftest import SEED_CASES


def test_broken_expectation_fails(tmp_path, capsys):
    case = tmp_path / "tests" / "ack"
    shutil.copytree(SEED_CASES / "ack-pytorch", case)
    for policy in (SEED_CASES.parent).glob("*.yaml"):
        shutil.copy(policy, tmp_path / policy.name)
    text = (case / "gputopo-test.yaml").read_text()
    (case / "gputopo-test.yaml").write_text(
        text.replace('gpu-topology-replica: "2"', 'gpu-topology-replica: "3"'))
    assert main(["policy", "test", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "expected '3'" in out


def test_bad_test_file_exits_2(tmp_path, capsys):
    (tmp_path / "gputopo-test.yaml").write_text("kind: Something\n")
    assert main(["policy", "test", str(tmp_path)]) == 2
    assert "gputopo-test.yaml" in capsys.readouterr().err
