"""End-to-end harness: a job file as a user writes it, through the real API server admission
and the real kube-scheduler, with gputopo deployed as ``gputopo generate`` writes it.

Why: our other tests stop at our own HTTPS answer. Whether the API server accepts what we
patch (defaulting after the patch, validation, Pod Security), and whether kube-scheduler
with the generated profile and the PodGroups binds each pod on the node gputopo pinned,
only the upstream code can say. ``../shared/k8s`` holds it as programs (its README is their
contract): ``admitcheck`` (the pod CREATE path, calling our webhook over HTTPS),
``podupdatecheck`` (pod UPDATE validation), ``schedsim`` / ``schedsim136`` (the scheduler).

The flow, as in a cluster:

1. the job file is expanded into the objects its operators create
   (:func:`webhook.dryrun.read_inputs`, what ``gputopo mutate`` does);
2. the Kubernetes API TEST DOUBLE (``tests/k8s_double``) holds the Nodes, the Namespace,
   the jobs and their controllers' objects (each given its uid by the double, as the API
   server does) and, once admitted, the Pods: it stands in for the API server's storage
   and watch, which the ``admitcheck`` program does not have;
3. ``gputopo serve`` runs as a process over TLS on loopback with a kubeconfig for the
   double: its live view, its reservations (ConfigMaps), the PodGroups it creates and its
   placement queue are the real ones;
4. each Pod goes through ``admitcheck`` with the generated MutatingWebhookConfiguration
   (caBundle = the test CA), in creation order, and the admitted Pod is stored;
5. ``schedsim`` binds the admitted Pods with the generated KubeSchedulerConfiguration and
   the PodGroups read back from the double, on the same Nodes.

For the DRA scenarios (1.36): :func:`admit` / :func:`admit_and_store` take
``program="admitcheck136"``, and :func:`schedule` takes nodes, other objects
(DeviceClasses, ResourceSlices, ResourceClaim(Template)s: ``--objects``) and pods with
``program="schedsim136"``; :func:`assert_bound_where_pinned` checks the result.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gputopo import names
from gputopo.platforms import gather_policies, platform
from webhook.assembly import default_policies_dir
from webhook.dryrun import read_inputs

REPO = Path(__file__).resolve().parents[2]
PODGROUP_API = f"{names.POD_GROUP_API_GROUP}/{names.POD_GROUP_VERSION}"
#: How long a scheduler run may take for a pod that never binds (the run costs all of it).
SCHED_TIMEOUT = "8s"


def gputopo(*args: str, env: Mapping[str, str] | None = None) -> str:
    """``python -m gputopo ARGS`` of this tree; its stdout. A failure fails the test."""
    p = subprocess.run([sys.executable, "-m", "gputopo", *args], capture_output=True,
                       text=True, env=dict(env or os.environ), cwd=REPO, timeout=120)
    assert p.returncode == 0, f"gputopo {' '.join(args)}: exit {p.returncode}\n{p.stderr}"
    return p.stdout


def dump(path: Path, objs: Iterable[Mapping[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all([dict(o) for o in objs], sort_keys=False))
    return path


# ---------------------------------------------------------------- the programs


@dataclass(frozen=True)
class Programs:
    """The directory of the real-Kubernetes programs."""

    bin: Path

    def run(self, program: str, *args: str | Path, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / program), *map(str, args)], capture_output=True,
                              text=True, timeout=timeout)


SKIP_REASON = ("real-Kubernetes programs not available: set GPUTOPO_K8S_BIN to a directory "
               "holding admitcheck/schedsim/podupdatecheck, or provide ../shared/k8s/install.sh")


@functools.cache
def find_programs() -> Path | str:
    """The directory of admitcheck, schedsim, podupdatecheck, ... (../shared/k8s/README.md):
    ``$GPUTOPO_K8S_BIN``, else what ``../shared/k8s/install.sh`` prints; else why not."""
    if d := os.environ.get("GPUTOPO_K8S_BIN"):
        if not (Path(d) / "admitcheck").exists():
            return f"GPUTOPO_K8S_BIN={d} holds no admitcheck"
        return Path(d)
    install = REPO.parent / "shared" / "k8s" / "install.sh"
    if not install.is_file():
        return SKIP_REASON
    p = subprocess.run(["bash", str(install)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return f"real-Kubernetes programs did not install: {p.stderr.strip()}"
    return Path(p.stdout.strip())


# ---------------------------------------------------------------- gputopo as deployed


@dataclass(frozen=True)
class Deployment:
    """What ``gputopo generate`` writes for one platform, ready for the programs."""

    platform: str
    certs: Path  #: ca.crt, tls.crt, tls.key (``generate certs``)
    webhooks: Path  #: the MutatingWebhookConfiguration, caBundle = the test CA
    scheduler_config: Path  #: ``generate scheduler-config`` for the platform's GPU resource
    policies: Path  #: the platform's policies, as its ConfigMap ships them
    gpu_resource: str
    #: the cluster's own kube-scheduler: upstream defaults, profile ``default-scheduler``
    default_scheduler_config: Path


def make_deployment(work: Path, name: str) -> Deployment:
    """``generate certs``, ``generate manifests --platform NAME --failure-policy Fail`` (a
    webhook that fails must fail the test, not be skipped) and ``generate scheduler-config``;
    the MutatingWebhookConfiguration gets the CA as cert-manager would inject it."""
    plat = platform(name)
    base = work / name
    certs, manifests = base / "certs", base / "manifests"
    base.mkdir(parents=True)
    gputopo("generate", "certs", "-o", str(certs))
    gputopo("generate", "manifests", "--platform", name, "--failure-policy", "Fail",
            "-o", str(manifests))
    mwcs = [d for d in yaml.safe_load_all((manifests / "webhook-configuration.yaml").read_text())
            if d and d.get("kind") == "MutatingWebhookConfiguration"]
    assert len(mwcs) == 1, "generate manifests wrote one MutatingWebhookConfiguration"
    ca = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    for hook in mwcs[0]["webhooks"]:
        hook["clientConfig"]["caBundle"] = ca
    webhooks = dump(base / "mwc.yaml", mwcs)
    sched = base / "scheduler.yaml"
    gputopo("generate", "scheduler-config", "--gpu-resource", plat.gpu_resource,
            "-o", str(sched))
    policies = base / "policies"
    policies.mkdir()
    gather_policies(default_policies_dir(), plat.policies, policies)
    default = dump(base / "default-scheduler.yaml", [{
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False}}])
    return Deployment(name, certs, webhooks, sched, policies, plat.gpu_resource, default)


#: The scheduler-plugins plugins of the generated profile (the gang: Coscheduling).
SCHEDULER_PLUGINS = frozenset({"Coscheduling"})


def in_tree_profile(deployment: Deployment, work: Path) -> Path:
    """The generated KubeSchedulerConfiguration as ``schedsim136`` can run it: the 1.36
    in-tree scheduler has no scheduler-plugins, so Coscheduling is taken out of every
    extension point (queueSort then falls back to the default PrioritySort) and its args
    dropped; the rest (the profile's name, NodeResourcesFit's MostAllocated scoring, the
    scoring plugins turned off, and DynamicResources, which the profile never disables) is
    as generated. The gang itself (Permit on the PodGroup) is checked by ``schedsim`` 1.30
    in the other scenarios; here the PodGroups are checked in the double."""
    config = yaml.safe_load(deployment.scheduler_config.read_text())
    config["leaderElection"] = {"leaderElect": False}
    for profile in config["profiles"]:
        plugins = profile.get("plugins") or {}
        for point in list(plugins):
            entry = plugins[point]
            enabled = [p for p in entry.get("enabled") or []
                       if p["name"] not in SCHEDULER_PLUGINS]
            disabled = entry.get("disabled") or []
            if not enabled and [d["name"] for d in disabled] == ["*"]:
                disabled = []  # only there to let Coscheduling replace the default
            entry = {k: v for k, v in (("enabled", enabled), ("disabled", disabled)) if v}
            if entry:
                plugins[point] = entry
            else:
                del plugins[point]
        profile["pluginConfig"] = [c for c in profile.get("pluginConfig") or []
                                   if c["name"] not in SCHEDULER_PLUGINS]
    return dump(work / "scheduler-136.yaml", [config])


@dataclass
class Served:
    """A running ``gputopo serve``: its port and its stderr so far."""

    port: int
    log: Path

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def _ready(port: int, ca: Path) -> bool:
    """``/readyz`` says 200: policies loaded and the view's first list in. (The serving
    certificate names the Service, as in a cluster; admitcheck checks that name, this probe
    only the CA.)"""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as raw, \
                ctx.wrap_socket(raw) as tls:
            tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return tls.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


@contextmanager
def serve(deployment: Deployment, kube_url: str, work: Path) -> Iterator[Served]:
    """``gputopo serve --cert-dir ... --policies ...`` on a free loopback port, with a
    kubeconfig for the API double at ``kube_url``; ready when yielded, stopped after."""
    from k8s_double.client import write_kubeconfig

    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, KUBECONFIG=str(write_kubeconfig(work / "kubeconfig", kube_url)),
               PYTHONPATH=str(REPO))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = work / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gputopo", "serve", "--host", "127.0.0.1", "--port", "0",
             "--cert-dir", str(deployment.certs), "--policies", str(deployment.policies)],
            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=REPO)
    served = Served(0, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (
                f"gputopo serve exited {proc.returncode}:\n{served.stderr()}")
            assert time.monotonic() < deadline, f"gputopo serve not ready:\n{served.stderr()}"
            if not served.port and (m := re.search(r"serving https://127\.0\.0\.1:(\d+)",
                                                   served.stderr())):
                served.port = int(m.group(1))
            if served.port and _ready(served.port, deployment.certs / "ca.crt"):
                break
            time.sleep(0.1)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- jobs and their objects


def expand_job_files(files: Sequence[Path], *, namespace: str = "default"
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pods in creation order, the other objects: jobs and their controllers' objects),
    as ``gputopo mutate`` expands a job file."""
    pods, others = read_inputs(list(files), namespace=namespace)
    return [p.pod for p in pods], others


