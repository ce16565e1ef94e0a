"""The process-wide catalog, shared by web and worker processes through Redis.

``load_catalog()`` answers the catalog every part of the app uses: the latest live build
stored in Redis (``karpweb:catalog:<region>``) when there is one, else the bundled snapshot
of the region (the cold-start value, and the whole story in the simulated mode until a
refresh ran), priced for spot by the simulated spot market in the simulated mode. Each
process keeps the catalog it loaded and asks Redis for the stored version at most every
``CHECK_SECONDS``, so a refresh by the worker reaches the web processes within that time.

``refresh_catalog()`` (the 12-hourly task) builds from the cloud: the moto server in the
simulated mode, EC2 and the Pricing API with ``KARPWEB_AWS=aws``; when the prices cannot
be had it keeps the last known ones and says so in ``fallback_reason``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from provisioning.cloud import ice
from provisioning.cloud.base import CloudProvider, PriceSource, ResolvedNodeClass
from provisioning.cloud.catalog import Catalog, snapshot_path
from provisioning.scheduling.instancetypes import InstanceType

log = logging.getLogger(__name__)

REDIS_PREFIX = "karpweb:catalog:"
CHECK_SECONDS = 30.0
SIMULATED_SPOT = "simulated spot market"


@dataclass
class _Loaded:
    catalog: Catalog
    version: str | None  # the Redis version it came from; None for the bundled snapshot
    checked_at: float


_lock = threading.Lock()
_loaded: dict[str, _Loaded] = {}


def region_of(region: str | None = None) -> str:
    return region or getattr(settings, "AWS_REGION", "") or "us-east-1"


def simulated() -> bool:
    return getattr(settings, "KARPWEB_AWS", "simulated") == "simulated"


def catalog_settings() -> dict[str, Any]:
    return {
        "vm_memory_overhead_percent": float(getattr(settings, "KARPWEB_VM_MEMORY_OVERHEAD_PERCENT", 0.075)),
        "reserved_enis": int(getattr(settings, "KARPWEB_RESERVED_ENIS", 0)),
    }


def _redis() -> Any | None:
    if not getattr(settings, "REDIS_URL", ""):
        return None
    from provisioning.services.connections import get_redis

    try:
        return get_redis()
    except ImproperlyConfigured:
        return None


def redis_key(region: str) -> str:
    return f"{REDIS_PREFIX}{region}"


# ------------------------------------------------------------------ the bundled snapshot


def bundled_catalog(region: str | None = None) -> Catalog:
    """The snapshot shipped with the code for ``region`` (us-east-1's for a region without
    one, saying so), priced for spot by the simulated market in the simulated mode."""
    region = region_of(region)
    conf = catalog_settings()
    return _bundled(region, simulated(), conf["vm_memory_overhead_percent"], conf["reserved_enis"])


@functools.cache
def _bundled(region: str, simulated_spot: bool, vm_memory_overhead_percent: float, reserved_enis: int) -> Catalog:
    path = snapshot_path(region)
    catalog = Catalog.from_snapshot(
        path, vm_memory_overhead_percent=vm_memory_overhead_percent, reserved_enis=reserved_enis
    )
    if catalog.region != region:
        catalog = replace(
            catalog,
            fallback_reason=f"no bundled catalog for {region}; showing {catalog.region} until the first refresh",
        )
    if simulated_spot:
        catalog = catalog.with_spot(simulated_prices(catalog).spot_prices(), SIMULATED_SPOT)
    return catalog


def simulated_prices(catalog: Catalog) -> PriceSource:
    from provisioning.cloud.simulated import SimulatedPrices

    return SimulatedPrices(dict(catalog.on_demand), catalog.zones)


# ------------------------------------------------------------------ the shared catalog


def load_catalog(region: str | None = None, *, redis: Any | None = None, fresh: bool = False) -> Catalog:
    """The catalog of ``region`` (default ``AWS_REGION``) this process should use now."""
    region = region_of(region)
    now = time.monotonic()
    with _lock:
        loaded = _loaded.get(region)
        if loaded is not None and not fresh and now - loaded.checked_at < CHECK_SECONDS:
            return loaded.catalog
    redis = redis if redis is not None else _redis()
    version: str | None = None
    catalog: Catalog | None = None
    reachable = redis is not None
    if redis is not None:
        try:
            raw = redis.get(redis_key(region) + ":version")
            version = raw.decode() if isinstance(raw, bytes) else raw
            if version and (loaded is None or loaded.version != version):
                blob = redis.get(redis_key(region))
                if blob:
                    catalog = Catalog.from_json(blob, **catalog_settings())
                else:
                    version = None
        except Exception as exc:  # Redis down or a blob we cannot read: keep serving
            reachable = False
            log.warning("catalog: cannot read %s from Redis (%s); using what this process has", region, exc)
    with _lock:
        if catalog is None:
            if loaded is not None and (loaded.version == version or (not reachable and loaded.version)):
                catalog, version = loaded.catalog, loaded.version
            else:
                catalog, version = bundled_catalog(region), None
        _loaded[region] = _Loaded(catalog, version, now)
    return catalog


def store_catalog(catalog: Catalog, *, redis: Any | None = None) -> str:
    """Share ``catalog`` with every process: the blob, then its version; returns the version."""
    redis = redis if redis is not None else _redis()
    blob = catalog.to_json()
    version = hashlib.sha256(blob.encode()).hexdigest()[:16]
    if redis is not None:
        pipe = redis.pipeline(transaction=True)
        pipe.set(redis_key(catalog.region), blob)
        pipe.set(redis_key(catalog.region) + ":version", version)
        pipe.execute()
    with _lock:
        _loaded[catalog.region] = _Loaded(catalog, version if redis is not None else None, time.monotonic())
    return version


def forget(region: str | None = None) -> None:
    """Drop what this process loaded (tests; a settings change)."""
    with _lock:
        if region is None:
            _loaded.clear()
        else:
            _loaded.pop(region_of(region), None)
    _bundled.cache_clear()


def refresh_catalog(
    region: str | None = None,
    *,
    cloud: CloudProvider | None = None,
    prices: PriceSource | None = None,
    redis: Any | None = None,
) -> Catalog:
    """Build the catalog from the cloud and share it. EC2 failures propagate (the task
    retries); price failures fall back to the last known prices, or the bundled ones."""
    region = region_of(region)
    current = load_catalog(region, redis=redis, fresh=True)
    bundled = bundled_catalog(region)
    fallback = current if current.built_at and current.region == region else bundled
    cloud = cloud or _cloud(region)
    options: dict[str, Any] = {}
    if prices is None and simulated():
        prices = simulated_prices(bundled)
    if simulated():
        options = {
            "on_demand_source": bundled.price_source,
            "prices_as_of": bundled.prices_as_of,
            "prices_note": bundled.prices_note,
            "spot_source": SIMULATED_SPOT,
        }
    elif prices is None:
        prices = _aws_prices(region)
    catalog = Catalog.build(
        cloud,
        prices,
        fallback,
        source=f"EC2 API ({'simulated' if simulated() else 'aws'} {region})",
        **options,
        **catalog_settings(),
    )
    store_catalog(catalog, redis=redis)
    log.info("catalog %s refreshed: %d instance types; prices: %s", region, len(catalog), catalog.describe_prices())
    return catalog


def _cloud(region: str) -> CloudProvider:
    from provisioning.services.cloud import get_cloud

    cloud = get_cloud()
    if cloud.region == region:
        return cloud
    from provisioning.cloud.aws import AWSCloud, AWSConfig

    return AWSCloud(replace(AWSConfig.from_settings(settings), region=region))


def _aws_prices(region: str) -> PriceSource:
    from provisioning.cloud.aws import AWSConfig, AWSPrices

    return AWSPrices(replace(AWSConfig.from_settings(settings), region=region))


# ------------------------------------------------------------------ for the rest of the app


def unavailable_checker() -> Callable[[str], bool]:
    """``unavailable(key)`` from the ICE cache now; nothing is unavailable without Redis."""
    redis = _redis()
    if redis is None:
        return lambda key: False
    try:
        return ice.checker(redis)
    except Exception as exc:
        log.warning("catalog: cannot read the unavailable offerings from Redis (%s)", exc)
        return lambda key: False


def unavailable_now() -> dict[str, str]:
    """Offerings marked unavailable now with their reason, ``{"spot:m5.large:us-east-1a": reason}``;
    one read, so a run decides and explains itself with the same set."""
    redis = _redis()
    if redis is None:
        return {}
    try:
        return {key: mark["reason"] for key, mark in ice.unavailable_offerings(redis).items()}
    except Exception as exc:
        log.warning("catalog: cannot read the unavailable offerings from Redis (%s)", exc)
        return {}


def instance_types(
    nodeclass_spec: Mapping[str, Any] | None, resolved: ResolvedNodeClass | None, region: str | None = None
) -> list[InstanceType]:
    """The instance types and offerings the solver sees for one EC2NodeClass."""
    return load_catalog(region).instance_types(nodeclass_spec, resolved, unavailable_checker())


def on_demand_prices(region: str | None = None) -> dict[str, float]:
    """Instance type → on-demand USD/hour, what spot and savings are measured against; empty
    when the catalog cannot be loaded, so the pages that show savings still render."""
    try:
        return dict(load_catalog(region).on_demand)
    except Exception as exc:
        log.warning("catalog: no on-demand prices (%s)", exc)
        return {}


def catalog_labels(region: str | None = None) -> Mapping[str, frozenset[str]] | None:
    """Label key → values some instance type has, for the validator; None when the
    catalog cannot be loaded (the validator then falls back to its heuristics)."""
    try:
        catalog = load_catalog(region)
    except Exception as exc:
        log.warning("catalog: not available for validation (%s)", exc)
        return None
    return catalog.label_values()  # computed once per catalog, then cached on it
