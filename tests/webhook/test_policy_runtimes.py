"""A policy can match a TrainJob by its runtime (``spec.match.runtimes``, issue 20), through
``gputopo mutate`` with a policy directory: the key narrows, is validated, and every
shipped policy matches TrainJob and JobSet gangs as it matches PyTorchJob."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gputopo import names
from gputopo.cli import main
from gputopo.operators import with_identity
from gputopo.yamlio import dump, dump_documents, load_documents, load_documents_text
from webhook.assembly import default_policies_dir
from webhook.policy.validate import validate_document


def _trainjob(name: str, runtime: str) -> dict[str, Any]:
    return with_identity({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime},
                 "trainer": {"numNodes": 2,
                             "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}}}})


def _mutate(tmp_path: Path, capsys: Any, objs: list[dict[str, Any]], *flags: str
            ) -> list[dict[str, Any]]:
    path = tmp_path / "in.yaml"
    path.write_text(dump_documents(objs))
    capsys.readouterr()
    assert main(["mutate", *flags, str(path)]) == 0
    return [d for d in load_documents_text(capsys.readouterr().out) if d["kind"] == "Pod"]


def test_runtimes_narrow_a_policy_to_trainjobs_on_those_runtimes(tmp_path, capsys):
    (doc,) = load_documents(default_policies_dir() / "ack-gpu-topology.yaml")
    doc["spec"]["match"]["runtimes"] = ["deepspeed-distributed"]
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(dump(doc))
    pods = _mutate(tmp_path, capsys, [_trainjob("torch", "torch-distributed"),
                                      _trainjob("ds", "deepspeed-distributed")],
                   "--policies", str(policies))
    gang = {p["metadata"]["generateName"]: p["metadata"]["labels"].get(names.GANG_LABEL)
            for p in pods}
    assert {k: v for k, v in gang.items() if k.startswith("torch-")} == {
        "torch-node-0-0-": None, "torch-node-0-1-": None}
    assert set(v for k, v in gang.items() if k.startswith("ds-")) == {"ds"}


@pytest.mark.parametrize("platform", ["ack", "tke", "generic"])
def test_every_platform_policy_matches_trainjob_and_jobset_gangs(tmp_path, capsys, platform):
    jobset = with_identity({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": {
            "parallelism": 2, "completions": 2, "template": {"spec": {"containers": [{
                "name": "c", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}]}})
    pods = _mutate(tmp_path, capsys, [_trainjob("tj", "torch-distributed"), jobset],
                   "--platform", platform)
    assert len(pods) == 4
    assert {p["metadata"]["labels"].get(names.GANG_LABEL) for p in pods} == {"tj", "js"}


@pytest.mark.parametrize("value", [[], ["Not_A_Runtime"], [7]])
def test_bad_runtimes_are_refused_with_their_path(value):
    doc = {"apiVersion": "gputopo.io/v1alpha1", "kind": "TopologyPolicy",
           "metadata": {"name": "p"}, "spec": {"match": {"runtimes": value}}}
    policy, errors = validate_document(doc, source="p.yaml")
    assert policy is None
    assert {e.obj for e in errors} & {"spec.match.runtimes", "spec.match.runtimes[0]"}
