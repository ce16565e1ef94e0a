"""Resources in manifests: quantities read into integer units, and a pod's effective requests.

Amounts are integers in base units (cpu millicores, memory and storage bytes, counts
otherwise). Parsed quantities are cached, since thousands of pods repeat a few values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from provisioning.scheduling.manifestfields import PodError, key_path, read_object, type_name
from provisioning.scheduling.quantity import QuantityError, format_quantity, parse_quantity, to_int

__all__ = ["container_requests", "effective_requests", "read_resources"]

_MAX_QUANTITY = 2**63 - 1


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


def _read_quantity(resource: str, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PodError(path, f"must be a quantity such as 500m, 2, 4Gi or 1.5G, not {type_name(value)}")
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


def read_resources(value: Any, path: str) -> dict[str, int]:
    """A resource list (``requests``, ``limits``, ``overhead``, ``capacity``) in base units."""
    raw = read_object(value, path)
    out: dict[str, int] = {}
    for name, quantity in raw.items():
        if not isinstance(name, str) or not name:
            raise PodError(path, f"resource names must be non-empty strings, not {name!r}")
        out[name] = _read_quantity(name, quantity, key_path(path, name))
    return out


def _add_into(total: dict[str, int], part: Mapping[str, int]) -> None:
    for name, amount in part.items():
        total[name] = total.get(name, 0) + amount


def _max_into(total: dict[str, int], part: Mapping[str, int]) -> None:
    for name, amount in part.items():
        if amount > total.get(name, 0):
            total[name] = amount


def container_requests(container: dict, path: str) -> dict[str, int]:
    """A container's requests, each missing request defaulted to its limit (as the API server does)."""
    resources = read_object(container.get("resources"), f"{path}.resources")
    requests = read_resources(resources.get("requests"), f"{path}.resources.requests")
    limits = read_resources(resources.get("limits"), f"{path}.resources.limits")
    for name, limit in limits.items():
        request = requests.get(name)
        if request is None:
            requests[name] = limit
        elif request > limit:
            raise PodError(
                key_path(f"{path}.resources.requests", name),
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
