"""``gputopo generate scheduler-config | manifests | certs``.

Why here: the command names and flags are part of the outside contract (CONTRACT.md); the
work is done by :mod:`generator.scheduler_config`, :mod:`generator.manifests` and
:mod:`gputopo.certs`. Bad options raise InputError (one line, exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generator.platforms import DEFAULT_PLATFORM, PLATFORMS
from generator.scheduler_config import ProfileOptions
from gputopo.errors import InputError

API_VERSION_CHOICES = {"v1": "kubescheduler.config.k8s.io/v1",
                       "v1beta3": "kubescheduler.config.k8s.io/v1beta3"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``generate`` and its three subcommands to the gputopo command line."""
    gen = subparsers.add_parser("generate", help="write scheduler config, manifests or certs")
    sub = gen.add_subparsers(dest="generate_command", metavar="WHAT", required=True)

    sched = sub.add_parser(
        "scheduler-config",
        help="KubeSchedulerConfiguration with the gpu-topology-scheduler profile",
    )
    _profile_flags(sched)
    sched.add_argument("--merge-into", metavar="FILE", type=Path,
                       help="add the profile to this existing KubeSchedulerConfiguration")
    sched.add_argument("--align-queue-sort", action="store_true",
                       help="with --merge-into: give every profile Coscheduling's queue sort "
                            "(kube-scheduler needs one queue sort for all profiles)")
    sched.add_argument("-o", "--output", metavar="FILE", type=Path,
                       help="write here instead of standard output ('-': standard output)")
    sched.set_defaults(func=_scheduler_config)

    man = sub.add_parser("manifests", help="everything to deploy gputopo (what manifests/ holds)")
    _profile_flags(man)
    man.add_argument("-o", "--output", metavar="DIR", type=Path, default=Path("manifests"),
                     help="directory to write (default: manifests)")
    man.add_argument("--platform", choices=tuple(PLATFORMS), default=DEFAULT_PLATFORM,
                     help="ack (default): ACK's policy, aliyun.com/gpu; tke: keeps "
                          "nvidia.com/gpu, TKE topology + TACO/HARP policies; generic: keeps "
                          "nvidia.com/gpu (docs/install.md, Platforms)")
    man.add_argument("--image", help="the gputopo image built from the Dockerfile "
                     "(default: gputopo:0.1.0)")
    man.add_argument("--scheduler-image", help="scheduler-plugins kube-scheduler image "
                     "(default: the pinned release)")
    man.add_argument("--replicas", type=int, default=2, help="webhook replicas (>= 2)")
    man.add_argument("--scheduler-replicas", type=int, default=1,
                     help="scheduler replicas (leader-elected)")
    man.add_argument("--failure-policy", default="Ignore",
                     help="webhook failurePolicy: Ignore (default) or Fail")
    man.add_argument("--certs", default="cert-manager",
                     help="cert-manager (default) or self-signed (writes a private key!)")
    man.add_argument("--policies", metavar="DIR", type=Path,
                     help="ship every policy of DIR instead of the platform's")
    man.add_argument("--reporter-runtime-class", metavar="NAME",
                     help="runtimeClassName for the reporter (e.g. nvidia) when the NVIDIA "
                          "runtime is not the node's default")
    man.add_argument("--no-ack-reports", dest="ack_reports", action="store_false",
                     help="no read access to kube-system ConfigMaps (ACK node reports); "
                          "nodes then need the gputopo.io/topology annotation")
    man.set_defaults(func=_manifests)

    certs = sub.add_parser("certs", help="CA + serving certificate for the webhook Service")
    certs.add_argument("-o", "--output", metavar="DIR", type=Path, default=Path("certs"),
                       help="directory for ca.crt, tls.crt, tls.key (default: certs)")
    certs.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    certs.set_defaults(func=_certs)


