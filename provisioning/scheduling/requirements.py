"""The requirements algebra: what a pod, a NodePool or a NodeClaim asks of node labels.

Karpenter's model (``pkg/scheduling/requirement.go``): a key holds a value set with a
complement flag, plus optional integer bounds.

* ``In [a, b]``     -> values {a, b}
* ``NotIn [a, b]``  -> complement of {a, b}
* ``Exists``        -> complement of {}
* ``DoesNotExist``  -> values {} (no value is acceptable: the label must be absent)
* ``Gt N``          -> complement of {}, ``gte = N + 1``
* ``Lt N``          -> complement of {}, ``lte = N - 1``
* ``Gte N``/``Lte N`` -> ``gte = N`` / ``lte = N``

Bounds only ever sit on a complement: intersecting a concrete set with bounds filters the
set and drops the bounds, and bounds that cross leave ``DoesNotExist``. A bounded
requirement accepts integer-valued strings only (Go's ``strconv.Atoi``: optional sign,
ASCII digits).

Everything here is immutable and hashable, and the hot paths (``Requirement.has``,
``Requirement.intersect``, ``Requirements.matches``/``labels_match``) avoid allocating
when nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from provisioning.crd.labels import CAPACITY_TYPE, HOSTNAME, NODEPOOL, NORMALIZED_LABELS, WELL_KNOWN_LABELS, ZONE

IN = "In"
NOT_IN = "NotIn"
EXISTS = "Exists"
DOES_NOT_EXIST = "DoesNotExist"
GT = "Gt"
LT = "Lt"
GTE = "Gte"
LTE = "Lte"
OPERATORS = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT, GTE, LTE)
INTEGER_OPERATORS = (GT, LT, GTE, LTE)

# Well-known keys whose values come from offerings (zone, capacity type), not instance types.
OFFERING_LABELS = frozenset(
    {
        ZONE,
        CAPACITY_TYPE,
        "topology.k8s.aws/zone-id",
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-type",
        "karpenter.k8s.aws/capacity-reservation-interruptible",
    }
)
# Well-known keys an instance type's labels speak for: absent there means the type has no
# such value (no GPU: no instance-gpu-name). Custom keys and offering keys are not among
# them; see ``Requirements.labels_match``.
INSTANCE_TYPE_LABELS = WELL_KNOWN_LABELS - OFFERING_LABELS - {NODEPOOL}

_NO_VALUES: frozenset[str] = frozenset()
# How many values a message lists before it says "... N more".
_SHOWN_VALUES = 10


def parse_int(value: str) -> int | None:
    """``value`` as Go's ``strconv.Atoi`` reads it (sign and ASCII digits only), else None."""
    digits = value[1:] if value[:1] in ("+", "-") else value
    if digits and digits.isascii() and digits.isdigit():
        return int(value)
    return None


def _within(value: str, gte: int | None, lte: int | None) -> bool:
    number = parse_int(value)
    if number is None:
        return False
    return (gte is None or number >= gte) and (lte is None or number <= lte)


def _natural(value: str) -> tuple[int, int, str]:
    number = parse_int(value)
    return (0, number, "") if number is not None else (1, 0, value)


def format_values(values: Iterable[str], limit: int | None = None) -> str:
    """``a, b, c`` in natural order (numbers by value), cut to ``limit`` with ``... N more``."""
    ordered = sorted(values, key=_natural)
    if limit is not None and len(ordered) > limit:
        return ", ".join(ordered[:limit]) + f", ... {len(ordered) - limit} more"
    return ", ".join(ordered)


