"""What gputopo itself wrote into a pod it admits again: its network plan's ports, its pin.

Why: a pod gputopo mutated can be admitted again with no reservation to take its slot
from: ``gputopo mutate`` over its own output (a dump of a live namespace whose mutated pods
are still Pending), or the API server's reinvocation after the gang's reservation was
released. Its gang is then solved again from the mutated pod, which carries what a host
plan wrote (:mod:`webhook.placement.network_writes`): the rendezvous port of rank 0 as its
container port and ``hostPort`` and in every pod's ``MASTER_PORT``/``PET_MASTER_PORT``, a
TFJob task's port as its ``hostPort``. Read like the rest of the pod, those were ports the
user fixed: a TrainJob's rank-0 port "claimed" by every replica (at most one pod per node:
the gang split over nodes or waited), a moved ``MASTER_PORT`` kept as the user's own, a
``hostPort`` that kept the gang off every node where another pod holds that number. They
are the plan's: the pod's placement record (``gputopo.io/placement``) names them, its
``network`` giving the plan's role and its ``ports`` per replica, so the plan moves them as
it moves the operator's ports. A user's own hostPort or ``MASTER_PORT`` is never among
them (a ``pytorch-fixed`` plan keeps the user's port: not the plan's), so it stays fixed.
A record of another job (another ``jobUid``) names nothing.

The same holds for ``hostNetwork`` itself where the record says who asked for it: an MPI
gang over SSH (mpi-operator v2beta1, Trainer's MPI runtimes) gets host networking under
``network: auto`` only when the solve put no two workers on one node (:data:`SPREAD_WHY`);
its pods' ``hostNetwork`` was then the policy's, and a re-admitted pod must not read as one
whose user asked for it (which would fix one worker per node and a plan of other words).

And for the node pin (:func:`own_node`): the required node affinity to the node the record
names is gputopo's (``webhook.placement.mutations.unpin`` takes it back before the solve,
the slot writes it anew), unless the user's own pod template holds that very pin.

A first admission carries no record: one annotation look-up, nothing parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputopo import names
from gputopo.cluster.objects import Port, placement_record
from webhook.placement import trainer_network

#: The plan roles whose ports the plan derived from the gang's GPUs (its own to move);
#: ``pytorch-fixed`` writes the user's ``MASTER_PORT`` and ``pytorch-workers`` none.
DERIVED_ROLES = frozenset({"pytorch", "pytorch-elastic", "tfjob", trainer_network.ROLE})
#: The task whose port a role also writes into every pod's MASTER_PORT / PET_MASTER_PORT
#: (an elastic job writes it into PET_RDZV_ENDPOINT, which is read whatever its port).
RENDEZVOUS_TASK = {"pytorch": "master/0", trainer_network.ROLE: trainer_network.RANK0}
#: The ``why`` of a host plan chosen after the solve because no two sshd workers share a
#: node (webhook.placement.network.decide), not because host networking was asked for.
SPREAD_WHY = ("host networking: no two workers share a node, so their sshd ports cannot "
              "collide")


@dataclass(frozen=True)
class WrittenPorts:
    """What an earlier host plan of the pod's own gang wrote into it. ``held``: the host
    port it gave this pod's replica (container port = hostPort); ``rendezvous``: the port
    number it wrote into every pod's ``MASTER_PORT`` / ``PET_MASTER_PORT``, as text;
    ``policy_host``: the plan took host networking only because the gang's workers were
    spread (:data:`SPREAD_WHY`), so the pod's ``hostNetwork`` is the policy's."""

    held: frozenset[Port] = frozenset()
    rendezvous: str | None = None
    policy_host: bool = False


NOTHING_WRITTEN = WrittenPorts()


def _port(value: object) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536
    return value if ok else None  # type: ignore[return-value]


def own_record(pod: Mapping[str, Any], job_uid: str) -> Mapping[str, Any] | None:
    """``pod``'s placement record when it is one of the job ``job_uid`` (gputopo placed
    this pod of this gang before), else None. A pod admitted the first time has no record:
    looked for directly, as every GPU pod's admission asks (~40 bytecodes less a pod)."""
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(ann, dict) or names.PLACEMENT_ANNOTATION not in ann:
        return None
    record = placement_record(pod)
    return record if record is not None and record.get("jobUid") == job_uid else None


def own_node(record: Mapping[str, Any] | None) -> str | None:
    """The node a pod's own placement record (:func:`own_record`) placed it on: the node
    gputopo pinned it to; None when it was not placed."""
    if record is None or record.get("placed") is not True:
        return None
    node = record.get("node")
    return node if isinstance(node, str) and node else None


def written_ports(record: Mapping[str, Any] | None) -> WrittenPorts:
    """The ports the host plan in a pod's own placement record (:func:`own_record`) wrote
    into it; :data:`NOTHING_WRITTEN` without one."""
    if record is None:
        return NOTHING_WRITTEN
    plan = record.get("network")
    if not isinstance(plan, Mapping) or plan.get("plan") != "host":
        return NOTHING_WRITTEN
    if plan.get("why") == SPREAD_WHY:
        return WrittenPorts(policy_host=True)
    role, ports = plan.get("role"), plan.get("ports")
    if role not in DERIVED_ROLES or not isinstance(ports, Mapping):
        return NOTHING_WRITTEN
    replica = record.get("replica")
    own = _port(ports.get(replica)) if isinstance(replica, str) else None
    task = RENDEZVOUS_TASK.get(str(role))
    rendezvous = _port(ports.get(task)) if task else None
    return WrittenPorts(held=frozenset({("TCP", own)}) if own else frozenset(),
                        rendezvous=str(rendezvous) if rendezvous else None)