def store_owners(kube: Any, objects: Sequence[Mapping[str, Any]],
                 pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Store ``objects`` (a job, then what its controllers create) in the double in order,
    each given its uid by the double as the API server gives it; every later reference to
    the made-up uid (ownerReferences, ``controller-uid`` labels and selectors, JobSet's
    ``jobset-uid``) is made to name the real one. Returns the pods, references fixed."""
    uids: dict[str, str] = {}

    def fixed(obj: Mapping[str, Any]) -> dict[str, Any]:
        text = json.dumps(obj)
        for made, real in uids.items():
            text = text.replace(made, real)
        return json.loads(text)

    for obj in objects:
        body = fixed(obj)
        made = body["metadata"].pop("uid", None)
        body["metadata"].pop("resourceVersion", None)
        stored = kube.apply(body)
        if made:
            uids[made] = stored["metadata"]["uid"]
    return [fixed(p) for p in pods]


def namespace(name: str = "default", **labels: str) -> dict[str, Any]:
    """An opted-in Namespace (PodSecurity: privileged, the default, unless a label says)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {names.INJECT_LABEL: names.INJECT_VALUE,
                                                  **labels}}}


def running_pod(name: str, node: str, gpus: Sequence[int], *, resource: str,
                ns: str = "default") -> dict[str, Any]:
    """A pod already running on ``node`` holding ``gpus`` (its gpu-group annotation, as the
    device plugin hands them out) and requesting that many of ``resource``."""
    n = str(len(gpus))
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "annotations": {
                names.GPU_GROUP_ANNOTATION: ",".join(map(str, gpus))}},
            "spec": {"nodeName": node, "containers": [{
                "name": "c", "image": "busybox",
                "resources": {"limits": {resource: n}, "requests": {resource: n}}}]},
            "status": {"phase": "Running"}}


