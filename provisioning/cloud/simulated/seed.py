"""What the simulated account holds, seeded into moto's in-memory backends of this process
(no API calls, so nothing is refused by the reserved-name checks of the public API):

* EC2: a VPC with one private subnet per availability zone of the region and a cluster
  security group, all tagged ``karpenter.sh/discovery: <cluster>``; Amazon-owned EKS AMIs
  (AL2023 standard/nvidia/neuron, Bottlerocket standard/nvidia, AL2 x86_64/arm64/gpu,
  Windows Server 2019/2022/2025) with the names Amazon gives them.
* SSM: the public parameters the AMI aliases resolve through (``/aws/service/eks/...``,
  ``/aws/service/bottlerocket/...``, ``/aws/service/ami-windows-latest/...``), both the
  ``recommended``/``latest`` and the pinned-version paths.
* IAM: the role ``KarpenterNodeRole-<cluster>`` and an instance profile of the same name.
* SQS and EventBridge (:func:`seed_interruption_queue`): the interruption queue of the
  getting-started CloudFormation (named like the cluster, 300 s retention, SSE, a policy that
  lets EventBridge send and refuses plain HTTP) and the five rules on the default event bus
  that route EC2 and Health events into it (``<queue>-ScheduledChangeRule``, ...).

moto is imported only inside the functions that seed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from provisioning.cloud.messages import RULES
from provisioning.cloud.selectors import AL2_IMAGES, AL2023_IMAGES, BOTTLEROCKET_IMAGES, WINDOWS_YEARS

DEFAULT_REGION = "us-east-1"
DEFAULT_CLUSTER = "my-cluster"
DEFAULT_KUBERNETES_VERSION = "1.33"
DISCOVERY_TAG = "karpenter.sh/discovery"

# The EventBridge rules of the interruption queue (logical id, source, detail-type), as in
# Karpenter's getting-started CloudFormation and as the consumer parses them; each is named
# ``<queue>-<logical id>``.
INTERRUPTION_RULES = tuple((name, source, detail_type) for name, (source, detail_type) in RULES.items())
INTERRUPTION_QUEUE_TARGET_ID = "KarpenterInterruptionQueueTarget"
INTERRUPTION_QUEUE_RETENTION_SECONDS = 300
RULE_NAME_MAX = 64
QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")

# The release the seeded AMIs belong to (names and creation dates follow from it).
AMI_RELEASE = "20261101"
BOTTLEROCKET_VERSION = "1.50.0"
WINDOWS_RELEASE = "2026.11.12"
EKS_AMI_OWNER = "602401143452"
BOTTLEROCKET_AMI_OWNER = "092701018921"
WINDOWS_AMI_OWNER = "801119661308"


@dataclass(frozen=True)
class SeedImage:
    """An Amazon-published EKS AMI and the SSM parameters that point at it."""

    name: str
    family: str  # "AL2023" | "AL2" | "Bottlerocket" | "Windows2019" | ...
    arch: str  # EC2 spelling: "x86_64" | "arm64"
    variant: str  # "standard" | "nvidia" | "neuron"
    owner_id: str
    ssm_parameters: tuple[str, ...]
    platform: str = ""  # "windows" for Windows AMIs

    @property
    def image_id(self) -> str:
        # Stable across restarts, so launch templates named by content hash stay reusable.
        return "ami-" + hashlib.sha256(self.name.encode()).hexdigest()[:17]

    @property
    def description(self) -> str:
        return f"EKS-optimized {self.family} {self.variant} node AMI for Kubernetes ({self.arch})"


def seed_images(kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> list[SeedImage]:
    """The AMIs of one EKS release for ``kubernetes_version``, with their SSM paths
    (reference Part II §1.2; the images published are those the aliases resolve through)."""
    k8s = kubernetes_version
    release = f"v{AMI_RELEASE}"
    eks = f"/aws/service/eks/optimized-ami/{k8s}"
    images: list[SeedImage] = []
    for arch, variant in AL2023_IMAGES:
        name = f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{release}"
        images.append(_eks_image(name, "AL2023", arch, variant, f"{eks}/amazon-linux-2023/{arch}/{variant}"))
    for suffix, arch, variant in AL2_IMAGES:
        name = f"amazon-eks{suffix}-node-{k8s}-{release}"
        images.append(_eks_image(name, "AL2", arch, variant, f"{eks}/amazon-linux-2{suffix}"))
    for nvidia, arch, variant in BOTTLEROCKET_IMAGES:
        build = hashlib.sha256(f"bottlerocket{nvidia}{arch}{k8s}".encode()).hexdigest()[:8]
        name = f"bottlerocket-aws-k8s-{k8s}{nvidia}-{arch}-v{BOTTLEROCKET_VERSION}-{build}"
        base = f"/aws/service/bottlerocket/aws-k8s-{k8s}{nvidia}/{arch}"
        images.append(
            SeedImage(
                name,
                "Bottlerocket",
                arch,
                variant,
                BOTTLEROCKET_AMI_OWNER,
                (f"{base}/latest/image_id", f"{base}/{BOTTLEROCKET_VERSION}/image_id"),
            )
        )
    for year in WINDOWS_YEARS:
        stem = f"Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}"
        images.append(
            SeedImage(
                f"{stem}-{WINDOWS_RELEASE}",
                f"Windows{year}",
                "x86_64",
                "standard",
                WINDOWS_AMI_OWNER,
                (f"/aws/service/ami-windows-latest/{stem}/image_id",),
                platform="windows",
            )
        )
    return images


def _eks_image(name: str, family: str, arch: str, variant: str, parameters: str) -> SeedImage:
    """An AL2023 or AL2 AMI: the ``recommended`` parameter and the one of its own name."""
    paths = (f"{parameters}/recommended/image_id", f"{parameters}/{name}/image_id")
    return SeedImage(name, family, arch, variant, EKS_AMI_OWNER, paths)


@dataclass(frozen=True)
class SeededAccount:
    region: str
    cluster: str
    vpc_id: str
    subnets: dict[str, str]  # zone → subnet id
    security_group_id: str
    images: tuple[SeedImage, ...]
    instance_profile: str


def account_id() -> str:
    from moto.core import DEFAULT_ACCOUNT_ID

    return DEFAULT_ACCOUNT_ID


def seed_account(
    region: str = DEFAULT_REGION,
    cluster: str = DEFAULT_CLUSTER,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
) -> SeededAccount:
    """Fill moto's in-memory backends (this process) like an EKS account set up for Karpenter."""
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami
    from moto.ssm.models import Parameter, ssm_backends

    account = account_id()
    ec2 = ec2_backends[account][region]
    discovery = {DISCOVERY_TAG: cluster}

    vpc = ec2.create_vpc("10.0.0.0/16")
    ec2.create_tags([vpc.id], {"Name": f"{cluster}-vpc", **discovery})
    zones = sorted(ec2.describe_availability_zones(), key=lambda z: z.name)
    prefix = max(19, 16 + math.ceil(math.log2(max(len(zones), 1))))
    blocks = ipaddress.ip_network("10.0.0.0/16").subnets(new_prefix=prefix)
    subnets: dict[str, str] = {}
    for zone, block in zip(zones, blocks, strict=False):
        subnet = ec2.create_subnet(vpc.id, str(block), availability_zone=zone.name)
        ec2.create_tags(
            [subnet.id],
            {
                "Name": f"{cluster}-private-{zone.name}",
                "kubernetes.io/role/internal-elb": "1",
                f"kubernetes.io/cluster/{cluster}": "shared",
                **discovery,
            },
        )
        subnets[zone.name] = subnet.id

    group = ec2.create_security_group(
        f"eks-cluster-sg-{cluster}",
        f"EKS created security group applied to ENI that is attached to EKS Control Plane master nodes, "
        f"as well as any managed workloads of cluster {cluster}.",
        vpc_id=vpc.id,
        tags={"Name": f"eks-cluster-sg-{cluster}", f"kubernetes.io/cluster/{cluster}": "owned", **discovery},
    )

    images = seed_images(kubernetes_version)
    created = datetime.strptime(AMI_RELEASE, "%Y%m%d").replace(tzinfo=UTC)
    ssm = ssm_backends[account][region]
    for image in images:
        ec2.amis[image.image_id] = Ami(
            ec2,
            ami_id=image.image_id,
            name=image.name,
            description=image.description,
            owner_id=image.owner_id,
            owner_alias="amazon",
            public=True,
            virtualization_type="hvm",
            architecture=image.arch,
            creation_date=created,
            platform=image.platform or None,
            hypervisor="xen",
            root_device_type="ebs",
            root_device_name="/dev/sda1" if image.platform == "windows" else "/dev/xvda",
            region_name=next(iter(subnets), f"{region}a"),
            boot_mode="uefi-preferred",
            tags=discovery,
        )
        for name in image.ssm_parameters:
            ssm._parameters[name].append(
                Parameter(
                    account_id=account,
                    name=name,
                    value=image.image_id,
                    parameter_type="String",
                    description=None,
                    allowed_pattern=None,
                    keyid=None,
                    last_modified_date=created,
                    version=1,
                    data_type="aws:ec2:image",
                )
            )

    return SeededAccount(
        region=region,
        cluster=cluster,
        vpc_id=vpc.id,
        subnets=subnets,
        security_group_id=group.id,
        images=tuple(images),
        instance_profile=_seed_iam(account, region, cluster),
    )


