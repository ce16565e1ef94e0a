"""Reading raw manifest fields with type checks that name the field.

Each reader takes a value and its path in the document (``spec.containers[0].resources``) and
returns it checked, or raises :class:`PodError` naming that path and what would be valid.
Optional objects and lists read null as empty.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from provisioning.scheduling.frozen import FrozenMap, frozen_map

__all__ = [
    "PodError",
    "key_path",
    "read_int",
    "read_list",
    "read_object",
    "read_str",
    "read_str_list",
    "read_str_map",
    "read_time",
    "type_name",
]


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


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def key_path(path: str, key: str) -> str:
    """``requests.cpu`` for plain keys, ``requests[nvidia.com/gpu]`` for the rest."""
    return f"{path}.{key}" if _IDENT.match(key) else f"{path}[{key}]"


def type_name(value: Any) -> str:
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


def read_object(value: Any, path: str) -> dict:
    """An optional mapping: null reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodError(path, f"must be an object (a mapping of fields), not {type_name(value)}")
    return value


def read_list(value: Any, path: str) -> list:
    """An optional list: null reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodError(path, f"must be a list, not {type_name(value)}")
    return value


def read_str(value: Any, path: str, *, required: bool = False, default: str = "") -> str:
    if value is None:
        if required:
            raise PodError(path, "is required (a non-empty string)")
        return default
    if not isinstance(value, str):
        hint = f' (quote it: "{value}")' if isinstance(value, bool | int | float) else ""
        raise PodError(path, f"must be a string, not {type_name(value)}{hint}")
    if required and not value:
        raise PodError(path, "must not be empty")
    return value


def read_int(value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise PodError(path, f"must be an integer, not {type_name(value)} ({value!r})")
    if minimum is not None and value < minimum:
        raise PodError(path, f"must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise PodError(path, f"must be at most {maximum}, not {value}")
    return value


def read_str_map(value: Any, path: str) -> FrozenMap:
    """A string-to-string map (labels, nodeSelector, matchLabels)."""
    raw = read_object(value, path)
    for key, item in raw.items():
        if not isinstance(key, str) or not key:
            raise PodError(path, f"keys must be non-empty strings, not {key!r}")
        read_str(item, key_path(path, key), default="")
    if any(v is None for v in raw.values()):
        raw = {k: ("" if v is None else v) for k, v in raw.items()}
    return frozen_map(raw)


def read_str_list(value: Any, path: str) -> tuple[str, ...]:
    items = read_list(value, path)
    return tuple(read_str(item, f"{path}[{i}]", required=True) for i, item in enumerate(items))


# What the API server's metav1.Time accepts (Go's time.RFC3339): a date alone, or a time
# without its offset, is refused there, so it is here too. Stricter on purpose than the CRD
# schema's "date-time" format (crd/schema.py), which follows OpenAPI's looser layouts.
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})")


def read_time(value: Any, path: str) -> str | None:
    """An RFC 3339 time (``creationTimestamp``) as written; None when absent. A YAML loader may
    hand over a datetime for an unquoted time: it is written back as UTC text. Anything
    unreadable is refused rather than read as "now", which would make every node young (never
    expired, never past consolidateAfter)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    text = read_str(value, path)
    if not text:
        return None
    if _RFC3339.fullmatch(text):
        try:
            datetime.fromisoformat(text.replace("Z", "+00:00"))  # the fields' ranges: no month 13
            return text
        except ValueError:
            pass
    raise PodError(path, f"{text!r} is not an RFC 3339 time such as 2026-01-02T03:04:05Z")
