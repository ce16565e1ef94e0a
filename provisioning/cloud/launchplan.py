"""The plan of one launch (reference Part II §5.1): which offerings to try, each with its
zone's subnet, an AMI for its instance type and a launch template; the CreateFleet and
RunInstances requests that carry it out; and what a CreateFleet answer says happened."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from provisioning.cloud.base import CloudError, Image, Instance, LaunchOption, LaunchRequest, Subnet
from provisioning.cloud.describe import TypeFacts
from provisioning.cloud.errors import SPOT_SLR_CODE, cloud_error, insufficient_capacity, is_capacity_error
from provisioning.cloud.tags import NODECLAIM_TAG

MAX_INSTANCE_TYPES = 60  # CreateFleet overrides: at most 60 types × their zones (§5.1 step 3)


@dataclass(frozen=True)
class Planned:
    """One offering to launch, with its subnet and launch template."""

    option: LaunchOption
    subnet: Subnet
    image: Image
    template: str


def launch_options(request: LaunchRequest) -> list[LaunchOption]:
    """The offerings of the request's capacity type to try, cheapest first: each instance
    type and zone once, at most 60 instance types."""
    options = sorted((o for o in request.options if o.capacity_type == request.capacity_type), key=lambda o: o.price)
    types: list[str] = []
    kept: list[LaunchOption] = []
    seen: set[tuple[str, str, str]] = set()
    for option in options:
        if (option.instance_type, option.zone, option.reservation_id) in seen:
            continue
        if option.instance_type not in types:
            if len(types) >= MAX_INSTANCE_TYPES:
                continue
            types.append(option.instance_type)
        seen.add((option.instance_type, option.zone, option.reservation_id))
        kept.append(option)
    return kept


def subnets_by_zone(subnets: Iterable[Subnet]) -> dict[str, Subnet]:
    """Each zone's subnet with the most free addresses (the lower id on a tie)."""
    best: dict[str, Subnet] = {}
    for subnet in subnets:
        current = best.get(subnet.zone)
        if current is None or (subnet.available_ips, current.id) > (current.available_ips, subnet.id):
            best[subnet.zone] = subnet
    return best


def image_for(facts: TypeFacts | None, images: tuple[Image, ...]) -> Image | None:
    """The AMI for an instance type: one of its architectures, the accelerator variant
    when the EC2NodeClass has it (nvidia, neuron), else the standard image."""
    if facts is None:
        return None
    for arch in facts.archs:
        by_variant = {i.variant: i for i in images if i.arch == arch}
        if not by_variant:
            continue
        if facts.accelerator and facts.accelerator in by_variant:
            return by_variant[facts.accelerator]
        return by_variant.get("standard") or next(iter(by_variant.values()))
    return None


def plan_launch(
    request: LaunchRequest,
    options: list[LaunchOption],
    facts: dict[str, TypeFacts | None],
    template_for: Callable[[Image, LaunchOption], str],
) -> list[Planned]:
    """``options`` (from :func:`launch_options`) with a subnet, an AMI and the launch template
    ``template_for`` gives per AMI (and per capacity reservation, for reserved offerings);
    those without a subnet in their zone or an AMI for their type are left out, and when that
    leaves none the error says why."""
    subnets = subnets_by_zone(request.nodeclass.subnets)
    templates: dict[tuple[str, str], str] = {}
    planned: list[Planned] = []
    no_subnet: set[str] = set()
    no_image: set[str] = set()
    for option in options:
        subnet = subnets.get(option.zone)
        if subnet is None:
            no_subnet.add(option.zone)
            continue
        image = image_for(facts.get(option.instance_type), request.nodeclass.images)
        if image is None:
            no_image.add(option.instance_type)
            continue
        key = (image.id, option.reservation_id)
        if key not in templates:
            templates[key] = template_for(image, option)
        planned.append(Planned(option, subnet, image, templates[key]))
    if not planned and options:
        why = []
        if no_subnet:
            why.append(f"no subnet in {', '.join(sorted(no_subnet))}")
        if no_image:
            why.append(f"no AMI for {', '.join(sorted(no_image)[:5])}")
        raise CloudError(
            f"EC2NodeClass {request.nodeclass.name} cannot launch any option of NodeClaim "
            f"{request.nodeclaim_name}: {'; '.join(why)}",
            reason="NoCompatibleOffering",
        )
    return planned