# ---------------------------------------------------------------- admission


def admit(programs: Programs, deployment: Deployment, served: Served,
          ns: Mapping[str, Any], pod: Mapping[str, Any], work: Path, *,
          program: str = "admitcheck") -> dict[str, Any]:
    """The pod through ``admitcheck`` (defaulting, our webhook over HTTPS, validation, Pod
    Security); the admitted pod. Anything but exit 0 fails the test with the message.
    ``program``: ``admitcheck136`` for pods 1.30 cannot hold (DRA ``resourceClaims``)."""
    work.mkdir(parents=True, exist_ok=True)
    label = pod["metadata"].get("name") or pod["metadata"].get("generateName")
    pod_file = dump(work / f"{label}.pod.yaml", [pod])
    ns_file = dump(work / f"{ns['metadata']['name']}.ns.yaml", [ns])
    p = programs.run(program, "--webhooks", deployment.webhooks, "--namespace", ns_file,
                     "--pod", pod_file, "--service-addr", served.addr)
    assert p.returncode == 0, (f"{program} {label}: exit {p.returncode}\n{p.stderr}\n"
                               f"--- gputopo serve:\n{served.stderr()[-3000:]}")
    assert "Failed calling webhook" not in p.stderr, p.stderr
    return yaml.safe_load(p.stdout)


