"""What a slot does to a pod, checked as JSON patches the API server would apply."""

from __future__ import annotations

import copy
import json

import jsonpatch
from hypothesis import given
from hypothesis import strategies as st
from placement_checks import env, pinned_node, terms

from gputopo import names
from webhook.placement.mutations import apply_slot, apply_unplaced, cuda_positions


def _pod(**spec):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "default"},
        "spec": {"containers": [
            {"name": "sidecar", "image": "busybox"},
            {"name": "train", "image": "t", "resources": {"limits": {"aliyun.com/gpu": "2"}}},
        ], **spec},
    }


def _slot(pod, **kw):
    args = {"node": "n1", "gpu_group": (6, 7), "gpu_visible": (4, 5, 6, 7),
            "record": {"node": "n1", "gpus": [6, 7]}}
    args.update(kw)
    return apply_slot(pod, **args)


def test_cuda_positions_are_indices_within_the_visible_list():
    assert cuda_positions((6, 7), (4, 5, 6, 7)) == "2,3"
    assert cuda_positions((0,), (0, 1, 2, 3)) == "0"


def test_slot_mutations_only_touch_gpu_containers_and_patch_cleanly():
    original = _pod()
    pod = copy.deepcopy(original)
    assert _slot(pod) == []
    patch = jsonpatch.make_patch(original, pod)
    assert patch.apply(original) == pod
    sidecar, train = pod["spec"]["containers"]
    assert "env" not in sidecar
    assert env(train, pod) == {names.NVIDIA_VISIBLE_DEVICES_ENV: "4,5,6,7",
                               names.CUDA_VISIBLE_DEVICES_ENV: "2,3"}
    ann = pod["metadata"]["annotations"]
    assert ann[names.GPU_GROUP_ANNOTATION] == "6,7"
    assert ann[names.GPU_VISIBLE_ANNOTATION] == "4,5,6,7"
    assert json.loads(ann[names.PLACEMENT_ANNOTATION]) == {"node": "n1", "gpus": [6, 7]}
    assert pinned_node(pod) == "n1" and len(terms(pod)) == 1
    assert pod["spec"]["schedulerName"] == names.SCHEDULER_NAME


def test_users_explicit_env_wins_with_a_warning():
    pod = _pod()
    pod["spec"]["containers"][1]["env"] = [
        {"name": names.CUDA_VISIBLE_DEVICES_ENV, "value": "0"}]
    warnings = _slot(pod)
    assert env(pod["spec"]["containers"][1])[names.CUDA_VISIBLE_DEVICES_ENV] == "0"
    assert any(names.CUDA_VISIBLE_DEVICES_ENV in w and "kept" in w for w in warnings)


def test_forged_gpu_annotations_are_replaced_or_removed_with_a_warning():
    pod = _pod()
    pod["metadata"]["annotations"] = {names.GPU_GROUP_ANNOTATION: "0,1"}
    warnings = _slot(pod)
    assert pod["metadata"]["annotations"][names.GPU_GROUP_ANNOTATION] == "6,7"
    assert any("replaced" in w for w in warnings)
    other = _pod()
    other["metadata"]["annotations"] = {names.GPU_GROUP_ANNOTATION: "0,1",
                                        names.GPU_VISIBLE_ANNOTATION: "0,1"}
    warnings = apply_unplaced(other, {"placed": False, "reason": "full"})
    assert names.GPU_GROUP_ANNOTATION not in other["metadata"]["annotations"]
    assert len(warnings) == 2


def test_a_users_other_scheduler_is_kept_with_a_warning():
    pod = _pod(schedulerName="volcano")
    warnings = _slot(pod)
    assert pod["spec"]["schedulerName"] == "volcano"
    assert any("volcano" in w for w in warnings)


_requirement = st.fixed_dictionaries({
    "key": st.sampled_from(["kubernetes.io/hostname", names.ZONE_LABEL, "gpu"]),
    "operator": st.sampled_from(["In", "NotIn", "Exists"]),
    "values": st.lists(st.sampled_from(["a", "b", "n1", "n2"]), max_size=2),
})
_term = st.fixed_dictionaries({}, optional={
    "matchExpressions": st.lists(_requirement, max_size=2),
    "matchFields": st.lists(st.fixed_dictionaries({
        "key": st.just("metadata.name"), "operator": st.just("In"),
        "values": st.lists(st.sampled_from(["n1", "n2"]), min_size=1, max_size=1)}),
        max_size=1),
})
_env = st.lists(st.fixed_dictionaries({
    "name": st.sampled_from([names.NVIDIA_VISIBLE_DEVICES_ENV, names.CUDA_VISIBLE_DEVICES_ENV,
                             "OTHER"]),
    "value": st.sampled_from(["0", "4,5,6,7", "2,3", "x"])}),
    max_size=3, unique_by=lambda e: e["name"])


@given(
    node_terms=st.none() | st.lists(_term, max_size=3),
    preferred=st.booleans(),
    user_env=_env,
    scheduler=st.sampled_from([None, "default-scheduler", names.SCHEDULER_NAME, "volcano"]),
)
def test_slot_is_idempotent_and_pins_every_non_empty_term(node_terms, preferred, user_env,
                                                          scheduler):
    original = _pod()
    if scheduler is not None:
        original["spec"]["schedulerName"] = scheduler
    original["spec"]["containers"][1]["env"] = user_env
    node_aff = {}
    if node_terms is not None:
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": node_terms}
    if preferred:
        node_aff["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "preference": {"matchExpressions": [
                {"key": "gpu", "operator": "Exists"}]}}]
    if node_aff:
        original["spec"]["affinity"] = {"nodeAffinity": node_aff}
    once = copy.deepcopy(original)
    _slot(once)
    assert jsonpatch.make_patch(original, once).apply(original) == once
    twice = copy.deepcopy(once)
    _slot(twice)
    assert jsonpatch.make_patch(once, twice).patch == [], "re-admission must change nothing"
    for i, term in enumerate(terms(once)):
        if node_terms and not (node_terms[i].get("matchExpressions")
                               or node_terms[i].get("matchFields")):
            assert term == node_terms[i]  # matches no node: stays so (the pin only narrows)
            continue
        assert {"key": "metadata.name", "operator": "In", "values": ["n1"]} in term["matchFields"]
    assert len(terms(once)) == max(1, len(node_terms or []))
