"""Kubernetes names, label keys and values, and Karpenter's well-known labels."""

from __future__ import annotations

import re

QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)
# Used with fullmatch(), not match(): Python's `$` also matches before a trailing
# newline, Go's does not, so "foo\n" must not pass as a name, prefix or label value.

CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL = "karpenter.sh/nodepool"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
WINDOWS_BUILD = "node.kubernetes.io/windows-build"

CAPACITY_TYPES = ("on-demand", "spot", "reserved")

# Requirement keys Karpenter understands without a NodePool defining them.
WELL_KNOWN_LABELS = frozenset(
    {NODEPOOL, CAPACITY_TYPE, INSTANCE_TYPE, ARCH, OS, ZONE, REGION, WINDOWS_BUILD}
    | {
        f"karpenter.k8s.aws/instance-{suffix}"
        for suffix in [
            "hypervisor",
            "encryption-in-transit-supported",
            "category",
            "family",
            "generation",
            "size",
            "local-nvme",
            "cpu",
            "cpu-manufacturer",
            "cpu-sustained-clock-speed-mhz",
            "memory",
            "ebs-bandwidth",
            "network-bandwidth",
            "gpu-name",
            "gpu-manufacturer",
            "gpu-count",
            "gpu-memory",
            "accelerator-name",
            "accelerator-manufacturer",
            "accelerator-count",
        ]
    }
    | {
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-type",
        "karpenter.k8s.aws/capacity-reservation-interruptible",
        "topology.k8s.aws/zone-id",
    }
)

# Deprecated keys and the key they mean (pod requirements are translated).
NORMALIZED_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": ZONE,
    "failure-domain.beta.kubernetes.io/region": REGION,
    "beta.kubernetes.io/arch": ARCH,
    "beta.kubernetes.io/os": OS,
    "beta.kubernetes.io/instance-type": INSTANCE_TYPE,
}

# Label domains users may not set: core restricts karpenter.sh, the AWS provider adds
# karpenter.k8s.aws. Well-known labels are exempt.
RESTRICTED_LABEL_DOMAINS = ("karpenter.sh", "karpenter.k8s.aws")


def normalize_key(key: str) -> str:
    return NORMALIZED_LABELS.get(key, key)


def qualified_name_errors(value: str) -> list[str]:
    """Why ``value`` is not a qualified name (``prefix/name``), as apimachinery says."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            errors.append(
                "prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters (e.g. 'example.com')"
            )
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character, with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _NAME.fullmatch(name):
        errors.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName', 'my.name', '123-abc')"
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    if len(value) > 63:
        return ["must be no more than 63 characters"]
    if not _LABEL_VALUE.fullmatch(value):
        return [
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        ]
    return []


def is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and bool(_DNS1123_SUBDOMAIN.fullmatch(value))


def label_domain(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def is_restricted_label(key: str) -> bool:
    """Karpenter's IsRestrictedLabel: only well-known labels pass in its domains."""
    if key in WELL_KNOWN_LABELS:
        return False
    if key == HOSTNAME:
        return True
    domain = label_domain(key)
    return any(domain == d or domain.endswith("." + d) for d in RESTRICTED_LABEL_DOMAINS)
