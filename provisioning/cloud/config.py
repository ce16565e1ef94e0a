"""What the EC2 provider knows about the cluster it launches nodes for (from settings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LAUNCH_APIS = ("fleet", "run-instances")


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
