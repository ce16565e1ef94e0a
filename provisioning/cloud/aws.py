"""The CloudProvider on EC2 through boto3 (the only module that imports boto3 or botocore).

The same code serves real AWS and the simulated AWS of the embedded default: endpoint and
credentials come from boto3's standard environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID`` ...), never from here.

* Catalog inputs: ``DescribeInstanceTypes``, ``DescribeInstanceTypeOfferings``, zone ids
  (reference Part II §3.1); prices in :class:`AWSPrices` (§4.1, §4.3).
* EC2NodeClass resolution: subnets, security groups, AMIs (aliases through the public SSM
  parameters of §1.2), the instance profile (created for ``role``).
* Launch (§5): one launch template per EC2NodeClass, AMI and node settings, named by a hash
  of its content; then CreateFleet (instant) or RunInstances, ``ClientToken`` = the
  NodeClaim uid, EC2 errors mapped to reasons for people (§4.6, §5.4).
"""

from __future__ import annotations

import base64
import email
import hashlib
import json
import logging
import math
import re
import shlex
import threading
import time
import tomllib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import yaml
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.base import (
    CloudError,
    Image,
    Instance,
    InsufficientCapacity,
    LaunchOption,
    LaunchRequest,
    NodeClassNotReady,
    PricingUnavailable,
    ResolvedNodeClass,
    SecurityGroup,
    Subnet,
    Throttled,
)
from provisioning.crd.ec2nodeclass import effective_ami_family
from provisioning.scheduling.quantity import QuantityError, parse_quantity

log = logging.getLogger(__name__)

BOTO_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3})
LAUNCH_APIS = ("fleet", "run-instances")

NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
CLUSTER_NAME_TAG = "eks:eks-cluster-name"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
DO_NOT_SYNC_TAINTS_LABEL = "karpenter.sh/do-not-sync-taints"
UNREGISTERED_TAINT = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}

MAX_INSTANCE_TYPES = 60  # CreateFleet overrides: at most 60 types × their zones (§5.1 step 3)
MAX_RUN_INSTANCES_ATTEMPTS = 20  # offerings tried by one RunInstances launch before giving up
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
TEMPLATE_CACHE_SECONDS = 60.0
PROFILE_CACHE_SECONDS = 300.0

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


def error_code(err: BaseException) -> str:
    if isinstance(err, ClientError):
        return str(err.response.get("Error", {}).get("Code") or "")
    return ""


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


def to_cloud_error(err: Exception, action: str) -> CloudError:
    """A botocore exception as the CloudError a caller can act on."""
    if isinstance(err, ClientError):
        code = error_code(err)
        message = str(err.response.get("Error", {}).get("Message") or "")
        reason, hint = error_reason(code, message)
        text = f"{action}: {hint} ({code}: {message})" if message else f"{action}: {hint} ({code})"
        if code in THROTTLE_CODES:
            return Throttled(text)
        return CloudError(text, reason=reason)
    if isinstance(err, BotoCoreError):
        return CloudError(f"{action}: AWS could not be reached ({err})", reason="CloudUnreachable")
    return CloudError(f"{action}: {err}")


# ------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class AWSConfig:
    """What the provider needs to know about the cluster (from settings, passed in)."""

    region: str = "us-east-1"
    cluster_name: str = "my-cluster"
    kubernetes_version: str = "1.33"
    cluster_endpoint: str = ""
    cluster_ca_bundle: str = ""  # base64 PEM, as EKS DescribeCluster gives it
    launch_api: str = "fleet"  # "fleet" | "run-instances"
    cluster_cidr: str = ""  # service CIDR for nodeadm; omitted when empty

    def __post_init__(self) -> None:
        if self.launch_api not in LAUNCH_APIS:
            raise ValueError(f"launch API {self.launch_api!r}: expected one of {', '.join(LAUNCH_APIS)}")

    @classmethod
    def from_settings(cls, settings: Any) -> AWSConfig:
        """From a settings object (``django.conf.settings``), defaults where a name is missing."""
        default = cls()
        return cls(
            region=getattr(settings, "AWS_REGION", default.region),
            cluster_name=getattr(settings, "KARPWEB_CLUSTER_NAME", default.cluster_name),
            kubernetes_version=str(getattr(settings, "KARPWEB_KUBERNETES_VERSION", default.kubernetes_version)),
            cluster_endpoint=getattr(settings, "KARPWEB_CLUSTER_ENDPOINT", default.cluster_endpoint),
            cluster_ca_bundle=getattr(settings, "KARPWEB_CLUSTER_CA_BUNDLE", default.cluster_ca_bundle),
            launch_api=getattr(settings, "KARPWEB_LAUNCH_API", default.launch_api),
            cluster_cidr=getattr(settings, "KARPWEB_CLUSTER_CIDR", default.cluster_cidr),
        )

    @property
    def cluster_tag(self) -> str:
        return f"kubernetes.io/cluster/{self.cluster_name}"


def _session(config: AWSConfig, session_kwargs: dict[str, Any] | None) -> boto3.session.Session:
    return boto3.session.Session(**{"region_name": config.region, **(session_kwargs or {})})


def pricing_region(region: str) -> str:
    """Where the Price List API answers for ``region`` (§4.1)."""
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith("cn-"):
        return "cn-northwest-1"
    if region.startswith("eu-"):
        return "eu-central-1"
    return "us-east-1"


def _tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


