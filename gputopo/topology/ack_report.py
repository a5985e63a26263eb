"""The ACK GPU-topology report ConfigMap, read and written as a :class:`Topology`.

Why: clusters that already run Alibaba Cloud ACK's GPU-topology device plugin publish each
node's topology in ConfigMap ``kube-system/<node>-gputopo-report`` (label
``ack.node.gpu.schedule=topology``) instead of our node annotation; gputopo reads it when the
annotation is absent, and can write it for tools that expect it.

What the real report holds (from the public consumer in koordinator's ACK scheduler plugin,
``pkg/scheduler/plugins/ack/.../gputopology``, which reads ``data.nodeName``,
``data.devices`` and ``data.bandwidth``):

- ``nodeName``: the node's name;
- ``devices``: JSON object from GPU index to health, e.g. ``{"0": "Healthy", "1": "Healthy"}``;
- ``bandwidth``: JSON matrix of floats, GPU by GPU in index order (measured GB/s; taken here
  as per direction, the figure p2pBandwidthLatencyTest prints per direction);
- ``linkType``: no public consumer shows its encoding; gputopo writes, and reads, a JSON
  matrix of ``nvidia-smi topo -m`` legend codes (``"X"``, ``"NV2"``, ``"SYS"``, ...).

Reading is lenient where it is safe: ``devices`` may also be a JSON list of indices or of
``{"index": i, "numa": n}`` objects (what gputopo's annotation uses). A missing or malformed
key raises :class:`TopologyError` naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gputopo import names
from gputopo.errors import TopologyError
from gputopo.topology.model import Gpu, Topology

HEALTHY = "Healthy"


def report_name(node: str) -> str:
    """Name of the node's report ConfigMap (in ``kube-system``)."""
    return f"{node}{names.ACK_REPORT_SUFFIX}"


def report_data(topology: Topology, *, node: str) -> dict[str, str]:
    """The ConfigMap ``data`` for a topology: every value is a JSON string.

    ``bandwidth`` carries the measured matrix when the topology has one, else the table's
    figures, so that consumers that read only ``bandwidth`` (ACK's scheduler) get numbers.
    """
    devices = {str(g.index): HEALTHY for g in topology.gpus}
    bandwidth = [list(row) for row in (topology.measured or topology.bandwidth_matrix)]
    return {
        "nodeName": node,
        "devices": json.dumps(devices, separators=(",", ":")),
        "linkType": json.dumps([list(r) for r in topology.links], separators=(",", ":")),
        "bandwidth": json.dumps(bandwidth, separators=(",", ":")),
    }


def report_configmap(topology: Topology, *, node: str) -> dict[str, Any]:
    """The whole ConfigMap object, labelled as ACK expects."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": report_name(node),
            "namespace": names.ACK_REPORT_NAMESPACE,
            "labels": {names.NODE_ACTIVATION_LABEL: names.NODE_ACTIVATION_VALUE},
        },
        "data": report_data(topology, node=node),
    }


def topology_from_report(report: Mapping[str, Any]) -> Topology:
    """A Topology from a report ConfigMap (the object, or just its ``data``).

    GPU order follows ``devices`` sorted by index; the matrices are in that order.
    """
    data = report.get("data") if "data" in report else report
    if not isinstance(data, Mapping):
        raise TopologyError("report ConfigMap has no data")
    where = _where(report)
    for key in names.ACK_REPORT_KEYS:
        if not isinstance(data.get(key), str):
            raise TopologyError(f"data.{key}: missing (needs a JSON string)", obj=where)
    gpus = _devices(_json(data["devices"], "devices", where), where)
    links = _matrix(_json(data["linkType"], "linkType", where), "linkType", where, len(gpus))
    bandwidth = _matrix(_json(data["bandwidth"], "bandwidth", where), "bandwidth", where, len(gpus))
    try:
        return Topology.from_annotation(
            {
                "gpus": [
                    {"index": g.index, **({"numa": g.numa} if g.numa is not None else {})}
                    for g in gpus
                ],
                "links": links,
                "bandwidthGBps": bandwidth,
            }
        )
    except TopologyError as exc:
        raise TopologyError(exc.reason, obj=where) from exc


def unhealthy_gpus(report: Mapping[str, Any]) -> frozenset[int]:
    """GPU indices the report marks as anything but ``Healthy`` (treat them as in use)."""
    data = report.get("data") if "data" in report else report
    if not isinstance(data, Mapping) or not isinstance(data.get("devices"), str):
        return frozenset()
    raw = _json(data["devices"], "devices", _where(report))
    if not isinstance(raw, dict):
        return frozenset()
    return frozenset(int(k) for k, v in raw.items() if str(k).isdigit() and v != HEALTHY)


def _where(report: Mapping[str, Any]) -> str:
    meta = report.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    ns = meta.get("namespace", names.ACK_REPORT_NAMESPACE) if isinstance(meta, Mapping) else None
    return f"ConfigMap {ns}/{name}" if name else "ACK report"


def _json(text: str, key: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise TopologyError(f"data.{key}: not JSON ({exc})", obj=where) from exc


def _devices(raw: Any, where: str) -> list[Gpu]:
    gpus: list[Gpu] = []
    if isinstance(raw, dict):
        for k in raw:
            if not str(k).isdigit():
                raise TopologyError(f"data.devices: key {k!r} is not a GPU index", obj=where)
        gpus = [Gpu(int(k)) for k in raw]
    elif isinstance(raw, list):
        for k, item in enumerate(raw):
            if isinstance(item, int) and not isinstance(item, bool):
                gpus.append(Gpu(item))
            elif isinstance(item, dict) and isinstance(item.get("index"), int):
                numa = item.get("numa")
                gpus.append(Gpu(item["index"], numa if isinstance(numa, int) else None))
            else:
                raise TopologyError(f"data.devices[{k}]: not a GPU index", obj=where)
    else:
        raise TopologyError("data.devices: must be a JSON object or list", obj=where)
    if not gpus:
        raise TopologyError("data.devices: no GPUs", obj=where)
    return sorted(gpus, key=lambda g: g.index)


def _matrix(raw: Any, key: str, where: str, n: int) -> list[list[Any]]:
    if (
        not isinstance(raw, list)
        or len(raw) != n
        or not all(isinstance(r, list) and len(r) == n for r in raw)
    ):
        raise TopologyError(f"data.{key}: must be a {n}x{n} matrix for {n} devices", obj=where)
    return raw
