"""What the policy decides around placement: deny when unplaceable, audit, re-admission."""

from __future__ import annotations

import copy

import pytest
from placement_checks import record
from placement_jobs import gang, mpijob, pytorch_pods, pytorchjob, worker_pod

from gputopo.yamlio import dump, load_documents
from webhook.assembly import default_policies_dir


@pytest.fixture
def policy_dir(tmp_path):
    """A copy of the shipped ACK policy with its spec edited by the test."""

    def make(**spec_changes):
        src = default_policies_dir() / "ack-gpu-topology.yaml"
        (doc,) = load_documents(src)
        for dotted, value in spec_changes.items():
            node = doc["spec"]
            *path, last = dotted.split(".")
            for part in path:
                node = node[part]
            node[last] = value
        out = tmp_path / "policies"
        out.mkdir(exist_ok=True)
        (out / "policy.yaml").write_text(dump(doc))
        return out

    return make


def _five_jobs():
    return [obj for k in range(1, 6) for obj in gang(mpijob(f"job-{k}"))]


def test_policy_deny_refuses_the_unplaceable_gang_with_a_clear_message(mutate, policy_dir):
    policies = policy_dir(**{"placement.whenFull": "deny"})
    result = mutate(_five_jobs(), "--policies", str(policies))
    assert result.rc == 0, result.stderr
    out = result.pods
    assert all(f"job-5-worker-{i}" not in out for i in range(4)), "denied pods are not output"
    assert all(record(out[f"job-4-worker-{i}"])["placed"] for i in range(4))
    denials = [line for line in result.stderr.splitlines() if "denied" in line]
    assert len(denials) == 4
    assert all("job-5" in line and "whenFull" in line and "4 pod(s) x 1 GPU(s)" in line
               for line in denials)


def test_audit_mode_changes_nothing_reserves_nothing_and_says_what_it_would_do(
    mutate, policy_dir
):
    policies = policy_dir(mode="audit")
    objects = _five_jobs()
    result = mutate(objects, "--policies", str(policies))
    assert result.rc == 0, result.stderr
    inputs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
    assert result.pods == inputs, "audit mode must not change any pod"
    audit = [line for line in result.stderr.splitlines() if "placement (audit)" in line]
    # nothing is reserved in audit mode, so even the fifth job would find GPUs
    would = [line for line in audit if "job-5-worker-" in line and "would pin" in line]
    assert len(would) == 4
    gpus = {line.split(" GPUs ")[1].split(" ")[0] for line in would}
    assert len(gpus) == 4, f"each replica previews its own GPU: {would}"


def test_audit_previews_of_master_0_and_worker_0_are_different_slots(mutate, policy_dir):
    """Replica indexes restart at 0 in each replica type: the preview must not show the
    PyTorchJob master and its first worker the same GPU."""
    policies = policy_dir(mode="audit")
    job = pytorchjob("pt-audit", workers=3)
    result = mutate([job, *pytorch_pods(job)], "--policies", str(policies))
    assert result.rc == 0, result.stderr
    would = [line for line in result.stderr.splitlines() if "would pin" in line]
    assert len(would) == 4
    slots = {(line.split(" to node ")[1].split(",")[0], line.split(" GPUs ")[1].split(" ")[0])
             for line in would}
    assert len(slots) == 4, f"each replica previews its own GPU: {would}"


def test_readmitting_placed_pods_yields_empty_patches(mutate):
    objects = gang(mpijob("again"))
    first = mutate(objects)
    assert first.rc == 0, first.stderr
    placed = [copy.deepcopy(first.pods[f"again-worker-{i}"]) for i in range(4)]
    launcher = next(p for n, p in first.pods.items() if "launcher" in n)
    second = mutate([*objects, *placed, launcher], output="patch")
    assert second.rc == 0, second.stderr
    patches = second.docs[-5:]
    assert [p["pod"] for p in patches] == [
        *(f"default/again-worker-{i}" for i in range(4)), f"default/{launcher['metadata']['name']}"]
    assert all(p["patch"] == [] for p in patches), patches


def test_a_pod_beyond_the_gang_size_is_left_unplaced_with_its_reason(mutate):
    job = mpijob("small", workers=2)
    extra = worker_pod(job, 2)  # replica index 2 of a 2-worker job: no slot for it
    result = mutate([*gang(job), extra])
    assert result.rc == 0, result.stderr
    rec = record(result.pods["small-worker-2"])
    assert rec["placed"] is False and "slots" in rec["reason"]


def test_placement_metrics_count_each_decision(mutate):
    from prometheus_client import REGISTRY

    def sample(result: str) -> float:
        return REGISTRY.get_sample_value("gputopo_gang_placements_total",
                                         {"result": result}) or 0.0

    before = {r: sample(r) for r in ("placed", "reused", "gated", "unplaced")}
    result = mutate(_five_jobs())
    assert result.rc == 0, result.stderr
    delta = {r: sample(r) - before[r] for r in before}
    # four gangs placed at their first pod, their other 3 pods reuse; job-5's 4 pods wait
    # gated, as the live webhook would have them (a dry run shows the live answer)
    assert delta == {"placed": 4, "reused": 12, "gated": 4, "unplaced": 0}


def test_wait_without_a_queue_admits_unplaced_and_says_why():
    """A webhook that runs no placement queue (``gputopo serve`` on a cluster file or the
    demo): a gated pod would wait for ever, so the default ``whenFull: wait`` acts as
    ``admit`` there, with a note. (``gputopo mutate`` shows the live answer instead:
    tests/placement_step/test_dry_run_gates.py.)"""
    import base64
    import json

    import jsonpatch

    from gputopo.cluster.demo import demo_snapshot
    from webhook.assembly import build_admitter
    from webhook.dryrun import review_body
    from webhook.placement.step import placement_step_for

    cluster = demo_snapshot()
    admitter = build_admitter(None, cluster, placement=placement_step_for(cluster),
                              reload_interval_s=0)
    try:
        for obj in _five_jobs():
            if obj["kind"] != "Pod":
                cluster.add(obj)
                continue
            _, answer = admitter.handle_body(review_body(obj, "uid-1"))
            response = answer["response"]
            patch = json.loads(base64.b64decode(response.get("patch") or "W10="))  # "[]"
            out = jsonpatch.apply_patch(obj, patch)
            cluster.add(out)
    finally:
        admitter.close()
    assert out["metadata"]["name"] == "job-5-worker-3"
    assert not out["spec"].get("schedulingGates")
    assert record(out)["placed"] is False and "waiting" not in record(out)
    assert any("whenFull: wait needs the placement queue" in w
               for w in response.get("warnings") or []), response
