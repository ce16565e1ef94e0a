"""Kubernetes label selectors: matching label maps, and reading them from manifests.

An empty selector (``{}``) matches everything (:data:`EVERYTHING`); a null one (absent)
matches nothing (:data:`NOTHING`). Parsed selectors are interned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from provisioning.scheduling.frozen import intern
from provisioning.scheduling.manifestfields import (
    PodError,
    read_list,
    read_object,
    read_str,
    read_str_list,
    read_str_map,
)

__all__ = [
    "EVERYTHING",
    "LABEL_SELECTOR_OPERATORS",
    "NOTHING",
    "LabelSelector",
    "LabelSelectorRequirement",
]

LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class LabelSelectorRequirement(NamedTuple):
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: frozenset[str]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes ``LabelSelector``: every matchLabels pair and every expression must hold.

    An empty selector (``{}``) matches everything; a null one (absent) matches nothing, which
    is :data:`LabelSelector.NOTHING` (``null=True``).
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()
    null: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.null:
            return False
        get = labels.get
        for key, value in self.match_labels:
            if get(key) != value:
                return False
        for key, operator, values in self.match_expressions:
            if operator == "In":
                if get(key) not in values:
                    return False
            elif operator == "NotIn":
                current = get(key)
                if current is not None and current in values:
                    return False
            elif operator == "Exists":
                if key not in labels:
                    return False
            elif key in labels:  # DoesNotExist
                return False
        return True

    @property
    def is_empty(self) -> bool:
        """True for ``{}``, which selects everything."""
        return not self.null and not self.match_labels and not self.match_expressions

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.match_labels) | frozenset(e.key for e in self.match_expressions)

    def with_expressions(self, extra: Iterable[LabelSelectorRequirement]) -> LabelSelector:
        extra = tuple(extra)
        if not extra:
            return self
        return intern(LabelSelector(self.match_labels, _sorted_expressions(self.match_expressions + extra)))

    def to_manifest(self) -> dict[str, Any] | None:
        if self.null:
            return None
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [
                {"key": k, "operator": op, **({"values": sorted(v)} if op in ("In", "NotIn") else {})}
                for k, op, v in self.match_expressions
            ]
        return out

    def __str__(self) -> str:
        """kubectl's selector syntax: ``app=web,tier in (a,b),!legacy``."""
        if self.null:
            return "<nothing>"
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for key, operator, values in self.match_expressions:
            if operator == "In":
                parts.append(f"{key} in ({','.join(sorted(values))})")
            elif operator == "NotIn":
                parts.append(f"{key} notin ({','.join(sorted(values))})")
            elif operator == "Exists":
                parts.append(key)
            else:
                parts.append(f"!{key}")
        return ",".join(parts) if parts else "<everything>"

    @classmethod
    def from_manifest(cls, value: Any, path: str = "labelSelector") -> LabelSelector:
        """Parse a LabelSelector; ``None`` gives :data:`NOTHING`, ``{}`` :data:`EVERYTHING`."""
        if value is None:
            return NOTHING
        raw = read_object(value, path)
        match_labels = tuple(sorted(read_str_map(raw.get("matchLabels"), f"{path}.matchLabels").items()))
        expressions = []
        for i, item in enumerate(read_list(raw.get("matchExpressions"), f"{path}.matchExpressions")):
            where = f"{path}.matchExpressions[{i}]"
            expr = read_object(item, where)
            key = read_str(expr.get("key"), f"{where}.key", required=True)
            operator = read_str(expr.get("operator"), f"{where}.operator", required=True)
            if operator not in LABEL_SELECTOR_OPERATORS:
                raise PodError(f"{where}.operator", f"{operator!r} is not one of {', '.join(LABEL_SELECTOR_OPERATORS)}")
            values = read_str_list(expr.get("values"), f"{where}.values")
            if operator in ("In", "NotIn") and not values:
                raise PodError(f"{where}.values", f"must name at least one value for {operator}")
            if operator in ("Exists", "DoesNotExist") and values:
                raise PodError(f"{where}.values", f"must be empty for {operator}")
            expressions.append(LabelSelectorRequirement(key, operator, frozenset(values)))
        if not match_labels and not expressions:
            return EVERYTHING
        return intern(cls(match_labels, _sorted_expressions(expressions)))


def _sorted_expressions(expressions: Iterable[LabelSelectorRequirement]) -> tuple[LabelSelectorRequirement, ...]:
    return tuple(sorted(set(expressions), key=lambda e: (e.key, e.operator, sorted(e.values))))


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(null=True)
LabelSelector.EVERYTHING = EVERYTHING  # type: ignore[attr-defined]
LabelSelector.NOTHING = NOTHING  # type: ignore[attr-defined]
