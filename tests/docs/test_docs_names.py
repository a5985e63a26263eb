"""Every name README.md, docs/*.md and bench/README.md mention exists: repository paths (and
``file.py::test_name`` references), links between pages, ``gputopo.io/*`` annotation and
label names, and ``gputopo_*`` metric names.

Why: a doc that names a file that moved, an annotation that was renamed or a metric that was
never registered sends a reader (or an alert rule) after something that is not there; none
of that breaks another test. Names are taken from the code itself (the source text of
``gputopo/``, ``webhook/``, ``generator/`` and the shipped policies), so the test needs no
list of its own to keep up to date.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_text import PAGES, REPO, inline_code, prose, rel

TOP = ("gputopo", "webhook", "generator", "bench", "tests", "docs", "policies", "manifests",
       "examples", ".ci")
_CODE_DIRS = ("gputopo", "webhook", "generator", "policies")
CODE = "\n".join(p.read_text(encoding="utf-8") for d in _CODE_DIRS
                 for p in sorted((REPO / d).rglob("*")) if p.suffix in (".py", ".yaml"))


def _page_paths(page: Path) -> list[str]:
    """Repository paths in a page's inline code: ``docs/x.md``, ``bench/x.py::name``."""
    found = []
    # a link to another repository names that repository's paths
    text = re.sub(r"\[[^\]]*\]\(https?://[^)]*\)", "", page.read_text(encoding="utf-8"))
    for span in inline_code(text):
        token = span.strip().split(" ", 1)[0]
        if any(c in token for c in "*<>{}$"):
            continue  # a pattern or a placeholder, not a path
        if token.split("/", 1)[0] in TOP and "/" in token:
            found.append(token)
    return found


def _links(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    return [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"[a-z]+:", m.group(1)) and not m.group(1).startswith("#")]


def _missing_path(token: str) -> str | None:
    path, _, name = token.partition("::")
    target = REPO / path.rstrip(":,.")
    if not target.exists():
        return f"`{token}`: no such path"
    if name and not re.search(rf"\b(def|class) {re.escape(name.split('::')[-1])}\b",
                              target.read_text(encoding="utf-8")):
        return f"`{token}`: {path} has no {name}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_path_a_page_names_exists(page: Path) -> None:
    problems = [p for p in map(_missing_path, _page_paths(page)) if p]
    for link in _links(page):
        target = (page.parent / link.split("#", 1)[0]).resolve()
        if not target.exists():
            problems.append(f"link ({link}): no such file")
        elif REPO not in target.parents and target != REPO:
            problems.append(f"link ({link}): outside the repository")
    text = page.read_text(encoding="utf-8")
    problems += [f"`{m.group(0)}`: outside the repository"
                 for m in re.finditer(r"\.\./shared/\S*", text)]
    assert problems == [], rel(page)


_CONTRACT_NAME = re.compile(r"gputopo\.io/[a-z0-9][-a-z0-9.]*[a-z0-9]")


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_gputopo_io_name_is_in_the_code(page: Path) -> None:
    names = set(_CONTRACT_NAME.findall(page.read_text(encoding="utf-8")))
    missing = sorted(n for n in names if n not in CODE and n.split("/", 1)[1] not in CODE)
    assert missing == [], f"{rel(page)} names annotations/labels the code never uses"


#: metric names registered with prometheus_client anywhere in our code
METRICS = set(re.findall(r"""["'](gputopo_[a-z_]+)["']""", CODE))
_SUFFIXES = ("_bucket", "_count", "_sum", "_created")


def _registered(name: str) -> bool:
    return name in METRICS or any(name.endswith(s) and name[: -len(s)] in METRICS
                                  for s in _SUFFIXES)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_metric_a_page_names_is_registered(page: Path) -> None:
    names = set(re.findall(r"\bgputopo_[a-z][a-z_]*[a-z]\b", page.read_text(encoding="utf-8")))
    assert sorted(n for n in names if not _registered(n)) == [], rel(page)


def test_the_checks_see_what_they_check() -> None:
    # a rename would otherwise make the checks above pass on nothing
    assert "gputopo_mutations_total" in METRICS and "gputopo_queue_wait_seconds" in METRICS
    assert "gputopo.io/placement" in CODE
    readme = REPO / "README.md"
    assert "docs/install.md" in {link for link in _links(readme)}
    assert _missing_path("bench/no_such_probe.py") is not None
    assert _missing_path("tests/test_layers.py::test_the_tree_keeps_the_layers") is None
    assert _missing_path("tests/test_layers.py::no_such_test") is not None
    assert not _registered("gputopo_no_such_metric_total")


def test_design_mds_file_table_names_real_files() -> None:
    # design.md names files by their base name inside each folder's row
    missing = []
    for line in (REPO / "docs" / "design.md").read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| `([a-z_]+(?:/[a-z_]+)*)/", line)
        if not row:
            continue
        folder = REPO / row.group(1)
        for name in re.findall(r"`([a-z_0-9/]+\.py)`", line):
            if not ((REPO / name).exists() or any(folder.rglob(name.rsplit("/", 1)[-1]))):
                missing.append(f"{row.group(1)}: {name}")
    assert missing == []
