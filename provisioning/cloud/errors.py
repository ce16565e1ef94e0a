"""EC2, IAM and SSM error codes and what they mean for a NodeClaim (reference Part II §4.6, §5.4).

``aws.py`` reads the code out of botocore's ``ClientError`` (and CreateFleet's ``Errors``) and
asks here which reason and sentence for people it maps to, whether it is insufficient
capacity (the offering is marked unavailable and others are tried) and whether it is
throttling (retried with backoff).
"""

from __future__ import annotations

from typing import Any

from provisioning.cloud.base import CloudError, InsufficientCapacity, LaunchOption, LaunchRequest, Throttled

# §4.6: fleet error codes that mean "this offering has no capacity now" (marked for 3 minutes).
ICE_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "MaxFleetCountExceeded",
        "ReservationCapacityExceeded",
    }
)
SPOT_SLR_CODE = "AuthFailure.ServiceLinkedRoleCreationNotPermitted"
THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
    }
)
NOT_FOUND_CODES = frozenset(
    {
        "InvalidInstanceID.NotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
        "NoSuchEntity",
        "ParameterNotFound",
    }
)
TEMPLATE_NOT_FOUND_CODES = frozenset(
    {
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.VersionNotFound",
    }
)

# Error code → (reason on the NodeClaim, what a person should know). Order matters only for
# the prefix matches below; exact codes are looked up first.
_REASONS: dict[str, tuple[str, str]] = {
    SPOT_SLR_CODE: (
        "SpotSLRCreationFailed",
        "the credentials may not create the EC2 Spot service-linked role; create it once (aws iam "
        "create-service-linked-role --aws-service-name spot.amazonaws.com) or allow iam:CreateServiceLinkedRole",
    ),
    "UnauthorizedOperation": ("Unauthorized", "the controller's IAM policy does not allow this EC2 call"),
    "AccessDenied": ("Unauthorized", "the controller's IAM policy does not allow this call"),
    "AccessDeniedException": ("Unauthorized", "the controller's IAM policy does not allow this call"),
    "AuthFailure": ("Unauthorized", "AWS did not accept the credentials"),
    "InvalidParameterValue": ("InvalidParameterValue", "EC2 refused a value of the launch request"),
    "InvalidParameter": ("InvalidParameterValue", "EC2 refused a parameter of the launch request"),
    "InvalidParameterCombination": ("InvalidParameterValue", "EC2 refused a combination of launch parameters"),
    "MissingParameter": ("InvalidParameterValue", "the launch request lacks a parameter EC2 needs"),
    "InvalidAMIID.NotFound": ("AMINotFound", "the AMI of the EC2NodeClass does not exist (any more) in this region"),
    "InvalidAMIID.Unavailable": ("AMINotFound", "the AMI of the EC2NodeClass is not available"),
    "InvalidAMIID.Malformed": ("InvalidAMIID", "the AMI id of the EC2NodeClass is malformed"),
    "InvalidSubnetID.NotFound": ("SubnetNotFound", "a subnet of the EC2NodeClass status does not exist any more"),
    "InvalidGroup.NotFound": ("SecurityGroupNotFound", "a security group of the EC2NodeClass does not exist any more"),
    "InvalidSecurityGroupID.NotFound": (
        "SecurityGroupNotFound",
        "a security group of the EC2NodeClass does not exist any more",
    ),
    "InvalidLaunchTemplateName.NotFoundException": ("LaunchTemplateNotFound", "the launch template was deleted"),
    "InvalidLaunchTemplateId.NotFound": ("LaunchTemplateNotFound", "the launch template was deleted"),
    "InvalidLaunchTemplateId.VersionNotFound": ("LaunchTemplateNotFound", "the launch template version is gone"),
    "InvalidUserData.Malformed": ("InvalidUserData", "EC2 refused the user data of the EC2NodeClass"),
    "InstanceLimitExceeded": ("InstanceLimitExceeded", "the account's instance quota for this type is reached"),
    "MaxTemplateLimitExceeded": ("LaunchTemplateQuotaExceeded", "the region's launch-template quota is reached"),
    "LaunchTemplateLimitExceeded": ("LaunchTemplateQuotaExceeded", "the region's launch-template quota is reached"),
    "PendingVerification": (
        "AccountPendingVerification",
        "AWS is still verifying this account's request to launch in this region",
    ),
    "IdempotentParameterMismatch": (
        "IdempotentParameterMismatch",
        "the NodeClaim's client token was already used for a different launch",
    ),
    "InternalError": ("InternalError", "EC2 had an internal error; the launch will be retried"),
    "InternalFailure": ("InternalError", "EC2 had an internal error; the launch will be retried"),
    "ServiceUnavailable": ("InternalError", "EC2 is unavailable; the launch will be retried"),
    "Unavailable": ("InternalError", "EC2 is unavailable; the launch will be retried"),
    # Capacity and quotas (ICE-class: the offering is marked unavailable and others are tried).
    "InsufficientInstanceCapacity": ("InsufficientCapacity", "EC2 has no capacity for this offering right now"),
    "UnfulfillableCapacity": ("InsufficientCapacity", "EC2 could not fulfil the capacity requested"),
    "Unsupported": ("InsufficientCapacity", "the instance type is not supported in this zone"),
    "ReservationCapacityExceeded": ("InsufficientCapacity", "the capacity reservation is full"),
    "MaxFleetCountExceeded": ("FleetQuotaExceeded", "the account's EC2 Fleet quota is reached"),
    "MaxSpotInstanceCountExceeded": ("SpotQuotaExceeded", "the account's Spot instance quota is reached"),
    "VcpuLimitExceeded": ("VCPULimitExceeded", "the account's vCPU quota for this instance family is reached"),
    "InsufficientFreeAddressesInSubnet": (
        "InsufficientFreeAddressesInSubnet",
        "the subnet has no free IP addresses left",
    ),
}


