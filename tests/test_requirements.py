"""The requirements algebra (pure: no database, no network)."""

from __future__ import annotations

import dataclasses
import itertools
import random
from types import SimpleNamespace

import pytest

from provisioning.crd.labels import ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, OS, ZONE
from provisioning.scheduling.requirements import (
    INSTANCE_TYPE_LABELS,
    OFFERING_LABELS,
    Incompatibility,
    Requirement,
    Requirements,
    format_values,
    parse_int,
)

FAMILY = "karpenter.k8s.aws/instance-family"
CPU = "karpenter.k8s.aws/instance-cpu"
SIZE = "karpenter.k8s.aws/instance-size"
R = Requirement.of


def it_labels(name: str, arch: str = "amd64", cpu: int = 2, **extra: str) -> dict[str, str]:
    """Labels as an instance type carries them."""
    family, size = name.split(".")
    return {
        INSTANCE_TYPE: name,
        FAMILY: family,
        SIZE: size,
        ARCH: arch,
        OS: "linux",
        CPU: str(cpu),
        "karpenter.k8s.aws/instance-category": family[0],
        **extra,
    }


CATALOG = [
    it_labels("m5.large"),
    it_labels("m5.xlarge", cpu=4),
    it_labels("c6i.large"),
    it_labels("c6i.2xlarge", cpu=8),
    it_labels("r7g.large", arch="arm64"),
    it_labels("r7g.4xlarge", arch="arm64", cpu=16),
    it_labels("t3.nano"),
]


# --------------------------------------------------------------------------------------
# Requirement: operators and the stored model


def test_in_and_not_in():
    r = R(FAMILY, "In", ["m5", "c6i"])
    assert (r.complement, r.values, r.gte, r.lte) == (False, frozenset({"m5", "c6i"}), None, None)
    assert r.has("m5") and not r.has("r7g")
    n = R(FAMILY, "NotIn", ["m5"])
    assert (n.complement, n.values) == (True, frozenset({"m5"}))
    assert n.has("c6i") and not n.has("m5")


def test_exists_and_does_not_exist():
    e = R("team", "Exists")
    assert (e.complement, e.values) == (True, frozenset())
    assert e.has("anything") and e.has("")
    d = R("team", "DoesNotExist")
    assert (d.complement, d.values) == (False, frozenset())
    assert not d.has("a")
    assert d.is_empty and not e.is_empty


def test_exists_ignores_values():
    assert R("team", "Exists", ["a"]) == R("team", "Exists")
    assert R("team", "DoesNotExist", ["a"]) == R("team", "DoesNotExist")


@pytest.mark.parametrize(
    ("operator", "value", "gte", "lte"),
    [("Gt", "3", 4, None), ("Lt", "10", None, 9), ("Gte", "4", 4, None), ("Lte", "9", None, 9)],
)
def test_integer_operators_are_stored_as_inclusive_bounds(operator, value, gte, lte):
    r = R(CPU, operator, [value])
    assert (r.complement, r.values, r.gte, r.lte) == (True, frozenset(), gte, lte)


def test_gt_and_lt_are_strict_gte_and_lte_inclusive():
    gt, lt, gte, lte = R(CPU, "Gt", ["3"]), R(CPU, "Lt", ["10"]), R(CPU, "Gte", ["3"]), R(CPU, "Lte", ["10"])
    assert not gt.has("3") and gt.has("4") and gt.has("1000")
    assert not lt.has("10") and lt.has("9") and lt.has("-5")
    assert gte.has("3") and not gte.has("2")
    assert lte.has("10") and not lte.has("11")


def test_gt_equals_gte_of_the_next_integer():
    assert R(CPU, "Gt", ["3"]) == R(CPU, "Gte", ["4"])
    assert R(CPU, "Lt", ["3"]) == R(CPU, "Lte", ["2"])


@pytest.mark.parametrize("value", ["abc", "", "4.0", " 4", "4 ", "4_0", "\u0663", "+", "0x4"])
def test_non_integer_values_fail_a_bounded_requirement(value):
    assert not R(CPU, "Gt", ["0"]).has(value)
    assert not R(CPU, "Lt", ["100"]).has(value)


def test_integer_parsing_follows_atoi():
    assert parse_int("+5") == 5 and parse_int("-2") == -2 and parse_int("007") == 7
    assert parse_int(" 5") is None and parse_int("5_0") is None and parse_int("") is None
    assert R(CPU, "Gt", ["0"]).has("+5") and R(CPU, "Lt", ["0"]).has("-2")


