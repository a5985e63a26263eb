"""DGX-1 nodes served by NVIDIA's DRA driver, as the API would hold them.

ResourceSlices are shaped as the driver publishes them (kubernetes-sigs/dra-driver-nvidia-gpu
``cmd/gpu-kubelet-plugin/deviceinfo.go``: one device per GPU named ``gpu-<minor>``, the /dev
minor, attributes ``type``, ``uuid``, ``productName``, ... ``resource.kubernetes.io/pciBusID``,
capacity ``memory``; the pool named after the node). The minors are NOT the NVML indices:
here minor m is index ``MINOR_TO_INDEX[m]``, so the slice's name order (gpu-0, gpu-1, ...)
crosses the DGX-1's NVLink quads {0,1,2,3} and {4,5,6,7}.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "gputopo" / "cluster" / "data" / "demo-cluster.yaml"
#: /dev/nvidia<minor> -> NVML index (a board wired in another order than it enumerates)
MINOR_TO_INDEX = {0: 4, 1: 1, 2: 5, 3: 0, 4: 7, 5: 2, 6: 6, 7: 3}
QUADS = ({0, 1, 2, 3}, {4, 5, 6, 7})


def uuid(node: str, index: int) -> str:
    """An NVML-shaped uuid, stable per (node, index)."""
    h = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def bus(index: int) -> str:
    return f"0000:{0x06 + index * 0x10:02x}:00.0"


def nodes(names: tuple[str, ...] = ("dgx-a", "dgx-b"), *, dra: tuple[bool, ...] | None = None
          ) -> list[dict[str, Any]]:
    """DGX-1 nodes (the demo's topology) whose annotation carries each GPU's uuid and PCI
    bus id (NVML's 8-digit domain) as the reporter writes them; a DRA node lists no
    ``nvidia.com/gpu``, a device-plugin node lists 8."""
    demo = next(d for d in yaml.safe_load_all(DEMO.read_text()) if d and d["kind"] == "Node")
    topo = json.loads(demo["metadata"]["annotations"]["gputopo.io/topology"])
    out = []
    for k, name in enumerate(names):
        served = True if dra is None else dra[k]
        t = json.loads(json.dumps(topo))
        for g in t["gpus"]:
            g["uuid"] = uuid(name, g["index"])
            g["pciBusId"] = "0000" + bus(g["index"])
        labels = {k2: v for k2, v in demo["metadata"]["labels"].items()}
        labels["kubernetes.io/hostname"] = name
        alloc = {"cpu": "64", "memory": "512Gi", "pods": "110"}
        if not served:
            alloc["nvidia.com/gpu"] = "8"
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": labels, "annotations": {
                        **demo["metadata"]["annotations"],
                        "gputopo.io/topology": json.dumps(t, separators=(",", ":"))}},
                    "status": {"capacity": dict(alloc), "allocatable": alloc}})
    return out


def device_class() -> dict[str, Any]:
    """The DeviceClass NVIDIA's chart installs."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression":
                     "device.driver == 'gpu.nvidia.com' && "
                     "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
                     "extendedResourceName": "nvidia.com/gpu"}}


def resource_slice(node: str) -> dict[str, Any]:
    devices = []
    for minor in range(8):
        index = MINOR_TO_INDEX[minor]
        devices.append({
            "name": f"gpu-{minor}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": uuid(node, index)},
                "productName": {"string": "Tesla V100-SXM2-16GB"},
                "brand": {"string": "Tesla"},
                "architecture": {"string": "Volta"},
                "cudaComputeCapability": {"version": "7.0.0"},
                "driverVersion": {"version": "570.124.6"},
                "cudaDriverVersion": {"version": "12.8.0"},
                "resource.kubernetes.io/pciBusID": {"string": bus(index)},
                "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
            },
            "capacity": {"memory": {"value": "16Gi"}},
        })
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com-abcde"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def template(name: str = "four-gpus", count: int = 4, **exactly: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": count, **exactly}}]}}}}


def pytorchjob(name: str, replicas: int, claim_template: str) -> dict[str, Any]:
    def spec(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.3.0",
                            "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [{"name": "gpus",
                                "resourceClaimTemplateName": claim_template}]}}}
    specs = {"Master": spec(1)}
    if replicas > 1:
        specs["Worker"] = spec(replicas - 1)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": specs}}


def write(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def mutate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(["python", "-m", "gputopo", "mutate", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120)


def k8s_bin() -> Path:
    if d := os.environ.get("GPUTOPO_K8S_BIN"):
        return Path(d)
    install = REPO.parent / "shared" / "k8s" / "install.sh"
    if not install.is_file():
        pytest.skip("real-Kubernetes harness not available: set GPUTOPO_K8S_BIN or "
                    "provide ../shared/k8s")
    p = subprocess.run(["bash", str(install)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"real-Kubernetes harness did not install: {p.stderr.strip()}")
    return Path(p.stdout.strip())
