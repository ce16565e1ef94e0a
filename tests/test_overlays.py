"""NodeOverlays laid over THE catalog (``provisioning/scheduling/overlays.py``), as the solver
and the consolidation planner see it: weight, ties by name, price against priceAdjustment,
percentages, capacity merges, per-NodePool matching, preview types; and the solver choosing
another instance type because of an overlay. Pure: the bundled us-east-1 catalog, no database."""

from __future__ import annotations

import functools

import pytest
from builders import deployment

from provisioning.cloud.catalog import Catalog, snapshot_path
from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.overlays import Overlay, PoolTypes, apply, order
from provisioning.services.simulate import plan_documents, plan_to_json

ON_DEMAND, SPOT = "on-demand", "spot"
M5 = "m5.large"  # $0.096 on demand in us-east-1
ZONE_A = "us-east-1a"


@functools.cache
def catalog() -> Catalog:
    return Catalog.from_snapshot(snapshot_path("us-east-1"))


@functools.cache
def types() -> tuple[InstanceType, ...]:
    names = {"m5.large", "m5.xlarge", "c5.large", "m7i.large", "m7g.large", "r9g.large", "r9g.xlarge"}
    return tuple(t for t in catalog().instance_types() if t.name in names)


def pools(*names: str, labels: dict[str, dict[str, str]] | None = None) -> list[PoolTypes]:
    return [
        PoolTypes(n, {**(labels or {}).get(n, {}), "karpenter.sh/nodepool": n}, types()) for n in names or ["general"]
    ]


def overlay(name: str, *requirements: dict, **spec) -> Overlay:
    return Overlay.from_spec(name, {"requirements": list(requirements), **spec})


def req(key: str, *values: str, operator: str = "In") -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


ITYPE = "node.kubernetes.io/instance-type"
FAMILY = "karpenter.k8s.aws/instance-family"
CT = "karpenter.sh/capacity-type"
ZONE = "topology.kubernetes.io/zone"


def offering(applied, pool: str, name: str, capacity_type: str = ON_DEMAND, zone: str = ZONE_A):
    it = next(t for t in applied.instance_types[pool] if t.name == name)
    return next(o for o in it.offerings if o.capacity_type == capacity_type and o.zone == zone)


def the_type(applied, pool: str, name: str) -> InstanceType:
    return next(t for t in applied.instance_types[pool] if t.name == name)


def list_price(name: str) -> float:
    return catalog().on_demand[name]


# ------------------------------------------------------------------ prices


def test_no_overlay_leaves_the_very_same_instance_types():
    applied = apply(pools(), [])
    assert applied.instance_types["general"] is types()


def test_an_absolute_price_replaces_the_list_price_and_keeps_it_as_list():
    applied = apply(pools(), [overlay("flat", req(ITYPE, M5), price="0.05")])
    o = offering(applied, "general", M5)
    assert (o.price, o.list_price, o.listed, o.overlays) == (0.05, list_price(M5), list_price(M5), ("flat",))
    # Every offering of the type, spot too; other types untouched (the very same objects).
    assert offering(applied, "general", M5, SPOT).price == 0.05
    assert the_type(applied, "general", "c5.large") is next(t for t in types() if t.name == "c5.large")


@pytest.mark.parametrize(
    ("adjustment", "expected"),
    [("-27%", 0.096 * 0.73), ("+10%", 0.096 * 1.1), ("+0.05", 0.146), ("-0.016", 0.08), ("-1", 0.0), ("-100%", 0.0)],
)
def test_a_price_adjustment_changes_the_list_price_never_below_zero(adjustment, expected):
    applied = apply(pools(), [overlay("adj", req(ITYPE, M5), priceAdjustment=adjustment)])
    assert offering(applied, "general", M5).price == pytest.approx(expected)
    assert offering(applied, "general", M5).listed == pytest.approx(0.096)


