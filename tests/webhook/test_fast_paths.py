"""The straight-line fast paths of the webhook agree with the detailed checkers they front.

Each fast path vouches for well-formed input and hands everything else to the detailed
code, which keeps deciding what is refused and how it is worded. Here hypothesis builds
well-formed input and input with junk mixed in (wrong types, missing fields, explicit
nulls, booleans where strings go, nested junk) and the two ways must give the same answer:
the same request, or the same BadReview message and path; the same pod problem; the same
GPU count problems. Well-formed input must also really take the fast path.
"""

from __future__ import annotations

import copy
import json
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo import names
from tests.webhook.conftest import namespace, operator_pod, pytorch_job, review
from tests.webhook.test_hypothesis import junk, pods
from webhook import jobs, podshape
from webhook import review as review_mod
from webhook.jobs import (
    OwnerRef,
    container_gpus,
    controller_ref,
    gpu_count_problems,
    gpu_count_problems_in_detail,
    pod_gpus,
    resolve_job,
)
from webhook.podshape import check_pod, check_pod_in_detail
from webhook.review import (
    AdmissionRequest,
    BadReview,
    checked_request,
    decode_json,
    parse_review,
)
from webhook.steps import JobInfo

MANY = settings(max_examples=300, deadline=None)

# --- reviews ------------------------------------------------------------------------------
strings = st.sampled_from(["", "v1", "Pod", "pods", "CREATE", "UPDATE", "DELETE", "CONNECT",
                           "status", "apps", "team", "uid-1"])
odd = st.one_of(st.none(), st.booleans(), st.integers(-1, 2),
                st.floats(allow_nan=False, allow_infinity=False),
                st.lists(strings, max_size=2), st.dictionaries(strings, strings, max_size=2),
                junk)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found += _paths(value, (*prefix, i))
    return found


@st.composite
def corrupted(draw: Any, base: st.SearchStrategy, replacement: st.SearchStrategy) -> Any:
    """A draw of ``base`` (well-formed) with one or two values somewhere in it replaced by
    ``replacement`` or deleted: input that is right but for one field, where a fast path
    that lets something through would be caught (fully random junk rarely gets that far)."""
    doc = copy.deepcopy(draw(base))
    for _ in range(draw(st.integers(1, 2))):
        places = [p for p in _paths(doc) if p]
        if not places:
            break
        *parents, last = draw(st.sampled_from(places))
        parent = doc
        for key in parents:
            parent = parent[key]
        if draw(st.integers(0, 4)) == 0:
            del parent[last]
        else:
            # a copy: sampled values are shared objects, and a later corruption may
            # write inside this one (a shared [1] once became a list inside itself)
            parent[last] = copy.deepcopy(draw(replacement))
    return doc


#: What every single-field corruption below tries in place of a value (and deleting it).
ODD_VALUES = [None, True, False, 0, 1, -1, 0.5, "", "x", "1", [], [1], ["x"], {}, {"a": 1},
              {"a": "b"}]
DELETED = object()


def each_corruption(doc: Any) -> Any:
    """``doc`` with one value replaced by each of ODD_VALUES or deleted, everywhere; and
    each mapping with a key that is not a string added (YAML allows them; JSON not)."""
    for path in _paths(doc):
        target = doc
        for key in path:
            target = target[key]
        if isinstance(target, dict):
            bad = copy.deepcopy(doc)
            parent = bad
            for key in path:
                parent = parent[key]
            parent[1] = "1"
            yield (*path, 1), bad
        if not path:
            continue
        for value in [DELETED, *ODD_VALUES]:
            bad = copy.deepcopy(doc)
            parent = bad
            for key in path[:-1]:
                parent = parent[key]
            if value is DELETED:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(value)
            yield path, bad


replacements = st.one_of(odd, st.sampled_from(["", "x", "1", "-1", "0.5", "v1", "Pod"]))


