"""The CustomResourceDefinitions, rendered from the same schema the validator walks.

Differences from upstream's CRDs are deliberate and few: the NodePool
``consolidationPolicy`` enum also admits the v1beta1 name ``WhenUnderutilized`` (our
webhook warns about it), and the EC2NodeClass ``kubelet`` block is typed as in v1.14.1.
"""

from __future__ import annotations

from typing import Any

from provisioning.crd.kinds import KINDS, Kind
from provisioning.crd.schema import Object


def crd_manifest(kind: Kind) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": kind.spec.openapi(),
        "status": Object(preserve_unknown=True).openapi(),
    }
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if kind.spec_required:
        schema["required"] = ["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kind.resource},
        "spec": {
            "group": kind.group,
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.kind.lower(),
                "categories": ["karpenter"],
                **({"shortNames": list(kind.short_names)} if kind.short_names else {}),
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {**({"scale": dict(kind.scale)} if kind.scale else {}), "status": {}},
                    "additionalPrinterColumns": [dict(c) for c in kind.printer_columns],
                }
            ],
        },
    }


def all_crds() -> dict[str, dict[str, Any]]:
    """File name → CRD manifest, as kept in deploy/crds/."""
    return {f"{k.group}_{k.plural}.yaml": crd_manifest(k) for k in KINDS.values()}
