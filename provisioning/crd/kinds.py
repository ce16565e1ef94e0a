"""The custom resource kinds karpweb serves, each described once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provisioning.crd import ec2nodeclass, nodeoverlay, nodepool
from provisioning.crd.schema import Object, Walk


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str
    short_names: tuple[str, ...]
    spec: Object
    status: Object
    spec_required: bool
    runtime_validate: Callable[[dict[str, Any], Walk], None]
    printer_columns: tuple[dict[str, Any], ...]
    # The scale subresource (``kubectl scale``), as upstream's CRD has it; None: none.
    scale: dict[str, str] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}"


NODEPOOL = Kind(
    group=nodepool.GROUP,
    version=nodepool.VERSION,
    kind=nodepool.KIND,
    plural=nodepool.PLURAL,
    short_names=(),
    spec=nodepool.SPEC,
    status=nodepool.STATUS,
    spec_required=True,
    runtime_validate=nodepool.runtime_validate,
    printer_columns=(
        {"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"},
        {"name": "Nodes", "type": "string", "jsonPath": ".status.resources.nodes"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1},
        {"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1},
        {"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1},
    ),
    # Static NodePools: ``kubectl scale nodepool X --replicas=N`` sets spec.replicas; status.nodes
    # is the NodePool's NodeClaims (services.static.write_status).
    scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"},
)

EC2NODECLASS = Kind(
    group=ec2nodeclass.GROUP,
    version=ec2nodeclass.VERSION,
    kind=ec2nodeclass.KIND,
    plural=ec2nodeclass.PLURAL,
    short_names=("ec2nc", "ec2ncs"),
    spec=ec2nodeclass.SPEC,
    status=ec2nodeclass.STATUS,
    spec_required=False,
    runtime_validate=ec2nodeclass.runtime_validate,
    printer_columns=(
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Role", "type": "string", "jsonPath": ".spec.role", "priority": 1},
    ),
)

NODEOVERLAY = Kind(
    group=nodeoverlay.GROUP,
    version=nodeoverlay.VERSION,
    kind=nodeoverlay.KIND,
    plural=nodeoverlay.PLURAL,
    short_names=("overlays",),
    spec=nodeoverlay.SPEC,
    status=nodeoverlay.STATUS,
    spec_required=True,
    runtime_validate=nodeoverlay.runtime_validate,
    printer_columns=(
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1},
    ),
)

KINDS = {k.kind: k for k in (NODEPOOL, EC2NODECLASS, NODEOVERLAY)}
BY_PLURAL = {k.plural: k for k in KINDS.values()}
