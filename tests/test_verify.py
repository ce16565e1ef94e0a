"""THE verifier on hand-made plans: a clean plan passes, and each rule it checks is caught
when a plan breaks it (the plan is first solved, then altered the way a wrong solver would
have made it); ``withhold`` takes out what the violations concern and keeps the rest."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from provisioning.scheduling.plan import ClaimPlan, InstanceTypeOption, Plan
from provisioning.scheduling.podspec import pod_from_template
from provisioning.scheduling.requirements import IN, Requirement, Requirements
from provisioning.scheduling.snapshot import NodePoolInput, Snapshot
from provisioning.scheduling.solver import solve
from provisioning.scheduling.taints import Taint
from provisioning.scheduling.verify import (
    AFFINITY,
    ANTI_AFFINITY,
    HOST_PORTS,
    LIMITS,
    MIN_VALUES,
    NODE_SELECTION,
    NODEPOOL_RULES,
    PLACEMENT,
    RESOURCES,
    SPREAD,
    TAINTS,
    verify,
    withhold,
)
from provisioning.scheduling.workloads import ExistingNode

ZONE, ARCH, HOST = "topology.kubernetes.io/zone", "kubernetes.io/arch", "kubernetes.io/hostname"
CT, FAMILY = "karpenter.sh/capacity-type", "karpenter.k8s.aws/instance-family"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
TYPES = ("m5.large", "m5.xlarge", "m5.2xlarge", "c5.large", "c5.xlarge", "m6g.large", "m6g.xlarge")


@cache
def instance_types():
    from provisioning.services.catalog import bundled_catalog

    catalog = bundled_catalog("us-east-1")
    out = []
    for it in catalog.instance_types({"amiSelectorTerms": [{"alias": "al2023@latest"}]}):
        if it.name in TYPES:
            offerings = tuple(o for o in it.offerings if o.zone in ZONES)
            out.append(type(it)(it.name, it.labels, it.capacity, it.overhead, offerings))
    return tuple(out)


def pool(name="default", requirements=(), **options) -> NodePoolInput:
    reqs = [{"key": CT, "operator": "In", "values": ["on-demand"]}, *requirements]
    return NodePoolInput(
        name=name,
        requirements=Requirements.from_list(reqs),
        instance_types=instance_types(),
        labels={"karpenter.sh/nodepool": name},
        **options,
    )


def pod(name, cpu="500m", memory="512Mi", labels=None, **spec):
    body = {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if "ports" in spec:
        body["containers"][0]["ports"] = spec.pop("ports")
    body.update(spec)
    return pod_from_template(
        {"metadata": {"labels": labels or {"app": name}}, "spec": body}, namespace="default", name=name
    )


def snapshot(pods, pools=None, nodes=()) -> Snapshot:
    return Snapshot(tuple(pods), tuple(pools or [pool()]), tuple(nodes))


def option(instance_type, zone="us-east-1a", capacity_type="on-demand", price=0.1) -> InstanceTypeOption:
    return InstanceTypeOption(instance_type, capacity_type, zone, price)


def claim(name, pods, options, nodepool="default", requirements=None) -> ClaimPlan:
    types = Requirement.of("node.kubernetes.io/instance-type", IN, [o.instance_type for o in options])
    base = requirements or Requirements.from_list([{"key": CT, "operator": "In", "values": ["on-demand"]}])
    return ClaimPlan(name, nodepool, base.add(types), tuple(options), tuple(pods), {})


def kinds(snap: Snapshot, plan: Plan) -> list[str]:
    return sorted({v.kind for v in verify(snap, plan)})


def spread(key, app, max_skew=1):
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}},
    }


def affinity(kind, key, app):
    term = {"topologyKey": key, "labelSelector": {"matchLabels": {"app": app}}}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


# ------------------------------------------------------------------ clean plans


def test_a_solved_plan_with_every_constraint_kind_verifies_clean():
    pods = [pod(f"web-{i}", labels={"app": "web"}, topologySpreadConstraints=[spread(ZONE, "web")]) for i in range(6)]
    pods += [pod(f"db-{i}", labels={"app": "db"}, affinity=affinity("podAntiAffinity", HOST, "db")) for i in range(3)]
    pods += [pod("cache", affinity=affinity("podAffinity", ZONE, "web"))]  # web's zones are decided
    pods += [pod(f"edge-{i}", labels={"app": "edge"}, ports=[{"containerPort": 80, "hostPort": 80}]) for i in range(2)]
    snap = snapshot(pods)
    plan = solve(snap)
    assert not plan.unschedulable
    assert verify(snap, plan) == []


# ------------------------------------------------------------------ each rule, broken


def test_a_pod_placed_twice_or_not_at_all_is_a_placement_violation():
    snap = snapshot([pod("a"), pod("b")])
    twice = Plan(
        claims=(claim("c1", ["default/a"], [option("m5.large")]), claim("c2", ["default/a"], [option("m5.large")])),
        existing={},
        unschedulable={},
    )
    assert [str(v) for v in verify(snap, twice)] == [
        "placement: node c2 default/a: is placed twice (also on c1)",
        "placement: default/b: is neither placed nor said to be unschedulable",
    ]
    assert all(v.kind == PLACEMENT for v in verify(snap, twice))


def test_an_option_the_pods_node_selector_refuses_is_caught():
    snap = snapshot([pod("a", nodeSelector={ARCH: "arm64"})])
    plan = Plan(
        claims=(claim("c1", ["default/a"], [option("m6g.large"), option("m5.large")]),), existing={}, unschedulable={}
    )
    found = verify(snap, plan)
    assert [v.kind for v in found] == [NODE_SELECTION]
    assert found[0].node == "c1" and found[0].pod == "default/a" and "m5.large" in found[0].message


def test_an_untolerated_taint_is_caught():
    tainted = pool(taints=(Taint("dedicated", "gpu", "NoSchedule"),))
    snap = snapshot([pod("a")], [tainted])
    plan = Plan(claims=(claim("c1", ["default/a"], [option("m5.large")]),), existing={}, unschedulable={})
    assert kinds(snap, plan) == [TAINTS]


def test_an_option_outside_the_nodepools_requirements_is_caught():
    arm = pool(requirements=[{"key": ARCH, "operator": "In", "values": ["arm64"]}])
    snap = snapshot([pod("a")], [arm])
    plan = Plan(claims=(claim("c1", ["default/a"], [option("m5.large")]),), existing={}, unschedulable={})
    assert NODEPOOL_RULES in kinds(snap, plan)


def test_an_option_in_a_zone_the_type_is_not_offered_in_is_caught():
    snap = snapshot([pod("a")])
    plan = Plan(
        claims=(claim("c1", ["default/a"], [option("m5.large", zone="us-east-1e")]),), existing={}, unschedulable={}
    )
    assert NODEPOOL_RULES in kinds(snap, plan)


def test_pods_that_overflow_the_smallest_option_are_caught():
    pods = [pod(f"a-{i}", cpu="1") for i in range(3)]  # 3 cpu on a 2-vCPU m5.large
    snap = snapshot(pods)
    plan = Plan(
        claims=(claim("c1", [p.key for p in pods], [option("m5.2xlarge"), option("m5.large")]),),
        existing={},
        unschedulable={},
    )
    found = verify(snap, plan)
    assert [v.kind for v in found] == [RESOURCES] and "m5.large" in found[0].message


def test_pods_that_overflow_an_existing_node_with_its_bound_pods_are_caught():
    it = next(t for t in instance_types() if t.name == "m5.large")
    bound = pod("bound", cpu="1500m")
    bound = replace(bound, node_name="n1")
    labels = {**it.labels, ZONE: "us-east-1a", CT: "on-demand", HOST: "n1", "karpenter.sh/initialized": "true"}
    node = ExistingNode("n1", labels, (), it.allocatable, it.capacity, pods=(bound,))
    snap = snapshot([pod("a", cpu="1")], nodes=[node])
    plan = Plan(claims=(), existing={"n1": ("default/a",)}, unschedulable={})
    assert kinds(snap, plan) == [RESOURCES]


def test_two_pods_on_one_host_port_are_caught():
    pods = [pod(f"a-{i}", labels={"app": "a"}, ports=[{"containerPort": 80, "hostPort": 8080}]) for i in range(2)]
    snap = snapshot(pods)
    plan = Plan(claims=(claim("c1", [p.key for p in pods], [option("m5.xlarge")]),), existing={}, unschedulable={})
    assert kinds(snap, plan) == [HOST_PORTS]


def test_a_zone_spread_over_its_max_skew_is_caught():
    pods = [pod(f"w-{i}", labels={"app": "w"}, topologySpreadConstraints=[spread(ZONE, "w")]) for i in range(2)]
    snap = snapshot(pods)
    same_zone = Plan(
        claims=(claim("c1", [pods[0].key], [option("m5.large")]), claim("c2", [pods[1].key], [option("m5.large")])),
        existing={},
        unschedulable={},
    )
    found = verify(snap, same_zone)
    assert [v.kind for v in found] == [SPREAD] and "maxSkew 1" in found[0].message
    apart = replace(
        same_zone,
        claims=(same_zone.claims[0], claim("c2", [pods[1].key], [option("m5.large", zone="us-east-1b")])),
    )
    assert verify(snap, apart) == []


def test_a_spread_needs_its_claims_zone_decided():
    pods = [pod("w-0", labels={"app": "w"}, topologySpreadConstraints=[spread(ZONE, "w")])]
    snap = snapshot(pods)
    undecided = Plan(
        claims=(claim("c1", [pods[0].key], [option("m5.large"), option("m5.large", zone="us-east-1b")]),),
        existing={},
        unschedulable={},
    )
    assert kinds(snap, undecided) == [SPREAD]


def test_a_required_pod_affinity_without_its_target_in_the_domain_is_caught():
    target = pod("db", labels={"app": "db"})
    follower = pod("cache", affinity=affinity("podAffinity", ZONE, "db"))
    snap = snapshot([target, follower])
    apart = Plan(
        claims=(
            claim("c1", [target.key], [option("m5.large")]),
            claim("c2", [follower.key], [option("m5.large", zone="us-east-1b")]),
        ),
        existing={},
        unschedulable={},
    )
    assert kinds(snap, apart) == [AFFINITY]
    together = replace(apart, claims=(claim("c1", [target.key, follower.key], [option("m5.large")]),))
    assert verify(snap, together) == []


def test_a_required_anti_affinity_sharing_a_host_is_caught_and_so_is_a_bound_pods():
    pods = [pod(f"db-{i}", labels={"app": "db"}, affinity=affinity("podAntiAffinity", HOST, "db")) for i in range(2)]
    snap = snapshot(pods)
    shared = Plan(claims=(claim("c1", [p.key for p in pods], [option("m5.xlarge")]),), existing={}, unschedulable={})
    assert kinds(snap, shared) == [ANTI_AFFINITY]
    # A bound pod's anti-affinity keeps a new pod it selects out of its zone.
    it = next(t for t in instance_types() if t.name == "m5.large")
    bound = replace(
        pod("guard", labels={"app": "guard"}, affinity=affinity("podAntiAffinity", ZONE, "web")), node_name="n1"
    )
    labels = {**it.labels, ZONE: "us-east-1a", CT: "on-demand", HOST: "n1", "karpenter.sh/initialized": "true"}
    node = ExistingNode("n1", labels, (), it.allocatable, it.capacity, pods=(bound,))
    web = pod("web", labels={"app": "web"})
    snap = snapshot([web], nodes=[node])
    near = Plan(claims=(claim("c1", [web.key], [option("m5.large")]),), existing={}, unschedulable={})
    assert kinds(snap, near) == [ANTI_AFFINITY]
    far = replace(near, claims=(claim("c1", [web.key], [option("m5.large", zone="us-east-1c")]),))
    assert verify(snap, far) == []


def test_limits_count_each_claim_at_its_largest_option():
    limited = pool(limits={"cpu": 4000})
    snap = snapshot([pod("a"), pod("b")], [limited])
    # Cheapest options fit (2 + 2 vCPU), but either claim may launch as a 4-vCPU m5.xlarge.
    plan = Plan(
        claims=(
            claim("c1", ["default/a"], [option("m5.large"), option("m5.xlarge")]),
            claim("c2", ["default/b"], [option("m5.large")]),
        ),
        existing={},
        unschedulable={},
    )
    found = verify(snap, plan)
    assert [v.kind for v in found] == [LIMITS] and found[0].nodepool == "default"
    tight = replace(plan, claims=(claim("c1", ["default/a"], [option("m5.large")]), plan.claims[1]))
    assert verify(snap, tight) == []


def test_options_short_of_a_min_values_are_caught():
    wide = pool(requirements=[{"key": FAMILY, "operator": "Exists", "minValues": 2}])
    snap = snapshot([pod("a")], [wide])
    requirements = wide.requirements
    one_family = Plan(
        claims=(claim("c1", ["default/a"], [option("m5.large"), option("m5.xlarge")], requirements=requirements),),
        existing={},
        unschedulable={},
    )
    assert kinds(snap, one_family) == [MIN_VALUES]
    two = replace(
        one_family,
        claims=(claim("c1", ["default/a"], [option("m5.large"), option("c5.large")], requirements=requirements),),
    )
    assert verify(snap, two) == []


# ------------------------------------------------------------------ withhold


def test_withhold_takes_out_the_refused_claim_and_keeps_the_rest():
    pods = [pod("a", nodeSelector={ARCH: "arm64"}), pod("b")]
    snap = snapshot(pods)
    plan = Plan(
        claims=(claim("c1", ["default/a"], [option("m5.large")]), claim("c2", ["default/b"], [option("m5.large")])),
        existing={},
        unschedulable={},
        order=("default/a", "default/b"),
    )
    violations = verify(snap, plan)
    kept = withhold(plan, violations)
    assert [c.name for c in kept.claims] == ["c2"]
    assert kept.order == ("default/b",)
    assert kept.unschedulable["default/a"].startswith("the plan verifier refused its NodeClaim: node-selection")
    assert verify(snap, kept) == []


def test_withhold_takes_every_new_claim_of_a_nodepool_past_its_limits():
    limited = pool(limits={"cpu": 2000})
    snap = snapshot([pod("a"), pod("b")], [limited])
    plan = Plan(
        claims=(claim("c1", ["default/a"], [option("m5.large")]), claim("c2", ["default/b"], [option("m5.large")])),
        existing={},
        unschedulable={},
    )
    kept = withhold(plan, verify(snap, plan))
    assert kept.claims == () and set(kept.unschedulable) == {"default/a", "default/b"}


def test_withhold_leaves_a_clean_plan_as_it_is():
    snap = snapshot([pod("a")])
    plan = solve(snap)
    assert withhold(plan, verify(snap, plan)) is plan


@pytest.mark.parametrize("policy", ["Strict", "BestEffort"])
def test_solved_plans_under_either_min_values_policy_verify_clean(policy):
    wide = pool(requirements=[{"key": FAMILY, "operator": "Exists", "minValues": 3}])
    snap = replace(snapshot([pod(f"a-{i}", cpu="1") for i in range(4)], [wide]), min_values_policy=policy)
    plan = solve(snap)
    assert verify(snap, plan) == []
