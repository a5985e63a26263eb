"""``gputopo generate scheduler-config``: structure, options, and kube-scheduler's own rules.

kube-scheduler cannot run here (no Go, no containers, no Debian package), so its loading
rules are encoded in generator/scheduler_schema.py, each with the upstream file it comes
from; these tests show (1) the generated file obeys them and (2) each rule really rejects
the mistake it is about, so "valid" means something.
"""

from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.scheduler_schema import validate_config
from gputopo import yamlio
from gputopo.cli import main
from gputopo.names import SCHEDULER_NAME, TOPOLOGY_GPU_RESOURCE


def generate(run_cli, tmp_path: Path, *flags: str) -> dict[str, Any]:
    out = tmp_path / "sched.yaml"
    code, _, err = run_cli("generate", "scheduler-config", *flags, "-o", str(out))
    assert code == 0, err
    (doc,) = yamlio.load_documents(out)
    return doc


def enabled(profile: dict[str, Any], point: str) -> list[str]:
    return [p["name"] for p in profile["plugins"].get(point, {}).get("enabled", [])]


def disabled(profile: dict[str, Any], point: str) -> list[str]:
    return [p["name"] for p in profile["plugins"].get(point, {}).get("disabled", [])]


def args_of(profile: dict[str, Any], name: str) -> dict[str, Any]:
    (cfg,) = [c for c in profile["pluginConfig"] if c["name"] == name]
    return cfg["args"]


def test_default_profile_has_coscheduling_packing_and_no_spreading(run_cli, tmp_path):
    doc = generate(run_cli, tmp_path)
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert doc["kind"] == "KubeSchedulerConfiguration"
    (profile,) = doc["profiles"]
    assert profile["schedulerName"] == SCHEDULER_NAME
    points = {p for p in profile["plugins"] if "Coscheduling" in enabled(profile, p)}
    assert points == {"queueSort", "preFilter", "postFilter", "permit", "reserve"}
    assert disabled(profile, "queueSort") == ["*"]
    assert args_of(profile, "Coscheduling")["permitWaitingTimeSeconds"] > 0
    strategy = args_of(profile, "NodeResourcesFit")["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    assert set(weights) == {TOPOLOGY_GPU_RESOURCE, "cpu", "memory"}
    assert weights[TOPOLOGY_GPU_RESOURCE] > weights["cpu"]
    assert {"PodTopologySpread", "NodeResourcesBalancedAllocation"} <= set(
        disabled(profile, "score"))
    assert validate_config(doc) == []


def test_options_reach_the_file(run_cli, tmp_path):
    doc = generate(run_cli, tmp_path, "--gpu-resource", "nvidia.com/gpu", "--gpu-weight", "40",
                   "--cpu-weight", "3", "--memory-weight", "2", "--fit-weight", "7",
                   "--permit-wait-seconds", "300", "--pod-group-backoff-seconds", "20",
                   "--spread-weight", "2")
    (profile,) = doc["profiles"]
    cos = args_of(profile, "Coscheduling")
    assert cos == {"permitWaitingTimeSeconds": 300, "podGroupBackoffSeconds": 20}
    resources = args_of(profile, "NodeResourcesFit")["scoringStrategy"]["resources"]
    assert {r["name"]: r["weight"] for r in resources} == {
        "nvidia.com/gpu": 40, "cpu": 3, "memory": 2}
    score = {p["name"]: p.get("weight") for p in profile["plugins"]["score"]["enabled"]}
    assert score == {"NodeResourcesFit": 7, "PodTopologySpread": 2,
                     "NodeResourcesBalancedAllocation": 2}
    assert disabled(profile, "score") == []
    assert validate_config(doc) == []


def test_v1beta3_on_request(run_cli, tmp_path):
    doc = generate(run_cli, tmp_path, "--api-version", "v1beta3")
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"
    assert validate_config(doc) == []


def test_stdout_when_no_output_file(run_cli):
    code, out, _ = run_cli("generate", "scheduler-config")
    assert code == 0
    (doc,) = yamlio.load_documents_text(out)
    assert doc["profiles"][0]["schedulerName"] == SCHEDULER_NAME


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--gpu-weight", "0"], "--gpu-weight"),
        (["--gpu-weight", "101"], "--gpu-weight"),
        (["--cpu-weight", "-1"], "--cpu-weight"),
        (["--memory-weight", "500"], "--memory-weight"),
        (["--fit-weight", "0"], "--fit-weight"),
        (["--spread-weight", "101"], "--spread-weight"),
        (["--permit-wait-seconds", "0"], "--permit-wait-seconds"),
        (["--pod-group-backoff-seconds", "-5"], "--pod-group-backoff-seconds"),
        (["--gpu-resource", "gpu"], "--gpu-resource"),
        (["--gpu-resource", "kubernetes.io/gpu"], "--gpu-resource"),
        (["--api-version", "v1beta2"], "--api-version"),
        (["--align-queue-sort"], "--align-queue-sort"),
    ],
)
def test_bad_option_exits_2_with_one_line(run_cli, flags, named):
    code, out, err = run_cli("generate", "scheduler-config", *flags)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"gputopo: error: {named}: ")


