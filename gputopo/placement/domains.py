"""What a placement says about NVLink domains: one domain (N trays), or what it crosses.

Why a module of its own: the solver's reason (which the webhook's placement record and
``gputopo place`` carry) and ``gputopo nodes`` both describe a set of nodes by their NVLink
domains (GB200/GB300 NVL72: a rack's trays share one NVLink fabric), and a gang that spans
trays of one domain needs an IMEX channel in its pods (docs/placement.md, "NVLink domains
across nodes"); the wording lives here once.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputopo.placement.types import NodeState


def trays(count: int) -> str:
    return f"{count} tray{'s' if count != 1 else ''}"


def domain_note(nodes: Sequence[NodeState]) -> str | None:
    """How ``nodes`` (the touched nodes of a multi-node placement) sit in NVLink domains,
    or None when none of them is in one."""
    per: dict[str, int] = {}
    plain = 0
    for n in nodes:
        if n.nvlink_domain is None:
            plain += 1
        else:
            per[n.nvlink_domain] = per.get(n.nvlink_domain, 0) + 1
    if not per:
        return None
    if len(per) == 1 and not plain:
        return (f"one NVLink domain ({trays(len(nodes))}): NVLink between the nodes; its pods "
                "need the domain's IMEX channel (a ComputeDomain claim)")
    parts = [f"{d}: {trays(c)}" for d, c in sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))]
    if plain:
        parts.append(f"{plain} node{'s' if plain != 1 else ''} in no domain")
    return (f"crosses {len(per)} NVLink domain{'s' if len(per) != 1 else ''} "
            f"({', '.join(parts)}): the network between them")
