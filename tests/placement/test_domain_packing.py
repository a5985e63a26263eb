"""Small gangs fill NVLink domains already in use and keep wholly free ones whole.

Issue 21's cluster health: a one-tray job must not open a fresh NVL72 rack when a rack in
use has room, or every rack ends up with a few busy trays and no 16 x 4 gang fits in any.
The free domain is named first ("a") in each case, so the node-name tie-break alone would
pick it: only the objective's ``domains_opened`` term sends the gang to the used one.
"""

from __future__ import annotations

from solver_helpers import gb200_tray, node

from gputopo.placement.objective import score
from gputopo.placement.solver import GroupedNodes, solve
from gputopo.placement.types import GangRequest, NodeState

FULL = (0, 1, 2, 3)


def trays(domain: str, count: int, *, used: dict[int, tuple[int, ...]] | None = None,
          gbps: float = 400.0, first: int = 0) -> list[NodeState]:
    """``count`` GB200 trays of one NVL72 domain; ``used``: tray number -> GPUs in use."""
    used = used or {}
    return [
        node(f"{domain}-tray-{i:02d}", gb200_tray(), used.get(i, ()), zone="zone-a",
             rack=f"rack-{domain}", network_gbps=gbps, network_transport="gdr",
             nvlink_domain=domain)
        for i in range(first, first + count)
    ]


def domain_of(nodes: list[NodeState], placement) -> set[str | None]:
    by_name = {n.name: n for n in nodes}
    return {by_name[s.node].nvlink_domain for s in placement.slots}


def test_a_one_tray_gang_goes_to_the_domain_in_use() -> None:
    """Domain a wholly free, b with two trays in use: a 1 x 4 gang takes a free tray of b."""
    nodes = trays("a", 6) + trays("b", 6, used={0: FULL, 1: FULL})
    p = solve(nodes, GangRequest(replicas=1, gpus_per_replica=4))
    assert p.feasible
    assert domain_of(nodes, p) == {"b"}
    assert p.details["score"]["freeNvlinkDomainsOpened"] == 0
    # the same gang in the free domain would open it: the objective rates that lower
    in_a = score(nodes, GangRequest(replicas=1, gpus_per_replica=4), {"a-tray-00": FULL})
    assert in_a.domains_opened == -1
    assert solve(GroupedNodes(nodes), GangRequest(replicas=1, gpus_per_replica=4)) == p


def test_a_one_gpu_gang_goes_to_the_domain_in_use() -> None:
    nodes = trays("a", 4) + trays("b", 4, used={3: (0, 1, 2, 3)})
    p = solve(nodes, GangRequest(replicas=1, gpus_per_replica=1))
    assert domain_of(nodes, p) == {"b"}


def test_a_multi_tray_gang_stays_in_the_domain_in_use() -> None:
    """A 4 x 4 gang fits in b's 4 free trays: it goes there (one domain either way, the
    same NVLink speed), not into a, which stays whole for a gang that needs it."""
    nodes = trays("a", 8) + trays("b", 8, used={i: FULL for i in range(4)})
    gang = GangRequest(replicas=4, gpus_per_replica=4)
    p = solve(nodes, gang)
    assert p.details["span"] == "nvlink-domain"
    assert domain_of(nodes, p) == {"b"}
    assert solve(GroupedNodes(nodes), gang) == p


def test_a_gang_that_does_not_fit_in_the_used_domain_still_opens_a_free_one() -> None:
    """Fewest domains and NVLink speed come first: 4 x 4 with 3 free trays in b goes whole
    to a rather than 3 + 1 over two domains."""
    nodes = trays("a", 8) + trays("b", 4, used={0: FULL})
    p = solve(nodes, GangRequest(replicas=4, gpus_per_replica=4))
    assert domain_of(nodes, p) == {"a"}


def test_plain_nodes_open_no_domain() -> None:
    """A node without a domain opens none: a one-tray job given a plain 4-GPU node and a
    wholly free domain keeps the domain whole."""
    plain = [node("a-plain", gb200_tray(), network_gbps=400.0, network_transport="gdr")]
    nodes = trays("a", 2) + plain
    p = solve(nodes, GangRequest(replicas=1, gpus_per_replica=4))
    assert domain_of(nodes, p) == {None}


def test_the_kept_grouping_sees_a_domain_stop_being_free() -> None:
    """GroupedNodes keeps the best one-node key between gangs. When a reservation puts the
    first GPU of domain b in use, b's other trays (a group the reservation did not touch:
    another network) must lose their "opens a free domain" mark, or the next gang would
    still go to a by name."""
    nodes = trays("a", 2) + trays("b", 1) + trays("b", 2, gbps=200.0, first=1)
    gang = GangRequest(replicas=1, gpus_per_replica=4)
    kept = GroupedNodes(nodes)
    assert domain_of(nodes, solve(kept, gang)) == {"a"}  # both free: the name decides
    taken = node("b-tray-00", gb200_tray(), FULL, zone="zone-a", rack="rack-b",
                 network_gbps=400.0, network_transport="gdr", nvlink_domain="b")
    after = kept.replaced([taken])
    p = solve(after, gang)
    assert p.slots[0].node == "b-tray-01"
    assert p == solve(list(after), gang)
    # and back: b's last GPU released makes it free again, and a by name wins once more
    again = after.replaced([nodes[2]])
    assert domain_of(nodes, solve(again, gang)) == {"a"}
