"""Placement policies gputopo is compared against, for the benchmarks only.

Each baseline has the solver's signature, ``place(nodes, gang) -> Placement``, and rates
its answer with the same cost model, so the comparison is about *where* GPUs go, not how
they are scored. None of them is used by gputopo itself.

- :mod:`bench.baselines.default_scheduler`: kube-scheduler's default behaviour.
- :mod:`bench.baselines.first_fit`: first-fit bin-packing.
- :mod:`bench.baselines.besteffort`: NVIDIA go-gpuallocator's BestEffort policy (what the
  NVIDIA device plugin uses to pick GPU ids), behind the default scheduler's node choice.
"""

from __future__ import annotations

from bench.baselines.best_fit import place as best_fit
from bench.baselines.besteffort import place as besteffort
from bench.baselines.default_scheduler import place as default_scheduler
from bench.baselines.first_fit import place as first_fit
from bench.baselines.rack_pack import place as rack_pack

BASELINES = {
    "default-scheduler": default_scheduler,
    "first-fit": first_fit,
    "go-gpuallocator": besteffort,
    "kueue-tas": rack_pack,
    "best-fit": best_fit,
}

__all__ = ["BASELINES", "best_fit", "besteffort", "default_scheduler", "first_fit", "rack_pack"]
