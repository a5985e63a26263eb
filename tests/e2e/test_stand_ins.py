"""Our test stand-ins for the API server say what the API server says.

The other test folders check pods with rules restated in Python: the API TEST DOUBLE's pod
update rules (``tests/k8s_double/server.py``, ``pod_update_errors``, written from
``ValidatePodUpdate`` in pkg/apis/core/validation/validation.go) and the stored pod after
the API server's second defaulting pass (``tests/placement_step/apiserver_rules.py``,
``stored``: ``defaultHostNetworkPorts`` in pkg/apis/core/v1/defaults.go and
``validatePodHostNetworkDeps``). Here each is run beside the real code
(``podupdatecheck``, ``admitcheck`` with no webhooks) on the same cases, and must give the
same verdict.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import dump, namespace
from k8s_double.server import pod_update_errors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "placement_step"))
from apiserver_rules import stored

GATE = "gputopo.io/placement"
NODE = "node-a"


def _pod(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "containers": [{"name": "c", "image": "pytorch:1", "env": [{"name": "A", "value": "1"}],
                        "ports": [{"containerPort": 23456, "name": "pytorchjob-port"}]}],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "annotations": {"x": "1"}},
            "spec": base}


def _term(*values: str, key: str = "metadata.name") -> dict[str, Any]:
    return {"matchFields": [{"key": key, "operator": "In", "values": list(values)}]}


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}


def _gated(**spec: Any) -> dict[str, Any]:
    return _pod(schedulingGates=[{"name": GATE}], **spec)


def _edit(pod: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    change(out)
    return out


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        at = pod
        for k in keys:
            at = at[int(k)] if isinstance(at, list) else at.setdefault(k, {})
        if isinstance(at, list):
            at[int(last)] = value
        else:
            at[last] = value
    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        at = pod
        for k in keys:
            at = at[int(k)] if isinstance(at, list) else at[k]
        del at[last]
    return change


def _annotate(name: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        pod["metadata"]["annotations"][name] = value
    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(pod: dict[str, Any]) -> None:
        for c in changes:
            c(pod)
    return change


#: (case, old pod, the update): what the queue does and what it must never do
UPDATES = [
    ("remove the gate", _gated(), _drop("spec.schedulingGates")),
    ("add a gate", _pod(), _set("spec.schedulingGates", [{"name": GATE}])),
    ("add a second gate", _gated(), _set("spec.schedulingGates",
                                         [{"name": GATE}, {"name": "other"}])),
    ("the queue's patch: pin, annotate, ungate", _gated(),
     _both(_set("spec.affinity", _required(_term(NODE))),
           _annotate("topology.kubernetes.io/gpu-group", "0,1"),
           _drop("spec.schedulingGates"))),
    ("gated: add required affinity", _gated(), _set("spec.affinity", _required(_term(NODE)))),
    ("not gated: add required affinity", _pod(),
     _set("spec.affinity", _required(_term(NODE)))),
    ("gated: narrow a term", _gated(affinity=_required(
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]})),
     _set("spec.affinity", _required({
         "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
         "matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}))),
    ("gated: change the pinned node", _gated(affinity=_required(_term(NODE))),
     _set("spec.affinity", _required(_term("node-b")))),
    ("gated: add a second term", _gated(affinity=_required(_term(NODE))),
     _set("spec.affinity", _required(_term(NODE), _term("node-b")))),
    ("gated: drop the required affinity", _gated(affinity=_required(_term(NODE))),
     _drop("spec.affinity")),
    ("gated: add a nodeSelector key", _gated(nodeSelector={"a": "1"}),
     _set("spec.nodeSelector", {"a": "1", "b": "2"})),
    ("gated: change a nodeSelector value", _gated(nodeSelector={"a": "1"}),
     _set("spec.nodeSelector", {"a": "2"})),
    ("gated: change preferred affinity", _gated(), _set("spec.affinity", {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": _term(NODE, key="kubernetes.io/hostname")
             | {"matchFields": []}}]}})),
    ("change env", _gated(), _set("spec.containers.0.env", [{"name": "A", "value": "2"}])),
    ("change image", _pod(), _set("spec.containers.0.image", "pytorch:2")),
    ("add a toleration", _pod(), _set("spec.tolerations", [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "x", "operator": "Exists"}])),
    ("remove a toleration", _pod(), _set("spec.tolerations", [])),
    ("change hostNetwork", _gated(), _set("spec.hostNetwork", True)),
    ("change an annotation", _pod(), _set("metadata.annotations.x", "2")),
]


@pytest.fixture(scope="module")
def real_updates(programs, tmp_path_factory) -> dict[str, tuple[bool, str]]:
    """Each case's verdict from ``podupdatecheck`` (in parallel: one process each)."""
    work = tmp_path_factory.mktemp("updates")

    def run(case: tuple[str, dict[str, Any], Callable[[dict[str, Any]], None]]
            ) -> tuple[str, tuple[bool, str]]:
        name, old, change = case
        d = work / name.replace(" ", "-").replace(":", "").replace(",", "").replace("'", "")
        d.mkdir()
        p = programs.run("podupdatecheck", "--old", dump(d / "old.yaml", [old]),
                         "--new", dump(d / "new.yaml", [_edit(old, change)]))
        assert p.returncode in (0, 4), f"{name}: {p.returncode} {p.stdout}{p.stderr}"
        return name, (p.returncode == 0, p.stdout)

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(run, UPDATES))


