"""Admission honours the queue's starvation guard: a NEW gang waits behind a starving one.

Through ``gputopo serve``'s wiring on the API TEST DOUBLE (the live view, the admission
pipeline, the placement queue): a 4 x 1-GPU gang waits gated on the queue's "Done when"
cluster (free: two GPUs on each node, not a good placement for it); once it has waited
the starvation guard's 600 s, a new 1-GPU gang that would fit at once is gated behind it
instead, its record naming the starving gang; when GPUs free up the queue places the
starving gang first, then the newcomer. The guard's bounds against deadlock (a gang
larger than the cluster, one that starved longer than its ``maxWaitSeconds``) hold no
admission.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from placement_checks import pinned_node, record
from placement_jobs import mpijob, worker_pod
from queue_kit import (
    NODE_A,
    NODE_B,
    admit_and_create,
    busy_cluster,
    busy_pod,
    gated,
    pods_of,
    wait_for,
    waiting_gang,
)
from test_placement_live import live_admitter

from gputopo import names
from gputopo.cli import main
from gputopo.cluster.reservations import GangKey
from gputopo.placement.starvation import DEFAULT_STARVATION_SECONDS, Waiter, holding
from gputopo.yamlio import dump_documents
from webhook.queue.placer import PlacementQueue

MAX_WAIT = 3600.0  # the default policy's maxWaitSeconds


def age(kube: Any, job: str, seconds: float) -> None:
    """Move the waiting records of ``job``'s gated pods ``seconds`` into the past, as if
    the gang had been waiting that much longer."""
    for pod in pods_of(kube, job):
        ann = pod["metadata"]["annotations"]
        rec = json.loads(ann[names.PLACEMENT_ANNOTATION])
        rec["since"] -= seconds
        ann[names.PLACEMENT_ANNOTATION] = json.dumps(rec)
        kube.apply(pod)


def _aged(view: Any, seconds: float) -> bool:
    return any(time.time() - w.since >= seconds for w in view.waiting_gangs())


@pytest.mark.parametrize("waited", [DEFAULT_STARVATION_SECONDS + 100,
                                    DEFAULT_STARVATION_SECONDS + MAX_WAIT + 100])
def test_a_new_gang_waits_behind_a_starving_gang_then_the_queue_places_it_first(
        kube, waited, tmp_path, capsys):
    holder = busy_cluster(kube)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        old, _ = waiting_gang(kube, admitter, "old")
        age(kube, "old", waited)
        assert wait_for(lambda: _aged(view, waited))
        # B:6,7 taken too: A:6,7 alone is free, on the node "old" keeps (the one of its
        # kind with the most GPUs free: it drains first)
        kube.apply(busy_pod("tmp-b", NODE_B, "6,7"))
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 14)
        young = kube.apply(mpijob("young", workers=1))
        pod, warnings = admit_and_create(admitter, kube, worker_pod(young, 0))
        if waited >= DEFAULT_STARVATION_SECONDS + MAX_WAIT:
            # starved past its maxWaitSeconds: it holds admission no longer (no deadlock)
            assert not gated(pod), warnings
            assert record(pod)["placed"] is True
            return
        # a free GPU is a perfect placement for it, yet it waits: that node is kept
        assert gated(pod), warnings
        rec = record(pod)
        assert rec["waiting"] is True and rec["placed"] is False
        assert "MPIJob default/old has waited" in rec["reason"], rec["reason"]
        assert any("MPIJob default/old" in w and "waits for a placement" in w
                   for w in warnings), warnings

        # `gputopo queue` says what the pass would: the newcomer does not fit off the kept node
        path = tmp_path / "cluster.yaml"
        path.write_text(dump_documents([*kube.objects("v1", "Node"),
                                        *kube.objects("v1", "Namespace"),
                                        *kube.objects("v1", "Pod")]))
        capsys.readouterr()
        assert main(["queue", "--cluster", str(path), "-o", "json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert [r["job"] for r in found] == ["MPIJob default/old", "MPIJob default/young"]
        assert "a starving gang ahead keeps" in found[1]["why"], found[1]["why"]
        assert not found[1]["why"].startswith("fits now")

        kube.remove(holder)  # GPUs 0-3 of node A (an NVLink quad) free up
        assert wait_for(lambda: sum(len(n.used) for n in view.node_states()) == 10)
        result = PlacementQueue(view.api_client, view, view.reservations,
                                identity="test").run_once()
    old_key = str(GangKey("default", "MPIJob", "old", old["metadata"]["uid"]))
    young_key = str(GangKey("default", "MPIJob", "young", young["metadata"]["uid"]))
    assert result.placed == [old_key, young_key], result  # the starving gang first
    assert all(pinned_node(p) == NODE_A and not gated(p) for p in pods_of(kube, "old"))
    assert not gated(pods_of(kube, "young")[0])


def test_a_starving_gang_larger_than_the_cluster_holds_no_admission():
    now = 10_000.0
    starving = Waiter("MPIJob default/big", "u-big", now - 700, 16, MAX_WAIT)
    assert holding([starving], uid="u-new", now=now, cluster_gpus=16) == [starving]
    assert holding([starving], uid="u-new", now=now, cluster_gpus=15) == []
    # a gang never waits behind itself, nor behind one not yet starving
    assert holding([starving], uid="u-big", now=now, cluster_gpus=16) == []
    young = Waiter("MPIJob default/young", "u-y", now - 500, 1, MAX_WAIT)
    assert holding([young], uid="u-new", now=now, cluster_gpus=16) == []
