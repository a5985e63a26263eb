"""docs/install.md's claims about the generated manifests hold for what the generator writes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gputopo import yamlio

#: Pod fields that need a Kubernetes minor newer than the v1 APIs themselves: field path →
#: (first minor where the API server accepts it by default, why).
_FIELD_MINORS = {
    "lifecycle.preStop.sleep": (30, "PodLifecycleSleepAction: alpha in 1.29, beta from 1.30"),
    "lifecycle.postStart.sleep": (30, "PodLifecycleSleepAction: alpha in 1.29, beta from 1.30"),
}


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def _has(container: dict[str, Any], path: str) -> bool:
    node: Any = container
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_documented_minimum_kubernetes_accepts_every_generated_field(repo: Path):
    text = (repo / "docs" / "install.md").read_text(encoding="utf-8")
    match = re.search(r"\*\*Kubernetes 1\.(\d+) or newer\.\*\*", text)
    assert match, "docs/install.md states no minimum Kubernetes version"
    documented = int(match.group(1))
    needed = {}
    for path in sorted((repo / "manifests").glob("*.yaml")):
        for obj in yamlio.load_documents(path):
            for container in _containers(obj):
                for field, (minor, why) in _FIELD_MINORS.items():
                    if _has(container, field):
                        needed[f"{path.name}: {container['name']}: {field}"] = (minor, why)
    assert needed, "the webhook Deployment's preStop sleep hook is expected in manifests/"
    too_new = {k: why for k, (minor, why) in needed.items() if minor > documented}
    assert not too_new, f"docs/install.md says 1.{documented}, but: {too_new}"


def test_seed_pytorchjob_section_says_where_the_job_really_goes(repo: Path, run_cli):
    """install.md step 7/8: the seed PyTorchJob through the real admission code (the pods
    the training operator makes of it, on the demo's two DGX-1 nodes)."""
    text = " ".join((repo / "docs" / "install.md").read_text(encoding="utf-8").split())
    code, out, err = run_cli("mutate", str(repo / "policies/tests/ack-pytorch/resources.yaml"))
    assert code == 0, err
    pods = [d for d in yamlio.load_documents_text(out) if d.get("kind") == "Pod"]
    records = [json.loads(p["metadata"]["annotations"]["gputopo.io/placement"]) for p in pods]
    nodes = {r["node"] for r in records if r.get("placed")}
    assert len(records) == 2 and nodes
    if len(nodes) > 1:
        assert "talking over NVLink" not in text
        # the warning the guide quotes is the one the webhook gives
        quoted = re.search(r"\(`(its GPU replicas all claim host port [^`]*)`\)", text)
        assert quoted, "install.md does not quote the host-port warning"
        assert quoted.group(1) in " ".join(err.split()), (quoted.group(1), err)
    else:
        assert "One node, one NVLink pair" in text, "install.md must say the pair shares a node"
        plans = {r["network"]["plan"] for r in records}
        assert plans == {"host"} and '"plan": "host"' in text