@pytest.mark.parametrize(("case", "old", "change"), UPDATES, ids=[u[0] for u in UPDATES])
def test_the_doubles_pod_update_rules_are_the_api_servers(real_updates, case, old, change):
    valid, says = real_updates[case]
    errors = pod_update_errors(old, _edit(old, change))
    assert (not errors) == valid, f"podupdatecheck: {says.strip()}\ndouble: {errors}"


#: (case, pod as a webhook leaves it): ports of host-network pods, defaulted again
HOST_PORTS = [
    ("host network, no hostPort", _pod(hostNetwork=True)),
    ("host network, hostPort equal", _pod(hostNetwork=True, containers=[
        {"name": "c", "image": "x", "ports": [{"containerPort": 29500, "hostPort": 29500}]}])),
    ("host network, hostPort differs", _pod(hostNetwork=True, containers=[
        {"name": "c", "image": "x", "ports": [{"containerPort": 29500, "hostPort": 30000}]}])),
    ("host network, init container port", _pod(hostNetwork=True, initContainers=[
        {"name": "i", "image": "x", "ports": [{"containerPort": 2222}]}])),
    ("pod network", _pod()),
]


@pytest.mark.parametrize(("case", "pod"), HOST_PORTS, ids=[c for c, _ in HOST_PORTS])
def test_stored_ports_are_what_the_api_server_stores(programs, tmp_path, case, pod):
    """``stored()`` restates the defaulting of host ports and the check after it."""
    ns = dump(tmp_path / "ns.yaml", [namespace()])
    p = programs.run("admitcheck", "--webhooks", "/dev/null", "--namespace", ns,
                     "--pod", dump(tmp_path / "pod.yaml", [pod]))
    try:
        ours = stored(pod)
    except AssertionError:
        ours = None
    if p.returncode == 4:  # invalid: stored() must refuse it too
        assert ours is None, p.stderr
        assert "hostPort" in p.stderr or "containerPort" in p.stderr, p.stderr
        return
    assert p.returncode == 0, p.stderr
    real = yaml.safe_load(p.stdout)

    def ports(spec: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [(q["containerPort"], q.get("hostPort"), q.get("protocol"))
                for key in ("initContainers", "containers") for c in spec.get(key) or []
                for q in c.get("ports") or []]

    assert ours is not None
    assert ports(ours["spec"]) == ports(real["spec"])
