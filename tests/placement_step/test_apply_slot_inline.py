""":func:`webhook.placement.mutations.apply_slot` and ``write_slot``, with their small
helpers written out (cold CPU: each distinct function costs on its own), do to a pod what
the helpers do, and say the same warnings in the same order.

Why: the written-out copies must not drift from the helpers the queue and the unplaced
paths still use (``drop_allocation``, ``set_env_from``, ``set_scheduler``...). Generated
pods carry what those helpers treat specially: a forged allocation, GPU annotations of
someone else, a user's own GPU env (literal, from another field, already ours), env that is
no list, another scheduler.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputopo import names
from webhook.placement import mutations as m

ENV_ITEM = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from([names.NVIDIA_VISIBLE_DEVICES_ENV,
                                                    names.CUDA_VISIBLE_DEVICES_ENV, "OTHER"]),
                           "value": st.sampled_from(["all", "0,1"])}),
    st.sampled_from([
        {"name": names.NVIDIA_VISIBLE_DEVICES_ENV,
         "valueFrom": m.annotation_ref(names.GPU_VISIBLE_ANNOTATION)},
        {"name": names.CUDA_VISIBLE_DEVICES_ENV,
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        "not a dict"]))
CONTAINER = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b"]),
     "resources": st.just({"limits": {names.SOURCE_GPU_RESOURCE: 2}})},
    optional={"env": st.one_of(st.lists(ENV_ITEM, max_size=3), st.just("no list"))})
ANNOTATIONS = st.dictionaries(
    st.sampled_from([names.ALLOCATED_GPUS_ANNOTATION, names.GPU_GROUP_ANNOTATION,
                     names.GPU_VISIBLE_ANNOTATION, names.CUDA_POSITIONS_ANNOTATION,
                     names.PLACEMENT_ANNOTATION, "other"]),
    st.sampled_from(["0,1", "4,5", "x"]), max_size=4)
POD = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({}, optional={"annotations": ANNOTATIONS}),
     "spec": st.fixed_dictionaries(
         {"containers": st.lists(CONTAINER, min_size=1, max_size=2)},
         optional={"schedulerName": st.sampled_from(
             ["", "default-scheduler", names.SCHEDULER_NAME, "volcano"]),
             "affinity": st.just({"nodeAffinity": {
                 "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                     {"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}})})})
SLOT = st.sampled_from([((0, 1), (0, 1, 2, 3)), ((6, 7), (4, 5, 6, 7)), ((3,), (3,))])


def _helpers_apply_slot(pod: dict[str, Any], *, node: str, gpu_group: tuple[int, ...],
                        gpu_visible: tuple[int, ...], record: dict[str, Any],
                        warn_scheduler: bool, gpu_env: str) -> list[str]:
    """apply_slot as the helpers compose it (the code before they were written out)."""
    warnings = m.pin_to_node(pod, node) + m.drop_allocation(pod)
    ann = m._annotations(pod)
    for key, value, guarded in (
        (names.GPU_GROUP_ANNOTATION, m.gpu_list(gpu_group), True),
        (names.GPU_VISIBLE_ANNOTATION, m.gpu_list(gpu_visible), True),
        (names.CUDA_POSITIONS_ANNOTATION, m.cuda_positions(gpu_group, gpu_visible), True),
        (names.PLACEMENT_ANNOTATION, m.record_json(record), False),
    ):
        w = m._put(ann, key, value, guarded)
        if w:
            warnings.append(w)
    warnings += m.apply_gpu_env(pod, m.GPU_RESOURCES, source=gpu_env,
                                containers=m.gpu_containers(pod))
    w = m.set_scheduler(pod)
    if w and warn_scheduler:
        warnings.append(w)
    return warnings


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=POD, slot=SLOT, warn=st.booleans(), gpu_env=st.sampled_from(["pod", "plugin"]),
       given_containers=st.booleans())
def test_written_out_apply_slot_is_the_helpers(pod: dict[str, Any],
                                               slot: tuple[tuple[int, ...], tuple[int, ...]],
                                               warn: bool, gpu_env: str,
                                               given_containers: bool) -> None:
    group, visible = slot
    record = {"placed": True, "node": "n1", "gpus": list(group), "b": 1.5}
    want_pod = copy.deepcopy(pod)
    want = _helpers_apply_slot(want_pod, node="n1", gpu_group=group, gpu_visible=visible,
                               record=record, warn_scheduler=warn, gpu_env=gpu_env)
    got = m.apply_slot(pod, node="n1", gpu_group=group, gpu_visible=visible, record=record,
                       warn_scheduler=warn, gpu_env=gpu_env,
                       containers=m.gpu_containers(pod) if given_containers else None)
    assert got == want
    assert pod == want_pod
    # the env it wrote is each pod's own: no dict shared with the next pod
    other = copy.deepcopy(want_pod)
    m.apply_slot(other, node="n1", gpu_group=group, gpu_visible=visible, record=record,
                 warn_scheduler=warn, gpu_env=gpu_env)
    for c in other["spec"]["containers"]:
        for item in c["env"] if isinstance(c.get("env"), list) else ():
            if isinstance(item, dict) and isinstance(item.get("valueFrom"), dict):
                item["valueFrom"].setdefault("fieldRef", {})["apiVersion"] = "changed"
    assert pod == want_pod
