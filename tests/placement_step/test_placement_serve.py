"""Two real ``gputopo serve`` processes on one (test double) Kubernetes API, over HTTPS.

Each server finds the API through a kubeconfig (exactly as on a laptop), watches it with
its live ClusterView and keeps gang reservations in it (KubernetesReservationStore).
Two client threads — one per server, as the API server would spread webhook calls over
replicas — admit the pods of the SAME gangs at the same time. No GPU may be handed out
twice, every placed gang must be whole and recorded in the API.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter

import httpx
import pytest
from placement_jobs import mpijob, worker_pod

from gputopo import names
from gputopo.certs import write_serving_certs
from gputopo.cluster.demo import demo_cluster_path
from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.yamlio import load_documents
from tests.k8s_double.client import write_kubeconfig
from webhook.dryrun import review_body

_kubeconfig = write_kubeconfig


@pytest.fixture
def jobs(kube):
    """The demo cluster's nodes and six 4 x 1-GPU MPIJobs, in the API before serve starts."""
    for obj in load_documents(demo_cluster_path()):
        kube.apply(obj)
    return [kube.apply(mpijob(f"srv-{k}", workers=4, gpus=1)) for k in range(6)]


@pytest.fixture
def servers(kube, jobs, tmp_path):
    """Two ``gputopo serve`` processes with a kubeconfig for the double, ready (policies
    loaded and the first list of the cluster in); their base URLs and the CA file."""
    certs = tmp_path / "certs"
    write_serving_certs(certs, extra_dns=("localhost", "127.0.0.1"), days=1)
    env = dict(os.environ, KUBECONFIG=str(_kubeconfig(tmp_path / "kubeconfig", kube.url)))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "gputopo", "serve", "--host", "127.0.0.1", "--port", "0",
         "--cert-dir", str(certs)], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(2)]
    urls = []
    try:
        for p in procs:
            for line in p.stderr:
                found = re.search(r"serving https://127\.0\.0\.1:(\d+)", line)
                if found:
                    urls.append(f"https://127.0.0.1:{found.group(1)}")
                    break
            else:
                pytest.fail(f"serve exited: {p.wait()}")
            threading.Thread(target=p.stderr.read, daemon=True).start()  # keep the pipe empty
        ca = str(certs / "ca.crt")
        for url in urls:
            deadline = time.monotonic() + 20
            while not _ready(url, ca):
                assert time.monotonic() < deadline, f"{url} never became ready"
                time.sleep(0.1)
        yield urls, ca
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=10)


def _trust(ca: str) -> ssl.SSLContext:
    """A client context trusting only our CA (httpx deprecates ``verify=<path>``)."""
    return ssl.create_default_context(cafile=ca)


def _ready(url: str, ca: str) -> bool:
    """``/readyz`` answers 200 (the socket may be bound a moment before it accepts)."""
    try:
        return httpx.get(f"{url}/readyz", verify=_trust(ca)).status_code == 200
    except httpx.TransportError:
        return False


def _admit_all(url: str, ca: str, pods: list[dict], out: list[dict]) -> None:
    with httpx.Client(verify=_trust(ca), timeout=30) as http:
        for i, pod in enumerate(pods):
            r = http.post(f"{url}/mutate", content=review_body(pod, f"{url}-{i}"))
            response = r.json()["response"]
            patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
            ann = next((op["value"] for op in patch if op["path"] == "/metadata/annotations"),
                       {})
            rec = json.loads(ann.get(names.PLACEMENT_ANNOTATION, "null"))
            out.append({"pod": pod["metadata"]["name"], "status": r.status_code,
                        "allowed": response["allowed"], "record": rec})


