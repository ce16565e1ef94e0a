"""What-if: the plan for workloads someone pastes, against the policies in force, before
anything is applied.

The documents are the ``simulate`` kinds (Pod, Deployment, ..., Node, NodePool,
EC2NodeClass, NodeOverlay). They are planned with the policies of the database, and a
NodePool, EC2NodeClass or NodeOverlay in the input replaces the current one of the same
name, so an edit (a Savings Plan's discount, say) can be tried before it is made. The
validator, the solver and the catalog are the ones provisioning uses
(``simulate.plan_documents`` with ``load_catalog()``). Nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from provisioning.models import EC2NodeClass, NodeOverlay, NodePool
from provisioning.scheduling.workloads import POLICY_KINDS
from provisioning.services.catalog import load_catalog
from provisioning.services.simulate import HOURS_PER_MONTH, plan_documents, plan_to_json

# A web request plans at most this many pods (a few seconds of solving); manage.py simulate
# has no such limit.
MAX_PODS = 5_000
POLICY_MODELS = (EC2NodeClass, NodePool, NodeOverlay)


@dataclass(frozen=True)
class WhatIf:
    """The plan (``simulate.plan_to_json``'s shape), notes for people, and which policies
    it was planned with."""

    plan: dict[str, Any]
    notes: list[str]
    current: list[str]  # "NodePool general": policies of the database it used
    replaced: list[str]  # current policies the input replaced with its own

    @property
    def per_hour(self) -> float:
        return self.plan["totalPricePerHour"]

    @property
    def per_month(self) -> float:
        return self.per_hour * HOURS_PER_MONTH

    @property
    def pods(self) -> int:
        return self.plan["stats"]["pods"]

    @property
    def placed(self) -> list[dict[str, Any]]:
        """The nodes of the input that the plan puts pods on."""
        return [node for node in self.plan["existingNodes"] if node["pods"]]


def policies_in_force() -> list[str]:
    """``Kind name`` of every NodePool, EC2NodeClass and NodeOverlay a what-if plans with."""
    return [
        f"{model.crd_kind.kind} {name}"
        for model in POLICY_MODELS
        for name in model.objects.values_list("name", flat=True)
    ]


def plan_manifests(documents: Sequence[Any]) -> WhatIf:
    """Plan ``documents`` (parsed manifests) with the policies in force, the input's own
    policies replacing those of the same kind and name. Raises
    :class:`~provisioning.services.simulate.SimulateError` on invalid input."""
    given = {_identity(document) for document in documents}
    policies: list[dict[str, Any]] = []
    current: list[str] = []
    replaced: list[str] = []
    for model in POLICY_MODELS:
        for obj in model.objects.all():
            kind = model.crd_kind.kind
            if (kind, obj.name) in given:
                replaced.append(f"{kind} {obj.name}")
            else:
                current.append(f"{kind} {obj.name}")
                policies.append(obj.to_manifest(server_fields=False))
    # The input first: "document 3" in an error is the third of the input. The solver ranks
    # NodePools by weight and name, not by their order here.
    snapshot, plan, notes = plan_documents([*documents, *policies], catalog=load_catalog(), max_pods=MAX_PODS)
    return WhatIf(plan=plan_to_json(plan, snapshot), notes=notes, current=current, replaced=replaced)


def _identity(document: Any) -> tuple[str, str] | None:
    """``(kind, name)`` of a policy document; None for anything else (malformed ones are
    the validator's to report)."""
    if not isinstance(document, dict):
        return None
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if document.get("kind") not in POLICY_KINDS or not isinstance(name, str):
        return None
    return document["kind"], name
