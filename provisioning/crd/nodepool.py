"""NodePool, karpenter.sh/v1: schema, defaults, CEL rules and runtime rules.

Rule numbers in comments refer to Part I §5.3 of the Karpenter reference. Upstream's
runtime rules (C) only make a NodePool "not Ready"; here they are errors at admission,
so a mistake is caught by ``kubectl apply`` rather than discovered later.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Set
from typing import Any

from provisioning.crd import labels as L
from provisioning.crd.schema import (
    Array,
    Check,
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
VERSION = "v1"
KIND = "NodePool"
PLURAL = "nodepools"

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
INTEGER_OPERATORS = ("Gt", "Lt", "Gte", "Lte")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CONSOLIDATION_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced")
DISRUPTION_REASONS = ("Underutilized", "Empty", "Drifted")

DURATION_OR_NEVER = r"^(([0-9]+(s|m|h))+|Never)$"
DURATION = r"^([0-9]+(s|m|h))+$"
BUDGET_NODES = r"^((100|[0-9]{1,2})%|[0-9]+)$"
BUDGET_SCHEDULE = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
BUDGET_DURATION = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"

# The v1beta1 name, used by the seed and by many manifests still in the wild.
LEGACY_POLICY_WARNING = 'consolidationPolicy "WhenUnderutilized" is the v1beta1 name; it means WhenEmptyOrUnderutilized'
LEGACY_POLICIES = {"WhenUnderutilized": "WhenEmptyOrUnderutilized"}


def _karpenter_domain_ok(key: str) -> bool:
    return key in (L.CAPACITY_TYPE, L.NODEPOOL) or not key.split("/", 1)[0].endswith("karpenter.sh")


KARPENTER_DOMAIN_RULE = (
    'self in ["karpenter.sh/capacity-type","karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")'
)


def _int_value(requirement: dict[str, Any]) -> bool:
    values = requirement.get("values") or []
    # Parsed like CEL int() / Go strconv.Atoi (optional sign, ASCII digits, int64): Python's
    # int() would also take "1_000", " 5" and 20-digit numbers, which upstream rejects.
    if len(values) != 1 or not re.fullmatch(r"[+-]?[0-9]+", values[0]):
        return False
    return 0 <= int(values[0]) < 2**63


def _bounded(check: Check, limit: int) -> Check:
    """A list or map rule that stays quiet past the node's maxItems/maxProperties.

    The schema has already said "Too many" there, and since rules run below structural
    errors, 10,000 requirements would otherwise also earn 10,000 rule errors.
    """

    def bounded(value: Any) -> Any:
        return True if len(value) > limit else check(value)

    return bounded


def _taint(description: str) -> Object:
    return Object(
        description=description,
        properties={
            "key": String(min_length=1, pattern=L.QUALIFIED_NAME_PATTERN),
            "value": String(pattern=L.QUALIFIED_NAME_PATTERN),
            "effect": String(enum=TAINT_EFFECTS),
            "timeAdded": String(format="date-time"),
        },
        required=("key", "effect"),
    )


REQUIREMENT = Object(
    properties={
        "key": String(
            max_length=316,
            pattern=L.QUALIFIED_NAME_PATTERN,
            rules=(
                Rule(KARPENTER_DOMAIN_RULE, 'label domain "karpenter.sh" is restricted', _karpenter_domain_ok),  # 26
                Rule(
                    'self != "karpenter.sh/nodepool"',
                    'label "karpenter.sh/nodepool" is restricted',
                    lambda k: k != L.NODEPOOL,
                ),  # 27
                Rule(
                    'self != "kubernetes.io/hostname"',
                    'label "kubernetes.io/hostname" is restricted',
                    lambda k: k != L.HOSTNAME,
                ),  # 28
            ),
        ),
        "operator": String(enum=OPERATORS),
        "values": Array(items=String()),
        "minValues": Integer(minimum=1, maximum=50),
    },
    required=("key", "operator"),
)

REQUIREMENTS = Array(
    items=REQUIREMENT,
    max_items=100,
    rules=(
        Rule(  # 29
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            "requirements with operator 'In' must have a value defined",
            _bounded(each(lambda x: x["operator"] != "In" or len(x.get("values") or []) != 0), 100),
        ),
        Rule(  # 30
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || "
            "x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            _bounded(each(lambda x: x["operator"] not in INTEGER_OPERATORS or _int_value(x)), 100),
        ),
        Rule(  # 31
            "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            _bounded(
                each(
                    lambda x: (
                        not (x["operator"] == "In" and has(x, "minValues"))
                        or len(x.get("values") or []) >= x["minValues"]
                    )
                ),
                100,
            ),
        ),
    ),
)

TEMPLATE_LABELS = Map(
    values=String(max_length=63, pattern=L.LABEL_VALUE_PATTERN),
    max_properties=100,
    rules=(
        Rule(  # 32
            'self.all(x, x in ["karpenter.sh/capacity-type","karpenter.sh/nodepool"] || '
            '!x.find("^([^/]+)").endsWith("karpenter.sh"))',
            'label domain "karpenter.sh" is restricted',
            _bounded(each_key(_karpenter_domain_ok), 100),
        ),
        Rule(
            'self.all(x, x != "karpenter.sh/nodepool")',
            'label "karpenter.sh/nodepool" is restricted',
            _bounded(each_key(lambda k: k != L.NODEPOOL), 100),
        ),  # 33
        Rule(
            'self.all(x, x != "kubernetes.io/hostname")',
            'label "kubernetes.io/hostname" is restricted',
            _bounded(each_key(lambda k: k != L.HOSTNAME), 100),
        ),  # 34
    ),
)

NODE_CLASS_REF = Object(
    properties={
        "group": String(
            pattern=r"^[^/]*$", rules=(Rule("self != ''", "group may not be empty", lambda v: v != ""),)
        ),  # 21
        "kind": String(rules=(Rule("self != ''", "kind may not be empty", lambda v: v != ""),)),  # 22
        "name": String(rules=(Rule("self != ''", "name may not be empty", lambda v: v != ""),)),  # 23
    },
    required=("group", "kind", "name"),
    rules=(
        Rule(
            "self.group == oldSelf.group",
            "nodeClassRef.group is immutable",
            lambda new, old: new.get("group") == old.get("group"),
            transition=True,
        ),  # 24
        Rule(
            "self.kind == oldSelf.kind",
            "nodeClassRef.kind is immutable",
            lambda new, old: new.get("kind") == old.get("kind"),
            transition=True,
        ),  # 25
    ),
)

BUDGET = Object(
    properties={
        "nodes": String(default="10%", pattern=BUDGET_NODES),
        "schedule": String(pattern=BUDGET_SCHEDULE),
        "duration": String(pattern=BUDGET_DURATION),
        "reasons": Array(items=String(enum=DISRUPTION_REASONS), max_items=50, list_type="set"),
    },
    required=("nodes",),
)

DISRUPTION = Object(
    default={"consolidateAfter": "0s"},
    properties={
        "consolidateAfter": String(default="0s", pattern=DURATION_OR_NEVER),
        "consolidationPolicy": String(
            default="WhenEmptyOrUnderutilized",
            enum=CONSOLIDATION_POLICIES,
            tolerated={"WhenUnderutilized": LEGACY_POLICY_WARNING},
        ),
        "budgets": Array(
            items=BUDGET,
            max_items=50,
            default=[{"nodes": "10%"}],
            rules=(
                Rule(
                    "self.all(x, has(x.schedule) == has(x.duration))",
                    "'schedule' must be set with 'duration'",
                    _bounded(each(lambda x: has(x, "schedule") == has(x, "duration")), 50),
                ),  # 35
            ),
        ),
    },
)

SPEC = Object(
    properties={
        "template": Object(
            properties={
                "metadata": Object(properties={"labels": TEMPLATE_LABELS, "annotations": Map(values=String())}),
                "spec": Object(
                    properties={
                        "nodeClassRef": NODE_CLASS_REF,
                        "requirements": REQUIREMENTS,
                        "taints": Array(items=_taint("taints applied to every node")),
                        "startupTaints": Array(items=_taint("taints removed by a daemon after startup")),
                        "expireAfter": String(default="720h", pattern=DURATION_OR_NEVER),
                        "terminationGracePeriod": String(pattern=DURATION),
                    },
                    required=("nodeClassRef", "requirements"),
                ),
            },
            required=("spec",),
        ),
        "disruption": DISRUPTION,
        "limits": Map(values=IntOrString(pattern=L.QUANTITY_PATTERN)),
        "weight": Integer(minimum=1, maximum=100, format="int32"),
        "replicas": Integer(minimum=0, format="int64"),
    },
    required=("template",),
    rules=(
        Rule(  # 36
            "has(self.replicas) == has(oldSelf.replicas)",
            "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
            lambda new, old: has(new, "replicas") == has(old, "replicas"),
            transition=True,
        ),
        Rule(  # 37
            "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
            "(size(self.limits) == 1 && 'nodes' in self.limits))",
            "only 'limits.nodes' is supported on static NodePools",
            lambda s: (
                not has(s, "replicas") or not s.get("limits") or (len(s["limits"]) == 1 and "nodes" in s["limits"])
            ),
        ),
        Rule(  # 38
            "!has(self.replicas) || !has(self.weight)",
            "'weight' is not supported on static NodePools",
            lambda s: not has(s, "replicas") or not has(s, "weight"),
        ),
    ),
)

STATUS = Object(preserve_unknown=True)


# ------------------------------------------------------------ runtime rules (C)


def runtime_validate(spec: dict[str, Any], walk: Walk, *, catalog_labels: Mapping[str, Set[str]] | None = None) -> None:
    """Upstream's ``RuntimeValidate`` (rules 39-46), plus the warnings we add.

    ``catalog_labels`` (label key → every value some instance type has) lets a requirement
    that matches no instance type earn a warning with a suggestion.
    """
    # The schema pass has already reported wrongly typed parts (``template: [1]``): skip them.
    template = _dict(spec.get("template"))
    labels = _dict(_dict(template.get("metadata")).get("labels"))
    # Like the API server, never walk a map or list over its bound (rules 4 and 10 already
    # said "Too many"): 10,000 items must not give 10,000 more errors.
    if len(labels) > TEMPLATE_LABELS.max_properties:
        labels = {}
    reported = {e.path for e in walk.errors}
    for key, value in labels.items():
        if not isinstance(key, str):
            continue
        path = f"spec.template.metadata.labels[{key_path(key)}]"
        for problem in L.qualified_name_errors(key):  # 40
            walk.error(path, f"Invalid value: {show(key)}: {problem}")
        # Only labels the schema's pattern passed, so a bad value is reported once.
        if isinstance(value, str) and path not in reported:  # 41
            for problem in L.label_value_errors(value):
                walk.error(path, f"Invalid value: {show(value)}: {problem}")
        if L.is_restricted_label(key) and _karpenter_domain_ok(key) and key != L.HOSTNAME:  # 42
            walk.error(path, _restricted(key))
    tspec = _dict(template.get("spec"))
    _validate_taints(tspec, walk)
    requirements = tspec.get("requirements")
    if not isinstance(requirements, list) or len(requirements) > REQUIREMENTS.max_items:
        requirements = []  # rule 4 already reported "Too many"
    for i, requirement in enumerate(requirements):
        _validate_requirement(requirement, f"spec.template.spec.requirements[{i}]", walk, catalog_labels)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _short(value: str, limit: int = 24) -> str:
    """A quoted value cut short, so that every warning stays under 120 characters."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def _restricted(key: str) -> str:
    return (
        f"Invalid value: {show(key)}: label domain is restricted; use a well-known label "
        f"or a custom label outside {', '.join(L.RESTRICTED_LABEL_DOMAINS)}"
    )