def test_requirements_on_capacity_type_and_zone_pick_the_offerings():
    applied = apply(pools(), [overlay("sp", req(ITYPE, M5), req(CT, ON_DEMAND), req(ZONE, ZONE_A), price="0.01")])
    assert offering(applied, "general", M5).price == 0.01
    assert offering(applied, "general", M5, zone="us-east-1b").price == pytest.approx(0.096)
    spot = offering(applied, "general", M5, SPOT)
    assert spot.overlays == () and spot.price == catalog().spot.get((M5, ZONE_A))


def test_the_highest_weight_wins_the_price():
    low = overlay("a-low", req(FAMILY, "m5"), weight=1, priceAdjustment="-10%")
    high = overlay("z-high", req(ITYPE, M5), weight=50, priceAdjustment="-50%")
    applied = apply(pools(), [low, high])
    assert offering(applied, "general", M5).price == pytest.approx(0.048)
    assert offering(applied, "general", M5).overlays == ("z-high",)
    # The lower one still prices what the higher one does not reach.
    assert offering(applied, "general", "m5.xlarge").price == pytest.approx(list_price("m5.xlarge") * 0.9)
    assert applied.conflicts == {}


def test_equal_weights_that_meet_on_an_offering_conflict_and_the_name_later_in_the_alphabet_wins():
    a = overlay("overlay-a", req(FAMILY, "m5"), weight=10, price="1.03")
    b = overlay("overlay-b", req(ITYPE, M5), weight=10, price="23")
    assert [o.name for o in order([a, b])] == ["overlay-b", "overlay-a"]
    applied = apply(pools(), [a, b])
    assert offering(applied, "general", M5).price == 23.0
    # The loser is not applied anywhere, not even where the winner does not reach.
    assert offering(applied, "general", "m5.xlarge").overlays == ()
    assert set(applied.conflicts) == {"overlay-a"}
    assert applied.conflicts["overlay-a"].startswith(
        "conflicts with NodeOverlay overlay-b of the same weight (10) on the price of m5.large"
    )
    assert set(applied.reach) == {"overlay-b"}


def test_equal_weights_on_different_offerings_do_not_conflict():
    a = overlay("a", req(ITYPE, M5), req(CT, SPOT), weight=10, price="0.01")
    b = overlay("b", req(ITYPE, M5), req(CT, ON_DEMAND), weight=10, price="0.02")
    applied = apply(pools(), [a, b])
    assert applied.conflicts == {}
    assert (offering(applied, "general", M5, SPOT).price, offering(applied, "general", M5).price) == (0.01, 0.02)


def test_no_weight_counts_as_zero_and_loses_to_any_weight():
    applied = apply(
        pools(), [overlay("unweighted", req(ITYPE, M5), price="9"), overlay("one", req(ITYPE, M5), weight=1, price="1")]
    )
    assert offering(applied, "general", M5).price == 1.0


# ------------------------------------------------------------------ capacity


def test_capacities_of_different_overlays_merge_and_the_first_by_weight_gives_an_amount():
    fuse = overlay("fuse", req(ITYPE, M5), weight=5, capacity={"smarter-devices/fuse": "2"})
    more = overlay("more-fuse", req(ITYPE, M5), weight=1, capacity={"smarter-devices/fuse": "9", "example.com/x": 1})
    applied = apply(pools(), [more, fuse])
    m5 = the_type(applied, "general", M5)
    assert m5.capacity["smarter-devices/fuse"] == 2 and m5.capacity["example.com/x"] == 1
    assert m5.allocatable["smarter-devices/fuse"] == 2  # extended resources have no overhead
    assert m5.capacity["cpu"] == 2000 and m5.overlays == ("fuse", "more-fuse")
    assert "smarter-devices/fuse" not in the_type(applied, "general", "c5.large").capacity


def test_equal_weights_on_one_resource_of_a_type_conflict_but_different_resources_merge():
    a = overlay("a", req(ITYPE, M5), weight=3, capacity={"example.com/x": 1})
    b = overlay("b", req(ITYPE, M5), weight=3, capacity={"example.com/x": 2})
    c = overlay("c", req(ITYPE, M5), weight=3, capacity={"example.com/y": 4})
    applied = apply(pools(), [a, b, c])
    assert set(applied.conflicts) == {"a"}  # c first, then b (merged), then a meets b on example.com/x
    assert "the capacity example.com/x of m5.large" in applied.conflicts["a"]
    assert {k: v for k, v in the_type(applied, "general", M5).capacity.items() if "/" in k} == {
        "example.com/x": 2,
        "example.com/y": 4,
    }


