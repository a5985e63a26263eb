"""The starvation guard: when a gang that has waited long may no longer be overtaken.

Why one pure module: the guard is asked in two places that must agree. The placement
queue (webhook/queue/gangs.py ``serve_pass``) stops backfill behind a gang that has waited
:data:`DEFAULT_STARVATION_SECONDS`; admission (webhook/placement/step.py) asks
:func:`holding` before it solves a NEW gang, and gates the newcomer behind the starving
gang instead of handing it the GPUs that free up. Without the admission half, the guard
only held back gangs already queued: in the cluster replays a 16-32-GPU gang waited its
whole ``maxWaitSeconds`` while one-node jobs arriving meanwhile took every GPUDirect node
that freed up, then started at its floor on PCIe servers over TCP (docs/benchmarks.md).
The benchmark's replays (bench/gang_queue.py) call the same function.

What a real batch scheduler does here is a reservation for the oldest job (Slurm's
backfill, Kueue's StrictFIFO head): newcomers do not take what it waits for. Held here as
EASY-style backfill: while a waiting gang starves it keeps a few nodes — the fewest, in one
zone, of the slowest node kind where it reaches ``minShare``, those with the most GPUs
free (``GangReserver.kept_for``, webhook/placement/reserve.py) — and a new gang that may
wait (``whenFull: wait``) at admission, like the gangs behind it in the queue's pass, is
solved as if those nodes were full: it starts elsewhere or waits, its record naming the
starving gang. (The simplest form, every newcomer waiting behind the starving gang, drained
the cluster: homogeneous replay tuning seeds 13 -> 11 of 15, docs/benchmarks.md.)

Against deadlock, a starving gang holds admission only while it can still start:

- a gang asking more GPUs than the cluster's nodes have in all never holds it (it could
  only start if nodes were added);
- a gang holds it for at most its own ``maxWaitSeconds`` after it started starving: by
  then ``afterMaxWait`` has decided (``takeBest``'s floor, ``deny``), and a gang still
  waiting waits for GPUs held by something draining the cluster does not free (pods
  gputopo did not place, cordoned nodes); new gangs take free GPUs again, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gputopo.placement.types import GangRequest
from gputopo.placement.waiting import WaitingRule

#: A gang that has waited this long is starving: the queue places nothing behind it, and
#: admission starts no new gang that may wait (docs/queue.md).
DEFAULT_STARVATION_SECONDS = 600.0


@dataclass(frozen=True)
class Waiter:
    """A waiting gang as the guard needs it (from its pods' waiting records)."""

    name: str  # "<Kind> <namespace>/<name>", as records and Events name it
    uid: str
    since: float
    gpus: int  # the gang's GPUs in all
    max_wait_seconds: float
    #: what it asks for and its waiting rule (from the record): which nodes it could use
    #: well, the ones a new gang must leave to it (None: unknown, every node)
    request: GangRequest | None = field(default=None, compare=False)
    rule: WaitingRule = field(default_factory=WaitingRule, compare=False)


def starving(waited: float, starvation_seconds: float = DEFAULT_STARVATION_SECONDS) -> bool:
    """True when a gang that has waited ``waited`` seconds may no longer be overtaken."""
    return waited >= starvation_seconds


def holds(waited: float, max_wait_seconds: float,
          starvation_seconds: float = DEFAULT_STARVATION_SECONDS) -> bool:
    """Whether a gang that has waited ``waited`` seconds keeps the nodes it could use well
    from gangs behind it: starving, and for at most its ``maxWaitSeconds`` more."""
    return starving(waited, starvation_seconds) and \
        waited < starvation_seconds + max_wait_seconds


def holding(waiters: Iterable[Waiter], *, uid: str, now: float, cluster_gpus: int,
            starvation_seconds: float = DEFAULT_STARVATION_SECONDS) -> list[Waiter]:
    """The starving gangs a new gang (``uid``) must leave their nodes to at admission,
    oldest first; empty: no gang starves, or none that can still start (module
    docstring)."""
    out = []
    for w in sorted(waiters, key=lambda w: (w.since, w.name, w.uid)):
        waited = now - w.since
        if not starving(waited, starvation_seconds):
            break  # the rest are younger
        if w.uid == uid or w.gpus > cluster_gpus or \
                not holds(waited, w.max_wait_seconds, starvation_seconds):
            continue
        out.append(w)
    return out


def held_text(w: Waiter, now: float) -> str:
    """Why a new gang waits behind ``w``, for its record and the admission warning."""
    return (f"{w.name} has waited {now - w.since:.0f} s for a placement (starving: over "
            f"{DEFAULT_STARVATION_SECONDS:.0f} s) and keeps the nodes it can use well from "
            f"new gangs until it starts (the queue's starvation guard)")
