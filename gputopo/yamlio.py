"""The one YAML loader and dumper of the project.

Why one: policies, cluster files, pods in and pods out, manifests — all must agree on safe
loading, on error messages that name the file, and on a stable, diff-friendly output.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from gputopo.errors import InputError

try:  # the C implementation is ~10x faster; fall back silently where libyaml is missing
    _Loader: type = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader
    _Dumper = yaml.SafeDumper


def load_documents_text(text: str, *, source: str = "<input>") -> list[Any]:
    """All non-empty documents of a multi-document YAML text."""
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"not valid YAML: {problem}", file=source, obj=where) from exc


def load_documents(path: str | Path) -> list[Any]:
    """All non-empty documents of a YAML file; errors name the file."""
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


def dump_documents(docs: Iterable[Any]) -> str:
    """Multi-document YAML, keys in insertion order, block style."""
    return yaml.dump_all(
        list(docs), Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True
    )


def dump(doc: Any) -> str:
    """One YAML document, keys in insertion order."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