# ------------------------------------------------------------------ per NodePool


def test_karpenter_sh_nodepool_scopes_an_overlay_to_one_nodepool():
    only_batch = overlay("batch-discount", req("karpenter.sh/nodepool", "batch"), priceAdjustment="-50%")
    applied = apply(pools("general", "batch"), [only_batch])
    assert offering(applied, "batch", M5).price == pytest.approx(0.048)
    assert offering(applied, "general", M5).overlays == ()
    assert applied.reach == {"batch-discount": {"batch": len(types())}}


def test_template_labels_match_and_a_custom_key_a_nodepool_lacks_does_not():
    team = overlay("team-a", req("example.com/team", "a"), price="0.01")
    exists = overlay("labelled", req("example.com/team", operator="Exists"), weight=2, capacity={"example.com/x": 1})
    applied = apply(
        pools("a", "b", "none", labels={"a": {"example.com/team": "a"}, "b": {"example.com/team": "b"}}), [team, exists]
    )
    assert offering(applied, "a", M5).price == 0.01
    assert offering(applied, "b", M5).overlays == () and offering(applied, "none", M5).overlays == ()
    assert "example.com/x" in the_type(applied, "b", M5).capacity
    assert "example.com/x" not in the_type(applied, "none", M5).capacity


def test_a_conflict_in_one_nodepool_keeps_the_overlay_out_of_every_nodepool():
    a = overlay("a", req(ITYPE, M5), weight=1, price="1")
    b = overlay("b", req(ITYPE, M5), req("karpenter.sh/nodepool", "batch"), weight=1, price="2")
    applied = apply(pools("general", "batch"), [a, b])
    assert set(applied.conflicts) == {"a"}
    assert offering(applied, "general", M5).overlays == ()
    assert offering(applied, "batch", M5).price == 2.0


# ------------------------------------------------------------------ preview types (v1.14)


def test_a_type_without_public_pricing_is_launchable_with_an_absolute_price_of_the_preview_shape():
    base = offering(apply(pools(), []), "general", "r9g.large")
    assert (base.price, base.available) == (None, False)
    applied = apply(pools(), [overlay("preview", req(ITYPE, "r9g.large"), price="0.12")])
    o = offering(applied, "general", "r9g.large")
    assert (o.price, o.available, o.list_price, o.listed, o.overlays) == (0.12, True, None, None, ("preview",))
    assert offering(applied, "general", "r9g.large", SPOT).available
    assert offering(applied, "general", "r9g.xlarge").available is False


def test_another_shape_prices_a_preview_type_but_does_not_make_it_launchable():
    two = overlay("two-reqs", req(ITYPE, "r9g.large"), req(CT, ON_DEMAND), price="0.12")
    adjustment = overlay("adjust", req(ITYPE, "r9g.xlarge"), priceAdjustment="+1")
    applied = apply(pools(), [two, adjustment])
    o = offering(applied, "general", "r9g.large")
    assert (o.price, o.available) == (0.12, False)
    assert offering(applied, "general", "r9g.xlarge").price is None


def test_a_preview_offering_out_of_capacity_stays_out_of_launches():
    marked = {f"on-demand:r9g.large:{ZONE_A}"}
    applied = apply(pools(), [overlay("preview", req(ITYPE, "r9g.large"), price="0.12")])
    applied.instance_types["general"] = tuple(
        Catalog.mark_unavailable(applied.instance_types["general"], marked.__contains__)
    )
    assert offering(applied, "general", "r9g.large").available is False
    assert offering(applied, "general", "r9g.large").unavailable_reason.startswith("insufficient capacity")
    assert offering(applied, "general", "r9g.large", zone="us-east-1b").available is True


