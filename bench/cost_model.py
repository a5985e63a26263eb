"""The cost model's prediction of the seeds' 4 x V100 comparison, next to what they measured.

The seeds (../shared/seeds/arena-mpi-gputopology.en.md) ran tf_cnn_benchmarks with Horovod on
4 V100 workers of two 8-GPU DGX-1-class nodes, batch 64 per GPU, fp32:

- topology-aware: all 4 workers on one node, on 4 NVLink-connected GPUs (0,1,2,3);
- default scheduler: 2 workers on each node; the device plugin hands out the first free GPU
  ids, so each node uses GPUs 0,1 (an NV1 pair), and the nodes talk over the network.

Inputs and where they come from (nothing here is fitted to the seeds' ratios):

- parameters: VGG16 138.4M, ResNet50 25.6M (the papers); gradients fp32 = 4 bytes each;
- compute per step: 64 images / single-GPU images/s. Single-GPU figures are the TensorFlow
  benchmark page's DGX-1 P100 results for the same script and batch (VGG16 154, ResNet-50 219
  images/s, synthetic data, May 2017) scaled by the V100/P100 peak fp32 ratio (15.7 / 10.6
  TFLOPS, NVIDIA data sheets);
- links: the bandwidth table (gputopo.topology.bandwidth) on the DGX-1 fixture;
- network: 25 Gbit/s per node (gputopo's documented default), also shown at 10 Gbit/s;
- overlap: 0 (no all-reduce hidden under compute), also shown at 0.5.

Run: ``python bench/cost_model.py`` (add ``--markdown`` for the docs/benchmarks.md table).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from gputopo.topology.cost import NodeShare, gang_bus_bandwidth, step_time_s
from gputopo.topology.nvidia_smi import parse_nvidia_smi

ROOT = Path(__file__).resolve().parents[1]
DGX1 = ROOT / "tests" / "fixtures" / "topologies" / "dgx1-v100.txt"
BATCH = 64
N_GPUS = 4
V100_OVER_P100_FP32 = 15.7 / 10.6  # peak fp32 TFLOPS, V100 SXM2 / P100 SXM2


@dataclass(frozen=True)
class Model:
    name: str
    params: float
    p100_images_per_s: float  # TF benchmarks page, DGX-1 P100, 1 GPU, batch 64, synthetic
    measured_aware: float  # seeds, total images/s
    measured_default: float

    @property
    def compute_s(self) -> float:
        return BATCH / (self.p100_images_per_s * V100_OVER_P100_FP32)


MODELS = (
    Model("VGG16", 138.4e6, 154.0, 991.92, 200.47),
    Model("ResNet50", 25.6e6, 219.0, 1471.55, 745.38),
)


def bus_bandwidths(network_gbps: float) -> tuple[float, float]:
    """(topology-aware, default) predicted bus bandwidth in GB/s."""
    topo = parse_nvidia_smi(DGX1.read_text(), source=str(DGX1))
    aware = gang_bus_bandwidth([NodeShare(topo, (0, 1, 2, 3), network_gbps)], span="node")
    default = gang_bus_bandwidth(
        [NodeShare(topo, (0, 1), network_gbps), NodeShare(topo, (0, 1), network_gbps)],
        span="rack",
    )
    return aware, default


def images_per_s(model: Model, bus_gbps: float, overlap: float) -> float:
    step = step_time_s(
        params=model.params,
        bytes_per_param=4,
        compute_s=model.compute_s,
        bus_bw_gbps=bus_gbps,
        n_gpus=N_GPUS,
        overlap=overlap,
    )
    return N_GPUS * BATCH / step


def effective_default_bus(model: Model) -> float:
    """The default case's bus bandwidth the seeds' measurement implies, GB/s (no overlap).

    Uses the seeds' own one-node per-GPU rate as compute (their software was faster than the
    2017 figures); this is a diagnosis, not an input to the prediction.
    """
    aware_step = N_GPUS * BATCH / model.measured_aware
    default_step = N_GPUS * BATCH / model.measured_default
    aware_bus, _ = bus_bandwidths(25.0)
    nbytes = model.params * 4
    comm_aware = nbytes * 2 * (N_GPUS - 1) / N_GPUS / (aware_bus * 1e9)
    compute = aware_step - comm_aware
    comm_default = default_step - compute
    return nbytes * 2 * (N_GPUS - 1) / N_GPUS / comm_default / 1e9


def implied_network_gbps(model: Model) -> float:
    """Node network (Gbit/s) that makes the hierarchical formula give the implied bus bandwidth.

    Inverts assumption 4 of gputopo.topology.cost for two nodes of two GPUs each.
    """
    _, default_2x2_at_inf = bus_bandwidths(1e12)  # network term ~0: what the NV1 pairs allow
    n, m = N_GPUS, 2
    intra = 2 * (n - 1) / n / default_2x2_at_inf
    per_byte = 2 * (n - 1) / n / effective_default_bus(model)
    net_gbytes = 2 * (m - 1) / m / (per_byte - intra)
    return net_gbytes * 8


def rows(network_gbps: float, overlap: float) -> list[dict[str, float | str]]:
    aware_bus, default_bus = bus_bandwidths(network_gbps)
    out: list[dict[str, float | str]] = []
    for m in MODELS:
        a = images_per_s(m, aware_bus, overlap)
        d = images_per_s(m, default_bus, overlap)
        out.append(
            {
                "model": m.name,
                "network": network_gbps,
                "overlap": overlap,
                "aware_bus": aware_bus,
                "default_bus": default_bus,
                "pred_aware": a,
                "pred_default": d,
                "pred_ratio": a / d,
                "meas_aware": m.measured_aware,
                "meas_default": m.measured_default,
                "meas_ratio": m.measured_aware / m.measured_default,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    table = [r for net in (25.0, 10.0) for ov in (0.0, 0.5) for r in rows(net, ov)]
    if args.markdown:
        print(
            "| model | network Gbit/s | overlap | bus GB/s aware / default | predicted images/s "
            "aware / default | predicted ratio | measured images/s aware / default | "
            "measured ratio |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in table:
            print(
                f"| {r['model']} | {r['network']:g} | {r['overlap']:g} | "
                f"{r['aware_bus']:.1f} / {r['default_bus']:.2f} | "
                f"{r['pred_aware']:.0f} / {r['pred_default']:.0f} | {r['pred_ratio']:.2f}x | "
                f"{r['meas_aware']:.2f} / {r['meas_default']:.2f} | {r['meas_ratio']:.2f}x |"
            )
    else:
        print(
            f"{'model':9} {'net':>4} {'ovl':>4} {'bus aware/default':>18} "
            f"{'pred img/s':>14} {'pred':>6} {'measured img/s':>17} {'meas':>6}"
        )
        for r in table:
            print(
                f"{r['model']:9} {r['network']:4g} {r['overlap']:4g} "
                f"{r['aware_bus']:8.1f} /{r['default_bus']:6.2f}  "
                f"{r['pred_aware']:6.0f} /{r['pred_default']:5.0f} {r['pred_ratio']:5.2f}x "
                f"{r['meas_aware']:8.2f} /{r['meas_default']:7.2f} {r['meas_ratio']:5.2f}x"
            )
    print()
    print("Cross-check: network calibrated on one model's default run, the other predicted")
    for fit, other in ((MODELS[0], MODELS[1]), (MODELS[1], MODELS[0])):
        net = implied_network_gbps(fit)
        r = next(x for x in rows(net, 0.0) if x["model"] == other.name)
        print(
            f"  fit on {fit.name}: {net:.1f} Gbit/s -> {other.name} predicted "
            f"{r['pred_aware']:.0f} / {r['pred_default']:.0f} images/s = {r['pred_ratio']:.2f}x "
            f"(measured {r['meas_ratio']:.2f}x)"
        )
    print()
    for m in MODELS:
        print(
            f"{m.name}: the seeds' default run implies an inter-node bus bandwidth of "
            f"{effective_default_bus(m):.2f} GB/s; compute per step used "
            f"{m.compute_s * 1000:.0f} ms (measured one-node run: "
            f"{N_GPUS * BATCH / m.measured_aware * 1000:.0f} ms per step incl. all-reduce)"
        )


if __name__ == "__main__":
    main()
