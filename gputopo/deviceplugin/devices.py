"""The node's GPUs as the kubelet sees them: stable IDs, NUMA node, health.

Why a table of its own: ``ListAndWatch`` streams must send the whole device list again on
every health change, to every connected kubelet stream, while the NVML health watcher runs
in its own thread. :class:`DeviceTable` is the one shared, locked state both sides use.

IDs are the NVML device indices as strings ("0".."7"): the same numbers the topology
reporter writes in ``gputopo.io/topology`` and the webhook writes in
``topology.kubernetes.io/gpu-group``, so a placement maps to device IDs with no lookup, and
they survive a plugin restart (NVML enumerates in PCI bus order). A GPU that fails stays in
the list as ``Unhealthy`` (the kubelet then stops handing it out) rather than disappearing.

Health comes from a :class:`HealthSource`: :class:`NvmlHealth` waits on NVML events (XID
critical errors, double-bit ECC, GPU lost) on a real node; tests feed events by hand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gputopo.topology.model import Topology

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

#: XIDs caused by the application, not the GPU (the same list NVIDIA's plugin skips):
#: 13 graphics engine exception, 31 memory page fault, 43 channel stopped, 45 preemptive
#: cleanup, 68 video processor exception, 109 context switch timeout.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True)
class HealthEvent:
    """GPU ``index`` became healthy or not; ``index`` None means every GPU (GPU lost)."""

    index: int | None
    healthy: bool
    reason: str


class HealthSource(Protocol):
    def wait(self, timeout: float) -> list[HealthEvent]:
        """Block up to ``timeout`` seconds; the health changes seen meanwhile."""
        ...


class DeviceTable:
    """GPU IDs with their health; ``version`` grows on every change, waiters are woken."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._numa = {g.index: g.numa for g in topology.gpus}
        self._health = {g.index: HEALTHY for g in topology.gpus}
        self._cond = threading.Condition()
        self.version = 0

    @staticmethod
    def device_id(index: int) -> str:
        return str(index)

    @staticmethod
    def index_of(device_id: str) -> int:
        """``"4"`` → 4; ValueError for an ID this plugin never advertised."""
        value = int(device_id)
        if str(value) != device_id or value < 0:
            raise ValueError(f"not a gputopo device ID: {device_id!r}")
        return value

    def devices(self) -> list[tuple[str, str, int | None]]:
        """(ID, health, NUMA node) per GPU, in index order."""
        with self._cond:
            return [(self.device_id(i), self._health[i], self._numa[i])
                    for i in sorted(self._health)]

    def healthy(self) -> frozenset[int]:
        with self._cond:
            return frozenset(i for i, h in self._health.items() if h == HEALTHY)

    def apply(self, event: HealthEvent) -> bool:
        """Record a health change; True when something changed (streams get a new list)."""
        state = HEALTHY if event.healthy else UNHEALTHY
        with self._cond:
            targets = list(self._health) if event.index is None else [event.index]
            changed = [i for i in targets if i in self._health and self._health[i] != state]
            for i in changed:
                self._health[i] = state
                log.warning("GPU %d is %s: %s", i, state, event.reason)
            if changed:
                self.version += 1
                self._cond.notify_all()
            return bool(changed)

    def wait_change(self, seen: int, timeout: float) -> int:
        """Block until ``version`` differs from ``seen`` (or timeout); the current version."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != seen, timeout)
            return self.version

    def wake(self) -> None:
        """Wake every waiter without a change (a stream that must notice a shutdown)."""
        with self._cond:
            self._cond.notify_all()


def watch_health(table: DeviceTable, source: HealthSource, stop: threading.Event,
                 *, poll: float = 1.0) -> None:
    """Feed ``source``'s events into ``table`` until ``stop`` is set (a thread's body)."""
    while not stop.is_set():
        try:
            events = source.wait(poll)
        except Exception:  # a broken health source must not kill the plugin
            log.exception("health source failed; GPUs keep their last known health")
            stop.wait(poll)
            continue
        for event in events:
            table.apply(event)


class NoHealth:
    """A health source that never reports (``--no-health``, or NVML events unsupported)."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self._stop = stop or threading.Event()

    def wait(self, timeout: float) -> list[HealthEvent]:
        self._stop.wait(timeout)
        return []


class NvmlHealth:  # pragma: no cover - needs a GPU and its driver
    """NVML event waits: XID critical errors (less the application ones), double-bit ECC
    errors and a lost GPU mark GPUs unhealthy. NVML never reports recovery; a GPU comes
    back when the plugin restarts after the node was repaired."""

    def __init__(self, indices: Sequence[int]) -> None:
        import pynvml

        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self._set = pynvml.nvmlEventSetCreate()
        self._index_by_uuid: dict[str, int] = {}
        kinds = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
        self._initial: list[HealthEvent] = []
        for i in indices:
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            self._index_by_uuid[uuid.decode() if isinstance(uuid, bytes) else uuid] = i
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, kinds, self._set)
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) == pynvml.NVML_ERROR_GPU_IS_LOST:
                    self._initial.append(HealthEvent(i, False, "GPU is lost"))
                else:
                    log.warning("GPU %d: NVML events not supported (%s); no health checks", i,
                                exc)

    def wait(self, timeout: float) -> list[HealthEvent]:
        nvml = self._nvml
        out, self._initial = self._initial, []
        try:
            data = nvml.nvmlEventSetWait_v2(self._set, int(timeout * 1000))
        except nvml.NVMLError as exc:
            value = getattr(exc, "value", None)
            if value == nvml.NVML_ERROR_TIMEOUT:
                return out
            if value == nvml.NVML_ERROR_GPU_IS_LOST:
                return [*out, HealthEvent(None, False, "GPU is lost")]
            raise
        xid = int(data.eventData)
        if data.eventType == nvml.nvmlEventTypeXidCriticalError and xid in APPLICATION_XIDS:
            return out
        uuid = nvml.nvmlDeviceGetUUID(data.device)
        index = self._index_by_uuid.get(uuid.decode() if isinstance(uuid, bytes) else uuid)
        return [*out, HealthEvent(index, False, f"NVML event {data.eventType} (XID {xid})")]
