"""The cost model against published measurements: the calibration table and the seeds' case.

Why a script (and the rows as data here): docs/topology.md's calibration table and
tests/topology/test_calibration.py must show the same rows, sources and predictions; both
read :data:`ROWS`. Every row names where its measured figure was read; nothing here is
made up, and no row is fitted on its own except where the row says so (the TCP share is
set from the seeds, see gputopo/topology/transport.py).

The seeds (Alibaba Cloud's Arena GPU-topology MPIJob document) ran tf_cnn_benchmarks with Horovod on
4 V100 workers of two 8-GPU DGX-1-class nodes, batch 64 per GPU, fp32, NCCL over TCP
sockets (``NCCL_SOCKET_IFNAME=eth0``, ``--mca btl ^openib``):

- topology-aware: all 4 workers on one node, on 4 NVLink-connected GPUs (0,1,2,3);
- default scheduler: 2 workers on each node; the device plugin hands out the first free GPU
  ids, so each node uses GPUs 0,1 (an NV1 pair), and the nodes talk over the network.

Step-time inputs (gputopo.topology.cost.step_time_s; nothing fitted to the seeds' ratios):

- the cluster: the embedded demo cluster (the seeds' two nodes: DGX-1 links, 25 Gbit/s,
  transport tcp), read with the same code as ``gputopo serve``;
- parameters: VGG16 138.4M, ResNet50 25.6M (the papers); gradients fp32 = 4 bytes each;
- compute per step: 64 images / a measured single-GPU rate: the TensorFlow benchmark page's
  DGX-1 P100 figures for the same script and batch (VGG16 154, ResNet-50 219 images/s,
  synthetic data, May 2017) scaled by the V100/P100 peak fp32 ratio (15.7 / 10.6 TFLOPS);
- overlap 0 (no all-reduce hidden under compute; 0.5 shown for sensitivity).

Run: ``python bench/cost_model.py`` (``--markdown`` prints the docs tables).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gputopo.placement.objective import span_of  # noqa: E402
from gputopo.placement.types import NodeState  # noqa: E402
from gputopo.topology.cost import (  # noqa: E402
    NodeShare,
    compute_time_s,
    gang_bus_bandwidth,
    ring_bus_bandwidth,
    step_time_s,
)
from gputopo.topology.load import read_topology_file  # noqa: E402
from gputopo.topology.model import Topology  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "topologies"
NVL72 = ROOT / "tests" / "fixtures" / "nvl72"
BATCH = 64
N_GPUS = 4
V100_OVER_P100_FP32 = 15.7 / 10.6  # peak fp32 TFLOPS, V100 SXM2 / P100 SXM2
#: Share of the all-reduce hidden under the backward pass in the seeds' runs (assumption).
OVERLAP = 0.0


def fixture(name: str) -> Topology:
    return read_topology_file(str(FIXTURES / name))


# --- the seeds' case -----------------------------------------------------------------------
@dataclass(frozen=True)
class Model:
    name: str
    params: float
    p100_images_per_s: float  # TF benchmarks page, DGX-1 P100, 1 GPU, batch 64, synthetic
    measured_aware: float  # seeds, total images/s
    measured_default: float

    @property
    def compute_s(self) -> float:
        return compute_time_s(BATCH, self.p100_images_per_s * V100_OVER_P100_FP32)

    @property
    def measured_ratio(self) -> float:
        return self.measured_aware / self.measured_default


MODELS = (
    Model("VGG16", 138.4e6, 154.0, 991.92, 200.47),
    Model("ResNet50", 25.6e6, 219.0, 1471.55, 745.38),
)


def demo_nodes() -> list[NodeState]:
    """The embedded demo cluster's nodes (the seeds' two DGX-1 nodes), as the webhook sees
    them: links, 25 Gbit/s, transport tcp from their annotations."""
    from gputopo.cluster.demo import demo_snapshot

    return sorted(demo_snapshot().node_states(), key=lambda n: n.name)


def bus_bandwidths(nodes: list[NodeState] | None = None) -> tuple[float, float]:
    """(topology-aware, default) predicted bus bandwidth in GB/s on the demo cluster."""
    a, b = nodes or demo_nodes()
    aware = gang_bus_bandwidth(
        [NodeShare(a.topology, (0, 1, 2, 3), a.network_gbps, a.network_transport)], span="node"
    )
    default = gang_bus_bandwidth(
        [NodeShare(n.topology, (0, 1), n.network_gbps, n.network_transport) for n in (a, b)],
        span=span_of([a, b]),
    )
    return aware, default


def images_per_s(model: Model, bus_gbps: float, overlap: float = OVERLAP) -> float:
    step = step_time_s(
        params=model.params,
        bytes_per_param=4,
        compute_s=model.compute_s,
        bus_bw_gbps=bus_gbps,
        n_gpus=N_GPUS,
        overlap=overlap,
    )
    return N_GPUS * BATCH / step


def predicted_ratio(model: Model, overlap: float = OVERLAP) -> float:
    aware, default = bus_bandwidths()
    return images_per_s(model, aware, overlap) / images_per_s(model, default, overlap)


def implied_default_bus(model: Model) -> float:
    """The 2 + 2 run's bus bandwidth the seeds' measurement implies, GB/s (overlap 0).

    Compute from the seeds' own one-node run minus its predicted all-reduce; a diagnosis of
    the network the seeds had, not an input to the prediction.
    """
    aware_bus, _ = bus_bandwidths()
    nbytes = model.params * 4
    factor = 2 * (N_GPUS - 1) / N_GPUS
    compute = N_GPUS * BATCH / model.measured_aware - nbytes * factor / (aware_bus * 1e9)
    comm_default = N_GPUS * BATCH / model.measured_default - compute
    return nbytes * factor / comm_default / 1e9


# --- the calibration table -----------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One published figure and what the model predicts for the same hardware and GPUs."""

    source: str  # where the measured figure was read
    setup: str  # hardware, GPUs, network as the source states them
    measured: float  # GB/s bus bandwidth, or a throughput ratio for the seeds' rows
    unit: str
    predict: Callable[[], float]
    tolerance: float  # |predicted / measured - 1| allowed
    note: str = ""

    @property
    def predicted(self) -> float:
        return self.predict()

    @property
    def ratio(self) -> float:
        return self.predicted / self.measured


