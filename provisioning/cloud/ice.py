"""The unavailable-offerings cache (insufficient capacity), shared by every process in Redis.

An offering that failed to launch with InsufficientInstanceCapacity and friends is marked for
3 minutes (Part II §4.6 of the Karpenter reference): one key per offering,
``karpweb:ice:<capacity-type>:<instance-type>:<zone>``, holding the reason, with a TTL;
marking it again extends the TTL. The catalog asks with the key without the prefix,
``capacity-type:instance-type:zone``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

PREFIX = "karpweb:ice:"
TTL_SECONDS = 180
_SCAN_BATCH = 1000


def offering_key(capacity_type: str, instance_type: str, zone: str, reservation_id: str = "") -> str:
    """``capacity-type:instance-type:zone``; a reserved offering's has ``:<reservation id>`` after."""
    key = f"{capacity_type}:{instance_type}:{zone}"
    return f"{key}:{reservation_id}" if reservation_id else key


def mark_unavailable(
    redis: Any,
    capacity_type: str,
    instance_type: str,
    zone: str,
    reason: str,
    ttl: int = TTL_SECONDS,
    *,
    prefix: str = PREFIX,
    reservation_id: str = "",
) -> str:
    """Mark one offering unavailable for ``ttl`` seconds; returns its key (without prefix)."""
    key = offering_key(capacity_type, instance_type, zone, reservation_id)
    redis.set(prefix + key, reason or "unavailable", ex=max(1, int(ttl)))
    return key


def clear(redis: Any, capacity_type: str, instance_type: str, zone: str, *, prefix: str = PREFIX) -> None:
    redis.delete(prefix + offering_key(capacity_type, instance_type, zone))


def is_unavailable(
    redis: Any, capacity_type: str, instance_type: str, zone: str, *, prefix: str = PREFIX, reservation_id: str = ""
) -> bool:
    return bool(redis.exists(prefix + offering_key(capacity_type, instance_type, zone, reservation_id)))


def unavailable_keys(redis: Any, *, prefix: str = PREFIX) -> set[str]:
    """Every offering marked now, as ``capacity-type:instance-type:zone`` (one SCAN)."""
    cut = len(prefix)
    return {_text(name)[cut:] for name in redis.scan_iter(match=_glob_escape(prefix) + "*", count=_SCAN_BATCH)}


def unavailable_offerings(redis: Any, *, prefix: str = PREFIX, now: float | None = None) -> dict[str, dict[str, Any]]:
    """Marked offerings with their reason and when the mark ends (epoch seconds), for
    explanations: ``{"spot:m5.large:us-east-1a": {"reason": ..., "until": 1700000000.0}}``."""
    keys = sorted(unavailable_keys(redis, prefix=prefix))
    if not keys:
        return {}
    now = time.time() if now is None else now
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.get(prefix + key)
        pipe.pttl(prefix + key)
    answers = pipe.execute()
    out: dict[str, dict[str, Any]] = {}
    for i, key in enumerate(keys):
        reason, pttl = answers[2 * i], answers[2 * i + 1]
        if reason is None or pttl is None or pttl == -2:
            continue  # expired between the SCAN and the GET
        out[key] = {"reason": _text(reason), "until": now + pttl / 1000 if pttl >= 0 else None}
    return out


def checker(redis: Any, *, prefix: str = PREFIX) -> Callable[[str], bool]:
    """``unavailable(key)`` for ``Catalog.instance_types``: one SCAN now, set look-ups after."""
    return unavailable_keys(redis, prefix=prefix).__contains__


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
