"""Price data as plain dicts: the bundled CSV price table, the Pricing API's ``GetProducts``
answers and ``DescribeSpotPriceHistory`` records. Pure functions, no I/O but reading a file.

On-demand prices follow Part II §4.1 of the Karpenter reference: Linux, no pre-installed
software, capacitystatus Used, shared tenancy (and dedicated bare metal); every non-zero
``pricePerUnit`` of an item's on-demand terms counts, the last one wins. Spot prices keep the
latest record per instance type and zone (§4.3).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SPOT_PRODUCT_DESCRIPTIONS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")


def load_price_table(path: str | Path, region: str) -> dict[str, float]:
    """``region,instance_type,usd_per_hour`` rows of one region: instance type → USD/hour.

    Rows with an empty, unparsable or non-positive price are skipped.
    """
    prices: dict[str, float] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = {"region", "instance_type", "usd_per_hour"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: not a price table (missing column {', '.join(sorted(missing))})")
        for row in reader:
            if row["region"] != region:
                continue
            price = _positive_float(row["usd_per_hour"])
            if price is not None and row["instance_type"]:
                prices[row["instance_type"]] = price
    return prices


def price_table_regions(path: str | Path) -> set[str]:
    with open(path, newline="", encoding="utf-8") as fh:
        return {row["region"] for row in csv.DictReader(fh) if row.get("region")}


# ------------------------------------------------------------------ Pricing API


def pricing_api_region(region: str) -> str:
    """Where the Price List Query API answers for ``region`` (``pricing.NewAPI``)."""
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith("cn-"):
        return "cn-northwest-1"
    if region.startswith("eu-"):
        return "eu-central-1"
    return "us-east-1"


def currency_for(region: str) -> str:
    return "CNY" if region.startswith("cn-") else "USD"


def get_products_filters(region: str) -> list[list[dict[str, str]]]:
    """The ``Filters`` of the two ``GetProducts`` queries (ServiceCode AmazonEC2): shared
    tenancy instances and dedicated bare metal. Both must return prices for an update."""
    common = {
        "regionCode": region,
        "serviceCode": "AmazonEC2",
        "preInstalledSw": "NA",
        "operatingSystem": "Linux",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",
    }
    queries = (
        {"tenancy": "Shared", "productFamily": "Compute Instance"},
        {"tenancy": "Dedicated", "productFamily": "Compute Instance (bare metal)"},
    )
    return [
        [{"Type": "TERM_MATCH", "Field": name, "Value": value} for name, value in {**common, **extra}.items()]
        for extra in queries
    ]


def parse_price_list(items: Iterable[str | Mapping[str, Any]], currency: str = "USD") -> dict[str, float]:
    """``GetProducts`` ``PriceList`` items (JSON strings or decoded) → instance type → price.

    Items without an instance type or without a non-zero price in ``currency`` are skipped;
    an unparsable item is skipped too, since one bad item must not lose a whole refresh.
    """
    prices: dict[str, float] = {}
    for item in items:
        if isinstance(item, str | bytes):
            try:
                item = json.loads(item)
            except ValueError:
                continue
        if not isinstance(item, Mapping):
            continue
        instance_type = _get(item, "product", "attributes", "instanceType")
        if not isinstance(instance_type, str) or not instance_type:
            continue
        terms = _get(item, "terms", "OnDemand")
        if not isinstance(terms, Mapping):
            continue
        for term in terms.values():
            dimensions = term.get("priceDimensions") if isinstance(term, Mapping) else None
            if not isinstance(dimensions, Mapping):
                continue
            for dimension in dimensions.values():
                raw = _get(dimension, "pricePerUnit", currency)
                price = _positive_float(raw) if isinstance(raw, str | int | float) else None
                if price is not None:
                    prices[instance_type] = price
    return prices


# ------------------------------------------------------------------ spot price history


def latest_spot_prices(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """``DescribeSpotPriceHistory`` ``SpotPriceHistory`` records → (type, zone) → latest price.

    Records without a timestamp, zone or parsable positive price are skipped; among records
    with the same timestamp the later one wins (as upstream, which overwrites in order).
    """
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    for record in records:
        instance_type, zone = record.get("InstanceType"), record.get("AvailabilityZone")
        stamp = _timestamp(record.get("Timestamp"))
        price = _positive_float(record.get("SpotPrice"))
        if not instance_type or not zone or stamp is None or price is None:
            continue
        key = (instance_type, zone)
        seen = latest.get(key)
        if seen is None or stamp >= seen[0]:
            latest[key] = (stamp, price)
    return {key: price for key, (_, price) in latest.items()}


def _timestamp(value: Any) -> datetime | None:
    """An aware datetime (naive ones are taken as UTC, so the two kinds compare)."""
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _positive_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        price = float(value)
    except (TypeError, ValueError):
        return None
    return price if 0 < price < float("inf") else None


def _get(obj: Any, *path: str) -> Any:
    for name in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(name)
    return obj
