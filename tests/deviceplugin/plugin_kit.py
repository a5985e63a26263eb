"""Shared pieces of the device plugin tests: NVML faked from the topology fixtures, a health
source fed by hand, the plugin started as its command starts it, bound pods."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k8s_double import KubeApiDouble, api_client
from kubernetes import client

from gputopo import names
from gputopo.cluster.demo import demo_snapshot
from gputopo.cluster.view import ClusterView
from gputopo.deviceplugin.allocator import Allocator
from gputopo.deviceplugin.devices import DeviceTable, HealthEvent
from gputopo.deviceplugin.plugin import DevicePlugin
from gputopo.deviceplugin.pods import PodDirectory
from gputopo.topology.model import Topology
from gputopo.topology.nvidia_smi import parse_nvidia_smi

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures" / "topologies"
RESOURCE = "aliyun.com/gpu"
POD_RESOURCES = "pod-resources.sock"  # the fake kubelet's PodResources API, in its directory
#: NVML_TOPOLOGY_* levels for the legend codes (the inverse of gputopo.topology.nvml).
LEVEL = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
ARCH = {"nvlink1": 4, "nvlink2": 5, "nvlink3": 7, "nvlink4": 9, "nvlink5": 10}


class FixtureNvml:
    """NVML's answers for a node wired as a topology fixture says (an NvmlSource):
    one PCI bus id per GPU, ``NV#`` links as that many NVLink remotes, other cells as
    common-ancestor levels. The plugin builds its topology from this exactly as from NVML."""

    def __init__(self, topology: Topology) -> None:
        self.t = topology

    def device_count(self) -> int:
        return len(self.t.gpus)

    def bus_id(self, index: int) -> str:
        return f"00000000:{0x10 + index:02X}:00.0"

    def common_ancestor(self, a: int, b: int) -> int:
        return LEVEL[self.t.link(a, b)]

    def nvlink_remotes(self, index: int) -> Sequence[str]:
        out = []
        for j in self.t.indices:
            code = self.t.link(index, j)
            if j != index and code.startswith("NV"):
                out += [self.bus_id(j)] * int(code[2:])
        return out

    def numa_node(self, index: int) -> int | None:
        return self.t.gpus[index].numa

    def architecture(self, index: int) -> int | None:
        return ARCH.get(self.t.generation or "")


def fixture_topology(name: str) -> Topology:
    path = FIXTURES / name
    return parse_nvidia_smi(path.read_text(), source=str(path))


class FakeHealth:
    """A HealthSource the test feeds by hand."""

    def __init__(self) -> None:
        self._events: list[HealthEvent] = []
        self._cond = threading.Condition()

    def push(self, event: HealthEvent) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def wait(self, timeout: float) -> list[HealthEvent]:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._events), timeout)
            out, self._events = self._events, []
            return out


@dataclass
class RunningPlugin:
    plugin: DevicePlugin
    stop: threading.Event
    thread: threading.Thread
    health: FakeHealth

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def start_plugin(core: client.CoreV1Api, topology: Topology, directory: Path, node: str,
                 *, resource: str = RESOURCE, reconcile_every: float = 0.0) -> RunningPlugin:
    """A fresh plugin process's objects, running its loop in a thread; with
    ``reconcile_every``, it reads the fake kubelet's PodResources socket that often."""
    health = FakeHealth()
    plugin = DevicePlugin(
        resource=resource, table=DeviceTable(topology),
        allocator=Allocator(topology=topology,
                            pods=PodDirectory(core, node=node, resource=resource)),
        plugin_dir=directory, health=health, pod_resources=directory / POD_RESOURCES,
        reconcile_every=reconcile_every)
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), kwargs={"poll": 0.1},
                              daemon=True)
    thread.start()
    return RunningPlugin(plugin, stop, thread, health)


def bind(pod: dict[str, Any], node: str, *, at: str) -> dict[str, Any]:
    """The pod as the API holds it after the scheduler bound it at time ``at``."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]}
    return out


def gpu_pod(name: str, gpus: int, *, namespace: str = "default",
            containers: int = 1) -> dict[str, Any]:
    """A pod nobody placed: plain GPU request of ``aliyun.com/gpu``."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [
            {"name": f"c{k}", "image": "cuda",
             "resources": {"limits": {RESOURCE: gpus}}} for k in range(containers)]},
    }


# --- the seeds' DGX-1 node in the API double -------------------------------------------
NODE = "cn-shanghai.192.168.16.172"
SEED = "policies/tests/arena-mpi-v2beta1/resources.yaml"


def group_of(pod: dict[str, Any]) -> str:
    return pod["metadata"]["annotations"][names.GPU_GROUP_ANNOTATION]


def setup_node(kube: KubeApiDouble) -> None:
    node = next(n for n in demo_snapshot().of_kind("Node") if n["metadata"]["name"] == NODE)
    kube.apply(node)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})


def used_by_view(kube: KubeApiDouble) -> set[int]:
    """GPUs in use on NODE as gputopo's cluster view counts them."""
    ac = api_client(kube.url)
    view = ClusterView(ac).start()
    try:
        assert view.wait_synced(10)
        state = next(s for s in view.node_states() if s.name == NODE)
        return set(state.used)
    finally:
        view.stop()
        ac.close()


def pod_meta(core: client.CoreV1Api, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's metadata as the API returns it (raw JSON, as the plugin reads it)."""
    got = core.read_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                   _preload_content=False)
    return json.loads(got.data)["metadata"]


