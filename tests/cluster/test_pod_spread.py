"""The user's own rules between a gang's replicas, read as the scheduler's InterPodAffinity
and PodTopologySpread filters apply them (see gputopo/cluster/pod_spread.py)."""

from __future__ import annotations

from gputopo.cluster.pod_spread import selects, spread_of


def pod(spec: dict, labels: dict | None = None, namespace: str = "ml") -> dict:
    return {"metadata": {"namespace": namespace, "labels": labels or {"job": "a"}},
            "spec": spec}


def anti(key: str, selector: dict, **extra: object) -> dict:
    return {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": selector, "topologyKey": key, **extra}]}}}


def test_selectors() -> None:
    labels = {"job": "a", "tier": "gpu"}
    assert selects({}, labels)  # empty: every pod
    assert not selects(None, labels)  # missing: none
    assert selects({"matchLabels": {"job": "a"},
                    "matchExpressions": [{"key": "tier", "operator": "NotIn",
                                          "values": ["cpu"]},
                                         {"key": "x", "operator": "DoesNotExist"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "job", "operator": "Bogus"}]}, labels)


def test_hostname_anti_affinity_on_the_replicas_is_one_per_node() -> None:
    got = spread_of(pod(anti("kubernetes.io/hostname", {"matchLabels": {"job": "a"}})))
    assert (got.per_node, got.unjudged) == (1, "")
    # the term looks in other namespaces only: the replicas are not counted
    other = anti("kubernetes.io/hostname", {"matchLabels": {"job": "a"}}, namespaces=["x"])
    assert spread_of(pod(other)).per_node is None


def test_other_keys_and_pod_affinity_are_not_judged() -> None:
    zone = spread_of(pod(anti("topology.kubernetes.io/zone", {"matchLabels": {"job": "a"}})))
    assert zone.per_node is None and "topology.kubernetes.io/zone" in zone.unjudged
    spread = {"topologySpreadConstraints": [
        {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
         "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"job": "a"}}},
        {"maxSkew": 1, "topologyKey": "gputopo.io/rack",
         "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}]}
    assert spread_of(pod(spread)) == spread_of(pod(spread))  # plain values
    got = spread_of(pod(spread))
    assert got.per_node == 2 and got.unjudged == ""
    assert spread_of(pod({"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{}]}}})).unjudged
