"""The network transport the reporter detects (fake sysfs trees under tmp_path) and what it
writes on its Node: through ``gputopo topology report`` against the Kubernetes API TEST
DOUBLE with the official client, using nothing but ``patch`` on nodes (its RBAC)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.objects import node_state
from gputopo.topology.transport_probe import probe, transport_annotations

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # the API double is a package under tests/
    sys.path.insert(0, str(TESTS))

from k8s_double import running_double  # noqa: E402
from k8s_double.client import write_kubeconfig  # noqa: E402

FIXTURE = TESTS / "fixtures" / "topologies" / "dgx1-v100.txt"
T, D = names.NETWORK_TRANSPORT_ANNOTATION, names.NETWORK_TRANSPORT_DETECTED_ANNOTATION


def hca(root: Path, name: str, *, state: str = "4: ACTIVE", layer: str = "InfiniBand",
        pci: bool = True, port: str = "1") -> None:
    """An RDMA device as the kernel lists it under /sys/class/infiniband."""
    dev = root / "class" / "infiniband" / name
    (dev / "ports" / port).mkdir(parents=True)
    (dev / "ports" / port / "state").write_text(state + "\n")
    (dev / "ports" / port / "link_layer").write_text(layer + "\n")
    if pci:
        (dev / "device").mkdir()


def module(root: Path, path: str) -> None:
    (root / path).mkdir(parents=True)


@pytest.mark.parametrize(
    ("build", "transport"),
    [
        (lambda r: None, "tcp"),
        (lambda r: hca(r, "mlx5_0"), "rdma"),
        (lambda r: (hca(r, "mlx5_0", layer="Ethernet"), module(r, "module/nvidia_peermem")),
         "gdr"),
        (lambda r: (hca(r, "mlx5_0"), module(r, "module/nv_peer_mem")), "gdr"),
        (lambda r: (hca(r, "mlx5_0"), module(r, "kernel/mm/memory_peers/nv_mem")), "gdr"),
        (lambda r: (hca(r, "mlx5_0", state="1: DOWN"), module(r, "module/nvidia_peermem")),
         "tcp"),
        (lambda r: (hca(r, "rxe0", layer="Ethernet", pci=False),
                    module(r, "module/nvidia_peermem")), "tcp"),
        (lambda r: (hca(r, "mlx5_0", state="1: DOWN"), hca(r, "mlx5_1")), "rdma"),
        (lambda r: module(r, "module/nvidia_peermem"), "tcp"),  # GPUDirect needs a NIC
    ],
    ids=["nothing", "ib", "roce+peermem", "nv_peer_mem", "memory_peers", "port-down",
         "soft-roce", "one-active", "peermem-only"],
)
def test_probe_reads_the_transport_from_sysfs(tmp_path, build, transport) -> None:
    (tmp_path / "class").mkdir()  # every sysfs has class/; infiniband/ only with RDMA
    build(tmp_path)
    found = probe(tmp_path)
    assert found.transport == transport, found
    assert found.why


@pytest.mark.parametrize("where", ["missing", "a-file", "host-root"])
def test_a_sysfs_root_that_is_not_one_exits_2_with_one_line(tmp_path, capsys, where) -> None:
    """A wrong --sysfs (a typo, the host's / mounted instead of its /sys) used to read as
    "no RDMA device" and publish tcp on whatever node it ran on."""
    root = tmp_path / where
    if where == "a-file":
        root.write_text("")
    elif where == "host-root":  # /host holding sys/class/infiniband/...
        hca(root / "sys", "mlx5_0")
    code = main(["topology", "report", "--nvidia-smi", str(FIXTURE), "--node", "n",
                 "--sysfs", str(root), "--dry-run"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "", captured
    assert captured.err.strip().splitlines() == [
        f"gputopo: error: --sysfs {root}: not a sysfs mount (no class/ in it), so the "
        f"network transport cannot be told; give the directory sysfs is mounted on"]
    # --transport off reads no sysfs, so it does not need one
    assert main(["topology", "report", "--nvidia-smi", str(FIXTURE), "--node", "n",
                 "--sysfs", str(root), "--dry-run", "--transport", "off"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["patch"]["metadata"]["annotations"]) == {names.TOPOLOGY_ANNOTATION}


@pytest.mark.parametrize(
    ("current", "detected", "mode", "writes"),
    [
        ({}, "gdr", "auto", {T: "gdr", D: "gdr"}),
        ({T: "rdma", D: "rdma"}, "gdr", "auto", {T: "gdr", D: "gdr"}),  # its own: updated
        ({T: "rdma"}, "gdr", "auto", {D: "gdr"}),  # set by hand: kept
        ({T: "tcp", D: "gdr"}, "gdr", "auto", {}),  # hand-set after a detection: kept
        ({T: "gdr", D: "gdr"}, "gdr", "auto", {}),  # nothing changed: nothing written
        ({T: "rdma"}, "gdr", "tcp", {T: "tcp", D: "gdr"}),  # forced
        ({T: "rdma"}, "gdr", "off", {}),
        ({T: "RDMA"}, "gdr", "auto", {D: "gdr"}),  # read as rdma: a valid hand-set value
        # placement reads a value it does not know as tcp: nothing to keep
        ({T: "roce"}, "gdr", "auto", {T: "gdr", D: "gdr"}),
        ({T: "", D: "rdma"}, "rdma", "auto", {T: "rdma"}),
    ],
)
def test_transport_annotations_keep_a_hand_set_value(current, detected, mode, writes) -> None:
    assert transport_annotations(current, detected, mode)[0] == writes


_kubeconfig = write_kubeconfig


def _node(name: str, annotations: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {names.NODE_ACTIVATION_LABEL:
                                                   names.NODE_ACTIVATION_VALUE},
                         **({"annotations": annotations} if annotations else {})}}


def _report(capsys, kubeconfig: Path, node: str, sysfs: Path, *extra: str) -> str:
    code = main(["topology", "report", "--nvidia-smi", str(FIXTURE), "--node", node,
                 "--sysfs", str(sysfs), "--kubeconfig", str(kubeconfig), *extra])
    err = capsys.readouterr().err
    assert code == 0, err
    return err


def test_the_reporter_publishes_and_keeps_transports_on_the_node(tmp_path, capsys) -> None:
    gdr_tree = tmp_path / "gdr"
    hca(gdr_tree, "mlx5_0")
    module(gdr_tree, "module/nvidia_peermem")
    staged = tmp_path / "rdma"
    hca(staged, "mlx5_0")
    with running_double() as kube:
        config = _kubeconfig(tmp_path / "kubeconfig", kube.url)
        kube.apply(_node("fresh"))
        kube.apply(_node("by-hand", {T: "rdma"}))
        kube.apply(_node("upgraded", {T: "rdma", D: "rdma"}))
        kube.apply(_node("typo", {T: "roce"}))  # placement reads it as tcp

        said = _report(capsys, config, "fresh", gdr_tree)
        assert "transport gdr (detected)" in said and "nvidia_peermem" in said
        said = _report(capsys, config, "by-hand", gdr_tree)
        assert "'rdma' kept: set by hand" in said
        _report(capsys, config, "upgraded", gdr_tree)  # peermem loaded since the last report
        said = _report(capsys, config, "typo", gdr_tree)
        assert "replaced 'roce', which is not one of tcp, rdma, gdr and read as tcp" in said

        nodes = {n["metadata"]["name"]: n for n in kube.objects("v1", "Node")}
        ann = {name: n["metadata"]["annotations"] for name, n in nodes.items()}
        assert (ann["fresh"][T], ann["fresh"][D]) == ("gdr", "gdr")
        assert (ann["by-hand"][T], ann["by-hand"][D]) == ("rdma", "gdr")
        assert (ann["upgraded"][T], ann["upgraded"][D]) == ("gdr", "gdr")
        assert (ann["typo"][T], ann["typo"][D]) == ("gdr", "gdr")
        assert all(names.TOPOLOGY_ANNOTATION in a for a in ann.values())
        # what placement then reads of the node: GPUDirect's share of the line rate
        fresh = node_state(nodes["fresh"])
        assert fresh.network_transport == "gdr"
        assert fresh.effective_gbps == pytest.approx(names.DEFAULT_NETWORK_GBPS * 0.94)
        assert node_state(nodes["by-hand"]).effective_gbps == pytest.approx(
            names.DEFAULT_NETWORK_GBPS * 0.5)

        # told to, the reporter overrides the hand-set value; off touches nothing
        _report(capsys, config, "by-hand", staged, "--transport", "tcp")
        _report(capsys, config, "fresh", staged, "--transport", "off")
        nodes = {n["metadata"]["name"]: n for n in kube.objects("v1", "Node")}
        assert nodes["by-hand"]["metadata"]["annotations"][T] == "tcp"
        assert nodes["by-hand"]["metadata"]["annotations"][D] == "rdma"
        assert nodes["fresh"]["metadata"]["annotations"][D] == "gdr"
        # the reporter's account may only patch nodes: it never read one
        used = {(verb, plural) for (verb, _, plural, _) in kube.verbs if plural == "nodes"}
        assert used == {("patch", "nodes")}


def test_a_node_that_is_not_there_exits_2_with_one_line(tmp_path, capsys) -> None:
    with running_double() as kube:
        config = _kubeconfig(tmp_path / "kubeconfig", kube.url)
        (tmp_path / "class").mkdir()
        code = main(["topology", "report", "--nvidia-smi", str(FIXTURE), "--node", "ghost",
                     "--sysfs", str(tmp_path), "--kubeconfig", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and "404" in err and len(err.strip().splitlines()) == 1, err