def _one_node(name: str, gpus: tuple[int, ...]) -> Callable[[], float]:
    return lambda: ring_bus_bandwidth(fixture(name), gpus)


def _nodes(name: str, gpus: tuple[int, ...], count: int, gbps: float, transport: str):
    def predict() -> float:
        topo = fixture(name)
        return gang_bus_bandwidth(
            [NodeShare(topo, gpus, gbps, transport) for _ in range(count)], span="rack"
        )

    predict.transport = transport  # type: ignore[attr-defined]  # shown in the table
    return predict


def _domain(count: int) -> Callable[[], float]:
    """``count`` full GB200 trays of one NVLink domain (docs/topology.md, assumption 8)."""
    def predict() -> float:
        tray = read_topology_file(str(NVL72 / "gb200-tray.json"))
        return gang_bus_bandwidth(
            [NodeShare(tray, (0, 1, 2, 3), 1600.0, "gdr") for _ in range(count)],
            span="nvlink-domain")

    predict.transport = "nvlink"  # type: ignore[attr-defined]  # shown in the table
    return predict


def _trays(count: int, gbps: float, transport: str) -> Callable[[], float]:
    """``count`` full GB200 trays in different domains: the network between them."""
    def predict() -> float:
        tray = read_topology_file(str(NVL72 / "gb200-tray.json"))
        return gang_bus_bandwidth(
            [NodeShare(tray, (0, 1, 2, 3), gbps, transport) for _ in range(count)],
            span="rack")

    predict.transport = transport  # type: ignore[attr-defined]  # shown in the table
    return predict


def _seeds(model: Model) -> Callable[[], float]:
    def predict() -> float:
        return predicted_ratio(model)

    predict.transport = "tcp"  # type: ignore[attr-defined]  # the demo cluster's nodes
    return predict


def transport_of(row: Row) -> str:
    """The transport a multi-node row is predicted with ("-" for one node)."""
    return str(getattr(row.predict, "transport", "-"))


