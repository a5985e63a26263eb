"""Volume rules as VolumeBinding and VolumeZone judge a node (gputopo/cluster/node_volumes.py)."""

from __future__ import annotations

from gputopo.cluster.node_fit import NodeFacts
from gputopo.cluster.node_volumes import VolumeRule, claim_names


def facts(**labels: str) -> NodeFacts:
    return NodeFacts.of({"metadata": {"name": "n1", "labels": {
        "kubernetes.io/hostname": "n1", **labels}}})


def test_zone_labels_bind_only_nodes_that_have_them() -> None:
    rule = VolumeRule(claim="c", volume="v", terms=None,
                      zones={"topology.kubernetes.io/zone": frozenset({"a", "b"})})
    assert rule.refuses(facts(**{"topology.kubernetes.io/zone": "b"})) == ""
    assert "zone=a/b" in rule.refuses(facts(**{"topology.kubernetes.io/zone": "c"}))
    assert rule.refuses(facts()) == ""  # no zone or region label: VolumeZone passes it


def test_node_affinity_terms_are_ored() -> None:
    terms = ({"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                    "values": ["n2"]}]},
             {"matchExpressions": [{"key": "disk", "operator": "Exists"}]})
    rule = VolumeRule(claim="c", volume="v", terms=terms, zones={})
    assert rule.refuses(facts()) != ""
    assert rule.refuses(facts(disk="nvme")) == ""


def test_claims_of_a_pod_spec() -> None:
    spec = {"volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "b", "emptyDir": {}}, "junk",
                        {"name": "c", "persistentVolumeClaim": {"claimName": ""}}]}
    assert claim_names(spec) == ["data"]
    assert claim_names({"volumes": "x"}) == []
