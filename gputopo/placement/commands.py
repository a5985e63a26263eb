"""``gputopo place``: the placement the webhook would choose for a new gang, from a cluster file.

Why a command: it answers "where would my job go, and how fast would it talk?" without a
cluster, and it is the plainest way to see the solver's reasoning. It reads the same cluster
files as ``mutate`` (:class:`gputopo.cluster.snapshot.ClusterSnapshot`) and prints the
contract's JSON with ``-o json``, else a short readable report.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gputopo.errors import InputError
from gputopo.placement.solver import solve
from gputopo.placement.types import GangRequest, Placement


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``place`` to the gputopo parser."""
    p = subparsers.add_parser(
        "place", help="where a new gang (replicas x GPUs) would go, and its predicted speed"
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="cluster file (multi-document YAML of Nodes and bound Pods); "
        "default: the embedded demo cluster",
    )
    p.add_argument("--replicas", required=True, type=_count, metavar="N")
    p.add_argument("--gpus-per-replica", required=True, type=_count, metavar="G")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=_place)


def _count(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _place(args: argparse.Namespace) -> int:
    if args.cluster:
        from gputopo.cluster.snapshot import ClusterSnapshot

        snapshot = ClusterSnapshot.from_file(args.cluster)
    else:
        from gputopo.cluster.demo import demo_snapshot

        snapshot = demo_snapshot()
        print("gputopo: no --cluster given: using the embedded demo cluster", file=sys.stderr)
    nodes = snapshot.node_states()
    for warning in snapshot.warnings:
        print(f"gputopo: warning: {snapshot.source}: {warning}", file=sys.stderr)
    gang = GangRequest(replicas=args.replicas, gpus_per_replica=args.gpus_per_replica)
    try:
        placement = solve(nodes, gang)
    except InputError as exc:
        raise InputError(exc.reason, file=snapshot.source) from exc
    if args.output == "json":
        print(json.dumps(placement.to_json(), indent=2))
    else:
        print(render(placement, len(nodes)))
    return 0


def render(placement: Placement, node_count: int) -> str:
    """The readable form: one line per replica, the predicted speed and the reason."""
    doc: dict[str, Any] = placement.to_json()
    if not placement.feasible:
        return f"not placeable on {node_count} activated node(s): {placement.reason}"
    lines = [f"placement on {node_count} activated node(s):"]
    width = max(len(p["node"]) for p in doc["placements"])
    for p in doc["placements"]:
        gpus = ",".join(str(i) for i in p["gpus"])
        lines.append(f"  replica {p['replica']}: {p['node']:<{width}}  GPUs {gpus}")
    lines.append(f"predicted all-reduce bus bandwidth: {doc['busBandwidthGBps']:.1f} GB/s")
    lines.append(f"why: {placement.reason}")
    return "\n".join(lines)
