"""The reporter's NVLink domain from NVML's fabric info: the rule GFD's clique label follows
(fabric-attached GPUs that all agree), written as ``gputopo.io/nvlink-domain-detected`` by
``gputopo topology report`` against the Kubernetes API test double, and read back by
placement (gputopo.cluster.objects.node_state)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.objects import node_state
from gputopo.topology.nvml import RecordedNvml, record
from gputopo.topology.nvml_fabric import (
    STATE_COMPLETED,
    STATE_IN_PROGRESS,
    STATE_NOT_SUPPORTED,
    nvlink_domain_from_nvml,
)

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # the API double is a package under tests/
    sys.path.insert(0, str(TESTS))

from k8s_double import running_double  # noqa: E402
from k8s_double.client import write_kubeconfig  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
UUID = "3143b15b-c2cd-192b-28cc-9b5473fb5b93"
D = names.NVLINK_DOMAIN_DETECTED_ANNOTATION


def recorded(fabrics: list[dict | None]) -> dict:
    """The DGX-1 recording with a fabric entry per GPU (None: no fabric info)."""
    data = json.loads((DATA / "dgx1-v100-nvml.json").read_text())
    for dev, fabric in zip(data["devices"], fabrics, strict=False):
        if fabric is not None:
            dev["fabric"] = fabric
    return data


def fab(clique: int = 32766, state: int = STATE_COMPLETED, uuid: str = UUID,
        status: int = 0) -> dict:
    return {"clusterUuid": uuid, "cliqueId": clique, "state": state, "status": status}


@pytest.mark.parametrize(("fabrics", "want"), [
    ([fab()] * 8, f"{UUID}.32766"),
    ([fab()] * 4 + [fab(state=STATE_NOT_SUPPORTED)] * 4, f"{UUID}.32766"),  # not attached
    ([fab()] * 7 + [fab(clique=1)], None),  # GPUs disagree: say nothing, as GFD
    ([fab()] * 7 + [fab(uuid=UUID.replace("3", "4"))], None),
    ([fab()] * 7 + [fab(state=STATE_IN_PROGRESS)], None),  # fabric not ready yet
    ([fab()] * 7 + [fab(status=1)], None),
    ([fab(uuid="00000000-0000-0000-0000-000000000000")] * 8, None),
    ([None] * 8, None),  # no fabric at all (before Hopper)
])
def test_the_domain_is_the_agreed_cluster_uuid_and_clique(fabrics, want) -> None:
    source = RecordedNvml(recorded(fabrics))
    assert nvlink_domain_from_nvml(source) == want
    # a recording of the recording says the same
    assert nvlink_domain_from_nvml(RecordedNvml(record(source))) == want


def _node(name: str, annotations: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {names.NODE_ACTIVATION_LABEL:
                                                   names.NODE_ACTIVATION_VALUE},
                         **({"annotations": annotations} if annotations else {})}}


def test_the_reporter_writes_the_domain_and_removes_a_stale_one(tmp_path, capsys) -> None:
    attached = tmp_path / "attached.json"
    attached.write_text(json.dumps(recorded([fab()] * 8)))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(recorded([None] * 8)))
    with running_double() as kube:
        config = write_kubeconfig(tmp_path / "kubeconfig", kube.url)
        kube.apply(_node("tray"))
        kube.apply(_node("moved", {D: f"{UUID}.1"}))

        def report(node: str, source: Path) -> None:
            code = main(["topology", "report", "--nvml-recorded", str(source), "--node", node,
                         "--transport", "off", "--kubeconfig", str(config)])
            assert code == 0, capsys.readouterr().err

        report("tray", attached)
        report("moved", bare)
        nodes = {n["metadata"]["name"]: n for n in kube.objects("v1", "Node")}
        assert nodes["tray"]["metadata"]["annotations"][D] == f"{UUID}.32766"
        assert D not in nodes["moved"]["metadata"]["annotations"]
        # placement reads it (the DGX-1's generation is known: NVLink 2 from its links)
        assert node_state(nodes["tray"]).nvlink_domain == f"{UUID}.32766"
        assert node_state(nodes["moved"]).nvlink_domain is None
        used = {(verb, plural) for (verb, _, plural, _) in kube.verbs if plural == "nodes"}
        assert used == {("patch", "nodes")}
