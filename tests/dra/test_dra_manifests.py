"""``generate manifests --platform dra``: no device plugin, DRA RBAC, DynamicResources kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _generate(tmp: Path) -> dict[str, list[dict]]:
    out = tmp / "m"
    p = subprocess.run(["python", "-m", "gputopo", "generate", "manifests", "--platform", "dra",
                        "-o", str(out)], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert p.returncode == 0, p.stderr
    return {f.name: [d for d in yaml.safe_load_all(f.read_text()) if d]
            for f in out.iterdir()}


def test_dra_platform_ships_no_device_plugin_and_keeps_dynamic_resources(tmp_path: Path
                                                                         ) -> None:
    files = _generate(tmp_path)
    assert "device-plugin.yaml" not in files
    assert "reporter.yaml" in files  # the uuid / PCI bus id of each GPU index come from it
    [cm] = [d for d in files["scheduler.yaml"] if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(next(iter(cm["data"].values())))
    for profile in config["profiles"]:
        for point in (profile.get("plugins") or {}).values():
            names = [p["name"] for p in (point or {}).get("disabled") or []]
            assert "DynamicResources" not in names
            assert "*" not in names or point.get("enabled")  # only queueSort-like swaps
    rules = [r for d in files["webhook-rbac.yaml"] if d["kind"] == "ClusterRole"
             for r in d["rules"] if "resource.k8s.io" in r["apiGroups"]]
    verbs = {res: set(r["verbs"]) for r in rules for res in r["resources"]}
    assert verbs == {"resourceslices": {"list", "watch"},
                     "resourceclaimtemplates": {"get", "list", "watch"},
                     "resourceclaims": {"get", "list", "watch", "create"}}
    [pol] = [d for d in files["policies.yaml"] if d["kind"] == "ConfigMap"]
    assert any("dra-gpu-topology" in k for k in pol["data"])


def test_the_reporter_writes_each_gpus_uuid_and_bus_id_that_tie_dra_devices(
        tmp_path: Path) -> None:
    """``topology report`` from recorded NVML answers (uuids included): the annotation's
    ``gpus[i]`` carry ``uuid`` and ``pciBusId``, and a slice's devices tie to them."""
    import json

    from gputopo.cluster.dra import gpu_inventory
    from gputopo.cluster.gpu_facts import gpu_identities_of

    data = json.loads((REPO / "tests" / "topology" / "data" / "dgx1-v100-nvml.json")
                      .read_text())
    for i, dev in enumerate(data["devices"]):
        dev["uuid"] = f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd"
    rec = tmp_path / "nvml.json"
    rec.write_text(json.dumps(data))
    p = subprocess.run(["python", "-m", "gputopo", "topology", "report", "--nvml-recorded",
                        str(rec), "--node", "n1", "--dry-run", "--transport", "off"],
                       capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert p.returncode == 0, p.stderr
    ann = json.loads(p.stdout)["patch"]["metadata"]["annotations"]
    node = {"metadata": {"name": "n1", "annotations": ann}}
    ids = gpu_identities_of(node)
    assert [g.uuid for g in ids] == [d["uuid"] for d in data["devices"]]
    assert all(g.pci_bus_id and g.pci_bus_id.startswith("0000:") and
               len(g.pci_bus_id.split(":")[0]) == 4 for g in ids)
    # a device known by its PCI bus id alone (no uuid attribute) ties too
    slice_ = {"spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1"},
                       "devices": [{"name": "gpu-0", "attributes": {
                           "resource.kubernetes.io/pciBusID": {"string": ids[5].pci_bus_id}}}]}}
    inv = gpu_inventory([slice_], [], {"n1": ids})
    assert inv["n1"].devices[5].name == "gpu-0"


def test_gpu_device_classes_policy_key_is_checked(tmp_path: Path) -> None:
    from webhook.policy.loader import load_policies

    base = (REPO / "policies" / "platforms" / "dra" / "dra-gpu-topology.yaml").read_text()
    for bad, words in (("[]", "at least one DeviceClass"), ("[Not_A_Name]", "DNS subdomain"),
                       ("gpu.nvidia.com", "must be a list")):
        d = tmp_path / f"p{len(words)}"
        d.mkdir()
        (d / "p.yaml").write_text(base.replace(
            "    podGroup: create\n", f"    podGroup: create\n    gpuDeviceClasses: {bad}\n"))
        try:
            load_policies(d)
        except Exception as exc:  # PolicySetError: every problem, with its field path
            assert "spec.placement.gpuDeviceClasses" in str(exc) and words in str(exc), exc
        else:
            raise AssertionError(f"gpuDeviceClasses: {bad} accepted")
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "p.yaml").write_text(base.replace(
        "    podGroup: create\n", "    podGroup: create\n    gpuDeviceClasses: [a.b, c]\n"))
    [policy] = load_policies(ok)
    assert policy.placement.gpu_device_classes == ("a.b", "c")
