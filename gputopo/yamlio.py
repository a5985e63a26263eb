"""The one YAML loader and dumper of the project.

Why one: policies, cluster files, pods in and pods out, manifests — all must agree on safe
loading, on error messages that name the file, and on a stable, diff-friendly output.

Two things users meet here first: ``-`` as a file name reads standard input, and YAML
copied from a web page often carries no-break spaces (U+00A0) or other Unicode spaces in
its indentation, which YAML does not take as indentation; such input is refused with one
line naming the character, its line and column instead of a puzzling error later.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gputopo.errors import InputError

try:  # the C implementation is ~10x faster; fall back silently where libyaml is missing
    _BaseLoader: type = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _BaseLoader = yaml.SafeLoader
    _Dumper = yaml.SafeDumper


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader, refusing a key that appears twice in one mapping.

    Why: PyYAML keeps the last of two equal keys without a word, so a policy with
    ``transportShare: {tcp: 0.3, tcp: 0.4}`` or a pod with two ``resources:`` blocks would
    be read as something its author did not see; kubectl refuses such files too
    (sigs.k8s.io/yaml decodes strictly: "mapping key already defined"). Keys brought in by
    a ``<<`` merge may be overridden, as YAML intends.
    """

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # unhashable: the base constructor says so
                    break
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


#: ``width`` for output a user reads or pipes on: long values (the placement record's
#: JSON) stay on one line instead of being folded mid-word.
WIDE = 1 << 30
#: The file name that means standard input.
STDIN = "-"


_KEY_THEN_ODD_SPACE = re.compile(r"^[ \t-]*[\w./-]+:(?=[^\S \t\r\n])", re.UNICODE)


def _odd_space(char: str) -> bool:
    return char not in " \t" and unicodedata.category(char) == "Zs"


def _check_spaces(text: str, source: str) -> None:
    """Refuse a Unicode space (U+00A0 and the like) where YAML needs a plain one: in the
    indentation (list dashes included) or between a plain key's colon and its value."""
    for number, line in enumerate(text.splitlines(), start=1):
        column = 0
        for i, char in enumerate(line):
            if _odd_space(char):
                column = i + 1
                break
            if char not in " \t-":
                break
        if not column:
            m = _KEY_THEN_ODD_SPACE.match(line)
            column = m.end() + 1 if m else 0
        if column:
            char = line[column - 1]
            name = unicodedata.name(char, "SPACE")
            raise InputError(
                f"line {number}, column {column}: U+{ord(char):04X} {name} where YAML needs a "
                f"plain space (text copied from a web page?); replace it, e.g. "
                f"sed -i 's/\\xc2\\xa0/ /g' FILE", file=source)


def load_documents_text(text: str, *, source: str = "<input>") -> list[Any]:
    """All non-empty documents of a multi-document YAML text."""
    _check_spaces(text, source)
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"not valid YAML: {problem}", file=source, obj=where) from exc


def load_documents(path: str | Path) -> list[Any]:
    """All non-empty documents of a YAML file; errors name the file."""
    if str(path) == STDIN:
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError as exc:
            raise InputError("not UTF-8 text", file="<stdin>") from exc
        return load_documents_text(text, source="<stdin>")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError("no such file", file=str(p)) from exc
    except IsADirectoryError as exc:
        raise InputError("is a directory, not a file", file=str(p)) from exc
    except UnicodeDecodeError as exc:
        raise InputError("not UTF-8 text", file=str(p)) from exc
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(p)) from exc
    return load_documents_text(text, source=str(p))


def dump_documents(docs: Iterable[Any], *, width: int | None = None) -> str:
    """Multi-document YAML, keys in insertion order, block style (``width=WIDE``: long
    scalars on one line)."""
    return yaml.dump_all(
        list(docs), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
        explicit_start=True, width=width,
    )


def dump(doc: Any) -> str:
    """One YAML document, keys in insertion order."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
