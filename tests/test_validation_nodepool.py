"""NodePool validation: every numbered rule of reference Part I §5.3, defaults, transitions.

Each of the 46 rules has at least one accepted and one rejected example (ids
``rule-NN-...``; accepted ones ``rule-NN-ok-...``). Rejections assert the exact field
path; for CEL rules (21-38) also the exact upstream message.

Plain pytest, no database:
``.venv/bin/python -m pytest tests/test_validation_nodepool.py -q -p no:django``.
"""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioning.crd import default, validate
from provisioning.crd import labels as L
from provisioning.crd.nodepool import effective_consolidation_policy

# ---------------------------------------------------------------- builders

NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}

MINIMAL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "general"},
    "spec": {"template": {"spec": {"nodeClassRef": NODE_CLASS_REF, "requirements": []}}},
}

DELETE = object()  # in a change, removes the key

SEED = Path(__file__).parent / "fixtures" / "seed" / "nodepool.yaml"

TS = "spec.template.spec"
REQ = f"{TS}.requirements"
REF = f"{TS}.nodeClassRef"
LABELS = "spec.template.metadata.labels"
BUDGETS = "spec.disruption.budgets"

MAX_WARNING = 120


def merge(base: Any, changes: dict[str, Any]) -> Any:
    """Deep-merge ``changes`` into a copy of ``base``: dicts merge, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def nodepool(**changes: Any) -> dict[str, Any]:
    """The minimal valid NodePool with ``changes`` deep-merged in (``DELETE`` removes)."""
    return merge(MINIMAL, changes)


def with_spec(**fields: Any) -> dict[str, Any]:
    return nodepool(spec=fields)


def with_template_spec(**fields: Any) -> dict[str, Any]:
    return nodepool(spec={"template": {"spec": fields}})


def with_ref(**fields: Any) -> dict[str, Any]:
    return with_template_spec(nodeClassRef=fields)


def with_requirements(*requirements: dict[str, Any]) -> dict[str, Any]:
    return with_template_spec(requirements=list(requirements))


def req(key: str, operator: str = "In", values: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        out["values"] = values
    out.update(extra)
    return out


def with_labels(labels: Any) -> dict[str, Any]:
    return nodepool(spec={"template": {"metadata": {"labels": labels}}})


def with_taints(taints: list[Any] | None = None, startup: list[Any] | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if taints is not None:
        fields["taints"] = taints
    if startup is not None:
        fields["startupTaints"] = startup
    return with_template_spec(**fields)


def with_disruption(**fields: Any) -> dict[str, Any]:
    return nodepool(spec={"disruption": fields})


def with_budgets(*budgets: dict[str, Any]) -> dict[str, Any]:
    return with_disruption(budgets=list(budgets))


def errors(result: Any) -> list[tuple[str, str]]:
    return [(e.path, e.message) for e in result.errors]


def messages_at(result: Any, path: str) -> list[str]:
    return [e.message for e in result.errors if e.path == path]


def load_seed() -> dict[str, Any]:
    return yaml.safe_load(SEED.read_text())


# Long keys built to the bounds of rule 6 (key maxLength 316) and rule 40 (prefix ≤ 253).
PREFIX_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
PREFIX_254 = PREFIX_253 + "d"
assert len(PREFIX_253) == 253
KEY_316 = PREFIX_253 + "/" + "n" * 62
KEY_317 = PREFIX_253 + "/" + "n" * 63
NAME_64 = "example.com/" + "n" * 64


# ---------------------------------------------------------------- the 46 rules


def accept(rule: int, slug: str, doc: dict[str, Any], old: dict[str, Any] | None = None) -> Any:
    return pytest.param(doc, old, id=f"rule-{rule:02d}-ok-{slug}")


def reject(
    rule: int,
    slug: str,
    doc: dict[str, Any],
    path: str,
    message: str,
    old: dict[str, Any] | None = None,
) -> Any:
    """A rejection: an error at exactly ``path`` whose message contains ``message``."""
    return pytest.param(doc, old, path, message, False, id=f"rule-{rule:02d}-{slug}")


def cel(
    rule: int,
    slug: str,
    doc: dict[str, Any],
    path: str,
    message: str,
    old: dict[str, Any] | None = None,
) -> Any:
    """A CEL rejection: an error at exactly ``path`` with exactly the upstream message."""
    return pytest.param(doc, old, path, message, True, id=f"rule-{rule:02d}-{slug}")


MSG_GROUP_EMPTY = "group may not be empty"
MSG_KIND_EMPTY = "kind may not be empty"
MSG_NAME_EMPTY = "name may not be empty"
MSG_GROUP_IMMUTABLE = "nodeClassRef.group is immutable"
MSG_KIND_IMMUTABLE = "nodeClassRef.kind is immutable"
MSG_DOMAIN = 'label domain "karpenter.sh" is restricted'
MSG_NODEPOOL = 'label "karpenter.sh/nodepool" is restricted'
MSG_HOSTNAME = 'label "kubernetes.io/hostname" is restricted'
MSG_IN_VALUES = "requirements with operator 'In' must have a value defined"
MSG_INT_VALUE = "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"
MSG_MIN_VALUES = "requirements with 'minValues' must have at least that many values specified in the 'values' field"
MSG_SCHEDULE = "'schedule' must be set with 'duration'"
MSG_STATIC_SWITCH = (
    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
)
MSG_STATIC_LIMITS = "only 'limits.nodes' is supported on static NodePools"
MSG_STATIC_WEIGHT = "'weight' is not supported on static NodePools"
MSG_RESTRICTED = "label domain is restricted"

OLD_STATIC = with_spec(replicas=2, limits={"nodes": 5})
OLD_DYNAMIC = nodepool()


ACCEPTED = [
    # A. OpenAPI
    accept(1, "spec-template-and-template-spec", nodepool()),
    accept(2, "empty-requirements", with_template_spec(requirements=[])),
    accept(3, "group-without-slash", with_ref(group="karpenter.k8s.aws", kind="EC2NodeClass", name="gpu")),
    accept(4, "100-requirements", with_requirements(*[req(f"example.com/k{i}", "Exists") for i in range(100)])),
    accept(5, "key-and-operator", with_requirements(req("example.com/team", "Exists"))),
    accept(6, "key-316-chars", with_requirements(req(KEY_316, "Exists"))),
    accept(6, "key-without-prefix", with_requirements(req("team", "In", ["a"]))),
    accept(
        7,
        "gte-and-lte",
        with_requirements(req("example.com/cpu", "Gte", ["4"]), req("example.com/mem", "Lte", ["64"])),
    ),
    accept(
        7,
        "all-eight-operators",
        with_requirements(
            req("example.com/a", "In", ["x"]),
            req("example.com/b", "NotIn", ["x"]),
            req("example.com/c", "Exists"),
            req("example.com/d", "DoesNotExist"),
            req("example.com/e", "Gt", ["1"]),
            req("example.com/f", "Lt", ["9"]),
            req("example.com/g", "Gte", ["1"]),
            req("example.com/h", "Lte", ["9"]),
        ),
    ),
    accept(8, "min-values-1", with_requirements(req("example.com/team", "In", ["a"], minValues=1))),
    accept(8, "min-values-50", with_requirements(req("example.com/team", "Exists", minValues=50))),
    accept(
        9,
        "values-longer-than-63-in-total",
        with_requirements(req("example.com/team", "In", [f"value-{i:020d}" for i in range(10)])),
    ),
    accept(10, "100-labels", with_labels({f"example.com/l{i}": "x" for i in range(100)})),
    accept(10, "any-label-key-shape", with_labels({"team": "a", "example.com/team": "A-b_c.9"})),
    accept(
        11,
        "full-taints",
        with_taints(
            [
                {
                    "key": "example.com/gpu",
                    "value": "true",
                    "effect": "NoSchedule",
                    "timeAdded": "2024-05-01T10:00:00Z",
                }
            ],
            [{"key": "example.com/init", "effect": "NoExecute"}],
        ),
    ),
    accept(12, "expire-after-never", with_template_spec(expireAfter="Never")),
    accept(12, "expire-after-compound", with_template_spec(expireAfter="1h30m15s")),
    accept(13, "termination-grace-period", with_template_spec(terminationGracePeriod="48h")),
    accept(14, "consolidate-after-never", with_disruption(consolidateAfter="Never")),
    accept(14, "consolidate-after-30s", with_disruption(consolidateAfter="30s")),
    accept(15, "balanced", with_disruption(consolidationPolicy="Balanced")),
    accept(15, "when-empty", with_disruption(consolidationPolicy="WhenEmpty")),
    accept(16, "50-budgets", with_budgets(*[{"nodes": "1"}] * 50)),
    accept(17, "nodes-forms", with_budgets({"nodes": "100%"}, {"nodes": "0"}, {"nodes": "5"}, {"nodes": "0%"})),
    accept(
        17,
        "schedule-duration-reasons",
        with_budgets(
            {"nodes": "0", "schedule": "@daily", "duration": "10m", "reasons": ["Drifted", "Empty"]},
            {
                "nodes": "20%",
                "schedule": "0 9 * * mon-fri",
                "duration": "8h30m",
                "reasons": ["Underutilized"],
            },
        ),
    ),
    accept(
        18,
        "quantities",
        with_spec(
            limits={
                "cpu": 1000,
                "memory": "1000Gi",
                "nvidia.com/gpu": "2",
                "ephemeral-storage": "1.5Ti",
                "pods": "5e3",
            }
        ),
    ),
    accept(19, "weight-1", with_spec(weight=1)),
    accept(19, "weight-100", with_spec(weight=100)),
    accept(20, "replicas-0", with_spec(replicas=0)),
    # B. CEL
    accept(21, "group", with_ref(group="karpenter.k8s.aws")),
    accept(22, "kind", with_ref(kind="EC2NodeClass")),
    accept(23, "name", with_ref(name="gpu")),
    accept(24, "same-group-name-mutable", with_ref(name="other"), old=nodepool()),
    accept(25, "same-kind", with_ref(name="other"), old=with_ref(name="default")),
    accept(26, "capacity-type", with_requirements(req("karpenter.sh/capacity-type", "In", ["spot"]))),
    accept(26, "karpenter-shop-domain", with_requirements(req("karpenter.shop/x", "Exists"))),
    accept(26, "karpenter-sh-in-name-part", with_requirements(req("example.com/karpenter.sh", "Exists"))),
    accept(27, "other-karpenter-sh-key", with_requirements(req("karpenter.sh/capacity-type", "Exists"))),
    accept(28, "kubernetes-io-os", with_requirements(req("kubernetes.io/os", "In", ["linux"]))),
    accept(29, "in-with-value", with_requirements(req("example.com/team", "In", ["a"]))),
    accept(29, "notin-without-values", with_requirements(req("example.com/team", "NotIn", []))),
    accept(30, "gt-zero", with_requirements(req("karpenter.k8s.aws/instance-cpu", "Gt", ["0"]))),
    accept(
        30,
        "lte-single-integer",
        with_requirements(req("karpenter.k8s.aws/instance-memory", "Lte", ["65536"])),
    ),
    accept(31, "min-values-met", with_requirements(req("example.com/team", "In", ["a", "b"], minValues=2))),
    accept(
        31,
        "min-values-notin-not-checked",
        with_requirements(req("example.com/team", "NotIn", ["a"], minValues=3)),
    ),
    accept(32, "capacity-type-label", with_labels({"karpenter.sh/capacity-type": "spot"})),
    accept(33, "other-nodepool-label", with_labels({"example.com/nodepool": "x"})),
    accept(34, "kubernetes-io-arch-label", with_labels({"kubernetes.io/arch": "amd64"})),
    accept(35, "schedule-with-duration", with_budgets({"nodes": "0", "schedule": "@weekly", "duration": "1h"})),
    accept(36, "static-stays-static", with_spec(replicas=5, limits={"nodes": 5}), old=OLD_STATIC),
    accept(36, "dynamic-stays-dynamic", with_spec(weight=10), old=OLD_DYNAMIC),
    accept(37, "static-nodes-limit", with_spec(replicas=3, limits={"nodes": 3})),
    accept(37, "static-empty-limits", with_spec(replicas=3, limits={})),
    accept(37, "dynamic-cpu-limit", with_spec(limits={"cpu": 10})),
    accept(38, "dynamic-weight", with_spec(weight=50)),
    accept(38, "static-without-weight", with_spec(replicas=3, limits={"nodes": 3})),
    # C. Runtime
    accept(39, "nodepool-like-label", with_labels({"example.com/nodepool": "x"})),
    accept(
        40,
        "qualified-label-keys",
        with_labels({"team": "a", "example.com/team": "a", PREFIX_253 + "/" + "n" * 63: "a"}),
    ),
    accept(41, "empty-label-value", with_labels({"example.com/team": ""})),
    accept(41, "label-value-63", with_labels({"example.com/team": "v" * 63})),
    accept(42, "well-known-aws-label", with_labels({"karpenter.k8s.aws/instance-family": "m5"})),
    accept(
        42,
        "kubernetes-io-domains-open-since-1.9",
        with_labels({"example.kubernetes.io/x": "a", "k8s.io/x": "b", "node.kubernetes.io/x": "c"}),
    ),
    accept(
        43,
        "same-key-other-effect",
        with_taints(
            [{"key": "example.com/gpu", "effect": "NoSchedule"}],
            [{"key": "example.com/gpu", "effect": "NoExecute"}],
        ),
    ),
    accept(44, "alias-normalized", with_requirements(req("beta.kubernetes.io/arch", "In", ["arm64"]))),
    accept(44, "well-known-aws-key", with_requirements(req("karpenter.k8s.aws/instance-family", "In", ["m5"]))),
    accept(44, "exists-with-values", with_requirements(req("example.com/team", "Exists", ["a"]))),
    accept(
        45,
        "capacity-type-some-valid",
        with_requirements(req("karpenter.sh/capacity-type", "In", ["spot", "bogus"])),
    ),
    accept(
        45,
        "capacity-type-notin-anything",
        with_requirements(req("karpenter.sh/capacity-type", "NotIn", ["bogus"])),
    ),
    accept(
        45,
        "capacity-type-min-values-met",
        with_requirements(req("karpenter.sh/capacity-type", "In", ["spot", "on-demand", "reserved"], minValues=3)),
    ),
    accept(46, "nodepool-like-key", with_requirements(req("example.com/nodepool", "Exists"))),
]


REJECTED = [
    # A. OpenAPI
    reject(1, "spec-required", nodepool(spec=DELETE), "spec", "Required value"),
    reject(1, "template-required", with_spec(template=DELETE), "spec.template", "Required value"),
    reject(
        1,
        "template-spec-required",
        nodepool(spec={"template": {"spec": DELETE}}),
        "spec.template.spec",
        "Required value",
    ),
    reject(2, "node-class-ref-required", with_template_spec(nodeClassRef=DELETE), REF, "Required value"),
    reject(2, "requirements-required", with_template_spec(requirements=DELETE), REQ, "Required value"),
    reject(3, "group-with-slash", with_ref(group="karpenter.k8s.aws/v1"), f"{REF}.group", "should match"),
    reject(3, "name-required", with_ref(name=DELETE), f"{REF}.name", "Required value"),
    reject(3, "kind-required", with_ref(kind=DELETE), f"{REF}.kind", "Required value"),
    reject(
        4,
        "101-requirements",
        with_requirements(*[req(f"example.com/k{i}", "Exists") for i in range(101)]),
        REQ,
        "Too many: 101: must have at most 100 items",
    ),
    reject(5, "key-required", with_requirements({"operator": "Exists"}), f"{REQ}[0].key", "Required value"),
    reject(
        5,
        "operator-required",
        with_requirements({"key": "example.com/team"}),
        f"{REQ}[0].operator",
        "Required value",
    ),
    reject(
        6,
        "key-317-chars",
        with_requirements(req(KEY_317, "Exists")),
        f"{REQ}[0].key",
        "Too long: may not be more than 316 bytes",
    ),
    reject(
        6,
        "key-uppercase-prefix",
        with_requirements(req("Example.com/team", "Exists")),
        f"{REQ}[0].key",
        "should match",
    ),
    reject(
        6,
        "key-ends-with-dash",
        with_requirements(req("example.com/team-", "Exists")),
        f"{REQ}[0].key",
        "should match",
    ),
    reject(
        7,
        "unknown-operator",
        with_requirements(req("example.com/team", "Equals", ["a"])),
        f"{REQ}[0].operator",
        'Unsupported value: "Equals"',
    ),
    reject(
        8,
        "min-values-0",
        with_requirements(req("example.com/team", "In", ["a"], minValues=0)),
        f"{REQ}[0].minValues",
        "should be greater than or equal to 1",
    ),
    reject(
        8,
        "min-values-51",
        with_requirements(req("example.com/team", "Exists", minValues=51)),
        f"{REQ}[0].minValues",
        "should be less than or equal to 50",
    ),
    reject(
        9,
        "value-64-chars",
        with_requirements(req("example.com/team", "In", ["v" * 64])),
        f"{REQ}[0].values[0]",
        "must be no more than 63 characters",
    ),
    reject(
        9,
        "value-not-a-string",
        with_requirements(req("example.com/team", "In", [5])),
        f"{REQ}[0].values[0]",
        "must be of type string, not integer",
    ),
    reject(
        10,
        "101-labels",
        with_labels({f"example.com/l{i}": "x" for i in range(101)}),
        LABELS,
        "Too many: 101: must have at most 100 items",
    ),
    reject(
        10,
        "label-value-64-chars",
        with_labels({"team": "v" * 64}),
        f"{LABELS}[team]",
        "Too long: may not be more than 63 bytes",
    ),
    reject(10, "label-value-pattern", with_labels({"team": "-bad"}), f"{LABELS}[team]", "should match"),
    reject(
        11,
        "taint-effect-required",
        with_taints([{"key": "example.com/gpu"}]),
        f"{TS}.taints[0].effect",
        "Required value",
    ),
    reject(
        11,
        "startup-taint-key-required",
        with_taints(startup=[{"effect": "NoSchedule"}]),
        f"{TS}.startupTaints[0].key",
        "Required value",
    ),
    reject(
        11,
        "taint-effect-enum",
        with_taints([{"key": "example.com/gpu", "effect": "Sometimes"}]),
        f"{TS}.taints[0].effect",
        'Unsupported value: "Sometimes"',
    ),
    reject(
        11,
        "taint-key-empty",
        with_taints([{"key": "", "effect": "NoSchedule"}]),
        f"{TS}.taints[0].key",
        "should be at least 1 chars long",
    ),
    reject(
        11,
        "taint-value-pattern",
        with_taints([{"key": "gpu", "value": "a b", "effect": "NoSchedule"}]),
        f"{TS}.taints[0].value",
        "should match",
    ),
    reject(
        11,
        "taint-time-added",
        with_taints([{"key": "gpu", "effect": "NoSchedule", "timeAdded": "yesterday"}]),
        f"{TS}.taints[0].timeAdded",
        "date-time",
    ),
    reject(12, "expire-after-days", with_template_spec(expireAfter="30d"), f"{TS}.expireAfter", "should match"),
    reject(
        12,
        "expire-after-fraction",
        with_template_spec(expireAfter="1.5h"),
        f"{TS}.expireAfter",
        "should match",
    ),
    reject(
        13,
        "termination-grace-never",
        with_template_spec(terminationGracePeriod="Never"),
        f"{TS}.terminationGracePeriod",
        "should match",
    ),
    reject(
        14,
        "consolidate-after-negative",
        with_disruption(consolidateAfter="-1s"),
        "spec.disruption.consolidateAfter",
        "should match",
    ),
    reject(
        15,
        "unknown-policy",
        with_disruption(consolidationPolicy="Always"),
        "spec.disruption.consolidationPolicy",
        'Unsupported value: "Always"',
    ),
    reject(
        16,
        "51-budgets",
        with_budgets(*[{"nodes": "1"}] * 51),
        BUDGETS,
        "Too many: 51: must have at most 50 items",
    ),
    reject(17, "nodes-101-percent", with_budgets({"nodes": "101%"}), f"{BUDGETS}[0].nodes", "should match"),
    reject(17, "nodes-fraction", with_budgets({"nodes": "10.5%"}), f"{BUDGETS}[0].nodes", "should match"),
    reject(
        17,
        "schedule-pattern",
        with_budgets({"nodes": "0", "schedule": "daily", "duration": "1h"}),
        f"{BUDGETS}[0].schedule",
        "should match",
    ),
    reject(
        17,
        "duration-seconds",
        with_budgets({"nodes": "0", "schedule": "@daily", "duration": "30s"}),
        f"{BUDGETS}[0].duration",
        "should match",
    ),
    reject(
        17,
        "reason-enum",
        with_budgets({"nodes": "1", "reasons": ["Expired"]}),
        f"{BUDGETS}[0].reasons[0]",
        'Unsupported value: "Expired"',
    ),
    reject(
        17,
        "reasons-set",
        with_budgets({"nodes": "1", "reasons": ["Empty", "Empty"]}),
        f"{BUDGETS}[0].reasons[1]",
        'Duplicate value: "Empty"',
    ),
    reject(18, "quantity-word", with_spec(limits={"cpu": "lots"}), "spec.limits[cpu]", "must be a quantity"),
    reject(
        18,
        "quantity-space",
        with_spec(limits={"memory": "1 Gi"}),
        "spec.limits[memory]",
        "must be a quantity",
    ),
    reject(19, "weight-0", with_spec(weight=0), "spec.weight", "should be greater than or equal to 1"),
    reject(19, "weight-101", with_spec(weight=101), "spec.weight", "should be less than or equal to 100"),
    reject(
        20,
        "replicas-negative",
        with_spec(replicas=-1),
        "spec.replicas",
        "should be greater than or equal to 0",
    ),
    # B. CEL (exact upstream messages)
    cel(21, "group-empty", with_ref(group=""), f"{REF}.group", MSG_GROUP_EMPTY),
    cel(22, "kind-empty", with_ref(kind=""), f"{REF}.kind", MSG_KIND_EMPTY),
    cel(23, "name-empty", with_ref(name=""), f"{REF}.name", MSG_NAME_EMPTY),
    cel(24, "group-immutable", with_ref(group="example.com"), REF, MSG_GROUP_IMMUTABLE, old=nodepool()),
    cel(25, "kind-immutable", with_ref(kind="OtherNodeClass"), REF, MSG_KIND_IMMUTABLE, old=nodepool()),
    cel(
        26,
        "karpenter-sh-domain",
        with_requirements(req("karpenter.sh/custom", "Exists")),
        f"{REQ}[0].key",
        MSG_DOMAIN,
    ),
    cel(
        26,
        "karpenter-sh-subdomain",
        with_requirements(req("team.karpenter.sh/x", "Exists")),
        f"{REQ}[0].key",
        MSG_DOMAIN,
    ),
    cel(
        26,
        "quirk-notkarpenter-sh",
        with_requirements(req("notkarpenter.sh/x", "Exists")),
        f"{REQ}[0].key",
        MSG_DOMAIN,
    ),
    cel(
        26,
        "quirk-key-without-slash",
        with_requirements(req("karpenter.sh", "Exists")),
        f"{REQ}[0].key",
        MSG_DOMAIN,
    ),
    cel(
        27,
        "nodepool-key",
        with_requirements(req("karpenter.sh/nodepool", "In", ["a"])),
        f"{REQ}[0].key",
        MSG_NODEPOOL,
    ),
    cel(
        28,
        "hostname-key",
        with_requirements(req("kubernetes.io/hostname", "In", ["a"])),
        f"{REQ}[0].key",
        MSG_HOSTNAME,
    ),
    cel(
        29,
        "in-needs-values",
        with_requirements(req("example.com/a", "Exists"), req("example.com/b", "In", [])),
        f"{REQ}[1]",
        MSG_IN_VALUES,
    ),
    cel(29, "in-values-absent", with_requirements(req("example.com/team", "In")), f"{REQ}[0]", MSG_IN_VALUES),
    cel(
        30,
        "gt-not-integer",
        with_requirements(req("example.com/cpu", "Gt", ["four"])),
        f"{REQ}[0]",
        MSG_INT_VALUE,
    ),
    cel(
        30,
        "lt-two-values",
        with_requirements(req("example.com/cpu", "Lt", ["1", "2"])),
        f"{REQ}[0]",
        MSG_INT_VALUE,
    ),
    cel(30, "gte-no-values", with_requirements(req("example.com/cpu", "Gte")), f"{REQ}[0]", MSG_INT_VALUE),
    cel(
        30,
        "lte-negative",
        with_requirements(req("example.com/cpu", "Lte", ["-1"])),
        f"{REQ}[0]",
        MSG_INT_VALUE,
    ),
    cel(
        30,
        "gt-underscore",
        with_requirements(req("example.com/cpu", "Gt", ["1_000"])),
        f"{REQ}[0]",
        MSG_INT_VALUE,
    ),
    cel(
        30,
        "gt-over-int64",
        with_requirements(req("example.com/cpu", "Gt", ["9" * 20])),
        f"{REQ}[0]",
        MSG_INT_VALUE,
    ),
    cel(
        31,
        "min-values-not-met",
        with_requirements(req("example.com/team", "In", ["a", "b"], minValues=3)),
        f"{REQ}[0]",
        MSG_MIN_VALUES,
    ),
    cel(
        32,
        "karpenter-sh-label",
        with_labels({"karpenter.sh/custom": "x"}),
        f"{LABELS}[karpenter.sh/custom]",
        MSG_DOMAIN,
    ),
    cel(
        32,
        "quirk-notkarpenter-sh-label",
        with_labels({"notkarpenter.sh/x": "x"}),
        f"{LABELS}[notkarpenter.sh/x]",
        MSG_DOMAIN,
    ),
    cel(
        33,
        "nodepool-label",
        with_labels({"karpenter.sh/nodepool": "x"}),
        f"{LABELS}[karpenter.sh/nodepool]",
        MSG_NODEPOOL,
    ),
    cel(
        34,
        "hostname-label",
        with_labels({"kubernetes.io/hostname": "x"}),
        f"{LABELS}[kubernetes.io/hostname]",
        MSG_HOSTNAME,
    ),
    cel(
        35,
        "schedule-without-duration",
        with_budgets({"nodes": "1"}, {"nodes": "0", "schedule": "@daily"}),
        f"{BUDGETS}[1]",
        MSG_SCHEDULE,
    ),
    cel(
        35,
        "duration-without-schedule",
        with_budgets({"nodes": "0", "duration": "1h"}),
        f"{BUDGETS}[0]",
        MSG_SCHEDULE,
    ),
    cel(
        36,
        "dynamic-to-static",
        with_spec(replicas=1, limits={"nodes": 1}),
        "spec",
        MSG_STATIC_SWITCH,
        old=OLD_DYNAMIC,
    ),
    cel(36, "static-to-dynamic", nodepool(), "spec", MSG_STATIC_SWITCH, old=OLD_STATIC),
    cel(37, "static-cpu-limit", with_spec(replicas=3, limits={"cpu": 10}), "spec", MSG_STATIC_LIMITS),
    cel(
        37,
        "static-nodes-and-cpu",
        with_spec(replicas=3, limits={"nodes": 3, "cpu": 10}),
        "spec",
        MSG_STATIC_LIMITS,
    ),
    cel(38, "static-weight", with_spec(replicas=3, weight=10), "spec", MSG_STATIC_WEIGHT),
    # C. Runtime (errors at admission: product decision 2)
    reject(
        39,
        "nodepool-label",
        with_labels({"karpenter.sh/nodepool": "x"}),
        f"{LABELS}[karpenter.sh/nodepool]",
        "karpenter.sh/nodepool",
    ),
    reject(
        40,
        "label-name-64",
        with_labels({NAME_64: "x"}),
        f"{LABELS}[{NAME_64}]",
        "name part must be no more than 63 characters",
    ),
    reject(
        40,
        "label-prefix-254",
        with_labels({PREFIX_254 + "/x": "x"}),
        f"{LABELS}[{PREFIX_254}/x]",
        "prefix part must be a lowercase RFC 1123 subdomain",
    ),
    reject(40, "label-two-slashes", with_labels({"a/b/c": "x"}), f"{LABELS}[a/b/c]", "a qualified name"),
    reject(
        40,
        "label-uppercase-prefix",
        with_labels({"Example.com/x": "x"}),
        f"{LABELS}[Example.com/x]",
        "prefix part",
    ),
    reject(40, "label-key-trailing-newline", with_labels({"team\n": "x"}), f"{LABELS}['team\\n']", "name part"),
    reject(
        41,
        "label-value-trailing-newline",
        with_labels({"team": "a\n"}),
        f"{LABELS}[team]",
        "should match",  # the OpenAPI pattern, with Go's `$`, already refuses it
    ),
    reject(
        42,
        "aws-unknown-label",
        with_labels({"karpenter.k8s.aws/unknown-key": "x"}),
        f"{LABELS}[karpenter.k8s.aws/unknown-key]",
        MSG_RESTRICTED,
    ),
    reject(
        42,
        "aws-subdomain-label",
        with_labels({"sub.karpenter.k8s.aws/x": "x"}),
        f"{LABELS}[sub.karpenter.k8s.aws/x]",
        MSG_RESTRICTED,
    ),
    reject(
        43,
        "duplicate-taint-across-lists",
        with_taints(
            [{"key": "example.com/gpu", "effect": "NoSchedule"}],
            [{"key": "example.com/gpu", "value": "other", "effect": "NoSchedule"}],
        ),
        f"{TS}.startupTaints[0]",
        "Duplicate value: taint example.com/gpu:NoSchedule",
    ),
    reject(
        43,
        "duplicate-taint-same-list",
        with_taints([{"key": "gpu", "effect": "NoExecute"}, {"key": "gpu", "effect": "NoExecute"}]),
        f"{TS}.taints[1]",
        "Duplicate value",
    ),
    reject(
        43,
        "taint-key-name-64",
        with_taints([{"key": NAME_64, "effect": "NoSchedule"}]),
        f"{TS}.taints[0].key",
        "name part must be no more than 63 characters",
    ),
    reject(
        43,
        "taint-value-name-64",
        with_taints([{"key": "gpu", "value": "v" * 64, "effect": "NoSchedule"}]),
        f"{TS}.taints[0].value",
        "name part must be no more than 63 characters",
    ),
    reject(
        44,
        "aws-unknown-key",
        with_requirements(req("karpenter.k8s.aws/unknown-key", "Exists")),
        f"{REQ}[0].key",
        MSG_RESTRICTED,
    ),
    reject(
        44,
        "key-name-64",
        with_requirements(req(NAME_64, "Exists")),
        f"{REQ}[0].key",
        "name part must be no more than 63 characters",
    ),
    reject(
        44,
        "key-prefix-254",
        with_requirements(req(PREFIX_254 + "/x", "Exists")),
        f"{REQ}[0].key",
        "prefix part must be a lowercase RFC 1123 subdomain",
    ),
    reject(44, "key-trailing-newline", with_requirements(req("team\n", "Exists")), f"{REQ}[0].key", "name part"),
    reject(
        44,
        "value-invalid",
        with_requirements(req("example.com/team", "In", ["ok", "not ok"])),
        f"{REQ}[0].values[1]",
        "a valid label must be",
    ),
    reject(
        44,
        "value-trailing-newline",
        with_requirements(req("example.com/team", "In", ["a\n"])),
        f"{REQ}[0].values[0]",
        "a valid label must be",
    ),
    reject(
        45,
        "capacity-type-no-valid-values",
        with_requirements(req("karpenter.sh/capacity-type", "In", ["bogus", "cheap"])),
        f"{REQ}[0].values",
        "no valid values found",
    ),
    reject(
        45,
        "capacity-type-not-enough-valid",
        with_requirements(req("karpenter.sh/capacity-type", "In", ["spot", "bogus"], minValues=2)),
        f"{REQ}[0].values",
        "not enough valid values found",
    ),
    reject(
        46,
        "nodepool-key",
        with_requirements(req("karpenter.sh/nodepool", "Exists")),
        f"{REQ}[0].key",
        "karpenter.sh/nodepool",
    ),
]


@pytest.mark.parametrize(("doc", "old"), ACCEPTED)
def test_rule_accepts(doc: dict[str, Any], old: dict[str, Any] | None) -> None:
    result = validate(doc, old=old)
    assert errors(result) == []


@pytest.mark.parametrize(("doc", "old", "path", "message", "exact"), REJECTED)
def test_rule_rejects(doc: dict[str, Any], old: dict[str, Any] | None, path: str, message: str, exact: bool) -> None:
    result = validate(doc, old=old)
    found = messages_at(result, path)
    assert found, f"no error at {path!r}; errors: {errors(result)}"
    if exact:
        assert message in found, found
    else:
        assert any(message in m for m in found), found
    assert not result.ok


def _rules_with(params: list[Any], pattern: str) -> set[int]:
    return {int(m.group(1)) for p in params if (m := re.fullmatch(pattern, p.id))}


def test_every_rule_has_an_accepted_and_a_rejected_example() -> None:
    everything = set(range(1, 47))
    assert _rules_with(ACCEPTED, r"rule-(\d\d)-ok-.+") == everything
    assert _rules_with(REJECTED, r"rule-(\d\d)-(?!ok-).+") == everything
    ids = [p.id for p in ACCEPTED + REJECTED]
    assert len(ids) == len(set(ids))


def test_cel_rejections_carry_no_other_error() -> None:
    """The CEL examples are built to break one rule each: nothing else is reported."""
    noisy = {"rule-30-lte-negative"}  # "-1" is also an invalid label value (rule 44)
    for param in REJECTED:
        doc, old, path, message, exact = param.values
        if exact and param.id not in noisy:
            assert errors(validate(doc, old=old)) == [(path, message)], param.id


def test_cel_rule_names_each_failing_requirement() -> None:
    doc = with_requirements(
        req("example.com/a", "In", []), req("example.com/b", "Exists"), req("example.com/c", "In", [])
    )
    assert errors(validate(doc)) == [(f"{REQ}[0]", MSG_IN_VALUES), (f"{REQ}[2]", MSG_IN_VALUES)]


def test_restricted_domain_in_requirements_and_labels_is_reported_once() -> None:
    """CEL rule 26/32 and runtime rule 42/44 overlap: one error per key, not two."""
    result = validate(with_requirements(req("karpenter.sh/custom", "Exists")))
    assert errors(result) == [(f"{REQ}[0].key", MSG_DOMAIN)]
    result = validate(with_labels({"kubernetes.io/hostname": "x"}))
    assert errors(result) == [(f"{LABELS}[kubernetes.io/hostname]", MSG_HOSTNAME)]


# ---------------------------------------------------------------- defaults


def test_defaults_of_a_minimal_nodepool() -> None:
    spec = default(nodepool())["spec"]
    assert spec["template"]["spec"]["expireAfter"] == "720h"
    assert spec["disruption"] == {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "10%"}],
    }
    assert "weight" not in spec
    assert "terminationGracePeriod" not in spec["template"]["spec"]
    assert "replicas" not in spec


def test_a_budget_without_nodes_gets_ten_percent() -> None:
    doc = with_budgets({"schedule": "@daily", "duration": "10m"}, {"nodes": "3"})
    assert default(doc)["spec"]["disruption"]["budgets"] == [
        {"nodes": "10%", "schedule": "@daily", "duration": "10m"},
        {"nodes": "3"},
    ]
    assert errors(validate(doc)) == []  # nodes is required, but defaulted first


def test_a_user_disruption_without_budgets_gets_budgets() -> None:
    disruption = default(with_disruption(consolidationPolicy="WhenEmpty"))["spec"]["disruption"]
    assert disruption == {
        "consolidationPolicy": "WhenEmpty",
        "consolidateAfter": "0s",
        "budgets": [{"nodes": "10%"}],
    }


def test_defaults_keep_what_the_user_set() -> None:
    doc = nodepool(
        spec={
            "template": {"spec": {"expireAfter": "Never"}},
            "disruption": {"consolidateAfter": "5m", "budgets": []},
        }
    )
    spec = default(doc)["spec"]
    assert spec["template"]["spec"]["expireAfter"] == "Never"
    assert spec["disruption"]["consolidateAfter"] == "5m"
    assert spec["disruption"]["budgets"] == []  # an explicit empty list is kept


def test_null_fields_are_defaulted() -> None:
    doc = nodepool(spec={"disruption": None, "template": {"spec": {"expireAfter": None}}})
    spec = default(doc)["spec"]
    assert spec["template"]["spec"]["expireAfter"] == "720h"
    assert spec["disruption"]["budgets"] == [{"nodes": "10%"}]
    assert errors(validate(doc)) == []


def test_default_does_not_touch_its_input() -> None:
    doc = nodepool()
    before = copy.deepcopy(doc)
    default(doc)
    validate(doc)
    assert doc == before


# ---------------------------------------------------------------- transitions (old=)


def test_node_class_ref_group_and_kind_are_immutable_name_is_not() -> None:
    old = nodepool()
    assert errors(validate(with_ref(name="gpu"), old=old)) == []
    assert errors(validate(with_ref(group="example.com", kind="Other"), old=old)) == [
        (REF, MSG_GROUP_IMMUTABLE),
        (REF, MSG_KIND_IMMUTABLE),
    ]


def test_transition_rules_only_run_on_update() -> None:
    assert errors(validate(with_ref(group="example.com", kind="Other"))) == []
    assert errors(validate(with_spec(replicas=1))) == []


def test_static_dynamic_switch_is_refused_both_ways() -> None:
    static, dynamic = with_spec(replicas=1), nodepool()
    assert errors(validate(static, old=dynamic)) == [("spec", MSG_STATIC_SWITCH)]
    assert errors(validate(dynamic, old=static)) == [("spec", MSG_STATIC_SWITCH)]
    assert errors(validate(with_spec(replicas=9), old=static)) == []


def test_null_replicas_counts_as_unset() -> None:
    assert errors(validate(with_spec(replicas=None), old=nodepool())) == []
    assert errors(validate(with_spec(replicas=None), old=with_spec(replicas=1))) == [("spec", MSG_STATIC_SWITCH)]


# ---------------------------------------------------------------- label domains and aliases


@pytest.mark.parametrize("key", ["notkarpenter.sh/x", "fookarpenter.sh/x", "karpenter.sh"])
def test_cel_endswith_quirk_rejects_look_alike_domains(key: str) -> None:
    assert errors(validate(with_requirements(req(key, "Exists")))) == [(f"{REQ}[0].key", MSG_DOMAIN)]
    assert errors(validate(with_labels({key: "x"}))) == [(f"{LABELS}[{key}]", MSG_DOMAIN)]


@pytest.mark.parametrize(("alias", "canonical"), sorted(L.NORMALIZED_LABELS.items()))
def test_aliases_are_normalized_with_a_warning(alias: str, canonical: str) -> None:
    assert L.normalize_key(alias) == canonical
    result = validate(with_requirements(req(alias, "Exists")))
    assert errors(result) == []
    assert len(result.warnings) == 1
    assert alias in result.warnings[0] and canonical in result.warnings[0]


def test_canonical_keys_earn_no_alias_warning() -> None:
    result = validate(with_requirements(req("kubernetes.io/arch", "In", ["amd64"])))
    assert result.warnings == []


@pytest.mark.parametrize("key", sorted(k for k in L.WELL_KNOWN_LABELS if k.startswith("karpenter.k8s.aws/")))
def test_well_known_aws_keys_are_accepted(key: str) -> None:
    assert errors(validate(with_requirements(req(key, "Exists")))) == []
    assert errors(validate(with_labels({key: "x"}))) == []


@pytest.mark.parametrize(
    "key",
    [
        "karpenter.k8s.aws/unknown-key",
        "karpenter.k8s.aws/instance-pods",
        "foo.karpenter.k8s.aws/instance-family",
    ],
)
def test_other_aws_domain_keys_are_restricted(key: str) -> None:
    result = validate(with_requirements(req(key, "Exists")))
    assert [p for p, _ in errors(result)] == [f"{REQ}[0].key"]
    assert MSG_RESTRICTED in result.errors[0].message
    assert "karpenter.k8s.aws" in result.errors[0].message


def test_restricted_check_applies_after_normalization() -> None:
    assert L.is_restricted_label("kubernetes.io/hostname")
    assert not L.is_restricted_label("topology.kubernetes.io/zone")
    assert not L.is_restricted_label("karpenter.sh/capacity-type")
    assert L.is_restricted_label("karpenter.sh/anything")
    assert not L.is_restricted_label("example.com/anything")


# ---------------------------------------------------------------- product decisions


def test_when_underutilized_is_accepted_with_a_warning() -> None:
    doc = with_disruption(consolidationPolicy="WhenUnderutilized")
    result = validate(doc)
    assert errors(result) == []
    assert len(result.warnings) == 1
    assert "WhenUnderutilized" in result.warnings[0]
    assert effective_consolidation_policy(doc["spec"]) == "WhenEmptyOrUnderutilized"


@pytest.mark.parametrize(
    ("policy", "effective"),
    [
        ("WhenEmpty", "WhenEmpty"),
        ("Balanced", "Balanced"),
        ("WhenEmptyOrUnderutilized", "WhenEmptyOrUnderutilized"),
        ("WhenUnderutilized", "WhenEmptyOrUnderutilized"),
        (None, "WhenEmptyOrUnderutilized"),
    ],
)
def test_effective_consolidation_policy(policy: str | None, effective: str) -> None:
    assert effective_consolidation_policy({"disruption": {"consolidationPolicy": policy}}) == effective
    assert effective_consolidation_policy({}) == "WhenEmptyOrUnderutilized"


def test_seed_nodepool_is_accepted_as_it_is() -> None:
    seed = load_seed()
    result = validate(seed)
    assert errors(result) == []
    assert result.kind == "NodePool" and result.name == "general"
    assert effective_consolidation_policy(default(seed)["spec"]) == "WhenEmptyOrUnderutilized"


def test_seed_nodepool_warnings() -> None:
    warnings = validate(load_seed()).warnings
    assert len(warnings) == 2, warnings
    legacy, family = warnings
    assert "WhenUnderutilized" in legacy and "WhenEmptyOrUnderutilized" in legacy
    assert "instance-family" in family and "'m'" in family and "instance-category" in family
    assert all(len(w) < MAX_WARNING for w in warnings)


def test_runtime_rules_are_errors_at_admission() -> None:
    result = validate(with_labels({"karpenter.k8s.aws/unknown-key": "x"}))
    assert not result.ok
    assert result.warnings == []


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (nodepool(extra=1), "extra"),
        (with_spec(nodeClass="x"), "spec.nodeClass"),
        (nodepool(spec={"template": {"extra": 1}}), "spec.template.extra"),
        (nodepool(spec={"template": {"metadata": {"name": "x"}}}), "spec.template.metadata.name"),
        (with_template_spec(kubelet={}), f"{TS}.kubelet"),
        (with_ref(apiVersion="v1"), f"{REF}.apiVersion"),
        (with_requirements(req("team", "In", ["a"], minvalues=1)), f"{REQ}[0].minvalues"),
        (
            with_taints([{"key": "gpu", "effect": "NoSchedule", "operator": "Equal"}]),
            f"{TS}.taints[0].operator",
        ),
        (with_disruption(expireAfter="720h"), "spec.disruption.expireAfter"),
        (with_budgets({"nodes": "1", "reason": ["Empty"]}), f"{BUDGETS}[0].reason"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_unknown_fields_are_errors_naming_the_field(doc: dict[str, Any], path: str) -> None:
    result = validate(doc)
    name = path.rsplit(".", 1)[-1]
    found = messages_at(result, path)
    assert found and found[0].startswith(f'unknown field "{name}"'), errors(result)


def test_status_is_free_form() -> None:
    doc = nodepool(status={"conditions": [{"type": "Ready", "status": "True"}], "anything": {"x": 1}})
    assert errors(validate(doc)) == []


def test_unknown_nodeclass_is_a_warning_not_an_error() -> None:
    asked: list[str] = []

    def exists(name: str) -> bool:
        asked.append(name)
        return False

    result = validate(with_ref(name="gpu"), nodeclass_exists=exists)
    assert errors(result) == []
    assert asked == ["gpu"]
    assert len(result.warnings) == 1
    assert "gpu" in result.warnings[0] and "EC2NodeClass" in result.warnings[0]
    assert len(result.warnings[0]) < MAX_WARNING


def test_known_or_unchecked_nodeclass_earns_no_warning() -> None:
    assert validate(nodepool(), nodeclass_exists=lambda name: True).warnings == []
    assert validate(nodepool()).warnings == []


WARNING_DOCS = {
    "legacy-policy": with_disruption(consolidationPolicy="WhenUnderutilized"),
    "longest-alias": with_requirements(req("failure-domain.beta.kubernetes.io/region", "Exists")),
    "capacity-type-long-value": with_requirements(req("karpenter.sh/capacity-type", "In", ["spot", "x" * 63])),
    "instance-family-long-value": with_requirements(req("karpenter.k8s.aws/instance-family", "In", ["y" * 63])),
    "exists-with-values-long-key": with_requirements(req(KEY_316, "DoesNotExist", ["a"])),
    "capacity-type-huge-value": with_requirements(req("karpenter.sh/capacity-type", "In", ["spot", "z" * 5000])),
}


@pytest.mark.parametrize("doc", list(WARNING_DOCS.values()), ids=list(WARNING_DOCS))
def test_warnings_are_under_120_characters(doc: dict[str, Any]) -> None:
    warnings = validate(doc, nodeclass_exists=lambda name: False).warnings
    assert len(warnings) >= 2  # the case's own warning and the unknown-nodeclass one
    assert all(len(w) < MAX_WARNING for w in warnings), [len(w) for w in warnings]


def test_unknown_nodeclass_warning_with_a_long_name_is_under_120_characters() -> None:
    result = validate(with_ref(name="n" * 60), nodeclass_exists=lambda name: False)
    assert result.warnings and all(len(w) < MAX_WARNING for w in result.warnings)


def test_exists_with_values_warns_instead_of_rejecting() -> None:
    result = validate(with_requirements(req("example.com/team", "Exists", ["a"])))
    assert errors(result) == []
    assert result.warnings == ["requirement 'example.com/team': operator Exists takes no values; they are ignored"]


# ---------------------------------------------------------------- malformed documents


def test_wrong_api_version() -> None:
    result = validate(nodepool(apiVersion="karpenter.sh/v1beta1"))
    assert [e.path for e in result.errors] == ["apiVersion"]
    assert '"karpenter.sh/v1beta1"' in result.errors[0].message
    assert "karpenter.sh/v1" in result.errors[0].message.replace("v1beta1", "")


def test_missing_api_version() -> None:
    result = validate(nodepool(apiVersion=DELETE))
    assert errors(result) == [("apiVersion", "Required value: NodePool is served as karpenter.sh/v1")]


@pytest.mark.parametrize("kind", ["Deployment", "nodepool", "", 5, ["NodePool"]])
def test_wrong_kind(kind: Any) -> None:
    result = validate(nodepool(kind=kind))
    assert [e.path for e in result.errors] == ["kind"]
    assert result.errors[0].message.startswith("Unsupported value")
    assert "NodePool (karpenter.sh/v1)" in result.errors[0].message


@pytest.mark.parametrize("kind", [DELETE, None])
def test_missing_kind(kind: Any) -> None:
    result = validate(nodepool(kind=kind))
    assert [e.path for e in result.errors] == ["kind"]
    assert result.errors[0].message.startswith("Required value")


@pytest.mark.parametrize(
    "document",
    [None, [], [MINIMAL], "NodePool", 42, 1.5, True, b"kind: NodePool"],
    ids=["none", "empty-list", "list", "string", "int", "float", "bool", "bytes"],
)
def test_non_dict_document(document: Any) -> None:
    result = validate(document)
    assert [e.path for e in result.errors] == [""]
    assert "must be an object" in result.errors[0].message


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        (with_spec(template=[]), "spec.template", "must be of type object, not array"),
        (with_spec(template=[1]), "spec.template", "must be of type object, not array"),
        (
            nodepool(spec={"template": {"spec": [{"nodeClassRef": NODE_CLASS_REF}]}}),
            TS,
            "must be of type object, not array",
        ),
        (
            nodepool(spec={"template": {"metadata": ["labels"]}}),
            "spec.template.metadata",
            "must be of type object, not array",
        ),
        (with_labels(["team"]), LABELS, "must be of type object, not array"),
        (with_template_spec(nodeClassRef=[NODE_CLASS_REF]), REF, "must be of type object, not array"),
        (
            with_template_spec(requirements=[["example.com/team"]]),
            f"{REQ}[0]",
            "must be of type object, not array",
        ),
        (
            with_template_spec(requirements=["example.com/team"]),
            f"{REQ}[0]",
            "must be of type object, not string",
        ),
        (with_template_spec(requirements={"key": "team"}), REQ, "must be of type array, not object"),
        (with_disruption(budgets={"nodes": "1"}), BUDGETS, "must be of type array, not object"),
        (with_spec(limits=[{"cpu": 1}]), "spec.limits", "must be of type object, not array"),
        (nodepool(metadata=["general"]), "metadata", "must be of type object, not array"),
        (nodepool(spec=[]), "spec", "must be of type object, not array"),
        (nodepool(spec="template"), "spec", 'Invalid value: "template": must be of type object, not string'),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith(("spec", "metadata")) else None,
)
def test_a_list_or_scalar_where_an_object_is_expected(doc: dict[str, Any], path: str, message: str) -> None:
    result = validate(doc)
    found = messages_at(result, path)
    assert any(message in m for m in found), errors(result)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (with_spec(weight="10"), "spec.weight"),
        (with_spec(replicas="1"), "spec.replicas"),
        (with_requirements(req("team", "In", ["a", "b"], minValues="2")), f"{REQ}[0].minValues"),
        (with_spec(weight=True), "spec.weight"),
        (with_spec(weight=1.5), "spec.weight"),
    ],
)
def test_a_string_where_an_integer_is_expected(doc: dict[str, Any], path: str) -> None:
    result = validate(doc)
    found = messages_at(result, path)
    assert found and "must be of type integer" in found[0], errors(result)


def test_an_integral_float_counts_as_an_integer() -> None:
    assert errors(validate(with_spec(weight=10.0))) == []


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (nodepool(metadata=None), [("metadata", "Required value")]),
        (nodepool(metadata={"name": None}), [("metadata.name", "Required value")]),
        (nodepool(spec=None), [("spec", "Required value")]),
        (with_spec(template=None), [("spec.template", "Required value")]),
        (with_template_spec(nodeClassRef=None), [(REF, "Required value")]),
        (with_ref(name=None), [(f"{REF}.name", "Required value")]),
        (with_template_spec(requirements=None), [(REQ, "Required value")]),
        (with_requirements(None), [(f"{REQ}[0]", "Invalid value: null: must be of type object")]),
        (with_requirements(req("team", None, ["a"])), [(f"{REQ}[0].operator", "Required value")]),
        (
            with_requirements(req("team", "In", [None])),
            [(f"{REQ}[0].values[0]", "Invalid value: null: must be of type string")],
        ),
        (with_labels({"team": None}), [(f"{LABELS}[team]", "Invalid value: null: must be of type string")]),
        (
            with_spec(limits={"cpu": None}),
            [("spec.limits[cpu]", "Invalid value: null: must be of type int-or-string")],
        ),
        (with_taints([None]), [(f"{TS}.taints[0]", "Invalid value: null: must be of type object")]),
        (with_spec(weight=None, replicas=None, limits=None), []),
        (with_disruption(consolidationPolicy=None, budgets=None), []),
        (with_budgets({"nodes": None}), []),  # defaulted to 10%
    ],
)
def test_null_values(doc: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert errors(validate(doc)) == expected


WEIRD_VALUES = [
    None,
    [],
    [None],
    [1],
    ["x"],
    {},
    {"x": None},
    {"x": [None]},
    "x",
    "",
    0,
    -1,
    1.5,
    True,
    2**70,
    "\n",
    "é" * 300,
]
WEIRD_PLACES = [
    (),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec",),
    ("spec", "template"),
    ("spec", "template", "metadata"),
    ("spec", "template", "metadata", "labels"),
    ("spec", "template", "metadata", "annotations"),
    ("spec", "template", "spec"),
    ("spec", "template", "spec", "nodeClassRef"),
    ("spec", "template", "spec", "nodeClassRef", "group"),
    ("spec", "template", "spec", "requirements"),
    ("spec", "template", "spec", "taints"),
    ("spec", "template", "spec", "startupTaints"),
    ("spec", "template", "spec", "expireAfter"),
    ("spec", "disruption"),
    ("spec", "disruption", "budgets"),
    ("spec", "disruption", "consolidationPolicy"),
    ("spec", "limits"),
    ("spec", "weight"),
    ("spec", "replicas"),
    ("status",),
]


def _place(doc: dict[str, Any], where: tuple[str, ...], value: Any) -> Any:
    if not where:
        return copy.deepcopy(value)
    out = copy.deepcopy(doc)
    node = out
    for name in where[:-1]:
        node = node.setdefault(name, {})
    node[where[-1]] = copy.deepcopy(value)
    return out


@pytest.mark.parametrize("where", WEIRD_PLACES, ids=lambda w: ".".join(w) or "document")
def test_never_raises_whatever_sits_where(where: tuple[str, ...]) -> None:
    for value in WEIRD_VALUES:
        for inner in (value, [value], {"key": value, "operator": value, "values": value, "effect": value}):
            doc = _place(nodepool(), where, inner)
            result = validate(doc, old=nodepool(), nodeclass_exists=lambda name: False)
            assert all(isinstance(e.path, str) and e.message for e in result.errors)
            if isinstance(doc, dict):
                default(doc)


def test_requirement_items_of_every_shape_never_raise() -> None:
    for value in WEIRD_VALUES:
        items = [
            value,
            req("team", "In", value),
            req("team", "Gt", [value]),
            {"key": value, "operator": "In"},
            req("karpenter.sh/capacity-type", "In", value, minValues=value),
        ]
        for item in items:
            validate(with_requirements(item))
            validate(with_taints([item], [item]))
            validate(with_budgets(item))


# ---------------------------------------------------------------- scale


def test_ten_thousand_requirements_give_one_error_quickly() -> None:
    doc = with_requirements(*[req("karpenter.k8s.aws/unknown-key", "In", []) for _ in range(10_000)])
    start = time.perf_counter()
    result = validate(doc)
    elapsed = time.perf_counter() - start
    assert errors(result) == [(REQ, "Too many: 10000: must have at most 100 items")]
    assert result.warnings == []
    assert elapsed < 2.0


def test_rules_still_name_items_of_a_list_at_its_bound() -> None:
    items = [req(f"example.com/k{i}", "Exists") for i in range(99)] + [req("example.com/last", "In", [])]
    assert errors(validate(with_requirements(*items))) == [(f"{REQ}[99]", MSG_IN_VALUES)]
    labels = {f"example.com/l{i}": "x" for i in range(99)} | {"karpenter.sh/x": "y"}
    assert errors(validate(with_labels(labels))) == [(f"{LABELS}[karpenter.sh/x]", MSG_DOMAIN)]


def test_ten_thousand_labels_give_one_error_quickly() -> None:
    doc = with_labels({f"karpenter.k8s.aws/bad-{i}": "x" for i in range(10_000)})
    start = time.perf_counter()
    result = validate(doc)
    assert errors(result) == [(LABELS, "Too many: 10000: must have at most 100 items")]
    assert time.perf_counter() - start < 2.0


def test_many_errors_are_capped() -> None:
    doc = with_taints([{"key": "a/b/c", "effect": "NoSchedule"} for _ in range(300)])
    result = validate(doc)
    assert len(result.errors) == 101
    assert result.errors[-1].path == "" and "more errors" in result.errors[-1].message
