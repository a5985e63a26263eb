"""The done-when checks of issue 2, through ``gputopo mutate`` on real YAML files: the seeds'
jobs, fed as the pods the operators create, come out as the seeds' topology examples."""

from __future__ import annotations

import base64
import json

import jsonpatch
import pytest

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.yamlio import load_documents, load_documents_text
from tests.webhook.conftest import POLICIES, SEED_CASES, body, review
from webhook.assembly import build_admitter
from webhook.placement.step import make_placement_step


def _mutate(capsys, *args):
    code = main(["mutate", *map(str, args)])
    out = capsys.readouterr()
    return code, {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
                  for p in load_documents_text(out.out)}, out.err


def test_ack_pytorch_seed(capsys):
    code, pods, err = _mutate(capsys, SEED_CASES / "ack-pytorch" / "resources.yaml")
    assert code == 0
    assert "embedded demo cluster" in err
    assert set(pods) == {"team-a/pytorch-dist-nccl-master-0", "team-a/pytorch-dist-nccl-worker-0"}
    for pod in pods.values():
        labels = pod["metadata"]["labels"]
        assert labels[names.GANG_LABEL] == "pytorch-dist-nccl"
        assert labels[names.GANG_REPLICA_LABEL] == "2"
        spec = pod["spec"]
        assert spec["hostIPC"] is spec["hostNetwork"] is spec["hostPID"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        limits = spec["containers"][0]["resources"]["limits"]
        assert limits == {names.TOPOLOGY_GPU_RESOURCE: 1}


@pytest.mark.parametrize("version", ["v1", "v2beta1"])
def test_arena_mpijob_four_workers(capsys, version):
    code, pods, _ = _mutate(capsys, SEED_CASES / f"arena-mpi-{version}" / "resources.yaml")
    assert code == 0
    workers = {k: p for k, p in pods.items() if "-worker-" in k}
    launchers = [p for k, p in pods.items() if "-launcher" in k]
    assert len(workers) == 4 and len(launchers) == 1
    for pod in workers.values():
        assert pod["metadata"]["labels"][names.GANG_REPLICA_LABEL] == "4"
        assert names.TOPOLOGY_GPU_RESOURCE in pod["spec"]["containers"][0]["resources"]["limits"]
    launcher = launchers[0]
    originals = {p["metadata"]["name"]: p for p in load_documents(
        SEED_CASES / f"arena-mpi-{version}" / "resources.yaml") if p["kind"] == "Pod"}
    assert launcher == originals[launcher["metadata"]["name"]]


def test_pod_in_namespace_without_opt_in_is_unchanged(capsys, tmp_path):
    src = SEED_CASES / "ack-pytorch" / "resources.yaml"
    docs = [d for d in load_documents(src) if d["kind"] != "Namespace"]
    f = tmp_path / "in.yaml"
    f.write_text(json.dumps(docs[0]) + "\n---\n" + "\n---\n".join(json.dumps(d) for d in docs[1:]))
    code, pods, _ = _mutate(capsys, "--namespace-labels", "team=a", f)
    assert code == 0
    for pod in pods.values():
        original = next(d for d in docs if d["metadata"]["name"] == pod["metadata"]["name"])
        assert pod == original
    # the same pods with the opt-in given on the command line are mutated
    code, pods, _ = _mutate(capsys, "--namespace-labels", "gputopo.io/inject=enabled", f)
    assert all(p["metadata"]["labels"].get(names.GANG_LABEL) for p in pods.values())


@pytest.mark.parametrize("case", ["ack-pytorch", "arena-mpi-v1", "arena-mpi-v2beta1",
                                  "tke-taco-harp"])
def test_readmitting_any_mutated_pod_gives_an_empty_patch(case):
    """Patches from the server path, applied with jsonpatch, then re-admitted (as the API
    server's reinvocation does) with placement on: nothing more to change."""
    docs = load_documents(SEED_CASES / case / "resources.yaml")
    cluster = ClusterSnapshot.from_objects([d for d in docs if d["kind"] != "Pod"])
    admitter = build_admitter(POLICIES, cluster, placement=make_placement_step(),
                              reload_interval_s=0)
    try:
        mutated_any = False
        for i, pod in enumerate(d for d in docs if d["kind"] == "Pod"):
            status, answer = admitter.handle_body(body(review(pod, uid=f"u{i}")))
            assert status == 200
            r = answer["response"]
            if "patch" not in r:
                continue
            mutated_any = True
            once = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(r["patch"])))
            status, again = admitter.handle_body(body(review(once, uid=f"r{i}")))
            assert status == 200
            assert "patch" not in again["response"], again
            cluster.add(once)
        assert mutated_any
    finally:
        admitter.close()


