"""What a replica's slot does to its pod: node pin, GPU index annotations, env, record.

Why a module of its own: the placement step decides *where* a replica goes; this module only
writes that decision into a pod, the same way every time, so that re-admitting a placed pod
changes nothing (an empty patch) and a user's own settings are merged into, never clobbered.
Every function mutates the pod dict in place and returns the warnings it has for the user.

Rules (docs/placement.md):
- node pin: a REQUIRED node affinity requirement ``matchFields metadata.name In [node]``
  (what the DaemonSet controller writes) is added to EVERY non-empty nodeSelectorTerm, since
  terms are ORed: a pin in only one term would let the scheduler pick another term's nodes.
  An empty term (``{}``) matches no node (``k8s.io/api/core/v1`` NodeSelectorTerm: "a null
  or empty node selector term matches no objects"; component-helpers ``nodeaffinity``
  skips it) and stays empty: holding the pin alone, it would match the pinned node whatever
  the pod's other terms say, and on a gated pod the API server refuses it ("only additions
  are allowed", ``validateNodeSelectorTermHasOnlyAdditions``). No terms → one new term.
- ``topology.kubernetes.io/gpu-group`` / ``gpu-visible``: always ours. They decide which
  GPUs the device plumbing hands out, so a value already on the pod (copied or forged) is
  replaced, with a warning.
- ``NVIDIA_VISIBLE_DEVICES`` / ``CUDA_VISIBLE_DEVICES`` in GPU containers come from the
  downward API (``valueFrom.fieldRef`` on the pod's ``gpu-visible`` and
  ``gputopo.io/cuda-visible-devices`` annotations), never literal values: a container's env
  is immutable once the pod exists, but annotations may still be written while a waiting
  pod is gated, and the kubelet resolves the references when the container starts. So a
  pod placed at admission and a pod placed later by the queue (:mod:`webhook.queue`) go
  through the same code (:func:`apply_gpu_env` at admission, the annotations whenever the
  slot is known). A user's explicit different value wins, with a warning.
- ``schedulerName``: set when absent or ``default-scheduler``; another scheduler the user
  chose is kept, with a warning.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gputopo import names
from webhook.jobs import container_gpus

#: The ``matchFields`` key the DaemonSet controller pins pods with (a field, not a label:
#: it cannot be faked by relabelling a node).
NODE_NAME_FIELD = "metadata.name"
DEFAULT_SCHEDULER = "default-scheduler"
#: Resource names that mean "this container wants GPUs", whatever the rename policy did.
GPU_RESOURCES = frozenset({names.SOURCE_GPU_RESOURCE, names.TOPOLOGY_GPU_RESOURCE})


# --- reading the pod -------------------------------------------------------------------
def gpu_containers(
    pod: dict[str, Any], gpu_resources: Iterable[str] = GPU_RESOURCES
) -> list[dict[str, Any]]:
    """The containers (and init containers) of a pod that request GPUs, in spec order.

    "Requests GPUs" is decided exactly as the pipeline decides it for the gang size
    (:func:`webhook.jobs.container_gpus`), so the two never disagree about a container.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return []
    names_ = tuple(gpu_resources)
    out: list[dict[str, Any]] = []
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        if isinstance(items, list):
            out.extend(c for c in items
                       if isinstance(c, dict) and container_gpus(c, names_) > 0)
    return out


# --- writing the pod -------------------------------------------------------------------
def gpu_list(gpus: Sequence[int]) -> str:
    """``(4, 5)`` → ``"4,5"``: the annotation form Arena and the device plumbing read."""
    return ",".join(map(str, gpus))


def cuda_positions(gpu_group: Sequence[int], gpu_visible: Sequence[int]) -> str:
    """Positions of this pod's GPUs within the job's visible GPUs on the node.

    With ``NVIDIA_VISIBLE_DEVICES=4,5,6,7`` the container sees four devices numbered 0..3,
    so GPUs 6,7 are ``CUDA_VISIBLE_DEVICES=2,3``.
    """
    order = list(gpu_visible)
    return ",".join(str(order.index(g)) for g in gpu_group)


def empty_term(term: object) -> bool:
    """True for a nodeSelectorTerm that matches no node: null, or no requirement at all
    (``{}``, empty lists), as the scheduler and :mod:`gputopo.cluster.node_fit` read it."""
    if not isinstance(term, Mapping):
        return True
    return not any(isinstance(term.get(k), list) and term[k]
                   for k in ("matchExpressions", "matchFields"))


