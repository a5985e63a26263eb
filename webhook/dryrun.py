"""``gputopo mutate``: offline admission of Pods from files, through the server's own path.

Training jobs in the input (PyTorchJob, TFJob, MPIJob v1/v2beta1, JobSet, TrainJob: with
the (Cluster)TrainingRuntimes of the input, else those Trainer ships) are expanded into
exactly the objects their operator creates (:mod:`gputopo.operators`), with a made-up but
stable uid, so a user can dry-run the job YAML they actually have; unless the input already
holds what the job's controllers made of it (a dump of a live namespace, ``kubectl get
trainjob,jobset,job,pod -o yaml``): then the pods given are the ones admitted. Objects
without a namespace go to ``--namespace``.

Why through ``Admitter.handle_body``: a dry run that took a shortcut would show what the
shortcut does, not what the webhook does. Each Pod becomes a real AdmissionReview body;
the answer's base64 JSON patch is decoded and applied with ``jsonpatch``, exactly as the
API server would. Pods are admitted in file order and each admitted Pod is added to the
cluster view, so gang state (reservations, placed siblings) carries to the next one.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from gputopo import names
from gputopo.cluster.snapshot import ClusterSnapshot, check_object
from gputopo.errors import InputError
from gputopo.operators import expand, is_training_job, with_identity
from gputopo.operators.trainjob import is_runtime
from gputopo.yamlio import load_documents
from webhook.pipeline import Admitter
from webhook.podshape import check_pod
from webhook.review import API_VERSION, KIND


@dataclass
class InputPod:
    pod: dict[str, Any]
    file: str
    label: str  # "Pod ns/name", for messages


@dataclass
class Outcome:
    """One admitted pod: the result and what the webhook said."""

    label: str
    pod: dict[str, Any]
    patch: list[dict[str, Any]]
    allowed: bool
    warnings: list[str] = field(default_factory=list)
    message: str = ""


def _label(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    ns = meta.get("namespace") or "default"
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else None)
    return f"{obj.get('kind')} {ns}/{name}"


def _json_value(value: object) -> str:
    """An unquoted YAML timestamp (``creationTimestamp: 2024-05-01T10:00:00Z``) is a string
    to Kubernetes, as its YAML-to-JSON reader keeps it; PyYAML makes it a datetime."""
    if isinstance(value, datetime.datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"a {type(value).__name__} value is not JSON")


def _as_json(pod: dict[str, Any], file: str, label: str) -> dict[str, Any]:
    """The pod as the API server would send it: JSON values only."""
    try:
        return json.loads(json.dumps(pod, default=_json_value))
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc), file=file, obj=label) from None


def _generated_name_only(doc: object) -> bool:
    """A Pod named by ``metadata.generateName`` alone, as a batch Job (the mpi-operator
    v2beta1 launcher) creates it: the API server assigns the name only after admission."""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return (isinstance(doc, dict) and doc.get("kind") == "Pod" and isinstance(meta, dict)
            and not meta.get("name") and isinstance(meta.get("generateName"), str)
            and bool(meta["generateName"]))


def _check_input_object(doc: object, file: str, position: int) -> None:
    """A Kubernetes object with a name (or a Pod's generateName) and, if any, a string
    namespace: the cluster view indexes objects by both."""
    named = doc
    if _generated_name_only(doc):
        assert isinstance(doc, dict)
        named = {**doc, "metadata": {**doc["metadata"], "name": doc["metadata"]["generateName"]}}
    check_object(named, file=file, position=position)
    assert isinstance(doc, dict)
    namespace = doc["metadata"].get("namespace") if not doc["kind"].endswith("List") else None
    if namespace is not None and not isinstance(namespace, str):
        raise InputError("metadata.namespace must be a string", file=file,
                         obj=f"document {position + 1} ({doc['kind']})")


#: Kinds without a namespace: the only input objects --namespace does not apply to.
CLUSTER_SCOPED = frozenset({"Namespace", "Node", "PriorityClass", "StorageClass",
                            "RuntimeClass", "ClusterRole", "ClusterRoleBinding"})


def _place_in_namespace(obj: dict[str, Any], namespace: str) -> None:
    meta = obj.get("metadata")
    if (isinstance(meta, dict) and not meta.get("namespace")
            and obj.get("kind") not in CLUSTER_SCOPED):
        meta["namespace"] = namespace


#: Kubeflow job kinds whose pods carry ``training.kubeflow.org/job-name`` (training-operator,
#: mpi-operator): a pod so labelled belongs to the job of that name.
_KUBEFLOW_KINDS = ("PyTorchJob", "TFJob", "MPIJob")
_JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def _parents(obj: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(namespace, kind, name) of what made ``obj``: its controller ownerReference, and what
    its controllers' labels name (a link a dump may lack: ``kubectl get trainjob,pod`` has
    no JobSet nor Job): ``jobset.sigs.k8s.io/jobset-name`` (JobSet's Jobs and pods) and
    ``training.kubeflow.org/job-name`` (the Kubeflow operators' pods, a launcher's too)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    ns = str(meta.get("namespace") or "")
    out = [(ns, str(ref.get("kind")), str(ref.get("name")))
           for ref in meta.get("ownerReferences") or []
           if isinstance(ref, Mapping) and ref.get("controller") is True]
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    if isinstance(labels.get(_JOBSET_NAME_LABEL), str):
        out.append((ns, "JobSet", labels[_JOBSET_NAME_LABEL]))
    if isinstance(labels.get(names.JOB_NAME_LABEL), str):
        out += [(ns, kind, labels[names.JOB_NAME_LABEL]) for kind in _KUBEFLOW_KINDS]
    return out


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(obj.get("kind")), str(meta.get("name"))


def _same_uids(value: Any, uids: Mapping[str, str]) -> Any:
    """``value`` with every string that is a key of ``uids`` replaced by its value."""
    if isinstance(value, str):
        return uids.get(value, value)
    if isinstance(value, list):
        return [_same_uids(v, uids) for v in value]
    if isinstance(value, dict):
        return {k: _same_uids(v, uids) for k, v in value.items()}
    return value


def _made_by_input(found: Sequence[tuple[str, dict[str, Any]]]) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of every object a Pod or a training job of the input
    descends from.

    Why: a dump of a live namespace (``kubectl get trainjob,jobset,job,pod -o yaml``) holds
    a job *and* what its controllers made of it; expanding the job again would invent a
    second set of pods beside the real ones. The chain is followed through the input's own
    objects (TrainJob -> JobSet -> Job -> Pod; MPIJob -> launcher Job -> Pod) and, where the
    input lacks a link, by the controllers' labels (:func:`_parents`) and by Trainer's rule
    that a TrainJob's JobSet has the TrainJob's name (FACTS.md, Trainer's jobset plugin).
    """
    by_key = {_key(o): o for _, o in found}
    made: set[tuple[str, str, str]] = set()
    for _, obj in found:
        if obj.get("kind") != "Pod" and not is_training_job(obj):
            continue  # a Job without its pods given: its JobSet (or MPIJob) still expands
        stack = _parents(obj)
        while stack:
            parent = stack.pop()
            if parent in made:
                continue
            made.add(parent)
            ns, kind, name = parent
            if parent in by_key:
                stack += _parents(by_key[parent])
            elif kind == "JobSet":
                stack.append((ns, "TrainJob", name))
    return made


def _fill_owner_uids(obj: dict[str, Any], uids: Mapping[tuple[str, str, str], str],
                     notes: list[str]) -> None:
    """An ownerReference without a uid (the API server refuses one) to a job of the input
    gets that job's uid, so the dry run can identify the gang; said in ``notes``."""
    meta = obj["metadata"]
    ns = str(meta.get("namespace") or "")
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict) or ref.get("uid"):
            continue
        uid = uids.get((ns, str(ref.get("kind")), str(ref.get("name"))))
        if uid:
            ref["uid"] = uid
            notes.append(f"{_label(obj)}: ownerReference to {ref.get('kind')} "
                         f"{ns}/{ref.get('name')} has no uid (the API server requires one); "
                         f"using the {ref.get('kind')}'s uid {uid}")


