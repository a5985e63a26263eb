"""What the webhook's input checkers accept and refuse: AdmissionReviews
(``parse_review``), pods (``check_pod``) and GPU counts (``gpu_count_problems``).

Hypothesis builds well-formed input and input with junk mixed in (wrong types, missing
fields, explicit nulls, booleans where strings go, nested junk), and every single-field
corruption of a full review and pod is tried: each is accepted with typed fields or
refused with one line naming the field, never another exception, and the input is not
changed. A body and its decoded document parse alike (``decode_json``: orjson or the
standard library, never a different answer).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo import names
from tests.webhook.conftest import operator_pod, pytorch_job, review
from tests.webhook.test_hypothesis import junk, pods
from webhook.jobs import container_gpus, gpu_count_problems, pod_gpus
from webhook.podshape import check_pod
from webhook.review import (
    AdmissionRequest,
    BadReview,
    GroupVersionKind,
    GroupVersionResource,
    checked_request,
    parse_review,
)

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
    """What parsing ``doc`` gives: ("ok", the request) or ("bad", line, path); the request's
    fields have the types the pipeline relies on, a refusal is one line."""
    try:
        req = parse(doc)
    except BadReview as exc:
        assert "\n" not in exc.line() and (exc.path is None or isinstance(exc.path, str))
        return "bad", exc.line(), exc.path
    assert type(req) is AdmissionRequest
    assert type(req.uid) is str and req.uid
    assert type(req.kind) is GroupVersionKind and type(req.resource) is GroupVersionResource
    assert all(type(getattr(req.kind, f)) is str for f in GroupVersionKind._fields)
    assert all(type(getattr(req.resource, f)) is str for f in GroupVersionResource._fields)
    for name in ("sub_resource", "operation", "namespace", "name"):
        assert type(getattr(req, name)) is str, name
    assert type(req.dry_run) is bool and (req.object is None or type(req.object) is dict)
    if req.is_pod_create:
        assert req.object is not None and req.object.get("kind") == "Pod"
    return "ok", req


def via_body(doc: Any) -> AdmissionRequest:
    return parse_review(json.dumps(doc).encode())


def via_checker(doc: Any) -> AdmissionRequest:
    return checked_request(json.loads(json.dumps(doc)))


@MANY
@given(doc=st.one_of(request_docs(odd), corrupted(request_docs(st.nothing()), replacements)))
def test_reviews_are_parsed_or_refused_with_one_line(doc):
    before = copy.deepcopy(doc)
    assert outcome(via_body, doc) == outcome(via_checker, doc)
    assert doc == before


def test_a_real_pod_create_is_a_pod_create():
    doc = review(operator_pod(pytorch_job(ns="team"), "worker", 0))
    request = parse_review(json.dumps(doc).encode())
    assert request.is_pod_create and request.object == doc["request"]["object"]
    assert (request.uid, request.namespace, request.dry_run) == (
        doc["request"]["uid"], doc["request"]["namespace"], False)


@pytest.mark.parametrize(("mutate", "refused_at"), [
    (lambda r: r.update(uid=""), "request.uid"),
    (lambda r: r.update(namespace=None), None),  # optional: read as ""
    (lambda r: r.update(dryRun="no"), "request.dryRun"),
    (lambda r: r["kind"].update(group=None), None),  # optional: the core group
    (lambda r: r["kind"].update(kind=True), "request.kind.kind"),
    (lambda r: r.pop("operation"), "request.operation"),
    (lambda r: r.update(object=None), "request.object"),
    (lambda r: r["object"].update(apiVersion="v2"), "request.object"),
    (lambda r: r.update(subResource=7), "request.subResource"),
])
def test_each_odd_field_is_refused_by_name_or_read_as_its_default(mutate, refused_at):
    doc = review(operator_pod(pytorch_job(ns="team"), "worker", 0))
    mutate(doc["request"])
    result = outcome(via_body, doc)
    if refused_at is None:
        assert result[0] == "ok" and result[1].is_pod_create
    else:
        assert result[0] == "bad" and result[2] == refused_at and refused_at in result[1]


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
def test_every_single_field_corruption_of_a_review_is_parsed_or_refused(operation):
    assert outcome(via_body, full_review(operation))[0] == "ok"
    refused = 0
    for path, doc in each_corruption(full_review(operation)):
        result = outcome(via_body, doc)
        assert result == outcome(via_checker, doc), path
        refused += result[0] == "bad"
    assert refused > 40


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


def checked(pod: Any) -> Any:
    """check_pod's verdict, asserted to be None or (a field path, a one-line reason), with
    the pod left as it was."""
    before = copy.deepcopy(pod)
    problem = check_pod(pod)
    assert pod == before
    if problem is not None:
        where, reason = problem
        assert type(where) is str and where.startswith(".")
        assert type(reason) is str and reason and "\n" not in reason
    return problem


def test_every_single_field_corruption_of_a_pod_is_accepted_or_named():
    assert checked(full_pod()) is None
    refused = 0
    for _path, pod in each_corruption(full_pod()):
        refused += checked(pod) is not None
    assert refused > 100


@MANY
@given(pod=st.one_of(pod_shapes(odd), corrupted(pod_shapes(st.nothing()), replacements),
                     corrupted(pod_shapes(st.nothing()), replacements), pods))
def test_pods_are_accepted_or_a_field_is_named(pod):
    checked(pod)


@pytest.mark.parametrize(("change", "problem"), [
    (lambda c: c["resources"]["limits"].update(cpu="lots"),
     (".spec.containers[0].resources.limits.cpu", "not a quantity: 'lots'")),
    (lambda c: c.update(env=[{"name": 1}]), (".spec.containers[0].env[0].name",
                                             "must be a string")),
    (lambda c: c.update(volumeMounts=[{"name": "d"}]),
     (".spec.containers[0].volumeMounts[0].mountPath", "must be a string")),
])
def test_the_benchmark_pod_is_sound_and_a_bad_field_is_named(change, problem):
    pod = operator_pod(pytorch_job(ns="team"), "worker", 0)
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "d", "mountPath": "/d"}]
    pod["spec"]["volumes"] = [{"name": "d", "emptyDir": {}}]
    assert checked(pod) is None
    change(pod["spec"]["containers"][0])
    assert checked(pod) == problem


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


def gpus_of(spec: Any, key: str, gpu_names: Any) -> list[int]:
    items = spec.get(key)
    return [container_gpus(c, gpu_names) for c in items if isinstance(c, dict)] if (
        isinstance(items, list)) else []


@MANY
@given(spec=st.one_of(gpu_specs, corrupted(gpu_specs, gpu_values)), gpu_names=name_sets)
def test_gpu_count_problems_name_a_container_and_sound_specs_count_as_the_scheduler(
        spec, gpu_names):
    before = copy.deepcopy(spec)
    problems = gpu_count_problems(spec, gpu_names)
    assert spec == before
    for problem in problems:
        assert problem.startswith(("container ", "initContainer ")) and "resources." in problem
    assert pod_gpus(spec, gpu_names) == max(sum(gpus_of(spec, "containers", gpu_names)),
                                            max(gpus_of(spec, "initContainers", gpu_names),
                                                default=0))


def gpu_spec() -> dict[str, Any]:
    gpu = names.SOURCE_GPU_RESOURCE
    return {"containers": [
        {"name": "a", "resources": {"limits": {gpu: 2, "cpu": "1"},
                                    "requests": {gpu: "2", "cpu": "1"}}},
        {"name": "b", "resources": {"limits": {names.TOPOLOGY_GPU_RESOURCE: "1"}}}],
        "initContainers": [{"name": "i", "resources": {"limits": {gpu: 4},
                                                        "requests": {gpu: 4}}},
                           {"name": "j", "resources": {"limits": {gpu: 1}}}]}


def test_every_single_field_corruption_of_gpu_counts_is_found():
    assert gpu_count_problems(gpu_spec(), GPU_NAMES) == []
    assert pod_gpus(gpu_spec(), GPU_NAMES) == 4  # the largest init container
    found = 0
    for _path, spec in each_corruption(gpu_spec()):
        found += bool(gpu_count_problems(spec, GPU_NAMES))
    assert found > 25


def test_gpu_names_that_cannot_be_sorted_fail_as_before():
    with pytest.raises(TypeError):
        gpu_count_problems(gpu_spec(), ("a", 1))


@pytest.mark.parametrize(("resources", "gpus"), [
    ({"limits": {names.SOURCE_GPU_RESOURCE: 2}, "requests": {names.SOURCE_GPU_RESOURCE: "2"}}, 2),
    ({"requests": {names.SOURCE_GPU_RESOURCE: "1500m"}}, 2),  # a request alone, rounded up
    ({"limits": {names.TOPOLOGY_GPU_RESOURCE: "1"}, "requests": {"cpu": "4"}}, 1),
    ({"limits": {names.SOURCE_GPU_RESOURCE: "-1"}}, 0),
    ({"limits": {names.SOURCE_GPU_RESOURCE: [1]}}, 0),
    ({"limits": {names.SOURCE_GPU_RESOURCE: 1, names.TOPOLOGY_GPU_RESOURCE: 2}}, 3),
    ({"limits": {"cpu": "8"}}, 0),
    ("junk", 0),
])
def test_a_containers_gpus_are_its_limits_else_requests(resources, gpus):
    assert container_gpus({"name": "c", "resources": resources}, GPU_NAMES) == gpus
