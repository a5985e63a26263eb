"""The policy store: valid → invalid (error names file and field path, last good set kept,
failure counted) → valid again; a mounted ConfigMap's ``..data`` symlink swap is seen."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from gputopo.errors import PolicyError
from tests.webhook.conftest import write_policy
from webhook.assembly import build_admitter
from webhook.policy.store import PolicyStore


def _failures() -> float:
    return REGISTRY.get_sample_value("gputopo_policy_reload_failures_total") or 0.0


def test_valid_invalid_valid(tmp_path):
    write_policy(tmp_path, "first")
    store = PolicyStore(tmp_path)
    assert store.reload() and store.ready
    assert [p.name for p in store.policies()] == ["first"]
    before = _failures()

    bad = tmp_path / "first.yaml"
    bad.write_text(bad.read_text().replace("hostNetwork: true", "hostNetwork: yes-please"))
    assert store.check() is True  # changed → reload attempted
    assert _failures() == before + 1
    assert store.last_error is not None
    line = store.last_error.line()
    assert str(bad) in line and "spec.mutations.hostNetwork" in line
    assert [p.name for p in store.policies()] == ["first"]  # last good kept
    assert store.policies()[0].mutations.host_network is True
    assert store.ready

    write_policy(tmp_path, "first", extra="    hostPID: true\n")
    assert store.check() is True
    assert store.last_error is None
    assert store.policies()[0].mutations.host_pid is True
    assert store.check() is False  # unchanged → no reload


def _swap(mount: Path, content: dict[str, str], stamp: str) -> None:
    """What the kubelet does: write a new timestamped dir, then atomically re-point ..data."""
    new = mount / f"..{stamp}"
    new.mkdir()
    for name, text in content.items():
        (new / name).write_text(text)
    tmp_link = mount / "..data_tmp"
    tmp_link.symlink_to(new.name)
    os.replace(tmp_link, mount / "..data")
    for name in content:
        link = mount / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def test_configmap_symlink_swap_is_picked_up_by_the_watcher(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write_policy(src, "cm")
    v1 = (src / "cm.yaml").read_text()
    mount = tmp_path / "mount"
    mount.mkdir()
    _swap(mount, {"cm.yaml": v1}, "2026_01_01_00_00_00.1")
    store = PolicyStore(mount)
    assert store.reload()
    assert store.policies()[0].mutations.host_pid is None
    store.start(0.05)
    try:
        _swap(mount, {"cm.yaml": v1 + "    hostPID: true\n"}, "2026_01_01_00_01_00.2")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and store.policies()[0].mutations.host_pid is None:
            time.sleep(0.02)
        assert store.policies()[0].mutations.host_pid is True
        # an invalid swap keeps the last good set
        _swap(mount, {"cm.yaml": v1.replace("kind: TopologyPolicy", "kind: Nope")},
              "2026_01_01_00_02_00.3")
        while time.monotonic() < deadline and store.last_error is None:
            time.sleep(0.02)
        assert store.last_error is not None and "kind" in store.last_error.line()
        assert store.policies()[0].mutations.host_pid is True
    finally:
        store.stop()


def test_hidden_entries_and_subfolders_are_not_policies(tmp_path):
    write_policy(tmp_path, "real")
    (tmp_path / ".hidden.yaml").write_text("not: a policy")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "x.yaml").write_text("not: a policy")
    store = PolicyStore(tmp_path)
    assert store.reload(), store.last_error


def test_build_admitter_refuses_a_bad_first_load(tmp_path):
    write_policy(tmp_path, "Bad_Name")
    with pytest.raises(PolicyError) as info:
        build_admitter(tmp_path, None, reload_interval_s=0)  # type: ignore[arg-type]
    assert "metadata.name" in info.value.line()


def test_shipped_policies_load():
    from gputopo import names
    from webhook.assembly import default_policies_dir
    from webhook.policy.loader import load_policies

    shipped = {p.name: p for p in load_policies(default_policies_dir())}
    assert set(shipped) == {"ack-gpu-topology", "tke-taco-harp"}
    ack, tke = shipped["ack-gpu-topology"], shipped["tke-taco-harp"]
    assert ack.mutations.rename_resources == {
        names.SOURCE_GPU_RESOURCE: names.TOPOLOGY_GPU_RESOURCE}
    assert ack.mutations.scheduler_name == names.SCHEDULER_NAME
    assert tke.match.job_labels == {names.TACO_HARP_LABEL: names.TACO_HARP_VALUE}
    assert ack.priority < tke.priority


def test_an_empty_policy_directory_is_an_error_not_a_silent_no_op(tmp_path):
    """A broken mount or a wrong path: at start-up an error naming the directory; later,
    emptied under a running server, the last good set stays in force."""
    with pytest.raises(PolicyError) as info:
        build_admitter(tmp_path, None, reload_interval_s=0)  # type: ignore[arg-type]
    assert str(tmp_path) in info.value.line() and "no policy document" in info.value.line()

    write_policy(tmp_path, "first")
    store = PolicyStore(tmp_path)
    assert store.reload() and store.ready
    before = _failures()
    (tmp_path / "first.yaml").unlink()
    store.check()
    assert _failures() == before + 1
    assert [p.name for p in store.policies()] == ["first"]
