"""The queue pins a waiting pod whose required node affinity holds an empty term.

While a pod is gated the API server lets its required node affinity only gain
requirements, and an empty nodeSelectorTerm must stay empty
(``validateNodeSelectorTermHasOnlyAdditions``, ``pkg/apis/core/validation``; the real
``podupdatecheck`` answers "only additions are allowed" to ``{}`` -> ``{matchFields:
[pin]}``; the API TEST DOUBLE holds the same rule). The queue's pin went into the empty
term too, so its update was refused and the gang never left the gate.
"""

from __future__ import annotations

from placement_checks import pinned_node, record
from placement_jobs import mpijob, worker_pod
from queue_kit import NODE_A, NODE_B, admit_and_create, busy_cluster, gated, pods_of, wait_for
from test_placement_live import live_admitter

from webhook.queue.placer import PlacementQueue

MINE = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                              "values": [NODE_A, NODE_B]}]}


def test_a_gated_pod_with_an_empty_term_is_pinned_and_released(kube):
    holder = busy_cluster(kube)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [MINE, {}]}}}
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        job = kube.apply(mpijob("waiter", worker_affinity=affinity))
        for i in range(4):
            pod, warnings = admit_and_create(admitter, kube, worker_pod(job, i))
            assert gated(pod), warnings
        kube.remove(holder)
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 8)
        queue = PlacementQueue(view.api_client, view, view.reservations, identity="test")
        result = queue.run_once()
        assert len(result.placed) == 1, result
    for pod in pods_of(kube, "waiter"):
        assert not gated(pod) and record(pod)["placed"] is True
        assert pinned_node(pod) == NODE_A
        pin = {"key": "metadata.name", "operator": "In", "values": [NODE_A]}
        assert pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
            {**MINE, "matchFields": [pin]}, {}]
