"""Drill: nodes whose topology annotation is corrupt — from the start, or turned corrupt by a
later update while gangs are being placed.

Each such node is left out of placement (counted in ``gputopo_node_data_errors_total``),
the webhook neither crashes nor places anything there, gangs go to the healthy nodes, and
no GPU is handed out twice or lost.
"""

from __future__ import annotations

import copy

from admitkit import admitted, placement, pytorchjob, worker_pod
from drillkit import Ledger, live_webhook, seed, wait_for
from k8s_double import RESOURCES
from prometheus_client import REGISTRY, generate_latest

from gputopo import names
from gputopo.cluster.demo import demo_snapshot

NODE = next(r for r in RESOURCES if r.kind == "Node")
CORRUPTIONS = [
    "{not json",
    '{"version": 1, "gpus": [{"index": 0}], "links": [["X", "NV1"]]}',  # wrong shape
    '{"version": 1, "gpus": "all", "links": null}',
    "[]",
]


def _node(name: str, annotation: str) -> dict:
    node = copy.deepcopy(demo_snapshot().of_kind("Node")[0])
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION] = annotation
    return node


def _node_data_errors(client=None) -> float:
    """``gputopo_node_data_errors_total``, all reasons, as Prometheus reads it from
    ``/metrics`` (before the server runs: the same exposition of the process registry)."""
    text = client.get("/metrics").text if client is not None else \
        generate_latest(REGISTRY).decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gputopo_node_data_errors_total{"))


def test_corrupt_node_annotations_leave_the_node_out_and_nothing_breaks(kube, tmp_path) -> None:
    stored = seed(kube, *(pytorchjob(f"fit-{k}", workers=2, gpus=2) for k in range(5)),
                  *(_node(f"corrupt-{k}", bad) for k, bad in enumerate(CORRUPTIONS)))
    jobs = [obj for obj in stored if obj["kind"] == "PyTorchJob"]
    healthy = {n.name for n in demo_snapshot().node_states()}
    ledger = Ledger()
    errors = _node_data_errors()
    with live_webhook(kube, tmp_path) as hook:
        client = hook.client
        assert {n.name for n in hook.view.node_states()} == healthy  # corrupt ones left out
        assert set(hook.view.warnings) == {f"corrupt-{k}" for k in range(len(CORRUPTIONS))}
        assert _node_data_errors(client) == errors + len(CORRUPTIONS)

        answer, _ = ledger.admit(client, worker_pod(jobs[0], 0))
        first = placement(admitted(worker_pod(jobs[0], 0), answer))
        assert first["placed"] and first["node"] in healthy

        # A healthy node turns corrupt while gangs are being placed: it is left out at once.
        turned = next(n for n in sorted(healthy) if n != first["node"])
        current = kube.get(NODE, "", turned)
        current["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION] = CORRUPTIONS[0]
        kube.replace(NODE, "", turned, current)
        assert wait_for(lambda: turned not in {n.name for n in hook.view.node_states()})
        assert _node_data_errors(client) == errors + len(CORRUPTIONS) + 1

        for job in jobs:
            for index in (0, 1):
                answer, _ = ledger.admit(client, worker_pod(job, index))
                assert answer["response"]["allowed"] is True
        assert client.get("/healthz").status_code == 200

    nodes_used = {rec["node"] for rec in ledger.records.values()}
    assert nodes_used == {first["node"]}, "only the node that stayed healthy is used"
    assert len(ledger.records) == 4  # 8 GPUs, 2 x 2 per gang: two gangs fit
    assert ledger.double_allocated() == 0
    assert ledger.lost(hook.store) == 0