def _label_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # YAML `true` written for the label value "true"
        return "true" if value else "false"
    return str(value)


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def _min(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a <= b else b


@dataclass(frozen=True, slots=True)
class Requirement:
    """One key's constraint. Build it with ``Requirement.of``; the fields are the model.

    The constructor normalizes (bounds on a concrete set filter it and are dropped; crossing
    bounds leave ``DoesNotExist``) but does not translate deprecated key aliases: ``of`` does.
    """

    key: str
    complement: bool
    values: frozenset[str] = _NO_VALUES
    gte: int | None = None
    lte: int | None = None
    min_values: int | None = None
    _text: str | None = field(default=None, init=False, repr=False, compare=False)
    _mismatches: dict[str | None, Incompatibility] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.values) is not frozenset:
            object.__setattr__(self, "values", frozenset(self.values))
        gte, lte = self.gte, self.lte
        if gte is None and lte is None:
            return
        if gte is not None and lte is not None and gte > lte:
            object.__setattr__(self, "complement", False)
            object.__setattr__(self, "values", _NO_VALUES)
        elif not self.complement:
            object.__setattr__(self, "values", frozenset(v for v in self.values if _within(v, gte, lte)))
        else:
            return
        object.__setattr__(self, "gte", None)
        object.__setattr__(self, "lte", None)

    @classmethod
    def of(
        cls,
        key: str,
        operator: str,
        values: Iterable[Any] = (),
        min_values: int | None = None,
    ) -> Requirement:
        """A requirement from a node selector expression; deprecated keys become their new names.

        Values of ``Exists`` and ``DoesNotExist`` are ignored, as upstream does. The integer
        operators need exactly one integer value.
        """
        key = NORMALIZED_LABELS.get(key, key)
        if operator == IN:
            return cls(key, False, frozenset(map(_label_value, values)), min_values=min_values)
        if operator == NOT_IN:
            return cls(key, True, frozenset(map(_label_value, values)), min_values=min_values)
        if operator == EXISTS:
            return cls(key, True, min_values=min_values)
        if operator == DOES_NOT_EXIST:
            return cls(key, False, min_values=min_values)
        if operator in INTEGER_OPERATORS:
            given = [_label_value(v) for v in values]
            number = parse_int(given[0]) if len(given) == 1 else None
            if number is None:
                raise ValueError(f"requirement {key} {operator} needs a single integer value, got {given}")
            if operator == GT:
                return cls(key, True, gte=number + 1, min_values=min_values)
            if operator == GTE:
                return cls(key, True, gte=number, min_values=min_values)
            if operator == LT:
                return cls(key, True, lte=number - 1, min_values=min_values)
            return cls(key, True, lte=number, min_values=min_values)
        raise ValueError(f"requirement {key}: unknown operator {operator!r} (one of {', '.join(OPERATORS)})")

    # -- questions -------------------------------------------------------------------

    def has(self, value: str) -> bool:
        """Does this requirement accept the label value ``value``?"""
        if self.complement:
            if value in self.values:
                return False
            return (self.gte is None and self.lte is None) or _within(value, self.gte, self.lte)
        return value in self.values

    @property
    def is_empty(self) -> bool:
        """No value satisfies it (``In []``, ``DoesNotExist``, or bounds that crossed).

        A complement is never empty: even ``Gte 3, Lte 3, NotIn [3]`` accepts ``03``.
        """
        return not self.complement and not self.values

    @property
    def allows_absent(self) -> bool:
        """Does a node *without* this label satisfy it? Only ``NotIn`` and ``DoesNotExist`` do."""
        if self.complement:
            return bool(self.values) and self.gte is None and self.lte is None
        return not self.values

    @property
    def bounded(self) -> bool:
        return self.gte is not None or self.lte is not None

    def intersects(self, other: Requirement) -> bool:
        """Is some value accepted by both? Allocation-free form of ``not intersect().is_empty``."""
        if self.complement:
            if other.complement:
                gte, lte = _max(self.gte, other.gte), _min(self.lte, other.lte)
                return gte is None or lte is None or gte <= lte
            return any(self.has(v) for v in other.values)
        if other.complement:
            return any(other.has(v) for v in self.values)
        return not self.values.isdisjoint(other.values)

    def intersect(self, other: Requirement) -> Requirement:
        """The values both accept; minValues is the larger of the two."""
        if other is self:
            return self
        if other.key != self.key:
            raise ValueError(f"cannot intersect requirements on different keys: {self.key} and {other.key}")
        gte, lte = _max(self.gte, other.gte), _min(self.lte, other.lte)
        min_values = _max(self.min_values, other.min_values)
        if gte is not None and lte is not None and gte > lte:
            return Requirement(self.key, False, _NO_VALUES, min_values=min_values)
        if self.complement and other.complement:
            complement = True
            if self.values >= other.values:
                values = self.values
            elif other.values >= self.values:
                values = other.values
            else:
                values = self.values | other.values
        else:
            complement = False
            if self.complement:
                values = other.values if other.values.isdisjoint(self.values) else other.values - self.values
            elif other.complement:
                values = self.values if self.values.isdisjoint(other.values) else self.values - other.values
            elif self.values <= other.values:
                values = self.values
            elif other.values <= self.values:
                values = other.values
            else:
                values = self.values & other.values
            if gte is not None or lte is not None:
                kept = frozenset(v for v in values if _within(v, gte, lte))
                if len(kept) < len(values):
                    values = kept
            gte = lte = None
        for side in (self, other):
            if (
                side.complement == complement
                and side.values is values
                and side.gte == gte
                and side.lte == lte
                and side.min_values == min_values
            ):
                return side
        return Requirement(self.key, complement, values, gte, lte, min_values)

    def any_value(self) -> str | None:
        """A value this requirement accepts (deterministic), or None when none exists.

        ``In`` gives its first value in natural order; a complement gives the smallest
        non-negative integer it accepts (or, below zero, the largest negative one).
        """
        if not self.complement:
            return min(self.values, key=_natural) if self.values else None
        gte, lte = self.gte, self.lte
        if gte is None:
            start = 0 if lte is None or lte >= 0 else lte
            step, stop = (1, lte) if start == 0 else (-1, None)
        else:
            start, step, stop = gte, 1, lte
        number = start
        for _ in range(len(self.values) + 1):
            if stop is not None and (number > stop if step > 0 else number < stop):
                break
            if str(number) not in self.values:
                return str(number)
            number += step
        # Every canonical integer in range is excluded; a zero-padded spelling still parses.
        sign = "-" if start < 0 else ""
        return f"{sign}0{abs(start)}"

    # -- display ----------------------------------------------------------------------

    @property
    def operator(self) -> str:
        """The operator people would write for it (of the first clause of ``expression``)."""
        if not self.complement:
            return IN if self.values else DOES_NOT_EXIST
        if self.values:
            return NOT_IN
        if self.gte is not None:
            return GT
        if self.lte is not None:
            return LT
        return EXISTS

    @property
    def expression(self) -> str:
        """``In [c5, m5]``, ``NotIn [a], Gt 3``, ``Exists`` ... (bounds as Gt/Lt)."""
        text = self._text
        if text is None:
            if not self.complement:
                text = f"In [{format_values(self.values)}]" if self.values else DOES_NOT_EXIST
            else:
                parts = []
                if self.values:
                    parts.append(f"NotIn [{format_values(self.values)}]")
                if self.gte is not None:
                    parts.append(f"Gt {self.gte - 1}")
                if self.lte is not None:
                    parts.append(f"Lt {self.lte + 1}")
                text = ", ".join(parts) if parts else EXISTS
            object.__setattr__(self, "_text", text)
        return text

    def __str__(self) -> str:
        return f"{self.key} {self.expression}"

    def to_dicts(self) -> list[dict[str, Any]]:
        """Node selector requirement dicts that mean the same (``Requirements.from_list`` reads them)."""
        out: list[dict[str, Any]] = []
        if not self.complement:
            if self.values:
                out.append({"key": self.key, "operator": IN, "values": sorted(self.values, key=_natural)})
            else:
                out.append({"key": self.key, "operator": DOES_NOT_EXIST})
        else:
            if self.values:
                out.append({"key": self.key, "operator": NOT_IN, "values": sorted(self.values, key=_natural)})
            if self.gte is not None:
                out.append({"key": self.key, "operator": GTE, "values": [str(self.gte)]})
            if self.lte is not None:
                out.append({"key": self.key, "operator": LTE, "values": [str(self.lte)]})
            if not out:
                out.append({"key": self.key, "operator": EXISTS})
        if self.min_values is not None:
            out[0]["minValues"] = self.min_values
        return out

    def mismatch(self, value: str | None) -> Incompatibility:
        """Why a node whose label ``key`` is ``value`` (None: absent) fails this requirement.

        Remembered per value: the instance-type filter asks the same question again and again.
        """
        cache = self._mismatches
        if cache is None:
            cache = {}
            object.__setattr__(self, "_mismatches", cache)
        found = cache.get(value)
        if found is None:
            key = self.key
            if value is None:
                found = Incompatibility(key, self, None, f"{self} is not met: the label {key} is absent")
            else:
                label = Requirement(key, False, frozenset((value,)))
                found = Incompatibility(key, self, label, f"{self} is not met by {key}={value}")
            cache[value] = found
        return found

    def label_check(self) -> Callable[[str | None], bool]:
        """A function of a label value (None when absent) that says whether this accepts it."""
        values = self.values
        if not self.complement:
            if not values:
                return _is_none
            return values.__contains__  # None is never in a set of strings
        gte, lte = self.gte, self.lte
        if gte is None and lte is None:
            if values:
                return lambda v: v not in values
            return _is_not_none

        def bounded(v: str | None) -> bool:
            return v is not None and v not in values and _within(v, gte, lte)

        return bounded


