"""Polite merging: add what is missing, never overwrite what the user wrote.

Why: a webhook that clobbers a user's securityContext or volume silently changes what runs.
Every helper here adds only absent fields and reports each disagreement as a conflict
(kept as the user wrote it); the caller turns conflicts into admission warnings. Because
nothing is ever overwritten, running a policy twice changes nothing the second time — the
idempotence the API server's reinvocation relies on.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def contains(have: Any, want: Any) -> bool:
    """True when ``have`` already says everything ``want`` says (mappings: recursively;
    extra keys in ``have`` — e.g. API server defaults — are fine)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            k in have and contains(have[k], v) for k, v in want.items()
        )
    return have == want


def merge_missing(target: dict[str, Any], want: Mapping[str, Any], path: str,
                  conflicts: list[str]) -> bool:
    """Add the keys of ``want`` missing from ``target`` (recursively); True if anything was
    added. A present, different value is left alone and its path appended to ``conflicts``."""
    changed = False
    for key, value in want.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in target or target[key] is None:
            target[key] = copy.deepcopy(value)
            changed = True
        elif isinstance(value, Mapping) and isinstance(target[key], dict):
            changed |= merge_missing(target[key], value, where, conflicts)
        elif target[key] != value:
            conflicts.append(f"{where} is {target[key]!r} (policy wants {value!r})")
    return changed


def normalize_path(path: str) -> str:
    """``/sys/`` and ``/sys`` are the same mount point."""
    return path.rstrip("/") or "/"