def pin_to_node(pod: dict[str, Any], node: str) -> list[str]:
    """Add the required ``metadata.name In [node]`` requirement to every non-empty
    nodeSelectorTerm (an empty one matches no node and is left so: the pin must narrow)."""
    warnings: list[str] = []
    spec = pod.setdefault("spec", {})
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        affinity = spec["affinity"] = {}
    node_aff = affinity.get("nodeAffinity")
    if not isinstance(node_aff, dict):
        node_aff = affinity["nodeAffinity"] = {}
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        required = node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {}
    terms = required.get("nodeSelectorTerms")
    pin = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    if not isinstance(terms, list) or not terms:
        required["nodeSelectorTerms"] = [{"matchFields": [pin]}]
        return warnings
    for k, term in enumerate(terms):
        if not isinstance(term, dict) or empty_term(term):
            continue
        fields = term.get("matchFields")
        if not isinstance(fields, list):
            fields = term["matchFields"] = []
        if pin in fields:
            continue
        others = [
            f for f in fields
            if isinstance(f, dict) and f.get("key") == NODE_NAME_FIELD
        ]
        if others:
            warnings.append(
                f"placement: nodeSelectorTerms[{k}] already constrains {NODE_NAME_FIELD} "
                f"({others}); the pin to {node} is added and both must hold"
            )
        fields.append(dict(pin, values=[node]))
    return warnings


def pinned_to(spec: Mapping[str, Any], node: str) -> bool:
    """True when a required nodeSelectorTerm of the pod ``spec`` holds the pin to ``node``
    that :func:`pin_to_node` writes."""
    affinity = spec.get("affinity")
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node_aff, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    pin = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    return any(isinstance(t, Mapping) and isinstance(t.get("matchFields"), list)
               and pin in t["matchFields"] for t in terms or ())


def unpin(pod: dict[str, Any], node: str) -> bool:
    """Take back the pin :func:`pin_to_node` wrote for ``node`` (the node the pod's own
    placement record names), and whatever it had to create to hold it; True when there
    was one. Why: a pod gputopo placed may be admitted again with no reservation to take
    its slot from (re-admission, :mod:`webhook.placement.readmission`); its gang is
    solved again from the pod, and the pin would be read as the user's own constraint:
    the whole gang kept to this pod's one node (a gang over two nodes could then never be
    placed again). The slot written afterwards pins the pod anew. The caller leaves a pin
    that the user's own pod template holds (:func:`pinned_to`): that one is the user's."""
    spec = pod.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, dict) else None
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node_aff, dict) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    if not isinstance(terms, list):
        return False
    pin = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    found, made = False, []
    for i, term in enumerate(terms):
        fields = term.get("matchFields") if isinstance(term, dict) else None
        if isinstance(fields, list) and pin in fields:
            found = True
            fields[:] = [f for f in fields if f != pin]
            if not fields:
                del term["matchFields"]
                if not term:  # pin_to_node made it for the pin (it writes into no
                    # empty term of the user's: those stay as they were)
                    made.append(i)
    if not found:
        return False
    assert isinstance(spec, dict) and isinstance(affinity, dict)  # found through them
    assert isinstance(node_aff, dict) and isinstance(required, dict)
    for i in reversed(made):
        del terms[i]
    if not terms:
        del required["nodeSelectorTerms"]
    for parent, key, child in ((node_aff, "requiredDuringSchedulingIgnoredDuringExecution",
                                required), (affinity, "nodeAffinity", node_aff),
                               (spec, "affinity", affinity)):
        if child == {}:
            del parent[key]
    return True


def annotation_ref(key: str) -> dict[str, Any]:
    """The env ``valueFrom`` reading pod annotation ``key`` (downward API). ``apiVersion``
    is written as the API server defaults it, so a re-admitted pod compares equal."""
    return {"fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{key}']"}}


#: The GPU env of a GPU container: each variable reads the annotation holding its value.
GPU_ENV = (
    (names.NVIDIA_VISIBLE_DEVICES_ENV, names.GPU_VISIBLE_ANNOTATION),
    (names.CUDA_VISIBLE_DEVICES_ENV, names.CUDA_POSITIONS_ANNOTATION),
)