def read_inputs(files: Sequence[Path], *, namespace: str = "default",
                notes: list[str] | None = None
                ) -> tuple[list[InputPod], list[dict[str, Any]]]:
    """Pods to admit (in order) and the other objects (Namespaces, jobs) of the files.

    A training job none of whose descendants (pods, or what its controllers made: a
    TrainJob's JobSet, a JobSet's Jobs) is in the input is expanded into its operator's
    objects, at the job's place in the input; objects without a namespace get ``namespace``;
    a job without a uid gets a made-up one, and so do its pods' owner references that lack
    it (each said in ``notes``).
    """
    notes = notes if notes is not None else []
    found: list[tuple[str, dict[str, Any]]] = []
    for path in files:
        docs = load_documents(path)
        for k, doc in enumerate(docs):
            _check_input_object(doc, str(path), k)
            items = doc["items"] if doc["kind"].endswith("List") and isinstance(
                doc.get("items"), list) else [doc]
            for item in items:
                if not isinstance(item, dict):
                    raise InputError("a List item is not an object", file=str(path),
                                     obj=f"document {k + 1}")
                if item is not doc:
                    _check_input_object(item, str(path), k)
                _place_in_namespace(item, namespace)
                found.append((str(path), item))
    found = [(f, with_identity(o, namespace=namespace) if is_training_job(o) else o)
             for f, o in found]
    jobs = {(o["metadata"]["namespace"], o["kind"], o["metadata"]["name"]): o
            for _, o in found if is_training_job(o)}
    uids = {k: str(o["metadata"]["uid"]) for k, o in jobs.items()}
    for _, obj in found:
        if obj.get("kind") == "Job" and obj.get("apiVersion") == "batch/v1":
            _fill_owner_uids(obj, uids, notes)
            if obj["metadata"].get("uid"):
                uids[(obj["metadata"]["namespace"], "Job", obj["metadata"]["name"])] = str(
                    obj["metadata"]["uid"])
    for _, obj in found:
        if obj.get("kind") == "Pod":
            _fill_owner_uids(obj, uids, notes)
    made = _made_by_input(found)  # jobs whose controllers' objects are given: not expanded
    runtimes = [o for _, o in found if is_runtime(o)]  # what a TrainJob of the input names
    given = {_key(o): o for _, o in found}
    pods: list[InputPod] = []
    others: list[dict[str, Any]] = []
    for file, item in found:
        key = (item["metadata"].get("namespace"), item.get("kind"), item["metadata"].get("name"))
        if is_training_job(item) and key not in made:
            job = item
            others.append(job)
            try:
                created = expand(job, runtimes=runtimes)
            except InputError as exc:
                raise InputError(exc.reason, file=file, obj=_label(job)) from None
            # what the input already holds of it (a JobSet's Jobs dumped before their pods)
            # stands for the expanded object: the pods name its uid
            uids = {o["metadata"]["uid"]: given[_key(o)]["metadata"]["uid"] for o in created
                    if o["kind"] != "Pod" and _key(o) in given
                    and o["metadata"].get("uid") and given[_key(o)]["metadata"].get("uid")}
            for obj in created:
                if obj["kind"] == "Pod":
                    obj = _same_uids(obj, uids)
                    label = _label(obj)
                    pods.append(InputPod(_as_json(obj, file, label), file, label))
                elif _key(obj) not in given:
                    others.append(obj)
        elif item.get("kind") == "Pod":
            label = _label(item)
            pods.append(InputPod(_as_json(item, file, label), file, label))
        else:
            others.append(item)
    return pods, others