# --- the upstream rules, each shown to bite -----------------------------------------------

def _base() -> dict[str, Any]:
    from generator.scheduler_config import ProfileOptions, build_config

    return build_config(ProfileOptions())


def _second_profile(doc: dict[str, Any], **extra: Any) -> None:
    doc["profiles"].append({"schedulerName": "default-scheduler", **extra})


def _set(path: str, value: Any):
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return mutate


MUTATIONS = [
    # validation.go (ValidateKubeSchedulerConfiguration)
    ("unknown top-level field", _set("percentageOfNodes", 50), "unknown field"),
    ("parallelism 0", _set("parallelism", 0), "greater than zero"),
    ("percentage 101", _set("percentageOfNodesToScore", 101), "[0-100]"),
    ("max backoff < initial", lambda d: d.update(podInitialBackoffSeconds=5,
                                                  podMaxBackoffSeconds=2), "podMaxBackoff"),
    ("leader election on endpoints", _set("leaderElection.resourceLock", "endpointsleases"),
     '"leases"'),
    ("empty scheduler name", _set("profiles.0.schedulerName", ""), "schedulerName"),
    ("duplicate scheduler name",
     lambda d: d["profiles"].append(copy.deepcopy(d["profiles"][0])), "duplicate"),
    ("queueSort differs between profiles", lambda d: _second_profile(d),
     "must be the same for all profiles"),
    ("queueSort args differ between profiles",
     lambda d: _second_profile(d, plugins={"queueSort": copy.deepcopy(
         d["profiles"][0]["plugins"]["queueSort"])},
         pluginConfig=[{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 1}}]),
     "queueSort must be the same"),
    ("two queue sort plugins",
     lambda d: d["profiles"][0]["plugins"]["queueSort"]["enabled"].append(
         {"name": "PrioritySort"}), "only one queue sort"),
    ("duplicate pluginConfig",
     lambda d: d["profiles"][0]["pluginConfig"].append(
         copy.deepcopy(d["profiles"][0]["pluginConfig"][0])), "Duplicate"),
    ("plugin removed in v1",
     lambda d: d["profiles"][0]["plugins"]["preFilter"]["enabled"].append(
         {"name": "EBSLimits"}), "removed"),
    # framework runtime: unknown plugin names and wrong extension points fail at start-up
    ("unknown plugin", _set("profiles.0.plugins.permit.enabled.0.name", "Cosheduling"),
     "not a plugin"),
    ("plugin at an extension point it does not extend",
     lambda d: d["profiles"][0]["plugins"].update(filter={"enabled": [{"name": "Coscheduling"}]}),
     "does not extend"),
    ("unknown extension point",
     lambda d: d["profiles"][0]["plugins"].update(sort={"enabled": []}), "extension point"),
    ("enable '*'", _set("profiles.0.plugins.permit.enabled.0.name", "*"), "only disable"),
    ("score weight out of range", _set("profiles.0.plugins.score.enabled.0.weight", 0),
     "valid range"),
    ("weight outside score", lambda d: d["profiles"][0]["plugins"]["permit"]["enabled"][0]
     .update(weight=3), "only score plugins"),
    # strict decoding of plugin args
    ("unknown Coscheduling arg", _set("profiles.0.pluginConfig.0.args.permitWaitingTime", 10),
     "unknown field of CoschedulingArgs"),
    ("Coscheduling arg of wrong type",
     _set("profiles.0.pluginConfig.0.args.permitWaitingTimeSeconds", "60"), "type integer"),
    # validation_pluginargs.go (scheduler-plugins and kube-scheduler)
    ("negative permit wait", _set("profiles.0.pluginConfig.0.args.permitWaitingTimeSeconds", -1),
     "greater than 0"),
    ("scoring type unknown",
     _set("profiles.0.pluginConfig.1.args.scoringStrategy.type", "MostRequested"),
     "Unsupported value"),
    ("resource weight 0",
     _set("profiles.0.pluginConfig.1.args.scoringStrategy.resources.0.weight", 0),
     "not in valid range (0, 100]"),
    ("resource weight 101",
     _set("profiles.0.pluginConfig.1.args.scoringStrategy.resources.1.weight", 101),
     "not in valid range (0, 100]"),
    ("scoring strategy missing",
     lambda d: d["profiles"][0]["pluginConfig"][1]["args"].pop("scoringStrategy"),
     "ScoringStrategy field is required"),
    ("ignored resource group with a slash",
     _set("profiles.0.pluginConfig.1.args.ignoredResourceGroups", ["example.com/x"]),
     "can't contain '/'"),
    ("balanced allocation weight 2",
     lambda d: d["profiles"][0]["pluginConfig"].append(
         {"name": "NodeResourcesBalancedAllocation",
          "args": {"resources": [{"name": "cpu", "weight": 2}]}}), "must be 1"),
    ("spread defaulting System with constraints",
     lambda d: d["profiles"][0]["pluginConfig"].append(
         {"name": "PodTopologySpread", "args": {"defaultingType": "System", "defaultConstraints":
          [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}}),
     "defaultConstraints"),
    ("wrong apiVersion", _set("apiVersion", "kubescheduler.config.k8s.io/v1beta1"), "apiVersion"),
]


