"""`generate manifests --gpu-resource` on every platform: the scheduler profile packs it and
the device plugin serves it, or the generator refuses (a shipped policy renames the GPU to
something else) or warns loudly (nothing renames into it).

Issue 24: on tke/generic a `--gpu-resource` equal to ack's default was taken as "unset"
for the profile, and the device plugin always served nvidia.com/gpu."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputopo import yamlio

ALIYUN = "aliyun.com/gpu"
NVIDIA = "nvidia.com/gpu"


def _objects(out: Path) -> dict[str, list[dict]]:
    return {p.name: list(yamlio.load_documents(p)) for p in out.glob("*.yaml")}


def _packed(files: dict[str, list[dict]]) -> set[str]:
    """The resources the scheduler profile's MostAllocated strategy packs, besides cpu/memory."""
    (cm,) = [o for o in files["scheduler.yaml"] if o["kind"] == "ConfigMap"]
    (config,) = yamlio.load_documents_text(next(iter(cm["data"].values())), source="config")
    found = set()
    for profile in config["profiles"]:
        for plugin in profile.get("pluginConfig", []):
            strategy = plugin["args"].get("scoringStrategy", {})
            found |= {r["name"] for r in strategy.get("resources", [])} - {"cpu", "memory"}
    return found


def _served(files: dict[str, list[dict]]) -> str | None:
    if "device-plugin.yaml" not in files:
        return None
    (ds,) = [o for o in files["device-plugin.yaml"] if o["kind"] == "DaemonSet"]
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--resource") + 1]


def _renaming_policies(tmp_path: Path, repo: Path, to: str) -> Path:
    """The generic platform's policy with its rename switched on, to ``to``."""
    src = repo / "policies/platforms/generic/generic-gpu-topology.yaml"
    text = src.read_text()
    keep = "renameResources: {}"
    assert keep in text
    policies = tmp_path / "renaming"
    policies.mkdir()
    (policies / src.name).write_text(text.replace(keep, f"renameResources: {{{NVIDIA}: {to}}}"))
    return policies


@pytest.mark.parametrize("platform", ["ack", "tke", "generic"])
def test_the_platform_resource_by_default(tmp_path, run_cli, platform):
    code, _, err = run_cli("generate", "manifests", "--platform", platform,
                           "-o", str(tmp_path / "out"))
    assert code == 0 and "WARNING" not in err
    files = _objects(tmp_path / "out")
    expected = ALIYUN if platform == "ack" else NVIDIA
    assert _packed(files) == {expected}
    assert _served(files) == (None if platform == "ack" else expected)


@pytest.mark.parametrize("platform", ["tke", "generic"])
def test_a_renaming_policy_and_its_resource_are_honoured_off_ack(tmp_path, repo, run_cli,
                                                                 platform):
    # The case: aliyun.com/gpu (ack's default) asked for on tke/generic.
    policies = _renaming_policies(tmp_path, repo, ALIYUN)
    code, _, err = run_cli("generate", "manifests", "--platform", platform,
                           "--gpu-resource", ALIYUN, "--policies", str(policies),
                           "-o", str(tmp_path / "out"))
    assert (code, err.count("WARNING")) == (0, 0), err
    files = _objects(tmp_path / "out")
    assert _packed(files) == {ALIYUN}
    assert _served(files) == ALIYUN


def test_another_resource_on_ack_with_a_policy_that_agrees(tmp_path, repo, run_cli):
    policies = _renaming_policies(tmp_path, repo, "example.com/gpu")
    code, _, _ = run_cli("generate", "manifests", "--gpu-resource", "example.com/gpu",
                         "--policies", str(policies), "-o", str(tmp_path / "out"))
    assert code == 0
    assert _packed(_objects(tmp_path / "out")) == {"example.com/gpu"}


@pytest.mark.parametrize(
    ("platform", "resource", "renamed_to"),
    [("ack", NVIDIA, ALIYUN),          # ack's policy renames to aliyun.com/gpu
     ("ack", "example.com/gpu", ALIYUN),
     ("tke", NVIDIA, ALIYUN)],         # the repository's policies/ (ack's) shipped on tke
)
def test_a_policy_that_renames_elsewhere_is_refused(tmp_path, repo, run_cli, platform,
                                                    resource, renamed_to):
    argv = ["generate", "manifests", "--platform", platform, "--gpu-resource", resource,
            "-o", str(tmp_path / "out")]
    if platform == "tke":
        argv += ["--policies", str(repo / "policies")]
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("gputopo: error: --gpu-resource: ")
    assert f"renames {NVIDIA} to {renamed_to}" in line and resource in line
    assert not (tmp_path / "out").exists(), "nothing written"


@pytest.mark.parametrize("platform", ["tke", "generic"])
def test_a_resource_nothing_renames_into_is_a_loud_warning(tmp_path, run_cli, platform):
    code, _, err = run_cli("generate", "manifests", "--platform", platform,
                           "--gpu-resource", ALIYUN, "-o", str(tmp_path / "out"))
    assert code == 0
    assert (f"gputopo: WARNING: --gpu-resource {ALIYUN}: no shipped policy renames "
            f"{NVIDIA} to {ALIYUN}") in err
    files = _objects(tmp_path / "out")
    assert _packed(files) == {ALIYUN} and _served(files) == ALIYUN
