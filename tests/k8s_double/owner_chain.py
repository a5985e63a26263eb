"""Seed the TEST DOUBLE with a chain of controller-made objects (TrainJob -> JobSet -> Job),
as the controllers would create them: each object is stored in order, the double gives it
its own uid (as the API server does), and the ownerReferences (and JobSet's
``jobset-uid`` label) of the objects after it are made to name that uid. Pods are
returned, not stored: a test admits them first, as the API server's webhook call does."""

from __future__ import annotations

import copy
from typing import Any

from k8s_double.server import KubeApiDouble

JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"


def apply_chain(kube: KubeApiDouble, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store every object but the Pods; return the Pods with their references fixed."""
    uids: dict[str, str] = {}
    pods = []
    for obj in objs:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        for ref in meta.get("ownerReferences") or []:
            ref["uid"] = uids.get(ref["uid"], ref["uid"])
        for key in ("labels", "annotations"):
            values = meta.get(key) or {}
            if JOBSET_UID in values:
                values[JOBSET_UID] = uids.get(values[JOBSET_UID], values[JOBSET_UID])
        if obj["kind"] == "Pod":
            pods.append(obj)
            continue
        made = meta.pop("uid", None)
        stored = kube.apply(obj)
        if made:
            uids[made] = stored["metadata"]["uid"]
    return pods
