"""``gputopo device-plugin``: the kubelet device plugin, as the DaemonSet runs it.

Why a thin command: everything it does is in :mod:`gputopo.deviceplugin.plugin` and below
so tests drive the same objects in-process; this module only reads flags, builds the
topology from NVML (the same source as ``gputopo topology report``), connects to the API
with the pod's service account, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from typing import TYPE_CHECKING

from gputopo import names
from gputopo.errors import InputError

if TYPE_CHECKING:
    from gputopo.deviceplugin.allocator import Allocator
    from gputopo.topology.model import Topology


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "device-plugin",
        help="the kubelet device plugin that hands out the GPUs gputopo placed (DaemonSet)",
        description="Serve the kubelet device plugin API (v1beta1) for the GPU resource: "
        "advertise one device per GPU (ID = GPU index), prefer and allocate the GPUs of "
        "each pod's gputopo placement, write back what the kubelet gave (docs/device-plugin.md).",
    )
    p.add_argument("--resource", default=names.TOPOLOGY_GPU_RESOURCE,
                   help="extended resource to register (default: %(default)s)")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                   help="this node's name (default: $NODE_NAME, set from spec.nodeName)")
    p.add_argument("--plugin-dir", default="/var/lib/kubelet/device-plugins",
                   help="the kubelet's device-plugins directory (default: %(default)s)")
    p.add_argument("--endpoint", default="gputopo-gpu.sock",
                   help="socket file name in --plugin-dir (default: %(default)s)")
    p.add_argument("--pod-resources-socket", default="/var/lib/kubelet/pod-resources/kubelet.sock",
                   help="the kubelet's PodResources API socket, read to correct annotations "
                   "(default: %(default)s)")
    p.add_argument("--reconcile-seconds", type=float, default=10.0,
                   help="how often to compare annotations with the kubelet's record; 0: never "
                   "(default: %(default)s)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: the in-cluster account, "
                   "else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--nvml-recorded", metavar="FILE",
                   help="replay NVML answers recorded on a node (JSON) instead of asking NVML")
    p.add_argument("--no-health", action="store_true",
                   help="do not watch NVML events (GPUs stay Healthy)")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus metrics on this port (default: off)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every allocation")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:  # pragma: no cover - runs until SIGTERM
    from gputopo.deviceplugin.devices import DeviceTable, HealthSource, NoHealth
    from gputopo.deviceplugin.plugin import DevicePlugin

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.node_name:
        raise InputError("--node-name (or $NODE_NAME) is required")
    if not args.resource or "/" not in args.resource:
        raise InputError(f"--resource {args.resource!r}: expected a domain-prefixed "
                         "extended resource such as aliyun.com/gpu")
    topology = _topology(args)
    table = DeviceTable(topology)
    stop = threading.Event()
    health: HealthSource = NoHealth(stop)
    if not args.no_health and not args.nvml_recorded:
        from gputopo.deviceplugin.devices import NvmlHealth

        health = NvmlHealth(topology.indices)
    allocator = _allocator(args, topology)
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    plugin = DevicePlugin(resource=args.resource, table=table, allocator=allocator,
                          plugin_dir=args.plugin_dir, endpoint=args.endpoint, health=health,
                          pod_resources=args.pod_resources_socket,
                          reconcile_every=args.reconcile_seconds)
    plugin.run(stop)
    return 0


def _topology(args: argparse.Namespace) -> Topology:  # pragma: no cover - needs NVML
    from gputopo.topology import nvml

    return nvml.local_topology(args.nvml_recorded)


def _allocator(args: argparse.Namespace, topology: Topology  # pragma: no cover
               ) -> Allocator:
    from kubernetes import client

    from gputopo.deviceplugin.allocator import Allocator
    from gputopo.deviceplugin.pods import PodDirectory
    from gputopo.kubeaccess import NoClusterAccess, cluster_configuration

    try:  # the in-cluster account (the DaemonSet's), else --kubeconfig / $KUBECONFIG
        cfg = cluster_configuration(args.kubeconfig or None)
    except NoClusterAccess as exc:
        raise InputError(f"cannot reach the API server: {exc} (run it in the DaemonSet's "
                         "service account, or pass --kubeconfig)", obj="--kubeconfig") from exc
    api = client.CoreV1Api(client.ApiClient(cfg))
    return Allocator(topology=topology,
                     pods=PodDirectory(api, node=args.node_name, resource=args.resource))
