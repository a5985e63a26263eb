"""``gputopo place``: the placement the webhook would choose for a new gang, from a cluster file.

Why a command: it answers "where would my job go, and how fast would it talk?" without a
cluster, and it is the plainest way to see the solver's reasoning. It reads the same cluster
files as ``mutate`` (:class:`gputopo.cluster.snapshot.ClusterSnapshot`) and prints the
contract's JSON with ``-o json``, else a short readable report. The gang is given either
as ``--replicas N --gpus-per-replica G`` or as a training-job file (PyTorchJob, TFJob,
MPIJob, JobSet, or a TrainJob with its runtime in the file or shipped by Trainer), whose GPU
pods (expanded as the operators would create them) make the gang.

Exit status: 0 when the gang is placeable, 1 when it is not (the answer says why), 2 on bad
input — so a script can ask "does it fit?" without parsing the output.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gputopo.errors import InputError
from gputopo.operators import expand, is_training_job, with_identity
from gputopo.operators.trainjob import is_runtime
from gputopo.placement.generations import solve_models
from gputopo.placement.job_needs import compute_share_of, with_needs
from gputopo.placement.types import (
    GangRequest,
    NodeState,
    Placement,
    with_transport_shares,
)
from gputopo.placement.waiting import (
    DEFAULT_MIN_SHARE,
)
from gputopo.quantity import gpu_memory_mib
from gputopo.topology.transport import (
    TRANSPORT_EFFICIENCY,
    TRANSPORT_ORDER,
    TransportShares,
    order_problem,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``place`` to the gputopo parser."""
    p = subparsers.add_parser(
        "place", help="where a new gang (replicas x GPUs) would go, and its predicted speed",
        description="Where the webhook would place a new gang, given as --replicas and "
                    "--gpus-per-replica or as a training-job file (JOB, '-' for stdin). "
                    "Exits 0 when placeable, 1 when not, 2 on bad input.",
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="cluster file (multi-document YAML of Nodes and bound Pods; '-' for stdin); "
        "default: the embedded demo cluster",
    )
    p.add_argument("--replicas", type=_count, metavar="N")
    p.add_argument("--gpus-per-replica", type=_count, metavar="G")
    p.add_argument("job", metavar="JOB", nargs="?",
                   help="a PyTorchJob / TFJob / MPIJob file instead of --replicas and "
                        "--gpus-per-replica ('-' for stdin)")
    p.add_argument(
        "--transport-share", action="append", default=[], metavar="TRANSPORT=SHARE",
        help="the share of the line rate NCCL gets over TRANSPORT (tcp, rdma, gdr), as a "
             "policy's placement.transportShare states it, e.g. rdma=0.8; repeatable; a "
             "node's gputopo.io/network-efficiency still wins")
    p.add_argument(
        "--compute-share", type=_share, metavar="C",
        help="the share of the job's step spent computing (0-1), as the policy key "
             "placement.computeShare or the annotation gputopo.io/compute-share says it: "
             "how much a faster GPU model speeds the job up (default: the job file's "
             "annotation, else 0.96)")
    p.add_argument(
        "--gpu-memory", type=_memory, metavar="SIZE",
        help="the least memory each GPU must have (40Gi, or MiB): smaller GPUs, and GPUs "
             "of unknown memory, are ruled out and named (placement.minGpuMemory)")
    p.add_argument("--mix-gpu-models", action="store_true",
                   help="allow the gang across GPU models, paced by the slowest "
                        "(placement.mixGpuModels)")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=_place)


