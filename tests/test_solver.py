"""THE solver, constraint by constraint, over a small hand-made catalog (prices and shapes
chosen so the right answer is known) and over the bundled us-east-1 catalog."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from builders import deployment

from provisioning.scheduling.instancetypes import InstanceType, Offering, Overhead
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.preferences import variants
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.snapshot import NodePoolInput, Snapshot
from provisioning.scheduling.solver import solve
from provisioning.scheduling.taints import Taint
from provisioning.scheduling.workloads import DaemonSetOverhead, ExistingNode, expand_all

GI = 2**30
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def itype(name: str, cpu: int, mem_gi: int, price: float, *, arch="amd64", family=None, spot=None, zones=ZONES):
    family = family or name.split(".")[0]
    labels = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": arch,
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-category": family[0],
        "karpenter.k8s.aws/instance-size": name.split(".")[1],
        "karpenter.k8s.aws/instance-cpu": str(cpu),
    }
    offerings = [Offering(z, "on-demand", price, True) for z in zones]
    if spot is not None:
        offerings += [Offering(z, "spot", spot, True) for z in zones]
    capacity = {"cpu": cpu * 1000, "memory": mem_gi * GI, "pods": 110}
    return InstanceType(name, labels, capacity, Overhead(), tuple(offerings))


CATALOG = (
    itype("c5.large", 2, 4, 0.085),
    itype("c5.xlarge", 4, 8, 0.17),
    itype("c5.2xlarge", 8, 16, 0.34),
    itype("m5.large", 2, 8, 0.096),
    itype("m5.xlarge", 4, 16, 0.192),
    itype("r5.large", 2, 16, 0.126),
    itype("r5.xlarge", 4, 32, 0.252),
    itype("m6g.large", 2, 8, 0.077, arch="arm64"),
)


def pool(name="general", *requirements, weight=0, types=CATALOG, taints=(), limits=None, labels=None):
    reqs = Requirements.from_list(
        [{"key": "karpenter.sh/nodepool", "operator": "In", "values": [name]}, *requirements]
    ).merge(Requirements.from_labels(labels or {}))
    return NodePoolInput(
        name, reqs, tuple(types), weight=weight, taints=tuple(taints), limits=limits or {}, labels=labels or {}
    )


def pods(name, n, cpu="500m", memory="1Gi", **spec):
    return list(expand_all([deployment(name, n, cpu, memory, **spec)]).pods)


def plan_for(pod_list, *pools, **kw):
    return solve(Snapshot(tuple(pod_list), tuple(pools), **kw))


def placed(plan) -> set[str]:
    return {p for c in plan.claims for p in c.pods} | {p for ps in plan.existing.values() for p in ps}


# ------------------------------------------------------------------ basics


def test_every_pod_is_placed_once_and_the_cheapest_type_is_chosen():
    plan = plan_for(pods("web", 3, "500m", "1Gi"), pool())
    assert placed(plan) == {f"default/web-{i}" for i in range(3)}
    assert len(plan.claims) == 1
    claim = plan.claims[0]
    assert claim.chosen.instance_type == "m6g.large"  # 1.5 cpu, 3Gi: the cheapest that fits
    assert [o.price for o in claim.options] == sorted(o.price for o in claim.options)
    assert "cheapest" in claim.why and plan.total_price == pytest.approx(0.077)
    assert claim.opened_by == "default/web-0" and claim.alternatives[0].price >= claim.price


def test_spot_is_chosen_where_allowed_and_cheaper():
    types = (itype("m5.large", 2, 8, 0.096, spot=0.03), itype("c5.large", 2, 4, 0.085, spot=0.04))
    plan = plan_for(pods("web", 1), pool("general", types=types))
    assert (plan.claims[0].chosen.instance_type, plan.claims[0].chosen.capacity_type) == ("m5.large", "spot")
    od_only = pool(
        "general", {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}, types=types
    )
    assert plan_for(pods("web", 1), od_only).claims[0].chosen.capacity_type == "on-demand"


def test_unavailable_offerings_are_never_chosen():
    gone = InstanceType(
        "m6g.large",
        CATALOG[-1].labels,
        CATALOG[-1].capacity,
        Overhead(),
        tuple(Offering(z, "on-demand", 0.077, False) for z in ZONES),
    )
    plan = plan_for(pods("web", 1), pool(types=(*CATALOG[:-1], gone)))
    assert plan.claims[0].chosen.instance_type != "m6g.large"
    assert all(o.instance_type != "m6g.large" for o in plan.claims[0].options)


def test_at_most_max_instance_types_options_per_claim():
    plan = plan_for(pods("web", 1), pool(), max_instance_types=3)
    options = plan.claims[0].options
    assert len({o.instance_type for o in options}) == 3
    assert len(options) == 9  # each type in each of the three zones, for the launch to fall back to


# ------------------------------------------------------------------ requirements


def test_node_selector_and_required_affinity_narrow_the_types():
    arm = pods("arm", 1, nodeSelector={"kubernetes.io/arch": "arm64"})
    assert plan_for(arm, pool()).claims[0].chosen.instance_type == "m6g.large"
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["r5"]}
                        ]
                    }
                ]
            }
        }
    }
    assert plan_for(pods("r", 1, affinity=affinity), pool()).claims[0].chosen.instance_type == "r5.large"


def test_gt_requirements_on_integer_labels():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["2"]}]}
                ]
            }
        }
    }
    plan = plan_for(pods("big", 1, affinity=affinity), pool())
    assert plan.claims[0].chosen.instance_type == "c5.xlarge"


def test_an_undefined_custom_label_makes_a_pod_unschedulable_with_the_key_named():
    plan = plan_for(pods("team", 1, nodeSelector={"team": "ml"}), pool())
    assert plan.unschedulable["default/team-0"] == (
        "NodePool general: pod requires team In [ml] but the NodePool does not define team "
        "(only well-known labels may be left undefined)"
    )
    labelled = pool("ml", labels={"team": "ml"})
    assert placed(plan_for(pods("team", 1, nodeSelector={"team": "ml"}), labelled)) == {"default/team-0"}


def test_the_seed_nodepool_verbatim_names_instance_family():
    seed = pool("general", {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m", "c", "r"]})
    plan = plan_for(pods("web", 2), seed)
    assert not plan.claims
    for reason in plan.unschedulable.values():
        assert "karpenter.k8s.aws/instance-family In [c, m, r] matches none" in reason


def test_resources_that_fit_nowhere_say_how_much_was_missing():
    plan = plan_for(pods("huge", 1, "64", "1Gi"), pool())
    reason = plan.unschedulable["default/huge-0"]
    assert "no instance type has enough cpu: the pod needs 64" in reason and "8" in reason


def test_extended_resources_need_a_type_that_has_them():
    gpu = itype("g5.xlarge", 4, 16, 1.0)
    gpu = InstanceType(gpu.name, gpu.labels, {**gpu.capacity, "nvidia.com/gpu": 1}, Overhead(), gpu.offerings)
    doc = pods("train", 1)[0]
    train = Pod(doc.namespace, "train-0", {**doc.requests, "nvidia.com/gpu": 1}, labels=doc.labels)
    plan = plan_for([train], pool(types=(*CATALOG, gpu)))
    assert plan.claims[0].chosen.instance_type == "g5.xlarge"


# ------------------------------------------------------------------ taints, weights, limits


def test_nodepool_taints_must_be_tolerated():
    tainted = pool("gpu", taints=[Taint("nvidia.com/gpu", "true", "NoSchedule")])
    plan = plan_for(pods("web", 1), tainted)
    assert "does not tolerate taint nvidia.com/gpu=true:NoSchedule" in plan.unschedulable["default/web-0"]
    tolerant = pods("web", 1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert placed(plan_for(tolerant, tainted)) == {"default/web-0"}


def test_prefer_no_schedule_is_relaxed_last():
    soft = pool("soft", taints=[Taint("spot", "", "PreferNoSchedule")])
    assert placed(plan_for(pods("web", 1), soft)) == {"default/web-0"}


def test_nodepools_are_tried_in_weight_order_then_name():
    a = pool("a", types=CATALOG[:1])
    b = pool("b", weight=10, types=CATALOG[3:4])
    plan = plan_for(pods("web", 1), a, b)
    assert plan.claims[0].nodepool == "b"
    assert plan_for(pods("web", 1), pool("b"), pool("a")).claims[0].nodepool == "a"


def test_limits_are_never_exceeded():
    limited = pool(limits={"cpu": 4000})
    plan = plan_for(pods("web", 20, "1", "1Gi"), limited)
    capacity = sum(next(t for t in CATALOG if t.name == c.chosen.instance_type).capacity["cpu"] for c in plan.claims)
    assert capacity <= 4000
    assert plan.unschedulable  # the rest waits
    assert "limits" in next(iter(plan.unschedulable.values()))


def test_node_limits():
    plan = plan_for(pods("web", 3, "5", "1Gi"), pool(limits={"nodes": 1}))  # one 8-cpu node holds one
    assert len(plan.claims) == 1 and len(plan.unschedulable) == 2


# ------------------------------------------------------------------ existing nodes and DaemonSets


def node(name, cpu=4000, mem=8 * GI, zone="us-east-1a", **labels):
    return ExistingNode(
        name,
        {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": zone,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            **labels,
        },
        allocatable={"cpu": cpu, "memory": mem, "pods": 110},
        capacity={"cpu": cpu, "memory": mem, "pods": 110},
    )


def test_existing_nodes_are_filled_first():
    plan = plan_for(pods("web", 5, "500m", "1Gi"), pool(), nodes=(node("ip-10-0-0-1"),))
    assert set(plan.existing["ip-10-0-0-1"]) == {f"default/web-{i}" for i in range(5)}
    assert not plan.claims


def test_daemonset_overhead_is_counted_on_new_nodes():
    ds_doc = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
                    ]
                },
            },
        },
    }
    daemons = expand_all([ds_doc]).daemonsets
    plan = plan_for(pods("web", 1, "1500m", "1Gi"), pool(), daemonsets=daemons)
    claim = plan.claims[0]
    assert claim.requests["cpu"] == 2500
    assert claim.chosen.instance_type in ("c5.xlarge", "m5.xlarge")  # 2 cpu types no longer fit
    assert isinstance(daemons[0], DaemonSetOverhead)


# ------------------------------------------------------------------ topology and affinity


def test_zone_spread_puts_one_pod_per_zone():
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    plan = plan_for(pods("web", 3, topologySpreadConstraints=spread), pool())
    zones = [next(iter(c.requirements["topology.kubernetes.io/zone"].values)) for c in plan.claims]
    assert sorted(zones) == list(ZONES) and len(placed(plan)) == 3


def test_hostname_anti_affinity_puts_each_replica_on_its_own_node():
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}
            ]
        }
    }
    plan = plan_for(pods("db", 4, "100m", "100Mi", affinity=anti), pool())
    assert len(plan.claims) == 4 and all(len(c.pods) == 1 for c in plan.claims)


def test_constraints_and_variants_hash_the_same_after_pickling_into_another_process():
    """Their hashes are cached; string hashes differ per process, so a pickle carries none."""
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]
    pod = pods("web", 1, topologySpreadConstraints=spread)[0]
    first = variants(pod, True)
    assert {v: i for i, v in enumerate(first)} == {v: i for i, v in enumerate(variants(pod, True))}
    code = (
        "import pickle, sys\n"
        "from provisioning.scheduling.preferences import variants\n"
        "pod, old = pickle.loads(sys.stdin.buffer.read())\n"
        "fresh = variants(pod, True)\n"
        "print({v: 1 for v in old}.get(fresh[0]), {c: 1 for c in old[0].constraints}.get(fresh[0].constraints[0]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps((pod, first)), capture_output=True, check=True
    )
    assert out.stdout.decode().split() == ["1", "1"]


def test_zone_affinity_keeps_replicas_together():
    aff = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "cache"}}}
            ]
        }
    }
    plan = plan_for(pods("cache", 6, "1500m", "1Gi", affinity=aff), pool())
    zones = {next(iter(c.requirements["topology.kubernetes.io/zone"].values)) for c in plan.claims}
    assert len(zones) == 1 and len(placed(plan)) == 6


def test_preferred_node_affinity_is_relaxed_when_it_cannot_be_met():
    prefer = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["x9"]}
                        ]
                    },
                }
            ]
        }
    }
    assert placed(plan_for(pods("web", 1, affinity=prefer), pool())) == {"default/web-0"}


def test_schedule_anyway_spread_is_relaxed():
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    one_zone = pool("general", {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]})
    assert len(placed(plan_for(pods("web", 3, topologySpreadConstraints=spread), one_zone))) == 3


# ------------------------------------------------------------------ cost and deadline


def test_optimizing_is_never_worse_than_upstream_packing():
    mixed = pods("cpu", 6, "1500m", "1Gi") + pods("mem", 6, "250m", "6Gi")
    greedy = plan_for(mixed, pool(), optimize=False)
    optimized = plan_for(mixed, pool())
    assert len(placed(optimized)) == len(placed(greedy)) == 12
    assert optimized.total_price <= greedy.total_price + 1e-9


def test_a_deadline_keeps_partial_results_and_names_the_pods_left():
    ticks = iter(range(10_000))
    plan = solve(Snapshot(tuple(pods("web", 50)), (pool(),), deadline_seconds=3), clock=lambda: next(ticks))
    assert plan.unreached
    for key in plan.unreached:
        assert "deadline" in plan.unschedulable[key]
    assert len(placed(plan)) + len(plan.unschedulable) == 50


def test_pods_binding_the_same_host_port_get_separate_nodes():
    containers = [
        {
            "name": "c",
            "image": "i",
            "ports": [{"containerPort": 80, "hostPort": 8080}],
            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
        }
    ]
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "edge"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "edge"}},
            "template": {"metadata": {"labels": {"app": "edge"}}, "spec": {"containers": containers}},
        },
    }
    plan = plan_for(list(expand_all([doc]).pods), pool())
    assert len(plan.claims) == 3 and all(len(c.pods) == 1 for c in plan.claims)


def test_min_values_keep_enough_distinct_values_in_the_options():
    families = {
        "key": "karpenter.k8s.aws/instance-family",
        "operator": "In",
        "values": ["c5", "m5", "r5"],
        "minValues": 3,
    }
    plan = plan_for(pods("web", 1), pool("general", families))
    options = plan.claims[0].options
    assert len({o.instance_type.split(".")[0] for o in options}) == 3
    # Truncated to one option, the claim cannot meet minValues: Strict leaves the pod pending,
    # BestEffort launches it with minValues lowered to what the option offers, and says so.
    strict = plan_for(pods("web", 1), pool("general", families), max_instance_types=1)
    assert not strict.claims and "minValues" in strict.unschedulable["default/web-0"]
    relaxed = plan_for(pods("web", 1), pool("general", families), max_instance_types=1, min_values_policy="BestEffort")
    (claim,) = relaxed.claims
    assert claim.annotations["karpenter.sh/nodeclaim-min-values-relaxed"] == "true"
    assert claim.requirements["karpenter.k8s.aws/instance-family"].min_values == 1
    narrow = pods("web", 1, nodeSelector={"karpenter.k8s.aws/instance-family": "c5"})
    plan = plan_for(narrow, pool("general", families))
    assert "minValues" in plan.unschedulable["default/web-0"]


def _zones_of(plan):
    return sorted(next(iter(c.requirements["topology.kubernetes.io/zone"].values)) for c in plan.claims)


def test_capacity_type_spread_splits_spot_and_on_demand():
    types = (itype("m5.large", 2, 8, 0.096, spot=0.03),)
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "karpenter.sh/capacity-type",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    plan = plan_for(pods("web", 4, topologySpreadConstraints=spread), pool(types=types))
    by_type = {}
    for claim in plan.claims:
        by_type[claim.chosen.capacity_type] = by_type.get(claim.chosen.capacity_type, 0) + len(claim.pods)
    assert by_type == {"spot": 2, "on-demand": 2}


def test_node_taints_policy_honor_ignores_domains_the_pod_cannot_use():
    # A tainted pool offers us-east-1c only; the pod does not tolerate it.
    tainted = pool(
        "gpu",
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1c"]},
        taints=[Taint("gpu", "", "NoSchedule")],
    )
    general = pool(
        "general", {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]}
    )
    spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    ignored = plan_for(pods("web", 4, topologySpreadConstraints=[spread]), general, tainted)
    # Ignore (the default): us-east-1c counts with 0 pods, so the skew stops at one pod per zone.
    assert len(placed(ignored)) == 2
    honored = plan_for(
        pods("web", 4, topologySpreadConstraints=[{**spread, "nodeTaintsPolicy": "Honor"}]), general, tainted
    )
    assert len(placed(honored)) == 4 and _zones_of(honored).count("us-east-1a") >= 1


def test_node_affinity_policy_ignore_counts_every_domain():
    """A spread counts the domains of nodes the pod could get (nodeAffinityPolicy Honor) or of
    every node (Ignore): arm64 types only in us-east-1a, so Honor knows one zone and Ignore three."""
    spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    types = (itype("c5.large", 2, 4, 0.085), itype("m6g.large", 2, 8, 0.077, arch="arm64", zones=("us-east-1a",)))
    arm = {"kubernetes.io/arch": "arm64"}
    honored = plan_for(pods("web", 3, topologySpreadConstraints=[spread], nodeSelector=arm), pool(types=types))
    assert len(placed(honored)) == 3  # only us-east-1a counts: no skew
    ignored = plan_for(
        pods("web", 3, topologySpreadConstraints=[{**spread, "nodeAffinityPolicy": "Ignore"}], nodeSelector=arm),
        pool(types=types),
    )
    assert len(placed(ignored)) == 1  # empty b and c count: a second pod in a would make skew 2