def _validate_taints(tspec: dict[str, Any], walk: Walk) -> None:  # 43
    seen: dict[tuple[str, str], str] = {}
    for field in ("taints", "startupTaints"):
        taints = tspec.get(field)
        if not isinstance(taints, list):
            continue  # e.g. ``taints: 5``: the schema reports it
        for i, taint in enumerate(taints):
            if not isinstance(taint, dict):
                continue
            path = f"spec.template.spec.{field}[{i}]"
            key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect", "")
            if isinstance(key, str) and key:
                for problem in L.qualified_name_errors(key):
                    walk.error(f"{path}.key", f"Invalid value: {show(key)}: {problem}")
            if isinstance(value, str) and value:
                for problem in L.qualified_name_errors(value):
                    walk.error(f"{path}.value", f"Invalid value: {show(value)}: {problem}")
            if not isinstance(key, str) or not isinstance(effect, str):
                continue
            pair = (key, effect)
            if pair in seen:
                walk.error(
                    path,
                    f"Duplicate value: taint {key}:{effect} is already set at {seen[pair]}; "
                    "each key and effect may appear once across taints and startupTaints",
                )
            else:
                seen[pair] = path


def _validate_requirement(  # 44-46
    requirement: Any, path: str, walk: Walk, catalog_labels: Mapping[str, Set[str]] | None = None
) -> None:
    if not isinstance(requirement, dict) or not isinstance(requirement.get("key"), str):
        return
    raw_key = requirement["key"]
    key = L.normalize_key(raw_key)
    if key != raw_key:
        walk.warnings.append(f"requirement key {raw_key} is deprecated; it means {key}")
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if not isinstance(values, list):
        return
    if L.is_restricted_label(key) and _karpenter_domain_ok(key) and key != L.HOSTNAME:
        walk.error(f"{path}.key", _restricted(key))
    for problem in L.qualified_name_errors(key):
        walk.error(f"{path}.key", f"Invalid value: {show(raw_key)}: {problem}")
    for j, value in enumerate(values):
        if isinstance(value, str):
            for problem in L.label_value_errors(value):
                walk.error(f"{path}.values[{j}]", f"Invalid value: {show(value)}: {problem}")
    if operator in ("Exists", "DoesNotExist") and values:
        # Upstream admits this (rule 44 has no such check); the values mean nothing, so
        # a warning says so.
        walk.warnings.append(f"requirement {_short(key)}: operator {operator} takes no values; they are ignored")
    if key == L.CAPACITY_TYPE and operator == "In":  # 45
        valid = [v for v in values if v in L.CAPACITY_TYPES]
        invalid = [v for v in values if v not in L.CAPACITY_TYPES]
        allowed = ", ".join(L.CAPACITY_TYPES)
        if values and not valid:
            walk.error(f"{path}.values", f"Invalid value: no valid values found; supported: {allowed}")
        elif isinstance(requirement.get("minValues"), int) and len(valid) < requirement["minValues"]:
            walk.error(f"{path}.values", "Invalid value: not enough valid values found for minValues")
        elif invalid:
            # The value is cut short so the warning stays under 120 characters.
            walk.warnings.append(f"{key} value {_short(invalid[0])} is not one of {allowed}; it is ignored")
    if catalog_labels is not None:
        if operator in ("In", "NotIn"):
            warning = catalog_warning(key, operator, values, catalog_labels)
            if warning:
                walk.warnings.append(warning)
    elif key == "karpenter.k8s.aws/instance-family" and operator in ("In", "NotIn"):
        # Without a catalog: families always carry a generation digit (m5, c7g); "m" is a category.
        categories = [v for v in values if isinstance(v, str) and not re.search(r"\d", v)]
        if categories:
            walk.warnings.append(
                f"instance-family {_short(categories[0])} has no generation; "
                "did you mean karpenter.k8s.aws/instance-category?"
            )


