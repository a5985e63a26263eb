"""``gputopo nodes``: the activated nodes of a cluster file (or the embedded demo cluster)
as a table; the logic is :mod:`gputopo.cluster.node_table`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from gputopo import names


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nodes`` to the gputopo command line."""
    p = subparsers.add_parser(
        "nodes", help="activated nodes: GPUs used/free, largest free well-connected block",
        description="The activated nodes as a table: GPU kind, GPUs used and free, the "
                    "largest free well-connected block, rack/zone, network, and the gangs "
                    "holding GPUs there (pods and reservation records). The first view when "
                    "asking why a job did not fit.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--cluster", metavar="FILE",
                     help="cluster file ('-' for stdin); default: the embedded demo cluster")
    src.add_argument("--live", action="store_true",
                     help="list the cluster this process can reach (in-cluster account, "
                          "else --kubeconfig / $KUBECONFIG / ~/.kube/config)")
    p.add_argument("--kubeconfig", metavar="FILE", help="with --live: this kubeconfig")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(func=_nodes)


def _reserved(objects: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(gang, nodes) of the gang reservation ConfigMaps a cluster file holds."""
    from gputopo.cluster.k8s_reservations import DATA_KEY
    from gputopo.cluster.reservations import GangReservation

    out = []
    for cm in objects:
        meta = cm.get("metadata") or {}
        if (meta.get("labels") or {}).get(names.RESERVATION_LABEL) != "gang":
            continue
        try:
            res = GangReservation.from_json(json.loads(cm["data"][DATA_KEY]))
        except (KeyError, TypeError, ValueError):
            continue
        out.append((f"{res.key.namespace}/{res.key.name}", sorted(res.gpus())))
    return out


def _nodes(args: argparse.Namespace) -> int:
    from gputopo.cluster.node_table import domain_rows, format_rows, gangs_by_node, node_rows

    if args.live:
        from gputopo.cluster.live_snapshot import live_snapshot

        snapshot = live_snapshot(args.kubeconfig)
    else:
        from gputopo.cluster.demo import cluster_or_demo

        snapshot = cluster_or_demo(args.cluster)
    states = snapshot.node_states()
    for warning in snapshot.warnings:
        print(f"gputopo: warning: {snapshot.source}: {warning}", file=sys.stderr)
    gangs = gangs_by_node(snapshot.of_kind("Pod"), _reserved(snapshot.of_kind("ConfigMap")))
    rows = node_rows(states, gangs)
    if args.output == "json":
        print(json.dumps([asdict(r) for r in rows], indent=2))
    elif rows:
        sys.stdout.write(format_rows(rows))
        for domain in domain_rows(states):
            print(domain.line())
    else:
        print("no activated nodes (label ack.node.gpu.schedule=topology and a GPU topology "
              "annotation or ACK report)", file=sys.stderr)
    return 0
