"""The file-backed cluster (``--cluster FILE``, the demo) follows the same node rules as the
live view: same activation, same GPUs in use, same treatment of bad node data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cluster_helpers import bound_pod, dgx1_annotation, node

from gputopo.cluster.demo import demo_snapshot
from gputopo.cluster.snapshot import ClusterSnapshot
from gputopo.errors import InputError


def test_demo_cluster_is_two_activated_dgx1_nodes() -> None:
    states = demo_snapshot().node_states()
    assert [s.name for s in states] == ["cn-shanghai.192.168.16.172",
                                        "cn-shanghai.192.168.16.173"]
    assert all(len(s.free) == 8 and s.rack == "rack-1" for s in states)
    fresh = demo_snapshot()  # asked by name before the list: built on demand
    assert fresh.node_state("cn-shanghai.192.168.16.173") == states[1]
    assert fresh.node_state("nope") is None


def test_file_cluster_rules_match_the_view(tmp_path: Path) -> None:
    topo = dgx1_annotation()
    wrong = json.loads(topo)
    wrong["links"] = wrong["links"][:3]
    docs = [node("ok", topology=topo), node("off", topology=topo, activated=False),
            node("corrupt", topology="{not json"), node("wrong", topology=json.dumps(wrong)),
            node("short", topology=topo, gpus=4), bound_pod("p", "ok", "1,2")]
    done = bound_pod("q", "ok", "3")
    done["status"]["phase"] = "Failed"
    docs.append(done)
    pinned = bound_pod("r", "ok", "6")  # placed by the webhook, not bound yet
    del pinned["spec"]["nodeName"]
    pinned["status"]["phase"] = "Pending"
    pinned["metadata"]["annotations"]["gputopo.io/placement"] = json.dumps(
        {"placed": True, "node": "ok", "gpus": [6]})
    docs.append(pinned)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    snap = ClusterSnapshot.from_file(path)
    states = snap.node_states()
    assert [s.name for s in states] == ["ok"]
    assert states[0].used == {1, 2, 6}
    assert sorted(w.split(":")[0] for w in snap.warnings) == [
        "node corrupt", "node short", "node wrong"]


def test_bad_cluster_file_names_file_and_object(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: v1\nkind: Node\nmetadata: {}\n")
    with pytest.raises(InputError) as exc:
        ClusterSnapshot.from_file(path)
    assert str(path) in str(exc.value) and "metadata.name" in str(exc.value)


def test_unhealthy_gpus_of_an_ack_report_count_as_used(tmp_path: Path) -> None:
    from gputopo.topology.ack_report import report_configmap
    from gputopo.topology.model import Topology

    cm = report_configmap(Topology.from_annotation(dgx1_annotation()), node="ack")
    devices = json.loads(cm["data"]["devices"])
    devices["5"] = "Unhealthy"
    cm["data"]["devices"] = json.dumps(devices)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([node("ack", topology=None), cm]))
    (state,) = ClusterSnapshot.from_file(path).node_states()
    assert state.used == {5}


@pytest.mark.parametrize("doc", [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "namespace": {"a": 1}}},
    {"apiVersion": "v1", "kind": "NodeList", "items": [{"kind": "Node", "metadata": {}}]},
])
def test_malformed_objects_in_a_cluster_file_are_one_line_errors(tmp_path: Path, doc) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as info:
        ClusterSnapshot.from_file(path)
    assert str(path) in info.value.line()