def client_token(base: str, *parts: Any) -> str:
    """``base``, or when ``parts`` are given a token derived from it (EC2 allows 64 characters)."""
    if not parts:
        return base[:64]
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:12]
    return f"{base[:51]}-{digest}"


# ------------------------------------------------------------------ RunInstances


def run_instances_request(
    request: LaunchRequest, planned: Planned, tag_specifications: list[dict[str, Any]]
) -> dict[str, Any]:
    """The RunInstances arguments (but ``ClientToken``) for one planned offering."""
    kwargs: dict[str, Any] = {
        "LaunchTemplate": {"LaunchTemplateName": planned.template, "Version": "$Latest"},
        "InstanceType": planned.option.instance_type,
        "SubnetId": planned.subnet.id,
        "MinCount": 1,
        "MaxCount": 1,
        "TagSpecifications": tag_specifications,
    }
    if request.capacity_type == "spot":
        kwargs["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    if planned.option.reservation_id:
        # Into that reservation only (upstream's capacity-reservations-only targeting); a
        # Capacity Block is its own market.
        kwargs["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": planned.option.reservation_id}
        }
        if planned.option.reservation_type == "capacity-block":
            kwargs["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return kwargs


# ------------------------------------------------------------------ CreateFleet


def fleet_request(
    request: LaunchRequest, planned: list[Planned], tag_specifications: list[dict[str, Any]], count: int = 1
) -> dict[str, Any]:
    """The instant CreateFleet arguments (but ``ClientToken``) for ``count`` instances: one
    launch template config per template, an override per offering with its price as priority."""
    configs: dict[str, dict[str, Any]] = {}
    for p in planned:
        config = configs.setdefault(
            p.template,
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": p.template, "Version": "$Latest"},
                "Overrides": [],
            },
        )
        config["Overrides"].append(
            {
                "InstanceType": p.option.instance_type,
                "SubnetId": p.subnet.id,
                "ImageId": p.image.id,
                "AvailabilityZone": p.option.zone,
                "Priority": float(p.option.price),
            }
        )
    # Reserved capacity is on-demand capacity the launch templates target (a Capacity Block
    # is its own market), as upstream asks for it.
    target = request.capacity_type
    if target == "reserved":
        blocks = {p.option.reservation_type == "capacity-block" for p in planned}
        target = "capacity-block" if blocks == {True} else "on-demand"
    kwargs: dict[str, Any] = {
        "Type": "instant",
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": target,
        },
        "LaunchTemplateConfigs": list(configs.values()),
        "TagSpecifications": tag_specifications,
    }
    # With NodeOverlays' prices, the overrides' priorities (the effective prices) decide, as
    # upstream's CreateFleet builder does when a NodeClaim carries price-overlay-applied.
    if request.capacity_type == "spot":
        strategy = "capacity-optimized-prioritized" if request.price_overlaid else "price-capacity-optimized"
        kwargs["SpotOptions"] = {"AllocationStrategy": strategy}
    else:
        kwargs["OnDemandOptions"] = {"AllocationStrategy": "prioritized" if request.price_overlaid else "lowest-price"}
    if request.nodeclass_spec.get("context"):
        kwargs["Context"] = str(request.nodeclass_spec["context"])
    return kwargs


