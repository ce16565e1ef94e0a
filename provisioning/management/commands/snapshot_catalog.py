"""``manage.py snapshot_catalog --region us-east-1 --prices FILE``: write the bundled catalog.

Instance types and their zones come from whatever EC2 endpoint boto3 is pointed at (the
usual environment: ``AWS_ENDPOINT_URL`` and credentials; for the committed snapshot, the
simulated AWS); on-demand prices from a ``region,instance_type,usd_per_hour`` table. The
file is compact, sorted JSON with one instance type per line, so the same inputs give the
same bytes and a refresh shows as a readable diff.

Only the instance-type fields the catalog reads are kept; before writing, every type is
built from both the full and the trimmed description, under several EC2NodeClasses, and
the command refuses to write if any result differs.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from provisioning.cloud.catalog import SNAPSHOT_DIR, Catalog, trim_info
from provisioning.cloud.instancetypes import build_instance_type, incompatibility
from provisioning.cloud.pricing import load_price_table

# The date of the bundled price table (Karpenter's generated static list, us-east-1).
DEFAULT_PRICES_DATE = "2026-07-20"
FALLBACK_PRICE_REGION = "us-east-1"

# EC2NodeClasses the trimmed descriptions are checked under (families, kubelet, storage).
CHECK_SPECS: tuple[dict[str, Any] | None, ...] = (
    None,
    {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}], "kubelet": {"maxPods": 50, "podsPerCore": 4}},
    {"amiSelectorTerms": [{"alias": "windows2022@latest"}]},
    {"amiFamily": "AL2", "amiSelectorTerms": [{"id": "ami-0123456789abcdef0"}], "instanceStorePolicy": "RAID0"},
)


class Command(BaseCommand):
    help = "Write provisioning/cloud/snapshots/<region>.json from an EC2 endpoint and a price table."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--region", default=None, help="AWS region (default: AWS_REGION)")
        parser.add_argument("--prices", required=True, help="CSV price table: region,instance_type,usd_per_hour")
        parser.add_argument(
            "--prices-date",
            default=DEFAULT_PRICES_DATE,
            help=f"the date the prices were taken (default {DEFAULT_PRICES_DATE}, that of the bundled table)",
        )
        parser.add_argument("--out", default=None, help="output file (default: the bundled snapshot of the region)")
        parser.add_argument(
            "--source",
            default="",
            help="where the instance types came from, noted in the snapshot (e.g. 'simulated AWS (moto)')",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from provisioning.cloud.aws import AWSCloud, AWSConfig
        from provisioning.cloud.base import CloudError

        region = options["region"] or settings.AWS_REGION
        out = Path(options["out"]) if options["out"] else SNAPSHOT_DIR / f"{region}.json"
        prices_path = Path(options["prices"])
        if not prices_path.is_file():
            raise CommandError(f"--prices {prices_path}: no such file")
        try:
            on_demand = load_price_table(prices_path, region)
        except (OSError, ValueError) as exc:
            raise CommandError(f"--prices {prices_path}: {exc}") from exc
        price_region = region
        if not on_demand:
            # As upstream: a region without static prices is priced from us-east-1's.
            on_demand = load_price_table(prices_path, FALLBACK_PRICE_REGION)
            price_region = FALLBACK_PRICE_REGION
            self.stderr.write(f"no prices for {region} in {prices_path.name}; using those of {price_region}")
        if not on_demand:
            raise CommandError(f"--prices {prices_path}: no prices for {region} or {FALLBACK_PRICE_REGION}")

        started = time.perf_counter()
        cloud = AWSCloud(AWSConfig(region=region))
        try:
            infos = cloud.instance_type_infos()
            type_zones = cloud.instance_type_zones()
            zone_ids = cloud.zone_ids()
        except CloudError as exc:
            raise CommandError(f"EC2 ({region}): {exc}") from exc
        if not infos:
            raise CommandError(f"EC2 ({region}) listed no instance types")
        fetched = time.perf_counter() - started

        self.check_trimmed(infos, region)
        date = options["prices_date"]
        where = "" if price_region == region else f" of {price_region}"
        catalog = Catalog.assemble(
            region,
            infos,
            type_zones,
            zone_ids,
            on_demand=on_demand,
            price_source=f"snapshot {date}" + where,
            prices_as_of=date,
            prices_note=f"{prices_path.name}: Linux on-demand list prices, USD/hour",
            source=options["source"] or f"EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings ({region})",
        )
        catalog = replace(catalog, on_demand={name: p for name, p in on_demand.items() if name in catalog.infos})
        data = catalog.to_json()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(data, encoding="utf-8")
        priced = sum(1 for name in catalog.infos if name in catalog.on_demand)
        self.stdout.write(
            f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB): {len(catalog)} instance types, {priced} priced, "
            f"{len(catalog.zones)} zones; prices of {date}{where}; EC2 read in {fetched:.1f}s"
        )

    def check_trimmed(self, infos: list[dict[str, Any]], region: str) -> None:
        """Refuse to write a snapshot that would build differently from the full data."""
        for info in infos:
            small = trim_info(info)
            for spec in CHECK_SPECS:
                if incompatibility(info, spec) != incompatibility(small, spec):
                    raise CommandError(f"{info['InstanceType']}: trimming changed its compatibility")
                if incompatibility(info, spec) is not None:
                    continue
                full = build_instance_type(info, region=region, nodeclass_spec=spec)
                cut = build_instance_type(small, region=region, nodeclass_spec=spec)
                if full != cut:
                    raise CommandError(
                        f"{info['InstanceType']}: trimming changed the instance type; "
                        "add the field it reads to catalog.INFO_FIELDS"
                    )