def set_env_from(container: dict[str, Any], name: str, value_from: dict[str, Any]
                 ) -> str | None:
    """Set ``name`` from ``value_from`` unless the container already sets it otherwise
    (the user wins). Returns a warning when the user's setting was kept."""
    env = container.get("env")
    if not isinstance(env, list):
        env = container["env"] = []
    for item in env:
        if isinstance(item, dict) and item.get("name") == name:
            if item.get("valueFrom") == value_from and "value" not in item:
                return None
            shown = item.get("value") if "valueFrom" not in item else "(another valueFrom)"
            path = value_from.get("fieldRef", {}).get("fieldPath", "?")
            return (
                f"placement: container {container.get('name', '?')}: kept the pod's "
                f"{name}={shown}; the placement would set it from {path}"
            )
    env.append({"name": name, "valueFrom": value_from})
    return None


def apply_gpu_env(pod: dict[str, Any], gpu_resources: Iterable[str] = GPU_RESOURCES,
                  *, source: str = "pod", containers: Sequence[dict[str, Any]] | None = None
                  ) -> list[str]:
    """Point the GPU env of every GPU container at the slot annotations (downward API).

    Node-independent, so it is written at admission whether the slot is known yet or not.
    ``source="plugin"``: gputopo's device plugin sets the env from what the kubelet really
    gave, and the kubelet puts the spec's env after the plugin's, so nothing is written and
    a value the user set is reported (it would override the GPUs the container gets).
    ``containers``: ``gpu_containers(pod, gpu_resources)`` when the caller has it already.
    """
    warnings = []
    if containers is None:
        containers = gpu_containers(pod, gpu_resources)
    if source == "plugin":
        for container in containers:
            env = container.get("env")
            for item in env if isinstance(env, list) else []:
                if isinstance(item, dict) and item.get("name") in (
                        names.NVIDIA_VISIBLE_DEVICES_ENV, names.CUDA_VISIBLE_DEVICES_ENV):
                    warnings.append(
                        f"placement: container {container.get('name', '?')} sets "
                        f"{item['name']} itself; it overrides the GPUs the device plugin "
                        f"hands out (placement.gpuEnv: plugin, docs/device-plugin.md)")
        return warnings
    for container in containers:
        for env_name, key in GPU_ENV:
            w = set_env_from(container, env_name, annotation_ref(key))
            if w:
                warnings.append(w)
    return warnings


def set_annotation(pod: dict[str, Any], key: str, value: str, *, guarded: bool) -> str | None:
    """Set an annotation; for ``guarded`` ones say when a different value was replaced."""
    return _put(_annotations(pod), key, value, guarded)


