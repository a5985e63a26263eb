"""Who gets the fast nodes (docs/placement.md; gputopo.placement.fast_nodes), through
``gputopo place`` on a cluster file: a DGX A100 on GPUDirect RDMA, the only kind of node a
gang over one node runs well on, and two PCIe servers on 25 GbE TCP (no GPU models said:
the wiring-only placement).

What must hold: a job that fits one node takes the fastest placement (the A100's NVSwitch)
while the empty GPUDirect nodes hold the gangs waiting for them; with a 16-GPU gang waiting
(its pods gated with their waiting records, as the queue keeps them) the A100 is scarce and
the job takes the slowest good-enough set (a PCIe server's PIX pair), as before the rule;
a job that spans nodes and a cluster without GPUDirect nodes are not touched by the rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gputopo import names
from gputopo.cli import main
from gputopo.yamlio import load_documents

MIXED = Path(__file__).resolve().parents[2] / "examples" / "mixed-generations-cluster.yaml"
A100 = "dgx-a100-0"
PCIE = ("pcie-0", "pcie-1")


def _node(doc: dict, name: str) -> dict:
    """A node of the example without GPU Feature Discovery's model labels."""
    meta = doc["metadata"]
    labels = {k: v for k, v in meta["labels"].items() if not k.startswith("nvidia.com/gpu.")}
    return {**doc, "metadata": {**meta, "name": name, "labels": labels}}


def gated(name: str, replicas: int, gpus: int) -> dict:
    """A gated pod of a gang waiting in the queue, with its waiting record."""
    rec = {"waiting": True, "replica": "worker/0", "since": 1.0, "maxWaitSeconds": 3600,
           "gang": {"namespace": "default", "kind": "PyTorchJob", "name": name,
                    "uid": f"uid-{name}", "replicas": replicas, "gpusPerReplica": gpus}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-worker-0", "namespace": "default",
                         "annotations": {names.PLACEMENT_ANNOTATION: json.dumps(rec)}},
            "spec": {"schedulingGates": [{"name": names.PLACEMENT_GATE}],
                     "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Pending"}}


def cluster(tmp_path: Path, *extra: dict, gdr: bool = True) -> Path:
    docs = {d["metadata"]["name"]: d for d in load_documents(str(MIXED)) if d}
    a100 = _node(docs[A100], A100)
    if not gdr:
        a100["metadata"]["annotations"] = {**a100["metadata"]["annotations"],
                                           names.NETWORK_TRANSPORT_ANNOTATION: "tcp"}
    nodes = [a100, *(_node(docs["pcie-t4-0"], n) for n in PCIE)]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*nodes, *extra]), encoding="utf-8")
    return path


def place(capsys, path: Path, replicas: int, gpus: int) -> dict:
    code = main(["place", "--cluster", str(path), "--replicas", str(replicas),
                 "--gpus-per-replica", str(gpus), "-o", "json"])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def nodes_of(doc: dict) -> set[str]:
    return {p["node"] for p in doc["placements"]}


@pytest.mark.parametrize("shape", [(1, 2), (2, 1), (1, 4)])
def test_a_small_job_takes_the_fast_node_while_no_gang_needs_it(tmp_path, capsys, shape):
    doc = place(capsys, cluster(tmp_path), *shape)
    assert nodes_of(doc) == {A100}, doc["reason"]


@pytest.mark.parametrize("shape", [(1, 2), (2, 1), (1, 4)])
def test_with_a_gang_waiting_for_the_fast_nodes_it_takes_a_slower_good_enough_set(
        tmp_path, capsys, shape):
    doc = place(capsys, cluster(tmp_path, gated("big", 2, 8)), *shape)
    assert nodes_of(doc) <= set(PCIE) and len(nodes_of(doc)) == 1, doc["reason"]
    assert json.loads(json.dumps(doc))["busBandwidthGBps"] > 0


def test_a_waiting_gang_that_fits_one_node_leaves_the_fast_node_to_it(tmp_path, capsys):
    # only gangs over one node count: a waiting 8-GPU job does not make the A100 scarce
    doc = place(capsys, cluster(tmp_path, gated("eight", 1, 8)), 1, 2)
    assert nodes_of(doc) == {A100}, doc["reason"]


def test_without_gpudirect_nodes_the_rule_does_not_apply(tmp_path, capsys):
    # all TCP: the slowest good-enough set, waiting gangs or not (the placement before it)
    idle = place(capsys, cluster(tmp_path, gdr=False), 1, 2)
    busy = place(capsys, cluster(tmp_path, gated("big", 2, 8), gdr=False), 1, 2)
    assert nodes_of(idle) == nodes_of(busy) and nodes_of(idle) <= set(PCIE)


def test_the_kept_grouping_counts_its_gang_nodes_as_a_fresh_one_does():
    # the webhook's GroupedNodes keeps the counts the rule reads node by node
    # (GroupedNodes.gang_gpus): after any sequence of changes they are a fresh count's
    import random
    from dataclasses import replace

    from gputopo.cluster.snapshot import ClusterSnapshot
    from gputopo.placement.solver import GroupedNodes

    docs = [d for d in load_documents(str(MIXED)) if d]
    base = list(ClusterSnapshot.from_objects(docs).node_states())
    nodes = [replace(n, name=f"{n.name}-{i}") for i in range(4) for n in base]
    rng = random.Random(5)
    kept = GroupedNodes(nodes)
    assert kept.gang_gpus() == (64, 64, 8)  # A100s and V100s on GPUDirect, all empty
    for _ in range(60):
        n = rng.choice(list(kept))
        used = frozenset(rng.sample(list(n.topology.indices), rng.randint(0, 8)))
        transport = rng.choice(("tcp", "gdr", n.network_transport))
        kept = kept.replaced([replace(n, used=used, network_transport=transport)])
        assert kept.gang_gpus() == GroupedNodes(list(kept)).gang_gpus()
