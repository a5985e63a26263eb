"""The ``gputopo`` command line: one argparse tree, each command's work done elsewhere.

Why this shape: the command names and flags are the outside contract (CONTRACT.md), so they
are declared here in one place; each area registers its own subcommands through a
``register(subparsers)`` function in its ``commands`` module and imports its heavy
dependencies (FastAPI, the Kubernetes client) only when its command runs.

Bad input raises :class:`gputopo.errors.InputError`; it is printed as one line and the
process exits 2. So is an ``OSError`` that names a file (a path the user gave that cannot
be read or written: permission denied, a parent that is a regular file): whichever layer
met it, the cause is the path, not a bug. Nothing else is caught: a bug shows its
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from gputopo import __version__
from gputopo.errors import InputError

#: Modules that contribute subcommands, each with ``register(subparsers) -> None``.
COMMAND_MODULES: tuple[str, ...] = (
    "webhook.commands",
    "webhook.server_commands",
    "gputopo.topology.commands",
    "gputopo.placement.commands",
    "gputopo.cluster.commands",
    "generator.commands",
    "gputopo.deviceplugin.commands",
    "webhook.queue.commands",
)


def build_parser() -> argparse.ArgumentParser:
    """The full parser; every registered subcommand sets ``func`` on its namespace."""
    parser = argparse.ArgumentParser(
        prog="gputopo",
        description="GPU-topology-aware placement of Kubeflow training jobs.",
    )
    parser.add_argument("--version", action="version", version=f"gputopo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency, not a module still to come
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except InputError as exc:
        print(f"gputopo: error: {exc.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `gputopo ... | head` closed the pipe: not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        if exc.filename is None:
            raise
        reason = exc.strerror or type(exc).__name__
        print(f"gputopo: error: {exc.filename}: {reason}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
