"""A user's empty nodeSelectorTerm (``{}``) stays empty when gputopo pins the pod.

An empty term matches no node (``k8s.io/api/core/v1`` NodeSelectorTerm: "a null or empty
node selector term matches no objects"; the scheduler's ``nodeaffinity`` skips it), and
terms are ORed, so ``[A, {}]`` allows exactly A's nodes. The pin gputopo adds
(``matchFields metadata.name In [node]``) must only narrow: written into the empty term
too, that term alone would match the pinned node whatever A says (the real scheduler,
``schedsim`` 1.30, binds ``[A + pin, {pin}]`` on the pinned node outside A, and leaves
``[A + pin, {}]`` unschedulable there), and re-admission took the filled term for one
gputopo had made and dropped it, so ``gputopo mutate`` over its own output changed the pod.
(webhook/placement/mutations.py ``pin_to_node``; the queue's side: tests/queue.)
"""

from __future__ import annotations

from typing import Any

from apiserver_rules import stored
from placement_checks import record
from test_network_plan import pytorchjob
from test_trainjob_gangs import NODES

from gputopo.operators import expand

#: the user's own term: either node; the second term is empty (matches nothing)
MINE = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                              "values": list(NODES)}]}


def _job() -> dict[str, Any]:
    job = pytorchjob("pt", gpus=2)
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        rs["template"]["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [MINE, {}]}}}
    return job


def _terms(pod: dict[str, Any]) -> list[Any]:
    return pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_the_pin_goes_into_the_users_terms_but_not_into_an_empty_one(mutate):
    job = _job()
    objs = expand(job)
    first = mutate([job, *objs])
    assert first.rc == 0, first.stderr
    pods = [d for d in first.docs if d.get("kind") == "Pod"]
    assert pods and all(record(p)["placed"] for p in pods)
    for pod in pods:
        pin = {"key": "metadata.name", "operator": "In", "values": [record(pod)["node"]]}
        assert _terms(pod) == [{**MINE, "matchFields": [pin]}, {}]


def test_mutate_over_its_own_defaulted_output_keeps_the_empty_term(mutate):
    """The pods as the API server stored them (defaulted after the patch), admitted again
    with no reservation left: nothing changes, the user's empty term included."""
    job = _job()
    objs = expand(job)
    owners = [job, *(o for o in objs if o["kind"] != "Pod")]
    first = mutate([*owners, *(o for o in objs if o["kind"] == "Pod")])
    assert first.rc == 0, first.stderr
    out = [stored(d) for d in first.docs if d.get("kind") == "Pod"]
    again = mutate([*owners, *out])
    assert again.rc == 0, again.stderr
    assert [d for d in again.docs if d.get("kind") == "Pod"] == out, again.stderr
