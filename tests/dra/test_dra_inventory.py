"""Which DRA GPUs a node has and holds, read through ``gputopo nodes`` on cluster files:
allocated devices (any claim's), devices an unallocated claim pins by uuid, tainted devices,
an older pool generation, MIG devices, devices tied to no topology index."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import dra_cluster as dc
import pytest


def _nodes(tmp: Path, docs: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], str]:
    f = dc.write(tmp / "c.yaml", docs)
    p = subprocess.run(["python", "-m", "gputopo", "nodes", "--cluster", str(f), "-o", "json"],
                       capture_output=True, text=True, cwd=dc.REPO, timeout=60,
                       env={**dc.os.environ, "PYTHONPATH": str(dc.REPO)})
    assert p.returncode == 0, p.stderr
    return {r["name"]: r for r in json.loads(p.stdout)}, p.stderr


def _claim(name: str, results: list[str] | None = None, pin: list[str] | None = None
           ) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": 1}
    if pin:
        exactly["selectors"] = [{"cel": {"expression": "device.attributes['gpu.nvidia.com']"
                                         ".uuid in [" + ", ".join(f"'{u}'" for u in pin) +
                                         "]"}}]
    claim: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                             "metadata": {"name": name, "namespace": "ns"},
                             "spec": {"devices": {"requests": [{"name": "g",
                                                                "exactly": exactly}]}}}
    if results:
        claim["status"] = {"allocation": {"devices": {"results": [
            {"request": "g", "driver": "gpu.nvidia.com", "pool": "dgx-a", "device": d}
            for d in results]}}}
    return claim


def test_allocated_pinned_and_tainted_devices_are_used(tmp_path: Path) -> None:
    s = dc.resource_slice("dgx-a")
    s["spec"]["devices"][7]["taints"] = [{"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}]
    s["spec"]["devices"][6]["taints"] = [{"key": "note", "effect": "None"}]  # not blocking
    docs = [*dc.nodes(("dgx-a",)), s,
            _claim("allocated", results=["gpu-0", "gpu-1"]),
            _claim("pinned", pin=[dc.uuid("dgx-a", 7)]),
            _claim("elsewhere", results=["gpu-0"]) | {"status": {"allocation": {"devices": {
                "results": [{"request": "g", "driver": "other.example.com", "pool": "dgx-a",
                             "device": "gpu-2"}]}}}}]
    rows, _ = _nodes(tmp_path, docs)
    # gpu-0, gpu-1 (indices 4, 1), uuid of index 7, gpu-7 (index 3); another driver's
    # device of the same name is not ours
    assert rows["dgx-a"]["used"] == 4 and rows["dgx-a"]["handout"] == "dra"


def test_a_mig_device_given_out_makes_its_gpu_not_free(tmp_path: Path) -> None:
    """NVIDIA's driver publishes MIG devices with their parent's uuid (``parentUUID``) and
    PCI bus id; one allocated (or tainted) takes its whole GPU out of what gputopo offers."""
    s = dc.resource_slice("dgx-a")
    for parent, name, taint in ((2, "gpu-mig-a", False), (6, "gpu-mig-b", True)):
        mig = copy.deepcopy(s["spec"]["devices"][0])
        mig["name"] = name
        mig["attributes"] = {"type": {"string": "mig"},
                             "parentUUID": {"string": dc.uuid("dgx-a", parent)},
                             "profile": {"string": "1g.10gb"}}
        if taint:
            mig["taints"] = [{"key": "k", "effect": "NoExecute"}]
        s["spec"]["devices"].append(mig)
    claim = _claim("mig", results=["gpu-mig-a"])
    rows, _ = _nodes(tmp_path, [*dc.nodes(("dgx-a",)), s, claim])
    assert rows["dgx-a"]["gpus"] == 8 and rows["dgx-a"]["used"] == 2


def test_an_older_pool_generation_and_mig_devices_are_not_counted(tmp_path: Path) -> None:
    old = dc.resource_slice("dgx-a")
    old["metadata"]["name"] = "old"
    old["spec"]["devices"] = old["spec"]["devices"][:2]  # a stale half-list
    new = dc.resource_slice("dgx-a")
    new["spec"]["pool"]["generation"] = 2
    mig = copy.deepcopy(new["spec"]["devices"][0])
    mig["name"] = "gpu-0-mig-1g10gb-0"
    mig["attributes"]["type"] = {"string": "mig"}
    new["spec"]["devices"].append(mig)
    rows, _ = _nodes(tmp_path, [*dc.nodes(("dgx-a",)), old, new])
    assert rows["dgx-a"]["gpus"] == 8 and rows["dgx-a"]["used"] == 0


@pytest.mark.parametrize("keep", ["uuid", "pciBusId", "none"])
def test_devices_tie_by_uuid_or_bus_id_else_the_node_is_left_out(tmp_path: Path,
                                                                 keep: str) -> None:
    node = dc.nodes(("dgx-a",))[0]
    topo = json.loads(node["metadata"]["annotations"]["gputopo.io/topology"])
    for g in topo["gpus"]:
        for k in ("uuid", "pciBusId"):
            if k != keep:
                g.pop(k)
    node["metadata"]["annotations"]["gputopo.io/topology"] = json.dumps(topo)
    rows, err = _nodes(tmp_path, [node, dc.resource_slice("dgx-a")])
    if keep == "none":
        assert "dgx-a" not in rows and "match no GPU of its topology" in err
    else:
        assert rows["dgx-a"]["handout"] == "dra" and rows["dgx-a"]["used"] == 0


def test_a_gpu_the_driver_does_not_publish_is_not_free(tmp_path: Path) -> None:
    s = dc.resource_slice("dgx-a")
    del s["spec"]["devices"][0]  # gpu-0, index 4: unhealthy, say, and withdrawn
    rows, _ = _nodes(tmp_path, [*dc.nodes(("dgx-a",)), s])
    assert rows["dgx-a"]["used"] == 1


def test_claim_names_are_object_names_and_stay_apart() -> None:
    from gputopo.cluster.dra import claim_name

    assert claim_name("train", "worker/3", "gpus") == "train-worker-3-gpus"
    assert claim_name("Big_Job", "Master/0", "g") == "big-job-master-0-g"
    long_a = claim_name("j" * 300, "worker/1", "gpus")
    long_b = claim_name("j" * 300, "worker/2", "gpus")
    assert len(long_a) <= 253 and long_a != long_b
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", long_a)
