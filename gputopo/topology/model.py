"""The GPU topology of one node: which GPUs it has and how each pair is wired.

Why a plain value type: the solver, the cost model, the webhook and the reporter all need
the same picture of a node, and it must be cheap to build, hash and compare. Links use the
``nvidia-smi topo -m`` legend (X, NV#, PIX, PXB, PHB, NODE, SYS); bandwidth comes from
measured values where the node published them, else from the documented table in
:mod:`gputopo.topology.bandwidth`.

The wire form is the ``gputopo.io/topology`` annotation (CONTRACT.md)::

    {"version": 1, "gpus": [{"index": 0, "numa": 0}, ...],
     "links": [["X", "NV1", ...], ...], "bandwidthGBps": [[0, 25.0, ...], ...]}
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gputopo.errors import TopologyError
from gputopo.topology.bandwidth import GENERATIONS, infer_generation, link_bandwidth

ANNOTATION_VERSION = 1
LINK_CODE = re.compile(r"^(X|NV[1-9][0-9]?|PIX|PXB|PHB|NODE|SYS|SOC)$")


@dataclass(frozen=True)
class Gpu:
    """One GPU: its index as the driver numbers it, and its NUMA node (None if unknown)."""

    index: int
    numa: int | None = None


@dataclass(frozen=True)
class Topology:
    """GPUs of one node and the link between every pair.

    ``links[a][b]`` is the legend code between the a-th and b-th GPU of ``gpus`` (positions,
    not driver indices); ``measured[a][b]``, when given, is a measured per-direction GB/s
    that wins over the table. ``generation`` names the NVLink generation when known
    ("nvlink2", "nvlink3", "nvlink4", "nvlink5"); None lets the table infer it.
    """

    gpus: tuple[Gpu, ...]
    links: tuple[tuple[str, ...], ...]
    measured: tuple[tuple[float, ...], ...] | None = None
    generation: str | None = None
    _position: dict[int, int] = field(init=False, repr=False, compare=False, hash=False)
    _hash: int = field(init=False, repr=False, compare=False, hash=False)
    _indices: tuple[int, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if n == 0:
            raise TopologyError("topology has no GPUs")
        position = {g.index: p for p, g in enumerate(self.gpus)}
        if len(position) != n:
            raise TopologyError("GPU indices are not unique")
        if len(self.links) != n or any(len(row) != n for row in self.links):
            raise TopologyError(f"links must be a {n}x{n} matrix for {n} GPUs")
        for a, row in enumerate(self.links):
            for b, code in enumerate(row):
                if not LINK_CODE.match(code):
                    raise TopologyError(f"links[{a}][{b}]: unknown link code {code!r}")
                if (a == b) != (code == "X"):
                    raise TopologyError(f"links[{a}][{b}]: 'X' must be exactly the diagonal")
                if self.links[b][a] != code:
                    raise TopologyError(f"links[{a}][{b}]: matrix is not symmetric")
        if self.measured is not None and (
            len(self.measured) != n or any(len(row) != n for row in self.measured)
        ):
            raise TopologyError(f"bandwidthGBps must be a {n}x{n} matrix for {n} GPUs")
        object.__setattr__(self, "_position", position)
        object.__setattr__(self, "_indices", tuple(g.index for g in self.gpus))
        # Hashed once: the cost model caches on (topology, GPU set) in the solver's hot loop.
        object.__setattr__(
            self, "_hash", hash((self.gpus, self.links, self.measured, self.generation))
        )

    def __hash__(self) -> int:
        return self._hash

    # --- queries ------------------------------------------------------------------------
    @property
    def indices(self) -> tuple[int, ...]:
        """Driver indices of the GPUs, in order (made once: the solver and the objective
        read them for every share they rate)."""
        return self._indices

    def link(self, i: int, j: int) -> str:
        """Legend code between GPUs with driver indices ``i`` and ``j``."""
        return self.links[self._position[i]][self._position[j]]

    def bandwidth(self, i: int, j: int) -> float:
        """Per-direction GB/s between GPUs ``i`` and ``j`` (driver indices)."""
        return self.bandwidth_matrix[self._position[i]][self._position[j]]

    @cached_property
    def bandwidth_matrix(self) -> tuple[tuple[float, ...], ...]:
        """Per-direction GB/s by position; measured where present and positive."""
        gen = self.generation or infer_generation(self)
        rows = []
        for a, row in enumerate(self.links):
            out = []
            for b, code in enumerate(row):
                if a == b:
                    out.append(0.0)
                    continue
                m = self.measured[a][b] if self.measured is not None else 0.0
                table = link_bandwidth(code, gen)
                out.append(_denoised(float(m), table) if m and m > 0 else table)
            rows.append(tuple(out))
        return tuple(rows)

    # --- wire form ----------------------------------------------------------------------
    def to_annotation(self) -> dict[str, Any]:
        """The ``gputopo.io/topology`` JSON object."""
        doc: dict[str, Any] = {
            "version": ANNOTATION_VERSION,
            "gpus": [
                {"index": g.index, **({"numa": g.numa} if g.numa is not None else {})}
                for g in self.gpus
            ],
            "links": [list(row) for row in self.links],
        }
        if self.measured is not None:
            doc["bandwidthGBps"] = [list(row) for row in self.measured]
        if self.generation is not None:
            doc["generation"] = self.generation
        return doc

    def to_json(self) -> str:
        """Compact annotation value."""
        return json.dumps(self.to_annotation(), separators=(",", ":"))

    @classmethod
    def from_annotation(cls, value: str | dict[str, Any]) -> Topology:
        """Parse the annotation (a JSON string or the decoded object); TopologyError if bad."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise TopologyError(f"not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise TopologyError("must be a JSON object")
        version = value.get("version", ANNOTATION_VERSION)
        if version != ANNOTATION_VERSION:
            raise TopologyError(f"unsupported version {version!r} (this gputopo reads 1)")
        raw_gpus = value.get("gpus")
        links = value.get("links")
        if not isinstance(links, list) or not all(isinstance(r, list) for r in links):
            raise TopologyError("links: must be a list of lists of link codes")
        if raw_gpus is None:
            raw_gpus = [{"index": i} for i in range(len(links))]
        if not isinstance(raw_gpus, list):
            raise TopologyError("gpus: must be a list")
        gpus = []
        for k, g in enumerate(raw_gpus):
            if not isinstance(g, dict) or not _is_int(g.get("index")) or g["index"] < 0:
                raise TopologyError(f"gpus[{k}]: needs an integer 'index' >= 0")
            numa = g.get("numa")
            if numa is not None and not _is_int(numa):
                raise TopologyError(f"gpus[{k}].numa: must be an integer")
            gpus.append(Gpu(index=g["index"], numa=numa))
        for a, row in enumerate(links):
            for b, code in enumerate(row):
                if not isinstance(code, str):
                    raise TopologyError(f"links[{a}][{b}]: must be a string")
        measured = value.get("bandwidthGBps")
        measured_t = None
        if measured is not None:
            if not isinstance(measured, list) or not all(isinstance(r, list) for r in measured):
                raise TopologyError("bandwidthGBps: must be a list of lists of numbers")
            for a, row in enumerate(measured):
                for b, x in enumerate(row):
                    # json.loads accepts NaN and Infinity; neither is a bandwidth, and both
                    # would come back out as invalid JSON (busBandwidthGBps: Infinity)
                    if (
                        isinstance(x, bool)
                        or not isinstance(x, int | float)
                        or not math.isfinite(x)
                        or x < 0
                    ):
                        raise TopologyError(
                            f"bandwidthGBps[{a}][{b}]: must be a finite number >= 0"
                        )
            measured_t = tuple(tuple(float(x) for x in row) for row in measured)
        generation = value.get("generation")
        if generation is not None and not isinstance(generation, str):
            raise TopologyError("generation: must be a string")
        if generation is not None and generation not in GENERATIONS:
            # refused here, where a bad node is left out, not in the solver's first use of
            # the bandwidth table, which failed the whole placement
            raise TopologyError(
                f"generation: unknown {generation!r} (known: {', '.join(GENERATIONS)})"
            )
        return cls(
            gpus=tuple(gpus),
            links=tuple(tuple(c.strip().upper() for c in row) for row in links),
            measured=measured_t,
            generation=generation,
        )


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


