"""Read a topology from a file, whatever form it comes in.

Why one entry point: users hand gputopo what they have — ``nvidia-smi topo -m`` output, a
``gputopo.io/topology`` annotation value, or an ACK report ConfigMap — and the commands should
not care which. The form is told by the content, not the file name.
"""

from __future__ import annotations

import json
from pathlib import Path

from gputopo.errors import InputError, TopologyError
from gputopo.topology.ack_report import topology_from_report
from gputopo.topology.model import Topology
from gputopo.topology.nvidia_smi import parse_nvidia_smi


def read_topology_file(path: str) -> Topology:
    """The topology in ``path`` ("-" reads stdin); errors name the file."""
    try:
        if path == "-":
            import sys

            data = sys.stdin.buffer.read()
        else:
            data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=path) from exc
    return parse_topology_text(_decode(data), source=path)


def _decode(data: bytes) -> str:
    """UTF-8, or UTF-16 when the file starts with its byte-order mark: what Windows
    PowerShell 5 writes for ``nvidia-smi topo -m > topo.txt``."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def parse_topology_text(text: str, *, source: str | None = None) -> Topology:
    """Annotation JSON (or an ACK ConfigMap as JSON/YAML), else ``nvidia-smi topo -m`` text."""
    text = text.removeprefix("\ufeff")  # a byte-order mark (Notepad's UTF-8) is no content
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError as exc:
            raise TopologyError(f"not JSON: {exc}", file=source) from exc
        return _from_document(doc, source)
    if stripped.startswith(("apiVersion:", "kind:", "---")):
        from gputopo.yamlio import load_documents_text

        docs = [d for d in load_documents_text(text, source=source or "<input>") if d]
        if len(docs) != 1:
            raise TopologyError("expected one ConfigMap document", file=source)
        return _from_document(docs[0], source)
    return parse_nvidia_smi(text, source=source)


def _from_document(doc: object, source: str | None) -> Topology:
    try:
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
            return topology_from_report(doc)
        if not isinstance(doc, dict):
            raise TopologyError("must be a JSON object")
        return Topology.from_annotation(doc)
    except TopologyError as exc:
        if exc.file:
            raise
        raise TopologyError(exc.reason, file=source, obj=exc.obj) from exc