def sometimes(good: st.SearchStrategy, bad: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly ``good``, sometimes ``bad``, sometimes absent (``...``: the key is dropped)."""
    return st.one_of(good, good, good, bad, st.just(...))


def fields_of(pairs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in pairs.items() if v is not ...}


def group_version(kind_key: str, kind_values: list[str], bad: st.SearchStrategy
                  ) -> st.SearchStrategy:
    return st.builds(fields_of, st.fixed_dictionaries({
        "group": sometimes(st.sampled_from(["", "", "apps"]), bad),
        "version": sometimes(st.sampled_from(["v1", "v1", "v2"]), bad),
        kind_key: sometimes(st.sampled_from(kind_values), bad),
    }))


def request_docs(bad: st.SearchStrategy) -> st.SearchStrategy:
    pod = st.one_of(
        st.just(operator_pod(pytorch_job(ns="team"), "worker", 0)),
        st.builds(lambda kind, version: {"apiVersion": version, "kind": kind,
                                         "metadata": {"name": "p"}},
                  st.sampled_from(["Pod", "Pod", "Deployment"]),
                  st.sampled_from(["v1", "v1", "apps/v1"])),
        st.none(),
        bad)
    request = st.builds(fields_of, st.fixed_dictionaries({
        "uid": sometimes(st.sampled_from(["uid-1", "uid-2", ""]), bad),
        "kind": sometimes(group_version("kind", ["Pod", "Pod", "Deployment"], bad), bad),
        "resource": sometimes(group_version("resource", ["pods", "pods", "deployments"],
                                            bad), bad),
        "subResource": sometimes(st.sampled_from(["", "status", "binding"]), bad),
        "operation": sometimes(st.sampled_from(["CREATE", "CREATE", "UPDATE", "DELETE",
                                                "CONNECT"]), bad),
        "namespace": sometimes(st.sampled_from(["team", "", "other"]), bad),
        "name": sometimes(st.sampled_from(["p", ""]), bad),
        "dryRun": sometimes(st.booleans(), bad),
        "object": sometimes(pod, bad),
        "extra": sometimes(odd, odd),
    }))
    return st.builds(fields_of, st.fixed_dictionaries({
        "apiVersion": sometimes(st.just("admission.k8s.io/v1"),
                                st.one_of(st.just("admission.k8s.io/v1beta1"), bad)),
        "kind": sometimes(st.just("AdmissionReview"), st.one_of(st.just("Review"), bad)),
        "request": sometimes(request, bad),
    }))


def outcome(parse: Any, doc: Any) -> tuple[Any, ...]:
    """What parsing ``doc`` gives: ("ok", fields with their types) or ("bad", line, path)."""
    try:
        req = parse(doc)
    except BadReview as exc:
        return "bad", exc.line(), exc.path
    assert type(req) is AdmissionRequest
    values = {f.name: getattr(req, f.name) for f in fields(AdmissionRequest)}
    assert set(vars(req)) == set(values), "the fast path filled other attributes"
    return "ok", req, repr(req), hash(req.kind), hash(req.resource), {
        k: type(v) for k, v in values.items()}


def via_body(doc: Any) -> AdmissionRequest:
    return parse_review(json.dumps(doc).encode())


def via_checker(doc: Any) -> AdmissionRequest:
    return checked_request(decode_json(json.dumps(doc).encode()))


@MANY
@given(doc=st.one_of(request_docs(odd), corrupted(request_docs(st.nothing()), replacements)))
def test_reviews_parse_the_same_both_ways(doc):
    assert outcome(via_body, doc) == outcome(via_checker, doc)


@MANY
@given(doc=request_docs(st.nothing()))
def test_well_formed_reviews_take_the_fast_path(doc):
    """Built without junk: when the checker accepts a Pod CREATE, the fast path vouched for
    it; anything else (the webhook is registered for Pod CREATE only) is the checker's."""
    decoded = decode_json(json.dumps(doc).encode())
    try:
        expected = checked_request(decoded)
    except BadReview:
        assert review_mod.pod_create_request(decoded) is None
        return
    if expected.is_pod_create:
        assert review_mod.pod_create_request(decoded) == expected
    else:
        assert review_mod.pod_create_request(decoded) is None


def test_a_real_pod_create_takes_the_fast_path_and_is_a_pod_create():
    doc = review(operator_pod(pytorch_job(ns="team"), "worker", 0))
    request = review_mod.pod_create_request(decode_json(json.dumps(doc).encode()))
    assert request is not None and request.is_pod_create
    assert request == via_checker(doc)


@pytest.mark.parametrize("mutate", [
    lambda r: r.update(uid=""),
    lambda r: r.update(namespace=None),
    lambda r: r.update(dryRun="no"),
    lambda r: r["kind"].update(group=None),
    lambda r: r["kind"].update(kind=True),
    lambda r: r.pop("operation"),
    lambda r: r.update(object=None),
    lambda r: r["object"].update(apiVersion="v2"),
    lambda r: r.update(subResource=7),
])
def test_each_odd_field_falls_back_to_the_checker(mutate):
    doc = review(operator_pod(pytorch_job(ns="team"), "worker", 0))
    mutate(doc["request"])
    decoded = decode_json(json.dumps(doc).encode())
    assert review_mod.pod_create_request(decoded) is None
    assert outcome(via_body, doc) == outcome(via_checker, doc)


def full_review(operation: str = "CREATE") -> dict[str, Any]:
    if operation == "CREATE":
        doc = review(full_pod(), namespace="team")
    else:  # not a pod: the object is not looked into
        doc = review({"apiVersion": "apps/v1", "kind": "Deployment"}, operation=operation,
                     kind="Deployment", resource="deployments", namespace="team")
        doc["request"]["kind"]["group"] = doc["request"]["resource"]["group"] = "apps"
    doc["request"].update(name="p", subResource="", dryRun=False)
    return doc


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_every_single_field_corruption_of_a_review_parses_the_same_both_ways(operation):
    fast = 0
    for path, doc in each_corruption(full_review(operation)):
        decoded = decode_json(json.dumps(doc).encode())
        assert outcome(via_body, doc) == outcome(via_checker, doc), path
        fast += review_mod.pod_create_request(decoded) is not None
    if operation == "CREATE":
        assert fast > 20  # a pod's own fields are not the parser's: those stay fast
    else:
        assert fast == 0  # not a Pod CREATE: the checker's, corrupted or not


def test_reviews_of_any_kind_parse_with_their_own_kind():
    for n in range(200):
        doc = review({"apiVersion": "v1", "kind": "Pod"}, kind=f"K{n}", operation="UPDATE")
        assert via_body(doc).kind.kind == f"K{n}"


# --- pods ---------------------------------------------------------------------------------
def pod_shapes(bad: st.SearchStrategy) -> st.SearchStrategy:
    """Pods with every field the shape check reads, each maybe absent, null or ``bad``."""

    def maybe(strategy):
        return st.one_of(st.just(...), st.none(), strategy, strategy, bad)

    text = st.sampled_from(["a", "b", "x-1", ""])
    str_map = st.dictionaries(text, text, max_size=3)
    quantity = st.one_of(st.integers(-2, 8), st.sampled_from(
        ["1", "2", "500m", "8Gi", "0.5", "1e3", "x", ""]), st.floats(-2, 4, allow_nan=False))
    quantities = st.dictionaries(st.sampled_from([names.SOURCE_GPU_RESOURCE, "cpu", "memory"]),
                                 st.one_of(quantity, quantity, bad), max_size=3)
    named = st.builds(fields_of, st.fixed_dictionaries(
        {"name": maybe(text), "mountPath": maybe(text), "value": maybe(text)}))
    container = st.builds(fields_of, st.fixed_dictionaries({
        "name": maybe(text),
        "resources": maybe(st.builds(fields_of, st.fixed_dictionaries(
            {"limits": maybe(quantities), "requests": maybe(quantities)}))),
        "volumeMounts": maybe(st.lists(st.one_of(named, named, bad), max_size=3)),
        "env": maybe(st.lists(st.one_of(named, named, bad), max_size=3)),
        "securityContext": maybe(st.dictionaries(text, text, max_size=1)),
    }))
    owner = st.builds(fields_of, st.fixed_dictionaries({
        "apiVersion": maybe(text), "kind": maybe(text), "name": maybe(text),
        "uid": maybe(text), "controller": maybe(st.booleans())}))
    return st.builds(fields_of, st.fixed_dictionaries({
        "metadata": maybe(st.builds(fields_of, st.fixed_dictionaries({
            **{k: maybe(text) for k in ("name", "generateName", "namespace", "uid")},
            "labels": maybe(str_map), "annotations": maybe(str_map),
            "ownerReferences": maybe(st.lists(st.one_of(owner, owner, bad), max_size=2)),
        }))),
        "spec": maybe(st.builds(fields_of, st.fixed_dictionaries({
            "containers": maybe(st.lists(st.one_of(container, container, bad), max_size=3)),
            "initContainers": maybe(st.lists(container, max_size=2)),
            "volumes": maybe(st.lists(st.one_of(named, named, bad), max_size=2)),
            **{k: maybe(st.booleans()) for k in ("hostNetwork", "hostIPC", "hostPID")},
            **{k: maybe(text) for k in ("dnsPolicy", "schedulerName", "nodeName")},
            "securityContext": maybe(str_map), "affinity": maybe(str_map),
            "nodeSelector": maybe(str_map),
        }))),
    }))


def full_pod() -> dict[str, Any]:
    """A pod with every field the shape check reads, all well-formed."""
    pod = operator_pod(pytorch_job(ns="team"), "worker", 0)
    meta, spec = pod["metadata"], pod["spec"]
    meta.update(generateName="pt-", uid="u-1", annotations={"a": "b"})
    main = spec["containers"][0]
    main["resources"]["requests"] = {"cpu": "1", names.SOURCE_GPU_RESOURCE: 1}
    main.update(volumeMounts=[{"name": "d", "mountPath": "/d"}],
                env=[{"name": "A", "value": "1"}], securityContext={"privileged": False})
    spec.update(initContainers=[{"name": "init", "resources": {"limits": {"cpu": "500m"}}}],
                volumes=[{"name": "d", "emptyDir": {}}], hostNetwork=False, hostIPC=False,
                hostPID=False, nodeName="n", securityContext={}, affinity={},
                nodeSelector={"zone": "a"})
    return pod


def test_every_single_field_corruption_of_a_pod_is_checked_the_same_both_ways():
    assert fast_verdict(full_pod()) is True
    refused = 0
    for path, pod in each_corruption(full_pod()):
        detailed = check_pod_in_detail(pod)
        assert check_pod(pod) == detailed, path
        if fast_verdict(pod):
            assert detailed is None, path
        refused += detailed is not None
    assert refused > 100


def fast_verdict(pod: Any) -> bool | None:
    """What the fast pass says: True (sound), False (not vouched for), None (it raised)."""
    try:
        return podshape.well_formed_pod(pod)
    except Exception:
        return None


@MANY
@given(pod=st.one_of(pod_shapes(odd), corrupted(pod_shapes(st.nothing()), replacements),
                     corrupted(pod_shapes(st.nothing()), replacements), pods))
def test_pods_are_checked_the_same_both_ways(pod):
    before = copy.deepcopy(pod)
    detailed = check_pod_in_detail(pod)
    assert check_pod(pod) == detailed
    if fast_verdict(pod):
        assert detailed is None, "the fast pass vouched for a pod the checker refuses"
    assert pod == before


@MANY
@given(pod=pod_shapes(st.nothing()))
def test_sound_pods_take_the_fast_path(pod):
    assert fast_verdict(pod) is (check_pod_in_detail(pod) is None)


def test_the_benchmark_pod_takes_the_fast_path():
    pod = operator_pod(pytorch_job(ns="team"), "worker", 0)
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "d", "mountPath": "/d"}]
    pod["spec"]["volumes"] = [{"name": "d", "emptyDir": {}}]
    assert podshape.well_formed_pod(pod) is True
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    assert podshape.well_formed_pod(pod) is False
    problem = check_pod_in_detail(pod)
    assert problem is not None and check_pod(pod) == problem


