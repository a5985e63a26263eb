"""The memory-only reader's kept opt-in answer per namespace (``namespace_opted_in``, what
the server's event loop reads for every review) follows the Namespace through the watch:
labelled, relabelled, deleted. A stale answer would mutate a pod of a namespace that opted
out, or skip one that opted in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster_helpers import wait_for
from k8s_double import KubeApiDouble, api_client

from gputopo import names
from gputopo.cluster.view import ClusterView


@pytest.fixture
def view(kube: KubeApiDouble) -> Iterator[ClusterView]:
    v = ClusterView(api_client(kube.url), watch_timeout_seconds=2, backoff_initial=0.05,
                    backoff_max=0.2, request_timeout=2, fetch_timeout=1)
    yield v
    v.stop()


def ns(name: str, **labels: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}


def test_the_opt_in_answer_follows_the_namespace_through_the_watch(kube, view) -> None:
    kube.apply(ns("team", **{names.INJECT_LABEL: names.INJECT_VALUE}))
    kube.apply(ns("web", app="web"))
    view.start()
    assert view.wait_synced(5)
    opted_in = view.memory_only().namespace_opted_in
    assert opted_in("team") is True and opted_in("web") is False
    assert opted_in("nowhere") is None  # not in memory: the caller asks namespace()

    kube.apply(ns("team", **{names.INJECT_LABEL: "disabled"}))  # relabelled: opted out
    kube.apply(ns("web", **{names.INJECT_LABEL: names.INJECT_VALUE}))  # and in
    assert wait_for(lambda: opted_in("team") is False and opted_in("web") is True)
    assert view.memory_only().namespace_opted_in("web") is True  # the same answers

    kube.remove(ns("web"))
    assert wait_for(lambda: opted_in("web") is None)
    kube.apply(ns("late", **{names.INJECT_LABEL: names.INJECT_VALUE}))  # added after start
    assert wait_for(lambda: opted_in("late") is True)