def _share(raw: str) -> float:
    try:
        return compute_share_of(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _memory(raw: str) -> int:
    try:
        return gpu_memory_mib(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def transport_shares(items: list[str]) -> TransportShares:
    """``--transport-share`` values → sorted (transport, share) pairs; InputError on a bad
    one (unknown transport, share not in (0, 1], a faster transport below a slower one)."""
    out: dict[str, float] = {}
    for item in items:
        if "," in item:
            raise InputError(f"--transport-share {item!r}: one TRANSPORT=SHARE per flag; "
                             f"repeat --transport-share for each transport")
        transport, sep, raw = item.partition("=")
        transport = transport.strip().lower()
        try:
            share = float(raw) if sep else math.nan
        except ValueError:
            share = math.nan
        if transport not in TRANSPORT_EFFICIENCY:
            raise InputError(f"--transport-share {item!r}: unknown transport (known: "
                             f"{', '.join(TRANSPORT_ORDER)})")
        if not 0 < share <= 1:
            raise InputError(f"--transport-share {item!r}: needs TRANSPORT=SHARE with a "
                             f"share greater than 0 and at most 1")
        if transport in out and out[transport] != share:
            raise InputError(f"--transport-share {item!r}: {transport} is already given "
                             f"{out[transport]:g}")
        out[transport] = share
    problem = order_problem(out)
    if problem is not None:
        raise InputError(f"--transport-share: {problem}")
    return tuple(sorted(out.items()))


def _count(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


_GPU_RESOURCES = ("nvidia.com/gpu", "aliyun.com/gpu")


def _pod_gpus(pod: dict[str, Any], where: str) -> int:
    """GPUs one pod asks for (limits, else requests), whole numbers only."""
    total = 0
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        for name in _GPU_RESOURCES:
            raw = (resources.get("limits") or {}).get(name,
                                                      (resources.get("requests") or {}).get(name))
            if raw is None:
                continue
            text = str(raw).strip()
            if not text.isdigit():
                raise InputError(f"container {container.get('name')!r}: {name} is {raw!r}, "
                                 f"not a whole number of GPUs", obj=where)
            total += int(text)
    return total


def gang_of_job_file(path: str) -> tuple[GangRequest, str, dict[str, Any]]:
    """The gang of the first training job in ``path``: its GPU pods, which must all ask
    for the same number of GPUs (the solver places equal replicas); and its first GPU pod
    (whose CPU, memory and other requests limit how many share a node)."""
    from gputopo.yamlio import load_documents

    docs = load_documents(path)
    jobs = [d for d in docs if is_training_job(d)]
    if not jobs:
        raise InputError("no PyTorchJob, TFJob, MPIJob, TrainJob or JobSet in the file",
                         file=path)
    job = with_identity(jobs[0])
    what = f"{job['kind']} {job['metadata']['namespace']}/{job['metadata']['name']}"
    runtimes = [d for d in docs if is_runtime(d)]  # a TrainJob's, else the shipped ones
    try:
        pods = [o for o in expand(job, runtimes=runtimes) if o["kind"] == "Pod"]
    except InputError as exc:
        raise InputError(exc.reason, file=path, obj=what) from None
    # a DRA pod's GPUs: its claims' templates, read from the same file
    from gputopo.cluster.dra import ClaimUnknown, pod_dra_gpus
    from gputopo.cluster.snapshot import ClusterSnapshot

    ns = job["metadata"]["namespace"]
    templates = ClusterSnapshot.from_objects([
        {**d, "metadata": {"namespace": ns, **d["metadata"]}} for d in docs
        if d.get("kind") in ("ResourceClaimTemplate", "ResourceClaim")
        and isinstance(d.get("metadata"), dict)])

    def gpus_of(pod: dict[str, Any]) -> int:
        try:
            asked = pod_dra_gpus(pod.get("spec") or {}, ns, templates)
        except ClaimUnknown as exc:
            raise InputError(f"{exc} in the file", file=path, obj=what) from None
        return _pod_gpus(pod, what) + (asked.gpus if asked is not None else 0)

    counts = [gpus_of(p) for p in pods]
    gpu_pods = [p for p, n in zip(pods, counts, strict=True) if n > 0]
    counts = [n for n in counts if n > 0]
    if not counts:
        raise InputError("no pod of the job asks for a GPU", file=path, obj=what)
    if len(set(counts)) > 1:
        raise InputError(f"its GPU pods ask for different GPU counts {sorted(set(counts))}; "
                         f"place takes equal replicas", file=path, obj=what)
    gang, problems = with_needs(GangRequest(replicas=len(counts), gpus_per_replica=counts[0]),
                                _annotations(gpu_pods[0]), _annotations(job))
    if problems:
        raise InputError("; ".join(problems), file=path, obj=what)
    return gang, what, gpu_pods[0]


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _place(args: argparse.Namespace) -> int:
    if args.job is not None:
        if args.replicas is not None or args.gpus_per_replica is not None:
            raise InputError("give a job file or --replicas/--gpus-per-replica, not both",
                             obj="place")
        gang, what, pod = gang_of_job_file(args.job)
        print(f"gputopo: {what}: {gang.replicas} GPU pod(s) x {gang.gpus_per_replica} GPU(s)",
              file=sys.stderr)
    elif args.replicas is None or args.gpus_per_replica is None:
        raise InputError("needs --replicas and --gpus-per-replica, or a job file",
                         obj="place")
    else:
        gang = GangRequest(replicas=args.replicas, gpus_per_replica=args.gpus_per_replica)
        pod: dict[str, Any] = {}
    gang = replace(gang, mix_models=args.mix_gpu_models,
                   **({"compute_share": args.compute_share}
                      if args.compute_share is not None else {}),
                   **({"min_memory_mib": args.gpu_memory} if args.gpu_memory else {}))
    from gputopo.cluster.demo import cluster_or_demo
    from gputopo.cluster.node_resources import solve_fitting

    shares = transport_shares(args.transport_share)
    snapshot = cluster_or_demo(args.cluster)
    nodes = with_transport_shares(snapshot.node_states(), shares)
    if pod:  # a job's pods go to nodes that hand GPUs out as they ask (device plugin, DRA)
        from gputopo.cluster.node_fit import PodConstraints

        handout = PodConstraints.of(pod.get("spec") or {}).handout
        nodes = [n for n in nodes if n.gpu_handout == handout]
    for warning in snapshot.warnings:
        print(f"gputopo: warning: {snapshot.source}: {warning}", file=sys.stderr)
    try:
        if pod:
            placement = _judged(snapshot, pod, gang, shares)
        else:  # no pod: no constraints, volumes nor requests besides the GPUs
            placement = solve_fitting(solve_models, nodes, _with_bar(nodes, gang), {})
    except InputError as exc:
        raise InputError(exc.reason, file=snapshot.source) from exc
    if args.output == "json":
        print(json.dumps(placement.to_json(), indent=2))
    else:
        print(render(placement, len(nodes)))
    return 0 if placement.feasible else 1


def _judged(snapshot: Any, pod: dict[str, Any], gang: GangRequest,
            shares: TransportShares) -> Placement:
    """The job's gang solved and judged as the webhook admits its first GPU pod
    (``GangReserver.judge``, which ``reserve()``, the dry run and ``gputopo queue`` share):
    on the nodes the pod's nodeSelector, affinity and tolerations admit, less those its
    volumes cannot reach (which neither hold it nor set its bar for a good one-node
    placement), with the pod's CPU, memory and other requests. A placement the waiting rule
    finds not good enough (the shipped policies' ``whenFull: wait``, default ``minShare``)
    is still shown, with a note on stderr that the webhook gates the gang until a good one
    frees up."""
    from gputopo.cluster.node_resources import pod_demand
    from gputopo.cluster.node_volumes import pod_volumes
    from gputopo.cluster.reservations import InMemoryReservationStore
    from webhook.placement.reserve import GangReserver, ruled_out

    reserver = GangReserver(InMemoryReservationStore())
    fit, free, excluded = reserver.fit_and_free(snapshot, pod, shares)
    judged = reserver.judge(fit, free, gang, pod_demand(pod), pod_volumes(snapshot, pod),
                            good_share=DEFAULT_MIN_SHARE, pack_share=DEFAULT_MIN_SHARE)
    placement = judged.placement
    if not placement.feasible:
        return replace(placement, reason=ruled_out(placement.reason, judged.nodes.bound,
                                                   excluded))
    if judged.poor is not None:
        print(f"gputopo: note: the webhook would not start it now (whenFull: wait): the gang "
              f"waits, gated, for a good placement: {judged.poor.reason}", file=sys.stderr)
    return placement


def _with_bar(nodes: Sequence[NodeState], gang: GangRequest) -> GangRequest:
    """``gang`` with the bar admission solves it with (``GangReserver.good_bar`` at the
    default ``minShare``), so that ``place --replicas`` answers what the webhook would
    choose (docs/placement.md, "Good enough on one node")."""
    from gputopo.cluster.reservations import InMemoryReservationStore
    from webhook.placement.reserve import GangReserver

    return GangReserver(InMemoryReservationStore()).good_bar(nodes, gang, DEFAULT_MIN_SHARE)


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
    if placement.throughput:
        lines.append(throughput_line(placement.throughput))
    lines.append(f"why: {placement.reason}")
    return "\n".join(lines)


def throughput_line(info: Mapping[str, Any]) -> str:
    """The step-time figure of a placement's ``throughput`` (gputopo.placement.generations)
    in one line: the GPU model, the step's parts and the share of the best free now."""
    model = info.get("gpuModel")
    shown = " + ".join(model) if isinstance(model, list) else str(model)
    step = info.get("step") or {}
    stated = "" if info.get("computeShareStated") else " (default)"
    unknown = " (GPU model unknown: rated conservatively)" if info.get("unknownGpuModel") else ""
    return (f"GPU model: {shown}{unknown}, {info.get('tflops'):g} TFLOPS; predicted step "
            f"{step.get('total', 0):.3f} of the best free now = compute "
            f"{step.get('compute', 0):.3f} + all-reduce {step.get('communication', 0):.3f} "
            f"(compute share {info.get('computeShare'):g}{stated}); throughput "
            f"{info.get('shareOfBestNow', 1):.0%} of the best placement free now")
