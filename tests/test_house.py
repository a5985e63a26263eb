"""House rules of the code that a reader relies on (issue 24): no instance filled behind
its class's back. ``object.__new__(Cls)`` then ``__dict__.update(...)`` (or
``tuple.__new__`` for a named tuple) skips the constructor, so the next person who adds a
field, a default or a check to the class gets objects that silently lack it.

Covered: every module of webhook/ and gputopo/ (generated gRPC stubs included: they have
none either).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def constructor_bypasses(source: str) -> list[int]:
    """Lines of ``source`` that name ``object.__new__`` or ``tuple.__new__``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr == "__new__"
                and isinstance(node.value, ast.Name) and node.value.id in ("object", "tuple")):
            lines.append(node.lineno)
    return lines


def checked_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for folder in ("webhook", "gputopo")
                  for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", checked_files())
def test_no_instance_is_filled_without_its_constructor(path: str) -> None:
    lines = constructor_bypasses((ROOT / path).read_text(encoding="utf-8"))
    assert lines == [], f"{path}: object.__new__/tuple.__new__ at lines {lines}"


def test_the_check_finds_a_bypass() -> None:
    planted = (
        "_new_object = object.__new__\n"
        "def make(cls):\n"
        "    \"\"\"object.__new__ in a docstring is not code.\"\"\"\n"
        "    made = object.__new__(cls)\n"
        "    return tuple.__new__(cls, ())\n")
    assert constructor_bypasses(planted) == [1, 4, 5]
