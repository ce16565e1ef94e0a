"""``manage.py catalog``: the instance types, offerings and prices the provisioner sees.

    manage.py catalog [--region R] [--nodeclass NAME] [--format json|table] [--require KEY=VALUE ...]

Without ``--nodeclass``: every zone and the AL2023 defaults. With it, the EC2NodeClass's
AMI family, kubelet settings and the zones of its subnets (resolved against the cloud, or
taken from its status when the cloud cannot be reached). Offerings marked unavailable in
the insufficient-capacity cache show ``"available": false``.

``--require`` filters on labels, repeatable, all must hold: ``KEY=VALUE`` (``KEY=A,B`` for
any of several), ``KEY!=VALUE``, ``KEY>N``, ``KEY<N``. Zone and capacity type
(``topology.kubernetes.io/zone``, ``karpenter.sh/capacity-type``) filter the offerings.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from provisioning.cloud.base import ResolvedNodeClass, Subnet
from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.quantity import format_quantity
from provisioning.services.instancetypes import by_family_and_size, parse_require, select, to_json


def _price(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def table(instance_types: list[InstanceType], region: str) -> list[str]:
    rows = [("NAME", "CPU", "MEMORY", "PODS", "ON-DEMAND", "SPOT", "ZONES")]
    for it in instance_types:
        allocatable = it.allocatable
        zones = sorted({o.zone for o in it.available_offerings()})
        short = [z[len(region) :] if z.startswith(region) else z for z in zones]
        rows.append(
            (
                it.name,
                format_quantity("cpu", allocatable.get("cpu", 0)),
                format_quantity("memory", allocatable.get("memory", 0)),
                str(allocatable.get("pods", 0)),
                _price(it.cheapest_price(frozenset({"on-demand"}))),
                _price(it.cheapest_price(frozenset({"spot"}))),
                ",".join(short) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {1, 2, 3, 4, 5}
    return [
        "  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in rows
    ]


class Command(BaseCommand):
    help = "Print the instance types, offerings and prices of the catalog (JSON or a table)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--region", default=None, help="AWS region (default: AWS_REGION)")
        parser.add_argument("--nodeclass", default=None, help="an EC2NodeClass: its AMI family, kubelet and subnets")
        parser.add_argument("--format", choices=("json", "table"), default="table")
        parser.add_argument(
            "--require",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="label filter, repeatable: KEY=VALUE (KEY=A,B), KEY!=VALUE, KEY>N, KEY<N",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from provisioning.services import catalog as service

        try:
            requires = [parse_require(text) for text in options["require"]]
        except ValueError as exc:
            raise CommandError(f"--require {exc}") from exc
        region = service.region_of(options["region"])
        catalog = service.load_catalog(region)
        spec, resolved = None, None
        if options["nodeclass"]:
            spec, resolved = self.nodeclass(options["nodeclass"])
        types = catalog.instance_types(spec, resolved, service.unavailable_checker())
        types = sorted(select(types, requires), key=by_family_and_size)
        if catalog.fallback_reason:
            self.stderr.write(f"note: {catalog.fallback_reason}")
        if options["format"] == "json":
            self.stdout.write(json.dumps([to_json(it) for it in types], indent=2))
            return
        self.stdout.write(
            f"# {catalog.region}: {len(types)} instance types; prices: {catalog.describe_prices()}; "
            "cpu, memory and pods are allocatable"
        )
        for line in table(types, catalog.region):
            self.stdout.write(line)

    def nodeclass(self, name: str) -> tuple[dict[str, Any], ResolvedNodeClass | None]:
        from provisioning.crd.ec2nodeclass import effective_ami_family
        from provisioning.models import EC2NodeClass

        obj = EC2NodeClass.objects.filter(name=name).first()
        if obj is None:
            raise CommandError(f"EC2NodeClass {name!r} not found")
        try:
            from provisioning.services.cloud import get_cloud

            resolved = get_cloud().resolve_nodeclass(obj.name, obj.spec)
            if resolved.subnets:
                return obj.spec, resolved
            self.stderr.write(f"note: EC2NodeClass {name!r} resolved to no subnets: {'; '.join(resolved.problems)}")
        except Exception as exc:  # the cloud is out of reach: fall back to the stored status
            self.stderr.write(f"note: cannot resolve EC2NodeClass {name!r} ({exc}); using its status")
        subnets = tuple(
            Subnet(id=s.get("id", ""), zone=s["zone"], zone_id=s.get("zoneID", ""))
            for s in (obj.status or {}).get("subnets") or []
            if isinstance(s, dict) and s.get("zone")
        )
        if not subnets:
            self.stderr.write("note: no subnets known; showing every zone")
            return obj.spec, None
        return obj.spec, ResolvedNodeClass(
            name=obj.name, ami_family=effective_ami_family(obj.spec) or "", subnets=subnets
        )
