"""Readers for what the placement step writes on a pod, shared by the placement tests."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import jsonpatch

from gputopo import names
from webhook.dryrun import review_body


def annotation(pod: dict[str, Any], key: str) -> str | None:
    return (pod.get("metadata", {}).get("annotations") or {}).get(key)


def record(pod: dict[str, Any]) -> dict[str, Any] | None:
    raw = annotation(pod, names.PLACEMENT_ANNOTATION)
    return None if raw is None else json.loads(raw)


def gpu_group(pod: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in annotation(pod, names.GPU_GROUP_ANNOTATION).split(","))


def gpu_visible(pod: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(x) for x in annotation(pod, names.GPU_VISIBLE_ANNOTATION).split(","))


def terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return (pod["spec"].get("affinity", {}).get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", []))


def pinned_node(pod: dict[str, Any]) -> str:
    """The node every non-empty nodeSelectorTerm pins the pod to (asserts they all agree;
    an empty term matches no node, so it needs no pin)."""
    found = set()
    for term in terms(pod):
        if not (term.get("matchExpressions") or term.get("matchFields")):
            continue
        pins = [f["values"] for f in term.get("matchFields", [])
                if f.get("key") == "metadata.name" and f.get("operator") == "In"]
        assert len(pins) == 1 and len(pins[0]) == 1, f"term without a single pin: {term}"
        found.add(pins[0][0])
    assert len(found) == 1, f"terms pin different nodes or none: {terms(pod)}"
    return found.pop()


_ANNOTATION_REF = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def env(container: dict[str, Any], pod: dict[str, Any] | None = None) -> dict[str, str]:
    """The container's env as the kubelet resolves it when the container starts: literal
    values, and downward-API ``fieldRef``s on the pod's annotations (a missing annotation
    resolves to ""). Without ``pod`` a reference stays unresolved (None)."""
    out: dict[str, Any] = {}
    for e in container.get("env", []):
        ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        m = _ANNOTATION_REF.match(ref)
        if m and pod is not None:
            out[e["name"]] = annotation(pod, m.group(1)) or ""
        else:
            out[e["name"]] = e.get("value")
    return out


def admit(admitter: Any, pod: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Admit ``pod`` through ``Admitter.handle_body`` as the API server would; the admitted pod."""
    body = json.loads(review_body(pod, "uid-1"))
    body["request"]["dryRun"] = dry_run
    status, answer = admitter.handle_body(json.dumps(body).encode())
    assert status == 200
    response = answer["response"]
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(pod, patch)
