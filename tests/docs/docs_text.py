"""What the docs say, read the way the docs tests need it: the pages, their code, the
`gputopo` commands they show, and the command line's real flags.

Why a helper of its own: the commands, names and figures tests (tests/docs/) all read the
same pages; one reader keeps them agreeing on what counts as "a command the docs show".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from gputopo.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
#: README.md, every page in docs/ and bench/README.md: what a newcomer reads.
PAGES: tuple[Path, ...] = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
                           REPO / "bench" / "README.md")

IMAGE = "registry.example.com/gputopo:0.1.0"
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"`([^`\n]+)`")


def rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def fenced_blocks(text: str) -> list[str]:
    return [m.group(1) for m in _FENCE.finditer(text)]


def prose(text: str) -> str:
    """The page without its fenced blocks."""
    return _FENCE.sub("", text)


def inline_code(text: str) -> list[str]:
    return [m.group(1) for m in _INLINE.finditer(prose(text))]


@dataclass(frozen=True)
class DocCommand:
    page: str
    text: str  #: as written, comments and shell continuation removed
    argv: tuple[str, ...]  #: after ``gputopo``; empty when the text is not shell-splittable
    #: a usage form (``[--cluster FILE]``, ``ack|tke``) or placeholders: flags only
    syntax: bool
    #: from a fenced block (a line to copy), not an inline mention in a sentence
    fenced: bool


_PLACEHOLDER = re.compile(r"\[|\]|\||\.\.\.|\(|\)|<|>|\bFILE\b|\bDIR\b|\bNAME\b|\bNS\b|"
                          r"\bJOB\b|\bN\b|\bG\b|\bP\b|\bT=S\b|\$")


def _command(page: str, text: str, fenced: bool) -> DocCommand | None:
    text = text.split(" # ", 1)[0].strip().rstrip("\\").strip()
    match = re.match(r"^(?:\$ )?(?:python -m )?gputopo(?: (.*))?$", text)
    if not match or not match.group(1):
        return None
    rest = match.group(1)
    # the one shell variable the docs use, set in install.md's step 1
    syntax = bool(_PLACEHOLDER.search(rest.replace('"$IMAGE"', "").replace("$IMAGE", "")))
    rest = rest.replace('"$IMAGE"', IMAGE).replace("$IMAGE", IMAGE)
    try:
        argv = tuple(shlex.split(rest))
    except ValueError:
        argv = ()
    return DocCommand(page, "gputopo " + rest, argv, syntax, fenced)


def commands() -> list[DocCommand]:
    """Every ``gputopo ...`` command of the pages: each line of a fenced block that starts
    with it (after ``&&`` too), and each inline code span that is one."""
    found: dict[tuple[str, str], DocCommand] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        candidates = [(part, True) for block in fenced_blocks(text)
                      for line in block.splitlines() for part in line.split("&&")]
        candidates += [(span, False) for span in inline_code(text)]
        for candidate, fenced in candidates:
            cmd = _command(rel(page), candidate.strip(), fenced)
            if cmd is not None:
                found.setdefault((cmd.page, cmd.text), cmd)
    return list(found.values())


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps no public handle on its subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_parser(argv: tuple[str, ...] | list[str]) -> tuple[list[str], argparse.ArgumentParser]:
    """The subcommand path (``["generate", "manifests"]``) and its parser."""
    parser = build_parser()
    path: list[str] = []
    for word in argv:
        subs = _subparsers(parser)
        if word not in subs:
            break
        path.append(word)
        parser = subs[word]
    return path, parser


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {opt for action in parser._actions for opt in action.option_strings}


def flags_in(text: str) -> list[str]:
    """The long and short options a command text names (``--x``, ``--x=v``, ``-o``)."""
    return [m.group(1) for m in re.finditer(r"(?:^|[\s\[(|])(--?[a-zA-Z][-a-zA-Z0-9]*)", text)]


def parsed(argv: tuple[str, ...] | list[str]) -> argparse.Namespace | None:
    """The parsed command line, or None when it does not parse (a sentence's fragment)."""
    parser = build_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return parser.parse_args(list(argv))
    except SystemExit:
        return None
