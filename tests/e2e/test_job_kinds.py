"""Every job kind of the README, from the file a user writes to pods bound by the real
kube-scheduler on the nodes gputopo pinned.

Each job file is expanded as its operators create the pods, admitted pod by pod through the
real API server admission chain (``admitcheck``) to ``gputopo serve`` over TLS with the
generated MutatingWebhookConfiguration, and bound by ``schedsim`` (kube-scheduler 1.30 with
scheduler-plugins) with the generated profile and the PodGroups the webhook created.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import REPO, gpu_group, placed, run_jobs

from gputopo import names

EXAMPLES = REPO / "examples"
JOBS = Path(__file__).resolve().parent / "jobs"

#: (job file, platform, cluster file or None for the demo, GPU pods of the job)
CASES = [
    pytest.param(EXAMPLES / "ack-pytorch.yaml", "ack", None, 2, id="pytorchjob"),
    pytest.param(EXAMPLES / "ack-pytorch-topology.yaml", "ack", None, 2,
                 id="pytorchjob-topology-by-hand"),
    pytest.param(JOBS / "tfjob-4x1.yaml", "ack", None, 4, id="tfjob"),
    pytest.param(EXAMPLES / "arena-tf-vgg16-mpijob.yaml", "ack", None, 4, id="mpijob-v1"),
    pytest.param(EXAMPLES / "arena-tf-resnet50-mpijob.yaml", "ack", None, 4,
                 id="mpijob-v2beta1"),
    pytest.param(EXAMPLES / "trainjob-torch-distributed.yaml", "ack", None, 2,
                 id="trainjob-torch"),
    pytest.param(JOBS / "trainjob-deepspeed.yaml", "ack", None, 2, id="trainjob-deepspeed"),
    pytest.param(EXAMPLES / "jobset-pytorch.yaml", "ack", None, 4, id="jobset"),
    pytest.param(EXAMPLES / "tke-taco-mpijob.yaml", "tke", EXAMPLES / "tke-cluster.yaml", 4,
                 id="mpijob-tke"),
]


@pytest.mark.parametrize(("job", "platform", "cluster", "gpu_pods"), CASES)
def test_job_binds_where_gputopo_pinned_it(programs, deployments, kube, tmp_path, job,
                                           platform, cluster, gpu_pods):
    deployment = deployments[platform]
    kw = {"cluster": cluster} if cluster else {}
    run = run_jobs(programs, deployments[platform], kube, tmp_path, job_files=[job], **kw)
    gpu = [p for p in run.pods if gpu_group(p)]
    assert len(gpu) == gpu_pods and len(placed(run.pods)) == gpu_pods, [
        p["metadata"]["name"] for p in run.pods]
    for pod in gpu:  # the GPU resource the platform's device plugin serves
        (c, *_) = [c for c in pod["spec"]["containers"]
                   if deployment.gpu_resource in (c.get("resources") or {}).get("limits", {})]
        assert c
        assert pod["spec"]["schedulerName"] == names.SCHEDULER_NAME
    # the gang's PodGroup exists (else Coscheduling rejects at Permit for ever) and every
    # pod, launchers included, was bound: run_jobs checked each against its pin
    assert run.groups, "no PodGroup"
    assert len(run.nodes) == len(run.pods)
