"""bench/README.md names every script in bench/ (issue 24: a maintainer finds what each one
is for, and how long it runs, in one place)."""

from __future__ import annotations

from docs_text import REPO


def test_bench_readme_names_every_script() -> None:
    text = (REPO / "bench" / "README.md").read_text(encoding="utf-8")
    scripts = sorted(p.relative_to(REPO / "bench").as_posix()
                     for p in (REPO / "bench").rglob("*.py") if p.name != "__init__.py")
    missing = [s for s in scripts if s.rsplit("/", 1)[-1] not in text]
    assert missing == [], f"bench/README.md does not name: {missing}"