# --- GPU counts ---------------------------------------------------------------------------
GPU_NAMES = (names.SOURCE_GPU_RESOURCE, names.TOPOLOGY_GPU_RESOURCE)
gpu_values = st.one_of(st.integers(-1, 4), st.sampled_from(
    ["1", "2", "0", "-1", "0.5", "500m", "2000m", "1e0", "x", "", "1Ki"]),
    st.sampled_from([None, True, False, 1.0, 2.5, -0.0, [1], {"a": 1}]))
gpu_parts = st.dictionaries(st.sampled_from([*GPU_NAMES, "cpu"]), gpu_values, max_size=3)
gpu_containers = st.lists(st.one_of(
    st.builds(fields_of, st.fixed_dictionaries({
        "name": st.sampled_from(["a", "b"]),
        "resources": st.one_of(st.builds(fields_of, st.fixed_dictionaries({
            "limits": st.one_of(gpu_parts, st.just(...), odd),
            "requests": st.one_of(gpu_parts, st.just(...), odd)})), odd)})),
    odd), max_size=3)
gpu_specs = st.builds(fields_of, st.fixed_dictionaries({
    "containers": st.one_of(gpu_containers, odd), "initContainers": st.one_of(
        gpu_containers, st.just(...), odd)}))
name_sets = st.one_of(st.just(frozenset(GPU_NAMES)), st.just(GPU_NAMES),
                      st.just((names.SOURCE_GPU_RESOURCE,)), st.just(["x", *GPU_NAMES]))


