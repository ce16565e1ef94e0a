"""Kubernetes resource quantities as integers in base units, and back.

cpu is held in millicores, memory and storage in bytes, everything else (pods, GPUs) as
a count. ``format_quantity`` writes what kubectl would show: ``1930m``, ``6903Mi``, ``29``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$")

MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> Decimal:
    """A quantity as an exact decimal number of base units (``"1.5Gi"`` → 1610612736)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity (e.g. 500m, 2, 4Gi, 1.5G)")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    try:
        if suffix in _BINARY:
            return number * _BINARY[suffix]
        if suffix in _DECIMAL:
            return number * _DECIMAL[suffix]
        return number * (Decimal(10) ** int(suffix[1:]))
    except InvalidOperation as exc:
        raise QuantityError(f"{value!r} is out of range") from exc


def to_int(resource: str, value: str | int | float) -> int:
    """A quantity in this project's integer units: millicores for cpu, else base units,
    rounded up as the API server rounds requests."""
    amount = parse_quantity(value)
    if resource in MILLI_RESOURCES:
        amount *= 1000
    return int(math.ceil(amount))


def format_quantity(resource: str, amount: int) -> str:
    """Integer units back to the canonical string kubectl shows."""
    if resource in MILLI_RESOURCES:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in ("memory", "ephemeral-storage") or resource.endswith("storage"):
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _BINARY[suffix]
            if amount and amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)