def test_two_serve_processes_share_gangs_without_double_allocation(kube, jobs, servers):
    (a_url, b_url), ca = servers
    a_pods = [worker_pod(j, i) for i in (0, 1) for j in jobs]
    b_pods = [worker_pod(j, i) for i in (2, 3) for j in jobs]
    a_out: list[dict] = []
    b_out: list[dict] = []
    threads = [threading.Thread(target=_admit_all, args=(a_url, ca, a_pods, a_out)),
               threading.Thread(target=_admit_all, args=(b_url, ca, b_pods, b_out))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    results = a_out + b_out
    assert len(results) == 24 and all(r["status"] == 200 and r["allowed"] for r in results)
    assert all(r["record"] is not None for r in results), "every GPU pod gets a record"
    placed = [r["record"] for r in results if r["record"]["placed"]]
    held = Counter((r["node"], g) for r in placed for g in r["gpus"])
    doubles = sum(n - 1 for n in held.values() if n > 1)

    from k8s_double import api_client

    stored = {f"MPIJob {r.key.namespace}/{r.key.name}": r
              for r in KubernetesReservationStore(api_client(kube.url)).list()}
    lost = 0  # placed pods whose slot the gang's reservation in the API does not record
    for r in placed:
        res = stored.get(r["job"])
        lost += res is None or (r["node"], tuple(r["gpus"])) not in {
            (s.node, s.gpus) for s in res.assignments.values()}
    gangs = Counter(r["job"] for r in placed)
    print(f"\ntwo gputopo serve: placed={len(placed)} gangs={len(gangs)} GPUs={len(held)} "
          f"double-allocated={doubles} lost={lost}")
    assert doubles == 0 and lost == 0
    assert all(n == 4 for n in gangs.values()), gangs
    assert len(gangs) == 4 and len(held) == 16


def test_serve_runs_one_queue_that_places_a_waiting_gang_when_gpus_free(kube, jobs, servers):
    """``gputopo serve`` on a live cluster gates a gang that does not fit and its queue
    (one of the two processes, elected by the Lease) places it when a job is deleted."""
    import jsonpatch

    (a_url, _b_url), ca = servers
    created: dict[str, dict] = {}
    with httpx.Client(verify=_trust(ca), timeout=30) as http:
        for job in jobs[:5]:  # 4 gangs fill the 16 GPUs, the 5th waits
            for i in range(4):
                pod = worker_pod(job, i)
                r = http.post(f"{a_url}/mutate", content=review_body(pod, f"q-{i}"))
                response = r.json()["response"]
                patch = json.loads(base64.b64decode(response["patch"]))
                created[pod["metadata"]["name"]] = kube.apply(jsonpatch.apply_patch(pod, patch))
    gate = names.PLACEMENT_GATE
    waiting = [p for p in created.values()
               if any(g["name"] == gate for g in p["spec"].get("schedulingGates") or [])]
    assert sorted(p["metadata"]["name"] for p in waiting) == [
        f"srv-4-worker-{i}" for i in range(4)]
    freed = {(json.loads(p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])["node"],
              g) for name, p in created.items() if name.startswith("srv-0-")
             for g in json.loads(p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])[
                 "gpus"]}
    for name, pod in created.items():  # srv-0 finishes and is deleted, with its pods
        if name.startswith("srv-0-"):
            kube.remove(pod)
    kube.remove(jobs[0])

    def released() -> list[dict]:
        pods = [p for p in kube.objects("v1", "Pod")
                if p["metadata"]["name"].startswith("srv-4-")]
        return [p for p in pods if not p["spec"].get("schedulingGates")]

    deadline = time.monotonic() + 30
    while len(released()) < 4:
        assert time.monotonic() < deadline, "the queue did not place the waiting gang"
        time.sleep(0.2)
    recs = [json.loads(p["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
            for p in released()]
    assert all(r["placed"] for r in recs)
    assert {(r["node"], g) for r in recs for g in r["gpus"]} == freed
    (lease,) = kube.objects("coordination.k8s.io/v1", "Lease")
    assert {r["queue"]["by"] for r in recs} == {lease["spec"]["holderIdentity"]}