EIGHT = tuple(range(8))
ROWS: tuple[Row, ...] = (
    Row("NVIDIA/nccl-tests #178", "8x A100 PCIe, NVLink bridge pairs (NV12); GPUs 0,1",
        208.0, "GB/s", _one_node("a100-pcie-nvlink-pairs.txt", (0, 1)), 0.20),
    Row("NVIDIA/nccl-tests #178", "same node; GPUs 0,1,2 (a PCIe NODE hop joins the pair)",
        20.0, "GB/s", _one_node("a100-pcie-nvlink-pairs.txt", (0, 1, 2)), 0.25,
        "the issue says 'drops to 20 GBps'"),
    Row("NVIDIA/nccl-tests #175", "8x A100 SXM4 (NVSwitch, NV12), one node, 8 GPUs",
        232.54, "GB/s", _one_node("dgx-a100.txt", EIGHT), 0.15),
    Row("NVIDIA/nccl #527", "p4dn.24xlarge (8x A100 SXM4, NVSwitch), one node, 8 GPUs, 1 GiB",
        230.77, "GB/s", _one_node("dgx-a100.txt", EIGHT), 0.15),
    # --- HGX H100 / H200, one node ----------------------------------------------------------
    Row("FACTS.md (NVLink domains)", "8x H100 SXM (NVSwitch, NV18), one node, rings "
        "(NVLink SHARP off)", 367.5, "GB/s", _one_node("hopper-nv18.tsv", EIGHT), 0.15,
        "published 365-370 GB/s with rings; the model's channel figure, 18 x 26.562 x 0.78"),
    Row("FACTS.md (NVLink domains)", "8x H100 SXM, one node, NVLink SHARP (NVLS, default)",
        478.0, "GB/s", _one_node("hopper-nv18.tsv", EIGHT), 0.25,
        "published 476-480 GB/s; the model has no in-switch reduction and keeps the ring "
        "figure (0.78 of it), hence +-25 %"),
    Row("NVIDIA/nccl-tests #272", "8x H200 (NVLink 4), one node, NCCL 2.20.3 defaults",
        475.0, "GB/s", _one_node("hopper-nv18.tsv", EIGHT), 0.25,
        "NVLS, as the row above: the same links as H100, the same prediction"),
    # --- GB200 NVL72: NVLink across trays (MNNVL) and InfiniBand between domains ----------
    Row("FACTS.md (NVLink domains)", "8 GB200 GPUs on 2 trays of one NVL72, MNNVL",
        811.0, "GB/s", _domain(2), 0.15,
        "the fabric at NVLink 5 (18 x 53.125 GB/s) x 0.78; NCCL uses NVLS there too"),
    Row("coreweave/nccl-tests #43", "72 GB200 GPUs, one full NVL72 rack (18 trays), MNNVL",
        841.0, "GB/s", _domain(18), 0.15,
        "835-847 GB/s at 4-8 GiB (in- and out-of-place); the model does not depend on the "
        "tray count inside a domain"),
    Row("NVIDIA/nccl #1801", "12 GB200 GPUs: 3 trays in different racks, InfiniBand only, "
        "rings", 196.7, "GB/s", _trays(3, 1600.0, "gdr"), 0.15,
        "NVLS off, NVL partitions of 4 GPUs on different racks; 4 x 400 Gbit/s NICs per "
        "tray (GB200 NVL72's scale-out), GPUDirect as NVL72 racks ship"),
    # --- gdr: RDMA with GPUDirect (the NIC reads and writes GPU memory) ---------------------
    Row("NVIDIA/nccl-tests #175", "2 nodes x 8 A100, 4x 200 Gbit/s InfiniBand each",
        86.0, "GB/s", _nodes("dgx-a100.txt", EIGHT, 2, 800.0, "gdr"), 0.15,
        "GPUDirect not stated; 0.86 of the line rate, more than host staging gets (#638)"),
    Row("NVIDIA/nccl #307", "DGX-1 nodes (8x V100), 4 EDR adapters each (400 Gbit/s), rings",
        47.0, "GB/s", _nodes("dgx1-v100.txt", EIGHT, 2, 400.0, "gdr"), 0.15,
        "a NCCL maintainer: 'I always get 47 GB/s on DGX-1 nodes' (node count not stated), "
        "in a thread about GPUDirect RDMA reads"),
    Row("NVIDIA/nccl-tests #29", "4 nodes x 8 V100, one 100 Gbit/s InfiniBand card each",
        12.2, "GB/s", _nodes("dgx1-v100.txt", EIGHT, 4, 100.0, "gdr"), 0.15,
        "maintainer: 'as good as you can get'; GPUDirect not stated; intra-node links: "
        "DGX-1 fixture as stand-in"),
    Row("NVIDIA/nccl-tests #290", "H100 nodes, NDR 400 Gbit/s per NIC, rings",
        47.0, "GB/s", _nodes("hopper-nv18.tsv", EIGHT, 2, 400.0, "gdr"), 0.15,
        "maintainer: 'you should see 46-48GB/s per NIC' (#319: with connections tagged "
        "GDRDMA)"),
    Row("NVIDIA/nccl #778", "DGX A100, 8x HDR 200 Gbit/s InfiniBand per node, GPUDirect RDMA",
        192.0, "GB/s", _nodes("dgx-a100.txt", EIGHT, 2, 1600.0, "gdr"), 0.15,
        "maintainer, answering what GPUDirect (nvidia-peermem / DMA-BUF) brings: '~192GB/s'; "
        "node count not stated (the ring figure does not depend on it)"),
    Row("NVIDIA/nccl #1579", "2x GH200 (one GPU each), 4x 200 Gbit/s per node, GDR enabled",
        96.07, "GB/s", _nodes("hopper-nv18.tsv", (0,), 2, 800.0, "gdr"), 0.15,
        "Kubernetes pods with SR-IOV VFs, NCCL 2.24.3, NCCL_NET_GDR_LEVEL=SYS"),
    # --- rdma: RDMA staged through host memory (no GPUDirect) ----------------------------
    Row("NVIDIA/nccl #465", "4 nodes, one 100 Gbit/s InfiniBand card each, no nv_peer_mem",
        6.0, "GB/s", _nodes("dgx1-v100.txt", (0,), 4, 100.0, "rdma"), 0.15,
        "GPUs per node not stated (the network bounds it); the thread does not confirm the "
        "cause; a maintainer: no GPUDirect where NIC and GPU share a PCIe switch 'should "
        "~halve the performance' (#638)"),
    Row("NVIDIA/nccl #1579", "same 2x GH200, GDR disabled (NCCL's default there)",
        79.72, "GB/s", _nodes("hopper-nv18.tsv", (0,), 2, 800.0, "rdma"), 0.50,
        "host staging over GH200's NVLink-C2C is cheap: the best case for rdma, the default "
        "is the shared-switch case; hence +-50 %"),
    Row("NVIDIA/nccl #450", "4 nodes x 8 V100-32G, 100 Gbit/s TCP, NCCL sockets",
        5.0, "GB/s", _nodes("dgx1-v100.txt", EIGHT, 4, 100.0, "tcp"), 0.50,
        "measured 4-6 GB/s after tuning socket threads; TCP varies with tuning, hence +-50 %"),
    Row("seeds (ACK/Arena docs)", "VGG16, 4x V100: one node's NVLink quad vs 2 + 2 over TCP",
        MODELS[0].measured_ratio, "x", _seeds(MODELS[0]), 0.25,
        "throughput ratio; the TCP share (0.25) was set from the seeds' runs"),
    Row("seeds (ACK/Arena docs)", "ResNet50, same setup",
        MODELS[1].measured_ratio, "x", _seeds(MODELS[1]), 0.25,
        "throughput ratio; the TCP share (0.25) was set from the seeds' runs"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args()
    aware, default = bus_bandwidths()
    if args.markdown:
        print("| source | setup | transport | measured | predicted | predicted / measured | "
              "tolerance |")
        print("|---|---|---|---|---|---|---|")
        for r in ROWS:
            print(f"| {r.source} | {r.setup} | {transport_of(r)} | {r.measured:.3g} {r.unit} | "
                  f"{r.predicted:.3g} {r.unit} | {r.ratio:.2f} | +-{r.tolerance:.0%} |")
        print()
        print("| model | overlap | bus GB/s aware / default | predicted images/s aware / "
              "default | predicted ratio | measured images/s aware / default | measured ratio |")
        print("|---|---|---|---|---|---|---|")
        for ov in (0.0, 0.5):
            for m in MODELS:
                a, d = images_per_s(m, aware, ov), images_per_s(m, default, ov)
                print(f"| {m.name} | {ov:g} | {aware:.1f} / {default:.3f} | {a:.0f} / {d:.0f} "
                      f"| {a / d:.2f}x | {m.measured_aware:.2f} / {m.measured_default:.2f} | "
                      f"{m.measured_ratio:.2f}x |")
    else:
        for r in ROWS:
            ok = "ok" if abs(r.ratio - 1) <= r.tolerance else "OUT"
            print(f"{ok:3} {r.ratio:5.2f} measured {r.measured:8.3f} predicted "
                  f"{r.predicted:8.3f} {r.unit:4} {r.source}: {r.setup}")
        print(f"\nseeds: bus bandwidth aware {aware:.1f} GB/s, default {default:.3f} GB/s")
        for m in MODELS:
            print(f"{m.name}: predicted {predicted_ratio(m):.2f}x (overlap 0), "
                  f"{predicted_ratio(m, 0.5):.2f}x (overlap 0.5), measured "
                  f"{m.measured_ratio:.2f}x; the default run implies "
                  f"{implied_default_bus(m):.2f} GB/s between the nodes")


if __name__ == "__main__":
    main()
