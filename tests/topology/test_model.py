"""The gputopo.io/topology annotation: round trip and refusal of bad values."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from gputopo.errors import TopologyError
from gputopo.topology.model import Topology

from .conftest import FIXTURE_FILES, load
from .strategies import measured_topologies, topologies


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_fixture_annotation_round_trip(name: str) -> None:
    topo = load(name)
    back = Topology.from_annotation(topo.to_json())
    assert back == topo
    assert back.bandwidth_matrix == topo.bandwidth_matrix


@given(topo=topologies())
def test_annotation_round_trip(topo: Topology) -> None:
    assert Topology.from_annotation(json.loads(topo.to_json())) == topo


@given(topo=measured_topologies())
def test_annotation_round_trip_with_measurements(topo: Topology) -> None:
    back = Topology.from_annotation(topo.to_json())
    assert back == topo and hash(back) == hash(topo)


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "[]",
        {"version": 2, "links": [["X"]]},
        {"links": [["X", "NV1"], ["NV2", "X"]]},
        {"links": [["X", "FOO"], ["FOO", "X"]]},
        {"links": [["X", "NV1"]]},
        {"gpus": [{"index": 0}, {"index": 0}], "links": [["X", "NV1"], ["NV1", "X"]]},
        {"links": [["X", "NV1"], ["NV1", "X"]], "bandwidthGBps": [[0, -1], [-1, 0]]},
        {"links": [["X", "NV1"], ["NV1", "X"]], "generation": 3},
        # json.loads takes NaN/Infinity; a node with them must be left out, not rated inf
        '{"links": [["X", "NV1"], ["NV1", "X"]], "bandwidthGBps": [[0, Infinity], [1, 0]]}',
        '{"links": [["X", "NV1"], ["NV1", "X"]], "bandwidthGBps": [[0, NaN], [1, 0]]}',
        {"links": [["X", "NV1"], ["NV1", "X"]], "generation": "nvlink9"},
        {"gpus": [{"index": -1}, {"index": 0}], "links": [["X", "NV1"], ["NV1", "X"]]},
    ],
)
def test_bad_annotations_are_refused(value: object) -> None:
    with pytest.raises(TopologyError):
        Topology.from_annotation(value)  # type: ignore[arg-type]