def error_reason(code: str, message: str = "") -> tuple[str, str]:
    """An EC2 error code (and message) as a NodeClaim reason and a sentence for people."""
    if code == "InvalidParameterValue" and "iamInstanceProfile" in message:
        return "InstanceProfileNameInvalid", "the instance profile of the EC2NodeClass status does not exist"
    if code in ("InvalidParameter", "InvalidParameterValue") and (
        "different networks" in message or "different VPC" in message or "belong to different" in message
    ):
        return "SecurityGroupSubnetVPCMismatch", "the security groups and the subnet are in different VPCs"
    if code == "InvalidUserData.Malformed" and "User data is limited to" in message:
        return "UserDataSizeLimitExceeded", "the user data is larger than EC2 allows (16 KB)"
    if code in _REASONS:
        return _REASONS[code]
    if code in THROTTLE_CODES:
        return "RequestLimitExceeded", "AWS throttled the request; it is retried with backoff"
    if code.startswith("AuthFailure"):
        return _REASONS["AuthFailure"]
    if code.startswith("InvalidAMIID"):
        return "AMINotFound", "the AMI of the EC2NodeClass cannot be used"
    return "LaunchFailed", "the instance launch failed"


def cloud_error(action: str, code: str, message: str = "") -> CloudError:
    """An error code and message from ``action`` as the CloudError a caller can act on:
    :class:`Throttled` for throttling, else a CloudError with the code's reason."""
    reason, hint = error_reason(code, message)
    text = f"{action}: {hint} ({code}: {message})" if message else f"{action}: {hint} ({code})"
    if code in THROTTLE_CODES:
        return Throttled(text)
    return CloudError(text, reason=reason)


def is_capacity_error(code: str) -> bool:
    """The offering (or, for the Spot service-linked role, all spot offerings) cannot launch
    now; they are marked unavailable and the others are tried."""
    return code in ICE_CODES or code == SPOT_SLR_CODE


def insufficient_capacity(
    request: LaunchRequest, exhausted: tuple[LaunchOption, ...], errors: list[dict[str, Any]]
) -> InsufficientCapacity:
    """The error of a launch whose every offering lacked capacity, naming what was tried;
    ``errors`` are CreateFleet ``Errors`` items (``ErrorCode``, ``ErrorMessage``)."""
    codes = sorted({e.get("ErrorCode", "") for e in errors} - {""})
    where = ", ".join(f"{o.instance_type} in {o.zone}" for o in exhausted[:5])
    more = f" and {len(exhausted) - 5} more" if len(exhausted) > 5 else ""
    error = InsufficientCapacity(
        f"no {request.capacity_type} capacity for NodeClaim {request.nodeclaim_name}: "
        f"{where or 'every offering'}{more} ({', '.join(codes) or 'no capacity'})",
        unavailable=exhausted,
    )
    reasons = {error_reason(code)[0] for code in codes}
    if len(reasons) == 1:
        error.reason = reasons.pop()  # e.g. VCPULimitExceeded says more than InsufficientCapacity
    if SPOT_SLR_CODE in codes:
        error.reason = "SpotSLRCreationFailed"
    return error
