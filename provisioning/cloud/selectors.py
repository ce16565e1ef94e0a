"""EC2NodeClass selector terms as EC2 queries: subnet, security group and AMI terms as
``Filters``, AMI aliases as the public SSM parameters they resolve through (reference Part II
§1.2), and terms described for people in status messages."""

from __future__ import annotations

from typing import Any

from provisioning.cloud.base import Image

# The EKS-optimized AMIs Amazon publishes per Kubernetes version (§1.2), as (arch, variant)
# and, for AL2, the suffix of the parameter path.
AL2023_IMAGES = (
    ("x86_64", "standard"),
    ("arm64", "standard"),
    ("x86_64", "nvidia"),
    ("arm64", "nvidia"),
    ("x86_64", "neuron"),
)
AL2_IMAGES = (
    ("", "x86_64", "standard"),
    ("-arm64", "arm64", "standard"),
    ("-gpu", "x86_64", "nvidia"),
)
BOTTLEROCKET_IMAGES = (
    ("", "x86_64", "standard"),
    ("", "arm64", "standard"),
    ("-nvidia", "x86_64", "nvidia"),
    ("-nvidia", "arm64", "nvidia"),
)
WINDOWS_YEARS = ("2019", "2022", "2025")


def selector_filters(term: dict[str, Any], id_filter: str, name_filter: str = "") -> list[dict[str, Any]]:
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


def image_query(term: dict[str, Any]) -> dict[str, Any]:
    """The ``DescribeImages`` arguments of an AMI term by id, name, tags and owner; empty when
    the term selects nothing that way. A name without an owner means the account's own AMIs
    or Amazon's, as upstream."""
    filters = selector_filters(term, "image-id", "name")
    if not filters:
        return {}
    query: dict[str, Any] = {"Filters": filters}
    if term.get("owner"):
        query["Owners"] = [term["owner"]]
    elif term.get("name"):
        query["Owners"] = ["self", "amazon"]
    return query


def best_images(candidates: list[Image]) -> list[Image]:
    """One image per (arch, variant) of those the terms found: non-deprecated first, then
    the newest."""
    best: dict[tuple[str, str], Image] = {}
    for image in sorted(candidates, key=lambda i: (not i.deprecated, i.creation_date, i.id), reverse=True):
        best.setdefault((image.arch, image.variant), image)
    return sorted(best.values(), key=lambda i: (i.arch, i.variant))


def describe_term(term: dict[str, Any]) -> str:
    parts = [f"{k} {term[k]}" for k in ("alias", "id", "name", "owner", "ssmParameter") if term.get(k)]
    parts += [f"tag {k}={v}" for k, v in sorted((term.get("tags") or {}).items())]
    return ", ".join(parts) or "an empty term"


def describe_terms(terms: Any) -> str:
    if not terms:
        return "no terms"
    return "; ".join(describe_term(t) for t in terms if isinstance(t, dict))


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
        for arch, variant in AL2023_IMAGES:
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
        for suffix, arch, variant in AL2_IMAGES:
            leaf = "recommended" if latest else f"amazon-eks{suffix}-node-{k8s}-{version}"
            paths.append(
                (f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2{suffix}/{leaf}/image_id", arch, variant)
            )
    elif family == "bottlerocket":
        leaf = "latest" if latest else version.removeprefix("v")
        for nvidia, arch, variant in BOTTLEROCKET_IMAGES:
            paths.append((f"/aws/service/bottlerocket/aws-k8s-{k8s}{nvidia}/{arch}/{leaf}/image_id", arch, variant))
    elif family in [f"windows{year}" for year in WINDOWS_YEARS]:
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