@MANY
@given(spec=st.one_of(gpu_specs, corrupted(gpu_specs, gpu_values)), gpu_names=name_sets)
def test_gpu_count_problems_are_found_the_same_both_ways(spec, gpu_names):
    assert gpu_count_problems(spec, gpu_names) == gpu_count_problems_in_detail(spec, gpu_names)
    sound = jobs._sound_pod_gpus(spec, gpu_names)
    assert sound is None or sound == pod_gpus(spec, gpu_names)


def gpu_spec() -> dict[str, Any]:
    gpu = names.SOURCE_GPU_RESOURCE
    return {"containers": [
        {"name": "a", "resources": {"limits": {gpu: 2, "cpu": "1"},
                                    "requests": {gpu: "2", "cpu": "1"}}},
        {"name": "b", "resources": {"limits": {names.TOPOLOGY_GPU_RESOURCE: "1"}}}],
        "initContainers": [{"name": "i", "resources": {"limits": {gpu: 4},
                                                        "requests": {gpu: 4}}},
                           {"name": "j", "resources": {"limits": {gpu: 1}}}]}


def test_every_single_field_corruption_of_gpu_counts_is_found_the_same_both_ways():
    assert gpu_count_problems(gpu_spec(), GPU_NAMES) == []
    assert jobs._sound_pod_gpus(gpu_spec(), GPU_NAMES) == pod_gpus(gpu_spec(), GPU_NAMES) == 4
    found = 0
    for path, spec in each_corruption(gpu_spec()):
        for gpu_names in (GPU_NAMES, frozenset(GPU_NAMES)):
            detailed = gpu_count_problems_in_detail(spec, gpu_names)
            assert gpu_count_problems(spec, gpu_names) == detailed, path
            found += bool(detailed)
            sound = jobs._sound_pod_gpus(spec, gpu_names)
            assert sound is None or sound == pod_gpus(spec, gpu_names), path
    assert found > 50


