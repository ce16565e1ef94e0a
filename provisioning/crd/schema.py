"""A small structural-schema language for the two CRDs.

One description of each kind drives four things, so they can never disagree:
defaulting (as the API server applies ``default:``), structural validation (OpenAPI
types, enums, patterns, bounds, unknown fields), the CEL rules (each carries its
published expression and message plus a Python check with the same meaning) and the
CRD YAML rendered into ``deploy/crds/``.

Pure Python: no Django here, so the webhook's hot path stays cheap.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from provisioning.crd.errors import FieldError

# A rule check returns True when the value passes, False when it fails at the node
# itself, or an iterable of relative paths (e.g. "[3]") naming the parts that fail.
Check = Callable[..., bool | Iterable[str]]

MISSING = object()


@dataclass(frozen=True)
class Rule:
    """A CEL rule as published in the CRD, with a Python check of the same meaning."""

    cel: str
    message: str
    check: Check
    transition: bool = False  # compares self with oldSelf (UPDATE only)


@dataclass
class Node:
    description: str = ""
    default: Any = MISSING
    rules: tuple[Rule, ...] = ()

    type_name = "any"

    def type_ok(self, value: Any) -> bool:
        return True

    def openapi(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type_name}
        if self.description:
            out["description"] = self.description
        if self.default is not MISSING:
            out["default"] = self.default
        if self.rules:
            out["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in self.rules]
        return out


@dataclass
class String(Node):
    enum: tuple[str, ...] = ()
    pattern: str | None = None
    max_length: int | None = None
    min_length: int | None = None
    format: str | None = None
    # Values accepted beyond the published enum, each with the warning it earns.
    tolerated: dict[str, str] = field(default_factory=dict)
    # What a valid value looks like, for people, after the pattern a value failed (not published).
    hint: str = ""

    type_name = "string"

    def type_ok(self, value: Any) -> bool:
        return isinstance(value, str)

    def openapi(self) -> dict[str, Any]:
        out = super().openapi()
        if self.enum:
            out["enum"] = list(self.enum) + list(self.tolerated)
        if self.pattern:
            out["pattern"] = self.pattern
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.min_length is not None:
            out["minLength"] = self.min_length
        if self.format:
            out["format"] = self.format
        return out


@dataclass
class Integer(Node):
    minimum: int | None = None
    maximum: int | None = None
    format: str = "int64"

    type_name = "integer"

    def type_ok(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())

    def openapi(self) -> dict[str, Any]:
        out = super().openapi()
        out["format"] = self.format
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


@dataclass
class Boolean(Node):
    type_name = "boolean"

    def type_ok(self, value: Any) -> bool:
        return isinstance(value, bool)


@dataclass
class IntOrString(Node):
    """A Kubernetes quantity: a number or a string matching ``pattern``."""

    pattern: str | None = None

    type_name = "int-or-string"

    def type_ok(self, value: Any) -> bool:
        return isinstance(value, str | int | float) and not isinstance(value, bool)

    def openapi(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
        }
        if self.pattern:
            out["pattern"] = self.pattern
        return out


@dataclass
class Array(Node):
    items: Node = field(default_factory=Node)
    max_items: int | None = None
    min_items: int | None = None
    list_type: str = "atomic"  # or "set" (no duplicates) or "map"
    list_map_keys: tuple[str, ...] = ()

    type_name = "array"

    def type_ok(self, value: Any) -> bool:
        return isinstance(value, list)

    def openapi(self) -> dict[str, Any]:
        out = super().openapi()
        out["items"] = self.items.openapi()
        if self.max_items is not None:
            out["maxItems"] = self.max_items
        if self.min_items is not None:
            out["minItems"] = self.min_items
        out["x-kubernetes-list-type"] = self.list_type
        if self.list_map_keys:
            out["x-kubernetes-list-map-keys"] = list(self.list_map_keys)
        return out


@dataclass
class Map(Node):
    """An object with free keys, each value described by ``values``."""

    values: Node = field(default_factory=Node)
    max_properties: int | None = None

    type_name = "object"

    def type_ok(self, value: Any) -> bool:
        return isinstance(value, dict)

    def openapi(self) -> dict[str, Any]:
        out = super().openapi()
        out["additionalProperties"] = self.values.openapi()
        if self.max_properties is not None:
            out["maxProperties"] = self.max_properties
        return out


@dataclass
class Object(Node):
    properties: dict[str, Node] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    preserve_unknown: bool = False

    type_name = "object"

    def type_ok(self, value: Any) -> bool:
        return isinstance(value, dict)

    def openapi(self) -> dict[str, Any]:
        out = super().openapi()
        if self.properties:
            out["properties"] = {k: v.openapi() for k, v in self.properties.items()}
        if self.required:
            out["required"] = list(self.required)
        if self.preserve_unknown:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out


# ---------------------------------------------------------------- rule helpers


def each(predicate: Callable[[Any], bool]) -> Check:
    """CEL ``self.all(x, P(x))`` that names the failing items instead of the list."""

    def check(items: list[Any]) -> Iterable[str]:
        return [f"[{i}]" for i, item in enumerate(items) if not predicate(item)]

    return check


def each_key(predicate: Callable[[str], bool]) -> Check:
    """CEL ``self.all(k, P(k))`` over a map's keys; failing keys are named."""

    def check(mapping: dict[str, Any]) -> Iterable[str]:
        return [f"[{key_path(k)}]" for k in mapping if not predicate(k)]

    return check