def _annotations(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's annotations, made (with its metadata) when missing."""
    meta = pod.setdefault("metadata", {})
    ann = meta.get("annotations")
    if not isinstance(ann, dict):
        ann = meta["annotations"] = {}
    return ann


def _put(ann: dict[str, Any], key: str, value: str, guarded: bool) -> str | None:
    old = ann.get(key)
    ann[key] = value
    if guarded and old is not None and old != value:
        return f"placement: replaced the pod's {key}={old!r} with {value!r}"
    return None


def set_scheduler(pod: dict[str, Any]) -> str | None:
    """Hand the pod to the topology scheduler unless the user chose another one."""
    spec = pod.setdefault("spec", {})
    current = spec.get("schedulerName")
    if current in (None, "", DEFAULT_SCHEDULER, names.SCHEDULER_NAME):
        spec["schedulerName"] = names.SCHEDULER_NAME
        return None
    return (
        f"placement: kept schedulerName {current!r}; gputopo placements are made for "
        f"{names.SCHEDULER_NAME!r}"
    )


def record_json(record: dict[str, Any]) -> str:
    """The ``gputopo.io/placement`` value: compact, key-sorted JSON, so it is stable."""
    return _RECORD_JSON.encode(record)


#: What ``json.dumps(record, sort_keys=True, separators=(",", ":"))`` builds per call (and
#: then calls ``encode`` on), made once: ~70 of its ~160 bytecodes per record.
_RECORD_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def write_slot(
    pod: dict[str, Any],
    *,
    node: str,
    gpu_group: Sequence[int],
    gpu_visible: Sequence[int],
    record: dict[str, Any],
) -> list[str]:
    """The node-dependent part of a slot: the node pin, the GPU index annotations (which the
    GPU env reads) and the record. What the queue writes into a gated pod when its gang is
    placed; the API server allows exactly these changes on a gated pod."""
    warnings = pin_to_node(pod, node) + drop_allocation(pod)
    ann = _annotations(pod)
    for key, value, guarded in (
        (names.GPU_GROUP_ANNOTATION, gpu_list(gpu_group), True),
        (names.GPU_VISIBLE_ANNOTATION, gpu_list(gpu_visible), True),
        (names.CUDA_POSITIONS_ANNOTATION, cuda_positions(gpu_group, gpu_visible), True),
        (names.PLACEMENT_ANNOTATION, record_json(record), False),
    ):
        w = _put(ann, key, value, guarded)
        if w:
            warnings.append(w)
    return warnings


def apply_slot(
    pod: dict[str, Any],
    *,
    node: str,
    gpu_group: Sequence[int],
    gpu_visible: Sequence[int],
    record: dict[str, Any],
    gpu_resources: Iterable[str] = GPU_RESOURCES,
    warn_scheduler: bool = True,
    gpu_env: str = "pod",
    containers: Sequence[dict[str, Any]] | None = None,
) -> list[str]:
    """Write one replica's slot into its pod at admission; returns warnings for the user.

    ``warn_scheduler=False`` when the policy step already set (or warned about) the pod's
    schedulerName, so the user is not told twice. ``containers``: the pod's GPU containers
    (:func:`gpu_containers`) when the caller has them already.
    """
    warnings = write_slot(pod, node=node, gpu_group=gpu_group, gpu_visible=gpu_visible,
                          record=record)
    warnings += apply_gpu_env(pod, gpu_resources, source=gpu_env, containers=containers)
    w = set_scheduler(pod)
    if w and warn_scheduler:
        warnings.append(w)
    return warnings


def apply_waiting(
    pod: dict[str, Any],
    *,
    record: dict[str, Any],
    gpu_resources: Iterable[str] = GPU_RESOURCES,
    warn_scheduler: bool = True,
    gpu_env: str = "pod",
    containers: Sequence[dict[str, Any]] | None = None,
) -> list[str]:
    """A replica whose gang waits for a placement: the scheduling gate, the GPU env (read
    from annotations the queue writes later), the scheduler and the record; no pin and no
    GPU indices yet (forged ones are removed, as for an unplaced pod). ``containers``: as
    for :func:`apply_slot`."""
    warnings = apply_unplaced(pod, record)
    ann = pod["metadata"]["annotations"]
    if names.CUDA_POSITIONS_ANNOTATION in ann:
        warnings.append(f"placement: removed {names.CUDA_POSITIONS_ANNOTATION}="
                        f"{ann.pop(names.CUDA_POSITIONS_ANNOTATION)!r}: no GPUs were reserved")
    spec = pod.setdefault("spec", {})
    gates = spec.get("schedulingGates")
    if not isinstance(gates, list):
        gates = spec["schedulingGates"] = []
    if not any(isinstance(g, dict) and g.get("name") == names.PLACEMENT_GATE for g in gates):
        gates.append({"name": names.PLACEMENT_GATE})
    warnings += apply_gpu_env(pod, gpu_resources, source=gpu_env, containers=containers)
    w = set_scheduler(pod)
    if w and warn_scheduler:
        warnings.append(w)
    return warnings


def remove_gate(pod: dict[str, Any]) -> bool:
    """Drop gputopo's scheduling gate (other gates stay); True when it was there."""
    spec = pod.get("spec") or {}
    gates = spec.get("schedulingGates") or []
    kept = [g for g in gates if not (isinstance(g, dict) and g.get("name") ==
                                     names.PLACEMENT_GATE)]
    if len(kept) == len(gates):
        return False
    spec["schedulingGates"] = kept
    return True


def drop_allocation(pod: dict[str, Any]) -> list[str]:
    """A new pod cannot have been allocated GPUs yet: ``gputopo.io/allocated-gpus`` (written
    by the device plugin after binding) on it is copied or forged, and is removed."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    ann = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    if names.ALLOCATED_GPUS_ANNOTATION not in ann:
        return []
    return [f"placement: removed {names.ALLOCATED_GPUS_ANNOTATION}="
            f"{ann.pop(names.ALLOCATED_GPUS_ANNOTATION)!r}: a new pod holds no GPUs yet"]


def apply_unplaced(pod: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """An unplaced replica carries only the record saying why (no pin, no GPU indices).

    GPU index annotations already on the pod were not handed out by gputopo (a copied or
    forged claim on someone's GPUs), so they are removed, with a warning.
    """
    warnings = drop_allocation(pod)
    set_annotation(pod, names.PLACEMENT_ANNOTATION, record_json(record), guarded=False)
    ann = pod["metadata"]["annotations"]
    for key in (names.GPU_GROUP_ANNOTATION, names.GPU_VISIBLE_ANNOTATION):
        if key in ann:
            warnings.append(f"placement: removed {key}={ann.pop(key)!r}: no GPUs were reserved")
    return warnings
