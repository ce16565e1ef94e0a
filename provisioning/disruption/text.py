"""Wording shared by the planners: prices, durations and node lists, as the dashboard shows them."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provisioning.disruption.model import Candidate


def money(amount: float) -> str:
    """``$0.384``, ``$0.07``, ``$1.20``, ``-$0.05``: at least two decimals, at most four."""
    sign = "-" if amount < 0 else ""
    whole, _, fraction = f"{abs(amount):.4f}".rstrip("0").partition(".")
    return f"{sign}${whole}.{fraction.ljust(2, '0')}"


def duration(seconds: float) -> str:
    """Go-style and rounded up (a wait of 0.2 s is "1s", never "0s"): ``45s``, ``3m20s``, ``1h30m``, ``720h``."""
    total = max(0, math.ceil(seconds - 1e-9))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def node_prices(candidates: Iterable[Candidate]) -> str:
    """``m5.2xlarge on-demand $0.384/h, 2× c5.xlarge spot $0.07/h``: identical nodes counted once."""
    shapes = Counter((c.instance_type, c.capacity_type, c.price_per_hour) for c in candidates)
    parts = []
    for (instance_type, capacity_type, price), count in shapes.items():
        times = f"{count}× " if count > 1 else ""
        parts.append(f"{times}{instance_type} {capacity_type} {money(price)}/h")
    return ", ".join(parts)


def nodes_phrase(candidates: Iterable[Candidate]) -> str:
    """``2 nodes (m5.2xlarge on-demand $0.384/h, c5.xlarge spot $0.07/h)``; one node is named."""
    candidates = list(candidates)
    if len(candidates) == 1:
        return f"node {candidates[0].name} ({node_prices(candidates)})"
    return f"{plural(len(candidates), 'node')} ({node_prices(candidates)})"