def test_gpu_names_that_cannot_be_sorted_fail_as_before():
    with pytest.raises(TypeError):
        gpu_count_problems_in_detail(gpu_spec(), ("a", 1))
    with pytest.raises(TypeError):
        gpu_count_problems(gpu_spec(), ("a", 1))


def old_container_gpus(container: Any, gpu_resources: Any) -> int:
    """container_gpus before it looked only at the names present (the oracle)."""
    res = container.get("resources")
    if not isinstance(res, dict):
        return 0
    limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    total = 0
    for name in set(gpu_resources):
        raw = limits.get(name, requests.get(name))
        if raw is not None:
            try:
                total += jobs._whole_gpus(raw)
            except TypeError:
                continue
    return total


@MANY
@given(spec=gpu_specs, gpu_names=name_sets)
def test_gpu_counts_of_containers_and_pods_are_unchanged(spec, gpu_names):
    def each(key: str) -> list[int]:
        items = spec.get(key)
        return [old_container_gpus(c, gpu_names) for c in items if isinstance(c, dict)] if (
            isinstance(items, list)) else []

    for key in ("containers", "initContainers"):
        for c in spec.get(key) if isinstance(spec.get(key), list) else []:
            if isinstance(c, dict):
                assert container_gpus(c, gpu_names) == old_container_gpus(c, gpu_names)
    assert pod_gpus(spec, gpu_names) == max(sum(each("containers")),
                                            max(each("initContainers"), default=0))


# --- frozen dataclasses filled without __init__ --------------------------------------------
def test_objects_filled_directly_equal_the_ones_init_makes():
    from gputopo.cluster.snapshot import ClusterSnapshot

    job = pytorch_job(ns="team", workers=2)
    pod = operator_pod(job, "Worker", 1)
    cluster = ClusterSnapshot.from_objects([namespace("team"), job])
    request = via_body(review(pod))
    owner = controller_ref(pod)
    info = resolve_job(pod, "team", cluster, frozenset(GPU_NAMES))
    assert info is not None and owner is not None
    for obj, cls in ((request, AdmissionRequest), (owner, OwnerRef), (info, JobInfo)):
        made = cls(**{f.name: getattr(obj, f.name) for f in fields(cls)})
        assert vars(obj) == vars(made)
        assert obj == made and repr(obj) == repr(made)
        try:
            expected_hash: Any = hash(made)
        except TypeError:  # a dict field: unhashable either way
            expected_hash = TypeError
        try:
            assert hash(obj) == expected_hash
        except TypeError:
            assert expected_hash is TypeError
        with pytest.raises(AttributeError):  # still frozen
            obj.name = "other"  # type: ignore[misc]
    assert resolve_job(pod, "team", cluster, frozenset(GPU_NAMES), owner=owner) == info
