"""The shipped policies as the ConfigMap the webhook mounts as ``--policies``.

Why byte-for-byte: each ``policies/*.yaml`` file becomes one ConfigMap key with its text
unchanged, so what the webhook loads in the cluster is exactly what ``gputopo policy test``
checked in the repository. Only the top level is taken: test cases (``policies/tests/``)
are not policies and stay out.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from generator import k8s
from generator.literal import Literal
from gputopo.errors import InputError
from gputopo.names import GPUTOPO_NAMESPACE, POLICIES_CONFIGMAP, WEBHOOK_NAME
from gputopo.platforms import gather_policies
from webhook.policy.loader import load_policies
from webhook.policy.loader import policy_files as loader_policy_files

#: A ConfigMap holds at most 1 MiB (etcd's object size limit is a little above).
MAX_CONFIGMAP_BYTES = 1024 * 1024


def default_policies_dir() -> Path:
    """The repository's ``policies/`` (editable install) or the copy bundled in the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "policies",
                      here.parent / "gputopo" / "_bundled" / "policies"):
        if candidate.is_dir():
            return candidate
    return here.parent / "policies"


def policy_files(directory: Path) -> dict[str, str]:
    """``{file name: text}`` of the files the webhook reads as policies, sorted by name.

    The same files and the same checks as the webhook's loader (top-level ``*.yaml`` /
    ``*.yml``, hidden files skipped, every policy validated): a set the webhook would
    refuse in the cluster fails here, naming the file and field, instead.
    """
    if not directory.is_dir():
        raise InputError("no such directory", file=str(directory), obj="--policies")
    load_policies(directory)  # PolicySetError (an InputError) lists every problem
    files: dict[str, str] = {}
    for path in loader_policy_files(directory):
        if not _CONFIGMAP_KEY.fullmatch(path.name) or len(path.name) > 253:
            raise InputError("a file name that is not a ConfigMap key "
                             "(letters, digits, '-', '_', '.')", file=str(path))
        files[path.name] = path.read_text(encoding="utf-8")  # UTF-8: checked by the loader
    return files


#: ConfigMap data keys (IsConfigMapKey in k8s.io/apimachinery validation).
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def config_map_of_files(directory: Path, names: Sequence[str]) -> dict[str, Any]:
    """The ConfigMap of some policy files under ``directory`` (a platform's choice, paths
    relative to it): each file's text unchanged under its base name, the set validated as
    the webhook will load it (one directory)."""
    with tempfile.TemporaryDirectory(prefix="gputopo-policies-") as tmp:
        gather_policies(directory, names, Path(tmp))
        return config_map(Path(tmp), source=directory)


def config_map(directory: Path, *, source: Path | None = None) -> dict[str, Any]:
    files = policy_files(directory)
    size = sum(len(k) + len(v.encode("utf-8")) for k, v in files.items())
    if size > MAX_CONFIGMAP_BYTES:
        raise InputError(f"policies total {size} bytes; a ConfigMap holds at most 1 MiB",
                         file=str(source or directory))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": k8s.metadata(POLICIES_CONFIGMAP, WEBHOOK_NAME, namespace=GPUTOPO_NAMESPACE),
        "data": {name: Literal(text) for name, text in files.items()},
    }
