"""docs/rbac.md must list exactly the verbs the webhook's cluster code uses: every request
the view and the reservation store make against the API double is granted by a row of
the webhook table, and every verb granted there is used by some request."""

from __future__ import annotations

import re
from pathlib import Path

from cluster_helpers import job, node, wait_for

from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.cluster.reservations import GangKey, ReplicaKey
from gputopo.cluster.view import ClusterView
from gputopo.placement.types import Placement, ReplicaSlot

DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac.md"


def webhook_rules() -> list[tuple[str, set[str], set[str], set[str]]]:
    """(namespace or "" for cluster-wide, apiGroups, resources, verbs) per table row."""
    text = DOC.read_text()
    section = text.split("## Webhook", 1)[1].split("\n## ", 1)[0]
    rules = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not (cells[0].startswith("ClusterRole")
                                  or cells[0].startswith("Role")):
            continue
        ticks = [re.findall(r"`([^`]*)`", c) for c in cells[:4]]
        ns = ticks[0][0] if cells[0].startswith("Role in") else ""
        groups = {g.strip('"') for g in ticks[1]}
        rules.append((ns, groups, set(ticks[2]), set(ticks[3])))
    return rules


def test_rbac_doc_is_exactly_what_the_webhook_uses(kube, kube_client) -> None:
    from k8s_double import api_client

    for kind in ("PyTorchJob", "TFJob"):
        kube.apply(job(kind, kind.lower()))
    kube.apply(node("a", topology=None))
    store = KubernetesReservationStore(kube_client)
    view = ClusterView(api_client(kube.url), reservations=store, watch_timeout_seconds=1)
    view.start()
    try:
        assert view.wait_synced(5)
        assert wait_for(lambda: all(i["watches"] for i in view.stats().values()))
        # cache misses: a namespace, a job created a moment ago, a launcher's batch Job
        view.namespace("not-yet-watched")
        kube.apply(job("MPIJob", "fresh"))
        view.object(api_version="kubeflow.org/v1", kind="MPIJob", namespace="default",
                    name="fresh")
        view.object(api_version="batch/v1", kind="Job", namespace="default", name="l")
        key = GangKey("default", "PyTorchJob", "pytorchjob", "uid-1")
        store.reserve(key, Placement(True, (ReplicaSlot(0, "a", (0,)),)))
        store.assign_slot(key, ReplicaKey("worker", 0))
        store.held_gpus()
        store.expire(now=0)
        store.release(key)
    finally:
        view.stop()
    rules = webhook_rules()
    assert rules, "no webhook rules parsed from docs/rbac.md"
    used = set(kube.verbs)
    for verb, group, resource, ns in used:
        granted = [r for r in rules if group in r[1] and resource in r[2] and verb in r[3]
                   and (r[0] == "" or r[0] == ns)]
        assert granted, f"{verb} {group or 'core'}/{resource} in {ns or '*'}: not in rbac.md"
    for ns, groups, resources, verbs in rules:
        for verb in verbs:
            assert any(v == verb and g in groups and r in resources and (not ns or n == ns)
                       for v, g, r, n in used), \
                f"rbac.md grants {verb} on {resources} ({ns or 'cluster'}) but nothing uses it"
