"""A JobSet pod whose gang cannot be read is admitted unplaced, with a record saying why.

Why a module of its own: the pipeline resolves a pod's gang before any step runs, and when
the owner chain of a JobSet pod is broken (the JobSet, or the TrainJob owning it, is gone,
or was re-created under the same name with a new uid) the gang size is unknown and must
never be guessed. A pod of a kubeflow job is then admitted unchanged with a warning; a
warning only reaches whoever created the pod (the Job controller), so a JobSet pod also
gets the placement record other unplaced pods carry (``gputopo.io/placement``
``{"placed": false, "reason": ...}``), which ``kubectl get pod -o yaml`` shows to the user
(issue 20, "Bad input"). Nothing else is written: no gang labels, no rename, no pin.

Which pods: those JobSet made (its ``jobset.sigs.k8s.io/jobset-name`` label), asking for
GPUs, whose namespace opted in, and whose first matching policy (matched as a JobSet or a
TrainJob pod, by what the pod shows: the job's labels and runtime are unknown) is in
enforce mode with placement enabled. Any other pod keeps the pipeline's own answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gputopo.operators import jobset as js
from gputopo.operators import trainjob as tj
from webhook.jobs import pod_gpus
from webhook.patch import make_patch, working_copy
from webhook.placement.mutations import apply_unplaced
from webhook.policy.match import matches
from webhook.policy.schema import Policy
from webhook.review import Decision
from webhook.steps import JobInfo

#: The owner kinds a JobSet pod's policy may name: the JobSet, or the TrainJob owning it.
_GANG_KINDS = ((js.API_VERSION, js.KIND), (tj.API_VERSION, tj.KIND))


def _strings(obj: object) -> Mapping[str, Any]:
    return obj if isinstance(obj, Mapping) else {}


def unplaced_jobset_pod(pod: dict[str, Any], namespace: str, reason: str, *,
                        policies: Sequence[Policy], namespace_labels: Mapping[str, str],
                        gpu_resources: frozenset[str]) -> Decision | None:
    """The decision for a JobSet pod whose gang cannot be read (``reason``: why, e.g.
    ``owner JobSet team/x not found``): admitted with only the unplaced record. None when
    the pod is not such a pod (see the module docstring): the caller answers as before."""
    meta = _strings(pod.get("metadata"))
    labels = _strings(meta.get("labels"))
    jobset_name = labels.get(js.JOBSET_NAME)
    if not isinstance(jobset_name, str) or not jobset_name:
        return None
    spec = pod.get("spec")
    if not isinstance(spec, dict) or (pod_gpus(spec, gpu_resources) <= 0
                                      and not spec.get("resourceClaims")):
        return None  # (claims: maybe GPUs through DRA; their templates may be what is unknown)
    rjob = labels.get(js.REPLICATED_JOB_NAME)
    role = rjob.lower() if isinstance(rjob, str) and rjob else None
    pod_labels = {str(k): str(v) for k, v in labels.items()}
    primary = None
    for policy in policies:
        for api_version, kind in _GANG_KINDS:
            seen = JobInfo(api_version=api_version, kind=kind, name=jobset_name,
                           namespace=namespace, uid="", replica_type=rjob if role else None,
                           replica_index=None, role=role, gang_size=0, gpus_per_pod=0,
                           requests_gpu=True)
            if matches(policy, namespace_labels=namespace_labels, job=seen,
                       pod_labels=pod_labels):
                primary = policy
                break
        if primary is not None:
            break
    if primary is None or primary.mode != "enforce" or not primary.placement.enabled:
        return None
    uid = labels.get(js.JOBSET_UID)
    record = {"placed": False, "job": f"{js.KIND} {namespace}/{jobset_name}",
              "jobUid": uid if isinstance(uid, str) else "", "replica": None,
              "node": None, "gpus": [],
              "reason": f"{reason}; gang size unknown, so the gang cannot be placed"}
    pod, working = working_copy(pod)
    warnings = apply_unplaced(working, record)
    warnings.append(f"gputopo: {reason}; gang size unknown, pod admitted unplaced "
                    f"(no gang labels, no pin)")
    return Decision(patch=make_patch(pod, working), warnings=warnings, outcome="mutated")
