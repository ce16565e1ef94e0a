"""THE catalog: every EC2 instance type of a region, where it is offered and at what price.

A ``Catalog`` holds what the cloud said (``DescribeInstanceTypes`` infos, trimmed to the
fields the builder reads; zones per type from ``DescribeInstanceTypeOfferings``; zone ids)
and what the prices are (on-demand per type, spot per type and zone), with where the prices
came from. ``instance_types(nodeclass_spec, resolved, unavailable)`` turns that into the
solver's ``InstanceType`` list for one EC2NodeClass (Part II §3-§4 of the Karpenter
reference): compatible types only, one offering per zone the type is offered in and the
EC2NodeClass has subnets in, per capacity type the type supports; an offering without a
price, or marked in the unavailable-offerings cache, is kept but not available.

It is built three ways: from a bundled snapshot (``snapshots/<region>.json``, the offline
and embedded default), live from a ``CloudProvider`` and a ``PriceSource`` (falling back to
the snapshot's prices, and saying so, when the prices cannot be had), or from the JSON a
live build was stored as (``to_json`` / ``from_json``), so processes share one catalog.

No Django here: settings are passed in (``provisioning/services/catalog.py`` reads them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioning.cloud.base import (
    CapacityReservation,
    CloudProvider,
    PriceSource,
    PricingUnavailable,
    ResolvedNodeClass,
)
from provisioning.cloud.instancetypes import build_instance_type, incompatibility
from provisioning.cloud.reservations import reserved_offerings
from provisioning.scheduling.instancetypes import InstanceType, Offering

FORMAT = 1
SNAPSHOT_DIR = Path(__file__).resolve().parent / "snapshots"
DEFAULT_REGION = "us-east-1"  # upstream prices any region without static data from us-east-1
CAPACITY_TYPES = ("on-demand", "spot")
ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
# Built types per (EC2NodeClass spec, subnets, AMI architectures) kept in memory, ~5 MiB each.
MAX_CACHED_SHAPES = 16

# Labels whose values depend on the EC2NodeClass rather than on the instance type; the
# validator must not call a requirement on them unmatched (Windows exists, AL2023 aside).
NODECLASS_DEPENDENT_LABELS = frozenset({"kubernetes.io/os", "node.kubernetes.io/windows-build"})
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONE_ID_LABEL = "topology.k8s.aws/zone-id"

# The DescribeInstanceTypes fields ``instancetypes.py`` (labels, capacity, compatibility)
# and the offerings read; the rest (boot modes, NitroTPM, EBS IOPS, placement strategies...)
# is dropped so the snapshot stays small. ``snapshot_catalog`` checks nothing is missing.
INFO_FIELDS: dict[str, Any] = {
    "InstanceType": True,
    "BareMetal": True,
    "Hypervisor": True,
    "SupportedUsageClasses": True,
    "SupportedVirtualizationTypes": True,
    "VCpuInfo": {"DefaultVCpus": True},
    "MemoryInfo": {"SizeInMiB": True},
    "ProcessorInfo": {
        "SupportedArchitectures": True,
        "Manufacturer": True,
        "SustainedClockSpeedInGhz": True,
        "SupportedFeatures": True,
    },
    "GpuInfo": {"Gpus": True},
    "InferenceAcceleratorInfo": {"Accelerators": True},
    "NeuronInfo": {"NeuronDevices": True},
    "InstanceStorageInfo": {"TotalSizeInGB": True, "NvmeSupport": True},
    "EbsInfo": {"EbsOptimizedSupport": True, "EbsOptimizedInfo": {"MaximumBandwidthInMbps": True}},
    "NetworkInfo": {
        "DefaultNetworkCardIndex": True,
        "MaximumNetworkInterfaces": True,
        "Ipv4AddressesPerInterface": True,
        "EnaSupport": True,
        "EfaInfo": {"MaximumEfaInterfaces": True},
        "EncryptionInTransitSupported": True,
        "NetworkPerformance": True,
        "NetworkCards": {"NetworkCardIndex": True, "MaximumNetworkInterfaces": True, "BaselineBandwidthInGbps": True},
    },
}


def trim_info(info: Mapping[str, Any], fields: Mapping[str, Any] = INFO_FIELDS) -> dict[str, Any]:
    """Keep only the fields of ``INFO_FIELDS`` (``True`` keeps a value whole; a mapping
    trims a nested object, or each object of a list)."""
    out: dict[str, Any] = {}
    for name, keep in fields.items():
        if name not in info:
            continue
        value = info[name]
        if keep is True:
            out[name] = value
        elif isinstance(value, Mapping):
            out[name] = trim_info(value, keep)
        elif isinstance(value, list):
            out[name] = [trim_info(v, keep) if isinstance(v, Mapping) else v for v in value]
        else:
            out[name] = value
    return out


def _nothing_unavailable(key: str) -> bool:
    return False


def spec_hash(spec: Mapping[str, Any] | None) -> str:
    return hashlib.sha256(json.dumps(spec or {}, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class Catalog:
    """Instance types, offerings and prices of one region (see the module docstring)."""

    region: str
    infos: Mapping[str, Mapping[str, Any]]  # type → trimmed DescribeInstanceTypes info
    type_zones: Mapping[str, frozenset[str]]  # type → zones it is offered in
    zone_ids: Mapping[str, str]  # zone name → zone id
    on_demand: Mapping[str, float]  # type → USD/hour
    spot: Mapping[tuple[str, str], float]  # (type, zone) → USD/hour
    price_source: str  # "pricing-api", "snapshot 2026-07-20", ...
    prices_as_of: str = ""  # the date of the on-demand prices
    spot_source: str = ""  # "spot price history", "simulated spot market", "" (no spot prices)
    fallback_reason: str = ""  # set when the live prices failed and older ones are used
    prices_note: str = ""  # what the prices are, for people ("ec2-ondemand-prices.csv: ...")
    source: str = ""  # where the instance types came from
    built_at: str = ""  # when a live build ran (ISO 8601, UTC); "" for a bundled snapshot
    vm_memory_overhead_percent: float = 0.075
    reserved_enis: int = 0
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: Any = field(default_factory=threading.RLock, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ reading

    @property
    def zones(self) -> list[str]:
        """Every zone any type is offered in, sorted."""
        zones: set[str] = set(self.zone_ids)
        for type_zones in self.type_zones.values():
            zones |= type_zones
        return sorted(zones)

    @property
    def names(self) -> list[str]:
        return sorted(self.infos)

    def __len__(self) -> int:
        return len(self.infos)

    def describe_prices(self) -> str:
        """One line for people: where the prices come from."""
        text = self.price_source + (f" ({self.prices_as_of})" if self.prices_as_of not in self.price_source else "")
        if self.spot_source:
            text += f"; spot: {self.spot_source}"
        return text + (f"; {self.fallback_reason}" if self.fallback_reason else "")

    def with_settings(self, *, vm_memory_overhead_percent: float, reserved_enis: int) -> Catalog:
        if (vm_memory_overhead_percent, reserved_enis) == (self.vm_memory_overhead_percent, self.reserved_enis):
            return self
        return dataclasses.replace(
            self, vm_memory_overhead_percent=vm_memory_overhead_percent, reserved_enis=reserved_enis
        )

    def with_spot(self, spot: Mapping[tuple[str, str], float], source: str) -> Catalog:
        return dataclasses.replace(self, spot=dict(spot), spot_source=source)

    # ------------------------------------------------------------------ instance types

    def instance_types(
        self,
        nodeclass_spec: Mapping[str, Any] | None = None,
        resolved: ResolvedNodeClass | None = None,
        unavailable: Callable[[str], bool] = _nothing_unavailable,
    ) -> list[InstanceType]:
        """Every instance type compatible with the EC2NodeClass, with its offerings.

        Offerings are in the type's zones that have a subnet of ``resolved`` (every zone when
        ``resolved`` is None), one per capacity type the type supports. An offering is
        available when it has a price and ``unavailable("capacity-type:instance-type:zone")``
        says no. Built shapes are cached per (spec, subnets, AMIs); only the ICE marks are
        applied per call. The capacity reservations ``resolved`` has add their reserved offerings.
        """
        shapes = self._shapes(nodeclass_spec, resolved)
        if resolved is not None and resolved.capacity_reservations:
            shapes = self.with_reservations(shapes, resolved.capacity_reservations)
        return self.mark_unavailable(shapes, unavailable)

    def shapes(
        self, nodeclass_spec: Mapping[str, Any] | None = None, resolved: ResolvedNodeClass | None = None
    ) -> tuple[InstanceType, ...]:
        """``instance_types`` without the unavailable-offering marks: the built types themselves,
        the same tuple for the same EC2NodeClass until the catalog changes (what is laid over
        them, NodeOverlays, is cached on that)."""
        return self._shapes(nodeclass_spec, resolved)

    @staticmethod
    def mark_unavailable(
        shapes: Iterable[InstanceType], unavailable: Callable[[str], bool] = _nothing_unavailable
    ) -> list[InstanceType]:
        """The types with each available offering ``unavailable("capacity-type:instance-type:zone")``
        names taken out of launches (the insufficient-capacity marks)."""
        if unavailable is _nothing_unavailable:
            return list(shapes)
        out = []
        for it in shapes:
            marked = [o for o in it.offerings if o.available and unavailable(offering_key(it.name, o))]
            if marked:
                gone = set(map(id, marked))
                offerings = tuple(
                    dataclasses.replace(
                        o, available=False, unavailable_reason="insufficient capacity: skipped for 3 minutes"
                    )
                    if id(o) in gone
                    else o
                    for o in it.offerings
                )
                it = dataclasses.replace(it, offerings=offerings)
            out.append(it)
        return out

    def with_reservations(
        self, shapes: Iterable[InstanceType], reservations: Iterable[CapacityReservation]
    ) -> tuple[InstanceType, ...]:
        """``shapes`` with a reserved offering per capacity reservation of their type (see
        ``reservations.reserved_offerings``), in the zones the type is offered in."""
        reservations = tuple(reservations)
        if not reservations:
            return tuple(shapes)
        wanted = {r.instance_type for r in reservations}
        out = []
        for it in shapes:
            if it.name in wanted:
                zones = {o.zone for o in it.offerings}
                extra = reserved_offerings(reservations, it.name, zones, self.on_demand.get(it.name), self.zone_ids)
                it = dataclasses.replace(it, offerings=it.offerings + extra)
            out.append(it)
        return tuple(out)

    def instance_type(self, name: str, nodeclass_spec: Mapping[str, Any] | None = None) -> InstanceType | None:
        return next((it for it in self._shapes(nodeclass_spec, None) if it.name == name), None)

    def _shapes(self, nodeclass_spec: Mapping[str, Any] | None, resolved: ResolvedNodeClass | None) -> tuple:
        subnets = None if resolved is None else frozenset((s.zone, s.zone_id) for s in resolved.subnets)
        arches = None
        if resolved is not None and resolved.images:
            arches = frozenset(image.arch for image in resolved.images)
        key = ("shapes", spec_hash(nodeclass_spec), subnets, arches)
        with self._lock:
            cached = self._cache.pop(key, None)
            if cached is None:
                cached = tuple(self._build(nodeclass_spec, subnets, arches))
                shapes = [k for k in self._cache if isinstance(k, tuple) and k[0] == "shapes"]
                for old in shapes[: max(0, len(shapes) - MAX_CACHED_SHAPES + 1)]:
                    self._cache.pop(old, None)  # least recently used first
            self._cache[key] = cached  # (re)inserted last: most recently used
        return cached

    def _build(
        self,
        nodeclass_spec: Mapping[str, Any] | None,
        subnets: frozenset[tuple[str, str]] | None,
        arches: frozenset[str] | None,
    ) -> Iterable[InstanceType]:
        spec = dict(nodeclass_spec) if nodeclass_spec is not None else None
        if subnets is None:
            zones, subnet_zone_ids = None, {}
        else:
            zones = frozenset(zone for zone, _ in subnets)
            subnet_zone_ids = {zone: zone_id for zone, zone_id in subnets if zone_id}
        for name in sorted(self.infos):
            info = self.infos[name]
            if incompatibility(info, spec) is not None:
                continue
            if arches is not None and _arch(info) not in arches:
                continue  # no AMI of the EC2NodeClass runs on it
            it = self._base(name, spec)
            type_zones = self.type_zones.get(name, frozenset())
            offered = sorted(type_zones if zones is None else type_zones & zones)
            classes = [ct for ct in CAPACITY_TYPES if ct in (info.get("SupportedUsageClasses") or ())]
            offerings = []
            for zone in offered:
                zone_id = self.zone_ids.get(zone) or subnet_zone_ids.get(zone, "")
                for capacity_type in classes:
                    price = self.on_demand.get(name) if capacity_type == "on-demand" else self.spot.get((name, zone))
                    offerings.append(
                        Offering(
                            zone=zone,
                            capacity_type=capacity_type,
                            price=price,
                            available=price is not None,
                            zone_id=zone_id,
                            unavailable_reason="" if price is not None else f"no {capacity_type} price",
                        )
                    )
            yield dataclasses.replace(it, offerings=tuple(offerings))

    def _base(self, name: str, spec: dict[str, Any] | None) -> InstanceType:
        """One type's labels, capacity and overhead for an EC2NodeClass spec (no offerings)."""
        return build_instance_type(
            dict(self.infos[name]),
            region=self.region,
            nodeclass_spec=spec,
            vm_memory_overhead_percent=self.vm_memory_overhead_percent,
            reserved_enis=self.reserved_enis,
        )

    # ------------------------------------------------------------------ labels for the validator

    def label_values(self) -> dict[str, frozenset[str]]:
        """Label key → every value some instance type of the region has (all types, whatever
        the EC2NodeClass), plus zones and zone ids. Labels that depend on the EC2NodeClass
        (os, windows-build) are left out."""
        with self._lock:
            cached = self._cache.get("labels")
            if cached is None:
                cached = self._cache["labels"] = self._label_values()
        return cached

    def _label_values(self) -> dict[str, frozenset[str]]:
        values: dict[str, set[str]] = {}
        for name in sorted(self.infos):
            for key, value in self._base(name, None).labels.items():
                if key not in NODECLASS_DEPENDENT_LABELS:
                    values.setdefault(key, set()).add(str(value))
        values[ZONE_LABEL] = set(self.zones)
        ids = {zone_id for zone_id in self.zone_ids.values() if zone_id}
        if ids:
            values[ZONE_ID_LABEL] = ids
        return {key: frozenset(v) for key, v in values.items()}

    # ------------------------------------------------------------------ constructors

    @classmethod
    def build(
        cls,
        cloud: CloudProvider,
        prices: PriceSource,
        snapshot_fallback: Catalog | None,
        *,
        on_demand_source: str = "pricing-api",
        spot_source: str = "spot price history",
        prices_as_of: str | None = None,
        prices_note: str = "",
        now: datetime | None = None,
        source: str = "",
        vm_memory_overhead_percent: float | None = None,
        reserved_enis: int | None = None,
    ) -> Catalog:
        """A live catalog: instance types and zones from ``cloud``, prices from ``prices``.

        Live on-demand prices are laid over the fallback's (as upstream merges API prices
        over the static list); if the source raises ``PricingUnavailable`` the fallback's
        prices are used and ``fallback_reason`` says so. Without spot prices, spot is priced
        as the fallback's spot, or else at the on-demand price (upstream's start-up rule).
        """
        now = now or datetime.now(UTC)
        region = cloud.region
        shape = cls.assemble(region, cloud.instance_type_infos(), cloud.instance_type_zones(), cloud.zone_ids())
        infos, type_zones, zone_ids = shape.infos, shape.type_zones, shape.zone_ids
        fallback = snapshot_fallback
        reasons: list[str] = []

        try:
            live = dict(prices.on_demand_prices())
            if not live:
                raise PricingUnavailable("no on-demand prices were returned")
        except PricingUnavailable as exc:
            on_demand = dict(fallback.on_demand) if fallback else {}
            price_source = fallback.price_source if fallback else "none"
            as_of = fallback.prices_as_of if fallback else ""
            note = fallback.prices_note if fallback else ""
            reasons.append(f"Pricing API unreachable: {_short(exc)}; using {_fallback_prices(fallback, region)}")
        else:
            same_region = fallback is not None and fallback.region == region
            on_demand = {**(fallback.on_demand if same_region and fallback else {}), **live}
            price_source = on_demand_source
            as_of = prices_as_of or now.date().isoformat()
            note = prices_note

        try:
            spot = dict(prices.spot_prices())
            if not spot:
                raise PricingUnavailable("no spot prices were returned")
            spot_from = spot_source
        except PricingUnavailable as exc:
            if fallback is not None and fallback.spot and fallback.region == region:
                spot, spot_from = dict(fallback.spot), fallback.spot_source
                what = f"the spot prices of {fallback.spot_source or 'the fallback'}"
            else:
                spot = {
                    (name, zone): on_demand[name]
                    for name, zones in type_zones.items()
                    if name in on_demand
                    for zone in zones
                }
                spot_from, what = "on-demand prices", "on-demand prices for spot"
            reasons.append(f"spot price history unreachable: {_short(exc)}; using {what}")

        return cls(
            region=region,
            infos=infos,
            type_zones=type_zones,
            zone_ids=zone_ids,
            on_demand=on_demand,
            spot=spot,
            price_source=price_source,
            prices_as_of=as_of,
            prices_note=note,
            spot_source=spot_from,
            fallback_reason="; ".join(reasons),
            source=source or f"EC2 API ({region})",
            built_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            vm_memory_overhead_percent=(
                vm_memory_overhead_percent
                if vm_memory_overhead_percent is not None
                else fallback.vm_memory_overhead_percent
                if fallback
                else 0.075
            ),
            reserved_enis=reserved_enis if reserved_enis is not None else fallback.reserved_enis if fallback else 0,
        )

    @classmethod
    def assemble(
        cls,
        region: str,
        infos: Iterable[Mapping[str, Any]],
        type_zones: Mapping[str, Iterable[str]],
        zone_ids: Mapping[str, str],
        **fields: Any,
    ) -> Catalog:
        """A catalog from what EC2 said: infos trimmed to ``INFO_FIELDS``; types offered in
        no zone of the region left out (EC2 lists only the region's types; moto lists all)."""
        zones = {name: frozenset(z) for name, z in type_zones.items() if z}
        kept = {info["InstanceType"]: trim_info(info) for info in infos if info["InstanceType"] in zones}
        fields.setdefault("price_source", "")
        fields.setdefault("on_demand", {})
        fields.setdefault("spot", {})
        return cls(
            region=region,
            infos=kept,
            type_zones={name: zones[name] for name in kept},
            zone_ids=dict(zone_ids),
            **fields,
        )

    @classmethod
    def from_snapshot(cls, path: str | Path, **settings: Any) -> Catalog:
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh), **settings)

    @classmethod
    def from_json(cls, text: str | bytes, **settings: Any) -> Catalog:
        return cls.from_dict(json.loads(text), **settings)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **settings: Any) -> Catalog:
        """The loader of ``to_snapshot``'s format. ``settings``: vm_memory_overhead_percent,
        reserved_enis."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not a catalog snapshot of format {FORMAT} (format {data.get('format')!r})")
        types = data["instanceTypes"]
        prices = data.get("prices") or {}
        return cls(
            region=data["region"],
            infos={name: entry["info"] for name, entry in types.items()},
            type_zones={name: frozenset(entry.get("zones") or ()) for name, entry in types.items()},
            zone_ids=dict(data.get("zones") or {}),
            on_demand={name: float(entry["onDemand"]) for name, entry in types.items() if entry.get("onDemand")},
            spot={
                (name, zone): float(price)
                for name, by_zone in (data.get("spot") or {}).items()
                for zone, price in by_zone.items()
            },
            price_source=prices.get("source", ""),
            prices_as_of=prices.get("asOf", ""),
            spot_source=prices.get("spotSource", ""),
            fallback_reason=prices.get("fallbackReason", ""),
            prices_note=prices.get("note", ""),
            source=data.get("source", ""),
            built_at=data.get("builtAt", ""),
            **settings,
        )

    def to_snapshot(self) -> dict[str, Any]:
        """Plain JSON data, sorted, loadable by ``from_dict``."""
        spot: dict[str, dict[str, float]] = {}
        for (name, zone), price in sorted(self.spot.items()):
            spot.setdefault(name, {})[zone] = price
        prices = {
            "source": self.price_source,
            "asOf": self.prices_as_of,
            **({"spotSource": self.spot_source} if self.spot_source else {}),
            **({"fallbackReason": self.fallback_reason} if self.fallback_reason else {}),
            **({"note": self.prices_note} if self.prices_note else {}),
        }
        return {
            "format": FORMAT,
            "region": self.region,
            "source": self.source,
            **({"builtAt": self.built_at} if self.built_at else {}),
            "prices": prices,
            "zones": dict(sorted(self.zone_ids.items())),
            "instanceTypes": {
                name: {
                    "info": _sorted(self.infos[name]),
                    "zones": sorted(self.type_zones.get(name, ())),
                    "onDemand": self.on_demand.get(name),
                }
                for name in sorted(self.infos)
            },
            "spot": spot,
        }

    def to_json(self) -> str:
        """Compact, deterministic JSON with one instance type per line (readable diffs)."""
        data = self.to_snapshot()
        types, spot = data.pop("instanceTypes"), data.pop("spot")
        dump = _compact
        head = dump(data)[:-1]
        lines = [head + ',"instanceTypes":{']
        entries = [f"{dump(name)}:{dump(entry)}" for name, entry in types.items()]
        lines.append(",\n".join(entries))
        spots = [f"{dump(name)}:{dump(by_zone)}" for name, by_zone in spot.items()]
        lines.append('},"spot":{' + (",\n".join(spots)) + "}}")
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ helpers


def offering_key(instance_type: str, offering: Offering) -> str:
    """The unavailable-offerings key: ``capacity-type:instance-type:zone``, and for a reserved
    offering ``:<reservation id>`` after it (a full reservation is not a full zone)."""
    key = f"{offering.capacity_type}:{instance_type}:{offering.zone}"
    return f"{key}:{offering.reservation_id}" if offering.reservation_id else key


def snapshot_path(region: str, directory: Path = SNAPSHOT_DIR) -> Path:
    """The bundled snapshot of ``region``, or us-east-1's when the region has none."""
    path = directory / f"{region}.json"
    return path if path.exists() else directory / f"{DEFAULT_REGION}.json"


def _fallback_prices(fallback: Catalog | None, region: str) -> str:
    if fallback is None:
        return "no prices (no bundled snapshot)"
    where = "" if fallback.region == region else f" {fallback.region}"
    if fallback.price_source.startswith("snapshot") or not fallback.built_at:
        return f"the bundled{where} list prices of {fallback.prices_as_of or 'unknown date'}"
    return f"the last known{where} prices ({fallback.price_source}, {fallback.prices_as_of})"


def _short(exc: BaseException, limit: int = 160) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _arch(info: Mapping[str, Any]) -> str:
    arches = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()
    return next((ARCHITECTURES[a] for a in arches if a in ARCHITECTURES), "")


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted(v) for v in value]
    return value


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