def admit_and_store(programs: Programs, deployment: Deployment, served: Served, kube: Any,
                    ns: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], work: Path, *,
                    program: str = "admitcheck") -> list[dict[str, Any]]:
    """Each pod admitted in creation order and stored in the double (as the API server
    stores it), so the webhook's live view sees it for the next one; the stored pods."""
    stored = []
    for pod in pods:
        admitted = admit(programs, deployment, served, ns, pod, work, program=program)
        admitted["metadata"].pop("creationTimestamp", None)
        stored.append(kube.apply(admitted))
    return stored


def pod_groups(kube: Any) -> list[dict[str, Any]]:
    """The PodGroups in the double: the webhook's (policy ``podGroup: create``) and any an
    operator made."""
    return kube.objects(PODGROUP_API, "PodGroup")


def check_update(programs: Programs, old: Mapping[str, Any], new: Mapping[str, Any],
                 work: Path, *, program: str = "podupdatecheck") -> None:
    """``podupdatecheck``: the API server accepts ``new`` as an update of ``old``.
    ``program``: ``podupdatecheck136`` for pods 1.30 cannot hold (DRA)."""
    work.mkdir(parents=True, exist_ok=True)
    name = old["metadata"]["name"]
    p = programs.run(program, "--old", dump(work / f"{name}.old.yaml", [old]),
                     "--new", dump(work / f"{name}.new.yaml", [new]))
    assert p.returncode == 0 and p.stdout.strip() == "OK", (
        f"{program} {name}: exit {p.returncode}\n{p.stdout}{p.stderr}")


# ---------------------------------------------------------------- scheduling


def schedule(programs: Programs, *, nodes: Sequence[Mapping[str, Any]],
             pods: Sequence[Mapping[str, Any]], objects: Sequence[Mapping[str, Any]] = (),
             config: Path | None, work: Path, program: str = "schedsim",
             timeout: str = SCHED_TIMEOUT, sequential: bool = False,
             settle: str | None = None) -> dict[str, dict[str, Any]]:
    """Bind ``pods`` on ``nodes`` with the real scheduler; ``{"ns/name": result}``.

    ``program``: ``schedsim`` (1.30 + scheduler-plugins: ``objects`` are PodGroups, given
    with the pods) or ``schedsim136`` (1.36 with DRA: ``objects`` are DeviceClasses,
    ResourceSlices, ResourceClaim(Template)s, PodGroups/Workloads, given as ``--objects``).
    Pods with ``spec.nodeName`` are already running there. ``settle`` (schedsim136 only):
    how long a run whose pods are all Bound, Unschedulable or Gated waits for more (its
    default 3s; a gated pod is never tried, so a run that expects gates can pass less)."""
    work.mkdir(parents=True, exist_ok=True)
    if program == "schedsim":
        pods = [_assigned(p) if p["spec"].get("nodeName") else p for p in pods]
    nodes_file = dump(work / "nodes.yaml", nodes)
    args: list[str | Path] = ["--nodes", nodes_file, "--timeout", timeout, "-o", "json"]
    if program == "schedsim136":
        args += ["--pods", dump(work / "pods.yaml", pods)]
        if objects:
            args += ["--objects", dump(work / "objects.yaml", objects)]
        if settle is not None:
            args += ["--settle", settle]
    else:
        args += ["--pods", dump(work / "pods.yaml", [*objects, *pods])]
    if config is not None:
        args += ["--config", config]
    if sequential:
        args.append("--sequential")
    p = programs.run(program, *args)
    assert p.returncode == 0, f"{program}: exit {p.returncode}\n{p.stderr[-4000:]}"
    results = {r["pod"]: r for r in json.loads(p.stdout)}
    for pod in pods:  # already there: Bound, as schedsim136 reports such a pod
        if pod["spec"].get("nodeName"):
            results[key(pod)] = {"pod": key(pod), "status": "Bound",
                                 "node": pod["spec"]["nodeName"], "reason": ""}
    return results


