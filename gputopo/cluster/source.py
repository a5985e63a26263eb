"""What the admission pipeline may ask of the cluster, as one small read interface.

Why a Protocol: the same pipeline runs in the server (backed by a live list+watch view of
the API server) and in ``gputopo mutate`` (backed by the objects of the input files). Both
implement :class:`ClusterReader`; the pipeline never knows which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gputopo import names
from gputopo.placement.types import NodeState


class WouldBlock(Exception):
    """A memory-only reader (``memory_only()`` of a view or snapshot) cannot answer without
    waiting: the object is not in memory (a GET would be needed) or the view is busy. The
    caller then asks the ordinary reader, off the event loop."""


class ClusterReader(Protocol):
    """Read access to the objects admission decisions depend on."""

    def namespace(self, name: str) -> dict[str, Any] | None:
        """The Namespace object, or None if unknown."""
        ...

    def object(
        self, *, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        """Any stored object by apiVersion/kind/namespace/name (training jobs, batch Jobs)."""
        ...

    def node_states(self) -> Sequence[NodeState]:
        """Activated nodes with their topology and GPUs in use, for the solver (read it,
        never modify it: a reader may hand out the same sequence until a node changes)."""
        ...


def node_state_named(cluster: ClusterReader, name: str) -> NodeState | None:
    """One node of ``cluster.node_states()`` by name: the reader's own index when it keeps
    one (``node_state(name)``: the snapshot and the live view do), else a pass over all."""
    look = getattr(cluster, "node_state", None)
    if look is not None:
        found: NodeState | None = look(name)
        return found
    return next((n for n in cluster.node_states() if n.name == name), None)


def namespace_opted_in(namespace: object) -> bool:
    """True when a Namespace object carries ``gputopo.io/inject=enabled``: the answer the
    readers keep per namespace (``namespace_opted_in`` of a memory-only reader), computed
    when the object is stored, with the same tests the pipeline applies to its labels."""
    meta = namespace.get("metadata") if isinstance(namespace, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return isinstance(labels, dict) and labels.get(names.INJECT_LABEL) == names.INJECT_VALUE
