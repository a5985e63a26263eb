"""Kubernetes resource quantities (``"1"``, ``"500m"``, ``"50Gi"``) as exact fractions.

Why exact: policies add resources that scale with the GPU count (``hugepages-1Gi`` of
GPUs x 5 + 10 Gi) and compare them with what the user already asked for; float rounding
would turn an already-mutated pod into a "conflict" and break idempotence.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_MULTIPLIERS: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
    "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30),
    "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE](?P<exp>[+-]?\d{1,3}))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_BINARY_OUT = ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki")


def parse_quantity(value: object) -> Fraction:
    """A quantity string or number as an exact Fraction; ValueError if it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a quantity: {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    return _parse_text(str(value))


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """The text case of :func:`parse_quantity`, remembered: every review's shape check
    parses each container's quantities ("8", "32Gi"), and a cluster uses few distinct
    ones; a Fraction is immutable, so sharing one is safe. Errors are not remembered."""
    m = _QUANTITY.match(value.strip())
    if m is None or len(value) > 64:
        raise ValueError(f"not a quantity: {value!r}")
    number = Fraction(m.group("num"))
    if m.group("exp"):
        number *= Fraction(10) ** int(m.group("exp"))
    return number * _MULTIPLIERS[m.group("suffix") or ""]


def format_quantity(value: Fraction) -> str:
    """The canonical text of a quantity: the largest exact binary unit, else plain or milli."""
    if value.denominator == 1:
        n = value.numerator
        for suffix in _BINARY_OUT:
            unit = int(_MULTIPLIERS[suffix])
            if n != 0 and n % unit == 0:
                return f"{n // unit}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(value))


def gpu_memory_mib(value: object) -> int:
    """A per-GPU memory need in MiB: a plain number is MiB (as GPU Feature Discovery's
    ``nvidia.com/gpu.memory`` label writes it, ``"40960"``), a quantity with a unit is bytes
    (``"40Gi"``, ``"48G"``), rounded up to whole MiB. ValueError unless it is above 0."""
    if isinstance(value, str) and value.strip().isdigit():
        mib = int(value.strip())
    elif isinstance(value, int) and not isinstance(value, bool):
        mib = value
    else:
        q = parse_quantity(value)
        mib = -(-q.numerator // (q.denominator * 2**20))
    if mib <= 0:
        raise ValueError(f"not a GPU memory size above 0: {value!r}")
    return mib
