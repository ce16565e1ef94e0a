"""Launch templates (reference Part II §5.3): one per EC2NodeClass, AMI and node settings,
named by a hash of its content, so it is reused while nothing changes and a change (AMI,
user data, groups, tags...) gives a new one. Block devices default per AMI family (§1.3)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from typing import Any

from provisioning.cloud.base import CloudError, Image, LaunchOption, LaunchRequest
from provisioning.cloud.config import AWSConfig
from provisioning.cloud.tags import base_tags, tag_list
from provisioning.cloud.userdata import node_bootstrap
from provisioning.scheduling.quantity import QuantityError, parse_quantity


def launch_template_data(
    request: LaunchRequest, image: Image, config: AWSConfig, reservation: LaunchOption | None = None
) -> dict[str, Any]:
    """The ``LaunchTemplateData`` for this request's node settings on ``image``; with a
    reserved offering, targeting its capacity reservation (a template per reservation, as
    upstream builds them: CreateFleet overrides cannot name one)."""
    spec = request.nodeclass_spec
    bootstrap = node_bootstrap(request, config)
    data: dict[str, Any] = {
        "ImageId": image.id,
        "MetadataOptions": metadata_options(spec, config.region),
        "Monitoring": {"Enabled": bool(spec.get("detailedMonitoring", False))},
        "TagSpecifications": [{"ResourceType": "network-interface", "Tags": tag_list(base_tags(request, config))}],
    }
    user_data = bootstrap.render()
    if user_data:
        data["UserData"] = base64.b64encode(user_data.encode()).decode()
    devices = block_device_mappings(bootstrap.family, spec)
    if devices:
        data["BlockDeviceMappings"] = devices
    if request.nodeclass.instance_profile:
        data["IamInstanceProfile"] = {"Name": request.nodeclass.instance_profile}
    groups = [g.id for g in request.nodeclass.security_groups]
    if spec.get("associatePublicIPAddress") is not None:
        data["NetworkInterfaces"] = [
            {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": bool(spec["associatePublicIPAddress"]),
                "Groups": groups,
            }
        ]
    else:
        data["SecurityGroupIds"] = groups
    if reservation is not None and reservation.reservation_id:
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": reservation.reservation_id}
        }
        if reservation.reservation_type == "capacity-block":
            data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return data


def template_name(data: dict[str, Any], tags: dict[str, str]) -> str:
    """The launch template's name: a hash of its data and tags."""
    digest = hashlib.sha256(json.dumps({"data": data, "tags": tags}, sort_keys=True).encode()).hexdigest()
    return f"karpweb/{digest[:24]}"


# ------------------------------------------------------------------ block devices (§1.3)

_DEFAULT_EBS = {"Encrypted": True, "VolumeType": "gp3"}


def default_block_devices(family: str) -> list[dict[str, Any]]:
    if family == "Custom":
        return []
    if family == "Bottlerocket":
        return [
            {"DeviceName": "/dev/xvda", "Ebs": {**_DEFAULT_EBS, "VolumeSize": 4}},
            {"DeviceName": "/dev/xvdb", "Ebs": {**_DEFAULT_EBS, "VolumeSize": 20}},
        ]
    if family.startswith("Windows"):
        return [{"DeviceName": "/dev/sda1", "Ebs": {**_DEFAULT_EBS, "VolumeSize": 50}}]
    return [{"DeviceName": "/dev/xvda", "Ebs": {**_DEFAULT_EBS, "VolumeSize": 20}}]


def block_device_mappings(family: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """``spec.blockDeviceMappings`` in launch-template form, or the family's defaults."""
    mappings = spec.get("blockDeviceMappings") or []
    if not mappings:
        return default_block_devices(family)
    result = []
    for mapping in mappings:
        ebs = mapping.get("ebs") or {}
        out: dict[str, Any] = {}
        for source, target in (
            ("deleteOnTermination", "DeleteOnTermination"),
            ("encrypted", "Encrypted"),
            ("iops", "Iops"),
            ("kmsKeyID", "KmsKeyId"),
            ("snapshotID", "SnapshotId"),
            ("throughput", "Throughput"),
            ("volumeType", "VolumeType"),
            ("volumeInitializationRate", "VolumeInitializationRate"),
        ):
            if ebs.get(source) is not None:
                out[target] = ebs[source]
        if ebs.get("volumeSize") is not None:
            try:
                size = parse_quantity(str(ebs["volumeSize"]))
            except QuantityError as exc:
                raise CloudError(f"blockDeviceMappings: {exc}", reason="InvalidParameterValue") from exc
            out["VolumeSize"] = max(1, math.ceil(size / 2**30))  # whole GiB, rounded up
        entry: dict[str, Any] = {"DeviceName": mapping.get("deviceName", "/dev/xvda")}
        if out:
            entry["Ebs"] = out
        result.append(entry)
    return result


def metadata_options(spec: dict[str, Any], region: str) -> dict[str, Any]:
    given = spec.get("metadataOptions") or {}
    options = {
        "HttpEndpoint": given.get("httpEndpoint", "enabled"),
        "HttpProtocolIpv6": given.get("httpProtocolIPv6", "disabled"),
        "HttpPutResponseHopLimit": int(given.get("httpPutResponseHopLimit", 1)),
        "HttpTokens": given.get("httpTokens", "required"),
        "InstanceMetadataTags": "disabled",
    }
    if region.startswith(("us-iso-", "us-isob-", "us-isof-")):
        del options["HttpProtocolIpv6"]
    return options