def test_integer_operator_values_from_yaml_ints():
    assert R(CPU, "Gt", [3]) == R(CPU, "Gt", ["3"])
    assert R("x", "In", [1, True]).values == frozenset({"1", "true"})


@pytest.mark.parametrize("values", [[], ["a"], ["1", "2"], ["1.5"]])
def test_integer_operators_need_one_integer(values):
    with pytest.raises(ValueError, match="single integer"):
        R(CPU, "Gt", values)


def test_unknown_operator():
    with pytest.raises(ValueError, match="unknown operator 'Near'"):
        R(CPU, "Near", ["1"])


def test_min_values_kept():
    assert R(FAMILY, "In", ["m5", "c6i"], min_values=2).min_values == 2
    assert R(FAMILY, "Exists", min_values=3).min_values == 3


@pytest.mark.parametrize(
    ("alias", "key"),
    [
        ("beta.kubernetes.io/arch", ARCH),
        ("beta.kubernetes.io/os", OS),
        ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
        ("failure-domain.beta.kubernetes.io/zone", ZONE),
        ("failure-domain.beta.kubernetes.io/region", "topology.kubernetes.io/region"),
    ],
)
def test_aliases_are_normalized(alias, key):
    assert R(alias, "In", ["x"]).key == key
    assert list(Requirements.from_list([{"key": alias, "operator": "In", "values": ["x"]}])) == [key]
    assert list(Requirements.from_labels({alias: "x"})) == [key]
    term = {"matchExpressions": [{"key": alias, "operator": "In", "values": ["x"]}]}
    assert list(Requirements.from_node_selector_term(term)) == [key]


