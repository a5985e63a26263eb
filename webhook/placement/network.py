"""The network plan of a gang: how replicas packed on one node can all start there.

Why: the seeds' point is that the replicas of one job share a node's NVLink. The operators
make pods that cannot share a node once the ACK policy turns ``hostNetwork`` on:

* training-operator v1.4+ gives *every* PyTorchJob replica ``pytorchjob-port`` 23456
  (``pkg/apis/kubeflow.org/v1/pytorch_defaults.go``), and the API server defaults
  ``hostPort = containerPort`` on host-network pods after our patch
  (``pkg/apis/core/v1/defaults.go``, ``defaultHostNetworkPorts``), so the NodePorts filter
  keeps two of them off one node;
* every TFJob task binds ``tfjob-port`` 2222, and ``TF_CONFIG`` names it for every task;
* mpi-operator v2beta1 workers run ``sshd`` on a port baked into the image, declared nowhere;
  so do the pods of Kubeflow Trainer's MPI runtimes (``deepspeed-distributed``; sshd on 2222);
* Kubeflow Trainer's torch runtimes give every ``node`` pod ``containerPort: 29500`` and
  ``PET_MASTER_PORT=29500`` (``plugins/torch/torch.go``).

So a plan is chosen at the gang's first admission and stored with its reservation, so that
every pod of the gang (a recreated one too) gets the same:

* ``host``: host networking made safe. PyTorchJob: one rendezvous port per job, written into
  the master's container port and ``MASTER_PORT``/``PET_MASTER_PORT`` of every pod (elastic
  jobs: ``PET_RDZV_ENDPOINT`` and worker 0); the other replicas' ``pytorchjob-port`` is
  removed (they do not listen on it). TFJob: a port per task, written into that pod's
  container port and into ``TF_CONFIG`` of every pod. MPIJob v1 (``kubectl exec``, no sshd)
  needs nothing; MPIJob v2beta1 (and a TrainJob on an MPI runtime) only where no two
  workers share a node. TrainJob on a torch runtime: one rendezvous port per TrainJob in
  ``PET_MASTER_PORT`` (:mod:`webhook.placement.trainer_network`).
* ``pod``: no host network (what the policy added is taken back), ``hostIPC``/``hostPID``
  kept, ``NCCL_HOSTID`` = the node's name (downward API ``spec.nodeName``) so that NCCL
  treats co-located pods as one host, and ``NCCL_CUMEM_ENABLE=0`` (the cuMem P2P path passes
  handles over abstract UNIX sockets, which are per network namespace; nccl#1781).

This module decides the plan (:func:`needs` before the solve, :func:`decide` after it);
:mod:`webhook.placement.network_writes` writes it into each pod.

Ports are derived from GPUs, not searched for: a task's port is ``first + g + 64 k`` where
``g`` is the first GPU of its slot on its node and ``k`` the smallest step that misses the
host ports already held there. A GPU of a node belongs to one gang at a time (the
reservation store claims it atomically), so two gangs never derive one port on one node,
even when two webhook replicas place them at the same instant; no port ledger is needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputopo.cluster.objects import Port, claimed_ports, plan_listeners
from gputopo.placement.types import NodeState, ReplicaSlot
from webhook.placement import trainer_network
from webhook.placement.ports import OPERATOR_DEFAULT_PORTS
from webhook.placement.readmission import NOTHING_WRITTEN, SPREAD_WHY, WrittenPorts

HOST = "host"
POD = "pod"
AUTO = "auto"
MODES = (AUTO, HOST, POD)
#: More GPUs than any node has: the ports derived from two GPUs of one node never meet.
PORT_STRIDE = 64

MASTER_PORT_ENVS = ("MASTER_PORT", "PET_MASTER_PORT")
RDZV_ENV = "PET_RDZV_ENDPOINT"
TF_CONFIG_ENV = "TF_CONFIG"
NCCL_HOSTID_ENV = "NCCL_HOSTID"
NCCL_CUMEM_ENV = "NCCL_CUMEM_ENABLE"
HOST_NETWORK_DNS = "ClusterFirstWithHostNet"

MPI_V2BETA1 = ("kubeflow.org/v2beta1", "MPIJob")
#: Listeners a job's pods open without declaring them (no containerPort: neither the
#: scheduler's NodePorts filter nor a port view sees them): the sshd of MPI-over-SSH workers
#: (mpi-operator v2beta1, Trainer's MPI runtimes such as deepspeed-distributed), on the port
#: their images bake in (2222). Under host networking such a listener is a claim on the
#: node's network across ALL jobs, as a declared host port is: the plan names it
#: (``listeners`` of its JSON, in every pod's placement record), gputopo.cluster.objects
#: counts it among the host ports the pod holds, and no other gang gets a host-network
#: listener on the same port of that node (:func:`implicit_listeners`).
SSHD_LISTENERS: frozenset[Port] = frozenset({("TCP", 2222)})
_ROLE_WHY = {
    "pytorch": "one rendezvous port per job, free on the master's node",
    "pytorch-elastic": "one rendezvous port per job, free on worker 0's node",
    "tfjob": "one port per TFJob task, rewritten into every pod's TF_CONFIG",
    "pytorch-fixed": "the pod's own MASTER_PORT is kept; the master declares it",
    "pytorch-workers": "the master is not placed by gputopo; workers drop its port",
    trainer_network.ROLE: trainer_network.WHY,
}


@dataclass(frozen=True)
class Needs:
    """What the plan knows before the solve.

    ``kind``: ``host``, ``pod``, or ``after-solve`` (MPIJob v2beta1 under ``auto``: host
    networking only if no two workers end up on one node). ``tasks``: the replicas (wire
    form, ``master/0``) that get a port of their own under ``host``. ``fixed``: host ports
    the gang claims that gputopo may not move (a user's own ``hostPort`` or ``MASTER_PORT``):
    a node holding one is no place for the gang. ``cap``: most replicas per node (ports
    shared by replicas that cannot be moved), with ``cap_why``.
    """

    kind: str
    why: str
    role: str = ""
    tasks: tuple[str, ...] = ()
    fixed: frozenset[Port] = frozenset()
    cap: int | None = None
    cap_why: str = ""
    warnings: tuple[str, ...] = ()
    pinned: Mapping[str, int] = field(default_factory=dict)  # task → the user's own port
    forced: bool = False  # host networking asked for (policy network: host, or the pod)
    listeners: frozenset[Port] = frozenset()  # undeclared listeners (implicit_listeners)


@dataclass(frozen=True)
class Plan:
    """The plan of one gang, as stored with its reservation and in the placement record."""

    kind: str
    why: str
    role: str = ""
    ports: Mapping[str, int] = field(default_factory=dict)
    #: undeclared listeners the gang's pods open on their node's network (host plans)
    listeners: tuple[Port, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"plan": self.kind, "why": self.why}
        if self.role:
            out["role"] = self.role
        if self.ports:
            out["ports"] = dict(sorted(self.ports.items()))
        if self.listeners:
            out["listeners"] = [[proto, port] for proto, port in self.listeners]
        return out

    @classmethod
    def from_json(cls, data: object) -> Plan | None:
        """The stored plan, or None when ``data`` is not one (an older reservation)."""
        if not isinstance(data, dict) or data.get("plan") not in (HOST, POD):
            return None
        ports = data.get("ports") if isinstance(data.get("ports"), dict) else {}
        return cls(kind=str(data["plan"]), why=str(data.get("why", "")),
                   role=str(data.get("role", "")),
                   ports={str(k): int(v) for k, v in ports.items()
                          if isinstance(v, int) and not isinstance(v, bool)},
                   listeners=tuple(sorted(plan_listeners(data))))


@dataclass(frozen=True)
class Job:
    """The facts of a job the plan reads: kind, replica specs, GPU replica types."""

    api_version: str
    kind: str
    name: str
    specs: Mapping[str, Any]
    gpu_types: Mapping[str, int]  # replica type -> GPUs per pod, spec order


# --- reading pods and templates ----------------------------------------------------------
def as_list(value: object) -> list[Any]:
    """``value`` when it is a list, else nothing: a review may carry any shape (the fuzz
    tests send them), and a malformed field must never become an internal error."""
    return value if isinstance(value, list) else []


def all_containers(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every init container and container of a pod spec that is a mapping."""
    out: list[dict[str, Any]] = []
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        if isinstance(items, list):
            out.extend(c for c in items if isinstance(c, dict))
    return out


def env_value(spec: Mapping[str, Any], name: str) -> str | None:
    """The literal value of env ``name`` in the first container that sets it."""
    for c in all_containers(spec):
        for item in as_list(c.get("env")):
            if isinstance(item, dict) and item.get("name") == name:
                value = item.get("value")
                return value if isinstance(value, str) else None
    return None


def _port_numbers(spec: Mapping[str, Any], port_name: str) -> list[int]:
    out = []
    for c in all_containers(spec):
        for p in as_list(c.get("ports")):
            if isinstance(p, dict) and p.get("name") == port_name and isinstance(
                    p.get("containerPort"), int):
                out.append(p["containerPort"])
    return out


def template_spec(specs: Mapping[str, Any], rtype: str) -> Mapping[str, Any]:
    """The pod template spec of replica type ``rtype`` in a job's replica specs (empty when
    there is none): the user's own pod, before any mutation."""
    rs = specs.get(rtype)
    template = rs.get("template") if isinstance(rs, dict) else None
    tspec = template.get("spec") if isinstance(template, dict) else None
    return tspec if isinstance(tspec, dict) else {}


def _replicas(specs: Mapping[str, Any], rtype: str) -> int:
    rs = specs.get(rtype)
    n = rs.get("replicas", 1) if isinstance(rs, dict) else 1
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 1


def type_named(specs: Mapping[str, Any], lower: str) -> str | None:
    """The replica type of ``specs`` whose lower-case name is ``lower`` (``worker`` →
    ``Worker``), or None."""
    for rtype in specs:
        if str(rtype).lower() == lower:
            return str(rtype)
    return None


def ordered_replicas(job: Job) -> list[str]:
    """Every GPU replica of the job in wire form (``worker/3``), types in spec order: the
    order of the gang's slots (replica k gets slot k)."""
    return [f"{t.lower()}/{i}" for t in job.gpu_types for i in range(_replicas(job.specs, t))]


def _user_host_ports(spec: Mapping[str, Any], *, host_network: bool = False,
                     skip: frozenset[str] | set[str] = frozenset()) -> set[Port]:
    """Host ports the user's own pod (before gputopo's mutations) claims: its explicit
    hostPorts; with ``host_network`` (the user's own host networking) every declared port,
    written with ``hostPort`` or without, since the API server defaults ``hostPort =
    containerPort`` on a host-network pod before any webhook sees it (``gputopo mutate``
    reads the file as written; both must read alike). Ports named in ``skip`` (the plan
    rewrites them) are left out."""
    return claimed_ports(spec, host_network=host_network, skip=skip)


def _template_host_ports(job: Job) -> frozenset[Port]:
    """Explicit hostPorts of the job's GPU replica templates."""
    out: frozenset[Port] = frozenset()
    for rtype in job.gpu_types:
        out |= _user_host_ports(template_spec(job.specs, rtype))
    return out


# --- before the solve ----------------------------------------------------------------------
def needs(job: Job, *, mode: str, pod_spec: Mapping[str, Any],
          original_spec: Mapping[str, Any], pod_type: str | None,
          written: WrittenPorts = NOTHING_WRITTEN) -> Needs:
    """What the gang's network plan needs from the solver, read from the job's spec and the
    admitted pod (after the policy's mutations; ``original_spec`` before them).
    ``written``: the ports an earlier plan of this gang wrote into the pod (re-admission,
    :mod:`webhook.placement.readmission`): the plan's to move, never the user's."""
    warnings: list[str] = []
    user_host = original_spec.get("hostNetwork") is True and not written.policy_host

    def own_fixed(skip: set[str], moved: frozenset[Port] = frozenset()) -> frozenset[Port]:
        """The user's host ports the plan does not move (``skip``: names; ``moved``). A pod
        whose host networking was the policy's (``written.policy_host``) has every port's
        hostPort = containerPort from that (the API server's defaulting): the user's own
        are its template's."""
        own = set() if written.policy_host else _user_host_ports(
            original_spec, host_network=user_host, skip=skip)
        return frozenset(own - written.held - moved) | _template_host_ports(job)

    fixed = own_fixed(set())
    wants_host = pod_spec.get("hostNetwork") is True
    if not wants_host:
        return _shared_fixed(Needs(POD, "the pods do not use the host network"), job, fixed,
                             original_spec, pod_type, written, host_network=False)
    if mode == POD and not user_host:
        return _shared_fixed(Needs(POD, "the policy asks for pod networking (network: pod)"),
                             job, fixed, original_spec, pod_type, written, host_network=False)
    if mode == POD:
        warnings.append("the pod sets hostNetwork itself; kept, so the gang uses the host "
                        "network (network: pod asked otherwise)")
    forced = mode == HOST or user_host
    listeners = implicit_listeners(job)
    if listeners:
        if forced:
            # another job's host-network sshd on a node keeps this gang off it
            return Needs(HOST, "host networking (the policy or the pod asks for it)",
                         cap=1, cap_why="mpi-operator v2beta1 workers run sshd on one port "
                         "baked into the image, so at most one fits per node under host "
                         "networking (mpi-operator#593)", fixed=fixed | listeners,
                         warnings=tuple(warnings), listeners=listeners)
        return Needs("after-solve", "", fixed=fixed, warnings=tuple(warnings),
                     listeners=listeners)
    role, tasks, movable, pinned = _rewritable(job, pod_spec, warnings, written)
    if user_host:  # every port of the user's claimed: those the plan moves are not fixed
        fixed = own_fixed(movable, frozenset({("TCP", trainer_network.PORT)})
                          if role == trainer_network.ROLE else frozenset())
    fixed |= {("TCP", port) for port in pinned.values()}
    if role == "tfjob" and not tasks:
        # a task of TF_CONFIG gets no mutation (no GPU): its TF_CONFIG cannot be rewritten
        if not forced:
            return _shared_fixed(Needs(POD, "a TFJob task without GPUs (e.g. a parameter "
                                       "server) is not mutated, so task ports cannot be "
                                       "moved; pod networking lets co-located tasks keep "
                                       "port 2222"), job, fixed, original_spec, pod_type,
                                 written, host_network=False)
        warnings.append("TFJob tasks without GPUs are not mutated: task ports stay as the "
                        "operator made them")
    shared = _shared_ports(job, pod_spec, pod_type, written, host_network=True, skip=movable)
    if role == trainer_network.ROLE:  # the plan moves Trainer's unnamed 29500
        shared = [p for p in shared if p != ("TCP", trainer_network.PORT)]
    if shared and not forced:
        shown = ", ".join(f"{n}/{p}" for p, n in sorted(shared))
        return _shared_fixed(Needs(POD, f"the GPU replicas all declare port {shown}, which "
                                   "host networking would make one host port for all of "
                                   "them"), job, fixed, original_spec, pod_type, written,
                             host_network=False)
    cap, cap_why = (None, "")
    if shared:
        shown = ", ".join(f"{n}/{p}" for p, n in sorted(shared))
        cap, cap_why = 1, (f"its GPU replicas all claim host port {shown} (hostNetwork), "
                           "so at most one fits per node")
    told = tasks or role == "pytorch-workers"
    why = "host networking; " + (_ROLE_WHY[role] if told and role in _ROLE_WHY
                                 else "no two replicas claim one port")
    return Needs(HOST, why, role=role, tasks=tasks, fixed=fixed, cap=cap,
                 cap_why=cap_why, warnings=tuple(warnings), pinned=pinned, forced=forced)


def _shared_fixed(base: Needs, job: Job, fixed: frozenset[Port],
                  original_spec: Mapping[str, Any], pod_type: str | None,
                  written: WrittenPorts, *, host_network: bool) -> Needs:
    """``base`` with the user's own host ports (the pod as it came in, not the hostPorts
    the policy wrote for host networking): shared by two replicas, one per node."""
    shared = _shared_ports(job, original_spec, pod_type, written, host_network=host_network,
                           skip=set())
    cap, why = (None, "")
    if shared:
        shown = ", ".join(f"{n}/{p}" for p, n in sorted(shared))
        cap, why = 1, f"its GPU replicas all claim host port {shown}, so at most one fits per node"
    return Needs(base.kind, base.why, fixed=fixed, cap=cap, cap_why=why,
                 warnings=base.warnings)


def _shared_ports(job: Job, pod_spec: Mapping[str, Any], pod_type: str | None,
                  written: WrittenPorts, *, host_network: bool, skip: set[str]) -> list[Port]:
    """Ports two GPU replicas would both claim on one node (ports named in ``skip`` are
    rewritten by the plan and do not count, nor do those an earlier plan wrote into the
    admitted pod: ``written``)."""
    users: dict[Port, int] = {}
    for rtype in job.gpu_types:
        if pod_type and rtype.lower() == pod_type.lower() and not written.policy_host:
            ports = claimed_ports(pod_spec, host_network=host_network, skip=skip)
            ports -= written.held
        else:
            ports = claimed_ports(template_spec(job.specs, rtype), host_network=host_network,
                                  skip=skip)
        for port in ports:
            users[port] = users.get(port, 0) + _replicas(job.specs, rtype)
    return sorted(p for p, n in users.items() if n >= 2)


def _rewritable(job: Job, pod_spec: Mapping[str, Any], warnings: list[str],
                written: WrittenPorts) -> tuple[str, tuple[str, ...], set[str], dict[str, int]]:
    """(role, tasks that get a port of their own, port names the plan rewrites, tasks whose
    port the user fixed → that port). A rendezvous port an earlier plan wrote
    (``written.rendezvous``) reads as the operator's: it is the plan's to move."""
    if job.kind == trainer_network.KIND:
        node = type_named(job.specs, "node")
        if trainer_network.torch_rendezvous(node in job.gpu_types, pod_spec,
                                            written.rendezvous):
            return trainer_network.ROLE, (trainer_network.RANK0,), set(), {}
        return "", (), set(), {}
    default = OPERATOR_DEFAULT_PORTS.get(job.kind)
    if default is None:
        return "", (), set(), {}
    port_name, default_number = default
    if job.kind == "PyTorchJob":
        rdzv = env_value(pod_spec, RDZV_ENV)
        if rdzv is not None:
            worker = type_named(job.specs, "worker")
            if worker is None or worker not in job.gpu_types:
                return "", (), set(), {}
            return "pytorch-elastic", ("worker/0",), {port_name}, {}
        master = type_named(job.specs, "master")
        if master is None or master not in job.gpu_types:
            # the master gets no mutation: its port stays; the workers do not listen on it
            return "pytorch-workers", (), {port_name}, {}
        number = (_port_numbers(template_spec(job.specs, master), port_name)
                  or [default_number])[0]
        own = env_value(pod_spec, "MASTER_PORT")
        if own is not None and own != str(number) and own != written.rendezvous:
            if not own.isdigit() or not 0 < int(own) < 65536:
                warnings.append(f"kept the pod's MASTER_PORT={own!r}, which is no port number")
                return "pytorch-workers", (), {port_name}, {}
            warnings.append(f"kept the pod's MASTER_PORT={own}; the master declares it as its "
                            "host port, and no node holding it already is chosen")
            return "pytorch-fixed", ("master/0",), {port_name}, {"master/0": int(own)}
        return "pytorch", ("master/0",), {port_name}, {}
    # TFJob: every task of TF_CONFIG must be a GPU pod (only those are mutated)
    tf = _tf_config(pod_spec)
    listed = set(tf.get("cluster", {})) if tf else {t.lower() for t in job.specs}
    gpu = {t.lower() for t in job.gpu_types}
    if not listed <= gpu:
        return "tfjob", (), set(), {}
    return "tfjob", tuple(ordered_replicas(job)), {port_name}, {}


def implicit_listeners(job: Job) -> frozenset[Port]:
    """The listeners the job's GPU pods open without declaring them: sshd's port for
    MPI-over-SSH jobs (:func:`sshd_workers`), nothing for any other job."""
    return SSHD_LISTENERS if sshd_workers(job) else frozenset()


def sshd_workers(job: Job) -> bool:
    """MPI over SSH, sshd listening on a port baked into the image and declared nowhere:
    mpi-operator v2beta1, and Trainer's MPI runtimes (``deepspeed-distributed``), the
    runtimes whose JobSet has a ``launcher`` replicated job (``plugins/mpi/mpi.go``)."""
    return (job.api_version, job.kind) == MPI_V2BETA1 or (
        job.kind == trainer_network.KIND and type_named(job.specs, "launcher") is not None)


def _tf_config(spec: Mapping[str, Any]) -> dict[str, Any]:
    raw = env_value(spec, TF_CONFIG_ENV)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("cluster"), dict) else {}


