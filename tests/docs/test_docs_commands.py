"""Every `gputopo` command README.md and docs/*.md show: its flags exist, and the ones that
need no cluster run as written.

Why: a newcomer copies these lines first. A renamed flag or a moved example file breaks the
first hour without breaking any other test, so each command is checked against the real
argparse tree, and each runnable one (mutate, place, nodes, queue, topology parse/explain,
generate, policy test, on the repository's files and the embedded demo cluster) is run
in-process from the repository root and must exit 0. Commands that need a cluster, a GPU or
a file the reader brings (``serve``, ``device-plugin``, ``topology report``, ``--live``,
``my-pods.yaml``) have their flags checked only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_text import REPO, DocCommand, command_parser, commands, flags_in, flags_of, parsed

from gputopo.cli import main

ALL = commands()
RUNNABLE_PATHS = {("mutate",), ("place",), ("nodes",), ("queue",), ("topology", "parse"),
                  ("topology", "explain"), ("generate", "manifests"),
                  ("generate", "scheduler-config"), ("generate", "certs"), ("policy", "test")}

#: flags whose value may contain a "/" but is not a path
NOT_FILES = {"--image", "--scheduler-image", "--namespace-labels", "--gpu-resource"}


def _id(cmd: DocCommand) -> str:
    return f"{cmd.page}: {cmd.text}"


def test_the_docs_show_commands() -> None:
    # the reader below must keep finding them (a change of the fence syntax would hide all)
    assert len(ALL) > 40
    assert any(cmd.text.startswith("gputopo mutate -o table examples/") for cmd in ALL)


@pytest.mark.parametrize("cmd", ALL, ids=_id)
def test_every_documented_flag_exists(cmd: DocCommand) -> None:
    path, parser = command_parser(cmd.argv or cmd.text.split()[1:])
    assert path or cmd.argv[:1] == ("--version",), f"no such command: {cmd.text}"
    unknown = [flag for flag in flags_in(cmd.text[len("gputopo"):])
               if flag not in flags_of(parser)]
    assert unknown == [], f"{cmd.page}: `{cmd.text}` names flags `gputopo "\
                          f"{' '.join(path)}` does not have: {unknown}"


def _runnable(cmd: DocCommand) -> bool:
    if cmd.syntax or not cmd.argv or "--help" in cmd.argv or "--live" in cmd.argv:
        return False
    path, _ = command_parser(cmd.argv)
    if tuple(path) not in RUNNABLE_PATHS:
        return False
    args = parsed(cmd.argv)
    has_input = args is not None and bool(getattr(args, "files", True)) and (
        path[0] != "place" or bool(args.job or args.replicas))
    if not cmd.fenced and not (len(cmd.argv) > len(path) and has_input):
        return False  # a command or flag named in a sentence: `gputopo mutate --platform tke`
    outputs = {cmd.argv[i + 1] for i, word in enumerate(cmd.argv[:-1])
               if (word in ("-o", "--output") and path[0] == "generate")
               or word in NOT_FILES}
    files = [word for word in cmd.argv[len(path):]
             if not word.startswith("-") and word not in outputs
             and ("/" in word or word.endswith((".yaml", ".yml", ".txt", ".json")))]
    return all((REPO / word).exists() for word in files)


RUN = [cmd for cmd in ALL if _runnable(cmd)]


def test_the_runnable_commands_are_found() -> None:
    texts = {cmd.text for cmd in RUN}
    for expected in ("gputopo mutate -o table examples/arena-tf-vgg16-mpijob.yaml",
                     "gputopo place examples/arena-tf-vgg16-mpijob.yaml",
                     "gputopo policy test policies/",
                     "gputopo topology parse tests/fixtures/topologies/dgx1-v100.txt"):
        assert expected in texts


@pytest.mark.parametrize("cmd", RUN, ids=_id)
def test_a_documented_command_runs(cmd: DocCommand, tmp_path: Path, capsys,
                                   monkeypatch) -> None:
    argv = list(cmd.argv)
    if argv[0] == "generate":
        # write where the test can throw it away, never over manifests/ or the reader's cwd
        if "-o" in argv:
            argv[argv.index("-o") + 1] = str(tmp_path / "out")
        else:
            argv += ["-o", str(tmp_path / "out")]
    monkeypatch.chdir(REPO)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 0, f"{cmd.page}: `{cmd.text}` exited {code}: {err.strip()[-400:]}"
    assert "Traceback" not in err


def test_a_drifted_command_is_caught() -> None:
    # what the checks above see when a doc keeps a flag the command line dropped
    path, parser = command_parser(("mutate", "--cluster-file", "x.yaml"))
    assert path == ["mutate"]
    assert [f for f in flags_in(" mutate --cluster-file x.yaml") if f not in flags_of(parser)] \
        == ["--cluster-file"]
    assert parsed(("mutate", "--cluster-file", "x.yaml")) is None
