"""The queue reads waiting records of every webhook version: a record written before
``gang.transportShare`` existed, one whose table is malformed (hand-edited annotation), and
a gang whose pods disagree (admitted across a webhook upgrade) — never a crash, never a
table that policy validation would refuse, and the same answer whatever order the pods
come in (a new leader and ``gputopo queue --cluster`` must see what the last leader saw).

The records are made by the webhook's own writer (``waiting_record``) and then aged or
edited as the case needs; the pods go through ``waiting_gangs`` (what the queue runs on
every pass) and through ``gputopo queue --cluster`` with a real cluster file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from queue_kit import NODE_A, NODE_B, busy_pod

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.demo import demo_cluster_path
from gputopo.cluster.reservations import GangKey
from gputopo.placement.types import GangRequest
from gputopo.yamlio import dump_documents, load_documents
from webhook.placement.records import waiting_record
from webhook.policy.schema import PlacementSettings
from webhook.queue.gangs import waiting_gangs

KEY = GangKey("default", "MPIJob", "waiter", "uid-w")
GANG = GangRequest(replicas=2, gpus_per_replica=1)


def gated_pod(index: int, shares: Any = "as written", *, since: float = 100.0,
              written: tuple[tuple[str, float], ...] = (("tcp", 0.5),)) -> dict[str, Any]:
    """Worker ``index`` of the gang, gated, with the record the webhook writes under a
    policy with transport shares ``written``; ``shares`` replaces the record's table (None:
    the key removed, as an older webhook wrote it)."""
    rec = {"placed": False, "replica": f"worker/{index}", "reason": "no good placement now",
           **waiting_record(KEY, GANG, PlacementSettings(transport_share=written))}
    rec["since"] = since
    if shares is None:
        rec["gang"].pop("transportShare", None)
    elif shares != "as written":
        rec["gang"]["transportShare"] = copy.deepcopy(shares)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"waiter-worker-{index}", "namespace": "default",
                         "annotations": {names.PLACEMENT_ANNOTATION: json.dumps(rec)}},
            "spec": {"schedulingGates": [{"name": names.PLACEMENT_GATE}],
                     "containers": [{"name": "c", "image": "x", "resources": {
                         "limits": {names.TOPOLOGY_GPU_RESOURCE: "1"}}}]}}


def one_gang(pods: list[dict[str, Any]]) -> tuple[tuple[str, float], ...]:
    """The gang's shares as the queue reads them, the same in both pod orders."""
    answers = []
    for order in (pods, pods[::-1]):
        (gang,) = waiting_gangs(order)
        assert gang.key == KEY and gang.request == GANG and len(gang.pods) == len(pods)
        answers.append(gang.transport_share)
    assert answers[0] == answers[1], answers
    return answers[0]


def test_the_writer_s_table_is_read_back() -> None:
    assert one_gang([gated_pod(0), gated_pod(1)]) == (("tcp", 0.5),)


def test_a_record_from_a_webhook_without_transport_shares_is_read_with_none() -> None:
    assert one_gang([gated_pod(0, None), gated_pod(1, None)]) == ()


@pytest.mark.parametrize(
    ("table", "read"),
    [("abc", ()), ([0.5], ()), (7, ()), ({}, ()),
     ({"tcp": "0.5"}, ()), ({"tcp": True}, ()), ({"tcp": 0}, ()), ({"tcp": 1.5}, ()),
     ({"infiniband": 0.9, "tcp": 0.3}, (("tcp", 0.3),)),  # a newer transport: left out
     ({"tcp": None, "rdma": 0.7}, (("rdma", 0.7),)),
     # each share valid, together out of order: validation refuses such a policy, so the
     # record did not come from one: the defaults apply (gdr 0.1 would rank GPUDirect
     # nodes below every TCP node)
     ({"gdr": 0.1}, ()), ({"tcp": 0.9, "rdma": 0.6}, ()),
     ({"tcp": 0.9, "rdma": "x"}, ())],  # rdma left out: 0.5 < tcp 0.9
)
def test_a_malformed_table_falls_back_to_the_defaults(table: Any, read: Any) -> None:
    assert one_gang([gated_pod(0, table), gated_pod(1, table)]) == read


def test_across_a_webhook_upgrade_the_newest_record_decides_in_any_order() -> None:
    """Worker 0 admitted by an older webhook (no key), worker 1 later by a newer one: the
    newer record (the policy in force at the latest admission) wins, and when the older
    record is the later one, it does — whichever pod the API lists first."""
    assert one_gang([gated_pod(0, None, since=100.0), gated_pod(1, since=200.0)]) == (
        ("tcp", 0.5),)
    assert one_gang([gated_pod(0, since=100.0), gated_pod(1, None, since=200.0)]) == ()


def test_gputopo_queue_lists_gangs_with_old_and_malformed_records(tmp_path: Path,
                                                                  capsys) -> None:
    docs = [d for d in load_documents(demo_cluster_path()) if d["kind"] in ("Node",
                                                                         "Namespace")]
    docs += [busy_pod("busy-a", NODE_A, "0,1,2,3,4,5,6"),
             busy_pod("busy-b", NODE_B, "0,1,2,3,4,5,6"),
             gated_pod(0, None), gated_pod(1, {"gdr": "fast", "tcp": [1]})]
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents(docs))
    assert main(["queue", "--cluster", str(path), "-o", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["job"], row["demand"], row["pods"]) == ("MPIJob default/waiter",
                                                        "2 x 1 GPU", 2)