# ------------------------------------------------------------ the catalog-aware warning

AWS_LABEL = "karpenter.k8s.aws/"
# What a catalog label's values are called: "no instance family is named m, c or r".
CATALOG_NOUNS = {
    L.INSTANCE_TYPE: "instance type",
    AWS_LABEL + "instance-family": "instance family",
    AWS_LABEL + "instance-category": "instance category",
    AWS_LABEL + "instance-size": "instance size",
    AWS_LABEL + "instance-generation": "instance generation",
    AWS_LABEL + "instance-cpu-manufacturer": "CPU manufacturer",
    AWS_LABEL + "instance-gpu-name": "GPU",
    AWS_LABEL + "instance-gpu-manufacturer": "GPU manufacturer",
    AWS_LABEL + "instance-accelerator-name": "accelerator",
    AWS_LABEL + "instance-accelerator-manufacturer": "accelerator manufacturer",
    AWS_LABEL + "instance-hypervisor": "hypervisor",
    L.ARCH: "architecture",
    L.ZONE: "zone",
    "topology.k8s.aws/zone-id": "zone id",
    L.REGION: "region",
}
# Labels naming the same things at another grain: a value that fits none of one key is
# often meant for another (instance-family In [m] → instance-category), in this order.
RELATED_LABELS = (
    (
        AWS_LABEL + "instance-category",
        AWS_LABEL + "instance-family",
        L.INSTANCE_TYPE,
        AWS_LABEL + "instance-size",
        AWS_LABEL + "instance-generation",
    ),
    (L.ZONE, "topology.k8s.aws/zone-id"),
)
VALUE_ALIASES = {
    L.ARCH: {
        "x86_64": "amd64",
        "x86-64": "amd64",
        "x86": "amd64",
        "intel": "amd64",
        "aarch64": "arm64",
        "arm": "arm64",
        "graviton": "arm64",
    },
}
MAX_WARNING = 119


