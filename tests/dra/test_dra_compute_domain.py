"""The NVL72 IMEX channel claim (``placement.computeDomain: create``) beside DRA GPU claims:
a gang over two GB200 trays served by DRA gets, in each pod, its pinned GPU claim and the
channel claim; both pass the API server's pod rules, and only the GPU claims are printed as
ResourceClaims (the channel's template is the ComputeDomain's, made by NVIDIA's driver)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dra_cluster as dc
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "placement_step"))
from test_compute_domain import pod_claim_problems, tray

from gputopo import names
from gputopo.yamlio import dump, load_documents


def _dra_tray(name: str, clique: int) -> tuple[dict[str, Any], dict[str, Any]]:
    node = tray(name, clique)
    node["status"] = {"allocatable": {"cpu": "72", "memory": "480Gi", "pods": "110"}}
    topo = json.loads(node["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION])
    for g in topo["gpus"]:
        g["uuid"] = dc.uuid(name, g["index"])
        g["pciBusId"] = "0000" + dc.bus(g["index"])
    node["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION] = json.dumps(topo)
    s = dc.resource_slice(name)
    s["spec"]["devices"] = [d for d in s["spec"]["devices"]
                            if dc.MINOR_TO_INDEX[int(d["name"][4:])] < 4]
    for d in s["spec"]["devices"]:
        d["attributes"]["productName"] = {"string": "NVIDIA GB200"}
    return node, s


def test_channel_claim_and_pinned_gpu_claims_side_by_side(tmp_path: Path) -> None:
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "default", "labels": {names.INJECT_LABEL: names.INJECT_VALUE}}},
        dc.device_class()]
    for i in range(4):
        docs.extend(_dra_tray(f"r1-tray-{i:02d}", 1))
    cluster = dc.write(tmp_path / "cluster.yaml", docs)
    (policy,) = load_documents(dc.REPO / "policies" / "platforms" / "dra" /
                               "dra-gpu-topology.yaml")
    policy["spec"]["placement"]["computeDomain"] = "create"
    pol = tmp_path / "policies"
    pol.mkdir()
    (pol / "p.yaml").write_text(dump(policy))
    job = dc.write(tmp_path / "job.yaml", [dc.pytorchjob("llm", 2, "four-gpus"),
                                           dc.template()])
    r = dc.mutate("--cluster", str(cluster), "--policies", str(pol), str(job))
    assert r.returncode == 0, r.stderr
    out = [d for d in yaml.safe_load_all(r.stdout) if d]
    pods = [d for d in out if d["kind"] == "Pod"]
    claims = {d["metadata"]["name"]: d for d in out if d["kind"] == "ResourceClaim"}
    nodes = set()
    for pod in pods:
        assert pod_claim_problems(pod) == []
        entries = {e["name"]: e for e in pod["spec"]["resourceClaims"]}
        assert entries["gpus"]["resourceClaimName"] in claims
        assert entries["nvlink-imex"] == {"name": "nvlink-imex",
                                          "resourceClaimTemplateName": "llm-nvlink-imex"}
        assert {c["name"] for c in pod["spec"]["containers"][0]["resources"]["claims"]} == {
            "gpus", "nvlink-imex"}
        record = json.loads(pod["metadata"]["annotations"]["gputopo.io/placement"])
        nodes.add(record["node"])
        claim = claims[entries["gpus"]["resourceClaimName"]]
        expr = claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
        assert all(dc.uuid(record["node"], g) in expr["expression"] for g in record["gpus"])
    assert len(nodes) == 2  # two whole trays of one NVLink domain
    assert sorted(claims) == ["llm-master-0-gpus", "llm-worker-0-gpus"]
