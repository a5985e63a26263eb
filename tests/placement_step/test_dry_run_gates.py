"""Dry run = live: ``gputopo mutate`` on a cluster where the gang does not fit well shows
what the live webhook (a placement queue running) answers — the pods behind the scheduling
gate ``gputopo.io/placement``, the GPU env as downward-API references, the waiting record —
and ``-o table`` says "waits: <reason>". Compared pod for pod with the live webhook's
answer on the API test double for the same cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from placement_checks import admit, env, record
from placement_jobs import gang, mpijob, worker_pod
from test_placement_live import _wait, live_admitter

from gputopo import names
from gputopo.cluster.demo import demo_cluster_path
from gputopo.yamlio import dump_documents, load_documents

NODE_A = "cn-shanghai.192.168.16.172"
NODE_B = "cn-shanghai.192.168.16.173"


def _busy(name: str, node: str, gpus: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {names.GPU_GROUP_ANNOTATION: gpus}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


#: The demo's two DGX-1 nodes with 12 of 16 GPUs busy: free A:6,7 and B:6,7, two per node,
#: so a 4 x 1-GPU gang would run at ~3 % of its best (one NVLink quad).
BUSY = [_busy("busy-a", NODE_A, "0,1,2,3,4,5"), _busy("busy-b", NODE_B, "0,1,2,3,4,5")]


def _cluster(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_documents([*load_documents(demo_cluster_path()), *BUSY]))
    return path


def _gated(pod: dict[str, Any]) -> bool:
    return {"name": names.PLACEMENT_GATE} in (pod["spec"].get("schedulingGates") or [])


def _without_time(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod with its record's ``since`` (the admission's clock) left out."""
    out = json.loads(json.dumps(pod))
    rec = json.loads(out["metadata"]["annotations"][names.PLACEMENT_ANNOTATION])
    rec.pop("since")
    out["metadata"]["annotations"][names.PLACEMENT_ANNOTATION] = rec
    return out


def test_mutate_gates_a_gang_that_does_not_fit_as_the_live_webhook_does(mutate, tmp_path,
                                                                         kube):
    job = mpijob("waiter")
    result = mutate(gang(job), cluster=_cluster(tmp_path))
    assert result.rc == 0, result.stderr
    dry = [result.pods[f"waiter-worker-{i}"] for i in range(4)]
    for pod in dry:
        assert _gated(pod)
        assert "affinity" not in pod["spec"] and "nodeName" not in pod["spec"]
        rec = record(pod)
        assert rec["placed"] is False and rec["waiting"] is True
        assert "a good placement gives" in rec["reason"]
        (c,) = pod["spec"]["containers"]
        refs = {e["name"]: e for e in c["env"] if e["name"] in (
            names.NVIDIA_VISIBLE_DEVICES_ENV, names.CUDA_VISIBLE_DEVICES_ENV)}
        assert len(refs) == 2 and all("value" not in e and e["valueFrom"]["fieldRef"]
                                      for e in refs.values())
        assert env(c)[names.NVIDIA_VISIBLE_DEVICES_ENV] is None  # no literal value at all
    assert "waits for a placement" in result.stderr

    for obj in (*load_documents(demo_cluster_path()), *BUSY):
        kube.apply(obj)
    with live_admitter(kube, can_wait=True) as (admitter, view):
        assert _wait(lambda: sum(len(n.used) for n in view.node_states()) == 12)
        live_job = kube.apply(json.loads(json.dumps(job)))
        live = [admit(admitter, worker_pod(live_job, i)) for i in range(4)]
    # the dry run makes up the job's uid; the double gave the live job its own
    dry_uid = dry[0]["metadata"]["ownerReferences"][0]["uid"]
    live_text = json.dumps(live).replace(live_job["metadata"]["uid"], dry_uid)
    assert [_without_time(p) for p in dry] == [_without_time(p)
                                               for p in json.loads(live_text)]


def test_mutate_table_says_waits_and_why(tmp_path, capsys):
    from gputopo.cli import main

    path = tmp_path / "job.yaml"
    path.write_text(dump_documents(gang(mpijob("waiter"))))
    assert main(["mutate", "--cluster", str(_cluster(tmp_path)), "-o", "table",
                 str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["POD", "NODE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    for i in range(4):
        row = rows[f"default/waiter-worker-{i}"]
        assert row.split()[1:4] == ["-", "-", "-"]  # no node, no GPUs, no bandwidth
        note = row.split("waits: ", 1)[1]
        assert note.startswith("best free now gives 0.8 GB/s bus bandwidth (2 node(s)); "
                               "a good placement gives"), row
