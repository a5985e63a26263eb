"""``placement.computeDomain``: the IMEX channel a gang over trays of one NVLink domain needs.

Through ``gputopo mutate`` (the admission code path) with the shipped policy changed to
``computeDomain: create``, on a cluster of two GB200 NVL72 domains as GFD labels them. The
pods' claims are checked against the API server's Pod validation rules for
``spec.resourceClaims`` (``ValidatePodSpec``: a claim name is a DNS label, unique in the
pod, exactly one of resourceClaimName / resourceClaimTemplateName; every container claim
names a pod claim, once), and the ComputeDomain against the DRA driver's published
``resource.nvidia.com/v1beta1`` type (``spec.numNodes``, ``spec.channel.
resourceClaimTemplate.name``; the channel's template name is what the pods reference).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputopo import names
from gputopo.cli import main
from gputopo.yamlio import dump, load_documents
from webhook.assembly import default_policies_dir
from webhook.placement.compute_domain import (
    CLAIM_NAME,
    compute_domain_body,
    object_names,
)

UUID = "3143b15b-c2cd-192b-28cc-9b5473fb5b93"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def tray(name: str, clique: int) -> dict:
    links = [["X" if a == b else "NV18" for b in range(4)] for a in range(4)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "labels": {names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE,
                                    names.GPU_PRODUCT_LABEL: "NVIDIA-GB200",
                                    names.GPU_CLIQUE_LABEL: f"{UUID}.{clique}",
                                    names.RACK_LABEL: f"rack-{clique}"},
                         "annotations": {names.TOPOLOGY_ANNOTATION: json.dumps(
                             {"version": 1, "gpus": [{"index": i} for i in range(4)],
                              "links": links}),
                             names.NETWORK_GBPS_ANNOTATION: "1600",
                             names.NETWORK_TRANSPORT_ANNOTATION: "gdr"}},
            "status": {"allocatable": {"nvidia.com/gpu": "4"}}}


def cluster(tmp_path: Path, trays: int = 4) -> Path:
    docs: list[dict] = [tray(f"r{c}-tray-{i:02d}", c) for c in (1, 2) for i in range(trays)]
    docs.append({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "ml",
                              "labels": {names.INJECT_LABEL: names.INJECT_VALUE}}})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def pytorchjob(tmp_path: Path, workers: int, gpus: int = 4) -> Path:
    replica = {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {
        "containers": [{"name": "pytorch", "image": "pytorch:latest",
                        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "llm", "namespace": "ml", "uid": "u-1"},
           "spec": {"pytorchReplicaSpecs": {"Master": replica,
                                            "Worker": {**replica, "replicas": workers}}}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def policies(tmp_path: Path, compute_domain: str | None) -> Path:
    (doc,) = load_documents(default_policies_dir() / "ack-gpu-topology.yaml")
    if compute_domain is not None:
        doc["spec"]["placement"]["computeDomain"] = compute_domain
    out = tmp_path / "policies"
    out.mkdir(exist_ok=True)
    (out / "policy.yaml").write_text(dump(doc))
    return out


def mutate(tmp_path: Path, capsys, compute_domain: str | None, workers: int = 3,
           gpus: int = 4) -> tuple[list[dict[str, Any]], str]:
    code = main(["mutate", "--cluster", str(cluster(tmp_path)), "--policies",
                 str(policies(tmp_path, compute_domain)), str(pytorchjob(tmp_path, workers,
                                                                          gpus))])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod"], err


def pod_claim_problems(pod: dict[str, Any]) -> list[str]:
    """The API server's rules for a pod's resource claims (ValidatePodSpec)."""
    spec = pod["spec"]
    out = []
    claims = spec.get("resourceClaims", [])
    seen = set()
    for i, c in enumerate(claims):
        name = c.get("name", "")
        if not DNS_LABEL.match(name) or len(name) > 63:
            out.append(f"resourceClaims[{i}].name {name!r}: not a DNS label")
        if name in seen:
            out.append(f"resourceClaims[{i}].name {name!r}: duplicate")
        seen.add(name)
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if c.get(k)]
        if len(sources) != 1:
            out.append(f"resourceClaims[{i}]: exactly one source, got {sources}")
        for k in sources:
            if not DNS_SUBDOMAIN.match(c[k]) or len(c[k]) > 253:
                out.append(f"resourceClaims[{i}].{k}: not a DNS subdomain")
    for ctr in spec.get("containers", []) + spec.get("initContainers", []):
        refs = [r.get("name") for r in ctr.get("resources", {}).get("claims", [])]
        if len(refs) != len(set(refs)):
            out.append(f"container {ctr['name']}: a claim named twice")
        out += [f"container {ctr['name']}: claim {r!r} not in resourceClaims"
                for r in refs if r not in seen]
    return out


def compute_domain_problems(obj: dict[str, Any]) -> list[str]:
    """The DRA driver's ComputeDomain v1beta1 type: what a valid object has."""
    out = []
    if obj.get("apiVersion") != "resource.nvidia.com/v1beta1" or obj.get("kind") != \
            "ComputeDomain":
        out.append("apiVersion/kind")
    meta, spec = obj.get("metadata", {}), obj.get("spec", {})
    if not DNS_SUBDOMAIN.match(meta.get("name", "")):
        out.append("metadata.name")
    if set(spec) - {"numNodes", "channel"}:
        out.append(f"unknown spec fields {sorted(set(spec) - {'numNodes', 'channel'})}")
    num = spec.get("numNodes")
    if not isinstance(num, int) or isinstance(num, bool) or num < 0:
        out.append("spec.numNodes: a non-negative integer")
    template = spec.get("channel", {}).get("resourceClaimTemplate", {}).get("name")
    if not isinstance(template, str) or not DNS_SUBDOMAIN.match(template):
        out.append("spec.channel.resourceClaimTemplate.name")
    if set(spec.get("channel", {})) - {"resourceClaimTemplate", "allocationMode"}:
        out.append("unknown channel fields")
    return out


