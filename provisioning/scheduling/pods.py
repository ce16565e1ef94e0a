"""Pods as the solver sees them: effective requests and every pod-side scheduling constraint.

``Pod.from_manifest`` reads a Kubernetes Pod (``Pod.from_template`` a workload's pod template)
into plain frozen dataclasses. Constraints are kept as normalized Kubernetes data (node selector
terms as ``(key, operator, values)`` tuples, tolerations as their fields); turning them into
requirements and taint checks is the solver's business.

Parsing is built for tens of thousands of pods: quantities are cached, and identical label maps,
requests, terms, tolerations and selectors are interned, so pods of one shape share one object
for each of them and ``shape_key`` hashes in constant time once computed.

Bad input raises :class:`PodError` naming the field (``spec.containers[0].resources.requests.cpu``)
and what would be valid; no other exception escapes the parser.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, NamedTuple

from provisioning.scheduling.quantity import QuantityError, format_quantity, parse_quantity, to_int

__all__ = [
    "EMPTY_MAP",
    "NO_AFFINITY",
    "FrozenMap",
    "HostPort",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Owner",
    "Pod",
    "PodAffinity",
    "PodAffinityTerm",
    "PodError",
    "PodToleration",
    "PreferredSchedulingTerm",
    "ShapeKey",
    "TopologySpreadConstraint",
    "WeightedPodAffinityTerm",
    "effective_requests",
    "parse_pod",
    "intern",
]

DEFAULT_NAMESPACE = "default"
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")
POD_LEVEL_RESOURCES = ("cpu", "memory")
_MAX_QUANTITY = 2**63 - 1
_MAX_INT32 = 2**31 - 1


# --------------------------------------------------------------------------------------------
# Errors


class PodError(ValueError):
    """Bad input at one field: ``path`` is where (``spec.containers[0].resources.requests.cpu``),
    ``message`` what is wrong and what would be valid; ``document`` which manifest
    (``Deployment web``) when known."""

    def __init__(self, path: str, message: str, document: str = "") -> None:
        self.path = path
        self.message = message
        self.document = document
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.path}: {self.message}" if self.path else self.message
        return f"{self.document}: {where}" if self.document else where

    def __str__(self) -> str:
        return self._text()

    def __reduce__(self):
        return (PodError, (self.path, self.message, self.document))

    def in_document(self, document: str) -> PodError:
        """The same error attributed to a manifest."""
        return PodError(self.path, self.message, document)


# --------------------------------------------------------------------------------------------
# An immutable, hashable mapping and interning


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


def _frozen_map(items: Mapping[str, Any]) -> FrozenMap:
    if not items:
        return EMPTY_MAP
    return intern(items if isinstance(items, FrozenMap) else FrozenMap(items))


# --------------------------------------------------------------------------------------------
# Reading raw manifests: type checks that name the field

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _key_path(path: str, key: str) -> str:
    """``requests.cpu`` for plain keys, ``requests[nvidia.com/gpu]`` for the rest."""
    return f"{path}.{key}" if _IDENT.match(key) else f"{path}[{key}]"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _obj(value: Any, path: str) -> dict:
    """An optional mapping: null reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodError(path, f"must be an object (a mapping of fields), not {_type_name(value)}")
    return value


def _list(value: Any, path: str) -> list:
    """An optional list: null reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodError(path, f"must be a list, not {_type_name(value)}")
    return value


def _str(value: Any, path: str, *, required: bool = False, default: str = "") -> str:
    if value is None:
        if required:
            raise PodError(path, "is required (a non-empty string)")
        return default
    if not isinstance(value, str):
        hint = f' (quote it: "{value}")' if isinstance(value, bool | int | float) else ""
        raise PodError(path, f"must be a string, not {_type_name(value)}{hint}")
    if required and not value:
        raise PodError(path, "must not be empty")
    return value


def _int(value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise PodError(path, f"must be an integer, not {_type_name(value)} ({value!r})")
    if minimum is not None and value < minimum:
        raise PodError(path, f"must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise PodError(path, f"must be at most {maximum}, not {value}")
    return value


def _str_map(value: Any, path: str) -> FrozenMap:
    """A string-to-string map (labels, nodeSelector, matchLabels)."""
    raw = _obj(value, path)
    for key, item in raw.items():
        if not isinstance(key, str) or not key:
            raise PodError(path, f"keys must be non-empty strings, not {key!r}")
        _str(item, _key_path(path, key), default="")
    if any(v is None for v in raw.values()):
        raw = {k: ("" if v is None else v) for k, v in raw.items()}
    return _frozen_map(raw)


def _str_list(value: Any, path: str) -> tuple[str, ...]:
    items = _list(value, path)
    return tuple(_str(item, f"{path}[{i}]", required=True) for i, item in enumerate(items))


# --------------------------------------------------------------------------------------------
# Quantities


@lru_cache(maxsize=16384)
def _quantity(resource: str, value: str | int | float) -> int:
    if _is_extended(resource):
        exact = parse_quantity(value)
        if exact != exact.to_integral_value():
            raise QuantityError(f"{value!r}: {resource} is an extended resource and must be a whole number")
    amount = to_int(resource, value)
    if amount > _MAX_QUANTITY:
        raise QuantityError(f"{value!r} is out of range (at most {_MAX_QUANTITY} base units)")
    return amount


def _is_extended(resource: str) -> bool:
    """Kubernetes' extended resources (``nvidia.com/gpu``): domain-prefixed, not ``kubernetes.io/``."""
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests."))


