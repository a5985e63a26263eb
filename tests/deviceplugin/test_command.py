"""``gputopo device-plugin`` as the DaemonSet runs it: a separate process with replayed NVML
answers, a kubeconfig for the API double, the fake kubelet's directory; it registers,
allocates a placed pod's GPUs, and ends cleanly on SIGTERM (its socket removed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from plugin_kit import RESOURCE, bind, gpu_pod

from gputopo import names
from gputopo.deviceplugin.v1beta1 import api_pb2 as api
from gputopo.deviceplugin.v1beta1 import api_pb2_grpc as rpc
from tests.k8s_double.client import write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "topology" / "data" / "dgx1-v100-nvml.json"


_kubeconfig = write_kubeconfig


@pytest.fixture
def plugin_process(kube, socket_dir, tmp_path):
    env = {**os.environ, "NODE_NAME": "n1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputopo", "device-plugin", "--plugin-dir", str(socket_dir),
         "--nvml-recorded", str(RECORDED), "--kubeconfig",
         str(_kubeconfig(tmp_path / "kubeconfig", kube.url)), "-v"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_the_command_serves_the_kubelet_and_stops_on_sigterm(
        kube, core, kubelet, socket_dir, plugin_process) -> None:
    pod = gpu_pod("p", 2)
    pod["metadata"]["annotations"] = {
        names.GPU_GROUP_ANNOTATION: "6,7", names.GPU_VISIBLE_ANNOTATION: "6,7",
        names.PLACEMENT_ANNOTATION: json.dumps({"placed": True, "node": "n1",
                                                "gpus": [6, 7]})}
    kube.apply(bind(pod, "n1", at="2026-01-01T00:00:00Z"))
    assert kubelet.wait_registered(1, timeout=30), plugin_process.stderr
    assert kubelet.registrations[0].resource_name == RESOURCE
    assert sorted(kubelet.devices, key=int) == [str(i) for i in range(8)]
    a = kubelet.admit("p", 2)
    assert a.preferred == a.given == ["6", "7"]
    assert a.env == {"NVIDIA_VISIBLE_DEVICES": "6,7", "CUDA_VISIBLE_DEVICES": "0,1"}
    got = json.loads(core.read_namespaced_pod("p", "default", _preload_content=False).data)
    assert got["metadata"]["annotations"][names.ALLOCATED_GPUS_ANNOTATION] == "6,7"

    # an ID the plugin never advertised is refused, not allocated
    with grpc.insecure_channel(f"unix://{socket_dir / 'gputopo-gpu.sock'}") as ch, \
            pytest.raises(grpc.RpcError) as err:
        rpc.DevicePluginStub(ch).Allocate(api.AllocateRequest(container_requests=[
            api.ContainerAllocateRequest(devices_ids=["9"])]), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    plugin_process.send_signal(signal.SIGTERM)
    assert plugin_process.wait(15) == 0
    assert not (socket_dir / "gputopo-gpu.sock").exists()


def test_the_plugin_waits_for_a_kubelet_that_starts_later(kube, socket_dir,
                                                          plugin_process) -> None:
    import time

    from fake_kubelet import FakeKubelet

    deadline = time.monotonic() + 30
    while not (socket_dir / "gputopo-gpu.sock").exists():  # serving, with no kubelet yet
        assert plugin_process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    kubelet = FakeKubelet(socket_dir).start()
    try:
        assert kubelet.wait_registered(1, timeout=30), plugin_process.stderr
    finally:
        kubelet.stop()


def _env_without_cluster(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No in-cluster account (its env), no ~/.kube/config: only what the test gives."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KUBERNETES_") and k != "KUBECONFIG"}
    env.update({"NODE_NAME": "n1", "HOME": str(tmp_path / "home"),
                "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    env.update(extra)
    return env


def test_without_kubeconfig_it_finds_the_api_server_through_KUBECONFIG(
        kube, kubelet, socket_dir, tmp_path) -> None:
    """As client-go does: the in-cluster account, else $KUBECONFIG (it used to insist on
    the in-cluster account unless --kubeconfig was given)."""
    env = _env_without_cluster(
        tmp_path, KUBECONFIG=str(_kubeconfig(tmp_path / "kubeconfig", kube.url)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputopo", "device-plugin", "--plugin-dir", str(socket_dir),
         "--nvml-recorded", str(RECORDED)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert kubelet.wait_registered(1, timeout=30), proc.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_no_way_to_the_api_server_is_one_line_and_exit_2(socket_dir, tmp_path) -> None:
    env = _env_without_cluster(tmp_path, KUBECONFIG=str(tmp_path / "missing"))
    done = subprocess.run(
        [sys.executable, "-m", "gputopo", "device-plugin", "--plugin-dir", str(socket_dir),
         "--nvml-recorded", str(RECORDED)],
        env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the API server" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
