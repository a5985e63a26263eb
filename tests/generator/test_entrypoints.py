"""What the generated pods and the image run is a command line ``gputopo`` really accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gputopo import yamlio
from gputopo.cli import build_parser


def _gputopo_containers(repo: Path) -> list[tuple[str, list[str]]]:
    found = []
    for path in sorted((repo / "manifests").glob("*.yaml")):
        for obj in yamlio.load_documents(path):
            spec = obj.get("spec", {}).get("template", {}).get("spec", {})
            for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                if c["image"].startswith("gputopo:"):
                    found.append((f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}",
                                  c["args"]))
    return found


def test_every_gputopo_container_runs_a_command_line_the_cli_accepts(repo: Path):
    containers = _gputopo_containers(repo)
    assert {name.split("/")[0] for name, _ in containers} == {"Deployment", "DaemonSet"}
    parser = build_parser()
    for name, args in containers:
        try:
            parsed = parser.parse_args(args)
        except SystemExit:  # argparse refuses: unknown command or flag
            pytest.fail(f"{name}: gputopo refuses {args}")
        assert callable(parsed.func), name


def test_dockerfile_default_command_is_accepted(repo: Path):
    text = (repo / "Dockerfile").read_text(encoding="utf-8")
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, flags=re.M)
    build_parser().parse_args(json.loads(cmd))