def _tag_dict(tags: Iterable[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in tags or ()}


def _selector_filters(term: dict[str, Any], id_filter: str, name_filter: str = "") -> list[dict[str, Any]]:
    """A selector term as EC2 filters; ``'*'`` as a tag value means "has the key"."""
    filters: list[dict[str, Any]] = []
    if term.get("id"):
        filters.append({"Name": id_filter, "Values": [term["id"]]})
    if name_filter and term.get("name"):
        filters.append({"Name": name_filter, "Values": [term["name"]]})
    for key, value in sorted((term.get("tags") or {}).items()):
        if value == "*":
            filters.append({"Name": "tag-key", "Values": [key]})
        else:
            filters.append({"Name": f"tag:{key}", "Values": [value]})
    return filters


def _describe_term(term: dict[str, Any]) -> str:
    parts = [f"{k} {term[k]}" for k in ("alias", "id", "name", "owner", "ssmParameter") if term.get(k)]
    parts += [f"tag {k}={v}" for k, v in sorted((term.get("tags") or {}).items())]
    return ", ".join(parts) or "an empty term"


def _arch(ec2_arch: str) -> str:
    return {"x86_64": "amd64", "arm64": "arm64"}.get(ec2_arch, "")


def _client_token(base: str, *parts: Any) -> str:
    """``base``, or when ``parts`` are given a token derived from it (EC2 allows 64 characters)."""
    if not parts:
        return base[:64]
    digest = hashlib.sha256(repr(parts).encode()).hexdigest()[:12]
    return f"{base[:51]}-{digest}"


# ------------------------------------------------------------------ AMI aliases (§1.2)


def alias_parameters(alias: str, kubernetes_version: str) -> tuple[list[tuple[str, str, str]], str]:
    """The SSM parameters an alias resolves through, as ``(path, arch, variant)``, and a
    problem when the alias cannot be used with this Kubernetes version."""
    family, _, version = alias.partition("@")
    version = version or "latest"
    k8s = kubernetes_version
    latest = version == "latest"
    paths: list[tuple[str, str, str]] = []
    if family == "al2023":
        for arch, variant in (
            ("x86_64", "standard"),
            ("arm64", "standard"),
            ("x86_64", "nvidia"),
            ("arm64", "nvidia"),
            ("x86_64", "neuron"),
        ):
            leaf = "recommended" if latest else f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{version}"
            paths.append(
                (
                    f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}/{leaf}/image_id",
                    arch,
                    variant,
                )
            )
    elif family == "al2":
        if _version_tuple(k8s) >= (1, 33):
            return [], f"alias {alias}: AL2 AMIs are not published for Kubernetes {k8s} (use al2023@latest)"
        for suffix, arch, variant in (
            ("", "x86_64", "standard"),
            ("-arm64", "arm64", "standard"),
            ("-gpu", "x86_64", "nvidia"),
        ):
            leaf = "recommended" if latest else f"amazon-eks{suffix}-node-{k8s}-{version}"
            paths.append(
                (f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2{suffix}/{leaf}/image_id", arch, variant)
            )
    elif family == "bottlerocket":
        leaf = "latest" if latest else version.removeprefix("v")
        for nvidia in ("", "-nvidia"):
            for arch in ("x86_64", "arm64"):
                variant = "nvidia" if nvidia else "standard"
                paths.append((f"/aws/service/bottlerocket/aws-k8s-{k8s}{nvidia}/{arch}/{leaf}/image_id", arch, variant))
    elif family in ("windows2019", "windows2022", "windows2025"):
        if not latest:
            return [], f"alias {alias}: Windows aliases only support the version latest"
        year = family.removeprefix("windows")
        stem = f"Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}"
        paths.append((f"/aws/service/ami-windows-latest/{stem}/image_id", "x86_64", "standard"))
    else:
        return [], f"alias {alias}: unknown AMI family {family!r}"
    return paths, ""


def _version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return (0,)


# ------------------------------------------------------------------ node bootstrap (user data)


def _kubelet_may_set(key: str) -> bool:
    """Labels the kubelet may register itself with and that hold for every offering of a
    template (zone, type and arch are set by the kubelet and the cloud)."""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    for domain in ("kubernetes.io", "k8s.io"):
        if prefix == domain or prefix.endswith("." + domain):
            return (
                prefix in ("kubelet.kubernetes.io", "node.kubernetes.io") and key != "node.kubernetes.io/instance-type"
            )
    return True


def _taint_flag(taint: dict[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint['key']}={value}:{taint['effect']}" if value else f"{taint['key']}:{taint['effect']}"


@dataclass(frozen=True)
class NodeBootstrap:
    """What a node needs to join the cluster; rendered per AMI family."""

    family: str
    cluster_name: str
    cluster_endpoint: str
    cluster_ca_bundle: str
    cluster_cidr: str
    labels: tuple[tuple[str, str], ...]
    taints: tuple[dict[str, Any], ...]
    kubelet: dict[str, Any]
    custom_user_data: str

    @property
    def max_pods(self) -> int | None:
        value = self.kubelet.get("maxPods")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def cluster_dns(self) -> list[str]:
        dns = self.kubelet.get("clusterDNS") or []
        return [str(d) for d in dns] if isinstance(dns, list) else [str(dns)]

    def label_flag(self) -> str:
        """``--node-labels="k=v,..."`` (quoted as upstream writes it; the kubelet's
        environment file and the shell both strip the quotes)."""
        return '--node-labels="' + ",".join(f"{k}={v}" for k, v in self.labels) + '"'

    def taint_flag(self) -> str:
        return "--register-with-taints=" + ",".join(_taint_flag(t) for t in self.taints)

    def render(self) -> str:
        if self.family == "Custom":
            return self.custom_user_data
        if self.family == "Bottlerocket":
            return self._bottlerocket()
        if self.family.startswith("Windows"):
            return self._windows()
        if self.family == "AL2":
            return self._al2()
        return self._al2023()

    # AL2023: a nodeadm NodeConfig after the user's parts, in a MIME multipart archive.
    def _al2023(self) -> str:
        cluster: dict[str, Any] = {"name": self.cluster_name, "apiServerEndpoint": self.cluster_endpoint}
        if self.cluster_ca_bundle:
            cluster["certificateAuthority"] = self.cluster_ca_bundle
        if self.cluster_cidr:
            cluster["cidr"] = self.cluster_cidr
        config = {
            k: v
            for k, v in self.kubelet.items()
            if k != "registerWithTaints" and not (k == "maxPods" and self.max_pods is None)
        }
        if self.cluster_dns:
            config["clusterDNS"] = self.cluster_dns
        kubelet: dict[str, Any] = {}
        if config:
            kubelet["config"] = dict(sorted(config.items()))
        kubelet["flags"] = [self.label_flag(), self.taint_flag()]
        document = {
            "apiVersion": "node.eks.aws/v1alpha1",
            "kind": "NodeConfig",
            "spec": {"cluster": cluster, "kubelet": kubelet},
        }
        node_config = "# karpweb NodeConfig\n" + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
        parts = self._user_parts(detect_node_config=True)
        return mime_archive([*parts, ("application/node.eks.aws", node_config)])

    # AL2: the user's parts, then /etc/eks/bootstrap.sh with the kubelet flags.
    def _al2(self) -> str:
        extra = [self.label_flag(), self.taint_flag()]
        if self.max_pods is not None:
            extra.append(f"--max-pods={self.max_pods}")
        extra += _kubelet_flags(self.kubelet)
        lines = [
            "#!/bin/bash -xe",
            "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1",
            f"/etc/eks/bootstrap.sh {shlex.quote(self.cluster_name)} --apiserver-endpoint "
            f"{shlex.quote(self.cluster_endpoint)} --b64-cluster-ca {shlex.quote(self.cluster_ca_bundle)} \\",
        ]
        if self.max_pods is not None:
            lines.append("--use-max-pods false \\")
        dns = self.cluster_dns
        lines.append(f"--kubelet-extra-args {shlex.quote(' '.join(extra))}" + (" \\" if dns else ""))
        if dns:
            lines.append(f"--dns-cluster-ip {shlex.quote(dns[0])}")
        script = "\n".join(lines) + "\n"
        parts = self._user_parts(detect_node_config=False)
        return mime_archive([*parts, ('text/x-shellscript; charset="us-ascii"', script)])

    # Bottlerocket: TOML settings; the user's TOML is kept, ours wins where both set a key.
    def _bottlerocket(self) -> str:
        try:
            user = tomllib.loads(self.custom_user_data) if self.custom_user_data.strip() else {}
        except tomllib.TOMLDecodeError as exc:
            raise CloudError(f"userData is not valid TOML for Bottlerocket: {exc}", reason="InvalidUserData") from exc
        kubernetes: dict[str, Any] = {
            "api-server": self.cluster_endpoint,
            "cluster-name": self.cluster_name,
        }
        if self.cluster_ca_bundle:
            kubernetes["cluster-certificate"] = self.cluster_ca_bundle
        if self.cluster_dns:
            kubernetes["cluster-dns-ip"] = self.cluster_dns if len(self.cluster_dns) > 1 else self.cluster_dns[0]
        if self.max_pods is not None:
            kubernetes["max-pods"] = self.max_pods
        for source, target in (
            ("kubeReserved", "kube-reserved"),
            ("systemReserved", "system-reserved"),
            ("evictionHard", "eviction-hard"),
            ("evictionSoft", "eviction-soft"),
            ("evictionSoftGracePeriod", "eviction-soft-grace-period"),
        ):
            if isinstance(self.kubelet.get(source), dict):
                kubernetes[target] = {str(k): str(v) for k, v in self.kubelet[source].items()}
        for source, target in (
            ("imageGCHighThresholdPercent", "image-gc-high-threshold-percent"),
            ("imageGCLowThresholdPercent", "image-gc-low-threshold-percent"),
            ("cpuCFSQuota", "cpu-cfs-quota-enforced"),
            ("evictionMaxPodGracePeriod", "eviction-max-pod-grace-period"),
        ):
            if source in self.kubelet:
                kubernetes[target] = self.kubelet[source]
        kubernetes["node-labels"] = dict(self.labels)
        taints: dict[str, list[str]] = {}
        for taint in self.taints:
            taints.setdefault(taint["key"], []).append(f"{taint.get('value') or ''}:{taint['effect']}")
        kubernetes["node-taints"] = taints
        merged = _deep_merge(user, {"settings": {"kubernetes": kubernetes}})
        return toml_dumps(merged)

    # Windows: the EKS bootstrap PowerShell script after the user's commands.
    def _windows(self) -> str:
        extra = [self.label_flag(), self.taint_flag()]
        if self.max_pods is not None:
            extra.append(f"--max-pods={self.max_pods}")
        args = [
            f"-EKSClusterName '{self.cluster_name}'",
            f"-APIServerEndpoint '{self.cluster_endpoint}'",
            f"-Base64ClusterCA '{self.cluster_ca_bundle}'",
            f"-KubeletExtraArgs '{' '.join(extra)}'",
        ]
        if self.cluster_dns:
            args.append(f"-DNSClusterIP '{self.cluster_dns[0]}'")
        user = self.custom_user_data.strip()
        user = user.removeprefix("<powershell>").removesuffix("</powershell>").strip()
        body = [
            "<powershell>",
            *([user] if user else []),
            '[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"',
            "& $EKSBootstrapScriptFile " + " ".join(args),
            "</powershell>",
        ]
        return "\n".join(body) + "\n"

    def _user_parts(self, detect_node_config: bool) -> list[tuple[str, str]]:
        """The user's userData as MIME parts (upstream's merge: a MIME archive is split into
        its parts; anything else becomes one part, a NodeConfig when it is a YAML mapping)."""
        text = self.custom_user_data
        if not text.strip():
            return []
        stripped = text.strip()
        if stripped.startswith("MIME-Version:") or stripped.startswith("Content-Type:"):
            message = email.message_from_string(stripped)
            if not message.is_multipart():
                raise CloudError("userData looks like MIME but is not a multipart archive", reason="InvalidUserData")
            parts = []
            for part in message.walk():
                if part.is_multipart():
                    continue
                payload = part.get_payload(decode=True)
                content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(part.get_payload())
                parts.append((part.get("Content-Type", "text/x-shellscript"), content))
            return parts
        content_type = 'text/x-shellscript; charset="us-ascii"'
        if detect_node_config:
            try:
                if isinstance(yaml.safe_load(text), dict):
                    content_type = "application/node.eks.aws"
            except yaml.YAMLError:
                pass
        return [(content_type, text)]


def _kubelet_flags(kubelet: dict[str, Any]) -> list[str]:
    """KubeletConfiguration fields the AL2 bootstrap passes as kubelet flags."""
    flags = []
    for source, flag in (
        ("kubeReserved", "--kube-reserved"),
        ("systemReserved", "--system-reserved"),
    ):
        if isinstance(kubelet.get(source), dict):
            flags.append(f"{flag}=" + ",".join(f"{k}={v}" for k, v in sorted(kubelet[source].items())))
    for source, flag in (("evictionHard", "--eviction-hard"), ("evictionSoft", "--eviction-soft")):
        if isinstance(kubelet.get(source), dict):
            flags.append(f"{flag}=" + ",".join(f"{k}<{v}" for k, v in sorted(kubelet[source].items())))
    if isinstance(kubelet.get("evictionSoftGracePeriod"), dict):
        pairs = sorted(kubelet["evictionSoftGracePeriod"].items())
        flags.append("--eviction-soft-grace-period=" + ",".join(f"{k}={v}" for k, v in pairs))
    for source, flag in (
        ("podsPerCore", "--pods-per-core"),
        ("imageGCHighThresholdPercent", "--image-gc-high-threshold"),
        ("imageGCLowThresholdPercent", "--image-gc-low-threshold"),
        ("evictionMaxPodGracePeriod", "--eviction-max-pod-grace-period"),
    ):
        if source in kubelet:
            flags.append(f"{flag}={kubelet[source]}")
    if "cpuCFSQuota" in kubelet:
        flags.append(f"--cpu-cfs-quota={str(bool(kubelet['cpuCFSQuota'])).lower()}")
    return flags


MIME_BOUNDARY = "//"


def mime_archive(parts: list[tuple[str, str]]) -> str:
    """A MIME multipart/mixed archive as cloud-init and nodeadm read it."""
    out = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"', ""]
    for content_type, content in parts:
        out += [f"--{MIME_BOUNDARY}", f"Content-Type: {content_type}", "", content.rstrip("\n")]
    out.append(f"--{MIME_BOUNDARY}--")
    return "\n".join(out) + "\n"


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_string(value: str) -> str:
    if "'" not in value and "\n" not in value:
        return f"'{value}'"
    return json.dumps(value)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, datetime):
        return value.isoformat()
    return _toml_string(str(value))


def toml_dumps(document: dict[str, Any]) -> str:
    """Nested tables of scalars and lists as TOML (what Bottlerocket settings need)."""
    lines: list[str] = []

    def table(path: list[str], values: dict[str, Any]) -> None:
        scalars = {k: v for k, v in values.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in values.items() if isinstance(v, dict)}
        if path and (scalars or not tables):
            if lines:
                lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for key, value in scalars.items():
            lines.append(f"{_toml_key(str(key))} = {_toml_value(value)}")
        for key, value in tables.items():
            table([*path, str(key)], value)

    table([], document)
    return "\n".join(lines) + "\n"


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


# ------------------------------------------------------------------ the provider


@dataclass(frozen=True)
class _TypeFacts:
    archs: tuple[str, ...]  # "amd64" / "arm64"
    accelerator: str  # "" | "nvidia" | "neuron"


@dataclass(frozen=True)
class _Planned:
    """One offering to launch, with its subnet and launch template."""

    option: LaunchOption
    subnet: Subnet
    image: Image
    template: str


class AWSCloud:
    """:class:`~provisioning.cloud.base.CloudProvider` on EC2."""

    def __init__(self, config: AWSConfig, session_kwargs: dict[str, Any] | None = None) -> None:
        self.config = config
        self.region = config.region
        self._session = _session(config, session_kwargs)
        self.ec2 = self._session.client("ec2", config=BOTO_CONFIG)
        self.ssm = self._session.client("ssm", config=BOTO_CONFIG)
        self._iam: Any = None
        self._lock = threading.Lock()
        self._type_facts: dict[str, _TypeFacts | None] = {}
        self._templates: dict[str, float] = {}  # launch template name → known to exist until
        self._profiles: dict[tuple[str, str], float] = {}  # (profile, role) → ensured until

    @property
    def iam(self) -> Any:
        if self._iam is None:
            self._iam = self._session.client("iam", config=BOTO_CONFIG)
        return self._iam

    def _call(self, action: str, method: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return method(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise to_cloud_error(exc, action) from exc

    def _pages(self, client: Any, operation: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        try:
            for page in client.get_paginator(operation).paginate(**kwargs):
                yield from page.get(key, [])
        except (ClientError, BotoCoreError) as exc:
            raise to_cloud_error(exc, operation) from exc

    # -------------------------------------------------------------- catalog inputs (§3.1)

    def instance_type_infos(self) -> list[dict[str, Any]]:
        infos = list(
            self._pages(
                self.ec2,
                "describe_instance_types",
                "InstanceTypes",
                Filters=[
                    {"Name": "supported-virtualization-type", "Values": ["hvm"]},
                    {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]},
                ],
                PaginationConfig={"PageSize": 100},
            )
        )
        with self._lock:
            for info in infos:
                self._type_facts[info["InstanceType"]] = _facts(info)
        return infos

    def instance_type_zones(self) -> dict[str, set[str]]:
        zones: dict[str, set[str]] = {}
        for offering in self._pages(
            self.ec2,
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            PaginationConfig={"PageSize": 1000},
        ):
            zones.setdefault(offering["InstanceType"], set()).add(offering["Location"])
        return zones

    def zone_ids(self) -> dict[str, str]:
        response = self._call("DescribeAvailabilityZones", self.ec2.describe_availability_zones)
        return {z["ZoneName"]: z.get("ZoneId", "") for z in response.get("AvailabilityZones", [])}

    # -------------------------------------------------------------- EC2NodeClass resolution

    def resolve_nodeclass(self, name: str, spec: dict[str, Any]) -> ResolvedNodeClass:
        family = effective_ami_family(spec) or ""
        problems: list[str] = []

        subnets = self._resolve_subnets(spec.get("subnetSelectorTerms") or [])
        if not subnets:
            problems.append(f"no subnet matches subnetSelectorTerms ({_terms(spec.get('subnetSelectorTerms'))})")
        groups = self._resolve_security_groups(spec.get("securityGroupSelectorTerms") or [])
        if not groups:
            terms = _terms(spec.get("securityGroupSelectorTerms"))
            problems.append(f"no security group matches securityGroupSelectorTerms ({terms})")
        images, image_problems = self._resolve_images(spec.get("amiSelectorTerms") or [])
        problems += image_problems
        if not images and not image_problems:
            problems.append(f"no AMI matches amiSelectorTerms ({_terms(spec.get('amiSelectorTerms'))})")
        if not family:
            problems.append("amiFamily is required when amiSelectorTerms has no alias")

        profile = ""
        if spec.get("instanceProfile"):
            profile = str(spec["instanceProfile"])
        elif spec.get("role"):
            profile, problem = self._ensure_instance_profile(name, str(spec["role"]), spec.get("tags") or {})
            if problem:
                problems.append(problem)
        else:
            problems.append("neither role nor instanceProfile is set")

        return ResolvedNodeClass(
            name=name,
            ami_family=family,
            subnets=tuple(subnets),
            security_groups=tuple(groups),
            images=tuple(images),
            instance_profile=profile,
            problems=tuple(problems),
        )

    def _resolve_subnets(self, terms: list[dict[str, Any]]) -> list[Subnet]:
        found: dict[str, Subnet] = {}
        for term in terms:
            filters = _selector_filters(term, "subnet-id")
            if not filters:
                continue
            for s in self._pages(self.ec2, "describe_subnets", "Subnets", Filters=filters):
                found[s["SubnetId"]] = Subnet(
                    id=s["SubnetId"],
                    zone=s["AvailabilityZone"],
                    zone_id=s.get("AvailabilityZoneId", ""),
                    available_ips=int(s.get("AvailableIpAddressCount", 0)),
                )
        return sorted(found.values(), key=lambda s: (s.zone, s.id))

    def _resolve_security_groups(self, terms: list[dict[str, Any]]) -> list[SecurityGroup]:
        found: dict[str, SecurityGroup] = {}
        for term in terms:
            filters = _selector_filters(term, "group-id", "group-name")
            if not filters:
                continue
            for g in self._pages(self.ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
                found[g["GroupId"]] = SecurityGroup(id=g["GroupId"], name=g.get("GroupName", ""))
        return sorted(found.values(), key=lambda g: g.id)

    def _resolve_images(self, terms: list[dict[str, Any]]) -> tuple[list[Image], list[str]]:
        candidates: list[Image] = []
        problems: list[str] = []
        for term in terms:
            if term.get("alias"):
                found, problem = self._images_by_alias(term["alias"])
            elif term.get("ssmParameter"):
                found, problem = self._images_by_parameter(term["ssmParameter"])
            else:
                found, problem = self._images_by_filters(term), ""
            if problem:
                problems.append(problem)
            elif not found:
                problems.append(f"no AMI matches amiSelectorTerms ({_describe_term(term)})")
            candidates += found
        # One image per (arch, variant): non-deprecated first, then the newest.
        best: dict[tuple[str, str], Image] = {}
        for image in sorted(candidates, key=lambda i: (not i.deprecated, i.creation_date, i.id), reverse=True):
            best.setdefault((image.arch, image.variant), image)
        images = sorted(best.values(), key=lambda i: (i.arch, i.variant))
        if images:
            # Terms are ORed: a term that matched nothing is no problem while others matched.
            problems = [p for p in problems if not p.startswith("no AMI matches")]
        return images, problems

    def _images_by_alias(self, alias: str) -> tuple[list[Image], str]:
        paths, problem = alias_parameters(alias, self.config.kubernetes_version)
        if problem:
            return [], problem
        values: dict[str, str] = {}
        for start in range(0, len(paths), 10):
            chunk = [p for p, _, _ in paths[start : start + 10]]
            response = self._call("GetParameters", self.ssm.get_parameters, Names=chunk)
            values.update({p["Name"]: p["Value"] for p in response.get("Parameters", [])})
        wanted = {values[p]: (arch, variant) for p, arch, variant in paths if p in values}
        if not wanted:
            k8s = self.config.kubernetes_version
            return [], f"no AMI matches amiSelectorTerms (alias {alias}: no SSM parameter for Kubernetes {k8s})"
        images = []
        for raw in self._describe_images(Filters=[{"Name": "image-id", "Values": sorted(wanted)}]):
            arch, variant = wanted[raw["ImageId"]]
            images.append(_image(raw, variant=variant, arch=_arch(arch)))
        if not images:
            return [], f"no AMI matches amiSelectorTerms (alias {alias}: its AMIs are not in this region)"
        return images, ""

    def _images_by_parameter(self, parameter: str) -> tuple[list[Image], str]:
        try:
            value = self.ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        except ClientError as exc:
            if error_code(exc) in NOT_FOUND_CODES:
                return [], f"no AMI matches amiSelectorTerms (ssmParameter {parameter} does not exist)"
            raise to_cloud_error(exc, "GetParameter") from exc
        except BotoCoreError as exc:
            raise to_cloud_error(exc, "GetParameter") from exc
        images = [_image(raw) for raw in self._describe_images(Filters=[{"Name": "image-id", "Values": [value]}])]
        return images, ""

    def _images_by_filters(self, term: dict[str, Any]) -> list[Image]:
        filters = _selector_filters(term, "image-id", "name")
        if not filters:
            return []
        kwargs: dict[str, Any] = {"Filters": filters}
        if term.get("owner"):
            kwargs["Owners"] = [term["owner"]]
        elif term.get("name"):
            kwargs["Owners"] = ["self", "amazon"]
        return [_image(raw) for raw in self._describe_images(**kwargs) if _arch(raw.get("Architecture", ""))]

    def _describe_images(self, **kwargs: Any) -> list[dict[str, Any]]:
        return list(self._pages(self.ec2, "describe_images", "Images", IncludeDeprecated=True, **kwargs))

    def instance_profile_name(self, nodeclass: str) -> str:
        """The instance profile karpweb owns for an EC2NodeClass with ``role`` (stable per
        region, cluster and EC2NodeClass name)."""
        digest = hashlib.sha256(f"{self.region}/{self.config.cluster_name}/{nodeclass}".encode()).hexdigest()[:20]
        return f"{self.config.cluster_name}_{digest}"[:128]

    def _ensure_instance_profile(self, nodeclass: str, role: str, spec_tags: dict[str, str]) -> tuple[str, str]:
        """Create (or repair) the instance profile for ``role``; returns its name, or "" and
        the problem when IAM would not (the EC2NodeClass is then not ready)."""
        name = self.instance_profile_name(nodeclass)
        role_name = role.rsplit("/", 1)[-1]  # an ARN names the role last
        key = (name, role_name)
        if self._profiles.get(key, 0.0) > time.monotonic():
            return name, ""
        path = f"/karpenter/{self.region}/{self.config.cluster_name}/{nodeclass}/"
        tags = {
            **spec_tags,
            self.config.cluster_tag: "owned",
            CLUSTER_NAME_TAG: self.config.cluster_name,
            NODECLASS_TAG: nodeclass,
            "topology.kubernetes.io/region": self.region,
        }
        try:
            try:
                profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            except ClientError as exc:
                if error_code(exc) != "NoSuchEntity":
                    raise
                try:
                    profile = self.iam.create_instance_profile(
                        InstanceProfileName=name, Path=path, Tags=_tag_list(tags)
                    )["InstanceProfile"]
                except ClientError as exc2:
                    if error_code(exc2) != "EntityAlreadyExists":
                        raise
                    profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            attached = [r["RoleName"] for r in profile.get("Roles", [])]
            if role_name not in attached:
                for other in attached:
                    self.iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
                try:
                    self.iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
                except ClientError as exc:
                    if error_code(exc) == "NoSuchEntity":
                        return "", f"role {role_name} does not exist in IAM"
                    raise
        except (ClientError, BotoCoreError) as exc:
            detail = f"{error_code(exc)}: {exc}" if isinstance(exc, ClientError) else str(exc)
            return "", f"instance profile for role {role_name} could not be ensured ({detail})"
        self._profiles[key] = time.monotonic() + PROFILE_CACHE_SECONDS
        return name, ""

    # -------------------------------------------------------------- launch templates (§5.3)

    def base_tags(self, request: LaunchRequest) -> dict[str, str]:
        """``spec.tags`` ∪ the cluster's tags; the static tags win (§5.6)."""
        spec_tags = {str(k): str(v) for k, v in (request.nodeclass_spec.get("tags") or {}).items()}
        return {
            **spec_tags,
            self.config.cluster_tag: "owned",
            CLUSTER_NAME_TAG: self.config.cluster_name,
            NODEPOOL_TAG: request.nodepool,
            NODECLASS_TAG: request.nodeclass.name,
        }

    def launch_tags(self, request: LaunchRequest) -> dict[str, str]:
        """Tags of the instance, its volumes and the fleet: the base tags, the NodeClaim and
        ``Name`` (the EC2NodeClass may name its instances itself, as upstream allows)."""
        tags = self.base_tags(request)
        tags[NODECLAIM_TAG] = request.nodeclaim_name
        tags.setdefault("Name", request.nodeclaim_name)
        return tags

    def bootstrap(self, request: LaunchRequest) -> NodeBootstrap:
        spec = request.nodeclass_spec
        family = request.nodeclass.ami_family or effective_ami_family(spec) or "AL2023"
        labels = {k: str(v) for k, v in request.labels.items() if _kubelet_may_set(k)}
        labels[NODEPOOL_TAG] = request.nodepool
        labels[NODECLASS_TAG] = request.nodeclass.name
        labels[CAPACITY_TYPE_LABEL] = request.capacity_type
        if family != "Custom":
            labels[DO_NOT_SYNC_TAINTS_LABEL] = "true"
        taints: list[dict[str, Any]] = []
        for taint in [*request.taints, UNREGISTERED_TAINT]:
            entry = {"key": taint["key"], "effect": taint["effect"]}
            if taint.get("value"):
                entry["value"] = str(taint["value"])
            if entry not in taints:
                taints.append(entry)
        kubelet = spec.get("kubelet") if isinstance(spec.get("kubelet"), dict) else {}
        return NodeBootstrap(
            family=family,
            cluster_name=self.config.cluster_name,
            cluster_endpoint=self.config.cluster_endpoint,
            cluster_ca_bundle=self.config.cluster_ca_bundle,
            cluster_cidr=self.config.cluster_cidr,
            labels=tuple(sorted(labels.items())),
            taints=tuple(taints),
            kubelet=dict(kubelet),
            custom_user_data=str(spec.get("userData") or ""),
        )

    def launch_template_data(self, request: LaunchRequest, image: Image) -> dict[str, Any]:
        spec = request.nodeclass_spec
        bootstrap = self.bootstrap(request)
        data: dict[str, Any] = {
            "ImageId": image.id,
            "MetadataOptions": metadata_options(spec, self.region),
            "Monitoring": {"Enabled": bool(spec.get("detailedMonitoring", False))},
            "TagSpecifications": [{"ResourceType": "network-interface", "Tags": _tag_list(self.base_tags(request))}],
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
        return data

    def launch_template_for(self, request: LaunchRequest, image: Image) -> str:
        """The name of the launch template for this request's node settings on ``image``,
        created when missing. Named by a hash of its content, so it is reused while nothing
        changes and a change (AMI, user data, groups, tags...) gives a new one."""
        data = self.launch_template_data(request, image)
        tags = self.base_tags(request)
        digest = hashlib.sha256(json.dumps({"data": data, "tags": tags}, sort_keys=True).encode()).hexdigest()
        name = f"karpweb/{digest[:24]}"
        with self._lock:
            if self._templates.get(name, 0.0) > time.monotonic():
                return name
        try:
            self.ec2.describe_launch_templates(LaunchTemplateNames=[name])
        except ClientError as exc:
            if error_code(exc) not in TEMPLATE_NOT_FOUND_CODES:
                raise to_cloud_error(exc, "DescribeLaunchTemplates") from exc
            try:
                self.ec2.create_launch_template(
                    LaunchTemplateName=name,
                    LaunchTemplateData=data,
                    TagSpecifications=[{"ResourceType": "launch-template", "Tags": _tag_list(tags)}],
                )
                log.info("created launch template %s for EC2NodeClass %s", name, request.nodeclass.name)
            except ClientError as exc2:
                # Another worker created it between our describe and create: same content.
                if error_code(exc2) != "InvalidLaunchTemplateName.AlreadyExistsException":
                    raise to_cloud_error(exc2, "CreateLaunchTemplate") from exc2
                log.debug("launch template %s was created by another worker", name)
            except BotoCoreError as exc2:
                raise to_cloud_error(exc2, "CreateLaunchTemplate") from exc2
        except BotoCoreError as exc:
            raise to_cloud_error(exc, "DescribeLaunchTemplates") from exc
        with self._lock:
            self._templates[name] = time.monotonic() + TEMPLATE_CACHE_SECONDS
        return name

    def _forget_templates(self) -> None:
        with self._lock:
            self._templates.clear()

    # -------------------------------------------------------------- instance types for a launch

    def _facts_for(self, instance_types: set[str]) -> dict[str, _TypeFacts | None]:
        with self._lock:
            missing = sorted(t for t in instance_types if t not in self._type_facts)
        for start in range(0, len(missing), 100):
            chunk = missing[start : start + 100]
            found = {
                info["InstanceType"]: _facts(info)
                for info in self._pages(
                    self.ec2,
                    "describe_instance_types",
                    "InstanceTypes",
                    Filters=[{"Name": "instance-type", "Values": chunk}],
                )
            }
            with self._lock:
                for name in chunk:
                    self._type_facts[name] = found.get(name)
        with self._lock:
            return {t: self._type_facts.get(t) for t in instance_types}

    @staticmethod
    def _image_for(facts: _TypeFacts | None, images: tuple[Image, ...]) -> Image | None:
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

    def plan(self, request: LaunchRequest) -> list[_Planned]:
        """The offerings of the request's capacity type to try, cheapest first: at most 60
        instance types, each zone's subnet with the most free addresses, a launch template
        per AMI."""
        options = sorted(
            (o for o in request.options if o.capacity_type == request.capacity_type), key=lambda o: o.price
        )
        types: list[str] = []
        kept: list[LaunchOption] = []
        seen: set[tuple[str, str]] = set()
        for option in options:
            if (option.instance_type, option.zone) in seen:
                continue
            if option.instance_type not in types:
                if len(types) >= MAX_INSTANCE_TYPES:
                    continue
                types.append(option.instance_type)
            seen.add((option.instance_type, option.zone))
            kept.append(option)
        subnets: dict[str, Subnet] = {}
        for subnet in request.nodeclass.subnets:
            best = subnets.get(subnet.zone)
            if best is None or (subnet.available_ips, best.id) > (best.available_ips, subnet.id):
                subnets[subnet.zone] = subnet
        facts = self._facts_for(set(types))
        templates: dict[str, str] = {}
        planned: list[_Planned] = []
        no_subnet: set[str] = set()
        no_image: set[str] = set()
        for option in kept:
            subnet = subnets.get(option.zone)
            if subnet is None:
                no_subnet.add(option.zone)
                continue
            image = self._image_for(facts.get(option.instance_type), request.nodeclass.images)
            if image is None:
                no_image.add(option.instance_type)
                continue
            if image.id not in templates:
                templates[image.id] = self.launch_template_for(request, image)
            planned.append(_Planned(option, subnet, image, templates[image.id]))
        if not planned and kept:
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

    # -------------------------------------------------------------- launch (§5.1)

    def launch(self, request: LaunchRequest) -> Instance:
        if not request.nodeclass.ready:
            raise NodeClassNotReady(
                f"EC2NodeClass {request.nodeclass.name} is not ready: {'; '.join(request.nodeclass.problems)}"
            )
        existing = self.find_instance(request.nodeclaim_name)
        if existing is not None:
            log.info("nodeclaim %s already has instance %s", request.nodeclaim_name, existing.id)
            return existing
        if not any(o.capacity_type == request.capacity_type for o in request.options):
            raise InsufficientCapacity(
                f"NodeClaim {request.nodeclaim_name} has no {request.capacity_type} offering left to launch"
            )
        for attempt in range(2):
            planned = self.plan(request)
            try:
                if self.config.launch_api == "run-instances":
                    return self._run_instances(request, planned)
                return self._create_fleet(request, planned)
            except CloudError as exc:
                # A template deleted behind our back (cache TTL): forget, rebuild, retry once.
                if attempt == 0 and exc.reason == "LaunchTemplateNotFound":
                    self._forget_templates()
                    continue
                raise
        raise AssertionError("unreachable")

    def find_instance(self, nodeclaim_name: str) -> Instance | None:
        """The live instance already launched for a NodeClaim (a retried launch returns it)."""
        filters = [
            {"Name": f"tag:{NODECLAIM_TAG}", "Values": [nodeclaim_name]},
            {"Name": f"tag:{self.config.cluster_tag}", "Values": ["owned"]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
        for reservation in self._pages(self.ec2, "describe_instances", "Reservations", Filters=filters):
            for raw in reservation.get("Instances", []):
                return _instance(raw)
        return None

    def _tag_specifications(self, request: LaunchRequest, resources: tuple[str, ...]) -> list[dict[str, Any]]:
        tags = _tag_list(self.launch_tags(request))
        return [{"ResourceType": r, "Tags": tags} for r in resources]

    def _create_fleet(self, request: LaunchRequest, planned: list[_Planned]) -> Instance:
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
        spot = request.capacity_type == "spot"
        kwargs: dict[str, Any] = {
            "Type": "instant",
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": 1,
                "DefaultTargetCapacityType": request.capacity_type,
            },
            "LaunchTemplateConfigs": list(configs.values()),
            "TagSpecifications": self._tag_specifications(request, ("instance", "volume", "fleet")),
        }
        if spot:
            kwargs["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            kwargs["OnDemandOptions"] = {"AllocationStrategy": "lowest-price"}
        if request.nodeclass_spec.get("context"):
            kwargs["Context"] = str(request.nodeclass_spec["context"])
        response = self._launch_call("CreateFleet", self.ec2.create_fleet, request.nodeclaim_uid, kwargs)

        by_key = {(p.option.instance_type, p.option.zone): p for p in planned}
        zone_of_subnet = {s.id: s.zone for s in request.nodeclass.subnets}
        for item in response.get("Instances", []):
            ids = item.get("InstanceIds") or []
            if not ids:
                continue
            overrides = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
            zone = overrides.get("AvailabilityZone") or zone_of_subnet.get(overrides.get("SubnetId", ""), "")
            if response.get("Errors"):
                log.info("fleet for %s launched despite errors: %s", request.nodeclaim_name, _summary(response))
            fallback = Instance(
                id=ids[0],
                instance_type=item.get("InstanceType") or overrides.get("InstanceType", ""),
                zone=zone,
                capacity_type="spot" if item.get("Lifecycle") == "spot" else "on-demand",
                state="pending",
                image_id=overrides.get("ImageId", ""),
                tags=self.launch_tags(request),
            )
            return self._describe_instance(ids[0]) or fallback

        errors = response.get("Errors") or []
        if not errors:
            raise CloudError(
                f"CreateFleet launched no instance for NodeClaim {request.nodeclaim_name} and gave no reason",
                reason="LaunchFailed",
            )
        exhausted: list[LaunchOption] = []
        others: list[dict[str, Any]] = []
        for error in errors:
            code = error.get("ErrorCode", "")
            if code in ICE_CODES or code == SPOT_SLR_CODE:
                exhausted += self._options_of_error(error, request, planned, by_key, zone_of_subnet)
            else:
                others.append(error)
        if others:
            first = others[0]
            code, message = first.get("ErrorCode", ""), first.get("ErrorMessage", "")
            reason, hint = error_reason(code, message)
            if code in THROTTLE_CODES:
                raise Throttled(f"CreateFleet: {hint} ({code}: {message})")
            raise CloudError(
                f"CreateFleet for NodeClaim {request.nodeclaim_name}: {hint} ({code}: {message})", reason=reason
            )
        raise _insufficient(request, _unique(exhausted), errors)

    def _options_of_error(
        self,
        error: dict[str, Any],
        request: LaunchRequest,
        planned: list[_Planned],
        by_key: dict[tuple[str, str], _Planned],
        zone_of_subnet: dict[str, str],
    ) -> list[LaunchOption]:
        """The offerings a fleet error names; all that were tried when it names none."""
        if error.get("ErrorCode") == SPOT_SLR_CODE:
            return [p.option for p in planned if p.option.capacity_type == "spot"]
        overrides = (error.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        instance_type = overrides.get("InstanceType", "")
        zone = overrides.get("AvailabilityZone") or zone_of_subnet.get(overrides.get("SubnetId", ""), "")
        if instance_type and zone:
            hit = by_key.get((instance_type, zone))
            if hit is not None:
                return [hit.option]
            lifecycle = error.get("Lifecycle") or request.capacity_type
            return [LaunchOption(instance_type, zone, lifecycle, 0.0)]
        if instance_type:
            return [p.option for p in planned if p.option.instance_type == instance_type]
        if zone:
            return [p.option for p in planned if p.option.zone == zone]
        return [p.option for p in planned]

    def _run_instances(self, request: LaunchRequest, planned: list[_Planned]) -> Instance:
        exhausted: list[LaunchOption] = []
        errors: list[dict[str, Any]] = []
        tags = self._tag_specifications(request, ("instance", "volume"))
        for attempt, p in enumerate(planned[:MAX_RUN_INSTANCES_ATTEMPTS]):
            kwargs: dict[str, Any] = {
                "LaunchTemplate": {"LaunchTemplateName": p.template, "Version": "$Latest"},
                "InstanceType": p.option.instance_type,
                "SubnetId": p.subnet.id,
                "MinCount": 1,
                "MaxCount": 1,
                "TagSpecifications": tags,
            }
            if request.capacity_type == "spot":
                kwargs["InstanceMarketOptions"] = {
                    "MarketType": "spot",
                    "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
                }
            # The first offering uses the NodeClaim uid itself; the next ones tokens derived
            # from it, so a retried launch replays each attempt instead of launching twice.
            token = request.nodeclaim_uid if attempt == 0 else _client_token(request.nodeclaim_uid, p.option)
            try:
                response = self._launch_call("RunInstances", self.ec2.run_instances, token, kwargs)
            except _CapacityError as exc:
                if exc.code == SPOT_SLR_CODE:
                    exhausted += [q.option for q in planned if q.option.capacity_type == "spot"]
                    errors.append({"ErrorCode": exc.code, "ErrorMessage": exc.message})
                    break
                exhausted.append(p.option)
                errors.append({"ErrorCode": exc.code, "ErrorMessage": exc.message})
                continue
            raw = response["Instances"][0]
            return self._describe_instance(raw["InstanceId"]) or _instance(raw)
        raise _insufficient(request, _unique(exhausted), errors)

    def _launch_call(self, action: str, method: Any, token: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One launch call with ``ClientToken``; ICE-class errors become :class:`_CapacityError`.
        A token already used with other parameters (the NodeClaim's offerings changed since
        an earlier, failed attempt) is retried once with a token derived from the parameters."""
        for candidate in (token, _client_token(token, json.dumps(kwargs, sort_keys=True, default=str))):
            try:
                return method(ClientToken=candidate, **kwargs)
            except ClientError as exc:
                code = error_code(exc)
                if code == "IdempotentParameterMismatch" and candidate == token:
                    continue
                if code in ICE_CODES or code == SPOT_SLR_CODE:
                    raise _CapacityError(code, str(exc.response.get("Error", {}).get("Message", ""))) from exc
                raise to_cloud_error(exc, action) from exc
            except BotoCoreError as exc:
                raise to_cloud_error(exc, action) from exc
        raise AssertionError("unreachable")

    def _describe_instance(self, instance_id: str) -> Instance | None:
        try:
            response = self.ec2.describe_instances(InstanceIds=[instance_id])
        except (ClientError, BotoCoreError):
            return None  # eventual consistency right after a launch: the caller has enough
        for reservation in response.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                return _instance(raw)
        return None

    # -------------------------------------------------------------- lifecycle

    def terminate(self, instance_id: str) -> None:
        try:
            self.ec2.terminate_instances(InstanceIds=[instance_id])
        except ClientError as exc:
            if error_code(exc) == "InvalidInstanceID.NotFound":
                return  # already gone
            raise to_cloud_error(exc, "TerminateInstances") from exc
        except BotoCoreError as exc:
            raise to_cloud_error(exc, "TerminateInstances") from exc

    def list_instances(self) -> list[Instance]:
        filters = [
            {"Name": f"tag:{self.config.cluster_tag}", "Values": ["owned"]},
            {"Name": "tag-key", "Values": [NODEPOOL_TAG]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        return [
            _instance(raw)
            for reservation in self._pages(
                self.ec2, "describe_instances", "Reservations", Filters=filters, PaginationConfig={"PageSize": 1000}
            )
            for raw in reservation.get("Instances", [])
        ]


class _CapacityError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _insufficient(
    request: LaunchRequest, exhausted: tuple[LaunchOption, ...], errors: list[dict[str, Any]]
) -> InsufficientCapacity:
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


def _unique(options: Iterable[LaunchOption]) -> tuple[LaunchOption, ...]:
    return tuple(dict.fromkeys(options))


def _summary(response: dict[str, Any]) -> str:
    return "; ".join(f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}" for e in response.get("Errors", [])[:5])


def _terms(terms: Any) -> str:
    if not terms:
        return "no terms"
    return "; ".join(_describe_term(t) for t in terms if isinstance(t, dict))


def _facts(info: dict[str, Any]) -> _TypeFacts:
    archs = tuple(
        a for a in (_arch(x) for x in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures", [])) if a
    )
    accelerator = ""
    gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
    if any(str(g.get("Manufacturer", "")).upper() == "NVIDIA" for g in gpus):
        accelerator = "nvidia"
    elif (info.get("NeuronInfo") or {}).get("NeuronDevices") or (info.get("InferenceAcceleratorInfo") or {}).get(
        "Accelerators"
    ):
        accelerator = "neuron"
    return _TypeFacts(archs=archs, accelerator=accelerator)


def _image(raw: dict[str, Any], variant: str = "standard", arch: str = "") -> Image:
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
        arch=arch or _arch(raw.get("Architecture", "")),
        variant=variant,
        creation_date=str(raw.get("CreationDate", "")),
        deprecated=deprecated,
    )


def _instance(raw: dict[str, Any]) -> Instance:
    spot = raw.get("InstanceLifecycle") == "spot" or bool(raw.get("SpotInstanceRequestId"))
    launch_time = raw.get("LaunchTime")
    if isinstance(launch_time, datetime):
        launch_time = launch_time.astimezone(UTC)
    return Instance(
        id=raw["InstanceId"],
        instance_type=raw.get("InstanceType", ""),
        zone=(raw.get("Placement") or {}).get("AvailabilityZone", ""),
        capacity_type="spot" if spot else "on-demand",
        state=(raw.get("State") or {}).get("Name", ""),
        launch_time=launch_time if isinstance(launch_time, datetime) else None,
        image_id=raw.get("ImageId", ""),
        tags=_tag_dict(raw.get("Tags")),
    )


# ------------------------------------------------------------------ prices (§4.1, §4.3)


class AWSPrices:
    """:class:`~provisioning.cloud.base.PriceSource` on the Price List API and EC2 spot
    price history. Any failure raises ``PricingUnavailable`` (callers use the snapshot)."""

    SPOT_PRODUCTS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")

    def __init__(self, config: AWSConfig, session_kwargs: dict[str, Any] | None = None) -> None:
        self.config = config
        session = _session(config, session_kwargs)
        self.pricing = session.client("pricing", region_name=pricing_region(config.region), config=BOTO_CONFIG)
        self.ec2 = session.client("ec2", config=BOTO_CONFIG)

    def _filters(self, tenancy: str, product_family: str) -> list[dict[str, str]]:
        terms = {
            "regionCode": self.config.region,
            "serviceCode": "AmazonEC2",
            "preInstalledSw": "NA",
            "operatingSystem": "Linux",
            "capacitystatus": "Used",
            "marketoption": "OnDemand",
            "tenancy": tenancy,
            "productFamily": product_family,
        }
        return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in terms.items()]

    def _query(self, tenancy: str, product_family: str) -> dict[str, float]:
        currency = "CNY" if self.config.region.startswith("cn-") else "USD"
        items: list[str] = []
        for page in self.pricing.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2",
            Filters=self._filters(tenancy, product_family),
            PaginationConfig={"PageSize": 100},
        ):
            items += page.get("PriceList", [])
        return parse_price_list(items, currency)

    def on_demand_prices(self) -> dict[str, float]:
        queries = (("Shared", "Compute Instance"), ("Dedicated", "Compute Instance (bare metal)"))
        try:
            with ThreadPoolExecutor(max_workers=2) as pool:
                shared, metal = pool.map(lambda q: self._query(*q), queries)
        except (ClientError, BotoCoreError, ValueError) as exc:
            raise PricingUnavailable(f"Price List API ({pricing_region(self.config.region)}): {exc}") from exc
        if not shared or not metal:
            empty = "shared-tenancy" if not shared else "bare-metal"
            raise PricingUnavailable(f"Price List API returned no {empty} on-demand prices for {self.config.region}")
        return {**shared, **metal}

    def spot_prices(self) -> dict[tuple[str, str], float]:
        latest: dict[tuple[str, str], tuple[datetime, float]] = {}
        try:
            pages = self.ec2.get_paginator("describe_spot_price_history").paginate(
                ProductDescriptions=list(self.SPOT_PRODUCTS),
                StartTime=datetime.now(UTC),
                PaginationConfig={"PageSize": 2000},
            )
            for page in pages:
                for record in page.get("SpotPriceHistory", []):
                    stamp = record.get("Timestamp")
                    try:
                        price = float(record.get("SpotPrice", ""))
                    except ValueError:
                        continue
                    if not isinstance(stamp, datetime) or price <= 0:
                        continue
                    key = (record["InstanceType"], record["AvailabilityZone"])
                    if key not in latest or stamp >= latest[key][0]:
                        latest[key] = (stamp, price)
        except (ClientError, BotoCoreError) as exc:
            raise PricingUnavailable(f"DescribeSpotPriceHistory: {exc}") from exc
        if not latest:
            raise PricingUnavailable(f"DescribeSpotPriceHistory returned no spot prices for {self.config.region}")
        return {key: price for key, (_, price) in latest.items()}


def parse_price_list(items: Iterable[str | dict[str, Any]], currency: str = "USD") -> dict[str, float]:
    """``GetProducts`` PriceList entries → instance type → price per hour (§4.1: every
    non-zero ``terms.OnDemand.*.priceDimensions.*.pricePerUnit[currency]``; the last wins)."""
    prices: dict[str, float] = {}
    for item in items:
        product = json.loads(item) if isinstance(item, str) else item
        instance_type = ((product.get("product") or {}).get("attributes") or {}).get("instanceType")
        if not instance_type:
            continue
        for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                try:
                    price = float((dimension.get("pricePerUnit") or {}).get(currency, ""))
                except ValueError:
                    continue
                if price > 0:
                    prices[instance_type] = price
    return prices
