"""``gputopo mutate`` on what ``kubectl get <job>,jobset,job,pod -o yaml`` writes for a live
namespace: a job together with what its controllers made of it (issue 34).

A job whose descendants are in the input (a TrainJob's JobSet, a JobSet's Jobs, the pods)
is not expanded again: the pods given are the ones admitted, and no pod is invented beside
them. The dumps (tests/fixtures/dumps/, made by make_dumps.py from the end-to-end flow)
carry what the API server returns: uids, ownerReferences, resourceVersions, managedFields,
statuses, and ``kind: List`` around several kinds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo.cli import main
from webhook.dryrun import placement_of

REPO = Path(__file__).resolve().parents[2]
DUMPS = REPO / "tests" / "fixtures" / "dumps"
#: dump -> the job file it was made from
JOB_FILES = {
    "pytorchjob.yaml": REPO / "examples" / "ack-pytorch.yaml",
    "tfjob.yaml": REPO / "tests" / "e2e" / "jobs" / "tfjob-4x1.yaml",
    "mpijob.yaml": REPO / "examples" / "arena-tf-resnet50-mpijob.yaml",
    "jobset.yaml": REPO / "examples" / "jobset-pytorch.yaml",
    "trainjob.yaml": REPO / "examples" / "trainjob-torch-distributed.yaml",
}


def _items(path: Path) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            out += doc["items"] if doc["kind"] == "List" else [doc]
    return out


def _rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[list[str]]:
    assert main(["mutate", "-o", "table", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["POD", "NODE"]
    return [line.split(maxsplit=5) for line in lines[1:]]


def _by_stem(rows: list[list[str]], items: list[dict[str, Any]] | None = None
             ) -> dict[str, list[str]]:
    """Rows by pod name, a generated name cut to its ``generateName`` (the dump's pods have
    the API server's suffixes, a job file's end in ``*``): node, GPUs, bus bandwidth."""
    stems = {f"{p['metadata']['namespace']}/{p['metadata']['name']}":
             f"{p['metadata']['namespace']}/{p['metadata']['generateName']}"
             for p in items or [] if p["kind"] == "Pod" and p["metadata"].get("generateName")}
    out = {stems.get(r[0], r[0].rstrip("*")): r[1:4] for r in rows}
    assert len(out) == len(rows)
    return out


def _pod_names(items: list[dict[str, Any]]) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items
            if p["kind"] == "Pod"]


@pytest.mark.parametrize("dump", [*JOB_FILES, "trainjob-with-runtime.yaml"])
def test_a_running_jobs_dump_gives_exactly_its_pods(dump, capsys):
    """Every kind: one row per pod of the dump, in its order, none invented; each GPU pod
    shows where it runs (its placement record: it is bound, so nothing is re-placed)."""
    items = _items(DUMPS / dump)
    rows = _rows(capsys, str(DUMPS / dump))
    assert [r[0] for r in rows] == _pod_names(items)
    pods = [p for p in items if p["kind"] == "Pod"]
    for row, pod in zip(rows, pods, strict=True):
        record = placement_of(pod)
        if record is None:  # the launcher: no GPU
            assert row[1:3] == ["-", "-"]
            continue
        assert row[1] == record["node"] == pod["spec"]["nodeName"]
        assert row[2] == ",".join(map(str, record["gpus"]))


@pytest.mark.parametrize("dump", list(JOB_FILES))
def test_a_dump_from_a_cluster_without_gputopo_is_placed_as_the_job_file(dump, capsys):
    """The same jobs created where gputopo is not installed (pods Pending, unmutated): the
    pods of the dump are admitted and placed exactly as the pods expanded from the job file
    the user wrote."""
    items = _items(DUMPS / f"pending-{dump}")
    rows = _rows(capsys, str(DUMPS / f"pending-{dump}"))
    assert [r[0] for r in rows] == _pod_names(items)
    expected = _rows(capsys, "--namespace", "ml", str(JOB_FILES[dump]))
    assert _by_stem(rows, items) == _by_stem(expected)
    assert any(r[1] != "-" for r in rows)  # placed, not merely listed


def _without(items: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [o for o in items if o["kind"] not in kinds]


def test_a_trainjob_dumped_with_its_pods_only(tmp_path, capsys):
    """``kubectl get trainjob,pod``: no JobSet nor Job links the pods to the TrainJob; the
    pods' JobSet labels and Trainer's naming (JobSet = TrainJob's name) do."""
    items = _without(_items(DUMPS / "pending-trainjob.yaml"), "JobSet", "Job")
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    rows = _rows(capsys, str(f))
    assert [r[0] for r in rows] == _pod_names(items)


@pytest.mark.parametrize("dump", ["pending-trainjob.yaml", "pending-jobset.yaml"])
def test_a_job_dumped_before_its_pods_exist_is_expanded_from_its_deepest_object(
        dump, tmp_path, capsys):
    """``kubectl get trainjob,jobset,job`` before the Job controller made pods: the pods come
    from the objects given (the Jobs, else the JobSet), as many as a job file gives."""
    items = _without(_items(DUMPS / dump), "Pod")
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    rows = _rows(capsys, str(f))
    expected = _rows(capsys, "--namespace", "ml", str(JOB_FILES[dump.removeprefix("pending-")]))
    assert _by_stem(rows) == _by_stem(expected)


def test_an_mpijob_dumped_without_its_launcher_job(tmp_path, capsys):
    """``kubectl get mpijob,pod``: the launcher pod's Job is missing; its
    ``training.kubeflow.org/job-name`` label names the MPIJob."""
    items = _without(_items(DUMPS / "pending-mpijob.yaml"), "Job")
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    rows = _rows(capsys, str(f))
    assert [r[0] for r in rows] == _pod_names(items)


@pytest.mark.parametrize("dump", [*JOB_FILES, *(f"pending-{d}" for d in JOB_FILES)])
def test_a_dump_is_placed_as_its_pods_alone_with_their_owners_in_the_cluster(dump, tmp_path,
                                                                            capsys):
    """The dump in one file, or its pods alone with the rest (the jobs and what their
    controllers made) in the ``--cluster`` file beside the demo's nodes, as a user holding
    ``kubectl get nodes,...`` would split it: the same table, row for row."""
    from gputopo.cluster.demo import demo_cluster_path

    items = _items(DUMPS / dump)
    cluster, pods = tmp_path / "cluster.yaml", tmp_path / "pods.yaml"
    demo = [d for d in yaml.safe_load_all(demo_cluster_path().read_text()) if d]
    cluster.write_text(yaml.safe_dump_all([*demo, *_without(items, "Pod")]))
    pods.write_text(yaml.safe_dump_all([o for o in items if o["kind"] == "Pod"]))
    whole = _rows(capsys, str(DUMPS / dump))
    alone = _rows(capsys, "--cluster", str(cluster), str(pods))
    assert alone == whole


@pytest.mark.parametrize("dump", list(JOB_FILES))
def test_a_dump_of_pods_gputopo_mutated_comes_out_unchanged(dump, tmp_path, capsys):
    """A Pending namespace dumped from a cluster that runs gputopo: its pods carry what
    gputopo wrote (node pin, GPUs, the network plan's ports: a TrainJob's rank 0 holds the
    rendezvous port). ``gputopo mutate`` over it changes no pod and places each where it
    was (docs/placement.md, Re-admission)."""
    from gputopo.yamlio import load_documents_text

    items = _items(DUMPS / f"pending-{dump}")
    assert main(["mutate", str(DUMPS / f"pending-{dump}")]) == 0
    mutated = [d for d in load_documents_text(capsys.readouterr().out, source="stdout") if d]
    it = iter(mutated)
    again = [next(it) if o["kind"] == "Pod" else o for o in items]
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": again}))
    assert _rows(capsys, str(f)) == _rows(capsys, str(DUMPS / f"pending-{dump}"))
    assert main(["mutate", str(f)]) == 0
    out = capsys.readouterr()
    assert [d for d in load_documents_text(out.out, source="stdout") if d] == mutated, out.err


@pytest.mark.parametrize("dump", list(JOB_FILES))
def test_mutated_pods_asked_about_with_a_cluster_dump_that_holds_them(dump, tmp_path, capsys):
    """The same pods, with a ``--cluster`` file that holds them too (nodes, the jobs and
    every pod, as ``kubectl get nodes,pods,... -A -o yaml`` writes it): each pod asked
    about is admitted as one being created, so its pinned GPUs are not held against its own
    gang: the same pods come out."""
    from gputopo.cluster.demo import demo_cluster_path
    from gputopo.yamlio import load_documents_text

    items = _items(DUMPS / f"pending-{dump}")
    assert main(["mutate", str(DUMPS / f"pending-{dump}")]) == 0
    mutated = [d for d in load_documents_text(capsys.readouterr().out, source="stdout") if d]
    cluster, pods = tmp_path / "cluster.yaml", tmp_path / "pods.yaml"
    demo = [d for d in yaml.safe_load_all(demo_cluster_path().read_text()) if d]
    cluster.write_text(yaml.safe_dump_all([*demo, *_without(items, "Pod"), *mutated]))
    pods.write_text(yaml.safe_dump_all(mutated))
    assert main(["mutate", "--cluster", str(cluster), str(pods)]) == 0
    out = capsys.readouterr()
    assert [d for d in load_documents_text(out.out, source="stdout") if d] == mutated, out.err
