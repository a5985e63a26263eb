"""Read (and write) the text ``nvidia-smi topo -m`` prints, as a :class:`Topology`.

Why: it is the one topology description every GPU node can produce, and what users paste
into bug reports. The format is loose, so the parser is forgiving about layout and strict
about content:

- columns are separated by tabs (newer drivers, or ``> file``) or runs of spaces; cells may
  be padded (`` X ``); ANSI colour/underline codes from a terminal are removed;
- the header names device columns (``GPU#``, NICs such as ``mlx5_0`` or ``NIC#``) and then
  affinity columns (``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``), any of which may
  be missing; with tabs, an empty field stays a column (some drivers print one);
- NIC rows and columns are read but only GPU-GPU links go into the topology; NIC rows may
  be shorter (no affinity fields);
- the ``Legend:`` block and the ``NIC Legend:`` block under the matrix are skipped;
- ``SOC``, what older drivers printed for ``SYS``, is read as ``SYS``;
- a GPU's NUMA node comes from ``NUMA Affinity`` when it is one number; a range ("0-7",
  a GPU close to several NUMA nodes) or N/A leaves it unknown, as does a missing column.

Any cell that is not a legend code, a row of the wrong length, an asymmetric pair or a
missing GPU row raises :class:`TopologyError` naming the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gputopo.errors import TopologyError
from gputopo.topology.model import LINK_CODE, Gpu, Topology

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU(\d+)$")
_AFFINITY_NAMES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND = re.compile(r"^\s*(NIC\s+)?Legend\s*:", re.IGNORECASE)
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[A-Za-z][\w.-]*\d)$")
_CURRENT = {"SOC": "SYS"}  # legend codes renamed by newer drivers


@dataclass(frozen=True)
class _Header:
    devices: tuple[str, ...]
    affinity: tuple[str, ...]
    line_no: int


def parse_nvidia_smi(
    text: str, *, source: str | None = None, generation: str | None = None
) -> Topology:
    """Parse ``nvidia-smi topo -m`` output into a Topology of its GPUs.

    ``source`` names the file in error messages; ``generation`` may state the NVLink
    generation (otherwise the bandwidth table infers it from the links).
    """
    lines = [_ANSI.sub("", raw).rstrip("\r\n") for raw in text.splitlines()]
    header = _find_header(lines, source)
    rows: dict[str, tuple[int, list[str], dict[str, str]]] = {}
    for no in range(header.line_no + 1, len(lines) + 1):
        line = lines[no - 1]
        if not line.strip():
            if rows:
                break
            continue
        if _LEGEND.match(line):
            break
        cells = _split(line, header_line=False)
        label = cells[0]
        if label not in header.devices:
            raise TopologyError(
                f"row {label!r} is not a device named in the header", file=source, obj=f"line {no}"
            )
        if label in rows:
            raise TopologyError(f"row {label!r} appears twice", file=source, obj=f"line {no}")
        values = cells[1:]
        n_dev = len(header.devices)
        if len(values) < n_dev:
            raise TopologyError(
                f"row {label!r} has {len(values)} link cells, the header names {n_dev} devices",
                file=source,
                obj=f"line {no}",
            )
        links = [v.strip().upper() for v in values[:n_dev]]
        for col, code in zip(header.devices, links, strict=True):
            if not LINK_CODE.match(code):
                raise TopologyError(
                    f"{label}/{col}: {code or '(empty)'!r} is not a link code of the legend",
                    file=source,
                    obj=f"line {no}",
                )
        extra = [v.strip() for v in values[n_dev:]]
        if len(extra) > len(header.affinity):
            # Some drivers print a stray empty field (seen between NUMA Affinity and GPU
            # NUMA ID); empty cells carry no value, so dropping them loses nothing.
            extra = [v for v in extra if v]
        if len(extra) > len(header.affinity):
            raise TopologyError(
                f"row {label!r} has {len(values)} cells, the header names "
                f"{n_dev + len(header.affinity)} columns",
                file=source,
                obj=f"line {no}",
            )
        rows[label] = (no, links, dict(zip(header.affinity, extra, strict=False)))
    return _build(header, rows, source, generation)


def _find_header(lines: Sequence[str], source: str | None) -> _Header:
    for no, line in enumerate(lines, start=1):
        cells = _split(line, header_line=True)
        if cells and _GPU.match(cells[0]) and (len(cells) == 1 or cells[1] != "X"):
            devices: list[str] = []
            affinity: list[str] = []
            for cell in cells:
                if cell in _AFFINITY_NAMES or affinity:
                    affinity.append(cell)
                elif _DEVICE.match(cell):
                    devices.append(cell)
                else:
                    raise TopologyError(
                        f"header column {cell!r} is neither a device nor an affinity column",
                        file=source,
                        obj=f"line {no}",
                    )
            return _Header(tuple(devices), tuple(affinity), no)
        if cells and _GPU.match(cells[0]):
            break
    raise TopologyError(
        "no `nvidia-smi topo -m` header (a line of GPU0 GPU1 ... columns) found", file=source
    )


def _split(line: str, *, header_line: bool) -> list[str]:
    """Cells of one line. Tabs: every field counts (empty ones too). Spaces: words, with the
    multi-word affinity names glued back together."""
    if "\t" in line:
        cells = [c.strip() for c in line.split("\t")]
        if header_line:
            while cells and not cells[0]:
                cells.pop(0)
        while cells and not cells[-1]:
            cells.pop()
        return cells
    words = line.split()
    if not header_line:
        return words
    out: list[str] = []
    i = 0
    while i < len(words):
        for name in _AFFINITY_NAMES:
            parts = name.split()
            if words[i : i + len(parts)] == parts:
                out.append(name)
                i += len(parts)
                break
        else:
            out.append(words[i])
            i += 1
    return out


def _build(
    header: _Header,
    rows: dict[str, tuple[int, list[str], dict[str, str]]],
    source: str | None,
    generation: str | None,
) -> Topology:
    gpu_cols = [(p, d) for p, d in enumerate(header.devices) if _GPU.match(d)]
    names = [d for _, d in gpu_cols]
    for d in names:
        if d not in rows:
            raise TopologyError(f"no row for {d}", file=source, obj=f"line {header.line_no}")
    # SOC is the old drivers' name of SYS; the annotation speaks the contract's legend
    matrix = [[_CURRENT.get(c, c) for c in (rows[d][1][p] for p, _ in gpu_cols)] for d in names]
    for a, d in enumerate(names):
        for b, e in enumerate(names):
            code = matrix[a][b]
            if (a == b) != (code == "X"):
                raise TopologyError(
                    f"{d}/{e}: 'X' must be exactly a GPU with itself, found {code!r}",
                    file=source,
                    obj=f"line {rows[d][0]}",
                )
            if b < a and matrix[b][a] != code:  # name the later row: it disagrees
                raise TopologyError(
                    f"{d}/{e} is {code} but {e}/{d} is {matrix[b][a]}",
                    file=source,
                    obj=f"line {rows[d][0]}",
                )
    gpus = tuple(Gpu(index=_gpu_index(d), numa=_numa(rows[d][2])) for d in names)
    if len({g.index for g in gpus}) != len(gpus):
        raise TopologyError("a GPU column appears twice", file=source, obj=f"line {header.line_no}")
    order = sorted(range(len(gpus)), key=lambda p: gpus[p].index)
    return Topology(
        gpus=tuple(gpus[p] for p in order),
        links=tuple(tuple(matrix[a][b] for b in order) for a in order),
        generation=generation,
    )


def _gpu_index(name: str) -> int:
    m = _GPU.match(name)
    assert m is not None  # only called on names that matched
    return int(m.group(1))


def _numa(affinity: dict[str, str]) -> int | None:
    value = affinity.get("NUMA Affinity", "")
    return int(value) if value.isdigit() else None


def render_nvidia_smi(topology: Topology, *, tabs: bool = True) -> str:
    """The topology as ``nvidia-smi topo -m`` would print it (GPU rows, NUMA column, legend).

    Used for round-trip tests and to show a topology in the form people know.
    """
    names = [f"GPU{i}" for i in topology.indices]
    has_numa = any(g.numa is not None for g in topology.gpus)
    tail = ["NUMA Affinity"] if has_numa else []

    def fmt(cells: list[str]) -> str:
        return "\t".join(cells) if tabs else "".join(f"{c:<8}" for c in cells).rstrip()

    out = [fmt(["", *names, *tail])]
    for g, row in zip(topology.gpus, topology.links, strict=True):
        cells = [f"GPU{g.index}", *[" X " if c == "X" else c for c in row]]
        if has_numa:
            cells.append("N/A" if g.numa is None else str(g.numa))
        out.append(fmt(cells))
    out += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes",
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host "
        "Bridges within a NUMA node",
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe "
        "Host Bridge)",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
        "",
    ]
    return "\n".join(out)