def waiting_plan(need: Needs) -> tuple[Plan, int | None]:
    """The plan of a gang admitted gated (``whenFull: wait``), and the most replicas per
    node it then allows. Its pods are created before any GPU is chosen, and a gated pod's
    env and ports can no longer change, so ports derived from GPUs are out: under ``auto``
    such a gang takes the pod network (co-located tasks keep the operator's ports, each in
    its own network namespace); when host networking is asked for, the operator's ports
    stay and its replicas are kept one per node."""
    if need.kind in (POD, "after-solve"):
        return Plan(POD, need.why if need.kind == POD else
                    "pod networking: the gang waits, so no two workers can be kept off one "
                    "node in advance"), need.cap
    if need.tasks and not need.pinned:
        if not need.forced:
            return Plan(POD, "pod networking: the gang waits, and ports derived from its "
                        "GPUs cannot be written into pods created before the GPUs are "
                        "chosen"), need.cap
        return Plan(HOST, "host networking asked for while the gang waits: the operator's "
                    "ports stay, one replica per node"), 1
    return Plan(HOST, need.why, role=need.role, ports=dict(need.pinned),
                listeners=tuple(sorted(need.listeners))), need.cap


# --- after the solve -----------------------------------------------------------------------
@dataclass(frozen=True)
class PortsUsedUp:
    """No port of the range is free for a task on ``node``: leave the node out, re-solve."""

    node: str
    reason: str


