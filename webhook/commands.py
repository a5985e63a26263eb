"""``gputopo mutate`` and ``gputopo policy test``: the pipeline on files, no cluster needed.

Heavy imports (the placement step and its solver) happen only when a command runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from gputopo.errors import InputError
from gputopo.platforms import PLATFORMS
from gputopo.yamlio import WIDE, dump_documents


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``mutate`` and ``policy test`` to the ``gputopo`` command line."""
    mutate = subparsers.add_parser(
        "mutate",
        help="dry-run admission of Pods from files",
        description=(
            "Admit the Pods of FILE... through the webhook's own pipeline, in file order, and "
            "print the mutated Pods (or their JSON patches) as multi-document YAML, or a table "
            "of where each pod goes. The files may also hold the Pods' Namespaces and owning "
            "jobs; a training job (PyTorchJob, TFJob, MPIJob v1/v2beta1, JobSet, TrainJob with "
            "its runtime in the files or one Trainer ships) is expanded into the pods its "
            "operators create, unless the files hold them (or its JobSet or Jobs: a dump of "
            "a live namespace, kubectl get trainjob,jobset,job,pod -o yaml). FILE may be - "
            "(stdin). "
            "Warnings go to stderr."
        ),
    )
    mutate.add_argument("--cluster", metavar="FILE", type=Path,
                        help="cluster file (default: the embedded demo cluster)")
    mutate.add_argument("--policies", metavar="DIR", type=Path,
                        help="policy directory (default: the shipped policies)")
    mutate.add_argument("--platform", choices=tuple(PLATFORMS),
                        help="admit with the policies `generate manifests --platform` ships "
                             "(default: every shipped policy, or --policies)")
    mutate.add_argument("--namespace", metavar="NS", default="default",
                        help="namespace of input objects that name none (default: default)")
    mutate.add_argument("--namespace-labels", metavar="k=v,...",
                        help="labels of namespaces that have no Namespace object in the inputs "
                             "(default: gputopo.io/inject=enabled, i.e. opted in)")
    mutate.add_argument("-o", "--output", choices=("yaml", "patch", "table"), default="yaml",
                        help="mutated Pods (yaml, default), their JSON patches (patch), or "
                             "one line per pod: node, GPUs, predicted bus bandwidth (table)")
    mutate.add_argument("files", metavar="FILE", nargs="+", type=Path)
    mutate.set_defaults(func=_mutate)

    policy = subparsers.add_parser("policy", help="policy tools")
    policy_sub = policy.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)
    test = policy_sub.add_parser(
        "test",
        help="run policy test cases (gputopo-test.yaml files under DIR)",
        description="Run every gputopo-test.yaml under DIR; print a pass/fail table; exit 1 "
                    "when a case fails.",
    )
    test.add_argument("dir", metavar="DIR", type=Path)
    test.set_defaults(func=_policy_test)


def _mutate(args: argparse.Namespace) -> int:
    from gputopo.cluster.demo import cluster_or_demo
    from gputopo.platforms import gather_policies, platform
    from webhook.assembly import build_admitter, default_policies_dir
    from webhook.dryrun import (
        add_missing_namespaces,
        admit_all,
        format_table,
        not_yet_created,
        parse_label_list,
        read_inputs,
    )
    from webhook.pipeline import _labels
    from webhook.placement.step import make_placement_step
    from webhook.policy.match import namespace_opted_in

    ns_labels = (None if args.namespace_labels is None
                 else parse_label_list(args.namespace_labels))
    notes: list[str] = []
    pods, others = read_inputs(args.files, namespace=args.namespace, notes=notes)
    for note in notes:
        print(f"gputopo: {note}", file=sys.stderr)
    if not pods:
        raise InputError("no Pods and no training jobs in the input files",
                         file=", ".join(map(str, args.files)))
    cluster = cluster_or_demo(args.cluster)
    for obj in others:
        cluster.add(obj)
    not_yet_created(cluster, pods)  # each input pod is admitted as one being created
    cluster.node_states()  # what placement will read (and remember): say what it left out
    for warning in cluster.warnings:
        print(f"gputopo: warning: {cluster.source}: {warning}", file=sys.stderr)
    for ns in add_missing_namespaces(cluster, pods, ns_labels):
        if ns_labels is None:
            print(f"gputopo: namespace {ns} is not in the inputs: treated as opted in "
                  f"(gputopo.io/inject=enabled) for this dry run; --namespace-labels sets "
                  f"its labels", file=sys.stderr)
    for ns in sorted({str((p.pod.get("metadata") or {}).get("namespace") or "default")
                      for p in pods}):
        if not namespace_opted_in(_labels(cluster.namespace(ns))):
            print(f"gputopo: namespace {ns} is not opted in (no gputopo.io/inject=enabled "
                  f"label): its pods are admitted unchanged", file=sys.stderr)
    policies = args.policies
    with tempfile.TemporaryDirectory(prefix="gputopo-platform-") as tmp:
        if args.platform is not None:
            if policies is not None:
                raise InputError("give --policies or --platform, not both", obj="--platform")
            chosen = platform(args.platform)
            policies = gather_policies(default_policies_dir(), chosen.policies, Path(tmp))
        # can_wait: the live webhook's answer (a queue runs there), gated gangs included
        step = make_placement_step(can_wait=True)
        admitter = build_admitter(policies, cluster, placement=step, reload_interval_s=0)
    try:
        outcomes = admit_all(admitter, cluster, pods)
    finally:
        admitter.close()
    docs: list[Any] = []
    for out in outcomes:
        for warning in out.warnings:
            print(f"gputopo: {out.label}: warning: {warning}", file=sys.stderr)
        if not out.allowed:
            print(f"gputopo: {out.label}: denied: {out.message}", file=sys.stderr)
            continue
        if args.output == "table":
            continue
        if args.output == "patch":
            docs.append({"pod": out.label.split(" ", 1)[1], "patch": out.patch})
        else:
            docs.append(out.pod)
    if args.output == "yaml":  # after the pods: the ResourceClaims the webhook would create
        made = getattr(step.claims, "claims", {})
        docs.extend(made.values())
    if args.output == "table":
        sys.stdout.write(format_table(outcomes))
    else:
        sys.stdout.write(dump_documents(docs, width=WIDE))
    return 0


def _policy_test(args: argparse.Namespace) -> int:
    from webhook.policytest import format_table, run_directory

    results = run_directory(args.dir)
    sys.stdout.write(format_table(results))
    return 0 if results and all(r.passed for r in results) else 1