def test_an_alias_and_its_key_intersect():
    reqs = Requirements.from_list(
        [
            {"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
            {"key": ARCH, "operator": "In", "values": ["arm64"]},
        ]
    )
    assert reqs[ARCH] == R(ARCH, "In", ["arm64"])


def test_requirement_is_frozen_and_hashable():
    r = R(FAMILY, "In", ["m5"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.values = frozenset()  # type: ignore[misc]
    assert {r, R(FAMILY, "In", ["m5"])} == {r}


def test_the_constructor_normalizes_bounds():
    assert Requirement(CPU, False, frozenset({"2", "4", "x"}), gte=3) == R(CPU, "In", ["4"])
    crossed = Requirement(CPU, True, gte=5, lte=4)
    assert crossed.is_empty and crossed.operator == "DoesNotExist"
    assert Requirement("k", False, ["a", "b"]).values == frozenset({"a", "b"})


# --------------------------------------------------------------------------------------
# Intersections


def test_in_intersect_in():
    assert R(FAMILY, "In", ["m5", "c6i"]).intersect(R(FAMILY, "In", ["c6i", "r7g"])) == R(FAMILY, "In", ["c6i"])
    assert R(FAMILY, "In", ["m5"]).intersect(R(FAMILY, "In", ["c6i"])).is_empty


def test_not_in_intersect_in_removes_the_exclusions():
    got = R(FAMILY, "NotIn", ["m5"]).intersect(R(FAMILY, "In", ["m5", "c6i"]))
    assert got == R(FAMILY, "In", ["c6i"])
    assert R(FAMILY, "In", ["m5", "c6i"]).intersect(R(FAMILY, "NotIn", ["m5"])) == got


def test_not_in_intersect_not_in_unions_the_exclusions():
    got = R(SIZE, "NotIn", ["nano"]).intersect(R(SIZE, "NotIn", ["micro", "small"]))
    assert got == R(SIZE, "NotIn", ["nano", "micro", "small"])
    assert got.operator == "NotIn"


def test_exists_intersect_does_not_exist_is_empty():
    got = R("team", "Exists").intersect(R("team", "DoesNotExist"))
    assert got.is_empty and got.operator == "DoesNotExist"
    assert not R("team", "Exists").intersects(R("team", "DoesNotExist"))


def test_exists_intersect_in_is_the_in():
    i = R("team", "In", ["a"])
    assert R("team", "Exists").intersect(i) is i
    assert i.intersect(R("team", "Exists")) is i


def test_unchanged_intersections_reuse_the_object():
    i = R(FAMILY, "In", ["m5", "c6i"])
    assert i.intersect(R(FAMILY, "In", ["m5", "c6i", "r7g"])) is i
    assert i.intersect(R(FAMILY, "NotIn", ["t3"])) is i
    assert i.intersect(i) is i


def test_bounds_intersect_to_a_range_and_crossing_bounds_are_empty():
    got = R(CPU, "Gt", ["3"]).intersect(R(CPU, "Lt", ["17"]))
    assert (got.complement, got.gte, got.lte) == (True, 4, 16)
    assert got.has("4") and got.has("16") and not got.has("17") and not got.has("3")
    assert R(CPU, "Gt", ["3"]).intersect(R(CPU, "Gte", ["8"])).gte == 8
    assert R(CPU, "Lt", ["8"]).intersect(R(CPU, "Lte", ["3"])).lte == 3
    crossed = R(CPU, "Gt", ["8"]).intersect(R(CPU, "Lt", ["9"]))
    assert crossed.is_empty
    assert R(CPU, "Gte", ["8"]).intersect(R(CPU, "Lte", ["8"])).has("8")


def test_bounds_filter_an_in_set_and_are_dropped():
    got = R(CPU, "In", ["2", "4", "8", "x"]).intersect(R(CPU, "Gt", ["3"]))
    assert got == R(CPU, "In", ["4", "8"])
    assert (got.gte, got.lte) == (None, None)
    assert R(CPU, "Lte", ["4"]).intersect(R(CPU, "In", ["2", "4", "8"])) == R(CPU, "In", ["2", "4"])
    assert R(CPU, "In", ["x", "y"]).intersect(R(CPU, "Gt", ["0"])).is_empty


def test_not_in_with_bounds():
    got = R(CPU, "NotIn", ["8"]).intersect(R(CPU, "Gt", ["3"]))
    assert (got.complement, got.values, got.gte) == (True, frozenset({"8"}), 4)
    assert got.has("4") and not got.has("8") and not got.has("2") and not got.has("x")
    assert str(got) == f"{CPU} NotIn [8], Gt 3"


def test_intersect_takes_the_larger_min_values():
    a = R(FAMILY, "In", ["m5", "c6i", "r7g"], min_values=2)
    b = R(FAMILY, "Exists", min_values=3)
    assert a.intersect(b).min_values == 3
    assert b.intersect(R(FAMILY, "NotIn", ["t3"])).min_values == 3


def test_intersect_needs_the_same_key():
    with pytest.raises(ValueError, match="different keys"):
        R(FAMILY, "In", ["m5"]).intersect(R(SIZE, "In", ["large"]))


UNIVERSE = ["a", "b", "c", "-2", "0", "1", "3", "4", "5", "8", "10", "17", "x1", ""]
SAMPLES = [
    R("k", "In", ["a", "b"]),
    R("k", "In", ["b", "c", "4"]),
    R("k", "In", ["1", "3", "5", "x1"]),
    R("k", "In", []),
    R("k", "NotIn", ["a"]),
    R("k", "NotIn", ["b", "4"]),
    R("k", "Exists"),
    R("k", "DoesNotExist"),
    R("k", "Gt", ["3"]),
    R("k", "Lt", ["5"]),
    R("k", "Gte", ["5"]),
    R("k", "Lte", ["0"]),
    R("k", "Gt", ["3"]).intersect(R("k", "Lt", ["9"])),
    R("k", "NotIn", ["8"]).intersect(R("k", "Gt", ["3"])),
]


@pytest.mark.parametrize(("a", "b"), list(itertools.product(SAMPLES, SAMPLES)), ids=lambda r: str(r))
def test_intersection_accepts_exactly_what_both_accept(a, b):
    both = a.intersect(b)
    assert both == b.intersect(a)
    for value in UNIVERSE:
        assert both.has(value) == (a.has(value) and b.has(value)), value
    assert a.intersects(b) == (not both.is_empty)


# --------------------------------------------------------------------------------------
# Display


def test_str_names_key_operator_and_values():
    assert str(R(FAMILY, "In", ["m5", "c6i"])) == "karpenter.k8s.aws/instance-family In [c6i, m5]"
    assert str(R(SIZE, "NotIn", ["nano", "micro"])) == "karpenter.k8s.aws/instance-size NotIn [micro, nano]"
    assert str(R("team", "Exists")) == "team Exists"
    assert str(R("team", "DoesNotExist")) == "team DoesNotExist"
    assert str(R(CPU, "Gt", ["3"])) == f"{CPU} Gt 3"
    assert str(R(CPU, "Gte", ["4"])) == f"{CPU} Gt 3"
    assert str(R(CPU, "Lte", ["9"])) == f"{CPU} Lt 10"
    assert str(R(CPU, "Gt", ["3"]).intersect(R(CPU, "Lt", ["17"]))) == f"{CPU} Gt 3, Lt 17"


def test_numbers_are_listed_in_numeric_order():
    assert str(R(CPU, "In", ["16", "2", "4", "x"])) == f"{CPU} In [2, 4, 16, x]"
    assert format_values([str(i) for i in range(20)], 3) == "0, 1, 2, ... 17 more"


@pytest.mark.parametrize(
    ("requirement", "operator"),
    [
        (R("k", "In", ["a"]), "In"),
        (R("k", "NotIn", ["a"]), "NotIn"),
        (R("k", "Exists"), "Exists"),
        (R("k", "DoesNotExist"), "DoesNotExist"),
        (R("k", "In", []), "DoesNotExist"),
        (R("k", "Gt", ["1"]), "Gt"),
        (R("k", "Gte", ["1"]), "Gt"),
        (R("k", "Lt", ["1"]), "Lt"),
        (R("k", "Lte", ["1"]), "Lt"),
    ],
)
def test_operator(requirement, operator):
    assert requirement.operator == operator


@pytest.mark.parametrize("requirement", SAMPLES + [R(FAMILY, "In", ["m5", "c6i"], min_values=2)], ids=str)
def test_to_dicts_round_trips(requirement):
    again = Requirements.from_list(requirement.to_dicts())
    assert again[requirement.key] == requirement


def test_any_value():
    assert R("k", "In", ["b", "a"]).any_value() == "a"
    assert R("k", "DoesNotExist").any_value() is None
    assert R("k", "Exists").any_value() == "0"
    assert R("k", "NotIn", ["0", "1"]).any_value() == "2"
    assert R("k", "Gt", ["5"]).any_value() == "6"
    assert R("k", "Lt", ["-3"]).any_value() == "-4"
    tight = R("k", "Gte", ["3"]).intersect(R("k", "Lte", ["3"])).intersect(R("k", "NotIn", ["3"]))
    assert not tight.is_empty
    assert tight.has(tight.any_value())
    for requirement in SAMPLES:
        value = requirement.any_value()
        assert (value is None) == requirement.is_empty
        assert value is None or requirement.has(value)


# --------------------------------------------------------------------------------------
# Requirements: construction and merge


def test_from_list_reads_nodepool_requirements(seed_nodepool):
    reqs = Requirements.from_list(seed_nodepool["spec"]["template"]["spec"]["requirements"])
    assert set(reqs) == {CAPACITY_TYPE, ARCH, FAMILY, SIZE}
    assert reqs[FAMILY] == R(FAMILY, "In", ["m", "c", "r"])
    assert reqs[SIZE].operator == "NotIn"


def test_from_list_min_values_and_repeated_keys():
    reqs = Requirements.from_list(
        [
            {"key": FAMILY, "operator": "In", "values": ["m5", "c6i", "r7g"], "minValues": 2},
            {"key": CPU, "operator": "Gt", "values": ["3"]},
            {"key": CPU, "operator": "Lt", "values": ["17"]},
            {"key": "team", "operator": "Exists"},
        ]
    )
    assert reqs[FAMILY].min_values == 2
    assert (reqs[CPU].gte, reqs[CPU].lte) == (4, 16)
    assert reqs["team"] == R("team", "Exists")
    assert Requirements.from_list(None) == Requirements()
    assert reqs.has_min_values and reqs.without(FAMILY).has_min_values is False
    assert Requirements([R(CPU, "Gt", ["3"])]).merge(reqs.only({FAMILY})).has_min_values


def test_from_list_reads_tuples():
    reqs = Requirements.from_list([(ARCH, "In", ("arm64",)), ("team", "Exists", ())])
    assert reqs == Requirements([R(ARCH, "In", ["arm64"]), R("team", "Exists")])


def test_from_labels():
    reqs = Requirements.from_labels({ARCH: "amd64", "team": "a"})
    assert reqs[ARCH] == R(ARCH, "In", ["amd64"]) and reqs["team"] == R("team", "In", ["a"])
    assert Requirements.from_labels(None) == Requirements()


def test_from_node_selector_term():
    term = {
        "matchExpressions": [
            {"key": ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]},
            {"key": CPU, "operator": "Gt", "values": ["3"]},
        ],
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ip-10-0-0-1.ec2.internal"]}],
    }
    reqs = Requirements.from_node_selector_term(term)
    assert reqs[ZONE].values == frozenset({"us-east-1a", "us-east-1b"})
    assert reqs[CPU].gte == 4
    assert reqs[HOSTNAME] == R(HOSTNAME, "In", ["ip-10-0-0-1.ec2.internal"])
    with pytest.raises(ValueError, match="metadata.name"):
        Requirements.from_node_selector_term({"matchFields": [{"key": "spec.x", "operator": "In", "values": ["a"]}]})
    assert Requirements.from_node_selector_term({}) == Requirements() == Requirements.from_node_selector_term(None)


def test_from_node_selector_term_object_form():
    term = SimpleNamespace(
        match_expressions=((ARCH, "In", ("arm64",)),),
        match_fields=(("metadata.name", "In", ("node-1",)),),
    )
    reqs = Requirements.from_node_selector_term(term)
    assert reqs == Requirements([R(ARCH, "In", ["arm64"]), R(HOSTNAME, "In", ["node-1"])])


def test_merge_intersects_per_key_and_keeps_both_sides_keys():
    pool = Requirements.from_list(
        [
            {"key": ARCH, "operator": "In", "values": ["amd64", "arm64"]},
            {"key": SIZE, "operator": "NotIn", "values": ["nano"]},
        ]
    )
    pod = Requirements.from_list(
        [
            {"key": ARCH, "operator": "In", "values": ["arm64"]},
            {"key": SIZE, "operator": "NotIn", "values": ["micro"]},
            {"key": ZONE, "operator": "In", "values": ["us-east-1a"]},
        ]
    )
    merged = pool.merge(pod)
    assert merged[ARCH] == R(ARCH, "In", ["arm64"])
    assert merged[SIZE] == R(SIZE, "NotIn", ["nano", "micro"])
    assert merged[ZONE] == R(ZONE, "In", ["us-east-1a"])
    assert list(merged) == [ARCH, SIZE, ZONE]
    assert set(pool) == {ARCH, SIZE}  # the inputs are untouched
    assert pool[ARCH].values == frozenset({"amd64", "arm64"})


def test_merge_without_change_returns_self():
    pool = Requirements.from_labels({ARCH: "amd64"})
    assert pool.merge(Requirements()) is pool
    assert Requirements().merge(pool) is pool
    assert pool.merge(Requirements.from_list([{"key": ARCH, "operator": "Exists"}])) is pool


def test_only_keeps_the_instance_type_keys():
    reqs = pool_reqs((ARCH, "In", ["amd64"]), (ZONE, "In", ["us-east-1a"]), (CAPACITY_TYPE, "In", ["spot"]))
    reqs = reqs.add(R("team", "In", ["a"]), R("karpenter.sh/nodepool", "In", ["general"]))
    assert list(reqs.only(INSTANCE_TYPE_LABELS)) == [ARCH]
    assert set(reqs.only(OFFERING_LABELS)) == {ZONE, CAPACITY_TYPE}
    arch_only = reqs.only(INSTANCE_TYPE_LABELS)
    assert arch_only.only(INSTANCE_TYPE_LABELS) is arch_only


def test_absent_well_known_label_of_an_instance_type_means_it_has_none():
    gpu = pool_reqs(("karpenter.k8s.aws/instance-gpu-name", "In", ["t4"])).only(INSTANCE_TYPE_LABELS)
    assert gpu.labels_match(it_labels("m5.large")) is not None
    assert gpu.labels_match(it_labels("g4dn.xlarge", **{"karpenter.k8s.aws/instance-gpu-name": "t4"})) is None
    no_gpu = pool_reqs(("karpenter.k8s.aws/instance-gpu-name", "DoesNotExist")).only(INSTANCE_TYPE_LABELS)
    assert no_gpu.labels_match(it_labels("m5.large")) is None


def test_add_and_without():
    reqs = Requirements.from_labels({ARCH: "amd64"}).add(R(HOSTNAME, "In", ["placeholder-1"]))
    assert set(reqs) == {ARCH, HOSTNAME}
    assert set(reqs.without(HOSTNAME)) == {ARCH}
    assert reqs.without("absent") is reqs


def test_requirements_is_an_immutable_hashable_mapping():
    a = Requirements.from_labels({ARCH: "amd64", "team": "a"})
    b = Requirements.from_labels({"team": "a", ARCH: "amd64"})
    assert a == b and hash(a) == hash(b) and len(a) == 2
    assert a.get("missing") is None and "team" in a
    assert not hasattr(a, "__setitem__")
    assert str(a) == "kubernetes.io/arch In [amd64], team In [a]"
    assert a.to_list() == [
        {"key": ARCH, "operator": "In", "values": ["amd64"]},
        {"key": "team", "operator": "In", "values": ["a"]},
    ]


# --------------------------------------------------------------------------------------
# compatible: Karpenter's Compatible / Intersects


def pool_reqs(*items: tuple) -> Requirements:
    return Requirements.from_list(items)


def test_undefined_custom_label_in_is_incompatible():
    pool = pool_reqs((ARCH, "In", ["amd64"]))
    pod = pool_reqs(("team", "In", ["a"]))
    problem = pool.compatible(pod)
    assert isinstance(problem, Incompatibility)
    assert problem.key == "team" and problem.mine is None and problem.theirs == R("team", "In", ["a"])
    assert problem.message.startswith("pod requires team In [a] but the NodePool does not define team")
    assert str(problem) == problem.message


@pytest.mark.parametrize(("operator", "values"), [("NotIn", ["a"]), ("DoesNotExist", [])])
def test_undefined_custom_label_that_absence_satisfies_is_compatible(operator, values):
    assert pool_reqs((ARCH, "In", ["amd64"])).compatible(pool_reqs(("team", operator, values))) is None


@pytest.mark.parametrize(("operator", "values"), [("Exists", []), ("Gt", ["3"]), ("Lt", ["3"])])
def test_undefined_custom_label_that_needs_the_label_is_incompatible(operator, values):
    problem = pool_reqs((ARCH, "In", ["amd64"])).compatible(pool_reqs(("team", operator, values)))
    assert problem is not None and problem.key == "team"


def test_undefined_well_known_labels_are_allowed():
    pool = pool_reqs((FAMILY, "In", ["m5"]))
    pod = pool_reqs((ARCH, "In", ["arm64"]), (ZONE, "In", ["us-east-1a"]), (CPU, "Gt", ["3"]))
    assert pool.compatible(pod) is None


def test_allow_undefined_is_configurable():
    pool, pod = pool_reqs(), pool_reqs(("team", "In", ["a"]))
    assert pool.compatible(pod, frozenset({"team"})) is None
    assert pool.compatible(pool_reqs((ARCH, "In", ["arm64"])), frozenset()) is not None
    assert pool.intersects(pod) is None  # Intersects: only shared keys matter


def test_keys_only_the_nodepool_defines_do_not_matter():
    assert pool_reqs(("team", "In", ["a"])).compatible(pool_reqs()) is None


def test_defined_keys_must_intersect_with_a_precise_message():
    pool = pool_reqs((ARCH, "In", ["amd64"]))
    pod = pool_reqs((ARCH, "In", ["arm64"]))
    problem = pool.compatible(pod)
    assert problem is not None
    assert problem.message == "pod requires kubernetes.io/arch In [arm64] but the NodePool allows In [amd64]"
    assert (problem.key, problem.mine, problem.theirs) == (ARCH, pool[ARCH], pod[ARCH])
    assert pool.compatible(pool_reqs((ARCH, "In", ["arm64", "amd64"]))) is None


def test_side_names_appear_in_the_message():
    problem = pool_reqs((ARCH, "In", ["amd64"])).compatible(
        pool_reqs((ARCH, "In", ["arm64"])), mine_name='NodePool "general"', theirs_name="pod default/web-0"
    )
    assert problem is not None
    assert (
        problem.message
        == 'pod default/web-0 requires kubernetes.io/arch In [arm64] but NodePool "general" allows In [amd64]'
    )


def test_aliases_are_compared_under_their_new_name():
    problem = pool_reqs((ARCH, "In", ["amd64"])).compatible(pool_reqs(("beta.kubernetes.io/arch", "In", ["arm64"])))
    assert problem is not None and problem.key == ARCH


def test_bounds_against_bounds_and_sets():
    pool = pool_reqs((CPU, "Gt", ["4"]))
    assert pool.compatible(pool_reqs((CPU, "Lt", ["16"]))) is None
    problem = pool.compatible(pool_reqs((CPU, "Lt", ["3"])))
    assert problem is not None
    assert problem.message == f"pod requires {CPU} Lt 3 but the NodePool allows Gt 4"
    assert pool.compatible(pool_reqs((CPU, "In", ["2", "4"]))) is not None
    assert pool.compatible(pool_reqs((CPU, "In", ["2", "8"]))) is None


def test_absence_on_both_sides_is_compatible():
    assert pool_reqs(("team", "DoesNotExist")).compatible(pool_reqs(("team", "NotIn", ["a"]))) is None
    assert pool_reqs(("team", "DoesNotExist")).compatible(pool_reqs(("team", "DoesNotExist"))) is None
    assert pool_reqs(("team", "DoesNotExist")).compatible(pool_reqs(("team", "In", ["a"]))) is not None
    assert pool_reqs(("team", "Exists")).compatible(pool_reqs(("team", "DoesNotExist"))) is not None


def test_not_in_against_in():
    pool = pool_reqs((SIZE, "NotIn", ["nano", "micro"]))
    assert pool.compatible(pool_reqs((SIZE, "In", ["nano"]))) is not None
    assert pool.compatible(pool_reqs((SIZE, "In", ["nano", "large"]))) is None


def test_the_first_problem_in_the_pods_key_order_is_reported():
    pool = pool_reqs((ARCH, "In", ["amd64"]), (ZONE, "In", ["us-east-1a"]))
    pod = pool_reqs((ZONE, "In", ["us-east-1b"]), (ARCH, "In", ["arm64"]))
    problem = pool.compatible(pod)
    assert problem is not None and problem.key == ZONE


# --------------------------------------------------------------------------------------
# labels_match: the instance-type filter


def test_labels_match():
    pool = pool_reqs((ARCH, "In", ["amd64"]), (SIZE, "NotIn", ["nano"]), (CPU, "Gt", ["3"]))
    assert pool.labels_match(it_labels("m5.xlarge", cpu=4)) is None
    problem = pool.labels_match(it_labels("m5.large", cpu=2))
    assert problem is not None and problem.key == CPU
    assert problem.message == f"{CPU} Gt 3 is not met by {CPU}=2"
    assert problem.theirs == R(CPU, "In", ["2"])
    problem = pool.labels_match(it_labels("t3.nano", cpu=4))
    assert problem is not None and problem.key == SIZE


def test_an_absent_label_satisfies_only_not_in_and_does_not_exist():
    absent: dict[str, str] = {}
    assert Requirements([R("team", "NotIn", ["a"])]).labels_match(absent) is None
    assert Requirements([R("team", "DoesNotExist")]).labels_match(absent) is None
    for requirement in [R("team", "In", ["a"]), R("team", "Exists"), R("team", "Gt", ["1"]), R("team", "Lt", ["1"])]:
        problem = Requirements([requirement]).labels_match(absent)
        assert problem is not None and problem.theirs is None
        assert problem.message == f"{requirement} is not met: the label team is absent"
    bounded_not_in = R("team", "NotIn", ["5"]).intersect(R("team", "Gt", ["1"]))
    assert Requirements([bounded_not_in]).labels_match(absent) is not None


def test_does_not_exist_fails_on_a_present_label():
    problem = Requirements([R("team", "DoesNotExist")]).labels_match({"team": "a"})
    assert problem is not None and problem.message == "team DoesNotExist is not met by team=a"


def test_non_integer_label_fails_a_bound():
    assert Requirements([R(CPU, "Gt", ["1"])]).labels_match({CPU: "many"}) is not None


def test_labels_match_reports_in_requirement_order_and_ignores_extra_labels():
    reqs = pool_reqs((FAMILY, "In", ["c6i"]), (ARCH, "In", ["arm64"]))
    problem = reqs.labels_match({**it_labels("m5.large"), "extra": "x"})
    assert problem is not None and problem.key == FAMILY
    assert pool_reqs().labels_match({"anything": "x"}) is None


def test_labels_match_remembers_its_answers():
    reqs = pool_reqs((FAMILY, "In", ["c6i"]))
    first = reqs.labels_match(it_labels("m5.large"))
    assert first is not None and reqs.labels_match(it_labels("m5.xlarge")) is first


def test_labels_match_over_a_thousand_label_sets():
    rng = random.Random(7)
    families = ["m5", "m6i", "m7g", "c5", "c6i", "c7g", "r5", "r6i", "r7g", "t3", "x2idn"]
    label_sets = [
        it_labels(
            f"{rng.choice(families)}.{rng.choice(['large', 'xlarge', 'nano'])}",
            arch=rng.choice(["amd64", "arm64"]),
            cpu=rng.choice([2, 4, 8, 16, 32, 64]),
        )
        for _ in range(1000)
    ]
    for labels in label_sets[::3]:
        del labels[OS]
    reqs = pool_reqs(
        (FAMILY, "In", ["m5", "c6i", "r7g", "c7g"]),
        (ARCH, "In", ["amd64"]),
        (CPU, "Gt", ["2"]),
        (CPU, "Lt", ["64"]),
        (SIZE, "NotIn", ["nano"]),
        (OS, "NotIn", ["windows"]),
    )
    answers = [reqs.labels_match(labels) for labels in label_sets]
    for labels, answer in zip(label_sets, answers, strict=True):
        expected = (
            labels[FAMILY] in {"m5", "c6i", "r7g", "c7g"}
            and labels[ARCH] == "amd64"
            and 2 < int(labels[CPU]) < 64
            and labels[SIZE] != "nano"
        )
        assert (answer is None) == expected == reqs.matches(labels)
        if answer is not None:
            assert answer.key in reqs and answer.key in answer.message
    assert 0 < sum(a is None for a in answers) < 1000


# --------------------------------------------------------------------------------------
# match_any: why nothing matched


def test_the_seed_nodepool_matches_no_instance_family(seed_nodepool):
    pool = Requirements.from_list(seed_nodepool["spec"]["template"]["spec"]["requirements"])
    reqs = pool.only(INSTANCE_TYPE_LABELS)
    assert set(reqs) == {ARCH, FAMILY, SIZE}  # capacity type is the offerings' business
    problem = reqs.match_any(CATALOG)
    assert problem is not None and problem.key == FAMILY
    assert problem.message == (
        "karpenter.k8s.aws/instance-family In [c, m, r] matches none of the offered values (c6i, m5, r7g, t3)"
    )
    assert problem.theirs == R(FAMILY, "In", ["c6i", "m5", "r7g", "t3"])
    for labels in CATALOG:
        assert reqs.labels_match(labels).key == FAMILY  # type: ignore[union-attr]


def test_match_any_finds_a_match():
    reqs = pool_reqs((FAMILY, "In", ["m5", "r7g"]), (ARCH, "In", ["arm64"]))
    assert reqs.match_any(CATALOG) is None
    assert reqs.match_any(iter(CATALOG)) is None


def test_match_any_names_the_requirements_that_narrowed_first():
    reqs = pool_reqs((ARCH, "In", ["arm64"]), (FAMILY, "In", ["m5", "c6i"]))
    problem = reqs.match_any(CATALOG)
    assert problem is not None and problem.key == FAMILY
    assert problem.message == (
        "karpenter.k8s.aws/instance-family In [c6i, m5] matches none of the values offered where "
        "kubernetes.io/arch In [arm64] (r7g)"
    )


def test_match_any_cuts_long_value_lists():
    catalog = [it_labels(f"m{i}.large") for i in range(1, 30)]
    problem = pool_reqs((FAMILY, "In", ["c5"])).match_any(catalog)
    assert problem is not None
    assert problem.message.endswith("(m1, m10, m11, m12, m13, m14, m15, m16, m17, m18, ... 19 more)")


def test_match_any_on_a_label_no_candidate_has():
    problem = pool_reqs(("team", "In", ["a"])).match_any(CATALOG)
    assert (
        problem is not None
        and problem.message == "team In [a] matches none of the offered values (none has the label team)"
    )


def test_match_any_with_no_candidates():
    problem = pool_reqs((ARCH, "In", ["amd64"])).match_any([])
    assert problem is not None and problem.key == "" and "nothing" in problem.message


# --------------------------------------------------------------------------------------
# minValues


def test_min_values_satisfied():
    reqs = pool_reqs()
    assert reqs.min_values_satisfied(CATALOG) is None
    reqs = Requirements([R(FAMILY, "In", ["m5", "c6i", "r7g"], min_values=2)])
    assert reqs.min_values_satisfied(CATALOG) is None
    problem = reqs.min_values_satisfied([it_labels("m5.large"), it_labels("m5.xlarge")])
    assert problem is not None and problem.key == FAMILY
    assert problem.message == (
        "karpenter.k8s.aws/instance-family In [c6i, m5, r7g] needs at least 2 distinct values (minValues) "
        "but the instance types offer 1 (m5)"
    )
    assert problem.theirs == R(FAMILY, "In", ["m5"])


def test_min_values_counts_only_accepted_values():
    reqs = Requirements([R(FAMILY, "In", ["m5", "c6i"], min_values=2)])
    assert reqs.min_values_satisfied([it_labels("m5.large"), it_labels("t3.nano")]) is not None


def test_min_values_on_exists_and_on_several_keys():
    reqs = Requirements([R(INSTANCE_TYPE, "Exists", min_values=5), R(FAMILY, "Exists", min_values=2)])
    assert reqs.min_values_satisfied(CATALOG) is None
    problem = reqs.min_values_satisfied(CATALOG[:4])
    assert problem is not None and problem.key == INSTANCE_TYPE and "offer 4" in problem.message
    assert reqs.min_values_satisfied([]).message.endswith("offer 0")  # type: ignore[union-attr]


def test_min_values_survives_a_merge():
    pool = Requirements([R(FAMILY, "In", ["m5", "c6i", "r7g"], min_values=3)])
    merged = pool.merge(pool_reqs((ARCH, "In", ["amd64"])))
    assert merged[FAMILY].min_values == 3
    assert merged.min_values_satisfied([it for it in CATALOG if it[ARCH] == "amd64"]) is not None


def test_min_values_prefix():
    reqs = Requirements([R(FAMILY, "Exists", min_values=3)])
    assert reqs.min_values_prefix(CATALOG) == 5  # m5, m5, c6i, c6i, r7g: the third family comes fifth
    assert reqs.min_values_prefix(CATALOG[:4]) is None
    assert pool_reqs().min_values_prefix(CATALOG) == 0
