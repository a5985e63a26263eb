"""``gputopo queue [--cluster FILE]``: the gangs waiting for a placement, and why not now.

Why it reads the pods and nothing else: a waiting gang IS its gated pods (their records
hold the gang, its demand and since when it waits, :mod:`webhook.queue.gangs`), so a
cluster file holding those pods, or the live cluster, shows exactly what the active queue
sees. Live: the kubeconfig (or in-cluster account) the webhook would use; the reservations
in the API are subtracted as the queue subtracts them. Neither given nor found: the embedded
demo cluster, said on stderr, as every command without ``--cluster`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from gputopo.errors import InputError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``queue`` to the gputopo parser."""
    p = subparsers.add_parser(
        "queue", help="gangs waiting (gated) for a good placement, and why not now")
    p.add_argument("--cluster", metavar="FILE",
                   help="cluster file (multi-document YAML with the gated Pods and the "
                   "Nodes); default: the live cluster of the kubeconfig (or in-cluster "
                   "account), else the embedded demo cluster")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(func=_queue)


def _queue(args: argparse.Namespace) -> int:
    from webhook.placement.reserve import GangReserver
    from webhook.queue.gangs import waiting_gangs
    from webhook.queue.report import rows, table
    from webhook.server_commands import kube_access

    access = None if args.cluster else kube_access()
    if access is None:  # a cluster file, else (no API to ask) the demo, as every command
        from gputopo.cluster.reservations import InMemoryReservationStore
        from gputopo.cluster.snapshot import ClusterSnapshot

        if args.cluster:
            cluster = ClusterSnapshot.from_file(args.cluster)
        else:
            from gputopo.cluster.demo import demo_snapshot

            print("gputopo: no --cluster given and no kubeconfig or in-cluster account: "
                  "using the embedded demo cluster (two 8x V100 DGX-1 nodes)", file=sys.stderr)
            cluster = demo_snapshot()
        pods = cluster.of_kind("Pod")
        found = rows(waiting_gangs(pods), cluster, GangReserver(InMemoryReservationStore()))
    else:
        from gputopo.cluster.view import connect
        from webhook.queue.placer import PlacementQueue

        view = connect()
        if view is None:  # found, but not usable: say so rather than show the demo's gangs
            raise InputError(f"found {access}, but could not load it", obj="queue")
        try:
            if not view.wait_synced(30):
                raise InputError("the cluster's API did not answer the first list in 30 s",
                                 obj="queue")
            assert view.reservations is not None
            queue = PlacementQueue(view.api_client, view, view.reservations)
            found = rows(queue.waiting(), view, queue.reserver)
        finally:
            view.stop()
    if args.output == "json":
        print(json.dumps([asdict(r) for r in found], indent=2))
    else:
        sys.stdout.write(table(found))
    return 0
