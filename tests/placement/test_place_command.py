"""``gputopo place`` through the real command line, on cluster files written here."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest
import yaml
from solver_helpers import dgx1_v100, pcie_2socket

from gputopo import names
from gputopo.cli import main
from gputopo.topology.model import Topology
from gputopo.topology.transport import effective_network_gbps


def write_cluster(path: Path, *, bound: dict[str, str] | None = None,
                  nodes: dict[str, Topology] | None = None) -> Path:
    """Two activated DGX-1 V100 nodes in one rack (or ``nodes``: name -> wiring);
    ``bound`` = {node: "gpu,list"} pods."""
    docs = []
    wiring = nodes or {"dgx1-a": dgx1_v100(), "dgx1-b": dgx1_v100()}
    for name, topology in wiring.items():
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE,
                        names.ZONE_LABEL: "zone-a",
                        names.RACK_LABEL: "rack-1",
                    },
                    "annotations": {
                        names.TOPOLOGY_ANNOTATION: topology.to_json(),
                        names.NETWORK_GBPS_ANNOTATION: "25",
                    },
                },
                "status": {"allocatable": {
                    names.TOPOLOGY_GPU_RESOURCE: str(len(topology.gpus))}},
            }
        )
    for k, (node_name, gpus) in enumerate((bound or {}).items()):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"running-{k}",
                    "namespace": "default",
                    "annotations": {names.GPU_GROUP_ANNOTATION: gpus},
                },
                "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]},
                "status": {"phase": "Running"},
            }
        )
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def run_json(capsys, *argv: str) -> dict:
    code = main(["place", *argv, "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == (0 if doc["feasible"] else 1)  # place exits 1 when not placeable
    return doc


def test_place_json_is_the_contract_shape(tmp_path, capsys):
    cluster = write_cluster(tmp_path / "cluster.yaml")
    doc = run_json(capsys, "--cluster", str(cluster), "--replicas", "4",
                   "--gpus-per-replica", "1")
    assert set(doc) == {"feasible", "placements", "busBandwidthGBps", "reason"}
    assert doc["feasible"] is True
    assert [p["replica"] for p in doc["placements"]] == [0, 1, 2, 3]
    assert {p["node"] for p in doc["placements"]} == {"dgx1-a"}
    gpus = [g for p in doc["placements"] for g in p["gpus"]]
    assert all(dgx1_v100().link(a, b).startswith("NV") for a, b in combinations(gpus, 2))
    assert isinstance(doc["busBandwidthGBps"], float) and doc["busBandwidthGBps"] > 20
    assert doc["reason"]


def test_place_respects_gpus_held_by_bound_pods(tmp_path, capsys):
    cluster = write_cluster(tmp_path / "cluster.yaml", bound={"dgx1-a": "0,1,2,3"})
    doc = run_json(capsys, "--cluster", str(cluster), "--replicas", "2",
                   "--gpus-per-replica", "2")
    placed = {(p["node"], g) for p in doc["placements"] for g in p["gpus"]}
    assert placed == {("dgx1-a", 4), ("dgx1-a", 5), ("dgx1-a", 6), ("dgx1-a", 7)}


def test_place_answers_with_the_webhooks_good_enough_bar(tmp_path, capsys):
    """Three PCIe servers (24 of the 32 GPUs: the typical kind) and a DGX-1: a PIX pair is
    good enough for a 2-GPU gang, so place answers what admission chooses, the busy PCIe
    server's free PIX pair, not the empty DGX-1's NVLink pair (docs/placement.md)."""
    cluster = write_cluster(tmp_path / "cluster.yaml", bound={"pcie-busy": "0,2"}, nodes={
        "dgx1": dgx1_v100(), "pcie-busy": pcie_2socket(), "pcie-1": pcie_2socket(),
        "pcie-2": pcie_2socket()})
    doc = run_json(capsys, "--cluster", str(cluster), "--replicas", "1",
                   "--gpus-per-replica", "2")
    (placed,) = doc["placements"]
    assert placed["node"] == "pcie-busy" and placed["gpus"] in ([4, 5], [6, 7])


def test_place_infeasible_is_an_answer_not_an_error(tmp_path, capsys):
    cluster = write_cluster(tmp_path / "cluster.yaml", bound={"dgx1-a": "0,1,2,3,4,5,6,7"})
    doc = run_json(capsys, "--cluster", str(cluster), "--replicas", "2",
                   "--gpus-per-replica", "8")
    assert doc == {
        "feasible": False,
        "placements": [],
        "busBandwidthGBps": 0.0,
        "reason": doc["reason"],
    }
    assert "cluster full" in doc["reason"]


def test_place_text_form_is_readable(tmp_path, capsys):
    cluster = write_cluster(tmp_path / "cluster.yaml")
    assert main(["place", "--cluster", str(cluster), "--replicas", "2",
                 "--gpus-per-replica", "8"]) == 0
    out = capsys.readouterr().out
    assert "replica 0: dgx1-a" in out and "replica 1: dgx1-b" in out
    assert "GB/s" in out and "why:" in out


def test_place_bad_cluster_file_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {}\n", encoding="utf-8")
    assert main(["place", "--cluster", str(bad), "--replicas", "1",
                 "--gpus-per-replica", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err


@pytest.mark.parametrize("flag", ["--replicas", "--gpus-per-replica"])
def test_place_rejects_non_positive_sizes(tmp_path, capsys, flag):
    cluster = write_cluster(tmp_path / "cluster.yaml")
    argv = ["place", "--cluster", str(cluster), "--replicas", "1", "--gpus-per-replica", "1"]
    argv[argv.index(flag) + 1] = "0"
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_place_answer_does_not_depend_on_hash_seed(tmp_path):
    """Deterministic across processes: no set or hash order leaks into the choice."""
    import os
    import subprocess
    import sys

    cluster = write_cluster(tmp_path / "cluster.yaml", bound={"dgx1-a": "1,6", "dgx1-b": "0"})
    argv = [sys.executable, "-m", "gputopo", "place", "--cluster", str(cluster),
            "--replicas", "3", "--gpus-per-replica", "2", "-o", "json"]
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)
        outs.add(done.stdout)
    assert len(outs) == 1
    assert json.loads(outs.pop())["feasible"] is True


@pytest.mark.parametrize("value", ["inf", "Infinity", "1e999", "nan", "-5", "fast"])
def test_unusable_network_annotation_falls_back_to_the_default(tmp_path, capsys, value):
    """A node's gputopo.io/network-gbps that is not a finite positive number is ignored; an
    infinite one used to crash every multi-node solve with ZeroDivisionError."""
    seven = "0,1,2,3,4,5,6"  # one GPU free per node: the gang must span both
    path = write_cluster(tmp_path / "cluster.yaml", bound={"dgx1-a": seven, "dgx1-b": seven})
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs[:2]:
        doc["metadata"]["annotations"][names.NETWORK_GBPS_ANNOTATION] = value
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    doc = run_json(capsys, "--cluster", str(path), "--replicas", "2", "--gpus-per-replica", "1")
    assert doc["feasible"] is True
    default = effective_network_gbps(names.DEFAULT_NETWORK_GBPS, names.DEFAULT_NETWORK_TRANSPORT)
    assert doc["busBandwidthGBps"] == pytest.approx(default / 8, abs=1e-3)


def test_activated_nodes_with_bad_topology_are_not_called_unactivated(tmp_path, capsys):
    """Both nodes carry the activation label but an unusable annotation: the reason must
    not send the user to the labels alone."""
    path = write_cluster(tmp_path / "cluster.yaml")
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        doc["metadata"]["annotations"][names.TOPOLOGY_ANNOTATION] = "{not json"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    doc = run_json(capsys, "--cluster", str(path), "--replicas", "1", "--gpus-per-replica", "1")
    assert doc["feasible"] is False
    assert "usable topology data" in doc["reason"]


T, E = names.NETWORK_TRANSPORT_ANNOTATION, names.NETWORK_EFFICIENCY_ANNOTATION


def _two_nodes_one_gpu_free(tmp_path: Path, annotations: dict[str, str]) -> Path:
    """Two DGX-1 nodes on a 100 Gbit/s network with one GPU free each (a 2 x 1 gang must
    span both), ``annotations`` added to both."""
    seven = "0,1,2,3,4,5,6"
    path = write_cluster(tmp_path / "cluster.yaml", bound={"dgx1-a": seven, "dgx1-b": seven})
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs[:2]:
        doc["metadata"]["annotations"][names.NETWORK_GBPS_ANNOTATION] = "100"
        doc["metadata"]["annotations"].update(annotations)
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("annotations", "share"),
    [({T: "gdr"}, 0.94), ({T: "GDR"}, 0.94), ({T: "rdma"}, 0.5), ({T: "RDMA"}, 0.5),
     ({T: "tcp"}, 0.25), ({}, 0.25),
     ({T: "infiniband-ish"}, 0.25),
     ({E: "0.6"}, 0.6), ({E: " 1 "}, 1.0), ({T: "rdma", E: "0.5"}, 0.5), ({E: "0"}, 0.25),
     ({E: "1.5"}, 0.25), ({E: "fast"}, 0.25)],
)
def test_network_annotations_decide_the_share_of_the_line_rate(
    tmp_path, capsys, annotations, share
):
    """gputopo.io/network-transport is read where network-gbps is: gdr gets 0.94 of the
    line rate, rdma 0.5, tcp and anything unknown or absent the conservative 0.25.
    gputopo.io/network-efficiency, a node's measured share, replaces the transport's
    default; anything not in (0, 1] is ignored."""
    path = _two_nodes_one_gpu_free(tmp_path, annotations)
    doc = run_json(capsys, "--cluster", str(path), "--replicas", "2", "--gpus-per-replica", "1")
    assert doc["busBandwidthGBps"] == pytest.approx(100 * share / 8, abs=1e-3)


@pytest.mark.parametrize(
    ("annotations", "flags", "share"),
    [({T: "rdma"}, ["rdma=0.8"], 0.8), ({T: "rdma"}, ["gdr=0.99"], 0.5),
     ({T: "gdr"}, ["gdr=0.99", "rdma=0.7"], 0.99), ({}, ["tcp=0.4"], 0.4),
     ({T: "bogus"}, ["tcp=0.4"], 0.4), ({T: "rdma", E: "0.3"}, ["rdma=0.8"], 0.3)],
)
def test_transport_share_flag_is_a_policy_s_share(tmp_path, capsys, annotations, flags,
                                                   share):
    """``--transport-share`` is what a policy's placement.transportShare says: it replaces
    the default for the nodes' transport; a node's own network-efficiency still wins."""
    path = _two_nodes_one_gpu_free(tmp_path, annotations)
    argv = [arg for f in flags for arg in ("--transport-share", f)]
    doc = run_json(capsys, "--cluster", str(path), "--replicas", "2", "--gpus-per-replica", "1",
                   *argv)
    assert doc["busBandwidthGBps"] == pytest.approx(100 * share / 8, abs=1e-3)


@pytest.mark.parametrize(
    ("flag", "says"),
    [("rdma=1.5", "at most 1"), ("rdma=0", "greater than 0"), ("rdma", "TRANSPORT=SHARE"),
     ("ethernet=0.5", "unknown transport"), ("gdr=0.3", "gdr (0.3) below rdma (0.5)"),
     ("tcp=0.7", "rdma (0.5) below tcp (0.7)")],
)
def test_bad_transport_share_exits_2_with_one_line(tmp_path, capsys, flag, says):
    path = write_cluster(tmp_path / "cluster.yaml")
    code = main(["place", "--cluster", str(path), "--replicas", "1", "--gpus-per-replica", "1",
                 "--transport-share", flag])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("flags", "says"),
    [(["rdma=0.8,gdr=0.9"], "one TRANSPORT=SHARE per flag; repeat --transport-share"),
     (["rdma=0.8", "rdma=0.6"], "'rdma=0.6': rdma is already given 0.8")],
)
def test_transport_share_lists_and_repeats_are_refused_not_misread(tmp_path, capsys, flags,
                                                                   says):
    """A comma list was refused with a message about the share; the same transport twice
    silently took the last value."""
    path = write_cluster(tmp_path / "cluster.yaml")
    argv = [arg for f in flags for arg in ("--transport-share", f)]
    code = main(["place", "--cluster", str(path), "--replicas", "1", "--gpus-per-replica", "1",
                 *argv])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
