"""One "webhook replica" for the multi-process reservation test: reserves gangs against the
API test double with first-fit placements (so replicas collide), re-solving on conflict.

Usage: python reserve_worker.py URL WORKER_ID GANGS — prints "ready", waits for a line on
stdin (so all processes start racing at once), then prints one JSON line of results.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cluster_helpers import first_fit
from k8s_double import api_client

from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.reservations import GangKey, ReservationConflict

NODES = {"n0": 8, "n1": 8, "n2": 8, "n3": 8}


def main() -> int:
    url, worker, gangs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = KubernetesReservationStore(api_client(url))
    store.held_gpus()  # imports done, connection warm
    print("ready", flush=True)
    sys.stdin.readline()
    reserved, infeasible, conflicts = [], 0, 0
    for i in range(gangs):
        key = GangKey("default", "MPIJob", f"{worker}-job{i}", f"uid-{worker}-{i}")
        while True:
            placement = first_fit(NODES, store.held_gpus(), 2, 2)
            if not placement.feasible:
                infeasible += 1
                break
            try:
                res = store.reserve(key, placement)
            except ReservationConflict:
                conflicts += 1
                continue
            reserved.append({"uid": key.uid, "gpus": {n: sorted(g)
                                                      for n, g in res.gpus().items()}})
            break
    print(json.dumps({"reserved": reserved, "infeasible": infeasible,
                      "conflicts": conflicts, "stats": dict(store.stats)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
