"""How fast this machine runs the same small piece of Python after idling for a while.

Why: the admission benchmarks read CPU per review, and on this KVM guest the same work
costs different CPU depending on how long the CPU idled before it. This script shows it
with a fixed piece of work (a 300-step loop): for each idle gap (``--gaps-ms``) it sleeps,
then times pieces 0, 1, 5, 50, ... of a burst of 1,000 (~7-10 ms of work), median over
``--bursts`` bursts. Seen here (docs/benchmarks.md, "Cold CPU per review"): the first piece
after a wake costs 2-3.5x (cold caches and predictors); and after gaps of 20-50 ms or more
the machine often runs the WHOLE burst 1.6x slower (10.5 against 6.5 us a piece), as if
the core had dropped to a slower state it does not leave within 10 ms of work, while after
2-10 ms gaps it is back to full speed by the second piece. Where the switch happens moves
between 20 and 50 ms from run to run: 50 reviews/s (20 ms apart) sits on it.

Run: ``python bench/machine_drift.py [--gaps-ms 0,2,5,10,20,50,200] [--bursts 8]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

PIECES = (0, 1, 5, 50, 200, 500, 999)


def piece() -> int:
    """The fixed work: a short pure-Python loop (no allocation, a few hundred bytecodes)."""
    total = 0
    for i in range(300):
        total += i
    return total


def burst(gap_s: float, count: int = 1000) -> list[int]:
    """Sleep ``gap_s``, then the thread CPU (ns) of each of ``count`` pieces in a row."""
    if gap_s:
        time.sleep(gap_s)
    out = []
    for _ in range(count):
        started = time.thread_time_ns()
        piece()
        out.append(time.thread_time_ns() - started)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gaps-ms", default="0,2,5,10,20,50,200")
    ap.add_argument("--bursts", type=int, default=8)
    args = ap.parse_args(argv)
    try:
        gaps = [float(g) / 1000 for g in args.gaps_ms.split(",")]
    except ValueError:
        print(f"machine_drift: --gaps-ms must be numbers, got {args.gaps_ms!r}", file=sys.stderr)
        return 2
    print(f"load average {os.getloadavg()[0]:.2f}; us per piece, median of {args.bursts} "
          "bursts\n")
    print("| idle gap (ms) | " + " | ".join(f"piece {k}" for k in PIECES) + " |")
    print("|---:|" + "---:|" * len(PIECES))
    for gap in gaps:
        rows = [burst(gap) for _ in range(args.bursts)]
        cells = [statistics.median(r[k] for r in rows) / 1000 for k in PIECES]
        print(f"| {gap * 1000:g} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
