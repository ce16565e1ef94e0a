"""Immutable, hashable values shared by identity: :class:`FrozenMap` and :func:`intern`.

Parsed pods hold label maps, requests, terms and selectors as frozen values; interning gives
identical values one shared instance, so pods of one shape share one object for each of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EMPTY_MAP", "FrozenMap", "frozen_map", "intern"]


class FrozenMap(dict):
    """A read-only ``dict`` that hashes (label maps, node selectors, requests).

    It is a real ``dict`` underneath, so lookups run at dict speed and it passes anywhere a
    mapping is expected; the mutating methods raise ``TypeError``.
    """

    __slots__ = ("_hash",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self, *args, **kwargs)
        self._hash: int | None = None

    def __hash__(self) -> int:  # type: ignore[override]
        h = self._hash
        if h is None:
            h = self._hash = hash(frozenset(self.items()))
        return h

    def _readonly(self, *args: Any, **kwargs: Any):
        raise TypeError("FrozenMap is immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _readonly  # type: ignore[assignment]

    def __reduce__(self):
        return (FrozenMap, (dict(self),))

    def __copy__(self) -> FrozenMap:
        return self

    def __deepcopy__(self, memo: dict) -> FrozenMap:
        return self

    def __repr__(self) -> str:
        return f"FrozenMap({dict.__repr__(self)})"


EMPTY_MAP = FrozenMap()

_INTERNED: dict[Any, Any] = {}
_INTERN_LIMIT = 200_000


def intern(value: Any) -> Any:
    """One shared instance per distinct hashable value (bounded: the table is reset when full)."""
    found = _INTERNED.get(value)
    if found is not None:
        return found
    if len(_INTERNED) >= _INTERN_LIMIT:
        _INTERNED.clear()
    _INTERNED[value] = value
    return value


def frozen_map(items: Mapping[str, Any]) -> FrozenMap:
    """``items`` as a shared :class:`FrozenMap`; empty maps are :data:`EMPTY_MAP`."""
    if not items:
        return EMPTY_MAP
    return intern(items if isinstance(items, FrozenMap) else FrozenMap(items))