def test_a_higher_overlay_adjusts_the_preview_price():
    preview = overlay("preview", req(ITYPE, "r9g.large"), price="0.10")
    discount = overlay("discount", req(FAMILY, "r9g"), weight=10, priceAdjustment="-20%")
    o = offering(apply(pools(), [preview, discount]), "general", "r9g.large")
    assert o.price == pytest.approx(0.08) and o.available and o.overlays == ("preview", "discount")


# ------------------------------------------------------------------ the solver sees them


GENERAL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "general"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    req(CT, ON_DEMAND),
                    req("karpenter.k8s.aws/instance-category", "c", "m", "r"),
                    req("kubernetes.io/arch", "amd64"),
                ],
            }
        }
    },
}


def nodeoverlay(name: str, spec: dict) -> dict:
    return {"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": spec}


def test_the_solver_picks_another_type_because_of_an_overlay_and_says_so():
    work = [GENERAL, deployment("cache", 4, cpu="250m", memory="4Gi")]
    _, plan, _ = plan_documents(work, catalog=catalog())
    before = plan.claims[0].chosen
    savings = nodeoverlay(
        "savings-plan",
        {"weight": 10, "requirements": [req(FAMILY, "r7i"), req(CT, ON_DEMAND)], "priceAdjustment": "-27%"},
    )
    snapshot, plan, notes = plan_documents([*work, savings], catalog=catalog())
    after = plan.claims[0].chosen
    assert before.instance_type != "r7i.large" and after.instance_type == "r7i.large"
    assert after.price == pytest.approx(list_price("r7i.large") * 0.73)
    assert after.price < before.price < list_price("r7i.large")
    assert (after.listed, after.overlays) == (list_price("r7i.large"), ("savings-plan",))
    assert "(list $0.1323, NodeOverlay savings-plan)" in plan.claims[0].why
    claim = plan_to_json(plan, snapshot)["nodeClaims"][0]
    assert claim["pricePerHour"] == pytest.approx(0.096579)
    assert (claim["listPricePerHour"], claim["overlays"]) == (0.1323, ["savings-plan"])
    assert claim["instanceTypeOptions"][0] == "r7i.large"


def test_an_extended_resource_from_an_overlay_makes_pods_asking_for_it_schedulable():
    pod = deployment("fuse", 1, cpu="500m", memory="1Gi")
    pod["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"smarter-devices/fuse": "1"}
    _, plan, _ = plan_documents([GENERAL, pod], catalog=catalog())
    assert not plan.claims and plan.unschedulable
    fuse = nodeoverlay("fuse", {"requirements": [req(FAMILY, "c5")], "capacity": {"smarter-devices/fuse": 1}})
    _, plan, _ = plan_documents([GENERAL, pod, fuse], catalog=catalog())
    assert plan.claims[0].chosen.instance_type.startswith("c5.") and plan.claims[0].chosen.overlays == ("fuse",)


def test_a_conflict_is_a_note_of_the_plan():
    a = nodeoverlay("a", {"weight": 2, "requirements": [req(ITYPE, M5)], "price": "1"})
    b = nodeoverlay("b", {"weight": 2, "requirements": [req(ITYPE, M5)], "price": "2"})
    _, _, notes = plan_documents([GENERAL, a, b], catalog=catalog())
    assert any(n.startswith("NodeOverlay a: not applied: it conflicts with NodeOverlay b") for n in notes), notes


def test_a_preview_type_is_planned_once_an_overlay_prices_it():
    arm = {
        **GENERAL,
        "spec": {
            "template": {
                "spec": {
                    **GENERAL["spec"]["template"]["spec"],
                    "requirements": [req(CT, ON_DEMAND), req(ITYPE, "r9g.large")],
                }
            }
        },
    }
    work = [arm, deployment("app", 1)]
    _, plan, _ = plan_documents(work, catalog=catalog())
    assert not plan.claims
    preview = nodeoverlay("preview", {"requirements": [req(ITYPE, "r9g.large")], "price": "0.11"})
    snapshot, plan, _ = plan_documents([*work, preview], catalog=catalog())
    claim = plan_to_json(plan, snapshot)["nodeClaims"][0]
    assert (claim["instanceType"], claim["pricePerHour"], claim["listPricePerHour"]) == ("r9g.large", 0.11, None)