def _seed_iam(account: str, region: str, cluster: str) -> str:
    """The node role of the seed's EC2NodeClass and an instance profile of the same name."""
    try:
        from moto.iam.models import iam_backends
        from moto.utilities.utils import get_partition

        iam = iam_backends[account][get_partition(region)]
        role = f"KarpenterNodeRole-{cluster}"
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
        iam.create_role(
            role_name=role,
            assume_role_policy_document=json.dumps(trust),
            path="/",
            permissions_boundary=None,
            description=f"Karpenter node role of cluster {cluster}",
            tags=[{"Key": DISCOVERY_TAG, "Value": cluster}],
            max_session_duration=None,
        )
        iam.create_instance_profile(role, "/", role_names=[role])
        return role
    except Exception as exc:  # the simulation still serves EC2 and SSM without IAM
        print(f"simulated AWS: no IAM instance profile ({exc})", file=sys.stderr)
        return ""


@dataclass(frozen=True)
class SeededQueue:
    name: str
    arn: str
    rules: tuple[str, ...]  # rule names, in the order of INTERRUPTION_RULES


def interruption_rule_name(queue: str, logical_id: str) -> str:
    """``<queue>-<logical id>``, the queue name shortened to keep within EventBridge's 64 characters."""
    return f"{queue[: RULE_NAME_MAX - len(logical_id) - 1]}-{logical_id}"


