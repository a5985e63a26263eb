"""The real pipeline behind the real server: the ACK PyTorch seed admitted over HTTPS."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import httpx
import jsonpatch
from serverkit import TEST_MAX_BODY, admission_review, requests_total, scrape

from gputopo import names


def patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with the response's JSON patch applied, as the API server would."""
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(copy.deepcopy(pod), patch)


def test_seed_pod_is_mutated_over_https(
    real_client: httpx.Client, seed_pods: dict[str, dict[str, Any]]
) -> None:
    pod = seed_pods["pytorch-dist-nccl-master-0"]
    before = scrape(real_client)
    answer = real_client.post("/mutate", json=admission_review(pod, "uid-master-1"))
    assert answer.status_code == 200
    review = answer.json()
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    response = review["response"]
    assert response["uid"] == "uid-master-1"
    assert response["allowed"] is True
    mutated = patched(pod, response)
    labels = mutated["metadata"]["labels"]
    assert labels[names.GANG_LABEL] == "pytorch-dist-nccl"
    assert labels[names.GANG_REPLICA_LABEL] == "2"
    assert mutated["spec"]["hostNetwork"] is True
    limits = mutated["spec"]["containers"][0]["resources"]["limits"]
    assert names.TOPOLOGY_GPU_RESOURCE in limits
    assert names.SOURCE_GPU_RESOURCE not in limits

    after = scrape(real_client)
    # Counted once (by the pipeline), timed once (by the server).
    assert requests_total(after, "mutated") == requests_total(before, "mutated") + 1
    count = ("gputopo_admission_duration_seconds_count", ())
    assert after[count] == before.get(count, 0.0) + 1
    assert any(name == "gputopo_mutations_total" for name, _ in after)

    again = real_client.post("/mutate", json=admission_review(mutated, "uid-master-2"))
    assert again.status_code == 200
    assert patched(mutated, again.json()["response"]) == mutated  # idempotent


def test_bad_input_is_400_counted_once(real_client: httpx.Client) -> None:
    cases = [
        b"{not json",
        b"\xff\xfe\x00junk",
        json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {"operation": "CREATE"}}),
    ]
    for body in cases:
        before = requests_total(scrape(real_client), "bad_request")
        answer = real_client.post("/mutate", content=body)
        assert answer.status_code == 400, body
        assert isinstance(answer.json()["error"], str) and answer.json()["error"]
        assert requests_total(scrape(real_client), "bad_request") == before + 1


def test_oversized_review_is_400_before_the_pipeline(
    real_client: httpx.Client, seed_pods: dict[str, dict[str, Any]]
) -> None:
    pod = copy.deepcopy(seed_pods["pytorch-dist-nccl-worker-0"])
    pod["metadata"]["annotations"]["padding"] = "x" * TEST_MAX_BODY
    before = scrape(real_client)
    answer = real_client.post("/mutate", json=admission_review(pod, "uid-big"))
    assert answer.status_code == 400
    assert "exceeds the limit" in answer.json()["error"]
    after = scrape(real_client)
    assert requests_total(after, "bad_request") == requests_total(before, "bad_request") + 1
    assert real_client.get("/healthz").status_code == 200


def test_real_server_is_ready(real_client: httpx.Client) -> None:
    assert real_client.get("/readyz").status_code == 200
