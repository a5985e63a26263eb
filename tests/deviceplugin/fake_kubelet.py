"""A fake kubelet speaking the real device plugin gRPC API (v1beta1) over UNIX sockets.

Why: the plugin's contract is with the kubelet's device manager, not with our own classes.
This double does what that manager does, in the same order (FACTS.md, "Kubelet device
plugins"; kubelet pkg/kubelet/cm/devicemanager):

- serves ``Registration`` on ``<dir>/kubelet.sock``; on ``Register`` it dials the plugin's
  endpoint in the same directory and keeps a ``ListAndWatch`` stream open, tracking each
  device's health from the stream;
- admits one container at a time: the healthy devices it has not handed out are the
  available ones; it asks ``GetPreferredAllocation`` when the plugin's options say so, takes
  the preference (or, when told to ignore it, the IDs the test gives), then calls
  ``Allocate`` with them and records them as in use (its checkpoint);
- a restart removes every socket in the directory but keeps its checkpoint, then serves a
  new ``kubelet.sock``, as the real kubelet does on start;
- with ``pod_resources``, serves the PodResources API ``List`` from its checkpoint (which
  container of which pod holds which device IDs).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from gputopo.deviceplugin.podresources import api_pb2 as podresources
from gputopo.deviceplugin.podresources import api_pb2_grpc as podresources_rpc
from gputopo.deviceplugin.v1beta1 import api_pb2 as api
from gputopo.deviceplugin.v1beta1 import api_pb2_grpc as rpc


@dataclass
class Admission:
    preferred: list[str] | None
    given: list[str]
    env: dict[str, str]


class _Registration(rpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def Register(self, request: api.RegisterRequest, context: object) -> api.Empty:
        self.kubelet._on_register(request)
        return api.Empty()


class _PodResources(podresources_rpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet, resource: str) -> None:
        self.kubelet, self.resource = kubelet, resource

    def List(self, request: object, context: object) -> podresources.ListPodResourcesResponse:
        pods: dict[tuple[str, str], dict[str, list[str]]] = {}
        with self.kubelet._cond:
            for dev, owner in sorted(self.kubelet.in_use.items()):
                parts = owner.split("/")
                if len(parts) == 3:  # "namespace/pod/container"
                    pods.setdefault((parts[0], parts[1]), {}).setdefault(parts[2], []).append(dev)
        return podresources.ListPodResourcesResponse(pod_resources=[
            podresources.PodResources(namespace=ns, name=name, containers=[
                podresources.ContainerResources(name=c, devices=[podresources.ContainerDevices(
                    resource_name=self.resource, device_ids=ids)])
                for c, ids in containers.items()])
            for (ns, name), containers in pods.items()])


class FakeKubelet:
    def __init__(self, directory: Path, *, pod_resources: Path | None = None,
                 resource: str = "aliyun.com/gpu") -> None:
        self.dir = directory
        self.pod_resources = pod_resources
        self.resource = resource
        self.registrations: list[api.RegisterRequest] = []
        self.devices: dict[str, str] = {}  # ID -> health, from ListAndWatch
        self.lists = 0  # ListAndWatch responses received
        #: ID -> the container holding it ("namespace/pod/container"), the checkpoint
        self.in_use: dict[str, str] = {}
        self._server: grpc.Server | None = None
        self._channel: grpc.Channel | None = None
        self._stub: rpc.DevicePluginStub | None = None
        self._options: api.DevicePluginOptions | None = None
        self._cond = threading.Condition()

    @property
    def socket(self) -> Path:
        return self.dir / "kubelet.sock"

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        if self.pod_resources is not None:
            podresources_rpc.add_PodResourcesListerServicer_to_server(
                _PodResources(self, self.resource), server)
            server.add_insecure_port(f"unix://{self.pod_resources}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._stub = None
        if self._server is not None:
            self._server.stop(grace=0).wait(2.0)
            self._server = None

    def restart(self) -> None:
        """Stop, delete every socket in the directory (the kubelet does on start), serve
        a new kubelet.sock. Devices and the checkpoint of devices in use are kept."""
        self.stop()
        for path in self.dir.glob("*.sock"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with self._cond:
            self.devices = {}
        self.start()

    # --- what Register triggers ------------------------------------------------------
    def _on_register(self, request: api.RegisterRequest) -> None:
        assert request.version == "v1beta1"
        channel = grpc.insecure_channel(f"unix://{self.dir / request.endpoint}")
        stub = rpc.DevicePluginStub(channel)
        with self._cond:
            self.registrations.append(request)
            self._channel, self._stub, self._options = channel, stub, request.options
            self._cond.notify_all()
        threading.Thread(target=self._watch, args=(stub,), daemon=True).start()

    def _watch(self, stub: rpc.DevicePluginStub) -> None:
        try:
            for response in stub.ListAndWatch(api.Empty()):
                with self._cond:
                    if stub is not self._stub:
                        return
                    self.devices = {d.ID: d.health for d in response.devices}
                    self.lists += 1
                    self._cond.notify_all()
        except grpc.RpcError:
            return  # the plugin went away: it re-registers

    def wait_for(self, predicate, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_registered(self, count: int, timeout: float = 10.0) -> bool:
        return self.wait_for(lambda: len(self.registrations) >= count and self.devices,
                             timeout)

    # --- admission of one container ----------------------------------------------------
    def available(self) -> list[str]:
        with self._cond:
            return sorted((i for i, h in self.devices.items()
                           if h == "Healthy" and i not in self.in_use), key=int)

    def admit(self, container: str, size: int, *,
              ignore_preference: Sequence[str] | None = None) -> Admission:
        """GetPreferredAllocation (if offered) then Allocate, as the device manager does.

        ``container`` names the holder in the checkpoint: "namespace/pod/container" makes it
        visible through the PodResources API."""
        assert self._stub is not None, "no plugin registered"
        available = self.available()
        assert len(available) >= size, f"only {available} available for {size}"
        preferred = None
        if self._options is not None and self._options.get_preferred_allocation_available:
            answer = self._stub.GetPreferredAllocation(api.PreferredAllocationRequest(
                container_requests=[api.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=[],
                    allocation_size=size)]), timeout=10)
            preferred = list(answer.container_responses[0].deviceIDs)
        if ignore_preference is not None:
            given = list(ignore_preference)
        elif preferred is not None and len(preferred) == size \
                and set(preferred) <= set(available):
            given = preferred
        else:
            given = available[:size]
        response = self._stub.Allocate(api.AllocateRequest(
            container_requests=[api.ContainerAllocateRequest(devices_ids=given)]), timeout=10)
        env = dict(response.container_responses[0].envs)
        with self._cond:
            for i in given:
                self.in_use[i] = container
        return Admission(preferred, given, env)
