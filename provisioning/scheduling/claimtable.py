"""What the solver asks of every planned NodeClaim at once, kept as arrays: "which claims can
take this pod" is then a few vector comparisons rather than a look at each claim.

Per claim the table keeps, per resource, the room left on its largest remaining instance
type (it can take the pod if it may grow) and on its cheapest one (it can take the pod as it
is), and the zone it is pinned to, if any. Rooms are stored resource-major: one contiguous
array per resource, so a question about every claim compares a few contiguous slices instead
of gathering each claim's row (the scan runs once per pod, over thousands of claims).
"""

from __future__ import annotations

from collections.abc import Sequence, Set

import numpy as np

NO_ZONE = 0  # the zone code of a claim not pinned to one zone


class ClaimTable:
    def __init__(self, resources: int, smallest: np.ndarray) -> None:
        self._largest = np.zeros((resources, 64), dtype=np.int64)  # its largest type − used
        self._cheapest = np.zeros((resources, 64), dtype=np.int64)  # its cheapest type − used
        self._open = np.zeros(64, dtype=bool)  # its cheapest type holds the smallest pod
        self._zone = np.zeros(64, dtype=np.intp)  # its zone's code (NO_ZONE: none), an index
        self._zone_codes: dict[str, int] = {}
        # Per resource, the least any pending pod asks: a claim with less room takes none.
        self._smallest = smallest

    def set(self, index: int, largest: np.ndarray, cheapest: np.ndarray | None, zone: str | None) -> None:
        """Claim ``index`` has ``largest`` room on its largest type and ``cheapest`` on its
        cheapest (None: no type is left), and is pinned to ``zone`` (None: to none)."""
        if index >= self._open.shape[0]:
            size = max(64, self._open.shape[0] * 2)
            self._largest = _widened(self._largest, size)
            self._cheapest = _widened(self._cheapest, size)
            self._open = _widened(self._open, size)
            self._zone = _widened(self._zone, size)
        self._largest[:, index] = largest
        self._cheapest[:, index] = -1 if cheapest is None else cheapest
        self._open[index] = bool((self._cheapest[:, index] >= self._smallest).all())
        self._zone[index] = NO_ZONE if zone is None else self._zone_codes.setdefault(zone, len(self._zone_codes) + 1)

    def largest_holds(self, vector: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Of claims ``start:stop``, those whose largest type has room for ``vector``."""
        return _holds(self._largest, vector, start, stop, range(len(vector)))

    def cheapest_holds(self, vector: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Of claims ``start:stop``, those whose cheapest type has room for ``vector``."""
        return _holds(self._cheapest, vector, start, stop, range(len(vector)))

    def takes_now(self, vector: np.ndarray, stop: int) -> np.ndarray:
        """Of claims ``0:stop``, those whose cheapest type has room for ``vector``, asked only
        of those with room for the smallest pod (so only the resources where ``vector`` asks
        more than the smallest pod need comparing)."""
        more = [j for j in range(len(vector)) if vector[j] > self._smallest[j]]
        return self._open[:stop] & _holds(self._cheapest, vector, 0, stop, more)

    def outside(self, zones: Set[str], stop: int) -> np.ndarray:
        """Of claims ``0:stop``, those pinned to a zone not in ``zones``."""
        barred = np.zeros(len(self._zone_codes) + 1, dtype=bool)
        for zone, code in self._zone_codes.items():
            barred[code] = zone not in zones
        return barred[self._zone[:stop]]


def _holds(room: np.ndarray, vector: np.ndarray, start: int, stop: int, resources: Sequence[int]) -> np.ndarray:
    if not resources:
        return np.ones(stop - start, dtype=bool)
    holds = room[resources[0], start:stop] >= vector[resources[0]]
    for j in resources[1:]:
        holds &= room[j, start:stop] >= vector[j]
    return holds


def _widened(table: np.ndarray, size: int) -> np.ndarray:
    """``table`` with its last axis (claims) grown to ``size``, zero-filled."""
    wider = np.zeros((*table.shape[:-1], size), dtype=table.dtype)
    wider[..., : table.shape[-1]] = table
    return wider
