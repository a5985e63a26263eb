"""What share of a node's network line rate NCCL's all-reduce actually gets, by transport.

Why: ``gputopo.io/network-gbps`` states a NIC's line rate, but what the collective moves
depends on how NCCL crosses the network. With GPUDirect RDMA the NIC reads and writes GPU
memory and NCCL's rings come close to the line rate; RDMA staged through host memory loses
much of it where NIC and GPU share a PCIe switch; over NCCL's socket transport (TCP, the
only choice on a VPC without RDMA) the rings get a fraction of it. A cost model that took
the line rate at face value predicted the seeds' 2 + 2 run 5x too fast (docs/benchmarks.md,
"Cost model").

Defaults, each from public figures (docs/topology.md, "Calibration"; which figures are
measured and which are read across is said there):

- ``gdr``: 0.94. NVIDIA's NCCL maintainers, on systems that run GPUDirect RDMA: DGX-1 with
  4 EDR adapters (50 GB/s) "always get 47 GB/s" with rings (NVIDIA/nccl #307, a thread
  about GPUDirect reads); DGX A100 with 8 HDR NICs ~192 GB/s of 200 (NVIDIA/nccl #778,
  answering what GPUDirect RDMA brings); NDR 400 Gbit/s "should see 46-48 GB/s per NIC"
  (NVIDIA/nccl-tests #290, #319: check that connections are tagged GDRDMA); 2 x GH200 on
  4 x 200 Gbit/s: 96.07 GB/s with GDR enabled (NVIDIA/nccl #1579).
- ``rdma`` (no GPUDirect: NIC <-> host memory <-> GPU): 0.50. NCCL's maintainers: disabling
  GPUDirect RDMA where NIC and GPU share a PCIe switch "should ~halve the performance"
  (NVIDIA/nccl #638); 4 nodes on 100 Gbit/s InfiniBand without nv_peer_mem measured 6 GB/s
  of 12.5 (NVIDIA/nccl #465). Where the NIC hangs off the CPU, staging costs less (2 x
  GH200 without GDR: 0.80, #1579): such a node states its share (below). Never above
  ``gdr``: a GPUDirect node must not look slower than a host-staged one.
- ``tcp``: 0.25. Calibrated on the seeds: 2 x 8 V100 nodes on a 25 Gbit/s VPC network,
  NCCL over sockets (``NCCL_SOCKET_IFNAME=eth0``), whose runs imply an inter-node all-reduce
  bus bandwidth of 0.81-0.90 GB/s, i.e. 0.26-0.29 of 3.125 GB/s. Cross-check: 4 x 8 V100
  on 100 Gbit/s TCP reached 4-6 GB/s, 0.32-0.48 (NVIDIA/nccl #450); hand-tuned socket
  counts reach more (NVIDIA/nccl #209), which a node can state (below).

Overrides, most specific first: a node's own measured share
(``gputopo.io/network-efficiency``, 0 < share <= 1, e.g. nccl-tests' inter-node bus
bandwidth over the line rate), then the admitting policy's share for the node's transport
(``spec.placement.transportShare``), then the defaults above.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from gputopo.names import DEFAULT_NETWORK_TRANSPORT, NETWORK_TRANSPORTS

#: Share of the line rate NCCL's ring all-reduce achieves, by transport (module docstring).
TRANSPORT_EFFICIENCY: dict[str, float] = {"tcp": 0.25, "rdma": 0.50, "gdr": 0.94}
assert set(TRANSPORT_EFFICIENCY) == set(NETWORK_TRANSPORTS)
#: Slowest to fastest: a share table that breaks this order ranks a better transport below
#: a worse one (policy validation refuses it).
TRANSPORT_ORDER = ("tcp", "rdma", "gdr")
assert set(TRANSPORT_ORDER) == set(NETWORK_TRANSPORTS)

#: A policy's shares by transport as sorted (transport, share) pairs: hashable, so that it
#: can key the reserver's memos.
TransportShares = tuple[tuple[str, float], ...]


def known_transport(transport: str) -> str:
    """``transport`` when it is one of the known values, else the default (tcp): an unknown
    transport must never make a node look faster."""
    return transport if transport in TRANSPORT_EFFICIENCY else DEFAULT_NETWORK_TRANSPORT


def share_for(shares: TransportShares | Mapping[str, float] | None, transport: str
              ) -> float | None:
    """The share ``shares`` (a policy's table) gives ``transport``, or None (then the
    default applies). An unknown transport reads the table's tcp entry."""
    if not shares:
        return None
    table = shares if isinstance(shares, Mapping) else dict(shares)
    return table.get(known_transport(transport))


def order_problem(shares: Mapping[str, float]) -> str | None:
    """Why a share table (a policy's, ``place --transport-share``) would rank a faster
    transport below a slower one once merged with the defaults for the transports it leaves
    out (gdr >= rdma >= tcp must hold), or None."""
    merged = {**TRANSPORT_EFFICIENCY, **shares}
    for slow, fast in itertools.pairwise(TRANSPORT_ORDER):
        if merged[fast] < merged[slow] and (slow in shares or fast in shares):
            defaults = ", ".join(f"{t} {TRANSPORT_EFFICIENCY[t]:g}" for t in TRANSPORT_ORDER)
            return (f"{fast} ({merged[fast]:g}) below {slow} ({merged[slow]:g}) would rank "
                    f"{fast} nodes below {slow} ones; give {fast} at least {slow}'s share "
                    f"(defaults: {defaults})")
    return None


def effective_network_gbps(line_gbps: float, transport: str = DEFAULT_NETWORK_TRANSPORT,
                           efficiency: float | None = None,
                           share: float | None = None) -> float:
    """Gbit/s the all-reduce gets out of a node's ``line_gbps`` over ``transport``
    (``efficiency``: the node's own measured share, when it states one; ``share``: the
    admitting policy's share for the transport). Precedence: the node's share, then the
    policy's, then the transport's default (module docstring). Every NodeState is built
    through here: kept to a few comparisons.
    """
    if efficiency is not None and 0 < efficiency <= 1:
        return line_gbps * efficiency
    if share is not None and 0 < share <= 1:
        return line_gbps * share
    eff = TRANSPORT_EFFICIENCY.get(transport)
    return line_gbps * (eff if eff is not None else TRANSPORT_EFFICIENCY[
        DEFAULT_NETWORK_TRANSPORT])
