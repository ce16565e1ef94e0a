"""What EC2's ``Describe*`` calls answer, as the plain data of ``base.py``: instances, AMIs
and the facts of an instance type that choose its AMI."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provisioning.cloud.base import Image, Instance
from provisioning.cloud.tags import tag_dict


def arch(ec2_arch: str) -> str:
    """EC2's architecture name as Kubernetes spells it; "" for those we do not launch."""
    return {"x86_64": "amd64", "arm64": "arm64"}.get(ec2_arch, "")


@dataclass(frozen=True)
class TypeFacts:
    """What of an instance type decides its AMI."""

    archs: tuple[str, ...]  # "amd64" / "arm64"
    accelerator: str  # "" | "nvidia" | "neuron"


def type_facts(info: dict[str, Any]) -> TypeFacts:
    """A ``DescribeInstanceTypes`` entry's architectures and accelerator."""
    archs = tuple(
        a for a in (arch(x) for x in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures", [])) if a
    )
    accelerator = ""
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if any(str(g.get("Manufacturer", "")).upper() == "NVIDIA" for g in gpus):
        accelerator = "nvidia"
    elif (info.get("NeuronInfo") or {}).get("NeuronDevices") or (info.get("InferenceAcceleratorInfo") or {}).get(
        "Accelerators"
    ):
        accelerator = "neuron"
    return TypeFacts(archs=archs, accelerator=accelerator)


def image_from(raw: dict[str, Any], variant: str = "standard", ec2_arch: str = "") -> Image:
    """A ``DescribeImages`` entry; ``variant`` and ``ec2_arch`` when an alias told them."""
    deprecated = False
    if raw.get("DeprecationTime"):
        try:
            when = datetime.fromisoformat(str(raw["DeprecationTime"]).replace("Z", "+00:00"))
            deprecated = when <= datetime.now(UTC)
        except ValueError:
            deprecated = False
    return Image(
        id=raw["ImageId"],
        name=raw.get("Name", ""),
        arch=arch(ec2_arch or raw.get("Architecture", "")),
        variant=variant,
        creation_date=str(raw.get("CreationDate", "")),
        deprecated=deprecated,
    )


def instance_from(raw: dict[str, Any]) -> Instance:
    """A ``DescribeInstances`` (or ``RunInstances``) instance."""
    spot = raw.get("InstanceLifecycle") == "spot" or bool(raw.get("SpotInstanceRequestId"))
    reservation = raw.get("CapacityReservationId") or ""
    launch_time = raw.get("LaunchTime")
    if isinstance(launch_time, datetime):
        launch_time = launch_time.astimezone(UTC)
    return Instance(
        id=raw["InstanceId"],
        instance_type=raw.get("InstanceType", ""),
        zone=(raw.get("Placement") or {}).get("AvailabilityZone", ""),
        capacity_type="spot" if spot else "reserved" if reservation else "on-demand",
        state=(raw.get("State") or {}).get("Name", ""),
        launch_time=launch_time if isinstance(launch_time, datetime) else None,
        image_id=raw.get("ImageId", ""),
        tags=tag_dict(raw.get("Tags")),
        subnet_id=raw.get("SubnetId", "") or "",
        security_group_ids=tuple(g["GroupId"] for g in raw.get("SecurityGroups") or [] if g.get("GroupId")),
        capacity_reservation_id=reservation,
    )
