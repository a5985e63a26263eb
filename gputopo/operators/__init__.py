"""Training jobs -> the objects their operators create, as the webhook would receive them.

Why: users hold PyTorchJob / TFJob / MPIJob YAML, not the pods an operator makes from it;
a dry run (``gputopo mutate``, ``place``) and tests need exactly those pods — names,
labels, controller ownerReferences with the job's uid, default ports, the rendezvous env —
or they show an admission the cluster never sees. Operator versions mirrored:

* training-operator v1.7/v1.8 (kubeflow.org/v1): PyTorchJob (:mod:`.pytorch`), TFJob
  (:mod:`.tfjob`), MPIJob v1 (:mod:`.mpijob`);
* mpi-operator v0.4 (kubeflow.org/v2beta1): MPIJob with SSH workers and a ``batch/v1``
  launcher Job (:mod:`.mpijob`); the Job and its pod are both returned;
* JobSet v0.8-v0.12 (jobset.x-k8s.io/v1alpha2): its batch Jobs and their pods
  (:mod:`.jobset`);
* Kubeflow Trainer v2.2-v2.3 (trainer.kubeflow.org/v1alpha1): a TrainJob on its
  (Cluster)TrainingRuntime, from the input or one Trainer ships (:mod:`.trainjob`,
  :mod:`.trainer_runtimes`): its JobSet, PodGroup, Jobs and pods.

A job without ``metadata.uid`` gets a made-up, stable one (uuid5 of namespace/kind/name):
use :func:`with_identity` to put it on the job before adding the job to a cluster view, so
the pods' owner references match. Pure: no Kubernetes, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gputopo.errors import InputError
from gputopo.operators import jobset, mpijob, pytorch, tfjob, trainjob
from gputopo.operators.common import JobShape

_EXPANDERS = {
    ("kubeflow.org/v1", "PyTorchJob"): pytorch.expand,
    ("kubeflow.org/v1", "TFJob"): tfjob.expand,
    ("kubeflow.org/v1", "MPIJob"): mpijob.expand,
    ("kubeflow.org/v2beta1", "MPIJob"): mpijob.expand,
    (jobset.API_VERSION, jobset.KIND): jobset.expand,
    (trainjob.API_VERSION, trainjob.KIND): trainjob.expand,
}

#: (apiVersion, kind) of the jobs :func:`expand` understands.
SUPPORTED = tuple(_EXPANDERS)


def is_training_job(obj: object) -> bool:
    """True for a job object :func:`expand` can expand."""
    return isinstance(obj, Mapping) and (obj.get("apiVersion"), obj.get("kind")) in _EXPANDERS


def with_identity(job: Mapping[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
    """A copy of ``job`` with a namespace (its own, else ``namespace``, else ``default``)
    and a uid (its own, else the made-up one its expanded pods name)."""
    out = copy.deepcopy(dict(job))
    meta = dict(out.get("metadata") or {}) if isinstance(out.get("metadata"), Mapping) else {}
    if not meta.get("namespace"):
        meta["namespace"] = namespace or "default"
    out["metadata"] = meta
    meta["uid"] = JobShape(out).uid
    return out


def expand(job: Mapping[str, Any], *, runtimes: Iterable[Mapping[str, Any]] = ()
           ) -> list[dict[str, Any]]:
    """Exactly the objects the job's operator creates, in creation order: Pods (and, for a
    kubeflow.org/v2beta1 MPIJob, the launcher's ``batch/v1`` Job before its Pod; for a
    JobSet each ``batch/v1`` Job before its Pods; for a TrainJob its JobSet first). A
    TrainJob's runtime is looked up in ``runtimes``, then among those Trainer ships.

    Raises :class:`InputError` for a job its operator would refuse or fail on."""
    key = (job.get("apiVersion"), job.get("kind"))
    if key not in _EXPANDERS:
        known = ", ".join(f"{k} {a}" for a, k in _EXPANDERS)
        raise InputError(f"not a training job gputopo can expand (knows {known})",
                         obj=f"{job.get('kind')}")
    if key == (trainjob.API_VERSION, trainjob.KIND):
        return trainjob.expand(job, runtimes=runtimes)
    return _EXPANDERS[key](job)  # type: ignore[index,operator]
