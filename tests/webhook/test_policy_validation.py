"""Policy validation returns every error at once, each with the file and field path."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputopo.errors import PolicyError
from webhook.policy.loader import load_policies
from webhook.policy.validate import validate_document

GOOD = {
    "apiVersion": "gputopo.io/v1alpha1", "kind": "TopologyPolicy",
    "metadata": {"name": "p"},
    "spec": {"mutations": {"resources": {"limits": {
        "hugepages-1Gi": {"base": "10Gi", "perGPU": "5Gi"}}}}},
}


def test_defaults():
    policy, errors = validate_document(GOOD, source="f.yaml")
    assert errors == [] and policy is not None
    assert policy.mode == "enforce" and policy.priority == 100
    assert policy.mutations.rename_resources == {"nvidia.com/gpu": "aliyun.com/gpu"}
    assert policy.mutations.scheduler_name == "gpu-topology-scheduler"
    assert policy.placement.enabled and policy.placement.when_full == "wait"
    assert policy.placement.pod_group == "create" and policy.placement.max_wait_seconds == 3600
    assert policy.match.roles == ()
    assert len(policy.match.owners) == 6  # 4 Kubeflow kinds, TrainJob, JobSet
    assert policy.mutations.limits["hugepages-1Gi"].value(8) == Fraction(50 * 2**30)


def test_all_errors_at_once_with_paths():
    doc = {
        "apiVersion": "gputopo.io/v1", "kind": "TopologyPolicy",
        "metadata": {"name": "Not_A_Name"},
        "spec": {
            "mode": "loud",
            "match": {"roles": ["boss"], "owners": [{"apiVersion": "v1", "kind": "Pod"}]},
            "mutations": {"hostNetwrok": True, "dnsPolicy": "Sometimes",
                          "volumeMounts": [{"name": "ghost", "mountPath": "/x"}],
                          "resources": {"limits": {"hugepages-1Gi": {"base": "-1Gi"}}}},
            "placement": {"onUnplaceable": "panic"},
        },
    }
    policy, errors = validate_document(doc, source="bad.yaml")
    assert policy is None
    paths = {e.obj for e in errors}
    assert {"apiVersion", "metadata.name", "spec.mode", "spec.match.roles[0]",
            "spec.match.owners[0]", "spec.mutations.hostNetwrok", "spec.mutations.dnsPolicy",
            "spec.mutations.volumeMounts[0].name",
            "spec.mutations.resources.limits.hugepages-1Gi.base",
            "spec.placement.onUnplaceable"} <= paths
    assert all(e.file == "bad.yaml" and e.reason for e in errors)


def test_loader_reports_every_file(tmp_path):
    (tmp_path / "a.yaml").write_text("apiVersion: x\nkind: TopologyPolicy\nmetadata: {name: a}\n")
    (tmp_path / "b.yaml").write_text("spec: [unclosed\n")
    (tmp_path / "c.yaml").write_text(
        "apiVersion: gputopo.io/v1alpha1\nkind: TopologyPolicy\nmetadata: {name: c}\n---\n"
        "apiVersion: gputopo.io/v1alpha1\nkind: TopologyPolicy\nmetadata: {name: c}\n")
    with pytest.raises(PolicyError) as info:
        load_policies(tmp_path)
    line = info.value.line()
    assert "a.yaml: apiVersion" in line
    assert "b.yaml" in line and "not valid YAML" in line
    assert "duplicate policy name" in line


def test_order_is_priority_then_name(tmp_path):
    for name, prio in (("zeta", 5), ("alpha", 50), ("beta", 5)):
        (tmp_path / f"{name}.yaml").write_text(
            f"apiVersion: gputopo.io/v1alpha1\nkind: TopologyPolicy\nmetadata: {{name: {name}}}\n"
            f"spec: {{priority: {prio}}}\n")
    assert [p.name for p in load_policies(tmp_path)] == ["beta", "zeta", "alpha"]


def test_security_context_and_volumes_are_checked():
    doc = {**GOOD, "spec": {"mutations": {
        "securityContext": {"privileged": "yes", "runAsUser": True, "priviledged": True},
        "volumes": [{"name": "a"}, {"name": "b", "hostPath": {"path": "relative"}}],
    }}}
    _, errors = validate_document(doc, source="s.yaml")
    paths = {e.obj for e in errors}
    assert {"spec.mutations.securityContext.privileged",
            "spec.mutations.securityContext.runAsUser",
            "spec.mutations.securityContext.priviledged",
            "spec.mutations.volumes[0]",
            "spec.mutations.volumes[1].hostPath.path"} <= paths


junk = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
              st.sampled_from(["enforce", "audit", "10Gi", "worker", "kubeflow.org/v1"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=12), inner, max_size=3)),
    max_leaves=10)
fields = st.sampled_from(["match", "mutations", "placement", "mode", "priority"])
sub = st.sampled_from(["namespaceLabels", "owners", "roles", "renameResources", "resources",
                       "volumes", "volumeMounts", "securityContext", "schedulerName",
                       "onUnplaceable", "limits", "hugepages-1Gi", "base", "perGPU"])


@given(spec=st.dictionaries(fields, st.one_of(junk, st.dictionaries(sub, junk, max_size=4)),
                            max_size=5))
def test_random_policy_documents_never_crash_validation(spec):
    doc = {**GOOD, "spec": spec}
    policy, errors = validate_document(doc, source="r.yaml")
    assert (policy is None) == bool(errors)
    assert all(e.file == "r.yaml" and e.obj for e in errors)


def test_on_unplaceable_still_works_with_a_deprecation_warning(caplog):
    doc = {**GOOD, "spec": {**GOOD["spec"], "placement": {"onUnplaceable": "deny"}}}
    with caplog.at_level("WARNING"):
        policy, errors = validate_document(doc, source="old.yaml")
    assert errors == [] and policy is not None and policy.placement.when_full == "deny"
    assert any("onUnplaceable is deprecated" in r.getMessage() for r in caplog.records)
    both = {**GOOD, "spec": {**GOOD["spec"], "placement": {"onUnplaceable": "deny",
                                                           "whenFull": "wait"}}}
    _, errors = validate_document(both, source="both.yaml")
    assert [e.obj for e in errors] == ["spec.placement.onUnplaceable"]


def test_placement_wait_settings_are_checked():
    doc = {**GOOD, "spec": {**GOOD["spec"], "placement": {
        "whenFull": "later", "maxWaitSeconds": 0, "podGroup": "maybe"}}}
    _, errors = validate_document(doc, source="p.yaml")
    assert {e.obj for e in errors} == {"spec.placement.whenFull",
                                       "spec.placement.maxWaitSeconds",
                                       "spec.placement.podGroup"}


def test_the_waiting_rule_keys_default_and_are_checked():
    policy, errors = validate_document(GOOD, source="p.yaml")
    assert errors == [] and policy is not None
    rule = policy.placement.waiting
    assert (rule.min_share, rule.after_max_wait, rule.floor_share) == (0.9, "takeBest", 0.5)
    assert rule.floor == 0.5
    set_ = {**GOOD, "spec": {**GOOD["spec"], "placement": {
        "minShare": 0.8, "afterMaxWait": "deny", "floorShare": 0}}}
    policy, errors = validate_document(set_, source="p.yaml")
    assert errors == [] and policy is not None
    rule = policy.placement.waiting
    assert (rule.min_share, rule.after_max_wait, rule.floor_share, rule.floor) == (
        0.8, "deny", 0.0, 0.8)  # deny never starts a gang below minShare
    bad = {**GOOD, "spec": {**GOOD["spec"], "placement": {
        "minShare": 1.5, "afterMaxWait": "later", "floorShare": True}}}
    _, errors = validate_document(bad, source="p.yaml")
    assert {e.obj for e in errors} == {"spec.placement.minShare",
                                       "spec.placement.afterMaxWait",
                                       "spec.placement.floorShare"}
    above = {**GOOD, "spec": {**GOOD["spec"], "placement": {"minShare": 0.6,
                                                            "floorShare": 0.7}}}
    _, errors = validate_document(above, source="p.yaml")
    assert [(e.obj, e.reason) for e in errors] == [
        ("spec.placement.floorShare", "must not exceed minShare (0.6); got 0.7")]


def test_gpu_generation_keys_are_read_and_every_bad_one_is_named():
    """``computeShare`` (0-1), ``mixGpuModels`` (bool), ``minGpuMemory`` (a quantity, or
    MiB as nvidia.com/gpu.memory writes it): read into the settings; bad values are all
    reported at once with their field paths."""
    policy, errors = validate_document(GOOD, source="p.yaml")
    assert errors == [] and policy is not None
    p = policy.placement
    assert (p.compute_share, p.mix_gpu_models, p.min_gpu_memory_mib) == (None, False, None)
    set_ = {**GOOD, "spec": {**GOOD["spec"], "placement": {
        "computeShare": 0.7, "mixGpuModels": True, "minGpuMemory": "40Gi"}}}
    policy, errors = validate_document(set_, source="p.yaml")
    assert errors == [] and policy is not None
    p = policy.placement
    assert (p.compute_share, p.mix_gpu_models, p.min_gpu_memory_mib) == (0.7, True, 40960)
    mib = {**GOOD, "spec": {**GOOD["spec"], "placement": {"minGpuMemory": 16160}}}
    policy, errors = validate_document(mib, source="p.yaml")
    assert errors == [] and policy is not None and policy.placement.min_gpu_memory_mib == 16160
    bad = {**GOOD, "spec": {**GOOD["spec"], "placement": {
        "computeShare": 1.2, "mixGpuModels": "yes", "minGpuMemory": "lots"}}}
    _, errors = validate_document(bad, source="p.yaml")
    assert {e.obj for e in errors} == {"spec.placement.computeShare",
                                       "spec.placement.mixGpuModels",
                                       "spec.placement.minGpuMemory"}