def test_create_gives_every_pod_the_imex_claim_of_the_gangs_compute_domain(tmp_path,
                                                                          capsys) -> None:
    pods, err = mutate(tmp_path, capsys, "create")
    assert len(pods) == 4
    _, template = object_names("llm")
    records = [json.loads(p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
               for p in pods]
    assert len({r["node"].split("-tray")[0] for r in records}) == 1  # one domain, 4 trays
    for pod in pods:
        assert pod_claim_problems(pod) == []
        assert pod["spec"]["resourceClaims"] == [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": template}]
        (ctr,) = pod["spec"]["containers"]
        assert ctr["resources"]["claims"] == [{"name": CLAIM_NAME}]
    # no API here: the dry run says what it would create
    assert "would create ComputeDomain ml/llm-nvlink (numNodes 4" in err


def test_off_and_the_default_change_no_pod(tmp_path, capsys) -> None:
    for setting in ("off", None):
        pods, _ = mutate(tmp_path, capsys, setting)
        assert len(pods) == 4
        for pod in pods:
            assert "resourceClaims" not in pod["spec"]
            assert "claims" not in pod["spec"]["containers"][0].get("resources", {})


def test_a_gang_on_one_tray_gets_no_claim(tmp_path, capsys) -> None:
    """Four 1-GPU pods fit on one tray: its own NVLink, no IMEX channel needed."""
    pods, err = mutate(tmp_path, capsys, "create", workers=3, gpus=1)
    assert len({p["spec"]["nodeSelector"]["kubernetes.io/hostname"]
                if "nodeSelector" in p["spec"] else
                json.loads(p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])["node"]
                for p in pods}) == 1
    assert all("resourceClaims" not in p["spec"] for p in pods)
    assert "computeDomain" not in err


def test_the_compute_domain_object_is_valid_and_names_the_pods_template() -> None:
    name, template = object_names("llm")
    body = compute_domain_body(namespace="ml", name=name, template=template, num_nodes=4,
                               owner={"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                      "name": "llm", "uid": "u-1"})
    assert compute_domain_problems(body) == []
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    # a job name at the limit still gives valid names
    long_name, long_template = object_names("j" * 253)
    assert len(long_name) <= 253 and len(long_template) <= 253
    assert DNS_SUBDOMAIN.match(long_template)


@pytest.mark.parametrize("value", ["yes", "Create", 1])
def test_a_bad_compute_domain_setting_is_one_line(tmp_path, capsys, value) -> None:
    (doc,) = load_documents(default_policies_dir() / "ack-gpu-topology.yaml")
    doc["spec"]["placement"]["computeDomain"] = value
    out = tmp_path / "policies"
    out.mkdir()
    (out / "policy.yaml").write_text(dump(doc))
    code = main(["mutate", "--cluster", str(cluster(tmp_path)), "--policies", str(out),
                 str(pytorchjob(tmp_path, 1))])
    err = capsys.readouterr().err
    assert code == 2 and "spec.placement.computeDomain" in err


def test_live_admission_creates_one_compute_domain_owned_by_the_job(kube, tmp_path) -> None:
    """``gputopo serve``'s wiring on the Kubernetes API test double: the gang's four pods
    land on four trays of one domain, each gets the claim, and the ComputeDomain is created
    once (the other pods' 409s or the memo), owned by the job."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from placement_jobs import pytorch_pods
    from placement_jobs import pytorchjob as make_job
    from test_placement_live import _wait, demo_docs, live_admitter
    from test_pod_groups import _admit

    demo_docs(kube)
    job = kube.apply(make_job("llm", workers=3, gpus=4))
    with live_admitter(kube, policies=policies(tmp_path, "create")) as (admitter, view):
        for c in (1, 2):
            for i in range(4):
                kube.apply(tray(f"r{c}-tray-{i:02d}", c))
        assert _wait(lambda: len(view.node_states()) == 10)
        admitted = [_admit(admitter, pod) for pod in pytorch_pods(job)]
    name, template = object_names("llm")
    domains = {d["metadata"]["name"]: d
               for d in kube.objects("resource.nvidia.com/v1beta1", "ComputeDomain")}
    assert set(domains) == {name}
    cd = domains[name]
    assert compute_domain_problems(cd) == []
    assert cd["spec"]["numNodes"] == 4
    assert cd["spec"]["channel"]["resourceClaimTemplate"]["name"] == template
    (owner,) = cd["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("PyTorchJob", "llm",
                                                            job["metadata"]["uid"])
    assert kube.verbs[("create", "resource.nvidia.com", "computedomains", "default")] == 1
    nodes = set()
    for pod, warnings in admitted:
        assert pod_claim_problems(pod) == []
        assert pod["spec"]["resourceClaims"] == [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": template}]
        record = json.loads(pod["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
        nodes.add(record["node"])
        assert not any("computeDomain" in w for w in warnings), warnings
    assert len(nodes) == 4 and len({n.split("-tray")[0] for n in nodes}) == 1