def key_path(key: Any) -> str:
    if not isinstance(key, str):
        return repr(key)
    return key if re.fullmatch(r"[A-Za-z0-9_.\-/]+", key) else repr(key)


@functools.lru_cache(maxsize=256)
def go_pattern(pattern: str) -> re.Pattern[str]:
    """An OpenAPI pattern with Go's meaning: ``$`` is the end of the text, where
    Python's ``$`` would also match before a final newline; ``\\d`` and ``\\w`` are ASCII
    only (Python's would also take other scripts' digits and letters)."""
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern), re.ASCII)


def matches(pattern: str, value: str) -> bool:
    """Unanchored search, as Go's ``regexp.MatchString`` (anchors live in the pattern)."""
    return go_pattern(pattern).search(value) is not None


def has(obj: Any, name: str) -> bool:
    """CEL ``has(obj.name)``: the field is present (null counts as absent)."""
    return isinstance(obj, dict) and obj.get(name) is not None


# ---------------------------------------------------------------- type names

_JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string"}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return _JSON_TYPE.get(type(value), type(value).__name__)


def show(value: Any) -> str:
    """A value as it appears in a message: strings quoted, long ones cut."""
    if isinstance(value, str):
        text = value if len(value) <= 80 else value[:77] + "..."
        return '"' + text.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json_type(value)
    return str(value)


# ---------------------------------------------------------------- defaulting


def apply_defaults(node: Node, value: Any) -> Any:
    """Fill in ``default:`` values top-down, as the API server does on decode.

    Values of the wrong type are left alone: validation reports them.
    """
    if isinstance(node, Object) and isinstance(value, dict):
        for name, child in node.properties.items():
            if value.get(name) is None and child.default is not MISSING:
                value[name] = copy.deepcopy(child.default)
            if name in value:
                value[name] = apply_defaults(child, value[name])
    elif isinstance(node, Array) and isinstance(value, list):
        for i, item in enumerate(value):
            value[i] = apply_defaults(node.items, item)
    elif isinstance(node, Map) and isinstance(value, dict):
        for key in value:
            value[key] = apply_defaults(node.values, value[key])
    return value


# ---------------------------------------------------------------- validation


@dataclass
class Walk:
    """State of one validation pass: errors found, warnings raised."""

    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))


def validate(node: Node, value: Any, path: str, walk: Walk, old: Any = MISSING) -> None:
    """Check ``value`` against ``node``; ``old`` is the same node in the old object."""
    if value is None:
        return  # absent; "required" is the parent's concern
    if not node.type_ok(value):
        walk.error(
            path,
            f"Invalid value: {show(value)}: must be of type {node.type_name}, not {json_type(value)}",
        )
        return
    before = len(walk.errors)
    if isinstance(node, String):
        _validate_string(node, value, path, walk)
    elif isinstance(node, Integer):
        _validate_integer(node, value, path, walk)
    elif isinstance(node, IntOrString):
        if node.pattern and not matches(node.pattern, str(value)):
            walk.error(path, f"Invalid value: {show(value)}: must be a quantity like 10, 500m or 4Gi")
    elif isinstance(node, Array):
        _validate_array(node, value, path, walk, old)
    elif isinstance(node, Map):
        _validate_map(node, value, path, walk, old)
    elif isinstance(node, Object):
        _validate_object(node, value, path, walk, old)
    # Rules run even below a structural error, so one pass reports every problem; a rule
    # that cannot be evaluated over broken children stays quiet (the children are reported).
    _run_rules(node, value, path, walk, old, quiet_errors=len(walk.errors) > before)


