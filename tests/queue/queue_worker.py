"""One placement queue process for the leader-election tests (run as a script).

``gputopo serve``'s queue wiring without the HTTPS layer: a ClusterView and a
KubernetesReservationStore on the official client against the API TEST DOUBLE at ``--api``,
a LeaderElector on the queue's Lease, and the QueueRunner loop. Prints one JSON line per pod
write (``{"by", "phase", "pod"}``); with ``--stall-after N`` it stops for ever after its N-th
slot write (``{"stalled": true}``): a leader that hangs or dies mid-placement.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from gputopo import names
from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.view import ClusterView
from webhook.queue.lease import LeaderElector
from webhook.queue.placer import PlacementQueue
from webhook.queue.runner import QueueRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the k8s double
from k8s_double import api_client


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--identity", required=True)
    ap.add_argument("--lease", type=float, default=2.0)
    ap.add_argument("--renew", type=float, default=0.5)
    ap.add_argument("--stall-after", type=int, default=0)
    args = ap.parse_args(argv)
    api = api_client(args.api)
    view = ClusterView(api, reservations=KubernetesReservationStore(api)).start()
    assert view.wait_synced(20)
    slots = 0
    forever = threading.Event()

    def after_write(phase: str, pod: str) -> None:
        nonlocal slots
        print(json.dumps({"by": args.identity, "phase": phase, "pod": pod}), flush=True)
        if phase == "slot":
            slots += 1
            if slots == args.stall_after:
                print(json.dumps({"stalled": True}), flush=True)
                forever.wait()

    elector = LeaderElector(api, namespace=names.GPUTOPO_NAMESPACE, name=names.QUEUE_LEASE,
                            identity=args.identity, lease_seconds=args.lease,
                            renew_seconds=args.renew)
    queue = PlacementQueue(api, view, view.reservations, identity=args.identity,
                           is_leader=elector.is_leader, after_write=after_write)
    runner = QueueRunner(queue, elector, interval_seconds=0.2)
    view.listeners.append(runner.kick)
    runner.start()
    print(json.dumps({"started": args.identity}), flush=True)
    forever.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