#: The schedulerName a pod already on a node gets for ``schedsim`` 1.30: no profile has it,
#: so the run does not wait for that pod (it would, until --timeout, for a pod of its own
#: profile that it never binds); the scheduler still counts it on its node, whatever the
#: name (its cache takes every pod with ``spec.nodeName``).
ASSIGNED_SCHEDULER = "e2e-already-on-its-node"


def _assigned(pod: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    out["spec"]["schedulerName"] = ASSIGNED_SCHEDULER
    return out


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pod's required node affinity names (``metadata.name In [node]``)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    found = {v for term in required.get("nodeSelectorTerms") or []
             for req in term.get("matchFields") or []
             if req.get("key") == "metadata.name" and req.get("operator") == "In"
             for v in req.get("values") or []}
    assert len(found) <= 1, f"pinned to several nodes: {found}"
    return next(iter(found), None)


def placement(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        names.PLACEMENT_ANNOTATION)
    return json.loads(raw) if raw else None


def gpu_group(pod: Mapping[str, Any]) -> list[int]:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        names.GPU_GROUP_ANNOTATION, "")
    return [int(g) for g in raw.split(",") if g.strip()]


def key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace') or 'default'}/{pod['metadata']['name']}"


def assert_bound_where_pinned(results: Mapping[str, Mapping[str, Any]],
                              pods: Sequence[Mapping[str, Any]],
                              running: Sequence[Mapping[str, Any]] = ()) -> dict[str, str]:
    """Every pod of ``pods`` is Bound; a GPU pod gputopo placed is bound on the node of its
    placement record, which its required node affinity names; no GPU index is given twice
    on a node (``running`` pods' GPUs included). Returns pod key -> node."""
    nodes: dict[str, str] = {}
    for pod in pods:
        result = results[key(pod)]
        assert result["status"] == "Bound", f"{key(pod)}: {result}"
        nodes[key(pod)] = result["node"]
        record = placement(pod)
        if record is not None and record.get("placed"):
            assert pinned_node(pod) == record["node"], f"{key(pod)}: affinity vs record"
            assert result["node"] == record["node"], (
                f"{key(pod)} bound on {result['node']}, gputopo pinned {record['node']}")
            assert gpu_group(pod) == list(record["gpus"]), key(pod)
    held: dict[tuple[str, int], str] = {}
    for pod in [*running, *pods]:
        node = pod["spec"].get("nodeName") or nodes.get(key(pod))
        for gpu in gpu_group(pod):
            other = held.setdefault((str(node), gpu), key(pod))
            assert other == key(pod), f"GPU {gpu} of {node} given to {other} and {key(pod)}"
    return nodes


