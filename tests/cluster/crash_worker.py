"""A "webhook replica" that reserves gangs as fast as it can until it is killed (SIGKILL),
for the crash drill: whatever it leaves half-done must never cost a GPU twice or forever.

Usage: python crash_worker.py URL — prints "ready", then reserves and releases forever.
"""

from __future__ import annotations

import itertools
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
    store = KubernetesReservationStore(api_client(sys.argv[1]))
    print("ready", flush=True)
    for i in itertools.count():
        key = GangKey("default", "MPIJob", f"crash-{i}", f"uid-crash-{i}")
        placement = first_fit(NODES, store.held_gpus(), 2, 2)
        if not placement.feasible:  # full: give some back, so writes keep happening
            for res in store.list()[:2]:
                store.release(res.key)
            continue
        try:
            store.reserve(key, placement)
        except ReservationConflict:
            continue
    return 0


if __name__ == "__main__":
    sys.exit(main())