def interruption_queue_policy(queue_arn: str) -> dict:
    """The queue policy of the getting-started CloudFormation: EventBridge (and SQS) may send,
    nobody may use the queue without TLS."""
    return {
        "Version": "2012-10-17",
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
            },
            {
                "Sid": "DenyHTTP",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "sqs:*",
                "Resource": queue_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


def seed_interruption_queue(region: str = DEFAULT_REGION, queue: str = DEFAULT_CLUSTER) -> SeededQueue:
    """Create the interruption queue ``queue`` and the five EventBridge rules that target it,
    in moto's in-memory SQS and EventBridge backends of this process."""
    if not QUEUE_NAME.match(queue):
        raise ValueError(f"{queue!r}: a queue name is 1 to 80 letters, digits, hyphens or underscores")
    from moto.events.models import events_backends
    from moto.sqs.models import sqs_backends

    account = account_id()
    sqs = sqs_backends[account][region]
    retention = str(INTERRUPTION_QUEUE_RETENTION_SECONDS)
    arn = sqs.create_queue(queue, MessageRetentionPeriod=retention, SqsManagedSseEnabled=True).queue_arn
    sqs.set_queue_attributes(queue, {"Policy": json.dumps(interruption_queue_policy(arn))})
    events = events_backends[account][region]
    rules = []
    for logical_id, source, detail_type in INTERRUPTION_RULES:
        name = interruption_rule_name(queue, logical_id)
        pattern = {"source": [source], "detail-type": [detail_type]}
        events.put_rule(name=name, event_bus_arn="default", event_pattern=json.dumps(pattern), state="ENABLED")
        events.put_targets(name, "default", [{"Id": INTERRUPTION_QUEUE_TARGET_ID, "Arn": arn}])
        rules.append(name)
    return SeededQueue(queue, arn, tuple(rules))