def fleet_instances(response: dict[str, Any], request: LaunchRequest, tags: dict[str, str]) -> list[Instance]:
    """The instances a CreateFleet answer launched, as far as the answer tells (EC2 lists the
    ids launched from one override and lifecycle together)."""
    instances = []
    for item in response.get("Instances", []):
        overrides = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        for instance_id in item.get("InstanceIds") or []:
            instances.append(
                Instance(
                    id=instance_id,
                    instance_type=item.get("InstanceType") or overrides.get("InstanceType", ""),
                    zone=_override_zone(overrides, request),
                    capacity_type="spot" if item.get("Lifecycle") == "spot" else "on-demand",
                    state="pending",
                    image_id=overrides.get("ImageId", ""),
                    tags=tags,
                    subnet_id=overrides.get("SubnetId", ""),
                    security_group_ids=tuple(g.id for g in request.nodeclass.security_groups),
                )
            )
    return instances


def fleet_failure(
    response: dict[str, Any], request: LaunchRequest, planned: list[Planned], wanted: int = 1
) -> CloudError:
    """Why a CreateFleet answer launched fewer than ``wanted`` instances: insufficient
    capacity naming the offerings to mark unavailable when every error is capacity, else
    the first other error."""
    errors = response.get("Errors") or []
    if not errors:
        launched = len(fleet_instances(response, request, {}))
        what = f"{launched} of {wanted} instances" if launched else "no instance"
        return CloudError(
            f"CreateFleet launched {what} for NodeClaim {request.nodeclaim_name} and gave no reason",
            reason="LaunchFailed",
        )
    others = [e for e in errors if not is_capacity_error(e.get("ErrorCode", ""))]
    if others:
        code, message = others[0].get("ErrorCode", ""), others[0].get("ErrorMessage", "")
        return cloud_error(f"CreateFleet for NodeClaim {request.nodeclaim_name}", code, message)
    exhausted = [option for error in errors for option in _options_of_error(error, request, planned)]
    return insufficient_capacity(request, unique(exhausted), errors)


def pair_instances(nodeclaims: Iterable[str], instances: Iterable[Instance]) -> dict[str, Instance]:
    """Which instance of a batch is whose: the one tagged with a NodeClaim's name is that
    NodeClaim's; the untagged ones go to the others, both in sorted order, so every attempt
    at one batch pairs alike."""
    names = sorted(set(nodeclaims))
    pairs: dict[str, Instance] = {}
    untagged = []
    for instance in sorted(instances, key=lambda i: i.id):
        owner = instance.tags.get(NODECLAIM_TAG)
        if owner in names and owner not in pairs:
            pairs[owner] = instance
        elif not owner:
            untagged.append(instance)
    pairs.update(zip((n for n in names if n not in pairs), untagged, strict=False))
    return pairs


def errors_summary(response: dict[str, Any]) -> str:
    return "; ".join(f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}" for e in response.get("Errors", [])[:5])


def unique(options: Iterable[LaunchOption]) -> tuple[LaunchOption, ...]:
    return tuple(dict.fromkeys(options))


def _options_of_error(error: dict[str, Any], request: LaunchRequest, planned: list[Planned]) -> list[LaunchOption]:
    """The offerings a fleet error names; all that were tried when it names none."""
    if error.get("ErrorCode") == SPOT_SLR_CODE:
        return [p.option for p in planned if p.option.capacity_type == "spot"]
    overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
    instance_type = overrides.get("InstanceType", "")
    zone = _override_zone(overrides, request)
    if instance_type and zone:
        hit = next((p for p in planned if (p.option.instance_type, p.option.zone) == (instance_type, zone)), None)
        if hit is not None:
            return [hit.option]
        lifecycle = error.get("Lifecycle") or request.capacity_type
        return [LaunchOption(instance_type, zone, lifecycle, 0.0)]
    if instance_type:
        return [p.option for p in planned if p.option.instance_type == instance_type]
    if zone:
        return [p.option for p in planned if p.option.zone == zone]
    return [p.option for p in planned]


def _override_zone(overrides: dict[str, Any], request: LaunchRequest) -> str:
    """An override's zone, given or by its subnet."""
    if overrides.get("AvailabilityZone"):
        return overrides["AvailabilityZone"]
    subnet_id = overrides.get("SubnetId", "")
    return next((s.zone for s in request.nodeclass.subnets if s.id == subnet_id), "")