def _parts(expression: Any) -> tuple[str, str, Iterable[Any], int | None]:
    if isinstance(expression, Mapping):
        return (
            expression["key"],
            expression["operator"],
            expression.get("values") or (),
            expression.get("minValues"),
        )
    key, operator, *values = expression  # (key, operator) or (key, operator, values)
    return key, operator, (values[0] if values else None) or (), None


def _expression(expression: Any) -> Requirement:
    return Requirement.of(*_parts(expression))


def _is_none(value: str | None) -> bool:
    return value is None


def _is_not_none(value: str | None) -> bool:
    return value is not None


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """Why two requirement sets (or requirements and labels) do not meet, for people.

    ``mine`` is the requirement of the side the method was called on; ``theirs`` is the
    other side's requirement, the label value seen as ``In [value]``, or None when the
    other side does not have the key at all.
    """

    key: str
    mine: Requirement | None
    theirs: Requirement | None
    message: str

    def __str__(self) -> str:
        return self.message


_FROM_LABELS: dict[frozenset, Requirements] = {}
_FROM_LABELS_LIMIT = 16384


class Requirements(Mapping[str, Requirement]):
    """An immutable mapping key -> Requirement. Requirements on the same key intersect."""

    __slots__ = ("_reqs", "_checks", "_hash", "_min_values")

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        reqs: dict[str, Requirement] = {}
        for requirement in requirements:
            previous = reqs.get(requirement.key)
            reqs[requirement.key] = requirement if previous is None else previous.intersect(requirement)
        self._reqs = reqs
        self._checks: tuple[tuple[str, Callable[[str | None], bool]], ...] | None = None
        self._hash: int | None = None
        self._min_values: bool | None = None

    @classmethod
    def _wrap(cls, reqs: dict[str, Requirement]) -> Requirements:
        new = cls.__new__(cls)
        new._reqs = reqs
        new._checks = None
        new._hash = None
        new._min_values = None
        return new

    # -- construction -----------------------------------------------------------------

    @classmethod
    def from_list(cls, items: Iterable[Any] | None) -> Requirements:
        """From NodePool/NodeClaim requirement dicts ``{key, operator, values, minValues}``
        (or ``(key, operator, values)`` tuples, as ``pods.NodeSelectorRequirement``)."""
        return cls(_expression(item) for item in items or ())

    @classmethod
    def from_labels(cls, labels: Mapping[str, Any] | None) -> Requirements:
        """Each label as ``In [value]`` (node labels, instance-type labels, a pod's nodeSelector).

        Kept per distinct label set (Requirements never change once made): a cluster's nodes
        are read as requirements in every simulation of a disruption round."""
        if not labels:
            return cls()
        try:
            key = frozenset(labels.items())
        except TypeError:  # an unhashable value: read it afresh
            return cls(Requirement.of(k, IN, (v,)) for k, v in labels.items())
        found = _FROM_LABELS.get(key)
        if found is None:
            if len(_FROM_LABELS) >= _FROM_LABELS_LIMIT:
                _FROM_LABELS.clear()
            found = _FROM_LABELS[key] = cls(Requirement.of(k, IN, (v,)) for k, v in labels.items())
        return found

    @classmethod
    def from_node_selector_term(cls, term: Any) -> Requirements:
        """One term of ``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``:
        a dict with ``matchExpressions``/``matchFields``, or an object with ``match_expressions``
        and ``match_fields`` (``pods.NodeSelectorTerm``).

        ``matchFields`` on ``metadata.name`` (as the DaemonSet controller writes to pin a pod
        to a node) become requirements on ``kubernetes.io/hostname``; Kubernetes allows no
        other field. Karpenter does not provision for pods with matchFields; that decision is
        the caller's, as is how to read a term with no expressions at all (no requirements
        here, as in Karpenter; kube-scheduler lets such a term match no node).
        """
        if term is None:
            return cls()
        if isinstance(term, Mapping):
            expressions, fields = term.get("matchExpressions"), term.get("matchFields")
        else:
            expressions, fields = term.match_expressions, term.match_fields
        found = [_expression(e) for e in expressions or ()]
        for e in fields or ():
            key, operator, values, _ = _parts(e)
            if key != "metadata.name":
                raise ValueError(f"matchFields supports only metadata.name, not {key!r}")
            found.append(Requirement.of(HOSTNAME, operator, values))
        return cls(found)

    # -- mapping ----------------------------------------------------------------------

    def __getitem__(self, key: str) -> Requirement:
        return self._reqs[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._reqs.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._reqs

    def __iter__(self) -> Iterator[str]:
        return iter(self._reqs)

    def __len__(self) -> int:
        return len(self._reqs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Requirements):
            return self._reqs == other._reqs
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._reqs.values()))
        return self._hash

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self._reqs.values())

    @property
    def has_min_values(self) -> bool:
        """Does any requirement carry minValues? (Remembered: the solver asks per placement.)"""
        found = self._min_values
        if found is None:
            found = self._min_values = any(r.min_values for r in self._reqs.values())
        return found

    def __repr__(self) -> str:
        return f"Requirements({self})"

    def to_list(self) -> list[dict[str, Any]]:
        """As NodeClaim requirement dicts."""
        return [d for r in self._reqs.values() for d in r.to_dicts()]

    # -- algebra ----------------------------------------------------------------------

    def merge(self, other: Requirements) -> Requirements:
        """Both sets at once: keys of either, intersected where both have them."""
        if not other._reqs or other is self:
            return self
        if not self._reqs:
            return other
        reqs = dict(self._reqs)
        changed = False
        for key, theirs in other._reqs.items():
            mine = reqs.get(key)
            merged = theirs if mine is None else mine.intersect(theirs)
            if merged is not mine:
                reqs[key] = merged
                changed = True
        return self._wrap(reqs) if changed else self

    def add(self, *requirements: Requirement) -> Requirements:
        """A copy with ``requirements`` intersected in."""
        return self.merge(Requirements(requirements))

    def only(self, keys: frozenset[str] | set[str]) -> Requirements:
        """The requirements on ``keys`` (self when that is all of them)."""
        if all(k in keys for k in self._reqs):
            return self
        return self._wrap({k: r for k, r in self._reqs.items() if k in keys})

    def without(self, *keys: str) -> Requirements:
        if not any(k in self._reqs for k in keys):
            return self
        return self._wrap({k: r for k, r in self._reqs.items() if k not in keys})

    def compatible(
        self,
        other: Requirements,
        allow_undefined: frozenset[str] = WELL_KNOWN_LABELS,
        *,
        mine_name: str = "the NodePool",
        theirs_name: str = "pod",
    ) -> Incompatibility | None:
        """Karpenter's ``Compatible``: can ``other`` (a pod) be met within ``self`` (a NodePool/NodeClaim)?

        * A key of ``other`` that ``self`` does not define is fine when it is in
          ``allow_undefined`` (well-known labels get their values from instance types and
          offerings) or when a node without the label satisfies it (``NotIn``,
          ``DoesNotExist``); any other undefined key (a custom label) is incompatible.
        * Keys both define must share a value, unless both accept an absent label.
        * Keys only ``self`` defines do not matter.

        Returns the first problem in ``other``'s key order, or None. ``mine_name`` and
        ``theirs_name`` name the two sides in the message.
        """
        return self._meet(other, allow_undefined, mine_name, theirs_name)

    def intersects(
        self, other: Requirements, *, mine_name: str = "the NodePool", theirs_name: str = "pod"
    ) -> Incompatibility | None:
        """Karpenter's ``Intersects``: only the keys both define must meet."""
        return self._meet(other, None, mine_name, theirs_name)

    def _meet(
        self, other: Requirements, allow_undefined: frozenset[str] | None, mine_name: str, theirs_name: str
    ) -> Incompatibility | None:
        mine_reqs = self._reqs
        for key, theirs in other._reqs.items():
            mine = mine_reqs.get(key)
            if mine is None:
                if allow_undefined is None or key in allow_undefined or theirs.allows_absent:
                    continue
                return Incompatibility(
                    key,
                    None,
                    theirs,
                    f"{theirs_name} requires {theirs} but {mine_name} does not define {key} "
                    "(only well-known labels may be left undefined)",
                )
            if mine is theirs or mine.intersects(theirs) or (mine.allows_absent and theirs.allows_absent):
                continue
            return Incompatibility(
                key, mine, theirs, f"{theirs_name} requires {theirs} but {mine_name} allows {mine.expression}"
            )
        return None

    # -- labels -----------------------------------------------------------------------

    def _label_checks(self) -> tuple[tuple[str, Callable[[str | None], bool]], ...]:
        checks = self._checks
        if checks is None:
            checks = self._checks = tuple((key, r.label_check()) for key, r in self._reqs.items())
        return checks

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Does a node (or instance type) with exactly these labels satisfy every requirement?

        An absent label satisfies only ``NotIn`` and ``DoesNotExist``. Every requirement key
        is checked, so for an instance type filter with ``reqs.only(INSTANCE_TYPE_LABELS)``
        (plus any other keys the catalog's labels carry) first: an instance type's labels
        say nothing about custom NodePool labels (undefined for it, which upstream's
        ``Intersects`` allows) nor about zone and capacity type (its offerings do).

        The fast path of ``labels_match``: no explanation is built.
        """
        get = labels.get
        for key, check in self._checks or self._label_checks():  # noqa: SIM110  (a loop beats all() on a generator)
            if not check(get(key)):
                return False
        return True

    def labels_match(self, labels: Mapping[str, str]) -> Incompatibility | None:
        """As ``matches``, naming the first requirement (in key order) the labels fail.

        Explanations are remembered per requirement and value, so a repeated failure costs
        about as much as ``matches``.
        """
        get = labels.get
        for key, check in self._checks or self._label_checks():
            value = get(key)
            if not check(value):
                return self._reqs[key].mismatch(value)
        return None

    def match_any(self, candidates: Iterable[Mapping[str, str]]) -> Incompatibility | None:
        """None when some label set (e.g. of an instance type) satisfies every requirement;
        otherwise the requirement that excluded the last candidates, with the values offered.

        Requirements are applied in key order; the message names the one that left nothing
        and, when earlier requirements narrowed the candidates first, those too.
        """
        pool = candidates if isinstance(candidates, list | tuple) else list(candidates)
        checks = self._checks or self._label_checks()
        for labels in pool:
            get = labels.get
            for key, check in checks:
                if not check(get(key)):
                    break
            else:
                return None
        if not pool:
            return Incompatibility("", None, None, "nothing was offered to match the requirements against")
        narrowed_by: list[str] = []
        survivors = pool
        for key, check in checks:
            kept = [labels for labels in survivors if check(labels.get(key))]
            if not kept:
                mine = self._reqs[key]
                offered = {value for labels in survivors if (value := labels.get(key)) is not None}
                listed = format_values(offered, _SHOWN_VALUES) if offered else f"none has the label {key}"
                where = f"values offered where {'; '.join(narrowed_by)}" if narrowed_by else "offered values"
                return Incompatibility(
                    key,
                    mine,
                    Requirement(key, False, frozenset(offered)),
                    f"{mine} matches none of the {where} ({listed})",
                )
            if len(kept) < len(survivors):
                narrowed_by.append(str(self._reqs[key]))
            survivors = kept
        raise AssertionError("unreachable: some candidate passed every check")

    # -- minValues --------------------------------------------------------------------

    def min_values_satisfied(self, candidates: Iterable[Mapping[str, str]]) -> Incompatibility | None:
        """minValues: each requirement with ``min_values = N`` needs at least N distinct
        accepted values of its key across the candidates' labels (the surviving instance types)."""
        keyed = [(key, r) for key, r in self._reqs.items() if r.min_values is not None]
        if not keyed:
            return None
        seen: dict[str, set[str]] = {key: set() for key, _ in keyed}
        for labels in candidates:
            for key, requirement in keyed:
                value = labels.get(key)
                if value is not None and requirement.has(value):
                    seen[key].add(value)
        for key, requirement in keyed:
            found = seen[key]
            needed = requirement.min_values
            assert needed is not None
            if len(found) < needed:
                listed = f" ({format_values(found, _SHOWN_VALUES)})" if found else ""
                return Incompatibility(
                    key,
                    requirement,
                    Requirement(key, False, frozenset(found)),
                    f"{requirement} needs at least {needed} distinct values (minValues) "
                    f"but the instance types offer {len(found)}{listed}",
                )
        return None

    def min_values_prefix(self, ordered: Iterable[Mapping[str, str]]) -> int | None:
        """How many of the leading candidates (e.g. price-ordered types) meet every minValues;
        0 without minValues, None when all of them together do not (upstream ``SatisfiesMinValues``)."""
        keyed = [(key, r, r.min_values) for key, r in self._reqs.items() if r.min_values is not None]
        if not keyed:
            return 0
        seen: dict[str, set[str]] = {key: set() for key, _, _ in keyed}
        for count, labels in enumerate(ordered, 1):
            for key, requirement, _ in keyed:
                value = labels.get(key)
                if value is not None and requirement.has(value):
                    seen[key].add(value)
            if all(len(seen[key]) >= needed for key, _, needed in keyed):
                return count
        return None
