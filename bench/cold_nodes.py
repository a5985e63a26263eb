"""Cold solver calls on 16-GPU nodes: the first placement on a node shape nobody has seen.

Why: caches make repeated placements cheap, but the first gang on a new kind of node (or a
new free-GPU pattern) pays for rating GPU sets, and a webhook has a few seconds at most.
16-GPU nodes are where that cost explodes (C(16, 8) = 12,870 sets of 8). Each row runs in
a fresh process so every cache is cold.

    python bench/cold_nodes.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gputopo.placement.solver import solve  # noqa: E402
from gputopo.placement.types import GangRequest, NodeState  # noqa: E402
from gputopo.topology.model import Gpu, Topology  # noqa: E402

DGX1 = ROOT / "tests" / "fixtures" / "topologies" / "dgx1-v100.txt"


def shape(name: str) -> Topology:
    """16-GPU node shapes: a PCIe tree, NVLink-bridged pairs, two DGX-1 boards, NVSwitch."""
    n = 16

    def code(a: int, b: int) -> str:
        if a == b:
            return "X"
        if name == "pcie-tree":
            return "PIX" if a // 4 == b // 4 else "PHB" if a // 8 == b // 8 else "SYS"
        if name == "nvlink-pairs":
            return "NV4" if a // 2 == b // 2 else "NODE" if a // 8 == b // 8 else "SYS"
        if name == "nvswitch":
            return "NV6"
        rows = [line.split()[1:9] for line in DGX1.read_text().splitlines()[1:9]]
        return rows[a % 8][b % 8] if a // 8 == b // 8 else "SYS"

    links = tuple(tuple(code(a, b) for b in range(n)) for a in range(n))
    return Topology(gpus=tuple(Gpu(i) for i in range(n)), links=links)


SHAPES = ("pcie-tree", "nvlink-pairs", "two-dgx1-boards", "nvswitch")
GANGS = ((1, 1), (4, 1), (1, 2), (1, 4), (1, 8), (2, 8))


def one(name: str, replicas: int, gpus: int) -> float:
    """Milliseconds of one cold solve on two empty nodes of the shape."""
    topo = shape(name)
    nodes = [NodeState(name=f"n{i}", topology=topo, used=frozenset({15}) if i else frozenset())
             for i in range(2)]
    t0 = time.perf_counter()
    solve(nodes, GangRequest(replicas, gpus))
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    if len(sys.argv) == 4:
        print(json.dumps(one(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
        return
    header = "| node shape | " + " | ".join(f"{r}x{g}" for r, g in GANGS) + " |"
    print(header)
    print("|---|" + "---|" * len(GANGS))
    for name in SHAPES:
        cells = []
        for r, g in GANGS:
            out = subprocess.run(
                [sys.executable, __file__, name, str(r), str(g)],
                check=True, capture_output=True, text=True,
            ).stdout
            cells.append(f"{float(out):.0f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
