"""NodeOverlay, karpenter.sh/v1alpha1: schema, CEL rules and runtime rules.

The schema is upstream's ``pkg/apis/crds/karpenter.sh_nodeoverlays.yaml`` (kubernetes-sigs/
karpenter at ``22664681``), its CEL rules with their published expressions and messages, and
``RuntimeValidate`` (``nodeoverlay_validation.go``: every requirement as
``v1.ValidateRequirement`` checks it, no well-known resource in ``capacity``), which here is
an error at admission rather than a ``ValidationSucceeded=False`` condition later.

What an overlay does to the catalog (weight, conflicts, prices, capacity) is
``provisioning.scheduling.overlays``; this module only says what a valid one looks like.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from provisioning.crd import labels as L
from provisioning.crd import nodepool
from provisioning.crd.schema import (
    Array,
    Integer,
    IntOrString,
    Map,
    Object,
    Rule,
    String,
    Walk,
    each,
    each_key,
    has,
    key_path,
    show,
)

GROUP = "karpenter.sh"
VERSION = "v1alpha1"
KIND = "NodeOverlay"
PLURAL = "nodeoverlays"

OPERATORS = nodepool.OPERATORS
INTEGER_OPERATORS = nodepool.INTEGER_OPERATORS
MAX_REQUIREMENTS = 100
MIN_WEIGHT, MAX_WEIGHT = 1, 10000
# Upstream's v1.WellKnownResources: an overlay may only add extended resources.
WELL_KNOWN_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")

PRICE_PATTERN = r"^\d+(\.\d+)?$"
PRICE_ADJUSTMENT_PATTERN = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"

REQUIREMENT = Object(
    description=(
        "A node selector requirement is a selector that contains values, a key, an operator that relates "
        "the key and values to have at least that many values."
    ),
    properties={
        "key": String(
            description="The label key that the selector applies to.",
            max_length=316,
            pattern=L.QUALIFIED_NAME_PATTERN,
            rules=(
                Rule(
                    nodepool.KARPENTER_DOMAIN_RULE,
                    'label domain "karpenter.sh" is restricted',
                    nodepool._karpenter_domain_ok,
                ),
                Rule(
                    'self != "kubernetes.io/hostname"',
                    'label "kubernetes.io/hostname" is restricted',
                    lambda k: k != L.HOSTNAME,
                ),
            ),
        ),
        "operator": String(
            description=(
                "Represents a key's relationship to a set of values. "
                "Valid operators are In, NotIn, Exists, DoesNotExist. Gt, Lt, Gte, and Lte."
            ),
            enum=OPERATORS,
        ),
        "values": Array(
            description=(
                "An array of string values. If the operator is In or NotIn, the values array must be non-empty. "
                "If the operator is Exists or DoesNotExist, the values array must be empty. If the operator is "
                "Gt, Lt, Gte, or Lte, the values array must have a single element, which will be interpreted "
                "as an integer."
            ),
            items=String(),
        ),
    },
    required=("key", "operator"),
)


def _values(x: dict[str, Any]) -> list[Any]:
    return x.get("values") or []


REQUIREMENTS = Array(
    description=(
        "requirements constrain when this NodeOverlay is applied during scheduling simulations. These "
        "requirements can match: well-known labels (e.g., node.kubernetes.io/instance-type, "
        "karpenter.sh/nodepool) and custom labels from NodePool's spec.template.labels"
    ),
    items=REQUIREMENT,
    max_items=MAX_REQUIREMENTS,
    rules=(
        Rule(
            "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
            "requirements with operator 'NotIn' must have a value defined",
            nodepool._bounded(each(lambda x: x["operator"] != "NotIn" or len(_values(x)) != 0), MAX_REQUIREMENTS),
        ),
        Rule(
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            "requirements with operator 'In' must have a value defined",
            nodepool._bounded(each(lambda x: x["operator"] != "In" or len(_values(x)) != 0), MAX_REQUIREMENTS),
        ),
        Rule(
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || "
            "x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            # Upstream's NodeOverlay message has no comma before "or" (the NodePool's has one).
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
            nodepool._bounded(
                each(lambda x: x["operator"] not in INTEGER_OPERATORS or nodepool._int_value(x)), MAX_REQUIREMENTS
            ),
        ),
    ),
)

SPEC = Object(
    properties={
        "requirements": REQUIREMENTS,
        "priceAdjustment": String(
            description=(
                "PriceAdjustment specifies the price change for matching instance types. Accepts either: "
                "a fixed price modifier (e.g., -0.5, +1.2) or a percentage modifier (e.g., +10% for increase, "
                "-15% for decrease)"
            ),
            pattern=PRICE_ADJUSTMENT_PATTERN,
            hint="a signed change: +0.05 or -0.5 (USD/hour), or +10% or -27% (at least -100%)",
        ),
        "price": String(
            description="Price specifies amount for an instance types that match the specified labels.",
            pattern=PRICE_PATTERN,
            hint="an unsigned number of USD/hour, such as 0.42 or 3",
        ),
        "capacity": Map(
            description=(
                "Capacity adds extended resources only, and does not replace any existing resources. These "
                "extended resources are appended to the node's existing resource list. Note: This field does "
                "not modify or override standard resources like cpu, memory, ephemeral-storage, or pods."
            ),
            values=IntOrString(pattern=L.QUANTITY_PATTERN),
            rules=(
                Rule(
                    "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
                    "invalid resource restricted",
                    each_key(lambda k: k not in WELL_KNOWN_RESOURCES),
                ),
            ),
        ),
        "weight": Integer(
            description=(
                "Weight defines the priority of this NodeOverlay when overriding node attributes. NodeOverlays "
                "with higher numerical weights take precedence over those with lower weights. If no weight is "
                "specified, the NodeOverlay is treated as having a weight of 0. When multiple NodeOverlays have "
                "identical weights, they are merged in alphabetical order."
            ),
            minimum=MIN_WEIGHT,
            maximum=MAX_WEIGHT,
            format="int32",
        ),
    },
    required=("requirements",),
    rules=(
        Rule(
            "!has(self.price) || !has(self.priceAdjustment)",
            "cannot set both 'price' and 'priceAdjustment'",
            lambda s: not has(s, "price") or not has(s, "priceAdjustment"),
        ),
    ),
)

STATUS = Object(preserve_unknown=True)


# ------------------------------------------------------------ runtime rules


def runtime_validate(spec: dict[str, Any], walk: Walk, *, catalog_labels: Mapping[str, Set[str]] | None = None) -> None:
    """Upstream's ``RuntimeValidate``: each requirement as ``v1.ValidateRequirement`` checks a
    NodePool's (restricted domains, qualified keys, label values, known capacity types), and
    no well-known resource in ``capacity`` (the CEL rule already says so). Extended resource
    names must be qualified names, as the API server requires of a ResourceList."""
    requirements = spec.get("requirements")
    if isinstance(requirements, list) and len(requirements) <= MAX_REQUIREMENTS:
        for i, requirement in enumerate(requirements):
            nodepool._validate_requirement(requirement, f"spec.requirements[{i}]", walk, catalog_labels)
    capacity = spec.get("capacity")
    if isinstance(capacity, dict):
        for name in capacity:
            if not isinstance(name, str) or name in WELL_KNOWN_RESOURCES:
                continue
            for problem in L.qualified_name_errors(name):
                walk.error(
                    f"spec.capacity[{key_path(name)}]",
                    f"Invalid value: {show(name)}: {problem}; an extended resource is named like example.com/device",
                )


def weight_of(spec: Mapping[str, Any]) -> int:
    """The weight overlays are ordered by: unset counts as 0, as upstream's ``lo.FromPtr``."""
    weight = spec.get("weight")
    return int(weight) if isinstance(weight, int | float) and not isinstance(weight, bool) else 0
