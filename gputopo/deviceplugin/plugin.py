"""The gRPC side: serve the DevicePlugin service, register with the kubelet, survive restarts.

Why a watch loop: the kubelet forgets every plugin when it restarts — it deletes the sockets
in its device-plugins directory and creates a new ``kubelet.sock`` — and expects each plugin
to notice, serve again and register again. :meth:`DevicePlugin.run` polls for exactly those
two signs (our socket gone, ``kubelet.sock`` replaced) twice a second, so a kubelet restart
is followed by a new registration within about a second. Nothing about allocations lives in
this process: the pods' annotations hold it, so a plugin restart loses nothing either.

Device IDs and their health stream to the kubelet through ``ListAndWatch``: the whole list
once, then again on each health change (the protocol has no deltas).

Every ``reconcile_every`` seconds the loop also asks the kubelet's PodResources API which
device IDs it really assigned to which pod, and has the allocator correct annotations that
say otherwise: the kubelet's calls carry no pod, so the pod an ``Allocate`` was for is
inferred (binding order), and this is where an inference that went wrong is repaired.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gputopo.deviceplugin.allocator import Allocator
from gputopo.deviceplugin.devices import DeviceTable, HealthSource, watch_health
from gputopo.deviceplugin.podresources import api_pb2 as podresources
from gputopo.deviceplugin.podresources import api_pb2_grpc as podresources_rpc
from gputopo.deviceplugin.v1beta1 import api_pb2 as api
from gputopo.deviceplugin.v1beta1 import api_pb2_grpc as rpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_ENDPOINT = "gputopo-gpu.sock"
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class DevicePluginService(rpc.DevicePluginServicer):
    """The five RPCs the kubelet's device manager calls."""

    def __init__(self, table: DeviceTable, allocator: Allocator, stop: threading.Event) -> None:
        self.table, self.allocator, self.stop = table, allocator, stop

    def GetDevicePluginOptions(self, request: api.Empty, context: Any) -> api.DevicePluginOptions:
        return api.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(self, request: api.Empty, context: Any
                     ) -> Iterator[api.ListAndWatchResponse]:
        seen = -1
        while not self.stop.is_set() and context.is_active():
            version = self.table.version
            if version != seen:
                seen = version
                yield api.ListAndWatchResponse(devices=[
                    api.Device(ID=dev_id, health=health, topology=_numa(numa))
                    for dev_id, health, numa in self.table.devices()])
            self.table.wait_change(seen, 0.5)

    def GetPreferredAllocation(self, request: api.PreferredAllocationRequest, context: Any
                               ) -> api.PreferredAllocationResponse:
        out = []
        for req in request.container_requests:
            available = self._indices(req.available_deviceIDs, context)
            must = self._indices(req.must_include_deviceIDs, context)
            chosen = self.allocator.preferred(available, int(req.allocation_size), must)
            out.append(api.ContainerPreferredAllocationResponse(
                deviceIDs=[self.table.device_id(i) for i in chosen]))
        return api.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request: api.AllocateRequest, context: Any) -> api.AllocateResponse:
        out = []
        for req in request.container_requests:
            given = self._indices(req.devices_ids, context)
            env = self.allocator.allocate(given)
            out.append(api.ContainerAllocateResponse(envs=env))
        return api.AllocateResponse(container_responses=out)

    def PreStartContainer(self, request: api.PreStartContainerRequest, context: Any
                          ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()

    def _indices(self, ids: Any, context: Any) -> list[int]:
        known = {dev_id for dev_id, _, _ in self.table.devices()}
        bad = [i for i in ids if i not in known]
        if bad:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown device IDs {bad}")
        return [self.table.index_of(i) for i in ids]


def _numa(numa: int | None) -> api.TopologyInfo | None:
    return None if numa is None else api.TopologyInfo(nodes=[api.NUMANode(ID=numa)])


class DevicePlugin:
    """One resource's plugin: its gRPC server, its registration, its restart watch."""

    def __init__(self, *, resource: str, table: DeviceTable, allocator: Allocator,
                 plugin_dir: str | Path = DEVICE_PLUGIN_DIR, endpoint: str = DEFAULT_ENDPOINT,
                 health: HealthSource | None = None,
                 pod_resources: str | Path | None = None,
                 reconcile_every: float = 10.0) -> None:
        self.resource, self.table, self.allocator = resource, table, allocator
        self.dir = Path(plugin_dir)
        self.endpoint = endpoint
        self.health = health
        self.pod_resources = Path(pod_resources) if pod_resources else None
        self.reconcile_every = reconcile_every
        self._last_reconcile = float("-inf")
        self.registrations = 0
        self._server: grpc.Server | None = None
        self._server_stop = threading.Event()
        self._kubelet_id: tuple[int, int] | None = None

    @property
    def socket(self) -> Path:
        return self.dir / self.endpoint

    @property
    def kubelet_socket(self) -> Path:
        return self.dir / KUBELET_SOCKET

    # --- one generation: serve, then register -----------------------------------------
    def serve(self) -> None:
        """Start (or restart) the gRPC server on our socket."""
        self.shutdown()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self._server_stop = threading.Event()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        rpc.add_DevicePluginServicer_to_server(
            DevicePluginService(self.table, self.allocator, self._server_stop), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def register(self, timeout: float = 5.0) -> None:
        """Tell the kubelet our socket and resource; raises grpc.RpcError when it refuses."""
        self._kubelet_id = _file_id(self.kubelet_socket)
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            rpc.RegistrationStub(channel).Register(api.RegisterRequest(
                version=API_VERSION, endpoint=self.endpoint, resource_name=self.resource,
                options=api.DevicePluginOptions(get_preferred_allocation_available=True)),
                timeout=timeout)
        self.registrations += 1
        log.info("registered %s with the kubelet (%s, endpoint %s)", self.resource,
                 self.kubelet_socket, self.endpoint)

    def shutdown(self) -> None:
        """Stop serving (open ListAndWatch streams end); the socket file goes with it."""
        self._server_stop.set()
        self.table.wake()
        if self._server is not None:
            self._server.stop(grace=0.5).wait(2.0)
            self._server = None

    # --- the long-running loop ---------------------------------------------------------
    def needs_restart(self) -> bool:
        """Our socket was removed, or the kubelet's socket is a new file: a kubelet restart."""
        if self._server is None or not self.socket.exists():
            return True
        current = _file_id(self.kubelet_socket)
        return current is not None and current != self._kubelet_id

    def run(self, stop: threading.Event, *, poll: float = 0.5) -> None:
        """Serve and stay registered until ``stop`` is set."""
        health_thread = None
        if self.health is not None:
            health_thread = threading.Thread(target=watch_health,
                                             args=(self.table, self.health, stop),
                                             name="gpu-health", daemon=True)
            health_thread.start()
        registered = False
        try:
            while not stop.is_set():
                if self.needs_restart():
                    self.serve()
                    registered = False
                if not registered and self.kubelet_socket.exists():
                    try:
                        self.register()
                        registered = True
                    except grpc.RpcError as exc:
                        log.warning("kubelet registration failed (%s); retrying",
                                    exc.code() if hasattr(exc, "code") else exc)
                if registered:
                    self.maybe_reconcile()
                stop.wait(poll)
        finally:
            self.shutdown()
            with contextlib.suppress(FileNotFoundError):
                self.socket.unlink()
            if health_thread is not None:
                health_thread.join(timeout=2.0)


    def maybe_reconcile(self) -> None:
        """Correct pods' annotations from the kubelet's record, at most every
        ``reconcile_every`` seconds; a kubelet without the PodResources API is skipped."""
        now = time.monotonic()
        if self.pod_resources is None or self.reconcile_every <= 0 \
                or now - self._last_reconcile < self.reconcile_every \
                or not self.pod_resources.exists():
            return
        self._last_reconcile = now
        try:
            assigned = assigned_devices(self.pod_resources, self.resource, self.table)
        except grpc.RpcError as exc:
            log.warning("PodResources List failed (%s); annotations not reconciled",
                        exc.code() if hasattr(exc, "code") else exc)
            return
        self.allocator.reconcile(assigned)


def assigned_devices(socket: Path, resource: str, table: DeviceTable, timeout: float = 5.0
                     ) -> dict[tuple[str, str], tuple[int, ...]]:
    """(namespace, pod) → GPU indices of ``resource`` the kubelet assigned, per its
    PodResources API (all containers of the pod together)."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        answer = podresources_rpc.PodResourcesListerStub(channel).List(
            podresources.ListPodResourcesRequest(), timeout=timeout)
    out: dict[tuple[str, str], tuple[int, ...]] = {}
    known = {dev_id for dev_id, _, _ in table.devices()}
    for pod in answer.pod_resources:
        ids = {table.index_of(i) for c in pod.containers for d in c.devices
               if d.resource_name == resource for i in d.device_ids if i in known}
        if ids:
            out[(pod.namespace, pod.name)] = tuple(sorted(ids))
    return out


def _file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a file, None when absent: a recreated socket has a new inode."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)
