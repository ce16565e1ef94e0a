"""NodeOverlay (karpenter.sh/v1alpha1) validation: every rule of upstream's CRD and
``RuntimeValidate``, each with an accepted and a rejected example.

Rules (ids ``rule-NN-...``; accepted ones ``rule-NN-ok-...``):

* OpenAPI: 1 spec and spec.requirements are required; 2 at most 100 requirements; 3 a
  requirement's key (required, at most 316 characters, a qualified name); 4 the operator is
  one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte; 5 ``price`` ``^\\d+(\\.\\d+)?$``;
  6 ``priceAdjustment`` ``±N`` or ``±N%`` (not below -100%); 7 capacity values are quantities;
  8 weight 1-10000; 9 no unknown fields, no namespace (cluster-scoped).
* CEL (exact upstream messages): 10 the karpenter.sh domain is restricted (capacity-type and
  nodepool excepted); 11 kubernetes.io/hostname is restricted; 12 NotIn needs values; 13 In
  needs values; 14 Gt/Lt/Gte/Lte take one non-negative integer; 15 capacity has no cpu,
  memory, ephemeral-storage or pods; 16 price and priceAdjustment are exclusive.
* Runtime (``RuntimeValidate``, errors at admission here): 17 restricted label domains
  (karpenter.k8s.aws beyond its well-known labels); 18 keys are qualified names (name part at
  most 63 characters); 19 values are label values; 20 capacity-type In names a capacity type;
  21 extended resource names are qualified names.

Rejections assert the exact field path; CEL ones also the exact upstream message. Plain
pytest, no database.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from provisioning.crd import labels as L
from provisioning.crd import validate

MINIMAL: dict[str, Any] = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "savings-plan"},
    "spec": {"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]},
}
DELETE = object()
REQ = "spec.requirements"

MSG_DOMAIN = 'label domain "karpenter.sh" is restricted'
MSG_HOSTNAME = 'label "kubernetes.io/hostname" is restricted'
MSG_NOT_IN_VALUES = "requirements with operator 'NotIn' must have a value defined"
MSG_IN_VALUES = "requirements with operator 'In' must have a value defined"
MSG_INT_VALUE = "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value"
MSG_CAPACITY = "invalid resource restricted"
MSG_PRICE_XOR = "cannot set both 'price' and 'priceAdjustment'"


def overlay(**spec: Any) -> dict[str, Any]:
    """The minimal valid NodeOverlay with ``spec`` fields set (``DELETE`` removes one)."""
    out = copy.deepcopy(MINIMAL)
    for key, value in spec.items():
        if value is DELETE:
            out["spec"].pop(key, None)
        else:
            out["spec"][key] = copy.deepcopy(value)
    return out


def with_requirements(*requirements: dict[str, Any]) -> dict[str, Any]:
    return overlay(requirements=list(requirements))


def req(key: str, operator: str = "In", values: list[Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        out["values"] = values
    return out


def errors(result: Any) -> list[tuple[str, str]]:
    return [(e.path, e.message) for e in result.errors]


def messages_at(result: Any, path: str) -> list[str]:
    return [e.message for e in result.errors if e.path == path]


def accept(rule: int, slug: str, doc: dict[str, Any]) -> Any:
    return pytest.param(doc, id=f"rule-{rule:02d}-ok-{slug}")


def reject(rule: int, slug: str, doc: dict[str, Any], path: str, message: str) -> Any:
    """A rejection: an error at exactly ``path`` whose message contains ``message``."""
    return pytest.param(doc, path, message, False, id=f"rule-{rule:02d}-{slug}")


def cel(rule: int, slug: str, doc: dict[str, Any], path: str, message: str) -> Any:
    """A CEL rejection: exactly the upstream message at exactly ``path``."""
    return pytest.param(doc, path, message, True, id=f"rule-{rule:02d}-{slug}")


KEY_316 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61]) + "/" + "n" * 62
KEY_317 = KEY_316 + "n"

ACCEPTED = [
    accept(1, "requirements-only", overlay()),
    accept(1, "empty-requirements-match-everything", overlay(requirements=[])),
    accept(2, "100-requirements", with_requirements(*[req(f"example.com/k{i}", "Exists") for i in range(100)])),
    accept(3, "key-316-chars", with_requirements(req(KEY_316, "Exists"))),
    accept(
        3,
        "upstream-valid-keys",
        with_requirements(
            req("Test", "Exists"),
            req("test.com/Test", "Exists"),
            req("test.com.com/test", "Exists"),
            req("key-only", "Exists"),
        ),
    ),
    accept(
        4,
        "all-eight-operators",
        with_requirements(
            req(L.ZONE, "In", ["test"]),
            req(L.ZONE, "Gt", ["1"]),
            req(L.ZONE, "Lt", ["1"]),
            req(L.ZONE, "Gte", ["1"]),
            req(L.ZONE, "Lte", ["1"]),
            req(L.ZONE, "NotIn", ["1"]),
            req(L.ZONE, "Exists"),
            req("example.com/team", "DoesNotExist"),
        ),
    ),
    accept(5, "price-integer", overlay(price="43")),
    accept(5, "price-float", overlay(price="34.43")),
    accept(6, "adjustment-positive-percent", overlay(priceAdjustment="+1%")),
    accept(6, "adjustment-negative-percent", overlay(priceAdjustment="-1%")),
    accept(6, "adjustment-minus-100-percent", overlay(priceAdjustment="-100%")),
    accept(6, "adjustment-over-100-percent", overlay(priceAdjustment="+100.102%")),
    accept(6, "adjustment-298-percent", overlay(priceAdjustment="+298%")),
    accept(6, "adjustment-positive-integer", overlay(priceAdjustment="+43")),
    accept(6, "adjustment-negative-integer", overlay(priceAdjustment="-43")),
    accept(6, "adjustment-positive-float", overlay(priceAdjustment="+34.43")),
    accept(6, "adjustment-negative-float", overlay(priceAdjustment="-34.43")),
    accept(6, "adjustment-27-percent-off", overlay(priceAdjustment="-27%")),
    accept(7, "capacity-quantities", overlay(capacity={"smarter-devices/fuse": 1, "hugepages-2Mi": "100Mi"})),
    accept(8, "weight-1", overlay(weight=1)),
    accept(8, "weight-10000", overlay(weight=10000)),
    accept(9, "status-is-free-form", {**overlay(), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    accept(10, "nodepool-label", with_requirements(req("karpenter.sh/nodepool", "In", ["general"]))),
    accept(10, "capacity-type-label", with_requirements(req("karpenter.sh/capacity-type", "In", ["spot"]))),
    accept(11, "kubernetes-io-other-label", with_requirements(req("kubernetes.io/arch", "In", ["arm64"]))),
    accept(12, "not-in-with-values", with_requirements(req(L.ZONE, "NotIn", ["us-east-1a"]))),
    accept(13, "in-with-values", with_requirements(req(L.INSTANCE_TYPE, "In", ["m5.large"]))),
    accept(14, "gte-zero", with_requirements(req("karpenter.k8s.aws/instance-cpu", "Gte", ["0"]))),
    accept(15, "extended-resource", overlay(capacity={"nvidia.com/gpu": "1"})),
    accept(16, "price-alone", overlay(price="0.5", capacity={"example.com/x": 1})),
    accept(16, "price-adjustment-alone", overlay(priceAdjustment="-10%")),
    accept(17, "aws-well-known-label", with_requirements(req("karpenter.k8s.aws/instance-family", "In", ["m7i"]))),
    accept(17, "kubernetes-domain-exception", with_requirements(req("k8s.io/test", "In", ["test"]))),
    accept(17, "kubernetes-subdomain-exception", with_requirements(req("subdomain.kubernetes.io/test", "In", ["a"]))),
    accept(18, "name-part-63-chars", with_requirements(req("example.com/" + "n" * 63, "Exists"))),
    accept(
        19,
        "overlapping-in-and-not-in",
        with_requirements(req(L.ZONE, "In", ["test", "foo"]), req(L.ZONE, "NotIn", ["test", "bar"])),
    ),
    accept(20, "capacity-type-some-valid", with_requirements(req(L.CAPACITY_TYPE, "In", ["spot", "on-demand"]))),
    accept(21, "domain-prefixed-resource", overlay(capacity={"smarter-devices/fuse": "2"})),
]

REJECTED = [
    reject(1, "no-spec", {k: v for k, v in overlay().items() if k != "spec"}, "spec", "Required value"),
    reject(1, "no-requirements", overlay(requirements=DELETE), f"{REQ}", "Required value"),
    reject(
        2,
        "101-requirements",
        with_requirements(*[req(f"example.com/k{i}", "Exists") for i in range(101)]),
        REQ,
        "Too many: 101: must have at most 100 items",
    ),
    reject(3, "no-key", with_requirements({"operator": "Exists"}), f"{REQ}[0].key", "Required value"),
    reject(3, "key-317-chars", with_requirements(req(KEY_317, "Exists")), f"{REQ}[0].key", "Too long"),
    reject(3, "key-with-brace", with_requirements(req("test.com.com}", "Exists")), f"{REQ}[0].key", "should match"),
    reject(
        3, "key-upper-case-prefix", with_requirements(req("Test.com/test", "Exists")), f"{REQ}[0].key", "should match"
    ),
    reject(3, "key-two-slashes", with_requirements(req("test/test/test", "Exists")), f"{REQ}[0].key", "should match"),
    reject(3, "key-trailing-slash", with_requirements(req("test/", "Exists")), f"{REQ}[0].key", "should match"),
    reject(3, "key-leading-slash", with_requirements(req("/test", "Exists")), f"{REQ}[0].key", "should match"),
    reject(
        4,
        "unknown-operator",
        with_requirements(req(L.ZONE, "unknown", ["test"])),
        f"{REQ}[0].operator",
        'Unsupported value: "unknown"',
    ),
    reject(4, "no-operator", with_requirements({"key": L.ZONE}), f"{REQ}[0].operator", "Required value"),
    *[
        reject(5, f"price-{slug}", overlay(price=value), "spec.price", "an unsigned number of USD/hour")
        for slug, value in [
            ("plus-sign", "+42"),
            ("no-leading-digit", ".5"),
            ("no-trailing-digits", "42."),
            ("percent", "42%"),
            ("comma", "3,14"),
            ("scientific", "1e10"),
            ("hex", "0x42"),
            ("text", "forty-two"),
            ("letters", "42a"),
            ("trailing-space", "42 "),
            ("leading-space", " 42"),
            ("two-points", "42.0.0"),
            ("just-a-sign", "-"),
            ("just-a-point", "."),
            ("negative", "-.42"),
            ("arabic-digits", "٤٢"),
            ("trailing-newline", "42\n"),
        ]
    ],
    *[
        reject(6, f"adjustment-{slug}", overlay(priceAdjustment=value), "spec.priceAdjustment", "at least -100%")
        for slug, value in [
            ("unsigned-percent", "1%"),
            ("unsigned-integer", "1"),
            ("unsigned-float", "1.3"),
            ("below-minus-100-percent", "-101.1%"),
            ("minus-100.0-percent", "-100.0%"),
            ("minus-129-percent", "-129%"),
            ("percent-sign-only", "+%"),
            ("spaces", "+ 10%"),
            ("text", "ten percent off"),
        ]
    ],
    reject(
        7,
        "capacity-not-a-quantity",
        overlay(capacity={"example.com/x": "lots"}),
        "spec.capacity[example.com/x]",
        "must be a quantity",
    ),
    reject(8, "weight-0", overlay(weight=0), "spec.weight", "should be greater than or equal to 1"),
    reject(8, "weight-10001", overlay(weight=10001), "spec.weight", "should be less than or equal to 10000"),
    reject(8, "weight-a-string", overlay(weight="10"), "spec.weight", "must be of type integer"),
    reject(9, "unknown-field", overlay(prices="1"), "spec.prices", 'unknown field "prices"'),
    reject(
        9,
        "min-values-is-not-an-overlay-field",
        with_requirements({**req(L.ZONE, "Exists"), "minValues": 1}),
        f"{REQ}[0].minValues",
        'unknown field "minValues"',
    ),
    reject(
        9,
        "namespaced",
        {**overlay(), "metadata": {"name": "x", "namespace": "default"}},
        "metadata.namespace",
        "cluster-scoped",
    ),
    cel(
        10,
        "karpenter-sh-domain",
        with_requirements(req("karpenter.sh/test", "In", ["test"])),
        f"{REQ}[0].key",
        MSG_DOMAIN,
    ),
    cel(
        10,
        "karpenter-sh-subdomain",
        with_requirements(req("x.karpenter.sh/test", "Exists")),
        f"{REQ}[0].key",
        MSG_DOMAIN,
    ),
    cel(11, "hostname", with_requirements(req(L.HOSTNAME, "In", ["ip-10-0-0-1"])), f"{REQ}[0].key", MSG_HOSTNAME),
    cel(12, "not-in-without-values", with_requirements(req("Test", "NotIn")), REQ + "[0]", MSG_NOT_IN_VALUES),
    cel(13, "in-without-values", with_requirements(req("Test", "In")), REQ + "[0]", MSG_IN_VALUES),
    *[
        cel(14, f"{op.lower()}-{slug}", with_requirements(req(L.ZONE, op, values)), REQ + "[0]", MSG_INT_VALUE)
        for op in ("Gt", "Lt", "Gte", "Lte")
        for slug, values in (("no-value", []), ("two-values", ["1", "2"]), ("not-a-number", ["a"]))
    ],
    reject(14, "gt-negative", with_requirements(req(L.ZONE, "Gt", ["-1"])), REQ + "[0]", MSG_INT_VALUE),
    cel(15, "cpu", overlay(capacity={"cpu": "1"}), "spec.capacity[cpu]", MSG_CAPACITY),
    cel(15, "memory", overlay(capacity={"memory": "34Gi"}), "spec.capacity[memory]", MSG_CAPACITY),
    cel(15, "pods", overlay(capacity={"pods": "324"}), "spec.capacity[pods]", MSG_CAPACITY),
    cel(
        15,
        "ephemeral-storage",
        overlay(capacity={"ephemeral-storage": "1Gi"}),
        "spec.capacity[ephemeral-storage]",
        MSG_CAPACITY,
    ),
    cel(16, "both-prices", overlay(price="0.432", priceAdjustment="+10%"), "spec", MSG_PRICE_XOR),
    reject(
        17,
        "aws-domain",
        with_requirements(req("karpenter.k8s.aws/custom", "In", ["x"])),
        f"{REQ}[0].key",
        "label domain is restricted",
    ),
    reject(
        18,
        "name-part-too-long",
        with_requirements(req("test.com.test/test-" + "a" * 250, "Exists")),
        f"{REQ}[0].key",
        "name part must be no more than 63 characters",
    ),
    reject(
        19,
        "value-with-space",
        with_requirements(req(L.ZONE, "In", ["us east"])),
        f"{REQ}[0].values[0]",
        "a valid label must be an empty string",
    ),
    reject(
        20,
        "capacity-type-unknown",
        with_requirements(req(L.CAPACITY_TYPE, "In", ["test"])),
        f"{REQ}[0].values",
        "no valid values found",
    ),
    reject(
        21,
        "resource-with-space",
        overlay(capacity={"foo bar": "1"}),
        "spec.capacity['foo bar']",
        "an extended resource is named like example.com/device",
    ),
]


@pytest.mark.parametrize("doc", ACCEPTED)
def test_rule_accepts(doc: dict[str, Any]) -> None:
    assert errors(validate(doc)) == []


@pytest.mark.parametrize(("doc", "path", "message", "exact"), REJECTED)
def test_rule_rejects(doc: dict[str, Any], path: str, message: str, exact: bool) -> None:
    result = validate(doc)
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
    everything = set(range(1, 22))
    assert _rules_with(ACCEPTED, r"rule-(\d\d)-ok-.+") == everything
    assert _rules_with(REJECTED, r"rule-(\d\d)-(?!ok-).+") == everything
    ids = [p.id for p in ACCEPTED + REJECTED]
    assert len(ids) == len(set(ids))


def test_cel_rejections_carry_no_other_error() -> None:
    """The CEL examples break one rule each: nothing else is reported."""
    for param in REJECTED:
        doc, path, message, exact = param.values
        if exact:
            assert errors(validate(doc)) == [(path, message)], param.id


def test_every_well_known_label_but_capacity_type_takes_any_value() -> None:
    """Upstream's "should allow well known label exceptions" (capacity type is checked at runtime)."""
    for key in sorted(L.WELL_KNOWN_LABELS - {L.CAPACITY_TYPE}):
        assert errors(validate(with_requirements(req(key, "In", ["test"])))) == [], key


