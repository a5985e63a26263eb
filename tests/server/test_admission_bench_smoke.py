"""bench/admission_ab.py still runs, and compares two trees on one workload (tiny sizes;
the real runs are on demand: docs/benchmarks.md).

Why a test: the A/B runner starts a worker per tree that builds its admitter from files
the parent wrote, through the product's entry points only. A rename of one of those, or a
change of the worker protocol, would otherwise surface the next time someone compares two
trees. This tree against itself must answer every review alike.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python bench/<script> <args>`` from the repository root, its output captured."""
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)


def test_admission_ab_runs_this_tree_against_itself_with_equal_answers():
    out = _bench("admission_ab.py", "--base", str(ROOT), "--gap-ms", "0", "--count", "40",
                 "--nodes", "40")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "40 reviews, each on both trees in turn" in out.stdout
    assert "answers that differ: 0" in out.stdout
    kinds = [line.split("|")[1].strip() for line in out.stdout.splitlines()
             if line.startswith("| ") and not line.startswith("| kind")]
    assert {"gang-first", "gang-next", "mix"} <= set(kinds), out.stdout


def test_admission_ab_refuses_a_base_that_is_not_a_checkout(tmp_path):
    out = _bench("admission_ab.py", "--base", str(tmp_path))
    assert out.returncode == 2
    assert "--base must name a checkout" in out.stderr


def test_admission_benchmark_serves_over_tls_with_the_server_of_a_given_tree():
    """``bench/admission.py --server-tree`` (here this tree itself): the server process of
    that tree answers the workload over TLS, no error, every review answered."""
    out = _bench("admission.py", "--rates", "50", "--duration", "1", "--nodes", "40",
                 "--server-tree", str(ROOT), "--markdown")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {cells[2]: cells for line in out.stdout.splitlines()
            if (cells := [c.strip() for c in line.split("|")])[1:2] == ["50"]
            and len(cells) > 9}
    mutate = rows["/mutate"]
    # throughput about the rate, no error, nothing answered after 5 s
    assert float(mutate[3]) >= 45 and mutate[7] == "0" and mutate[8] == "0", mutate
    assert "/noop (floor)" in rows


def test_admission_benchmark_refuses_a_server_tree_without_its_server(tmp_path):
    out = _bench("admission.py", "--server-tree", str(tmp_path))
    assert out.returncode == 2
    assert "no bench/admission_server.py there" in out.stderr