def _validate_string(node: String, value: str, path: str, walk: Walk) -> None:
    if node.enum and value not in node.enum:
        if value in node.tolerated:
            walk.warnings.append(node.tolerated[value])
        else:
            supported = ", ".join(f'"{v}"' for v in node.enum)
            walk.error(path, f"Unsupported value: {show(value)}: supported values: {supported}")
            return
    if node.max_length is not None and len(value) > node.max_length:
        walk.error(path, f"Too long: may not be more than {node.max_length} bytes")
        return
    if node.min_length is not None and len(value) < node.min_length:
        walk.error(path, f"Invalid value: {show(value)}: should be at least {node.min_length} chars long")
        return
    # OpenAPI patterns are unanchored (Go regexp.MatchString); anchors live in the text.
    if node.pattern and not matches(node.pattern, value):
        hint = f" ({node.hint})" if node.hint else ""
        walk.error(path, f"Invalid value: {show(value)}: should match '{node.pattern}'{hint}")
    if node.format == "date-time" and not _DATE_TIME.match(value):
        walk.error(path, f"Invalid value: {show(value)}: must be an RFC 3339 date-time")


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

_INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _validate_integer(node: Integer, value: int | float, path: str, walk: Walk) -> None:
    number = int(value)
    low, high = _INT_BOUNDS.get(node.format, _INT_BOUNDS["int64"])
    if not low <= number <= high:
        walk.error(path, f"Invalid value: {number}: must fit in {node.format}")
    elif node.minimum is not None and number < node.minimum:
        walk.error(path, f"Invalid value: {number}: should be greater than or equal to {node.minimum}")
    elif node.maximum is not None and number > node.maximum:
        walk.error(path, f"Invalid value: {number}: should be less than or equal to {node.maximum}")


def _validate_array(node: Array, value: list[Any], path: str, walk: Walk, old: Any) -> None:
    if node.max_items is not None and len(value) > node.max_items:
        # Like the API server, a list over its bound is not walked item by item:
        # 10,000 bad items would otherwise bury the one error that matters.
        walk.error(path, f"Too many: {len(value)}: must have at most {node.max_items} items")
        return
    if node.min_items is not None and len(value) < node.min_items:
        walk.error(path, f"Invalid value: {len(value)}: must have at least {node.min_items} items")
    if node.list_type == "set":
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                walk.error(f"{path}[{i}]", f"Duplicate value: {show(item)}")
            seen.append(item)
    for i, item in enumerate(value):
        if item is None:
            walk.error(f"{path}[{i}]", f"Invalid value: null: must be of type {node.items.type_name}")
            continue
        validate(node.items, item, f"{path}[{i}]", walk)


def _validate_map(node: Map, value: dict[str, Any], path: str, walk: Walk, old: Any) -> None:
    if node.max_properties is not None and len(value) > node.max_properties:
        walk.error(path, f"Too many: {len(value)}: must have at most {node.max_properties} items")
        return
    for key, item in value.items():
        child_path = f"{path}[{key_path(key)}]"
        if item is None:
            walk.error(child_path, f"Invalid value: null: must be of type {node.values.type_name}")
            continue
        validate(node.values, item, child_path, walk)


def _validate_object(node: Object, value: dict[str, Any], path: str, walk: Walk, old: Any) -> None:
    for name in node.required:
        if value.get(name) is None:
            walk.error(join(path, name), "Required value")
    if not node.preserve_unknown:
        for name in value:
            if name not in node.properties:
                valid = ", ".join(node.properties) or "none"
                walk.error(join(path, name), f'unknown field "{name}"; valid fields: {valid}')
    old_dict = old if isinstance(old, dict) else {}
    for name, child in node.properties.items():
        if name in value:
            validate(child, value[name], join(path, name), walk, old_dict.get(name, MISSING))


def _run_rules(node: Node, value: Any, path: str, walk: Walk, old: Any, quiet_errors: bool) -> None:
    for rule in node.rules:
        if rule.transition and (old is MISSING or old is None):
            continue
        try:
            outcome = rule.check(value, old) if rule.transition else rule.check(value)
            failures = list(_failures(outcome))
        except (TypeError, ValueError, KeyError, AttributeError, IndexError):
            # A CEL expression that errors rejects the object, as upstream; unless the
            # error comes from children already reported as malformed.
            failures = [] if quiet_errors else [""]
        for suffix in failures:
            walk.error(path + suffix, rule.message)


def _failures(outcome: bool | Iterable[str]) -> Iterator[str]:
    if outcome is True:
        return
    if outcome is False:
        yield ""
        return
    yield from outcome


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