def test_patch_output_applies_to_the_inputs(capsys):
    src = SEED_CASES / "arena-mpi-v1" / "resources.yaml"
    assert main(["mutate", "-o", "patch", str(src)]) == 0
    out = load_documents_text(capsys.readouterr().out)
    inputs = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d
              for d in load_documents(src) if d["kind"] == "Pod"}
    assert {d["pod"] for d in out} == set(inputs)
    for d in out:
        result = jsonpatch.apply_patch(inputs[d["pod"]], d["patch"])
        assert (result != inputs[d["pod"]]) == bool(d["patch"])


def test_bad_input_file_exits_2_naming_file_and_object(capsys, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\n"
                 "spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: many}}}]}\n")
    assert main(["mutate", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(f) in err and "Pod x/p" in err and "not a quantity" in err


@pytest.mark.parametrize("doc", [
    "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: {a: 1}}\n",
    "apiVersion: v1\nkind: List\nitems: [{apiVersion: batch/v1, kind: Job, metadata: {}}]\n",
])
def test_malformed_non_pod_input_exits_2_naming_the_file(capsys, tmp_path, doc):
    """Jobs and List items are checked like top-level objects (a namespace that is not a
    string crashed the cluster view's index with a stack trace)."""
    f = tmp_path / "bad.yaml"
    f.write_text(doc)
    assert main(["mutate", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(f) in err[0] and "document 1" in err[0]


def test_policy_test_command_passes_on_shipped_policies(capsys):
    assert main(["policy", "test", str(POLICIES)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    for case in ("ack-pytorch", "arena-mpi-v1", "arena-mpi-v2beta1", "tke-taco-harp"):
        assert case in out


def test_gang_state_carries_from_pod_to_pod(capsys):
    """In one mutate run the 4 workers of a gang get distinct GPUs (the reservation made at
    the first pod is what the later pods take their slots from)."""
    code, pods, _ = _mutate(capsys, SEED_CASES / "arena-mpi-v2beta1" / "resources.yaml")
    assert code == 0
    slots = []
    for key, pod in pods.items():
        if "-worker-" not in key:
            continue
        ann = pod["metadata"].get("annotations", {})
        if names.GPU_GROUP_ANNOTATION not in ann:
            pytest.skip("placement step not installed")
        affinity = json.dumps(pod["spec"].get("affinity", {}))
        slots.append((affinity, ann[names.GPU_GROUP_ANNOTATION]))
    assert len(slots) == 4
    assert len(set(slots)) == 4


@pytest.mark.parametrize("case", ["ack-pytorch", "arena-mpi-v1", "tke-taco-harp"])
def test_mutated_pods_are_valid_kubernetes_pods(capsys, case):
    """What the webhook returns must still be a Pod the API server accepts (strict schema:
    no unknown fields, right types) — checked with the upstream OpenAPI schema."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    code, pods, _ = _mutate(capsys, SEED_CASES / case / "resources.yaml")
    assert code == 0 and pods
    for pod in pods.values():
        kubernetes_validate.validate(pod, "1.30", strict=True)


def test_bad_policies_exit_2_naming_file_and_field(capsys, tmp_path):
    (tmp_path / "p.yaml").write_text(
        "apiVersion: gputopo.io/v1alpha1\nkind: TopologyPolicy\nmetadata: {name: p}\n"
        "spec: {mutations: {dnsPolicy: Sometimes}}\n")
    src = SEED_CASES / "ack-pytorch" / "resources.yaml"
    assert main(["mutate", "--policies", str(tmp_path), str(src)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "p.yaml") in err and "spec.mutations.dnsPolicy" in err


def test_cluster_file_replaces_the_demo(capsys):
    from gputopo.cluster.demo import demo_cluster_path

    src = SEED_CASES / "ack-pytorch" / "resources.yaml"
    code, pods, err = _mutate(capsys, "--cluster", demo_cluster_path(), src)
    assert code == 0 and len(pods) == 2
    assert "demo cluster" not in err


@pytest.mark.parametrize("case", ["ack-pytorch", "arena-mpi-v1", "arena-mpi-v2beta1",
                                  "tke-taco-harp"])
def test_host_network_pods_name_every_port_as_host_port(capsys, case):
    """The API server's own rule (ValidatePodSpec → validateHostNetwork): with hostNetwork,
    every container port must have hostPort == containerPort. It defaulted the ports before
    the webhook turned hostNetwork on, so the webhook must fill them in (the PyTorchJob
    master's 23456 arrives without one) or the pod is rejected."""
    code, pods, _ = _mutate(capsys, SEED_CASES / case / "resources.yaml")
    assert code == 0 and pods
    checked = 0
    for pod in pods.values():
        spec = pod["spec"]
        if not spec.get("hostNetwork"):
            continue
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            for port in c.get("ports", []):
                assert port.get("hostPort") == port["containerPort"], (pod["metadata"]["name"],
                                                                      port)
                checked += 1
    if case == "ack-pytorch":
        assert checked >= 1, "the PyTorchJob master's port must have been checked"


def test_mutate_takes_a_launcher_pod_named_by_generate_name(capsys, tmp_path):
    """The v2beta1 launcher pod is created by a batch Job from ``generateName``: at
    admission it has no ``metadata.name`` yet. The dry run must admit it like the server."""
    docs = load_documents(SEED_CASES / "arena-mpi-v2beta1" / "resources.yaml")
    launcher = next(d for d in docs if d["kind"] == "Pod" and "-launcher" in d["metadata"]["name"])
    meta = launcher["metadata"]
    meta["generateName"] = meta.pop("name").rsplit("-", 1)[0] + "-"
    f = tmp_path / "in.yaml"
    f.write_text("\n---\n".join(json.dumps(d) for d in docs))
    code = main(["mutate", str(f)])
    out = capsys.readouterr()
    assert code == 0, out.err
    pods = [p for p in load_documents_text(out.out) if p["kind"] == "Pod"]
    assert launcher in pods  # admitted unchanged: no GPU
    assert sum(p["metadata"].get("labels", {}).get(names.GANG_REPLICA_LABEL) == "4"
               for p in pods) == 4


def test_mutate_takes_unquoted_timestamps_as_kubernetes_does(capsys, tmp_path):
    """``creationTimestamp: 2024-05-01T10:00:00Z`` unquoted (a pod saved by hand or by
    a tool) is a string to Kubernetes; the dry run must not crash on it."""
    text = (SEED_CASES / "ack-pytorch" / "resources.yaml").read_text()
    docs = load_documents_text(text)
    f = tmp_path / "in.yaml"
    f.write_text(text.replace("\nmetadata:\n", "\nmetadata:\n  creationTimestamp: "
                              "2024-05-01T10:00:00Z\n"))
    code = main(["mutate", str(f)])
    out = capsys.readouterr()
    assert code == 0, out.err
    pods = [p for p in load_documents_text(out.out) if p["kind"] == "Pod"]
    assert len(pods) == sum(d["kind"] == "Pod" for d in docs)
    assert all(p["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z" for p in pods)
