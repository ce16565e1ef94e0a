"""Room left on every planned NodeClaim, so "which claims can take this pod" is a few
vector comparisons rather than a look at each claim.

Per claim and resource the table keeps the room on its largest remaining instance type (it
can take the pod if it may grow) and on its cheapest one (it can take the pod as it is).
Rows are stored resource-major: one contiguous array per resource, so a question about
every claim compares a few contiguous slices instead of gathering each claim's row (the
scan runs once per pod, over thousands of claims).
"""

from __future__ import annotations

import numpy as np


class RoomTable:
    def __init__(self, resources: int, smallest: np.ndarray) -> None:
        self._largest = np.zeros((resources, 64), dtype=np.int64)  # its largest type − used
        self._cheapest = np.zeros((resources, 64), dtype=np.int64)  # its cheapest type − used
        self._open = np.zeros(64, dtype=bool)  # its cheapest type holds the smallest pod
        # Per resource, the least any pending pod asks: a claim with less room takes none.
        self._smallest = smallest

    def set(self, index: int, largest: np.ndarray, cheapest: np.ndarray | None) -> None:
        """Claim ``index`` has ``largest`` room on its largest type and ``cheapest`` on its
        cheapest (None: no type is left)."""
        if index >= self._open.shape[0]:
            size = max(64, self._open.shape[0] * 2)
            self._largest = _widened(self._largest, size)
            self._cheapest = _widened(self._cheapest, size)
            self._open = np.concatenate([self._open, np.zeros(size - self._open.shape[0], dtype=bool)])
        self._largest[:, index] = largest
        self._cheapest[:, index] = -1 if cheapest is None else cheapest
        self._open[index] = bool((self._cheapest[:, index] >= self._smallest).all())

    def largest_holds(self, vector: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Of claims ``start:stop``, those whose largest type has room for ``vector``."""
        return _holds(self._largest, vector, start, stop)

    def cheapest_holds(self, vector: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Of claims ``start:stop``, those whose cheapest type has room for ``vector``."""
        return _holds(self._cheapest, vector, start, stop)

    def open_now(self, stop: int) -> np.ndarray:
        """Of claims ``0:stop``, those whose cheapest type has room for the smallest pod."""
        return self._open[:stop]


def _holds(room: np.ndarray, vector: np.ndarray, start: int, stop: int) -> np.ndarray:
    holds = room[0, start:stop] >= vector[0]
    for j in range(1, len(vector)):
        holds &= room[j, start:stop] >= vector[j]
    return holds


def _widened(table: np.ndarray, size: int) -> np.ndarray:
    wider = np.zeros((table.shape[0], size), dtype=table.dtype)
    wider[:, : table.shape[1]] = table
    return wider
