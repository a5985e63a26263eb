"""CPU of one ConfigMap API call on the caller's thread: the official client's generated
methods vs gputopo/cluster/configmap_calls.py vs urllib3 alone, and decoding the answer.

Why: a new gang's reservation is ~3 x nodes + 2 such calls on the admitting thread; this
says how much of each is the generated method's machinery (pydantic validation of the
arguments, re-serialisation of headers, path and body), how much the HTTP stack (urllib3,
http.client), and how much decoding the JSON. The API test double runs in its own process
(its CPU does not count); ``time.thread_time`` of the calling thread, ``--count`` calls
each after 50 warm-up calls.

Run: ``python bench/configmap_call_cpu.py`` (~10 s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))

import orjson  # noqa: E402
import urllib3  # noqa: E402
from k8s_double import api_client, double_process  # noqa: E402
from kubernetes import client  # noqa: E402

from gputopo.cluster.configmap_calls import ConfigMapCalls  # noqa: E402

NS = "gputopo-system"


def per_call(call: Callable[[], Any], count: int) -> float:
    for _ in range(50):
        call()
    t = time.thread_time()
    for _ in range(count):
        call()
    return (time.thread_time() - t) * 1000 / count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000)
    args = ap.parse_args(argv)
    entry = json.dumps({"at": 1.7e9, "gang": "u" * 36, "state": "committed",
                        "token": "t" * 32}, sort_keys=True)
    ledger = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "gputopo-gpus-n-0123456789", "namespace": NS,
                           "labels": {"gputopo.io/reservation": "ledger",
                                      "app.kubernetes.io/managed-by": "gputopo"}},
              "data": {"node": "n", "0": entry, "1": entry}}
    with double_process() as kube:
        api = api_client(kube.url)
        core, calls = client.CoreV1Api(api), ConfigMapCalls(api, NS)
        name = ledger["metadata"]["name"]
        core.create_namespaced_config_map(NS, ledger)
        kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": 10.0}
        cur: dict[str, Any] = json.loads(core.read_namespaced_config_map(name, NS, **kw).data)

        def generated_put() -> None:
            cur.update(json.loads(core.replace_namespaced_config_map(name, NS, cur,
                                                                     **kw).data))

        def ours_put() -> None:
            cur.update(orjson.loads(calls.replace(name, cur, timeout=10.0)))

        url = f"{kube.url}/api/v1/namespaces/{NS}/configmaps/{name}"
        pool = api.rest_client.pool_manager
        headers = {"Accept": "application/json", **api.default_headers}
        timeout = urllib3.Timeout(total=10.0)
        raw = core.read_namespaced_config_map(name, NS, **kw).data
        rows = [
            ("GET, generated method + json.loads", lambda: json.loads(
                core.read_namespaced_config_map(name, NS, **kw).data)),
            ("GET, ConfigMapCalls + orjson.loads", lambda: orjson.loads(
                calls.read(name, timeout=10.0))),
            ("GET, urllib3 PoolManager alone + orjson.loads", lambda: orjson.loads(
                pool.request("GET", url, headers=headers, timeout=timeout,
                             preload_content=False).data)),
            ("PUT, generated method + json.loads", generated_put),
            ("PUT, ConfigMapCalls + orjson.loads", ours_put),
            ("decode a ledger: json.loads", lambda: json.loads(raw)),
            ("decode a ledger: orjson.loads", lambda: orjson.loads(raw)),
        ]
        print(f"{args.count} calls each; load average "
              f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        print("| call | CPU per call (ms) |\n|---|---:|")
        for label, call in rows:
            print(f"| {label} | {per_call(call, args.count):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
