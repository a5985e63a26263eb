"""``gputopo topology parse | explain | report``: the topology model from the command line.

Why these three: ``parse`` turns what a node prints into what the scheduler reads,
``explain`` answers "why is my job slow on these GPUs", and ``report`` is the small agent
that publishes a GPU node's topology — and the network transport NCCL will find there
(:mod:`gputopo.topology.transport_probe`) — on its own Node object. The Kubernetes client
is imported only when ``report`` really patches a Node.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from gputopo import names
from gputopo.errors import InputError, TopologyError
from gputopo.kubeaccess import NoClusterAccess, cluster_configuration
from gputopo.topology.cost import SPANS, best_ring_subset
from gputopo.topology.explanation import explain, fabric_explanation, network_explanation
from gputopo.topology.load import read_topology_file
from gputopo.topology.model import Topology
from gputopo.topology.transport_probe import MODES, Probe, probe, transport_annotations


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``topology`` and its subcommands to the gputopo parser."""
    top = subparsers.add_parser("topology", help="GPU topology of a node: parse, explain, report")
    sub = top.add_subparsers(dest="topology_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser("parse", help="nvidia-smi topo -m text in, gputopo.io/topology JSON out")
    p.add_argument("file", metavar="FILE", help="nvidia-smi topo -m output ('-' for stdin)")
    p.add_argument("--pretty", action="store_true", help="indented JSON")
    p.set_defaults(func=_parse)

    e = sub.add_parser("explain", help="predicted all-reduce bus bandwidth of a GPU set, and why")
    e.add_argument(
        "--topology",
        required=True,
        metavar="FILE",
        help="nvidia-smi topo -m text, annotation JSON or ACK report ConfigMap",
    )
    e.add_argument("--gpus", required=True, metavar="LIST", help="GPU indices, e.g. 0,1,2,3")
    e.add_argument(
        "--network-gbps",
        type=float,
        default=names.DEFAULT_NETWORK_GBPS,
        metavar="GBITS",
        help=f"the node's network line rate (default {names.DEFAULT_NETWORK_GBPS:g}, as for "
        "a node without the gputopo.io/network-gbps annotation)",
    )
    e.add_argument(
        "--transport",
        choices=names.NETWORK_TRANSPORTS,
        default=names.DEFAULT_NETWORK_TRANSPORT,
        help="how NCCL crosses the network (default tcp, as for an unannotated node)",
    )
    e.add_argument(
        "--span", choices=SPANS[1:], default="rack", help="locality of a multi-node gang "
        "(nvlink-domain: nodes of one NVLink fabric, a GB200 NVL72 rack's trays)"
    )
    e.add_argument("--trays", type=int, default=2, metavar="N",
                   help="with --span nvlink-domain: how many nodes of the domain (default 2)")
    e.add_argument("--gpu-model", metavar="PRODUCT",
                   help="the GPUs' product as GPU Feature Discovery's nvidia.com/gpu.product "
                        "or nvidia-smi names it (Tesla-V100-SXM2-16GB, NVIDIA A100-SXM4-80GB): "
                        "its dense FP16/BF16 TFLOPS are shown beside the step")
    e.add_argument("--compute-share", type=float, metavar="C",
                   help="the share of the job's step spent computing when placed well (0-1; "
                        "default 0.96, docs/placement.md): splits the predicted step into "
                        "compute and all-reduce")
    e.add_argument("-o", "--output", choices=("text", "json"), default="text")
    e.set_defaults(func=_explain)

    r = sub.add_parser("report", help="publish this node's topology on its Node object")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--nvidia-smi", metavar="FILE", help="read nvidia-smi topo -m output")
    src.add_argument("--nvml", action="store_true", help="ask NVML (default)")
    src.add_argument(
        "--nvml-recorded", metavar="FILE", help="replay NVML answers recorded on a node (JSON)"
    )
    r.add_argument("--node", help="Node name (default: $NODE_NAME)")
    r.add_argument(
        "--transport", choices=MODES, default="auto",
        help="gputopo.io/network-transport to publish: auto (default) detects it from sysfs "
             "(RDMA devices with an active port; gdr when a GPUDirect peer-memory module is "
             "loaded) and keeps a value an operator set by hand; tcp, rdma or gdr write that "
             "value; off leaves the transport annotations alone")
    r.add_argument("--sysfs", default="/sys", metavar="DIR",
                   help="where sysfs is mounted (default /sys)")
    r.add_argument("--kubeconfig", metavar="FILE",
                   help="kubeconfig file (default: the in-cluster account, else $KUBECONFIG)")
    r.add_argument("--dry-run", action="store_true",
                   help="print the patch (as for a node without transport annotations), do "
                        "not send it")
    r.set_defaults(func=_report)


# --- parse ------------------------------------------------------------------------------
def _parse(args: argparse.Namespace) -> int:
    topo = read_topology_file(args.file)
    if args.pretty:
        print(json.dumps(topo.to_annotation(), indent=2))
    else:
        print(topo.to_json())
    return 0


# --- explain ----------------------------------------------------------------------------
def _explain(args: argparse.Namespace) -> int:
    topo = read_topology_file(args.topology)
    gpus = _gpu_list(args.gpus)
    if not 0 < args.network_gbps < float("inf"):
        raise InputError(f"--network-gbps {args.network_gbps:g}: must be a positive number")
    try:
        result = explain_with_alternative(topo, gpus)
    except TopologyError as exc:
        raise TopologyError(exc.reason, file=args.topology, obj=f"--gpus {args.gpus}") from exc
    if args.span == "nvlink-domain":
        if args.trays < 2:
            raise InputError(f"--trays {args.trays}: a gang across nodes has at least 2")
        result["fabric"] = fabric_explanation(topo, args.trays)
    else:
        result["network"] = network_explanation(args.network_gbps, args.transport, args.span)
    result["step"] = step_explanation(result, args.gpu_model, args.compute_share)
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(render_explanation(result))
    return 0


def explain_with_alternative(topo: Topology, gpus: list[int]) -> dict[str, Any]:
    """:func:`explain` plus the best set of the same size on the node."""
    result = explain(topo, gpus)
    best, bw = best_ring_subset(topo, len(gpus))
    result["best"] = {"gpus": list(best), "busBandwidthGBps": round(bw, 3)}
    return result


def render_explanation(r: dict[str, Any]) -> str:
    """The text form of ``topology explain``."""
    gpus = ",".join(map(str, r["gpus"]))
    gen = r["generation"] or "PCIe only, no NVLink"
    # all-to-all is NVSwitch or a direct full mesh (HGX A100 4-GPU): the legend cannot tell
    kind = f"{gen}, all-to-all" if r["allToAll"] else gen
    lines = [
        f"GPUs {gpus} ({kind}): predicted all-reduce bus bandwidth {r['busBandwidthGBps']:g} GB/s"
    ]
    if len(r["gpus"]) == 1:
        lines.append("one GPU needs no all-reduce; the figure is the node's best link")
    else:
        lines.append(
            f"channels: {r['channels']:g} x {r['perChannelGBps']:g} GB/s line rate x "
            f"{r['linkEfficiency']:g} achieved ({r['model']}: {r['limit']})"
        )
        if len(r["gpus"]) == 2:
            e = r["links"][0]
            lines.append(f"pair: {e['from']} -{e['link']}- {e['to']}")
        else:
            ring = " ".join(f"{e['from']} -{e['link']}->" for e in r["links"])
            lines.append(
                f"best single ring: {ring} {r['ring'][0]} "
                f"({r['ringBusBandwidthGBps']:g} GB/s)"
            )
        b = r["bottleneck"]
        lines.append(
            f"bottleneck: GPU{b['from']}-GPU{b['to']} {b['link']} "
            f"({b['bandwidthGBps']:g} GB/s per direction, line rate, on that ring)"
        )
    best = r["best"]
    if best["busBandwidthGBps"] > r["busBandwidthGBps"]:
        lines.append(
            f"better: GPUs {','.join(map(str, best['gpus']))} would give "
            f"{best['busBandwidthGBps']:g} GB/s "
            f"({best['busBandwidthGBps'] / r['busBandwidthGBps']:.1f}x)"
        )
    else:
        lines.append(f"no {len(r['gpus'])}-GPU set on this node is faster")
    fabric = r.get("fabric")
    if fabric is not None:
        lines.append(
            f"across nodes: one NVLink domain ({fabric['trays']} trays): "
            f"{fabric['fabricLineGBps']:g} GB/s NVLink per GPU ({fabric['generation']}) x "
            f"{fabric['linkEfficiency']:g} = {fabric['busBandwidthGBps']:g} GB/s, no network; "
            f"a gang over trays of the domain gets at most min(its node shares, "
            f"{fabric['busBandwidthGBps']:g} GB/s); its pods need the domain's IMEX channel")
    net = r.get("network")
    if net is not None:
        lines.append(
            f"across nodes: {net['lineGbps']:g} Gbit/s over {net['transport']} x "
            f"{net['transportEfficiency']:g} = {net['effectiveGbps']:g} Gbit/s, "
            f"{net['effectiveGBps']:g} GB/s in one {net['span']} "
            f"(span factor {net['spanFactor']:g}); a gang spread over nodes gets at most "
            f"min(its node shares, {net['effectiveGBps']:g} GB/s)"
        )
    if r.get("step") is not None:
        lines.append(_step_line(r["step"]))
    return "\n".join(lines)


def step_explanation(result: dict[str, Any], product: str | None,
                     compute_share: float | None) -> dict[str, Any]:
    """The predicted step of a job on these GPUs relative to the same job on the node's
    best set of that size (1.0), in parts (gputopo.placement.throughput): the compute does
    not depend on which GPUs of one node, the all-reduce scales with the bus bandwidth."""
    from gputopo.placement.throughput import DEFAULT_COMPUTE_SHARE, Speed, step
    from gputopo.topology.gpus import gpu_model

    c = DEFAULT_COMPUTE_SHARE if compute_share is None else compute_share
    if not 0 <= c <= 1:
        raise InputError(f"--compute-share {c:g}: must be a number from 0 to 1")
    one = len(result["gpus"]) == 1
    bus = 0.0 if one else result["busBandwidthGBps"]
    best = 0.0 if one else result["best"]["busBandwidthGBps"]
    parts = step(Speed(None, bus), Speed(None, best), c)
    out: dict[str, Any] = {"computeShare": c, "computeShareStated": compute_share is not None,
                           "compute": round(parts.compute, 4),
                           "communication": round(parts.communication, 4),
                           "total": round(parts.total, 4)}
    if product:
        model = gpu_model(product)
        out.update(model.to_json())
    return out


def _step_line(st: dict[str, Any]) -> str:
    model = ""
    if "model" in st:
        unknown = ", not in the table: rated conservatively" if st.get("unknownModel") else ""
        model = f" on {st['model']} ({st['tflops']:g} TFLOPS dense FP16/BF16{unknown})"
    stated = "" if st["computeShareStated"] else ", the default"
    return (f"step{model}: {st['total']:.3f} of the same job on this node's best set = "
            f"compute {st['compute']:.3f} + all-reduce {st['communication']:.3f} "
            f"(compute share {st['computeShare']:g}{stated})")


def _gpu_list(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise InputError(f"--gpus {text!r}: expected GPU indices like 0,1,2")
    return [int(p) for p in parts]


# --- report -----------------------------------------------------------------------------
def _report(args: argparse.Namespace) -> int:
    node = args.node or os.environ.get("NODE_NAME")
    if not node:
        raise InputError("no node name: pass --node or set NODE_NAME (downward API)")
    topo = node_topology_from_args(args)
    patch = annotation_patch(topo, identities_from_args(args))
    domain = nvlink_domain_from_args(args)
    if domain:
        patch["metadata"]["annotations"][names.NVLINK_DOMAIN_DETECTED_ANNOTATION] = domain
    found = _probe(args)
    # with --transport off nothing is detected and nothing about the transport is written
    detected = found.transport if found is not None else None
    found_why = found.why if found is not None else "sysfs not read"
    if args.dry_run:
        extra, why = transport_annotations({}, detected, args.transport)
        patch["metadata"]["annotations"].update(extra)
        print(json.dumps({"node": node, "patch": patch,
                          "transport": {"detected": detected, "why": found_why,
                                        "action": why}}, indent=2))
        return 0
    # Two patches and no GET: the reporter's account may only patch nodes. The first
    # answers with the Node as it is, which says whether its transport was set by hand.
    api = _core_api(args.kubeconfig)
    now = _patch_node(api, node, patch)
    extra, why = transport_annotations(now, detected, args.transport)
    if domain is None and names.NVLINK_DOMAIN_DETECTED_ANNOTATION in now:
        extra[names.NVLINK_DOMAIN_DETECTED_ANNOTATION] = None  # the fabric no longer says one
    if extra:
        _patch_node(api, node, {"metadata": {"annotations": extra}})
    print(f"patched node {node}: {names.TOPOLOGY_ANNOTATION} ({len(topo.gpus)} GPUs); "
          f"{why}: {found_why}", file=sys.stderr)
    return 0


def _probe(args: argparse.Namespace) -> Probe | None:
    """What ``--sysfs`` says about the transport; None with ``--transport off`` (sysfs is
    not read: nothing about the transport is written)."""
    if args.transport == "off":
        return None
    try:
        return probe(args.sysfs)
    except InputError as exc:
        raise InputError(exc.reason, obj=f"--sysfs {args.sysfs}") from exc


def node_topology_from_args(args: argparse.Namespace) -> Topology:
    """The topology from --nvidia-smi FILE, recorded NVML data, or live NVML."""
    if args.nvidia_smi:
        return read_topology_file(args.nvidia_smi)
    from gputopo.topology import nvml

    return nvml.local_topology(args.nvml_recorded)


def nvlink_domain_from_args(args: argparse.Namespace) -> str | bool | None:
    """The node's NVLink domain from NVML's fabric info (gputopo.topology.nvml_fabric), None
    when NVML says none; False with ``--nvidia-smi`` (no NVML asked: left as it is)."""
    if args.nvidia_smi:
        return False
    from gputopo.topology import nvml
    from gputopo.topology.nvml_fabric import nvlink_domain_from_nvml

    return nvlink_domain_from_nvml(nvml.local_source(args.nvml_recorded))


def identities_from_args(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each GPU's uuid and PCI bus id from NVML (recorded or live); none with
    ``--nvidia-smi`` (its text names neither)."""
    if args.nvidia_smi:
        return []
    from gputopo.topology import nvml

    return nvml.gpu_identities(nvml.local_source(args.nvml_recorded))


def annotation_patch(topo: Topology, identities: list[dict[str, Any]] | None = None
                     ) -> dict[str, Any]:
    """The strategic-merge patch that sets the node's topology annotation, each
    ``gpus[i]`` with its ``uuid``, ``pciBusId``, ``name`` and ``memoryMiB`` where NVML gave
    them (CONTRACT.md; gputopo.topology.nvml.gpu_identities)."""
    if not identities:
        return {"metadata": {"annotations": {names.TOPOLOGY_ANNOTATION: topo.to_json()}}}
    value = topo.to_annotation()
    by_index = {g["index"]: g for g in identities}
    for g in value.get("gpus") or []:
        extra = by_index.get(g.get("index"), {})
        g.update({k: v for k, v in extra.items() if k != "index"})
    return {"metadata": {"annotations": {names.TOPOLOGY_ANNOTATION: json.dumps(
        value, separators=(",", ":"))}}}


def _core_api(kubeconfig: str | None) -> Any:
    """CoreV1Api on its own configuration (the in-cluster account, else the kubeconfig):
    the client library's process-wide default is left alone."""
    from kubernetes import client

    try:
        cfg = cluster_configuration(kubeconfig)
    except NoClusterAccess as exc:
        raise InputError(f"no in-cluster account and no kubeconfig: {exc.__cause__}") from exc
    return client.CoreV1Api(client.ApiClient(cfg))


def _patch_node(api: Any, node: str, patch: dict[str, Any]) -> dict[str, str]:
    """Strategic-merge ``patch`` into Node ``node``; its annotations after the patch."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        resp = api.patch_node(node, patch, _preload_content=False, _request_timeout=30)
        obj = json.loads(resp.data)
    except ApiException as exc:
        raise InputError(f"patch failed: {exc.status} {exc.reason}", obj=f"Node {node}") from exc
    except (HTTPError, OSError, ValueError) as exc:
        raise InputError(f"patch failed: {exc}", obj=f"Node {node}") from exc
    ann = (obj.get("metadata") or {}).get("annotations") if isinstance(obj, dict) else None
    return {str(k): str(v) for k, v in ann.items()} if isinstance(ann, dict) else {}
