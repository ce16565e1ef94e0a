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
import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from provisioning.cloud.base import ResolvedNodeClass, Subnet
from provisioning.crd import labels as L
from provisioning.scheduling.instancetypes import InstanceType, Offering
from provisioning.scheduling.quantity import format_quantity
from provisioning.scheduling.requirements import Requirement, Requirements

ZONE_ID = "topology.k8s.aws/zone-id"
OFFERING_KEYS = frozenset({L.ZONE, L.CAPACITY_TYPE, ZONE_ID})

# ------------------------------------------------------------------ --require
# KEY=A,B / KEY!=A / KEY>N / KEY<N, read into the scheduling core's requirements algebra.

_REQUIRE = re.compile(r"^\s*([^=!<>\s]+)\s*(!=|=|>|<)\s*(.*?)\s*$")
_OPERATORS = {"=": "In", "!=": "NotIn", ">": "Gt", "<": "Lt"}


def parse_require(text: str) -> Requirement:
    match = _REQUIRE.match(text)
    if not match or not match.group(3):
        raise ValueError(f"{text!r}: expected KEY=VALUE, KEY!=VALUE, KEY>N or KEY<N")
    key, operator, raw = match.groups()
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if operator in (">", "<") and (len(values) != 1 or not re.fullmatch(r"[+-]?[0-9]+", values[0])):
        raise ValueError(f"{text!r}: {operator} takes one integer")
    return Requirement.of(key, _OPERATORS[operator], values)  # aliases are normalized here


def offering_labels(offering: Offering) -> dict[str, str]:
    labels = {L.ZONE: offering.zone, L.CAPACITY_TYPE: offering.capacity_type}
    if offering.zone_id:
        labels[ZONE_ID] = offering.zone_id
    return labels


def select(instance_types: list[InstanceType], requires: list[Requirement]) -> list[InstanceType]:
    """Types whose labels meet every requirement, with the offerings that meet those on
    zone and capacity type (a type left without offerings by them is dropped)."""
    on_type = Requirements(r for r in requires if r.key not in OFFERING_KEYS)
    on_offering = Requirements(r for r in requires if r.key in OFFERING_KEYS)
    out = []
    for it in instance_types:
        if not on_type.matches(it.labels):
            continue
        if on_offering:
            offerings = tuple(o for o in it.offerings if on_offering.matches(offering_labels(o)))
            if not offerings:
                continue
            it = InstanceType(it.name, it.labels, it.capacity, it.overhead, offerings)
        out.append(it)
    return out


# ------------------------------------------------------------------ output


def _order(it: InstanceType) -> tuple[str, int, int, str]:
    """By family, then size: m5.large, m5.xlarge, m5.2xlarge ... rather than alphabetically."""
    family = it.labels.get("karpenter.k8s.aws/instance-family", it.name)
    return family, it.capacity.get("cpu", 0), it.capacity.get("memory", 0), it.name


def to_json(it: InstanceType) -> dict[str, Any]:
    return {
        "name": it.name,
        "labels": dict(sorted(it.labels.items())),
        "capacity": {name: format_quantity(name, amount) for name, amount in sorted(it.capacity.items())},
        "allocatable": {name: format_quantity(name, amount) for name, amount in sorted(it.allocatable.items())},
        "offerings": [
            {"zone": o.zone, "capacityType": o.capacity_type, "price": o.price, "available": o.available}
            for o in it.offerings
        ],
    }


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
        types = sorted(select(types, requires), key=_order)
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
