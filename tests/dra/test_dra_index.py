"""The live view's incremental DRA inventory equals reading everything again, after any
sequence of slice, claim and node changes (what the view's watches deliver)."""

from __future__ import annotations

import copy
import random
from typing import Any

import dra_cluster as dc
import pytest

from gputopo.cluster.dra import gpu_inventory
from gputopo.cluster.dra_index import DraIndex
from gputopo.cluster.gpu_facts import gpu_identities_of

NODES = ("n0", "n1", "n2")


def _claim(name: str, rng: random.Random) -> dict[str, Any]:
    node = rng.choice(NODES)
    claim: dict[str, Any] = {"metadata": {"name": name, "namespace": "ns"}, "spec": {}}
    if rng.random() < 0.5:
        claim["status"] = {"allocation": {"devices": {"results": [
            {"driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{m}"}
            for m in rng.sample(range(8), rng.randint(1, 3))]}}}
    else:
        uuids = [dc.uuid(node, i) for i in rng.sample(range(8), 2)]
        claim["spec"] = {"devices": {"requests": [{"name": "g", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": 2, "selectors": [{"cel": {
                "expression": "device.attributes['gpu.nvidia.com'].uuid in [" +
                ", ".join(f"'{u}'" for u in uuids) + "]"}}]}}]}}
    return claim


@pytest.mark.parametrize("seed", range(6))
def test_incremental_inventory_equals_a_full_read(seed: int) -> None:
    rng = random.Random(seed)
    nodes = {n["metadata"]["name"]: n for n in dc.nodes(NODES)}
    index = DraIndex(nodes.get)
    slices: dict[str, dict[str, Any]] = {}
    claims: dict[str, dict[str, Any]] = {}
    for name, node in nodes.items():  # the node watch lists first: no slices yet, not read
        index.node_changed(name, node)
    for step in range(300):
        what = rng.random()
        if what < 0.25:  # a slice published, republished with a taint, or withdrawn
            node = rng.choice(NODES)
            old = slices.get(node)
            if old is not None and rng.random() < 0.3:
                del slices[node]
                index.slice_changed(old, None)
            else:
                new = dc.resource_slice(node)
                if rng.random() < 0.3:
                    new["spec"]["devices"][rng.randrange(8)]["taints"] = [
                        {"key": "k", "effect": "NoSchedule"}]
                slices[node] = new
                index.slice_changed(old, new)
        elif what < 0.8:  # a claim made, allocated, changed or deleted
            name = f"c{rng.randrange(12)}"
            old = claims.get(name)
            if old is not None and rng.random() < 0.3:
                del claims[name]
                index.claim_changed(old, None)
            else:
                claims[name] = _claim(name, rng)
                index.claim_changed(old, claims[name])
        else:  # a node's annotation rewritten: its GPUs' uuids gone or back
            name = rng.choice(NODES)
            node = copy.deepcopy(nodes[name])
            if rng.random() < 0.5:
                node["metadata"]["annotations"]["gputopo.io/topology"] = (
                    dc.nodes((name,))[0]["metadata"]["annotations"]["gputopo.io/topology"]
                    .replace('"uuid"', '"x"'))
            nodes[name] = node
            index.node_changed(name, node)
        index.refresh()
        full = gpu_inventory(slices.values(), claims.values(),
                             {n: gpu_identities_of(o) for n, o in nodes.items()})
        for name in NODES:
            want = full.get(name)
            assert index.get(name) == want, (step, name)
