"""``gputopo policy test DIR``: policy test cases, in the spirit of ``kyverno test``.

Why: a policy is code; a change to it should be checked against the pods it is meant for
before it reaches a cluster. Each ``gputopo-test.yaml`` under DIR names the policies under
test, the input objects (Pods, their Namespaces and jobs, exactly as for ``gputopo mutate``)
and the expected result per pod. Cases run through the same dry-run path as
``gputopo mutate``, so a passing case is what the webhook would do.

Test file (``kind: PolicyTest``)::

    apiVersion: gputopo.io/v1alpha1
    kind: PolicyTest
    metadata: {name: ack-pytorch}
    policies: [../../ack-gpu-topology.yaml]   # files or directories, relative to this file
    resources: [pytorchjob.yaml]              # Pods, Namespaces, jobs
    namespaceLabels: {gputopo.io/inject: enabled}   # for namespaces without an object
    cluster: demo                              # or a cluster file; only read with placement
    placement: false                           # run the placement step too (default false)
    results:
      - pod: team/pytorch-dist-nccl-master-0
        allowed: true                          # default true
        patched: true                          # the patch is (non-)empty; optional
        expectedPod: expected/master.yaml      # the whole mutated Pod; optional
        fields:                                # JSON pointer -> value; optional
          /metadata/labels/gpu-topology-replica: "2"
        absent: [/spec/hostNetwork]            # JSON pointers that must not exist
        warnings: ["audit"]                    # substrings each present in some warning
        readmitEmpty: true                     # re-admitting the result gives an empty patch
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
from jsonpointer import JsonPointer, JsonPointerException

from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.errors import InputError
from gputopo.yamlio import load_documents
from webhook.assembly import build_admitter
from webhook.dryrun import Outcome, add_missing_namespaces, admit_all, read_inputs, review_body
from webhook.pipeline import Admitter
from webhook.placement.step import make_placement_step
from webhook.policy.loader import policy_files

TEST_FILE = "gputopo-test.yaml"
TEST_KIND = "PolicyTest"
_RESULT_KEYS = ("pod", "allowed", "patched", "expectedPod", "fields", "absent", "warnings",
                "readmitEmpty")


@dataclass(frozen=True)
class CaseResult:
    test: str
    pod: str
    passed: bool
    reason: str


def _fail(test_file: Path, where: str, reason: str) -> InputError:
    return InputError(reason, file=str(test_file), obj=where)


def _pointer_value(doc: Any, pointer: str) -> tuple[bool, Any]:
    try:
        return True, JsonPointer(pointer).resolve(doc)
    except JsonPointerException:
        return False, None


def _policies_dir(test_file: Path, entries: list[Any], tmp: Path) -> Path:
    """Copy the named policy files into one directory, as build_admitter wants."""
    for i, entry in enumerate(entries):
        if not isinstance(entry, str):
            raise _fail(test_file, f"policies[{i}]", "must be a path")
        path = (test_file.parent / entry).resolve()
        files = policy_files(path) if path.is_dir() else [path]
        for f in files:
            if not f.is_file():
                raise _fail(test_file, f"policies[{i}]", f"no such file: {f}")
            shutil.copy(f, tmp / f"{i:02d}-{f.name}")
    return tmp


def _check(case: Mapping[str, Any], out: Outcome, admitter: Admitter, base: Path,
           test_file: Path, where: str) -> str | None:
    """None when the outcome meets every expectation of ``case``, else the first miss."""
    want_allowed = case.get("allowed", True)
    if out.allowed != want_allowed:
        return f"allowed is {out.allowed}, expected {want_allowed} ({out.message})"
    if "patched" in case and bool(out.patch) != bool(case["patched"]):
        return f"patch is {'non-empty' if out.patch else 'empty'}, expected the opposite"
    if case.get("expectedPod") is not None:
        docs = load_documents(base / str(case["expectedPod"]))
        if len(docs) != 1:
            raise _fail(test_file, f"{where}.expectedPod", "must hold exactly one Pod")
        diff = jsonpatch.make_patch(docs[0], out.pod).patch
        if diff:
            return f"differs from {case['expectedPod']}: {diff[:3]}"
    fields = case.get("fields") or {}
    if not isinstance(fields, Mapping):
        raise _fail(test_file, f"{where}.fields", "must map JSON pointers to values")
    for pointer, value in fields.items():
        found, got = _pointer_value(out.pod, str(pointer))
        if not found:
            return f"{pointer} is missing (expected {value!r})"
        if got != value:
            return f"{pointer} is {got!r}, expected {value!r}"
    for pointer in case.get("absent") or []:
        found, got = _pointer_value(out.pod, str(pointer))
        if found:
            return f"{pointer} is {got!r}, expected absent"
    for text in case.get("warnings") or []:
        if not any(str(text) in w for w in out.warnings):
            return f"no warning contains {text!r} (warnings: {out.warnings})"
    if case.get("readmitEmpty") and out.allowed:
        status, body = admitter.handle_body(review_body(out.pod, "readmit"))
        if status != 200 or "patch" in body.get("response", {}):
            return "re-admitting the mutated pod is not an empty patch"
    return None


def run_test_file(test_file: Path) -> list[CaseResult]:
    """Run one test file; bad test files raise InputError naming the file and field."""
    docs = load_documents(test_file)
    if len(docs) != 1 or not isinstance(docs[0], Mapping) or docs[0].get("kind") != TEST_KIND:
        raise _fail(test_file, "kind", f"a test file holds one {TEST_KIND} document")
    t = docs[0]
    name = str((t.get("metadata") or {}).get("name") or test_file.parent.name)
    base = test_file.parent
    results = t.get("results")
    if not isinstance(results, list) or not results:
        raise _fail(test_file, "results", "must be a non-empty list")
    with tempfile.TemporaryDirectory(prefix="gputopo-policy-test-") as tmp:
        policies = _policies_dir(test_file, list(t.get("policies") or []), Path(tmp))
        resources = [base / str(r) for r in t.get("resources") or []]
        pods, others = read_inputs(resources)
        cluster_ref = t.get("cluster", "demo")
        if cluster_ref == "demo" or cluster_ref is None:
            from gputopo.cluster.demo import demo_snapshot

            cluster = demo_snapshot()
        else:
            cluster = ClusterSnapshot.from_file(base / str(cluster_ref))
        for obj in others:
            cluster.add(obj)
        labels = t.get("namespaceLabels") or {}
        add_missing_namespaces(cluster, pods, {str(k): str(v) for k, v in labels.items()})
        step = None
        if t.get("placement"):
            step = make_placement_step()
        admitter = build_admitter(policies, cluster, placement=step, reload_interval_s=0)
        try:
            outcomes = {o.label.split(" ", 1)[1]: o for o in admit_all(admitter, cluster, pods)}
            out: list[CaseResult] = []
            for i, case in enumerate(results):
                where = f"results[{i}]"
                if not isinstance(case, Mapping) or not isinstance(case.get("pod"), str):
                    raise _fail(test_file, where, "needs pod: <namespace>/<name>")
                unknown = [k for k in case if k not in _RESULT_KEYS]
                if unknown:
                    raise _fail(test_file, where, f"unknown fields {unknown}")
                pod = case["pod"] if "/" in case["pod"] else f"default/{case['pod']}"
                got = outcomes.get(pod)
                if got is None:
                    out.append(CaseResult(name, pod, False, "no such Pod in the resources"))
                    continue
                miss = _check(case, got, admitter, base, test_file, where)
                out.append(CaseResult(name, pod, miss is None, miss or "ok"))
            return out
        finally:
            admitter.close()


def run_directory(directory: Path) -> list[CaseResult]:
    """Every ``gputopo-test.yaml`` under ``directory`` (recursively), in path order."""
    if not directory.is_dir():
        raise InputError("not a directory", file=str(directory))
    files = sorted(directory.rglob(TEST_FILE))
    if not files:
        raise InputError(f"no {TEST_FILE} found", file=str(directory))
    results: list[CaseResult] = []
    for f in files:
        results.extend(run_test_file(f))
    return results


def format_table(results: list[CaseResult]) -> str:
    """The pass/fail table ``gputopo policy test`` prints."""
    rows = [("TEST", "POD", "RESULT", "REASON")] + [
        (r.test, r.pod, "pass" if r.passed else "FAIL", r.reason) for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join([*(row[i].ljust(widths[i]) for i in range(3)), row[3]]).rstrip()
             for row in rows]
    passed = sum(r.passed for r in results)
    lines.append(f"\n{passed}/{len(results)} passed")
    return "\n".join(lines) + "\n"
