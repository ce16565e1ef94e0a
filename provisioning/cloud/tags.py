"""The tags and names karpweb gives what it creates in EC2 and IAM (reference Part II §5.6),
and the tag lists of the EC2 API."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from provisioning.cloud.base import LaunchRequest
from provisioning.cloud.config import AWSConfig
from provisioning.crd.labels import NODEPOOL, REGION

NODEPOOL_TAG = NODEPOOL
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
CLUSTER_NAME_TAG = "eks:eks-cluster-name"
# The token of the batch whose fleet launched an instance: a retried batch finds them by it.
LAUNCH_BATCH_TAG = "karpweb/launch-batch"


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    """Tags as the EC2 API takes them (``[{"Key": ..., "Value": ...}]``), sorted by key."""
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def tag_specifications(tags: dict[str, str], resources: tuple[str, ...]) -> list[dict[str, Any]]:
    """``TagSpecifications``: the same tags on each resource type."""
    listed = tag_list(tags)
    return [{"ResourceType": r, "Tags": listed} for r in resources]


def tag_dict(tags: Iterable[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in tags or ()}


def base_tags(request: LaunchRequest, config: AWSConfig) -> dict[str, str]:
    """``spec.tags`` ∪ the cluster's tags; the static tags win (§5.6)."""
    spec_tags = {str(k): str(v) for k, v in (request.nodeclass_spec.get("tags") or {}).items()}
    return {
        **spec_tags,
        config.cluster_tag: "owned",
        CLUSTER_NAME_TAG: config.cluster_name,
        NODEPOOL_TAG: request.nodepool,
        NODECLASS_TAG: request.nodeclass.name,
    }


def launch_tags(request: LaunchRequest, config: AWSConfig) -> dict[str, str]:
    """Tags of the instance, its volumes and the fleet: the base tags and the NodeClaim's."""
    return {**base_tags(request, config), **nodeclaim_tags(request, request.nodeclaim_name)}


def nodeclaim_tags(request: LaunchRequest, nodeclaim: str) -> dict[str, str]:
    """The tags that tie an instance to its NodeClaim: ``karpenter.sh/nodeclaim`` and ``Name``
    (unless the EC2NodeClass names its instances itself, as upstream allows)."""
    tags = {NODECLAIM_TAG: nodeclaim}
    if "Name" not in (request.nodeclass_spec.get("tags") or {}):
        tags["Name"] = nodeclaim
    return tags


def batch_tags(request: LaunchRequest, config: AWSConfig) -> dict[str, str]:
    """Tags of a batch's instances, volumes and fleet at launch: the base tags and the batch's
    token; each instance gets its NodeClaim's tags once the fleet has answered."""
    return {**base_tags(request, config), LAUNCH_BATCH_TAG: request.nodeclaim_uid}


def instance_profile_name(config: AWSConfig, nodeclass: str) -> str:
    """The instance profile karpweb owns for an EC2NodeClass with ``role`` (stable per
    region, cluster and EC2NodeClass name)."""
    digest = hashlib.sha256(f"{config.region}/{config.cluster_name}/{nodeclass}".encode()).hexdigest()[:20]
    return f"{config.cluster_name}_{digest}"[:128]


def instance_profile_path(config: AWSConfig, nodeclass: str) -> str:
    return f"/karpenter/{config.region}/{config.cluster_name}/{nodeclass}/"


def instance_profile_tags(config: AWSConfig, nodeclass: str, spec_tags: dict[str, str]) -> dict[str, str]:
    return {
        **spec_tags,
        config.cluster_tag: "owned",
        CLUSTER_NAME_TAG: config.cluster_name,
        NODECLASS_TAG: nodeclass,
        REGION: config.region,
    }