def _to_int(resource: str, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PodError(path, f"must be a quantity such as 500m, 2, 4Gi or 1.5G, not {_type_name(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise PodError(path, f"{value!r} is not a quantity (e.g. 500m, 2, 4Gi, 1.5G)")
    if isinstance(value, str) and len(value) > 64:
        raise PodError(path, "is not a quantity (e.g. 500m, 2, 4Gi, 1.5G): too long")
    try:
        amount = _quantity(resource, value)
    except QuantityError as exc:
        raise PodError(path, str(exc)) from None
    except (ArithmeticError, ValueError) as exc:
        raise PodError(path, f"{value!r} is out of range ({exc.__class__.__name__})") from None
    if amount < 0:
        raise PodError(path, f"must not be negative (got {value!r}); requests and limits are 0 or more")
    return amount


def _resource_list(value: Any, path: str) -> dict[str, int]:
    raw = _obj(value, path)
    out: dict[str, int] = {}
    for name, quantity in raw.items():
        if not isinstance(name, str) or not name:
            raise PodError(path, f"resource names must be non-empty strings, not {name!r}")
        out[name] = _to_int(name, quantity, _key_path(path, name))
    return out


def _add_into(total: dict[str, int], part: Mapping[str, int]) -> None:
    for name, amount in part.items():
        total[name] = total.get(name, 0) + amount


def _max_into(total: dict[str, int], part: Mapping[str, int]) -> None:
    for name, amount in part.items():
        if amount > total.get(name, 0):
            total[name] = amount


def _container_requests(container: dict, path: str) -> dict[str, int]:
    """A container's requests, each missing request defaulted to its limit (as the API server does)."""
    resources = _obj(container.get("resources"), f"{path}.resources")
    requests = _resource_list(resources.get("requests"), f"{path}.resources.requests")
    limits = _resource_list(resources.get("limits"), f"{path}.resources.limits")
    for name, limit in limits.items():
        request = requests.get(name)
        if request is None:
            requests[name] = limit
        elif request > limit:
            raise PodError(
                _key_path(f"{path}.resources.requests", name),
                f"{format_quantity(name, request)} is more than the limit {format_quantity(name, limit)}; "
                "a request must be at most its limit",
            )
    return requests


def effective_requests(
    containers: Iterable[Mapping[str, int]],
    init_containers: Iterable[tuple[Mapping[str, int], bool]] = (),
    overhead: Mapping[str, int] | None = None,
    pod_level: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Kubernetes' effective pod requests (``resourcehelper.PodRequests``), plus ``pods: 1``.

    ``init_containers`` are ``(requests, is_sidecar)`` in order. Sidecars (restartPolicy Always)
    keep running: they add to the app containers' sum, and to every init container started
    after them. The result is max(sum, each init container's peak) + overhead. Pod-level
    requests, when given, replace the container aggregate for their resources.
    """
    total: dict[str, int] = {}
    for requests in containers:
        _add_into(total, requests)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for requests, is_sidecar in init_containers:
        if is_sidecar:
            _add_into(total, requests)
            _add_into(sidecars, requests)
            _max_into(init_peak, sidecars)
        else:
            running = dict(sidecars)
            _add_into(running, requests)
            _max_into(init_peak, running)
    _max_into(total, init_peak)
    if pod_level:
        total.update(pod_level)
    if overhead:
        _add_into(total, overhead)
    out = {name: amount for name, amount in total.items() if amount}
    out["pods"] = 1
    return out


# --------------------------------------------------------------------------------------------
# Label selectors


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
        raw = _obj(value, path)
        match_labels = tuple(sorted(_str_map(raw.get("matchLabels"), f"{path}.matchLabels").items()))
        expressions = []
        for i, item in enumerate(_list(raw.get("matchExpressions"), f"{path}.matchExpressions")):
            where = f"{path}.matchExpressions[{i}]"
            expr = _obj(item, where)
            key = _str(expr.get("key"), f"{where}.key", required=True)
            operator = _str(expr.get("operator"), f"{where}.operator", required=True)
            if operator not in LABEL_SELECTOR_OPERATORS:
                raise PodError(f"{where}.operator", f"{operator!r} is not one of {', '.join(LABEL_SELECTOR_OPERATORS)}")
            values = _str_list(expr.get("values"), f"{where}.values")
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


def _resolve_label_keys(
    selector: LabelSelector,
    labels: Mapping[str, str],
    match_keys: tuple[str, ...],
    mismatch_keys: tuple[str, ...],
    path: str,
) -> LabelSelector:
    """matchLabelKeys / mismatchLabelKeys folded into the selector from the pod's own labels,
    as the API server does (keys the pod does not carry are ignored)."""
    if not match_keys and not mismatch_keys:
        return selector
    if selector.null:
        raise PodError(path, "matchLabelKeys and mismatchLabelKeys need a labelSelector")
    taken = selector.keys
    for name, keys in (("matchLabelKeys", match_keys), ("mismatchLabelKeys", mismatch_keys)):
        for i, key in enumerate(keys):
            if key in taken:
                raise PodError(f"{path}.{name}[{i}]", f"{key!r} is already in labelSelector; a key may be in only one")
    extra = [LabelSelectorRequirement(k, "In", frozenset((labels[k],))) for k in match_keys if k in labels]
    extra += [LabelSelectorRequirement(k, "NotIn", frozenset((labels[k],))) for k in mismatch_keys if k in labels]
    return selector.with_expressions(extra)


# --------------------------------------------------------------------------------------------
# Node affinity


class NodeSelectorRequirement(NamedTuple):
    """``(key, operator, values)``; values sorted and de-duplicated."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...]

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One node selector term: all expressions must hold (AND). A term with no expressions
    and no fields matches no node, as in Kubernetes. ``match_fields`` (only ``metadata.name``)
    are kept so the solver can report them: Karpenter does not provision for such pods."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_expressions:
            out["matchExpressions"] = [r.to_manifest() for r in self.match_expressions]
        if self.match_fields:
            out["matchFields"] = [r.to_manifest() for r in self.match_fields]
        return out


@dataclass(frozen=True, slots=True)
class PreferredSchedulingTerm:
    weight: int  # 1..100
    term: NodeSelectorTerm


def _node_requirements(value: Any, path: str, *, fields: bool) -> tuple[NodeSelectorRequirement, ...]:
    out = []
    for i, item in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        expr = _obj(item, where)
        key = _str(expr.get("key"), f"{where}.key", required=True)
        operator = _str(expr.get("operator"), f"{where}.operator", required=True)
        allowed = ("In", "NotIn") if fields else NODE_SELECTOR_OPERATORS
        if operator not in allowed:
            raise PodError(f"{where}.operator", f"{operator!r} is not one of {', '.join(allowed)}")
        values = tuple(sorted(set(_str_list(expr.get("values"), f"{where}.values"))))
        if fields:
            if key != "metadata.name":
                raise PodError(f"{where}.key", f"{key!r} is not a supported field; matchFields supports metadata.name")
            if len(values) != 1:
                raise PodError(f"{where}.values", "must hold exactly one node name")
        elif operator in ("In", "NotIn") and not values:
            raise PodError(f"{where}.values", f"must name at least one value for {operator}")
        elif operator in ("Exists", "DoesNotExist") and values:
            raise PodError(f"{where}.values", f"must be empty for {operator}")
        elif operator in ("Gt", "Lt") and (len(values) != 1 or not re.fullmatch(r"-?[0-9]+", values[0])):
            raise PodError(f"{where}.values", f"must hold exactly one integer for {operator}, e.g. ['4']")
        out.append(NodeSelectorRequirement(key, operator, values))
    return tuple(out)


def _node_selector_term(value: Any, path: str) -> NodeSelectorTerm:
    raw = _obj(value, path)
    expressions = _node_requirements(raw.get("matchExpressions"), f"{path}.matchExpressions", fields=False)
    fields = _node_requirements(raw.get("matchFields"), f"{path}.matchFields", fields=True)
    return intern(NodeSelectorTerm(expressions, fields))


# --------------------------------------------------------------------------------------------
# Tolerations


@dataclass(frozen=True, slots=True)
class PodToleration:
    """A pod toleration, normalized: operator defaults to Equal, value and effect to ``""``
    (an empty effect tolerates every effect; an empty key with Exists tolerates every taint)."""

    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # "" | NoSchedule | PreferNoSchedule | NoExecute
    toleration_seconds: int | None = None

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out

    @classmethod
    def from_manifest(cls, value: Any, path: str = "toleration") -> PodToleration:
        raw = _obj(value, path)
        key = _str(raw.get("key"), f"{path}.key")
        operator = _str(raw.get("operator"), f"{path}.operator") or "Equal"
        if operator not in TOLERATION_OPERATORS:
            raise PodError(f"{path}.operator", f"{operator!r} is not one of Equal, Exists")
        toleration_value = _str(raw.get("value"), f"{path}.value")
        effect = _str(raw.get("effect"), f"{path}.effect")
        if effect and effect not in TAINT_EFFECTS:
            raise PodError(f"{path}.effect", f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)} (or empty for all)")
        if operator == "Exists" and toleration_value:
            raise PodError(f"{path}.value", "must be empty when operator is Exists")
        if not key and operator != "Exists":
            raise PodError(f"{path}.operator", "must be Exists when key is empty (a toleration of every taint)")
        seconds = raw.get("tolerationSeconds")
        if seconds is not None:
            seconds = _int(seconds, f"{path}.tolerationSeconds")
            if effect != "NoExecute":
                raise PodError(f"{path}.tolerationSeconds", "only applies with effect NoExecute")
        return intern(cls(key, operator, toleration_value, effect, seconds))


# --------------------------------------------------------------------------------------------
# Topology spread and pod (anti-)affinity


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    """One ``topologySpreadConstraints`` entry. ``label_selector`` already includes the
    matchLabelKeys resolved from the pod's labels; policies hold their defaults (Honor/Ignore)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    label_selector: LabelSelector = NOTHING
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"
    match_label_keys: tuple[str, ...] = ()

    @property
    def hard(self) -> bool:
        """DoNotSchedule; ScheduleAnyway spreads are preferences, relaxed when needed."""
        return self.when_unsatisfiable == "DoNotSchedule"


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A pod (anti-)affinity term. ``namespaces`` is already resolved: the listed namespaces,
    or the pod's own when neither ``namespaces`` nor ``namespaceSelector`` is given;
    ``namespace_selector`` is None when absent (``{}`` selects every namespace)."""

    topology_key: str
    label_selector: LabelSelector = NOTHING
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()

    @property
    def all_namespaces(self) -> bool:
        return self.namespace_selector is not None and self.namespace_selector.is_empty

    def selects_namespace(self, namespace: str, namespace_labels: Mapping[str, str] | None = None) -> bool:
        """Whether pods in ``namespace`` are in scope. Without the namespace's labels, only its
        well-known ``kubernetes.io/metadata.name`` label is assumed."""
        if namespace in self.namespaces:
            return True
        if self.namespace_selector is None:
            return False
        if namespace_labels is None:
            namespace_labels = {"kubernetes.io/metadata.name": namespace}
        return self.namespace_selector.matches(namespace_labels)

    def selects(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None = None
    ) -> bool:
        """Whether a pod with these labels in this namespace is one the term is about."""
        return self.label_selector.matches(labels) and self.selects_namespace(namespace, namespace_labels)


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int  # 1..100
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """Required (all must hold) and preferred (weighted) terms of podAffinity or podAntiAffinity."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred)


NO_AFFINITY = PodAffinity()


class HostPort(NamedTuple):
    host_ip: str  # "" = every address
    protocol: str  # TCP | UDP | SCTP
    port: int


class Owner(NamedTuple):
    kind: str
    name: str


def _weight(value: Any, path: str) -> int:
    if value is None:
        raise PodError(path, "is required (an integer from 1 to 100)")
    return _int(value, path, minimum=1, maximum=100)


def _pod_affinity_term(raw_value: Any, path: str, namespace: str, labels: Mapping[str, str]) -> PodAffinityTerm:
    raw = _obj(raw_value, path)
    topology_key = _str(raw.get("topologyKey"), f"{path}.topologyKey", required=True)
    selector = LabelSelector.from_manifest(raw.get("labelSelector"), f"{path}.labelSelector")
    match_keys = _str_list(raw.get("matchLabelKeys"), f"{path}.matchLabelKeys")
    mismatch_keys = _str_list(raw.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys")
    selector = _resolve_label_keys(selector, labels, match_keys, mismatch_keys, path)
    namespaces = frozenset(_str_list(raw.get("namespaces"), f"{path}.namespaces"))
    ns_selector = raw.get("namespaceSelector")
    namespace_selector = None
    if ns_selector is not None:
        namespace_selector = LabelSelector.from_manifest(ns_selector, f"{path}.namespaceSelector")
    if not namespaces and namespace_selector is None:
        namespaces = frozenset((namespace,))
    return intern(
        PodAffinityTerm(topology_key, selector, intern(namespaces), namespace_selector, match_keys, mismatch_keys)
    )


def _pod_affinity(value: Any, path: str, namespace: str, labels: Mapping[str, str]) -> PodAffinity:
    raw = _obj(value, path)
    if not raw:
        return NO_AFFINITY
    where = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    required_raw = _list(raw.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    required = tuple(
        _pod_affinity_term(item, f"{where}[{i}]", namespace, labels) for i, item in enumerate(required_raw)
    )
    where = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, item in enumerate(_list(raw.get("preferredDuringSchedulingIgnoredDuringExecution"), where)):
        entry = _obj(item, f"{where}[{i}]")
        weight = _weight(entry.get("weight"), f"{where}[{i}].weight")
        if entry.get("podAffinityTerm") is None:
            raise PodError(f"{where}[{i}].podAffinityTerm", "is required")
        term = _pod_affinity_term(entry["podAffinityTerm"], f"{where}[{i}].podAffinityTerm", namespace, labels)
        preferred.append(WeightedPodAffinityTerm(weight, term))
    if not required and not preferred:
        return NO_AFFINITY
    return intern(PodAffinity(required, tuple(preferred)))


def _topology_spread(value: Any, path: str, labels: Mapping[str, str]) -> tuple[TopologySpreadConstraint, ...]:
    out = []
    seen: dict[tuple[str, str], int] = {}
    for i, item in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        raw = _obj(item, where)
        if raw.get("maxSkew") is None:
            raise PodError(f"{where}.maxSkew", "is required (an integer of 1 or more)")
        max_skew = _int(raw["maxSkew"], f"{where}.maxSkew", minimum=1, maximum=_MAX_INT32)
        topology_key = _str(raw.get("topologyKey"), f"{where}.topologyKey", required=True)
        when = _str(raw.get("whenUnsatisfiable"), f"{where}.whenUnsatisfiable", required=True)
        if when not in WHEN_UNSATISFIABLE:
            raise PodError(f"{where}.whenUnsatisfiable", f"{when!r} is not one of DoNotSchedule, ScheduleAnyway")
        if (topology_key, when) in seen:
            raise PodError(
                f"{where}.topologyKey",
                f"duplicates {path}[{seen[topology_key, when]}]: one constraint per topologyKey and whenUnsatisfiable",
            )
        seen[topology_key, when] = i
        min_domains = raw.get("minDomains")
        if min_domains is not None:
            min_domains = _int(min_domains, f"{where}.minDomains", minimum=1, maximum=_MAX_INT32)
            if when != "DoNotSchedule":
                raise PodError(f"{where}.minDomains", "only applies with whenUnsatisfiable DoNotSchedule")
        policies = []
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            policy = _str(raw.get(name), f"{where}.{name}") or default
            if policy not in INCLUSION_POLICIES:
                raise PodError(f"{where}.{name}", f"{policy!r} is not one of Honor, Ignore")
            policies.append(policy)
        selector = LabelSelector.from_manifest(raw.get("labelSelector"), f"{where}.labelSelector")
        match_keys = _str_list(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys")
        selector = _resolve_label_keys(selector, labels, match_keys, (), where)
        out.append(
            intern(
                TopologySpreadConstraint(
                    max_skew, topology_key, when, selector, min_domains, policies[0], policies[1], match_keys
                )
            )
        )
    return tuple(out)


# --------------------------------------------------------------------------------------------
# The pod


class ShapeKey:
    """A pod's scheduling shape: hashed once, compared by identity first."""

    __slots__ = ("_hash", "parts")

    def __init__(self, parts: tuple) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ShapeKey):
            return NotImplemented
        return self._hash == other._hash and self.parts == other.parts

    def __reduce__(self):
        # string hashes differ between processes: rebuild, never carry the cached hash over
        return (ShapeKey, (self.parts,))

    def __repr__(self) -> str:
        return f"ShapeKey({self._hash:#x})"


_PODS_ONLY = FrozenMap({"pods": 1})


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the solver sees it.

    ``requests`` are the effective requests in integer units (cpu millicores, memory and
    storage bytes, counts otherwise) and always include ``pods: 1``. ``required_node_affinity``
    is an OR of terms; ``node_selector`` and every term are ANDed with it by the solver.
    """

    namespace: str
    name: str
    requests: Mapping[str, int] = _PODS_ONLY
    labels: Mapping[str, str] = EMPTY_MAP
    uid: str | None = None
    node_selector: Mapping[str, str] = EMPTY_MAP
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()
    preferred_node_affinity: tuple[PreferredSchedulingTerm, ...] = ()
    tolerations: tuple[PodToleration, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    pod_affinity: PodAffinity = NO_AFFINITY
    pod_anti_affinity: PodAffinity = NO_AFFINITY
    host_ports: tuple[HostPort, ...] = ()
    priority: int = 0
    owner: Owner | None = None
    is_daemonset: bool = False
    node_name: str | None = None
    scheduling_gated: bool = False
    creation_timestamp: str | None = None  # RFC 3339 as written, e.g. 2025-01-02T03:04:05Z
    _shape: ShapeKey | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Direct construction (tests, the solver) may pass plain dicts and lists.
        if not isinstance(self.requests, FrozenMap) or "pods" not in self.requests:
            requests = dict(self.requests)
            requests.setdefault("pods", 1)
            object.__setattr__(self, "requests", _frozen_map(requests))
        for name in ("labels", "node_selector"):
            value = getattr(self, name)
            if not isinstance(value, FrozenMap):
                object.__setattr__(self, name, _frozen_map(dict(value)))
        for name in (
            "required_node_affinity",
            "preferred_node_affinity",
            "tolerations",
            "topology_spread",
            "host_ports",
        ):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.owner is not None and not isinstance(self.owner, Owner):
            object.__setattr__(self, "owner", Owner(*self.owner))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        """Waiting for a node: not bound, not gated."""
        return self.node_name is None and not self.scheduling_gated

    @property
    def shape_key(self) -> ShapeKey:
        """Everything scheduling-relevant except identity (name, uid, owner, creation time):
        replicas of one template have equal (and, when expanded together, identical) keys."""
        shape = self._shape
        if shape is None:
            shape = ShapeKey(
                (
                    self.namespace,
                    self.labels,
                    self.requests,
                    self.node_selector,
                    self.required_node_affinity,
                    self.preferred_node_affinity,
                    self.tolerations,
                    self.topology_spread,
                    self.pod_affinity,
                    self.pod_anti_affinity,
                    self.host_ports,
                    self.priority,
                    self.is_daemonset,
                    self.node_name,
                    self.scheduling_gated,
                )
            )
            object.__setattr__(self, "_shape", shape)
        return shape

    def renamed(self, name: str, uid: str | None = None) -> Pod:
        """A copy under another name sharing every other field (and the computed shape key)."""
        self.shape_key  # noqa: B018  (computed once, shared by the copies)
        new = object.__new__(Pod)
        for slot in _POD_SLOTS:
            object.__setattr__(new, slot, getattr(self, slot))
        object.__setattr__(new, "name", name)
        object.__setattr__(new, "uid", uid)
        return new

    @classmethod
    def from_manifest(cls, manifest: Any) -> Pod:
        """A Kubernetes Pod manifest (``kind: Pod``), bound or pending."""
        if not isinstance(manifest, dict):
            raise PodError("", f"a Pod manifest must be an object with metadata and spec, not {_type_name(manifest)}")
        kind = manifest.get("kind")
        if kind is not None and kind != "Pod":
            raise PodError("kind", f"must be Pod, not {kind!r}")
        metadata = _obj(manifest.get("metadata"), "metadata")
        name = _str(metadata.get("name"), "metadata.name", required=True)
        owner = None
        is_daemonset = False
        for i, ref in enumerate(_list(metadata.get("ownerReferences"), "metadata.ownerReferences")):
            ref = _obj(ref, f"metadata.ownerReferences[{i}]")
            if ref.get("controller") is True:
                owner = Owner(
                    _str(ref.get("kind"), f"metadata.ownerReferences[{i}].kind"),
                    _str(ref.get("name"), f"metadata.ownerReferences[{i}].name"),
                )
                is_daemonset = owner.kind == "DaemonSet"
        uid = _str(metadata.get("uid"), "metadata.uid") or None
        created = _timestamp(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
        return parse_pod(
            metadata,
            manifest.get("spec"),
            path="",
            namespace=_str(metadata.get("namespace"), "metadata.namespace") or DEFAULT_NAMESPACE,
            name=name,
            uid=uid,
            owner=owner,
            is_daemonset=is_daemonset,
            creation_timestamp=created,
        )

    @classmethod
    def from_template(
        cls,
        template: Any,
        *,
        namespace: str,
        name: str,
        owner: Owner | None = None,
        path: str = "spec.template",
        extra_labels: Mapping[str, str] | None = None,
        is_daemonset: bool = False,
    ) -> Pod:
        """A workload's pod template (``{metadata, spec}``) as one pod named ``name``."""
        template = _obj(template, path)
        if not template:
            raise PodError(path, "is required (a pod template with metadata and spec)")
        metadata = _obj(template.get("metadata"), f"{path}.metadata")
        return parse_pod(
            metadata,
            template.get("spec"),
            path=path,
            namespace=namespace,
            name=name,
            owner=owner,
            extra_labels=extra_labels,
            is_daemonset=is_daemonset,
        )


_POD_SLOTS = Pod.__slots__


def _timestamp(value: Any, path: str) -> str | None:
    """RFC 3339 text; YAML loaders turn unquoted timestamps into datetimes, which are written back."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return _str(value, path) or None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _host_ports(containers: Iterable[tuple[dict, str]], host_network: bool) -> tuple[HostPort, ...]:
    ports = set()
    for container, path in containers:
        for j, port in enumerate(_list(container.get("ports"), f"{path}.ports")):
            where = f"{path}.ports[{j}]"
            port = _obj(port, where)
            host_port = port.get("hostPort")
            if host_port is None and host_network and port.get("containerPort") is not None:
                host_port = port["containerPort"]
                where_port = f"{where}.containerPort"
            else:
                where_port = f"{where}.hostPort"
            if host_port is None or host_port == 0:
                continue
            number = _int(host_port, where_port, minimum=1, maximum=65535)
            protocol = _str(port.get("protocol"), f"{where}.protocol") or "TCP"
            if protocol not in ("TCP", "UDP", "SCTP"):
                raise PodError(f"{where}.protocol", f"{protocol!r} is not one of TCP, UDP, SCTP")
            ports.add(HostPort(_str(port.get("hostIP"), f"{where}.hostIP"), protocol, number))
    return intern(tuple(sorted(ports)))


def parse_pod(
    metadata: dict,
    spec_value: Any,
    *,
    path: str,
    namespace: str,
    name: str,
    uid: str | None = None,
    owner: Owner | None = None,
    extra_labels: Mapping[str, str] | None = None,
    is_daemonset: bool = False,
    creation_timestamp: str | None = None,
) -> Pod:
    """The shared reader behind ``Pod.from_manifest`` and ``Pod.from_template``; ``path`` is
    where the pod's ``metadata``/``spec`` sit in the document (``""`` or ``spec.template``)."""
    meta_path = _join(path, "metadata")
    spec_path = _join(path, "spec")
    if spec_value is None:
        raise PodError(spec_path, "is required (a pod spec with containers)")
    spec = _obj(spec_value, spec_path)
    labels = _str_map(metadata.get("labels"), f"{meta_path}.labels")
    if extra_labels:
        labels = _frozen_map({**extra_labels, **labels})

    # Resources
    containers_path = f"{spec_path}.containers"
    containers = _list(spec.get("containers"), containers_path)
    if not containers:
        raise PodError(containers_path, "must list at least one container")
    app = []
    running: list[tuple[dict, str]] = []
    for i, container in enumerate(containers):
        where = f"{containers_path}[{i}]"
        container = _obj(container, where)
        app.append(_container_requests(container, where))
        running.append((container, where))
    init = []
    init_path = f"{spec_path}.initContainers"
    for i, container in enumerate(_list(spec.get("initContainers"), init_path)):
        where = f"{init_path}[{i}]"
        container = _obj(container, where)
        is_sidecar = _str(container.get("restartPolicy"), f"{where}.restartPolicy") == "Always"
        init.append((_container_requests(container, where), is_sidecar))
        if is_sidecar:
            running.append((container, where))
    overhead = _resource_list(spec.get("overhead"), f"{spec_path}.overhead")
    pod_level = None
    if spec.get("resources") is not None:
        pod_level = _container_requests(spec, spec_path)
        for resource in pod_level:
            if resource not in POD_LEVEL_RESOURCES and not resource.startswith("hugepages-"):
                raise PodError(
                    _key_path(f"{spec_path}.resources.requests", resource),
                    "pod-level resources support only cpu, memory and hugepages-*",
                )
    requests = _frozen_map(effective_requests(app, init, overhead, pod_level))

    # Node selection
    node_selector = _str_map(spec.get("nodeSelector"), f"{spec_path}.nodeSelector")
    affinity_path = f"{spec_path}.affinity"
    affinity = _obj(spec.get("affinity"), affinity_path)
    node_affinity = _obj(affinity.get("nodeAffinity"), f"{affinity_path}.nodeAffinity")
    required: tuple[NodeSelectorTerm, ...] = ()
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_raw is not None:
        where = f"{affinity_path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        terms = _list(_obj(required_raw, where).get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
        if not terms:
            raise PodError(f"{where}.nodeSelectorTerms", "must hold at least one term")
        required = intern(tuple(_node_selector_term(t, f"{where}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)))
    preferred = []
    where = f"{affinity_path}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, item in enumerate(_list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), where)):
        entry = _obj(item, f"{where}[{i}]")
        weight = _weight(entry.get("weight"), f"{where}[{i}].weight")
        if entry.get("preference") is None:
            raise PodError(f"{where}[{i}].preference", "is required (a node selector term)")
        term = _node_selector_term(entry["preference"], f"{where}[{i}].preference")
        preferred.append(intern(PreferredSchedulingTerm(weight, term)))

    tolerations_path = f"{spec_path}.tolerations"
    tolerations = intern(
        tuple(
            PodToleration.from_manifest(t, f"{tolerations_path}[{i}]")
            for i, t in enumerate(_list(spec.get("tolerations"), tolerations_path))
        )
    )
    if is_daemonset:
        tolerations = _with_daemonset_tolerations(tolerations, spec.get("hostNetwork") is True)

    spread = intern(
        _topology_spread(spec.get("topologySpreadConstraints"), f"{spec_path}.topologySpreadConstraints", labels)
    )
    pod_affinity = _pod_affinity(affinity.get("podAffinity"), f"{affinity_path}.podAffinity", namespace, labels)
    pod_anti_affinity = _pod_affinity(
        affinity.get("podAntiAffinity"), f"{affinity_path}.podAntiAffinity", namespace, labels
    )

    host_network = spec.get("hostNetwork")
    if host_network is not None and not isinstance(host_network, bool):
        raise PodError(f"{spec_path}.hostNetwork", f"must be true or false, not {_type_name(host_network)}")
    host_ports = _host_ports(running, bool(host_network))

    priority = spec.get("priority")
    priority = 0 if priority is None else _int(priority, f"{spec_path}.priority", minimum=-(2**31), maximum=_MAX_INT32)
    node_name = _str(spec.get("nodeName"), f"{spec_path}.nodeName") or None
    gates = _list(spec.get("schedulingGates"), f"{spec_path}.schedulingGates")

    return Pod(
        namespace=namespace,
        name=name,
        requests=requests,
        labels=labels,
        uid=uid,
        node_selector=node_selector,
        required_node_affinity=required,
        preferred_node_affinity=intern(tuple(preferred)),
        tolerations=tolerations,
        topology_spread=spread,
        pod_affinity=pod_affinity,
        pod_anti_affinity=pod_anti_affinity,
        host_ports=host_ports,
        priority=priority,
        owner=owner,
        is_daemonset=is_daemonset,
        node_name=node_name,
        scheduling_gated=bool(gates),
        creation_timestamp=creation_timestamp,
    )


# The tolerations the DaemonSet controller adds to every daemon pod
# (``AddOrUpdateDaemonPodTolerations``); network-unavailable only for hostNetwork pods.
_DAEMONSET_TOLERATIONS = (
    PodToleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    PodToleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    PodToleration("node.kubernetes.io/disk-pressure", "Exists", "", "NoSchedule"),
    PodToleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule"),
    PodToleration("node.kubernetes.io/pid-pressure", "Exists", "", "NoSchedule"),
    PodToleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),
)
_HOST_NETWORK_TOLERATION = PodToleration("node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule")


def _with_daemonset_tolerations(
    tolerations: tuple[PodToleration, ...], host_network: bool
) -> tuple[PodToleration, ...]:
    extra = _DAEMONSET_TOLERATIONS + ((_HOST_NETWORK_TOLERATION,) if host_network else ())
    present = {(t.key, t.effect) for t in tolerations if t.operator == "Exists"}
    added = tuple(intern(t) for t in extra if (t.key, t.effect) not in present)
    return intern(tolerations + added)
