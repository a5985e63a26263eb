"""`generate manifests --platform generic|tke` ship gputopo's device plugin for the
platform's GPU resource, every object valid against the Kubernetes API schemas; `ack`
ships none (ACK's own plugin allocates there)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from generator import crd_check
from generator.manifests import KUBERNETES_VERSION
from gputopo import yamlio
from gputopo.cli import main


def _generate(tmp_path: Path, platform: str) -> dict[str, list[dict]]:
    out = tmp_path / platform
    assert main(["generate", "manifests", "--platform", platform, "-o", str(out)]) == 0
    return {p.name: list(yamlio.load_documents(p)) for p in out.glob("*.yaml")}


@pytest.mark.parametrize("platform", ["generic", "tke"])
def test_generic_and_tke_deploy_the_device_plugin(tmp_path, platform):
    files = _generate(tmp_path, platform)
    assert "device-plugin.yaml" in files
    (kust,) = files["kustomization.yaml"]
    assert "device-plugin.yaml" in kust["resources"]
    objs = [o for docs in files.values() for o in docs if o.get("kind") != "Kustomization"]
    for obj in objs:
        if crd_check.has_schema(obj):
            assert crd_check.check(obj) == []
        else:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    (ds,) = [o for o in files["device-plugin.yaml"] if o["kind"] == "DaemonSet"]
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--resource") + 1] == "nvidia.com/gpu", "the platform's resource"
    assert ds["metadata"]["namespace"] == "kube-system"
    (cm,) = files["policies.yaml"]
    assert all("gpuEnv: plugin" in text for name, text in cm["data"].items()
               if "gpu-topology" in name), "the webhook leaves the GPU env to the plugin"


def test_ack_ships_no_device_plugin(tmp_path):
    assert "device-plugin.yaml" not in _generate(tmp_path, "ack")
