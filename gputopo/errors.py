"""The error types every layer raises, so the command line and the server can tell a user's
bad input (exit 2 / HTTP 400, one clear line) from a bug (which must never be disguised).

Each layer subclasses :class:`GputopoError`; library exceptions are chained with ``from``.
"""

from __future__ import annotations


class GputopoError(Exception):
    """Base of all errors gputopo raises on purpose."""


class InputError(GputopoError):
    """Bad input from a user: a file, an object in it, and what is wrong with it.

    ``str()`` gives the one line the command line prints: ``FILE: OBJECT: reason``.
    """

    def __init__(self, reason: str, *, file: str | None = None, obj: str | None = None) -> None:
        self.reason = reason
        self.file = file
        self.obj = obj
        super().__init__(self.line())

    def line(self) -> str:
        parts = [p for p in (self.file, self.obj) if p]
        return ": ".join([*parts, self.reason])


class TopologyError(InputError):
    """A GPU topology (nvidia-smi text, annotation, ACK report) that cannot be understood."""


class PolicyError(InputError):
    """A policy document that does not validate; ``obj`` carries the field path."""
