"""One webhook process for the multi-process placement tests (run as a script).

It builds the real Admitter (``webhook.assembly.build_admitter``) with the placement step on
a :class:`KubernetesReservationStore` talking to the Kubernetes API TEST DOUBLE at ``--api``,
prints ``{"ready": true}``, waits for a line on stdin, admits the pods of a YAML file as
AdmissionReview bodies in file order, and prints one JSON line per pod (``pod``, ``allowed``,
``placed``, ``node``, ``gpus``, ``job``, ``reason``), then ``{"done": true}``. With
``--hang`` it then waits to be killed (a webhook dying mid-gang).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path

import jsonpatch

from gputopo import names
from gputopo.cluster.demo import demo_snapshot
from gputopo.cluster.k8s_reservations import KubernetesReservationStore
from gputopo.yamlio import load_documents
from webhook.assembly import build_admitter
from webhook.dryrun import review_body
from webhook.placement.step import PlacementStep

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the k8s double
from k8s_double import api_client


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("inputs", type=Path)
    args = ap.parse_args(argv)

    docs = load_documents(args.inputs)
    cluster = demo_snapshot()
    for obj in docs:
        if obj["kind"] != "Pod":
            cluster.add(obj)
    store = KubernetesReservationStore(api_client(args.api))
    admitter = build_admitter(None, cluster, placement=PlacementStep(store), reload_interval_s=0)
    pods = [d for d in docs if d["kind"] == "Pod"]
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()  # "go": both processes start admitting at the same moment
    started = time.perf_counter()
    for i, pod in enumerate(pods):
        status, body = admitter.handle_body(review_body(pod, f"{args.inputs.name}-{i}"))
        response = body["response"]
        patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        out = jsonpatch.apply_patch(pod, patch)
        ann = out["metadata"].get("annotations") or {}
        record = json.loads(ann.get(names.PLACEMENT_ANNOTATION, "null"))
        print(json.dumps({
            "pod": pod["metadata"]["name"], "status": status, "allowed": response["allowed"],
            "placed": bool(record and record.get("placed")),
            "node": record.get("node") if record else None,
            "gpus": record.get("gpus") if record else None,
            "job": record.get("job") if record else None,
            "reason": record.get("reason") if record else None,
        }), flush=True)
    print(json.dumps({"done": True, "store": dict(store.stats),
                      "seconds": round(time.perf_counter() - started, 3)}), flush=True)
    admitter.close()
    if args.hang:
        time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