def placed(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The placement records of the pods gputopo placed."""
    return [r for p in pods if (r := placement(p)) is not None and r.get("placed")]


def without_status(pod: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    out.pop("status", None)
    return out


# ---------------------------------------------------------------- one scenario


DEMO_CLUSTER = REPO / "gputopo" / "cluster" / "data" / "demo-cluster.yaml"


#: What every kubelet reports besides cpu and memory, where a cluster file leaves it out.
#: gputopo reads a missing one as unknown (``gputopo.cluster.node_resources``,
#: ``KUBELET_RESOURCES``); the scheduler as zero ("Insufficient ephemeral-storage" for the
#: MPIJob v1 launcher's kubectl-delivery), so the nodes both see carry it, as in a cluster.
KUBELET_ALLOCATABLE = {"ephemeral-storage": "400Gi", "pods": "110"}


def nodes_of(cluster_file: Path) -> list[dict[str, Any]]:
    """The Nodes of a cluster file as the API server would return them (the same the
    server and the scheduler see): ``status.allocatable`` completed with what every kubelet
    reports (:data:`KUBELET_ALLOCATABLE`)."""
    nodes = [d for d in yaml.safe_load_all(cluster_file.read_text())
             if d and d.get("kind") == "Node"]
    for node in nodes:
        allocatable = node.setdefault("status", {}).setdefault("allocatable", {})
        for resource, value in KUBELET_ALLOCATABLE.items():
            allocatable.setdefault(resource, value)
    return nodes


@dataclass
class Run:
    """What one scenario produced: the pods as admitted and stored, the PodGroups, the
    scheduler's results by pod key."""

    pods: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    results: dict[str, dict[str, Any]]
    nodes: dict[str, str]  #: pod key -> node it was bound on


def admit_jobs(programs: Programs, deployment: Deployment, kube: Any, work: Path, *,
               nodes: Sequence[Mapping[str, Any]], job_files: Sequence[Path],
               running: Sequence[Mapping[str, Any]] = (), ns: str = "default"
               ) -> tuple[list[dict[str, Any]], Served]:
    """Seed the double (Namespace, Nodes, running pods, the jobs and their controllers'
    objects), start ``gputopo serve`` on it, admit every pod in creation order, each stored
    once admitted. Returns the stored pods and the (stopped) server's log."""
    ns_obj = namespace(ns)
    kube.apply(ns_obj)
    for obj in [*nodes, *running]:
        kube.apply(obj)
    pods: list[dict[str, Any]] = []
    for f in job_files:
        made, owners = expand_job_files([f], namespace=ns)
        pods += store_owners(kube, owners, made)
    with serve(deployment, kube.url, work / "serve") as served:
        stored = admit_and_store(programs, deployment, served, kube, ns_obj, pods,
                                 work / "admit")
    return stored, served


def run_jobs(programs: Programs, deployment: Deployment, kube: Any, work: Path, *,
             cluster: Path = DEMO_CLUSTER, job_files: Sequence[Path],
             running: Sequence[Mapping[str, Any]] = ()) -> Run:
    """A job file (or several, admitted one after the other) from the user's YAML to bound
    pods: admitted through the real API server code to ``gputopo serve``, bound by the
    real scheduler with the generated profile and the PodGroups, on ``cluster``'s Nodes.
    Asserts every pod bound where gputopo pinned it, no GPU given twice."""
    nodes = nodes_of(cluster)
    stored, _ = admit_jobs(programs, deployment, kube, work, nodes=nodes,
                           job_files=job_files, running=running)
    groups = pod_groups(kube)
    results = schedule_all(programs, deployment, nodes=nodes, pods=[*running, *stored],
                           groups=groups, work=work / "sched")
    bound = assert_bound_where_pinned(results, stored, running)
    return Run(stored, groups, results, bound)


def schedule_all(programs: Programs, deployment: Deployment, *,
                 nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                 groups: Sequence[Mapping[str, Any]], work: Path) -> dict[str, dict[str, Any]]:
    """Both schedulers of a cluster: gputopo's profile (``generate scheduler-config``)
    first, then the default kube-scheduler for the pods left to it (launchers and other
    pods that ask for no GPU keep ``default-scheduler``), beside the pods bound so far."""
    results = schedule(programs, nodes=nodes, pods=pods, objects=groups,
                       config=deployment.scheduler_config, work=work / "gputopo")
    others = [p for p in pods if not p["spec"].get("nodeName")
              and results[key(p)]["status"] == "Pending"
              and "left to another scheduler" in results[key(p)]["reason"]]
    if others:
        bound = []
        for p in pods:
            r = results[key(p)]
            if r["status"] == "Bound" and not p["spec"].get("nodeName"):
                p = copy.deepcopy(dict(p))
                p["spec"]["nodeName"] = r["node"]
            if p not in others:
                bound.append(p)
        second = schedule(programs, nodes=nodes, pods=[*bound, *others],
                          config=deployment.default_scheduler_config,
                          work=work / "default")
        results.update({key(p): second[key(p)] for p in others})
    return results