def test_a_requirement_naming_no_instance_type_earns_a_warning_with_the_catalog() -> None:
    labels = {
        "karpenter.k8s.aws/instance-family": frozenset({"m7i", "c7i"}),
        "karpenter.k8s.aws/instance-category": frozenset({"m", "c"}),
    }
    doc = with_requirements(req("karpenter.k8s.aws/instance-family", "In", ["m"]))
    result = validate(doc, catalog_labels=labels)
    assert result.ok
    assert result.warnings == ["no instance family is named m; did you mean karpenter.k8s.aws/instance-category?"]


def test_errors_name_the_document() -> None:
    result = validate(overlay(price="-1"))
    assert result.document == "NodeOverlay/savings-plan"
    assert result.summary().splitlines()[0] == "NodeOverlay/savings-plan is invalid:"
    assert 'spec.price: Invalid value: "-1"' in result.summary()


def test_wrong_api_version_names_the_served_one() -> None:
    result = validate({**overlay(), "apiVersion": "karpenter.sh/v1"})
    assert errors(result) == [
        ("apiVersion", 'Unsupported value: "karpenter.sh/v1": NodeOverlay is served as karpenter.sh/v1alpha1')
    ]


def test_no_defaults_are_added() -> None:
    from provisioning.crd import default

    assert default(overlay(weight=5)) == overlay(weight=5)


@pytest.mark.parametrize(
    "where",
    [("requirements",), ("requirements", 0), ("requirements", 0, "values"), ("capacity",), ("price",), ("weight",)],
)
def test_never_raises_whatever_sits_where(where: tuple[Any, ...]) -> None:
    for junk in (None, 5, "x", [], {}, [1], {"a": 1}, True, 1.5):
        doc = overlay(requirements=[req(L.ZONE, "In", ["a"])])
        node: Any = doc["spec"]
        for step in where[:-1]:
            node = node[step]
        node[where[-1]] = junk
        validate(doc)  # must not raise
