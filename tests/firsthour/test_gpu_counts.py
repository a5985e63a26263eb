"""Bad GPU counts: the pod is neither placed nor renamed, and a warning names the container
and the field (issue 12: ``-1`` was admitted silently, ``1.5`` placed on 2 GPUs and renamed)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from gputopo import names
from gputopo.cli import main
from webhook.jobs import gpu_count_problems

JOB = {
    "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
    "metadata": {"name": "train", "namespace": "team"},
    "spec": {"pytorchReplicaSpecs": {
        "Master": {"template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
        "Worker": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
    }},
}


def _job(resources: dict[str, Any]) -> dict[str, Any]:
    job = copy.deepcopy(JOB)
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"] = resources
    return job


@pytest.mark.parametrize(("resources", "words"), [
    ({"limits": {"nvidia.com/gpu": -1}}, "a negative GPU count"),
    ({"limits": {"nvidia.com/gpu": 1.5}}, "not a whole number of GPUs"),
    ({"limits": {"nvidia.com/gpu": "500m"}}, "not a whole number of GPUs"),
    ({"limits": {"nvidia.com/gpu": 0}, "requests": {"nvidia.com/gpu": 1}}, "differs from"),
    ({"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 0}}, "differs from"),
])
def test_a_bad_gpu_count_is_not_placed_not_renamed_and_named(tmp_path, capsys, resources,
                                                             words):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(_job(resources)))
    assert main(["mutate", str(f)]) == 0
    out, err = capsys.readouterr()
    pods = [d for d in yaml.safe_load_all(out) if d]
    assert len(pods) == 2
    for pod in pods:
        assert names.PLACEMENT_ANNOTATION not in (pod["metadata"].get("annotations") or {})
        assert "nodeName" not in pod["spec"] and "affinity" not in pod["spec"]
        limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
        assert names.TOPOLOGY_GPU_RESOURCE not in limits
        assert names.GANG_LABEL not in pod["metadata"]["labels"]
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 2
    assert all("container 'pytorch'" in w and "nvidia.com/gpu" in w and words in w
               for w in warnings), warnings


def test_a_non_numeric_gpu_count_is_one_line_and_exit_2(tmp_path, capsys):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(_job({"limits": {"nvidia.com/gpu": "two"}})))
    assert main(["mutate", str(f)]) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("gputopo: error:")]
    assert "'two'" in line and "nvidia.com/gpu" in line and "Traceback" not in err


def test_gpu_count_problems_names_each_bad_field_once() -> None:
    spec = {"containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "x"},
                                    "requests": {"nvidia.com/gpu": "x"}}},
        {"name": "b", "resources": {"requests": {"aliyun.com/gpu": 1}}},
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4},
                                    "requests": {"nvidia.com/gpu": "4"}}}],
        "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": -2}}}]}
    problems = gpu_count_problems(spec, ("nvidia.com/gpu", "aliyun.com/gpu"))
    assert problems == [
        "container 'a': resources.limits[nvidia.com/gpu] is 'x', not a number",
        "container 'b': resources.requests[aliyun.com/gpu] without a limit (the API server "
        "requires limits for GPUs)",
        "initContainer 'i': resources.limits[nvidia.com/gpu] is -2, a negative GPU count",
    ]


def test_good_counts_are_still_placed(tmp_path, capsys):
    f = tmp_path / "job.yaml"
    f.write_text(yaml.safe_dump(_job({"limits": {"nvidia.com/gpu": 2}})))
    assert main(["mutate", "-o", "table", str(f)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 2 and all(len(r.split()) >= 4 and r.split()[2] != "-" for r in rows)
