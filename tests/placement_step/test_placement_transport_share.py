"""A policy's ``placement.transportShare`` through real admission (``gputopo mutate`` with a
real YAML policy and cluster file): it changes which nodes a gang spanning nodes gets and the
bandwidth its placement record predicts; a node's own ``gputopo.io/network-efficiency``
still wins over it; a bad table is refused with one line naming the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from apiserver_rules import assert_node_ports_free, stored
from placement_checks import pinned_node, record
from placement_jobs import gang, mpijob

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import dump, dump_documents, load_documents
from webhook.assembly import default_policies_dir

#: Two pairs of DGX-1 nodes with one GPU free each: NCCL over sockets on 250 Gbit/s
#: (default share 0.25: 62.5 Gbit/s) and host-staged RDMA on 100 Gbit/s (0.5: 50 Gbit/s).
TCP_NODES = ("tcp-a", "tcp-b")
RDMA_NODES = ("rdma-a", "rdma-b")


def cluster(tmp_path: Path, *, rdma_annotations: dict[str, str] | None = None) -> Path:
    docs = load_documents(demo_cluster_path())
    template = next(d for d in docs if d["kind"] == "Node")
    out: list[dict[str, Any]] = [d for d in docs if d["kind"] == "Namespace"]
    for name in (*TCP_NODES, *RDMA_NODES):
        node = copy.deepcopy(template)
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        ann = node["metadata"]["annotations"]
        if name in TCP_NODES:
            ann.update({names.NETWORK_GBPS_ANNOTATION: "250",
                        names.NETWORK_TRANSPORT_ANNOTATION: "tcp"})
        else:
            ann.update({names.NETWORK_GBPS_ANNOTATION: "100",
                        names.NETWORK_TRANSPORT_ANNOTATION: "rdma", **(rdma_annotations or {})})
        out.append(node)
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"busy-{name}", "namespace": "default",
                                 "annotations": {names.GPU_GROUP_ANNOTATION: "0,1,2,3,4,5,6"}},
                    "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x"}]},
                    "status": {"phase": "Running"}})
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents(out))
    return path


def policies(tmp_path: Path, share: Any = None) -> Path:
    """The shipped ACK policy, with ``placement.transportShare: share`` when given, and
    ``minShare: 0``: one free GPU per node is far below the gang's best (one NVLink pair),
    and ``gputopo mutate`` answers as the live webhook, which would gate the gang."""
    (doc,) = load_documents(default_policies_dir() / "ack-gpu-topology.yaml")
    doc["spec"]["placement"]["minShare"] = 0
    if share is not None:
        doc["spec"]["placement"]["transportShare"] = share
    out = tmp_path / "policies"
    out.mkdir(exist_ok=True)
    (out / "policy.yaml").write_text(dump(doc))
    return out


def placed(mutate: Any, tmp_path: Path, share: Any = None, **kw: Any
           ) -> tuple[set[str], float]:
    return placed_with(mutate, tmp_path, policies(tmp_path, share), **kw)


def placed_with(mutate: Any, tmp_path: Path, policy_dir: Path, **kw: Any
                ) -> tuple[set[str], float]:
    result = mutate(gang(mpijob("net", workers=2)), "--policies", str(policy_dir),
                    cluster=cluster(tmp_path, **kw))
    assert result.rc == 0, result.stderr
    workers = [result.pods[f"net-worker-{i}"] for i in range(2)]
    recs = [record(w) for w in workers]
    assert all(r["placed"] for r in recs), recs
    assert len({r["busBandwidthGBps"] for r in recs}) == 1
    # as the API server stores them, and as the scheduler's NodePorts filter sees them
    by_node: dict[str, list[dict[str, Any]]] = {}
    for w in workers:
        by_node.setdefault(pinned_node(w), []).append(stored(w))
    assert_node_ports_free(by_node)
    return {pinned_node(w) for w in workers}, recs[0]["busBandwidthGBps"]


def test_without_an_override_the_faster_default_network_wins(mutate, tmp_path):
    nodes, bandwidth = placed(mutate, tmp_path)
    assert nodes == set(TCP_NODES)
    assert bandwidth == pytest.approx(250 * 0.25 / 8, abs=1e-3)


@pytest.mark.parametrize("empty", [{}, "null"])
def test_a_null_or_empty_table_is_no_table(mutate, tmp_path, empty):
    """docs/policies.md: ``transportShare: null`` or ``{}`` is the same as leaving it out."""
    if empty == "null":
        pol = policies(tmp_path)
        (doc,) = load_documents(pol / "policy.yaml")
        doc["spec"]["placement"]["transportShare"] = None
        (pol / "policy.yaml").write_text(dump(doc))
        assert "transportShare: null" in (pol / "policy.yaml").read_text()
        nodes, bandwidth = placed_with(mutate, tmp_path, pol)
    else:
        nodes, bandwidth = placed(mutate, tmp_path, empty)
    assert nodes == set(TCP_NODES)
    assert bandwidth == pytest.approx(250 * 0.25 / 8, abs=1e-3)


def test_the_policy_s_rdma_share_moves_the_gang_and_its_predicted_bandwidth(mutate, tmp_path):
    nodes, bandwidth = placed(mutate, tmp_path, {"rdma": 0.9, "gdr": 0.95})
    assert nodes == set(RDMA_NODES)
    assert bandwidth == pytest.approx(100 * 0.9 / 8, abs=1e-3)


def test_the_policy_s_tcp_share_applies_to_tcp_nodes(mutate, tmp_path):
    nodes, bandwidth = placed(mutate, tmp_path, {"tcp": 0.4, "rdma": 0.9, "gdr": 0.95})
    assert nodes == set(TCP_NODES)  # 250 x 0.4 = 100 beats 100 x 0.9 = 90
    assert bandwidth == pytest.approx(250 * 0.4 / 8, abs=1e-3)


def test_a_node_s_measured_share_beats_the_policy_s(mutate, tmp_path):
    nodes, bandwidth = placed(mutate, tmp_path, {"rdma": 0.9, "gdr": 0.95},
                              rdma_annotations={names.NETWORK_EFFICIENCY_ANNOTATION: "0.55"})
    assert nodes == set(TCP_NODES)  # 100 x 0.55 = 55 < 62.5
    assert bandwidth == pytest.approx(250 * 0.25 / 8, abs=1e-3)


@pytest.mark.parametrize(("share", "nodes"), [(None, TCP_NODES),
                                               ({"rdma": 0.9, "gdr": 0.95}, RDMA_NODES)])
def test_an_audit_policy_previews_the_nodes_enforce_would_take(mutate, tmp_path, share,
                                                                nodes):
    """Audit mode (and so a dry run) solves on the same view of the networks as enforce:
    its "would pin" warnings name the nodes enforce mode takes with the same table."""
    pol = policies(tmp_path, share)
    text = (pol / "policy.yaml").read_text()
    assert "mode: enforce" in text
    (pol / "policy.yaml").write_text(text.replace("mode: enforce", "mode: audit"))
    result = mutate(gang(mpijob("net", workers=2)), "--policies", str(pol),
                    cluster=cluster(tmp_path))
    assert result.rc == 0, result.stderr
    pinned = {line.split(" to node ")[1].split(",")[0]
              for line in result.stderr.splitlines() if "placement (audit): would pin" in line}
    assert pinned == set(nodes), result.stderr


@pytest.mark.parametrize(
    ("share", "says"),
    [({"rdma": 1.5}, "spec.placement.transportShare.rdma: must be a number greater than 0"),
     ({"rdma": 0}, "spec.placement.transportShare.rdma: must be a number greater than 0"),
     ({"rdma": True}, "spec.placement.transportShare.rdma: must be a number"),
     ({"rdma": "0.5"}, "spec.placement.transportShare.rdma: must be a number"),
     ({"infiniband": 0.9}, "spec.placement.transportShare.infiniband: unknown transport"),
     ({"gdr": 0.3}, "spec.placement.transportShare: gdr (0.3) below rdma (0.5)"),
     ([0.5], "spec.placement.transportShare: must be a mapping")],
)
def test_a_bad_share_table_is_refused_with_one_line(tmp_path, capsys, share, says):
    path = tmp_path / "job.yaml"
    path.write_text(dump_documents(gang(mpijob("net", workers=2))))
    code = main(["mutate", "--cluster", str(demo_cluster_path()), "--policies",
                 str(policies(tmp_path, share)), str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if "transportShare" in line]
    assert len(lines) == 1 and says in lines[0], err


def test_mutate_says_when_a_node_s_transport_is_read_as_tcp(mutate, tmp_path):
    """A misspelt transport reads as tcp (never faster); ``gputopo mutate`` says so once
    per node on stderr instead of leaving the operator to wonder why the policy's rdma
    share changed nothing."""
    result = mutate(gang(mpijob("net", workers=2)), "--policies",
                    str(policies(tmp_path, {"rdma": 0.9, "gdr": 0.95})),
                    cluster=cluster(tmp_path, rdma_annotations={
                        names.NETWORK_TRANSPORT_ANNOTATION: "roce"}))
    assert result.rc == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "network-transport" in line]
    assert said == [f"gputopo: warning: {tmp_path / 'cluster.yaml'}: node {n}: "
                    f"gputopo.io/network-transport 'roce' is not one of tcp, rdma, gdr: "
                    f"read as tcp" for n in RDMA_NODES], result.stderr
    assert {pinned_node(result.pods[f"net-worker-{i}"]) for i in range(2)} == set(TCP_NODES)
