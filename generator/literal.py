"""Multi-line strings (policy files, the scheduler configuration) as YAML block literals.

Why: a ConfigMap value like a whole policy file is read by people reviewing what they apply;
``|`` keeps it looking exactly like the file instead of one quoted line full of ``\\n``.
The marker type only changes how the one dumper (gputopo.yamlio) *presents* the string:
the loaded value is the same ``str``. PyYAML falls back to a quoted style by itself when a
string cannot be a block literal (trailing spaces, tabs), so the round trip is always exact.
"""

from __future__ import annotations

import yaml


class Literal(str):
    """A string dumped as a ``|`` block when it spans several lines."""


def _represent(dumper: yaml.SafeDumper, value: Literal) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style=style)


for _dumper in (yaml.SafeDumper, getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    _dumper.add_representer(Literal, _represent)