def decide(need: Needs, job: Job, slots: Sequence[ReplicaSlot],
           held_ports: Mapping[str, frozenset[Port]], port_range: tuple[int, int]
           ) -> Plan | PortsUsedUp:
    """The gang's plan, once its slots are known (slot k goes to replica k of
    :func:`ordered_replicas`)."""
    if need.kind == "after-solve":
        per_node: dict[str, int] = {}
        for s in slots:
            per_node[s.node] = per_node.get(s.node, 0) + 1
        taken = sorted({(s.node, p) for s in slots
                        for p in held_ports.get(s.node, frozenset()) & need.listeners})
        if taken:
            node, (proto, port) = taken[0]
            return Plan(POD, f"pod networking: another job's host-network listener holds "
                        f"{proto} {port} on node {node}, where this gang's sshd would listen")
        if max(per_node.values(), default=0) <= 1:
            return Plan(HOST, SPREAD_WHY, listeners=tuple(sorted(need.listeners)))
        return Plan(POD, "pod networking: workers share a node and mpi-operator v2beta1 "
                    "workers run sshd on one port baked into the image (mpi-operator#593)")
    if need.kind == POD or not need.tasks:
        return Plan(need.kind, need.why, role=need.role,
                    listeners=tuple(sorted(need.listeners)) if need.kind == HOST else ())
    if need.pinned:
        return Plan(HOST, need.why, role=need.role, ports=dict(need.pinned))
    order = ordered_replicas(job)
    by_slot = {s.replica: s for s in slots}
    ports: dict[str, int] = {}
    for task in need.tasks:
        slot = by_slot.get(order.index(task)) if task in order else None
        if slot is None or not slot.gpus:
            continue
        port = derive_port(slot.gpus[0], held_ports.get(slot.node, frozenset()), port_range)
        if port is None:
            return PortsUsedUp(slot.node, f"node {slot.node} has no free host port left in "
                               f"{port_range[0]}-{port_range[1]} for GPU {slot.gpus[0]}")
        ports[task] = port
    return Plan(HOST, need.why, role=need.role, ports=ports)


