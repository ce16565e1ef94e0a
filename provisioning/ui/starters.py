"""Starting points for a new NodePool, EC2NodeClass or NodeOverlay: seed-style manifests
people copy and adapt, and a blank skeleton. Each starter is a YAML file next to this module, so its
comments reach the editor as written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioning import crd
from provisioning.crd.manifest import dump_yaml

FOLDER = Path(__file__).resolve().parent / "starters"
BLANK = "blank"


@dataclass(frozen=True)
class Starter:
    slug: str
    kind: str
    title: str
    description: str

    @property
    def text(self) -> str:
        if self.slug == BLANK:
            return blank_manifest(self.kind)
        return (FOLDER / f"{self.slug}.yaml").read_text()


STARTERS = (
    Starter(
        "nodepool-general",
        "NodePool",
        "General purpose",
        "Spot and on-demand, amd64 and arm64, c/m/r instances, consolidated when underused",
    ),
    Starter(
        "nodepool-graviton",
        "NodePool",
        "Graviton (arm64)",
        "arm64 only, generation 7 and later, weighted to be tried first",
    ),
    Starter(
        "nodepool-gpu",
        "NodePool",
        "NVIDIA GPU",
        "On-demand g and p instances, tainted nvidia.com/gpu so only GPU pods land there",
    ),
    Starter(
        "ec2nodeclass-al2023",
        "EC2NodeClass",
        "Amazon Linux 2023",
        "The latest AL2023 AMI, subnets and security groups found by the cluster's discovery tag",
    ),
    Starter(
        "nodeoverlay-savings-plan",
        "NodeOverlay",
        "Compute Savings Plan, 27% off on-demand for these families",
        "On-demand m7i, c7i and r7i priced 27% below list, so they are compared at what you pay",
    ),
    Starter(
        "nodeoverlay-licence",
        "NodeOverlay",
        "Licence surcharge per vCPU",
        "$0.02 per vCPU-hour added to the 4-vCPU types of one NodePool; one overlay per vCPU count",
    ),
)


def starters_for(kind: str) -> list[Starter]:
    return [s for s in STARTERS if s.kind == kind]


def find(kind: str, slug: str | None) -> Starter | None:
    """The starter ``slug`` of ``kind``; no slug (or ``blank``) means the blank skeleton."""
    if not slug or slug == BLANK:
        return Starter(BLANK, kind, "Blank", "")
    return next((s for s in STARTERS if s.kind == kind and s.slug == slug), None)


def blank_manifest(kind: str) -> str:
    api_version = crd.KINDS[kind].api_version
    return dump_yaml([{"apiVersion": api_version, "kind": kind, "metadata": {"name": ""}, "spec": {}}])
