"""node_fits: the scheduler's NodeAffinity and TaintToleration rules on one node."""

from __future__ import annotations

import pytest

from gputopo.cluster.node_fit import node_fits

NODE = {"metadata": {"name": "n1", "labels": {"pool": "a", "gpus": "8",
                                              "kubernetes.io/os": "linux"}},
        "spec": {"taints": [{"key": "dedicated", "value": "train", "effect": "NoSchedule"},
                            {"key": "soft", "effect": "PreferNoSchedule"}]}}
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "train"}]


def _affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(("spec", "fits"), [
    ({}, False),  # the NoSchedule taint is not tolerated
    ({"tolerations": TOLERATE}, True),
    ({"tolerations": [{"operator": "Exists"}]}, True),
    ({"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]},
     False),
    ({"tolerations": [{"key": "dedicated", "value": "other"}]}, False),
    ({"tolerations": TOLERATE, "nodeSelector": {"pool": "a"}}, True),
    ({"tolerations": TOLERATE, "nodeSelector": {"pool": "b"}}, False),
    ({"tolerations": TOLERATE, "nodeSelector": {"kubernetes.io/os": "windows"}}, False),
    ({"tolerations": TOLERATE, "nodeSelector": {"kubernetes.io/arch": "amd64"}}, True),
    ({"tolerations": TOLERATE, "affinity": _affinity(
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]},
        {"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]})}, True),
    ({"tolerations": TOLERATE, "affinity": _affinity(
        {"matchExpressions": [{"key": "gpus", "operator": "Lt", "values": ["4"]}]})}, False),
    ({"tolerations": TOLERATE, "affinity": _affinity(
        {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]})},
     False),
    ({"tolerations": TOLERATE, "affinity": _affinity(
        {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}],
         "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})},
     True),
    ({"tolerations": TOLERATE, "affinity": _affinity(
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]})},
     False),
    ({"tolerations": TOLERATE, "affinity": _affinity({})}, False),  # empty term: no node
    ({"tolerations": TOLERATE, "affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["b"]}]}}]}}}, True),
])
def test_node_fits(spec, fits):
    assert node_fits(spec, NODE) is fits


def test_a_cordoned_node_fits_only_pods_tolerating_it():
    node = {"metadata": {"name": "n2"}, "spec": {"unschedulable": True}}
    assert node_fits({}, node) is False
    assert node_fits({"tolerations": [{"key": "node.kubernetes.io/unschedulable",
                                       "operator": "Exists", "effect": "NoSchedule"}]}, node)


@pytest.mark.parametrize("junk", [None, 1, "x", [], {}, [{}], {"a": 1}])
def test_malformed_constraints_never_raise(junk):
    """The review parser does not look inside affinity or tolerations: whatever a client
    sends there must not crash the placement step."""
    for spec in ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": [{"matchExpressions": [
                         {"key": junk, "operator": "In", "values": junk}]}]}}}},
                 {"affinity": {"nodeAffinity": junk}}, {"tolerations": junk},
                 {"tolerations": [{"key": junk, "operator": junk, "effect": junk}]}):
        node_fits(spec, NODE)
        node_fits(spec, {"metadata": junk, "spec": {"taints": [junk]}})
