"""What share of a node's network line rate NCCL's all-reduce actually gets, by transport.

Why: ``gputopo.io/network-gbps`` states a NIC's line rate, but what the collective moves
depends on how NCCL crosses the network. Over RDMA (InfiniBand or RoCE verbs) NCCL's rings
come close to the line rate; over its socket transport (TCP, the only choice on a VPC
without RDMA) they get a fraction of it. A cost model that took the line rate at face value
predicted the seeds' 2 + 2 run 5x too fast (docs/benchmarks.md, "Cost model").

Defaults, each from public figures (docs/topology.md, "Calibration"):

- ``rdma``: 0.94. NVIDIA's NCCL maintainers: DGX-1 nodes with 4 EDR adapters (4 x 100
  Gbit/s = 50 GB/s) "always get 47 GB/s" with rings (NVIDIA/nccl #307); NDR 400 Gbit/s
  (50 GB/s) "should see 46-48 GB/s per NIC" (NVIDIA/nccl-tests #290); 12.2 GB/s on one 100
  Gbit/s card "is as good as you can get" (NVIDIA/nccl-tests #29).
- ``tcp``: 0.25. Calibrated on the seeds: 2 x 8 V100 nodes on a 25 Gbit/s VPC network,
  NCCL over sockets (``NCCL_SOCKET_IFNAME=eth0``), whose runs imply an inter-node all-reduce
  bus bandwidth of 0.79-0.88 GB/s, i.e. 0.25-0.28 of 3.125 GB/s. Cross-check: 4 x 8 V100
  on 100 Gbit/s TCP reached 4-6 GB/s, 0.32-0.48 (NVIDIA/nccl #450); hand-tuned socket
  counts reach more (NVIDIA/nccl #209), which a node can state by annotating its achieved
  rate with transport ``rdma`` — the default stays the conservative figure.

Both can be overridden per node: ``gputopo.io/network-efficiency`` states the share a
node's measured runs achieved (0 < share <= 1; e.g. nccl-tests' inter-node bus bandwidth
over the line rate), and replaces the transport's default for that node.
"""

from __future__ import annotations

from gputopo.names import DEFAULT_NETWORK_TRANSPORT, NETWORK_TRANSPORTS

#: Share of the line rate NCCL's ring all-reduce achieves, by transport (module docstring).
TRANSPORT_EFFICIENCY: dict[str, float] = {"tcp": 0.25, "rdma": 0.94}
assert set(TRANSPORT_EFFICIENCY) == set(NETWORK_TRANSPORTS)


def effective_network_gbps(line_gbps: float, transport: str = DEFAULT_NETWORK_TRANSPORT,
                           efficiency: float | None = None) -> float:
    """Gbit/s the all-reduce gets out of a node's ``line_gbps`` over ``transport``
    (``efficiency``: the node's own measured share, when it states one).

    An unknown transport counts as the default (tcp): it must never make a node look faster.
    """
    if efficiency is not None and 0 < efficiency <= 1:
        return line_gbps * efficiency
    eff = TRANSPORT_EFFICIENCY.get(transport, TRANSPORT_EFFICIENCY[DEFAULT_NETWORK_TRANSPORT])
    return line_gbps * eff
