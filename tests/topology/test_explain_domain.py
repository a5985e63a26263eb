"""``gputopo topology explain --span nvlink-domain``: a gang over trays of one NVLink domain
is explained with the fabric, not the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputopo.cli import main

TRAY = Path(__file__).resolve().parents[1] / "fixtures" / "nvl72" / "gb200-tray.json"


def test_explain_in_one_domain_names_the_trays_and_the_fabric(capsys) -> None:
    assert main(["topology", "explain", "--topology", str(TRAY), "--gpus", "0,1,2,3",
                 "--span", "nvlink-domain", "--trays", "4"]) == 0
    out = capsys.readouterr().out
    assert "one NVLink domain (4 trays)" in out and "no network" in out
    assert main(["topology", "explain", "--topology", str(TRAY), "--gpus", "0,1,2,3",
                 "--span", "nvlink-domain", "--trays", "4", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "network" not in doc
    assert doc["fabric"]["busBandwidthGBps"] == pytest.approx(745.875)
    assert doc["fabric"]["fabricLineGBps"] == pytest.approx(18 * 53.125)
    # across racks the network is the limit, as before
    assert main(["topology", "explain", "--topology", str(TRAY), "--gpus", "0,1,2,3",
                 "--network-gbps", "400", "--transport", "gdr", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["network"]["effectiveGBps"] == pytest.approx(47.0)


def test_fewer_than_two_trays_is_one_line_exit_2(capsys) -> None:
    code = main(["topology", "explain", "--topology", str(TRAY), "--gpus", "0,1",
                 "--span", "nvlink-domain", "--trays", "1"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--trays 1" in err