def derive_port(gpu: int, held: Iterable[Port], port_range: tuple[int, int]) -> int | None:
    """``first + gpu + 64 k`` for the smallest ``k`` whose port is not held (TCP or UDP) on
    the node; None when the range has none."""
    taken = {number for _, number in held}
    first, last = port_range
    port = first + gpu
    while port <= last:
        if port not in taken:
            return port
        port += PORT_STRIDE
    return None


def job_facts(api_version: str, kind: str, name: str, specs: Mapping[str, Any],
              gpu_types: Mapping[str, int]) -> Job:
    """The :class:`Job` the plan reads (types in spec order)."""
    return Job(api_version=api_version, kind=kind, name=name,
               specs=specs if isinstance(specs, dict) else {}, gpu_types=dict(gpu_types))


@dataclass(frozen=True)
class GangNetwork:
    """What the solve + reserve of one gang needs of its network plan (see
    :class:`webhook.placement.reserve.GangReserver`): which nodes are out (a host port the
    gang cannot move is held there), which replica each slot is meant for, and the plan once
    the slots are known. ``fixed_plan``: the plan was settled before the solve (a gated
    gang's pods carry it since their admission); it is stored as it is."""

    job: Job | None
    need: Needs
    host_ports: tuple[int, int]
    fixed_plan: Plan | None = None
    #: the ports an earlier plan wrote into the admitted pod (network_writes rewrites them)
    written: WrittenPorts = NOTHING_WRITTEN

    @classmethod
    def settled(cls, plan: Plan, fixed: frozenset[Port]) -> GangNetwork:
        """The network of a gang whose plan was written into its pods already."""
        return cls(job=None, need=Needs(plan.kind, plan.why, fixed=fixed), host_ports=(0, 0),
                   fixed_plan=plan)

    def order(self) -> list[str]:
        """Replica k of the gang gets slot k (none when the plan has no per-task ports)."""
        return ordered_replicas(self.job) if self.job is not None else []

    def usable(self, nodes: Sequence[NodeState]) -> list[NodeState]:
        """Nodes where none of the gang's unmovable host ports is held already."""
        fixed = self.need.fixed
        return [n for n in nodes if not (n.host_ports & fixed)] if fixed else list(nodes)

    def decide(self, slots: Sequence[ReplicaSlot], held: Mapping[str, frozenset[Port]]
               ) -> Plan | PortsUsedUp:
        if self.fixed_plan is not None or self.job is None:
            return self.fixed_plan or Plan(POD, self.need.why)
        return decide(self.need, self.job, slots, held, self.host_ports)

    def plan_for(self, stored: Mapping[str, Any], slots: Sequence[ReplicaSlot]) -> Plan:
        """The plan stored with a reservation; for one written before plans existed, the
        plan this gang would get now (no host ports known: none are held)."""
        plan = Plan.from_json(stored)
        if plan is not None:
            return plan
        made = self.decide(slots, {})
        return made if isinstance(made, Plan) else Plan(POD, made.reason)


def gang_network(api_version: str, kind: str, name: str, specs: Mapping[str, Any],
                 gpu_types: Mapping[str, int], *, mode: str, pod_spec: Mapping[str, Any],
                 original_spec: Mapping[str, Any], pod_type: str | None,
                 host_ports: tuple[int, int],
                 written: WrittenPorts = NOTHING_WRITTEN) -> GangNetwork:
    """``GangNetwork(job_facts(...), needs(...), host_ports)``: what the solve and reserve
    of the admitted pod's gang need of its network plan. ``written``: the ports an earlier
    plan of the gang wrote into the pod (:mod:`webhook.placement.readmission`)."""
    facts = job_facts(api_version, kind, name, specs, gpu_types)
    return GangNetwork(job=facts, need=needs(facts, mode=mode, pod_spec=pod_spec,
                                             original_spec=original_spec, pod_type=pod_type,
                                             written=written),
                       host_ports=host_ports, written=written)
