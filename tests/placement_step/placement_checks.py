"""Readers for what the placement step writes on a pod, shared by the placement tests."""

from __future__ import annotations

import json
from typing import Any

from gputopo import names


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
    """The node every nodeSelectorTerm pins the pod to (asserts they all agree)."""
    found = set()
    for term in terms(pod):
        pins = [f["values"] for f in term.get("matchFields", [])
                if f.get("key") == "metadata.name" and f.get("operator") == "In"]
        assert len(pins) == 1 and len(pins[0]) == 1, f"term without a single pin: {term}"
        found.add(pins[0][0])
    assert len(found) == 1, f"terms pin different nodes or none: {terms(pod)}"
    return found.pop()


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}
