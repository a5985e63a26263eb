"""What the watched pods hold on each node: GPUs, host ports, resource requests; and the
gated pods of waiting gangs.

Why a module of its own: the live view (:mod:`gputopo.cluster.view`) answers admission from
memory, and a node's state is rebuilt only when what is on it changed. This index keeps,
pod by pod, what each bound (or pinned and not yet bound) pod holds and the per-node sums,
so that a pod's change adds or takes away that one pod's share (never a pass over the
node's pods) and names the nodes whose state must be rebuilt. It reads pods through
:mod:`gputopo.cluster.objects`, as the file-backed snapshot does; it takes no lock (the
view calls it under its own).
"""

from __future__ import annotations

from typing import Any

from gputopo.cluster import objects as ob
from gputopo.cluster.informer import key_of
from gputopo.cluster.node_resources import Requests
from gputopo.cluster.waiters import waiter_of
from gputopo.placement.starvation import Waiter

PodKey = tuple[str, str]  # (namespace, name)


class PodHoldings:
    """Per node: the GPU indices (``used``), host ports (``ports``) and requests
    (``asked``, summed) its pods hold; ``waiters``: gated pods of waiting gangs."""

    def __init__(self) -> None:
        self._pod_gpus: dict[PodKey, tuple[str, tuple[int, ...]]] = {}
        self.used: dict[str, dict[PodKey, tuple[int, ...]]] = {}
        self._pod_ports: dict[PodKey, tuple[str, frozenset[tuple[str, int]]]] = {}
        self.ports: dict[str, dict[PodKey, frozenset[tuple[str, int]]]] = {}
        # the requests of pods on each node (bound, or pinned and not yet bound), and
        # their sum, kept up to date pod by pod as held GPUs are
        self._pod_asks: dict[PodKey, tuple[str, Requests]] = {}
        self.asked: dict[str, Requests] = {}
        #: gated pods of waiting gangs (gputopo.cluster.waiters), for the starvation guard
        self.waiters: dict[PodKey, Waiter] = {}

    def pod_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None
                    ) -> set[str]:
        """Take in one pod's change (``new`` None: deleted); the nodes whose holdings
        changed (their states must be rebuilt)."""
        key = key_of(old if old is not None else new or {})
        waiter = waiter_of(new) if new is not None else None
        if waiter is not None:
            self.waiters[key] = waiter
        else:
            self.waiters.pop(key, None)
        changed = self._ports_changed(key, new) | self._asks_changed(key, new)
        before = self._pod_gpus.pop(key, None)
        after = ob.gpus_held_by_pod(new) if new is not None else None
        if before == after:
            if after is not None:
                self._pod_gpus[key] = after
            return changed
        if before is not None:
            self.used.get(before[0], {}).pop(key, None)
            changed.add(before[0])
        if after is not None:
            self._pod_gpus[key] = after
            self.used.setdefault(after[0], {})[key] = after[1]
            changed.add(after[0])
        return changed

    def _ports_changed(self, key: PodKey, new: dict[str, Any] | None) -> set[str]:
        """Host ports a pod holds, indexed per node like its GPUs."""
        before = self._pod_ports.pop(key, None)
        after = ob.host_ports_held_by_pod(new) if new is not None else None
        if after is not None:
            self._pod_ports[key] = after
        changed: set[str] = set()
        if before == after:
            return changed
        if before is not None:
            self.ports.get(before[0], {}).pop(key, None)
            changed.add(before[0])
        if after is not None:
            self.ports.setdefault(after[0], {})[key] = after[1]
            changed.add(after[0])
        return changed

    def _asks_changed(self, key: PodKey, new: dict[str, Any] | None) -> set[str]:
        """CPU, memory, pods and extended resources a pod asks for, summed per node: a
        change adds or takes away one pod's request, never a pass over the node's pods."""
        before = self._pod_asks.pop(key, None)
        after = ob.requests_held_by_pod(new) if new is not None else None
        if after is not None:
            self._pod_asks[key] = after
        changed: set[str] = set()
        if before == after:
            return changed
        for was, sign in ((before, -1), (after, 1)):
            if was is None:
                continue
            node, asks = was
            total = self.asked.setdefault(node, {})
            for k, v in asks.items():
                total[k] = total.get(k, 0) + sign * v
                if not total[k]:
                    del total[k]
            if not total:
                del self.asked[node]
            changed.add(node)
        return changed
