"""Taints and tolerations with Kubernetes' semantics (``k8s.io/api/core/v1`` ``ToleratesTaint``).

A NodePool's ``spec.template.spec.taints`` must all be tolerated by a pod for it to go on
the NodePool's nodes, ``PreferNoSchedule`` included; the solver relaxes that last, by
passing ``ignore_prefer_no_schedule=True`` (upstream adds a toleration for them instead).
``startupTaints`` are never considered: Karpenter expects something on the node to remove
them, so callers pass only ``taints`` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"
EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)

EQUAL = "Equal"
EXISTS = "Exists"


class TolerationLike(Protocol):
    """Anything with a toleration's fields: ``Toleration`` here, ``pods.PodToleration``."""

    @property
    def key(self) -> str: ...
    @property
    def operator(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


def toleration_tolerates(toleration: TolerationLike, taint: Taint) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator
    if operator == EXISTS:
        return True
    if operator == EQUAL or not operator:
        return toleration.value == taint.value
    return False  # an operator Kubernetes does not know tolerates nothing


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = NO_SCHEDULE

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Taint:
        """From a Kubernetes taint ``{key, value?, effect}``; key and a known effect are required."""
        key = data.get("key")
        effect = data.get("effect")
        if not key:
            raise ValueError(f"taint {dict(data)} has no key")
        if effect not in EFFECTS:
            raise ValueError(f"taint {key}: effect must be one of {', '.join(EFFECTS)}, not {effect!r}")
        return cls(key, data.get("value") or "", effect)

    @classmethod
    def parse(cls, text: str) -> Taint:
        """From kubectl's form ``key[=value]:Effect``."""
        spec, sep, effect = text.rpartition(":")
        if not sep or effect not in EFFECTS:
            raise ValueError(f"taint {text!r} is not key[=value]:Effect with Effect one of {', '.join(EFFECTS)}")
        key, _, value = spec.partition("=")
        if not key:
            raise ValueError(f"taint {text!r} has no key")
        return cls(key, value, effect)

    def to_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration. Empty key (with Exists) matches every key; empty effect every effect."""

    key: str = ""
    operator: str = EQUAL
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Toleration:
        """From a Kubernetes toleration ``{key?, operator?, value?, effect?, tolerationSeconds?}``."""
        return cls(
            key=data.get("key") or "",
            operator=data.get("operator") or EQUAL,
            value=data.get("value") or "",
            effect=data.get("effect") or "",
            toleration_seconds=data.get("tolerationSeconds"),
        )

    def tolerates(self, taint: Taint) -> bool:
        return toleration_tolerates(self, taint)

    def __str__(self) -> str:
        key = self.key or "*"
        what = f"{key}={self.value}" if self.operator != EXISTS else f"{key} Exists"
        return f"{what}:{self.effect or '*'}"


# The toleration upstream's last relaxation step adds.
TOLERATE_PREFER_NO_SCHEDULE = Toleration(operator=EXISTS, effect=PREFER_NO_SCHEDULE)


def taints_from_list(items: Iterable[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(Taint.from_dict(item) for item in items or ())


def tolerations_from_list(items: Iterable[Mapping[str, Any]] | None) -> tuple[Toleration, ...]:
    return tuple(Toleration.from_dict(item) for item in items or ())


def tolerates(tolerations: Iterable[TolerationLike], taint: Taint) -> bool:
    """Does any of ``tolerations`` tolerate ``taint``?"""
    return any(toleration_tolerates(t, taint) for t in tolerations)


def untolerated(
    tolerations: Iterable[TolerationLike],
    taints: Iterable[Taint],
    *,
    ignore_prefer_no_schedule: bool = False,
) -> Taint | None:
    """The first of ``taints`` that no toleration tolerates, or None when the pod may go.

    Pass a NodePool's (or node's) ``taints`` only, never its ``startupTaints``.
    ``PreferNoSchedule`` taints count unless ``ignore_prefer_no_schedule``.
    """
    if not isinstance(tolerations, list | tuple):
        tolerations = tuple(tolerations)
    for taint in taints:
        if ignore_prefer_no_schedule and taint.effect == PREFER_NO_SCHEDULE:
            continue
        for toleration in tolerations:
            if toleration_tolerates(toleration, taint):
                break
        else:
            return taint
    return None