def _profile_flags(parser: argparse.ArgumentParser) -> None:
    d = ProfileOptions()
    parser.add_argument("--api-version", default="v1",
                        help="v1 (default); v1beta3 only for scheduler-plugins images up "
                             "to v0.28 (Kubernetes 1.28 and older)")
    parser.add_argument("--gpu-resource", default=None,
                        help=f"GPU resource the profile packs (default {d.gpu_resource}; "
                             f"with --platform: the platform's) and the device plugin "
                             f"serves; shipped policies must rename the GPU to it")
    parser.add_argument("--permit-wait-seconds", type=int, default=d.permit_wait_seconds,
                        help="gang wait timeout at Permit (default %(default)s)")
    parser.add_argument("--pod-group-backoff-seconds", type=int, default=None,
                        help="Coscheduling podGroupBackoffSeconds (default: upstream's)")
    parser.add_argument("--gpu-weight", type=int, default=d.gpu_weight,
                        help="MostAllocated weight of the GPU resource, 1-100 "
                             "(default %(default)s)")
    parser.add_argument("--cpu-weight", type=int, default=d.cpu_weight,
                        help="MostAllocated weight of cpu, 1-100 (default %(default)s)")
    parser.add_argument("--memory-weight", type=int, default=d.memory_weight,
                        help="MostAllocated weight of memory, 1-100 (default %(default)s)")
    parser.add_argument("--fit-weight", type=int, default=d.fit_weight,
                        help="score weight of NodeResourcesFit, 1-100 (default %(default)s)")
    parser.add_argument("--spread-weight", type=int, default=d.spread_weight,
                        help="weight of PodTopologySpread and NodeResourcesBalancedAllocation "
                             "scoring, 0-100; 0 (default) disables them for this profile")


def _profile(args: argparse.Namespace) -> ProfileOptions:
    if args.api_version not in API_VERSION_CHOICES:
        raise InputError(f"{args.api_version!r} must be one of "
                         f"{', '.join(API_VERSION_CHOICES)}", obj="--api-version")
    return ProfileOptions(
        gpu_resource=args.gpu_resource or PLATFORMS[
            getattr(args, "platform", DEFAULT_PLATFORM)].gpu_resource,
        permit_wait_seconds=args.permit_wait_seconds,
        pod_group_backoff_seconds=args.pod_group_backoff_seconds,
        gpu_weight=args.gpu_weight,
        cpu_weight=args.cpu_weight,
        memory_weight=args.memory_weight,
        fit_weight=args.fit_weight,
        spread_weight=args.spread_weight,
        api_version=API_VERSION_CHOICES[args.api_version],
    )


def _scheduler_config(args: argparse.Namespace) -> int:
    from generator import scheduler_config
    from gputopo import yamlio

    opts = _profile(args)
    if args.merge_into is not None:
        docs = yamlio.load_documents(args.merge_into)
        if len(docs) != 1:
            raise InputError(f"expected one YAML document, found {len(docs)}",
                             file=str(args.merge_into))
        doc = scheduler_config.merge_profile(docs[0], opts, source=str(args.merge_into),
                                             align_queue_sort=args.align_queue_sort)
    else:
        if args.align_queue_sort:
            raise InputError("only makes sense with --merge-into", obj="--align-queue-sort")
        doc = scheduler_config.build_config(opts)
    _emit(yamlio.dump(doc), args.output)
    return 0


def _manifests(args: argparse.Namespace) -> int:
    from generator import manifests

    kwargs = {}
    if args.image is not None:
        kwargs["image"] = args.image
    if args.scheduler_image is not None:
        kwargs["scheduler_image"] = args.scheduler_image
    if args.policies is not None:
        kwargs["policies_dir"] = args.policies
    opts = manifests.ManifestOptions(
        webhook_replicas=args.replicas,
        scheduler_replicas=args.scheduler_replicas,
        failure_policy=args.failure_policy,
        certs=args.certs,
        reporter_runtime_class=args.reporter_runtime_class,
        ack_reports=args.ack_reports,
        platform=args.platform,
        profile=_profile(args),
        **kwargs,
    )
    _not_stdout(args.output, "generate manifests")
    written = manifests.write(opts, args.output)
    for warning in manifests.gpu_resource_warnings(opts):
        print(f"gputopo: WARNING: {warning}", file=sys.stderr)
    print(f"wrote {len(written)} files to {args.output}", file=sys.stderr)
    if opts.certs == "self-signed":
        print(f"note: {args.output}/webhook-tls.yaml holds a private key; keep it out of git",
              file=sys.stderr)
    return 0


def _certs(args: argparse.Namespace) -> int:
    from gputopo.certs import write_serving_certs
    from gputopo.names import GPUTOPO_NAMESPACE, WEBHOOK_SERVICE

    _not_stdout(args.output, "generate certs")
    if args.days <= 0:
        raise InputError(f"{args.days} must be greater than 0", obj="--days")
    write_serving_certs(args.output, service=WEBHOOK_SERVICE, namespace=GPUTOPO_NAMESPACE,
                        days=args.days)
    print(f"wrote ca.crt, tls.crt, tls.key to {args.output}", file=sys.stderr)
    return 0


def _not_stdout(output: Path, what: str) -> None:
    if str(output) == "-":
        raise InputError(f"{what} writes several files: give a directory, not -", obj="-o")


def _emit(text: str, output: Path | None) -> None:
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=str(output)) from exc