@pytest.mark.parametrize(("mutate", "fragment"), [(m, f) for _, m, f in MUTATIONS],
                         ids=[name for name, _, _ in MUTATIONS])
def test_upstream_rule_rejects(mutate, fragment):
    doc = _base()
    assert validate_config(doc) == []
    mutate(doc)
    errors = validate_config(doc)
    assert errors, "the mutation should break an upstream rule"
    assert any(fragment in e for e in errors), errors


def test_upstream_coscheduling_example_shape_is_accepted():
    # The shape of scheduler-plugins' manifests/coscheduling/scheduler-config.yaml (v1),
    # written out here: queue sort replaced, Coscheduling at its four other points.
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{
            "schedulerName": "default-scheduler",
            "plugins": {
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
                **{p: {"enabled": [{"name": "Coscheduling"}]}
                   for p in ("preFilter", "postFilter", "permit", "reserve")},
            },
            "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}}],
        }],
    }
    assert validate_config(doc) == []


# --- every accepted option combination yields a file kube-scheduler accepts ---------------

_weight = st.integers(min_value=-5, max_value=120)


@given(gpu=_weight, cpu=_weight, fit=_weight, spread=_weight,
       wait=st.integers(min_value=-3, max_value=7200))
def test_options_either_validate_or_exit_2(gpu, cpu, fit, spread, wait):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["generate", "scheduler-config", "--gpu-weight", str(gpu),
                     "--cpu-weight", str(cpu), "--fit-weight", str(fit),
                     "--spread-weight", str(spread), "--permit-wait-seconds", str(wait)])
    valid = (1 <= gpu <= 100 and 1 <= cpu <= 100 and 1 <= fit <= 100 and 0 <= spread <= 100
             and wait > 0)
    if not valid:
        assert code == 2 and out.getvalue() == ""
        assert len(err.getvalue().strip().splitlines()) == 1
        return
    assert code == 0, err.getvalue()
    (doc,) = yamlio.load_documents_text(out.getvalue())
    assert validate_config(doc) == []
    (profile,) = doc["profiles"]
    assert args_of(profile, "Coscheduling")["permitWaitingTimeSeconds"] == wait
    weights = {r["name"]: r["weight"]
               for r in args_of(profile, "NodeResourcesFit")["scoringStrategy"]["resources"]}
    assert (weights[TOPOLOGY_GPU_RESOURCE], weights["cpu"]) == (gpu, cpu)
