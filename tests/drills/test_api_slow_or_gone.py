"""Drill: the API server is slow, then answers 503, then refuses connections, then is back.

The webhook keeps answering inside its timeoutSeconds (5) from what its watch cache holds:
pods of known jobs in opted-in namespaces still get the policy's mutations, placement
says in a warning and in the pod's placement record that the reservation store could not
be reached, and a job the cache has never seen is admitted unchanged with a warning (its
gang size is never guessed). Once the API is back, every gang is placed; over the whole
drill no GPU is handed out twice and no placed pod is missing from its reservation.
"""

from __future__ import annotations

from admitkit import admitted, patch_of, placement, pytorchjob, worker_pod
from drillkit import Ledger, live_webhook, seed, wait_for

from gputopo import names

#: The webhook configuration's timeoutSeconds (generator/webhook_objects.py).
WEBHOOK_TIMEOUT_S = 5.0


def _unplaced_reason(pod, answer) -> str:
    record = placement(admitted(pod, answer))
    assert record is not None and record["placed"] is False
    return record["reason"]


def test_slow_then_gone_api_answers_from_the_cache_in_time(kube, tmp_path) -> None:
    jobs = seed(kube, *(pytorchjob(f"drill-{k}", workers=2, gpus=2) for k in range(4)))
    ledger = Ledger()
    with live_webhook(kube, tmp_path, backoff_max=0.5) as hook:
        client = hook.client
        answer, _ = ledger.admit(client, worker_pod(jobs[0], 0))  # placed while all is well
        assert placement(admitted(worker_pod(jobs[0], 0), answer))["placed"] is True

        # 1. Slow: every API request takes 2 s. The first pod of a new gang (solve, then
        # several store calls) gets its answer inside the webhook timeout.
        kube.latency = 2.0
        pod = worker_pod(jobs[1], 0)
        answer, seconds = ledger.admit(client, pod)
        assert seconds < WEBHOOK_TIMEOUT_S, seconds
        assert answer["response"]["allowed"] is True
        assert "reservation store is unavailable" in _unplaced_reason(pod, answer)
        assert any("left unplaced" in w for w in answer["response"]["warnings"])
        kube.latency = 0.0

        # 2. Gone (503, then connection refused): answers come at once (no store
        # deadline spent), from the cache.
        for mode in ("503", "refuse"):
            kube.set_down(mode)
            pod = worker_pod(jobs[2], 0)
            answer, seconds = ledger.admit(client, pod)
            assert seconds < 2.0, (mode, seconds)  # no waiting on timeouts (3 s)
            mutated = admitted(pod, answer)
            assert mutated["metadata"]["labels"][names.GANG_LABEL] == "drill-2"  # the policy
            assert "reservation store is unavailable" in _unplaced_reason(pod, answer)

        # A job created while the webhook cannot see the API: never a guessed gang size.
        late = kube.apply(pytorchjob("late", workers=2, gpus=2))
        answer, seconds = ledger.admit(client, worker_pod(late, 0))
        assert seconds < 2.0
        assert patch_of(answer) == []
        assert any("gang size unknown" in w for w in answer["response"]["warnings"])

        # 3. Back: the view catches up and every gang gets placed (16 GPUs, 4 x 4 asked).
        kube.set_down(None)
        assert wait_for(lambda: hook.view.object(
            api_version="kubeflow.org/v1", kind="PyTorchJob", namespace="team-a",
            name="late") is not None, timeout=8)
        for job in jobs:
            for index in (0, 1):
                answer, seconds = ledger.admit(client, worker_pod(job, index))
                assert seconds < WEBHOOK_TIMEOUT_S
        placed_jobs = {rec["job"] for rec in ledger.records.values()}
        assert placed_jobs == {f"PyTorchJob team-a/drill-{k}" for k in range(4)}
        assert ledger.double_allocated() == 0
        assert ledger.lost(hook.store) == 0


def test_concurrent_admissions_on_a_slow_api_all_answer_in_time(kube, tmp_path) -> None:
    """Admissions run one at a time; each had its own store budget (3 s) counted from when
    it STARTED, so with the API slow, reviews that arrived together were answered after
    3, 6, 9 s — past the API server's timeout, even a pod that requests no GPU. The budget
    now counts from each review's arrival."""
    import json
    import time
    from concurrent.futures import ThreadPoolExecutor

    from admitkit import client_for, post, review

    jobs = seed(kube, *(pytorchjob(f"busy-{k}", workers=2, gpus=1) for k in range(3)))
    plain = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "web", "namespace": jobs[0]["metadata"]["namespace"]},
             "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    with live_webhook(kube, tmp_path, backoff_max=0.5) as hook:
        kube.latency = 1.5
        bodies = [json.dumps(review(p)).encode()
                  for p in [worker_pod(j, 0) for j in jobs] + [plain]]

        def admit(body: bytes) -> float:
            with client_for(hook.server) as client:
                started = time.perf_counter()
                assert post(client, body).status_code == 200
                return time.perf_counter() - started

        with ThreadPoolExecutor(len(bodies)) as pool:
            seconds = list(pool.map(admit, bodies))
        kube.latency = 0.0
    assert max(seconds) < WEBHOOK_TIMEOUT_S, seconds
