"""``gputopo nodes``: the table an operator reads first, on a cluster where a gang holds GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gputopo.cli import main
from gputopo.cluster.demo import demo_cluster_path
from tests.k8s_double.client import write_kubeconfig

REPO = Path(__file__).resolve().parents[2]


def _rows(out: str) -> dict[str, list[str]]:
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "GPU", "KIND"]
    return {line.split()[0]: line.split() for line in lines[1:]}


def test_nodes_shows_used_gpus_the_largest_free_block_and_the_gang(tmp_path, capsys):
    assert main(["mutate", str(REPO / "examples" / "arena-tf-vgg16-mpijob.yaml")]) == 0
    mutated = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    cluster = tmp_path / "cluster.yaml"
    demo = [d for d in yaml.safe_load_all(demo_cluster_path().read_text()) if d]
    # a 1-GPU pod of another gang bound on the other node, GPU 5
    other = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "solo", "namespace": "ml",
                          "labels": {"gpu-topology": "solo"},
                          "annotations": {"topology.kubernetes.io/gpu-group": "5"}},
             "spec": {"nodeName": "cn-shanghai.192.168.16.173",
                      "containers": [{"name": "c", "image": "x"}]}}
    cluster.write_text(yaml.safe_dump_all([*demo, *mutated, other]))
    assert main(["nodes", "--cluster", str(cluster)]) == 0
    rows = _rows(capsys.readouterr().out)
    a, b = rows["cn-shanghai.192.168.16.172"], rows["cn-shanghai.192.168.16.173"]
    # CPU and memory its pods request of its allocatable: the mutated pods ask for none,
    # the bound pod counts all the same (as one of the node's pods)
    # no GPU model known (the demo's nodes carry no GPU Feature Discovery labels): "-"
    assert a[1:] == ["8x", "NVLink", "-", "-", "device-plugin", "4/8", "4", "4", "rack-1",
                     "cn-shanghai-b", "25G/tcp", "-", "0/94", "0/503Gi",
                     "default/tensorflow-topo-4-vgg16"]
    # one loose GPU taken from a DGX-1 quad leaves the other quad: block 4, not 8
    assert b[6:9] == ["1/8", "7", "4"] and b[-1] == "ml/solo"
    assert main(["nodes", "--cluster", str(cluster), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["largest_block"] for r in doc} == {
        "cn-shanghai.192.168.16.172": 4, "cn-shanghai.192.168.16.173": 4}
    # a pod asking for CPUs and memory shows in those columns
    other["metadata"]["name"] = "loader"
    other["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1500m",
                                                                "memory": "64Gi"}}
    cluster.write_text(yaml.safe_dump_all([*demo, *mutated, other]))
    assert main(["nodes", "--cluster", str(cluster)]) == 0
    b = _rows(capsys.readouterr().out)["cn-shanghai.192.168.16.173"]
    assert b[-3:-1] == ["1500m/94", "64Gi/503Gi"]


def test_nodes_on_the_demo_cluster(capsys):
    assert main(["nodes"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert all(r[6:9] == ["0/8", "8", "8"] for r in rows.values()) and len(rows) == 2


def test_nodes_live_lists_the_api_server(tmp_path, capsys, monkeypatch):
    from k8s_double.server import running_double

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    demo = [d for d in yaml.safe_load_all(demo_cluster_path().read_text()) if d]
    with running_double() as kube:
        for obj in demo:
            kube.apply(obj)
        kube.apply({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "solo", "namespace": "default",
                                 "labels": {"gpu-topology": "solo"},
                                 "annotations": {"topology.kubernetes.io/gpu-group": "0,1"}},
                    "spec": {"nodeName": "cn-shanghai.192.168.16.172",
                             "containers": [{"name": "c", "image": "x"}]}})
        cfg = tmp_path / "kubeconfig"
        write_kubeconfig(cfg, kube.url)
        assert main(["nodes", "--live", "--kubeconfig", str(cfg)]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["cn-shanghai.192.168.16.172"][6:9] == ["2/8", "6", "4"]
    assert rows["cn-shanghai.192.168.16.172"][-1] == "default/solo"


def test_nodes_live_without_a_cluster_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cfg = tmp_path / "kubeconfig"
    cfg.write_text("not: [a kubeconfig\n")
    assert main(["nodes", "--live", "--kubeconfig", str(cfg)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("gputopo: error: --live:")


def test_nodes_shows_the_network_placement_reads_and_says_what_it_ignored(tmp_path, capsys):
    """NETWORK is line rate / transport (@ the node's own share): what the cost model reads.
    A misspelt transport, a share out of (0, 1] or a line rate that is no number is read as
    the default, which the table alone cannot tell from a deliberate value: stderr says so,
    one line per annotation, naming the node (docs/topology.md, "Network transport")."""
    demo = [d for d in yaml.safe_load_all(demo_cluster_path().read_text()) if d]
    template = next(d for d in demo if d["kind"] == "Node")
    cases = {
        "gdr": ({"gputopo.io/network-gbps": "100", "gputopo.io/network-transport": "gdr"},
                "100G/gdr"),
        "own-share": ({"gputopo.io/network-gbps": "100", "gputopo.io/network-transport": "RDMA",
                       "gputopo.io/network-efficiency": "0.6"}, "100G/rdma@0.6"),
        "typos": ({"gputopo.io/network-gbps": "100Gb", "gputopo.io/network-transport": "roce",
                   "gputopo.io/network-efficiency": "60%"}, "25G/tcp"),
    }
    nodes = []
    for name, (ann, _) in cases.items():
        node = json.loads(json.dumps(template))
        node["metadata"]["name"] = name
        node["metadata"]["annotations"].update(ann)
        nodes.append(node)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(nodes))
    assert main(["nodes", "--cluster", str(cluster)]) == 0
    out, err = capsys.readouterr()
    rows = _rows(out)
    assert {name: rows[name][11] for name in cases} == {n: c[1] for n, c in cases.items()}
    said = [line for line in err.splitlines() if "warning" in line]
    assert said == [
        f"gputopo: warning: {cluster}: node typos: gputopo.io/network-transport 'roce' is not "
        f"one of tcp, rdma, gdr: read as tcp",
        f"gputopo: warning: {cluster}: node typos: gputopo.io/network-efficiency '60%' is not "
        f"a share greater than 0 and at most 1: ignored (the transport's share applies)",
        f"gputopo: warning: {cluster}: node typos: gputopo.io/network-gbps '100Gb' is not a "
        f"positive number of Gbit/s: read as 25"], err


def test_nodes_shows_gpu_model_and_memory(tmp_path, capsys):
    """GPU Feature Discovery's labels in the GPU MODEL and GPU MEMORY columns and in the
    JSON; a product the model table does not know is said to be unknown."""
    docs = [d for d in yaml.safe_load_all(
        (REPO / "examples" / "mixed-generations-cluster.yaml").read_text()) if d]
    docs[2]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-Quantum-X9"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(docs))
    assert main(["nodes", "--cluster", str(cluster)]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["dgx-a100-0"][3:5] == ["A100-SXM4-80GB", "81920Mi"]
    assert rows["dgx1-v100-0"][3:5] == ["V100-SXM2-16GB", "16160Mi"]
    assert rows["pcie-t4-0"][3:6] == ["NVIDIA-Quantum-X9", "(unknown)", "15360Mi"]
    assert main(["nodes", "--cluster", str(cluster), "-o", "json"]) == 0
    doc = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert doc["dgx-a100-0"]["gpu_model"] == "A100-SXM4-80GB"
    assert doc["dgx-a100-0"]["gpu_memory_mib"] == 81920
    assert doc["pcie-t4-0"]["gpu_model_known"] is False
