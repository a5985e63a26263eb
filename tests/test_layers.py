"""The import contract: every arrow between our modules points down the layers.

Why: docs/architecture.md promises topology -> placement -> cluster -> admission/queue ->
server/CLI, with the generator beside them. A promise nobody checks drifts (the webhook once
imported ``generator.certs``), so this test reads every module of ``gputopo/``, ``webhook/``
and ``generator/`` with ``ast`` (imports inside functions count: a lazy import is still an
arrow) and fails on an import the layer table does not allow, or on a module no layer claims.
Imports under ``if TYPE_CHECKING:`` are skipped: they never run, and naming a type from
below-or-beside for an annotation is not a dependency at run time.

The table is the one in docs/architecture.md; change both together.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gputopo", "webhook", "generator")

#: Which layer a module is in: the first rule whose prefix matches wins (a rule ending in
#: "." matches a package and everything in it; otherwise the module name exactly).
#: Any ``*.commands`` module is CLI (checked before this table).
LAYER_OF: tuple[tuple[str, str], ...] = (
    ("gputopo.cli", "cli"),
    ("gputopo.__main__", "cli"),
    ("gputopo.topology.", "topology"),
    ("gputopo.operators.", "operators"),
    ("gputopo.placement.", "placement"),
    ("gputopo.cluster.", "cluster"),
    ("gputopo.deviceplugin.", "deviceplugin"),
    ("gputopo", "core"),
    ("gputopo.", "core"),
    # webhook/: the server and the offline commands sit on top of the admission pipeline.
    ("webhook.server", "server"),
    ("webhook.server_commands", "server"),
    ("webhook.tls", "server"),
    ("webhook.admitter_thread", "server"),
    ("webhook.assembly", "server"),
    ("webhook.dryrun", "server"),
    ("webhook.policytest", "server"),
    ("webhook.queue.", "queue"),
    ("webhook", "admission"),
    ("webhook.", "admission"),
    ("generator", "generator"),
    ("generator.", "generator"),
)

#: What each layer may import besides itself.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "topology": frozenset({"core"}),
    "operators": frozenset({"core"}),
    "placement": frozenset({"core", "topology"}),
    "cluster": frozenset({"core", "topology", "placement"}),
    "deviceplugin": frozenset({"core", "topology", "placement", "cluster"}),
    "admission": frozenset({"core", "topology", "operators", "placement", "cluster"}),
    "queue": frozenset({"core", "topology", "operators", "placement", "cluster", "admission"}),
    "server": frozenset({"core", "topology", "operators", "placement", "cluster", "admission",
                         "queue"}),
    "generator": frozenset({"core"}),
    "cli": frozenset({"core", "topology", "operators", "placement", "cluster", "deviceplugin",
                      "admission", "queue", "server", "generator"}),
}

#: Single modules a layer may import outside its table, each with its reason.
EXCEPTIONS: dict[str, frozenset[str]] = {
    # The generator validates the policies it ships with the same loader the webhook uses.
    "generator": frozenset({"webhook.policy.loader"}),
}


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name, or None when no rule claims it."""
    if module.rsplit(".", 1)[-1] == "commands":
        return "cli"
    for prefix, layer in LAYER_OF:
        package = prefix.endswith(".")
        if module == prefix.rstrip(".") or (package and module.startswith(prefix)):
            return layer
    return None


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(root: Path, base: str, name: str | None) -> str:
    """``from base import name``: the module ``base.name`` when it exists, else ``base``."""
    if name:
        candidate = Path(root, *base.split("."), name)
        if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
            return f"{base}.{name}"
    return base


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(root: Path, path: Path) -> list[tuple[int, str]]:
    """(line, module) for each of our modules ``path`` imports, TYPE_CHECKING blocks skipped."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking_lines(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                package = _module_name(root, path).split(".")
                if path.name != "__init__.py":
                    package.pop()
                base = ".".join([*package[: len(package) - node.level + 1], node.module])
            else:
                base = node.module
            found += [(node.lineno, _resolve(root, base, alias.name)) for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] in PACKAGES]


def _allowed(layer: str, target: str, target_layer: str) -> bool:
    return (target_layer == layer or target_layer in MAY_IMPORT[layer]
            or target in EXCEPTIONS.get(layer, frozenset()))


def violations(root: Path) -> list[str]:
    """Every import under ``root`` that breaks the layer table, as ``file:line: reason``."""
    problems: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(root, path)
            where = path.relative_to(root)
            layer = layer_of(module)
            if layer is None:
                problems.append(f"{where}: {module} is in no layer")
                continue
            for line, target in imports_of(root, path):
                target_layer = layer_of(target)
                if target_layer is None:
                    problems.append(f"{where}:{line}: imports {target}, which is in no layer")
                elif not _allowed(layer, target, target_layer):
                    problems.append(
                        f"{where}:{line}: {module} ({layer}) imports {target} ({target_layer})"
                    )
    return problems


def test_the_tree_keeps_the_layers() -> None:
    assert violations(ROOT) == []


def test_every_layer_in_the_table_has_modules() -> None:
    # A rule that matches nothing is a table that drifted from the tree.
    seen = {
        layer_of(_module_name(ROOT, path))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
    }
    assert seen == set(MAY_IMPORT)


def _copy_tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "v1beta1"))
    return tmp_path


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        # the arrow issue 24 removed: the webhook reaching up into the generator
        ("webhook/server_commands.py", "from generator.certs import write_serving_certs\n",
         "webhook.server_commands (server) imports generator.certs (generator)"),
        # the solver layer reaching up into the cluster view, lazily inside a function
        ("gputopo/placement/upward.py",
         "def f():\n    from gputopo.cluster import view\n    return view\n",
         "gputopo.placement.upward (placement) imports gputopo.cluster.view (cluster)"),
        # the admission pipeline importing the server that runs it
        ("webhook/upward.py", "from webhook import server\n",
         "webhook.upward (admission) imports webhook.server (server)"),
        # a module below the CLI reaching the generator
        ("gputopo/topology/upward.py", "import generator.manifests\n",
         "gputopo.topology.upward (topology) imports generator.manifests (generator)"),
    ],
)
def test_an_upward_import_is_caught(tmp_path: Path, module: str, source: str,
                                    expected: str) -> None:
    root = _copy_tree(tmp_path)
    target = root / module
    target.write_text(target.read_text() + "\n" + source if target.exists() else source)
    found = violations(root)
    assert len(found) == 1 and expected in found[0], found


def test_an_import_under_type_checking_is_not_an_arrow(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "gputopo/topology/typed.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gputopo.cluster.view import ClusterView\n"
    )
    assert violations(root) == []


def test_a_new_top_level_module_must_be_placed(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "gputopo/certs_extra").mkdir()
    (root / "gputopo/certs_extra/__init__.py").write_text("")
    # core claims every other gputopo module, so a new package lands in core and may import
    # nothing above it: an import of placement from there is caught.
    (root / "gputopo/certs_extra/x.py").write_text("from gputopo.placement import types\n")
    found = violations(root)
    assert len(found) == 1 and "(core) imports gputopo.placement.types (placement)" in found[0]