def parse_label_list(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` → mapping; InputError naming the flag when malformed."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise InputError(f"expected k=v pairs separated by commas, got {part!r}",
                             obj="--namespace-labels")
        out[key.strip()] = value.strip()
    return out


def add_missing_namespaces(cluster: ClusterSnapshot, pods: Sequence[InputPod],
                           labels: Mapping[str, str] | None) -> list[str]:
    """Namespaces the pods use but no file (nor the cluster) defines get ``labels``
    (--namespace-labels); with no labels given they count as opted in
    (``gputopo.io/inject=enabled``), since a dry run is asked for on purpose. Returns the
    namespaces so added."""
    added: list[str] = []
    for item in pods:
        meta = item.pod.get("metadata") if isinstance(item.pod.get("metadata"), dict) else {}
        ns = str(meta.get("namespace") or "default")
        if cluster.namespace(ns) is None:
            given = {names.INJECT_LABEL: names.INJECT_VALUE} if labels is None else dict(labels)
            cluster.add({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": ns, "labels": given}})
            added.append(ns)
    return added


def not_yet_created(cluster: ClusterSnapshot, pods: Sequence[InputPod]) -> list[str]:
    """Take out of ``cluster`` each input pod it holds not bound to a node; their names.

    Why: each input pod is admitted as the API server admits a pod being created, so it is
    not in the cluster yet. A cluster file from ``kubectl get nodes,pods -A -o yaml`` holds
    the Pending pods the user asks about; those gputopo mutated are pinned by their
    placement records, so left in they would hold the very GPUs, host ports and requests
    their own gang is solved for again, and push it elsewhere. A bound pod stays: it runs
    there (and the placement step leaves a bound pod as it is)."""
    taken = []
    for item in pods:
        meta = item.pod.get("metadata") or {}
        name, ns = meta.get("name"), str(meta.get("namespace") or "default")
        if not isinstance(name, str) or not name:
            continue
        held = cluster.object(api_version="v1", kind="Pod", namespace=ns, name=name)
        spec = held.get("spec") if isinstance(held, dict) else None
        if isinstance(spec, dict) and not spec.get("nodeName"):
            cluster.discard_pod(ns, name)
            taken.append(f"{ns}/{name}")
    return taken


def review_body(pod: Mapping[str, Any], uid: str) -> bytes:
    """The AdmissionReview the API server would send for creating ``pod``."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    request = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace") or "default",
        "operation": "CREATE",
        "userInfo": {"username": "gputopo-dry-run"},
        "object": pod,
        "oldObject": None,
        "dryRun": False,
    }
    return json.dumps({"apiVersion": API_VERSION, "kind": KIND, "request": request}).encode()


def admit_all(admitter: Admitter, cluster: ClusterSnapshot,
              pods: Sequence[InputPod]) -> list[Outcome]:
    """Admit each pod in order; the admitted pod joins the cluster view for the next one."""
    results: list[Outcome] = []
    for i, item in enumerate(pods):
        # An input file is checked whole: the server checks a pod's shape only once it
        # will read it (a job's pod), but a file's malformed pod is the user's mistake
        problem = check_pod(item.pod)
        if problem is not None:
            raise InputError(f"{problem[1]} (at {problem[0] or 'the pod'})", file=item.file,
                             obj=item.label)
        status, body = admitter.handle_body(review_body(item.pod, f"dry-run-{i + 1}"))
        if status != 200:
            raise InputError(str(body.get("error", body)), file=item.file, obj=item.label)
        response = body["response"]
        patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        mutated = jsonpatch.apply_patch(item.pod, patch) if patch else item.pod
        allowed = bool(response.get("allowed"))
        if allowed:
            stored = mutated
            if _generated_name_only(mutated):  # the name the API server would now generate
                meta = mutated["metadata"]
                stored = {**mutated, "metadata": {**meta,
                                                  "name": f"{meta['generateName']}{i + 1:05d}"}}
            cluster.add(stored)
        results.append(Outcome(
            label=item.label, pod=mutated, patch=patch, allowed=allowed,
            warnings=list(response.get("warnings", [])),
            message=str(response.get("status", {}).get("message", "")),
        ))
    return results


def placement_of(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``gputopo.io/placement`` record of a mutated pod, if it carries one."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    raw = annotations.get(names.PLACEMENT_ANNOTATION)
    try:
        record = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def table_rows(outcomes: Sequence[Outcome]) -> list[list[str]]:
    """One row per admitted pod: POD, NODE, GPUS, BUS GB/S, SHARE (the placement's
    predicted throughput as a share of the best placement free now, across GPU models;
    "-" where no node says its GPU model), WARNINGS (how many; the text goes to stderr),
    NOTE (why a GPU pod waits gated, was left unplaced or denied)."""
    rows: list[list[str]] = []
    for out in outcomes:
        record = placement_of(out.pod) if out.allowed else None
        node = gpus = bus = share = "-"
        note = ""
        if not out.allowed:
            note = f"denied: {out.message}"
        elif record is not None and record.get("placed"):
            node = str(record.get("node"))
            gpus = ",".join(str(g) for g in record.get("gpus") or []) or "-"
            bw = record.get("busBandwidthGBps")
            bus = f"{bw:.1f}" if isinstance(bw, int | float) else "-"
            best = (record.get("throughput") or {}).get("shareOfBestNow")
            share = f"{best:.0%}" if isinstance(best, int | float) else "-"
        elif record is not None and record.get("waiting"):
            note = f"waits: {record.get('reason')}"
        elif record is not None:
            note = f"unplaced: {record.get('reason')}"
        rows.append([out.label.split(" ", 1)[1], node, gpus, bus, share, str(len(out.warnings)),
                     note])
    return rows


def format_table(outcomes: Sequence[Outcome]) -> str:
    """The kubectl-style table of ``mutate -o table``."""
    header = ["POD", "NODE", "GPUS", "BUS GB/S", "SHARE", "WARNINGS", "NOTE"]
    rows = [header, *table_rows(outcomes)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = ["   ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]])
             .rstrip() for r in rows]
    return "\n".join(lines) + "\n"
