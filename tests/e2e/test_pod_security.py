"""What README.md says of Pod Security, checked with the API server's own admission: the
shipped ACK policy gives training pods host namespaces, and Pod Security judges the pod
after the webhook, so an opted-in namespace at ``baseline`` refuses the mutated pod (the
README's install step labels it ``privileged``)."""

from __future__ import annotations

from harness import (
    DEMO_CLUSTER,
    REPO,
    dump,
    expand_job_files,
    namespace,
    nodes_of,
    serve,
    store_owners,
)


def test_a_baseline_namespace_refuses_the_mutated_pod(programs, deployments, kube, tmp_path):
    deployment = deployments["ack"]
    ns = namespace(**{"pod-security.kubernetes.io/enforce": "baseline"})
    for obj in [ns, *nodes_of(DEMO_CLUSTER)]:
        kube.apply(obj)
    made, owners = expand_job_files([REPO / "examples" / "ack-pytorch.yaml"])
    pod = store_owners(kube, owners, made)[0]
    with serve(deployment, kube.url, tmp_path / "serve") as served:
        p = programs.run("admitcheck", "--webhooks", deployment.webhooks,
                         "--namespace", dump(tmp_path / "ns.yaml", [ns]),
                         "--pod", dump(tmp_path / "pod.yaml", [pod]),
                         "--service-addr", served.addr)
    assert p.returncode == 5, p.stderr
    assert 'violates PodSecurity "baseline:latest"' in p.stderr
    assert "host namespaces" in p.stderr
    # without the webhook the same pod is admitted: it is our mutation Pod Security judges
    plain = programs.run("admitcheck", "--webhooks", "/dev/null",
                         "--namespace", tmp_path / "ns.yaml", "--pod", tmp_path / "pod.yaml")
    assert plain.returncode == 0, plain.stderr