#: A measured figure within this factor of its link code's table figure is that figure.
DENOISE_SPREAD = 1.25


def _denoised(measured: float, table: float) -> float:
    """A measured bandwidth with the measurement noise taken out, monotonically.

    Why: a reporter's bandwidth test gives every pair a slightly different figure (a few
    percent up to ~10 %), so GPUs that are wired alike stop looking alike; the solver then
    loses its exact shortcuts for interchangeable GPUs and hierarchical nodes (measured:
    20-38 s to place 8 GPUs on a DGX-2 with +-10 % noise, against milliseconds).

    A figure within DENOISE_SPREAD of the documented figure of its link code (either way)
    becomes that figure: "as documented, give or take noise". A real difference — a
    degraded NVLink at half speed, a link much faster than the table thinks — lies
    outside and keeps its own figure. Why this rule and not "the median of the figures of
    one code that lie close together" (the rule before): each figure depends on its own
    measurement only, and never decreases when it rises, so a faster measured link can
    never make a GPU set predict less. Any rule that pulls figures of one code towards
    each other breaks that: 10 -> 20 next to a 25 made the median pull 25 down to 22.5
    (tests/topology/test_cost.py, test_a_faster_link_never_makes_a_ring_slower).
    """
    if table / DENOISE_SPREAD <= measured < table * DENOISE_SPREAD:
        return table
    return measured
