"""The cluster view's in-memory answers for a caller that must never wait.

Why: the server's event loop decides out-of-scope reviews at once and must never block on
an API call or on the view's lock while a watch writes; this reader answers from what the
watches hold, or raises :class:`~gputopo.cluster.source.WouldBlock`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gputopo.cluster.source import WouldBlock
from gputopo.placement.types import NodeState

if TYPE_CHECKING:  # made by the view, for the view: imported for types only
    from gputopo.cluster.view import ClusterView


class MemoryOnlyReader:
    """``ClusterView.memory_only()``: the view's in-memory lookups, without fallbacks."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view
        #: Whether the Namespace the watch holds under a name opted in (None: it holds
        #: none; ``namespace`` then says WouldBlock). The view's own ``dict.get``, without
        #: the lock: one dict read is atomic, and the watch replaces the answer with the
        #: object, under the lock. Why: the server's event loop asks it of every review,
        #: and each Python function a cold review touches costs on its own
        #: (``git show 5b1c38e:docs/benchmarks.md``, "Cold CPU: the event loop's share").
        self.namespace_opted_in = view._opted_in.get

    def namespace(self, name: str) -> dict[str, Any] | None:
        view = self._view
        if not view._lock.acquire(blocking=False):
            raise WouldBlock("cluster view busy")
        try:
            ns = view._informers["namespaces"].store.get(("", name))
        finally:
            view._lock.release()
        if ns is None:
            raise WouldBlock(f"namespace {name} not in memory")
        return ns

    def object(
        self, *, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        view = self._view
        if not view._lock.acquire(blocking=False):
            raise WouldBlock("cluster view busy")
        try:
            obj = view._stored(api_version, kind, namespace, name)
        finally:
            view._lock.release()
        if obj is not None:
            return obj
        raise WouldBlock(f"{kind} {namespace}/{name} not in memory")

    def node_states(self) -> list[NodeState]:
        raise WouldBlock("node states are for the admitter thread")
