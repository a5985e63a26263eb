"""The ACK report ConfigMap: round trip with Topology, the real ACK shape, bad reports."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from gputopo import names
from gputopo.errors import TopologyError
from gputopo.topology.ack_report import (
    report_configmap,
    topology_from_report,
    unhealthy_gpus,
)
from gputopo.topology.model import Topology

from .conftest import FIXTURE_FILES, load
from .strategies import measured_topologies, topologies


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_fixture_round_trip_keeps_links_and_bandwidths(name: str) -> None:
    topo = load(name)
    cm = report_configmap(topo, node="gpu-1")
    assert cm["metadata"]["name"] == "gpu-1" + names.ACK_REPORT_SUFFIX
    assert cm["metadata"]["namespace"] == names.ACK_REPORT_NAMESPACE
    assert cm["metadata"]["labels"] == {names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE}
    assert set(names.ACK_REPORT_KEYS) <= set(cm["data"])
    back = topology_from_report(json.loads(json.dumps(cm)))
    assert back.links == topo.links
    assert back.indices == topo.indices
    assert back.bandwidth_matrix == topo.bandwidth_matrix


@given(topo=measured_topologies())
def test_measured_round_trip(topo: Topology) -> None:
    back = topology_from_report(report_configmap(topo, node="n")["data"])
    assert back.links == topo.links and back.measured == topo.measured


@given(topo=topologies(min_gpus=2))
def test_table_bandwidths_are_written_for_consumers_that_read_only_bandwidth(
    topo: Topology,
) -> None:
    data = report_configmap(topo, node="n")["data"]
    assert json.loads(data["bandwidth"]) == [list(r) for r in topo.bandwidth_matrix]


def test_ack_shaped_report_with_health_map() -> None:
    data = {
        "nodeName": "gpu-2",
        "devices": json.dumps({"1": "Healthy", "0": "Healthy", "2": "Unhealthy"}),
        "linkType": json.dumps([["X", "NV2", "SYS"], ["NV2", "X", "SYS"], ["SYS", "SYS", "X"]]),
        "bandwidth": json.dumps([[0, 48.2, 8.1], [48.2, 0, 8.0], [8.1, 8.0, 0]]),
    }
    cm = {"metadata": {"name": "gpu-2-gputopo-report"}, "data": data}
    topo = topology_from_report(cm)
    assert topo.indices == (0, 1, 2)
    assert topo.measured is not None and topo.measured[0][1] == 48.2
    # within the noise band of V100's NV2 figure: the documented 51.562 (model._denoised)
    assert topo.bandwidth(0, 1) == 51.562
    assert unhealthy_gpus(cm) == frozenset({2})


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"devices": None}, "data.devices: missing"),
        ({"linkType": "[["}, "data.linkType: not JSON"),
        ({"bandwidth": "[[0]]"}, "data.bandwidth: must be a 2x2"),
        ({"devices": json.dumps({"a": "Healthy"})}, "not a GPU index"),
        ({"linkType": json.dumps([["X", "NV9X"], ["NV9X", "X"]])}, "unknown link code"),
    ],
)
def test_bad_reports_name_the_configmap_and_key(change: dict, words: str) -> None:
    data = {
        "devices": json.dumps({"0": "Healthy", "1": "Healthy"}),
        "linkType": json.dumps([["X", "NV1"], ["NV1", "X"]]),
        "bandwidth": json.dumps([[0, 25], [25, 0]]),
    }
    data.update(change)
    data = {k: v for k, v in data.items() if v is not None}
    cm = {"metadata": {"name": "x-gputopo-report", "namespace": "kube-system"}, "data": data}
    with pytest.raises(TopologyError) as err:
        topology_from_report(cm)
    assert words in err.value.reason
    assert err.value.obj == "ConfigMap kube-system/x-gputopo-report"