def catalog_warning(key: str, operator: str, values: list[Any], catalog_labels: Mapping[str, Set[str]]) -> str | None:
    """A warning when an In/NotIn requirement on a catalog label names no value any instance
    type has (upstream semantics: not an error; In then matches nothing, NotIn excludes
    nothing), with a suggestion: the label the values belong to, a spelling, an alias."""
    known = catalog_labels.get(key)
    named = [v for v in values if isinstance(v, str)]
    if not known or not named or any(v in known for v in named):
        return None
    noun = CATALOG_NOUNS.get(key)
    for limit in (20, 10, 6):
        shown = _some(named, limit)
        head = f"no {noun} is named {shown}" if noun else f"no instance type has {key.rsplit('/', 1)[-1]} {shown}"
        if operator == "NotIn":
            head += ", so NotIn excludes nothing"
        suggestion = _suggestion(key, named, known, catalog_labels, limit)
        message = f"{head}; did you mean {suggestion}?" if suggestion else f"{head} ({_examples(known, limit)})"
        if len(message) <= MAX_WARNING:
            return message
    return message[: MAX_WARNING - 3] + "..."


def _suggestion(
    key: str, values: list[str], known: Set[str], catalog_labels: Mapping[str, Set[str]], limit: int
) -> str | None:
    for group in RELATED_LABELS:
        if key in group:
            for other in group:
                if other != key and all(v in catalog_labels.get(other, ()) for v in values):
                    return other
    aliases = VALUE_ALIASES.get(key, {})
    mapped = [aliases.get(v.lower(), v.lower()) for v in values]
    if all(v in known for v in mapped):
        return _some(list(dict.fromkeys(mapped)), limit)
    close = [match for v in values for match in difflib.get_close_matches(v, sorted(known), n=1, cutoff=0.6)]
    if close:
        return _some(list(dict.fromkeys(close)), limit)
    return None


def _some(values: list[str], limit: int, most: int = 3) -> str:
    """``m, c or r``; ``a, b, c and 2 more``; each value cut to ``limit`` characters."""
    cut = [v if len(v) <= limit else v[: limit - 3] + "..." for v in values[:most]]
    if len(values) > most:
        return f"{', '.join(cut)} and {len(values) - most} more"
    return cut[0] if len(cut) == 1 else f"{', '.join(cut[:-1])} or {cut[-1]}"


def _examples(known: Set[str], limit: int) -> str:
    sample = sorted(v for v in known if v)[:3]
    return "values include " + ", ".join(v if len(v) <= limit else v[: limit - 3] + "..." for v in sample)


def effective_consolidation_policy(spec: dict[str, Any]) -> str:
    # An explicit null means the default too.
    policy = (spec.get("disruption") or {}).get("consolidationPolicy") or "WhenEmptyOrUnderutilized"
    return LEGACY_POLICIES.get(policy, policy)
