"""Upstream's Topology suite, second half: combined spreads, spreads with node affinity, pod
affinity and anti-affinity, cluster default spread constraints; and its Taints suite."""

from __future__ import annotations

from collections import Counter

import pytest
from harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    ZONE,
    ZONE_1,
    ZONE_2,
    ZONE_3,
    Env,
    affinity_term,
    ec2_node_class,
    mark_spot_unavailable,
    namespace,
    node,
    node_pool,
    pod,
    requirement,
    skew_values,
    spread,
    unschedulable_pod,
    unschedulable_pods,
)

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/topology_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {
    "Topology with Volume Requirements / should schedule pod with PVC and TSC minDomains=3 when pods are spread "
    "across 3 zones": "volume topology: karpweb does not read PersistentVolumes or PersistentVolumeClaims",
}

LABELS = {"test": "test"}
AFF_LABELS = {"security": "s2"}


def topology_pool(**options) -> dict:
    """The Describe("Topology") BeforeEach: a NodePool whose only requirement is capacity type Exists."""
    options.setdefault("requirements", [requirement(CAPACITY_TYPE, "Exists")])
    return node_pool(**options)


def everything(key: str) -> dict:
    """Upstream's ``&TopologySpreadConstraint{TopologyKey: key}`` handed to ExpectSkew: a nil selector,
    which its ``TopologyListOptions`` turns into ``labels.Everything()``."""
    return spread(key, selector={})


def max_skew(counts: Counter) -> int:
    """``ExpectMaxSkew``: the largest count less the smallest, over the domains that hold pods."""
    return max(counts.values()) - min(counts.values())


def delete_unscheduled(env: Env) -> None:
    """``ExpectDeleteAllUnscheduledPods``."""
    for manifest in env.of_kind("Pod"):
        if not (manifest.get("spec") or {}).get("nodeName"):
            env.delete(manifest)


def node_names(env: Env, pods) -> set[str]:
    return {env.scheduled(p).name for p in pods}


# ------------------------------------------------------------------ Combined Zonal and Capacity Type Topology


def test_should_spread_pods_while_respecting_both_constraints(env):
    """Topology / Combined Zonal and Capacity Type Topology / should spread pods while respecting both constraints

    test-zone-3 (on-demand only) → spot offerings of ZONE_3 marked unavailable. Upstream asserts only upper
    bounds on the skews, not that every pod schedules: here, after the 5 pods of the first two rounds (zones
    2/2/1, on-demand 3 / spot 2), the next pod would need spot in ZONE_3, so later rounds' pods stay pending."""
    mark_spot_unavailable(env, ZONE_3)
    topology = [spread(CAPACITY_TYPE, labels=LABELS), spread(ZONE, labels=LABELS)]
    env.apply(topology_pool())
    for count, capacity_bound, zone_bound in ((2, 1, 1), (3, 3, 2), (3, 5, 4), (11, 11, 7)):
        env.provision(unschedulable_pods(count, labels=LABELS, topology_spread_constraints=topology))
        assert all(v <= capacity_bound for v in env.skew(topology[0]).values()), env.skew(topology[0])
        assert all(v <= zone_bound for v in env.skew(topology[1]).values()), env.skew(topology[1])


# ------------------------------------------------------------ Combined Hostname, Zonal, and Capacity Type Topology


def test_should_spread_pods_while_respecting_all_constraints(env):
    """Topology / Combined Hostname, Zonal, and Capacity Type Topology / should spread pods while respecting all constraints

    fake.InstanceTypesAssorted (a type for every zone/capacity-type pair) → the real catalog, which offers
    both capacity types in every zone."""
    topology = [
        spread(CAPACITY_TYPE, labels=LABELS, max_skew=1),
        spread(ZONE, labels=LABELS, max_skew=2),
        spread(HOSTNAME, labels=LABELS, max_skew=3),
    ]
    for i in range(1, 15):
        pods = unschedulable_pods(i, labels=LABELS, topology_spread_constraints=topology)
        env.apply(topology_pool(name="topology"))
        env.provision(pods)
        assert max_skew(env.skew(topology[0])) <= 1, env.skew(topology[0])
        assert max_skew(env.skew(topology[1])) <= 2, env.skew(topology[1])
        assert max_skew(env.skew(topology[2])) <= 3, env.skew(topology[2])
        for p in pods:
            env.scheduled(p)


# ------------------------------------------------------------------ Combined Zonal Topology and Node Affinity


def test_should_limit_spread_options_by_nodeselector(env):
    """Topology / Combined Zonal Topology and Node Affinity / should limit spread options by nodeSelector"""
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(topology_pool())
    env.provision(
        unschedulable_pods(5, labels=LABELS, topology_spread_constraints=topology, node_selector={ZONE: ZONE_1})
        + unschedulable_pods(10, labels=LABELS, topology_spread_constraints=topology, node_selector={ZONE: ZONE_2})
    )
    assert skew_values(env.skew(topology[0])) == [5, 10]


def test_should_limit_spread_options_by_node_requirements(env):
    """Topology / Combined Zonal Topology and Node Affinity / should limit spread options by node requirements"""
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(topology_pool())
    env.provision(
        unschedulable_pods(
            10,
            labels=LABELS,
            topology_spread_constraints=topology,
            node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)],
        )
    )
    assert skew_values(env.skew(topology[0])) == [5, 5]


def test_should_limit_spread_options_by_required_node_affinity(env):
    """Topology / Combined Zonal Topology and Node Affinity / should limit spread options by required node affinity"""
    topology = [spread(ZONE, labels=LABELS)]
    pool = topology_pool()
    env.apply(pool)
    env.provision(
        unschedulable_pods(
            6,
            labels=LABELS,
            topology_spread_constraints=topology,
            node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)],
        )
    )
    assert skew_values(env.skew(topology[0])) == [3, 3]

    pool["spec"]["template"]["spec"]["requirements"] = [requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3)]
    env.apply(pool)
    env.provision(
        unschedulable_pod(
            labels=LABELS,
            topology_spread_constraints=topology,
            node_requirements=[requirement(ZONE, "In", ZONE_2, ZONE_3)],
        )
    )
    # it will schedule on the currently empty zone-3 even though max-skew is violated as it improves max-skew
    assert skew_values(env.skew(topology[0])) == [1, 3, 3]

    env.apply(pool)
    env.provision(unschedulable_pods(5, labels=LABELS, topology_spread_constraints=topology))
    assert skew_values(env.skew(topology[0])) == [4, 4, 4]


def test_should_not_limit_spread_options_by_preferred_node_affinity(env):
    """Topology / Combined Zonal Topology and Node Affinity / should not limit spread options by preferred node affinity"""
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(topology_pool())
    env.provision(
        unschedulable_pods(
            6,
            labels=LABELS,
            topology_spread_constraints=topology,
            node_preferences=[requirement(ZONE, "In", ZONE_1, ZONE_2)],
        )
    )
    # scheduling shouldn't be affected since it's a preferred affinity
    assert skew_values(env.skew(topology[0])) == [2, 2, 2]


# ------------------------------------------------------------------ Combined Capacity Type Topology and Node Affinity


def test_should_limit_spread_options_by_nodeselector_2(env):
    """Topology / Combined Capacity Type Topology and Node Affinity / should limit spread options by nodeSelector"""
    topology = [spread(CAPACITY_TYPE, labels=LABELS, when_unsatisfiable="ScheduleAnyway")]
    env.apply(topology_pool())
    env.provision(
        unschedulable_pods(
            5, labels=LABELS, topology_spread_constraints=topology, node_selector={CAPACITY_TYPE: "spot"}
        )
        + unschedulable_pods(
            5, labels=LABELS, topology_spread_constraints=topology, node_selector={CAPACITY_TYPE: "on-demand"}
        )
    )
    assert skew_values(env.skew(topology[0])) == [5, 5]


def test_should_limit_spread_options_by_node_affinity_capacity_type(env):
    """Topology / Combined Capacity Type Topology and Node Affinity / should limit spread options by node affinity (capacity type)"""
    topology = [spread(CAPACITY_TYPE, labels=LABELS)]
    pool = topology_pool()
    # need to limit the rules to spot or else it will know that on-demand has 0 pods and won't violate the max-skew
    env.apply(pool)
    env.provision(
        unschedulable_pods(
            3,
            labels=LABELS,
            topology_spread_constraints=topology,
            node_requirements=[requirement(CAPACITY_TYPE, "In", "spot")],
        )
    )
    assert skew_values(env.skew(topology[0])) == [3]

    env.apply(pool)
    env.provision(
        unschedulable_pod(
            labels=LABELS,
            topology_spread_constraints=topology,
            node_requirements=[requirement(CAPACITY_TYPE, "In", "on-demand", "spot")],
        )
    )
    # it will schedule on the currently empty on-demand even though max-skew is violated as it improves max-skew
    assert skew_values(env.skew(topology[0])) == [1, 3]

    env.apply(pool)
    env.provision(unschedulable_pods(5, labels=LABELS, topology_spread_constraints=topology))
    assert skew_values(env.skew(topology[0])) == [4, 5]


# ------------------------------------------------------------------ Pod Affinity/Anti-Affinity


def test_should_schedule_a_pod_with_empty_pod_affinity_and_anti_affinity(env):
    """Topology / Pod Affinity/Anti-Affinity / should schedule a pod with empty pod affinity and anti-affinity"""
    env.apply(topology_pool())
    empty = {"requiredDuringSchedulingIgnoredDuringExecution": []}
    p = unschedulable_pod(spec={"affinity": {"podAffinity": dict(empty), "podAntiAffinity": dict(empty)}})
    env.provision(p)
    env.scheduled(p)


def test_should_respect_pod_affinity_hostname(env):
    """Topology / Pod Affinity/Anti-Affinity / should respect pod affinity (hostname)"""
    topology = [spread(HOSTNAME, labels=LABELS)]
    aff_pod1 = unschedulable_pod(labels=AFF_LABELS)
    # aff_pod2 will try to get scheduled with aff_pod1
    aff_pod2 = unschedulable_pod(pod_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS)])
    pods = [*unschedulable_pods(10, labels=LABELS, topology_spread_constraints=topology), aff_pod1, aff_pod2]
    env.apply(topology_pool())
    env.provision(pods)
    n1 = env.scheduled(aff_pod1)
    n2 = env.scheduled(aff_pod2)
    assert n1.name == n2.name


def test_should_respect_pod_affinity_arch(env):
    """Topology / Pod Affinity/Anti-Affinity / should respect pod affinity (arch)

    arm-instance-type → Graviton types (kubernetes.io/arch arm64)."""
    tsc = [spread(HOSTNAME, labels=AFF_LABELS)]
    aff_pod1 = unschedulable_pod(
        topology_spread_constraints=tsc, labels=AFF_LABELS, requests={"cpu": "2"}, node_selector={ARCH: "arm64"}
    )
    # aff_pod2 will try to get scheduled with aff_pod1
    aff_pod2 = unschedulable_pod(
        labels=AFF_LABELS,
        topology_spread_constraints=tsc,
        requests={"cpu": "1"},
        pod_requirements=[affinity_term(ARCH, labels=AFF_LABELS)],
    )
    env.apply(topology_pool())
    env.provision(aff_pod1, aff_pod2)
    n1 = env.scheduled(aff_pod1)
    n2 = env.scheduled(aff_pod2)
    # should be scheduled on a node with the same arch
    assert n1.labels[ARCH] == n2.labels[ARCH]
    # but due to TSC, not on the same node
    assert n1.name != n2.name


def test_should_respect_self_pod_affinity_hostname(env):
    """Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity (hostname)"""
    pods = unschedulable_pods(3, labels=AFF_LABELS, pod_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS)])
    env.apply(topology_pool())
    env.provision(pods)
    assert len(node_names(env, pods)) == 1


def test_should_respect_self_pod_affinity_for_first_empty_topology_domain_only_hostname():
    """Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity for first empty topology domain only (hostname)

    The fake types' 5 pods per node → kubelet.maxPods 5 on the EC2NodeClass, so every type holds 5 pods."""
    env = Env(nodeclass=ec2_node_class(kubelet={"maxPods": 5}))

    def create_pods():
        return unschedulable_pods(10, labels=AFF_LABELS, pod_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS)])

    env.apply(topology_pool())
    pods = create_pods()
    env.provision(pods)
    scheduled = [p for p in pods if env.is_scheduled(p)]
    # the node can only hold 5 pods, so we should get a single node with 5 pods and 5 unschedulable pods
    assert len(node_names(env, scheduled)) == 1
    assert len(scheduled) == 5
    assert len(pods) - len(scheduled) == 5

    # and pods in a different batch should not schedule as well even if the node is not ready yet
    pods = create_pods()
    env.provision(pods)
    for p in pods:
        env.not_scheduled(p)


def test_should_respect_self_pod_affinity_for_first_empty_topology_domain_only_hostname_constrained_zones(env):
    """Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity for first empty topology domain only (hostname/constrained zones)"""
    # put one pod in test-zone-1, this does affect pod affinity even though we have different node selectors.
    env.apply(topology_pool())
    env.provision(
        unschedulable_pod(
            labels=AFF_LABELS,
            node_selector={ZONE: ZONE_1},
            pod_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS)],
        )
    )
    pods = unschedulable_pods(
        10,
        labels=AFF_LABELS,
        node_requirements=[requirement(ZONE, "In", ZONE_2, ZONE_3)],
        pod_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS)],
    )
    env.provision(pods)
    for p in pods:
        # none of this should schedule
        env.not_scheduled(p)


def test_should_respect_self_pod_affinity_zone(env):
    """Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity (zone)"""
    pods = unschedulable_pods(3, labels=AFF_LABELS, pod_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])
    env.apply(topology_pool())
    env.provision(pods)
    assert len(node_names(env, pods)) == 1


def test_should_respect_self_pod_affinity_zone_w_constraint(env):
    """Topology / Pod Affinity/Anti-Affinity / should respect self pod affinity (zone w/ constraint)"""
    # the pod needs to provide it's own zonal affinity, but we further limit it to only being on test-zone-3
    pods = unschedulable_pods(
        3,
        labels=AFF_LABELS,
        pod_requirements=[affinity_term(ZONE, labels=AFF_LABELS)],
        node_requirements=[requirement(ZONE, "In", ZONE_3)],
    )
    env.apply(topology_pool())
    env.provision(pods)
    for p in pods:
        assert env.scheduled(p).labels[ZONE] == ZONE_3
    assert len(node_names(env, pods)) == 1


def test_should_allow_two_nodes_to_be_created_when_two_pods_with_matching_affinities_have_incompatible_selectors(env):
    """Topology / Pod Affinity/Anti-Affinity / should allow two nodes to be created when two pods with matching affinities have incompatible selectors"""
    labels = {"security": "s1"}
    pod1 = unschedulable_pod(
        labels=labels,
        pod_requirements=[affinity_term(ZONE, labels=labels)],
        node_requirements=[requirement(ZONE, "In", ZONE_2)],
    )
    pod2 = unschedulable_pod(
        labels=labels,
        pod_requirements=[affinity_term(ZONE, labels=labels)],
        node_requirements=[requirement(ZONE, "In", ZONE_3)],
    )
    env.apply(topology_pool())
    env.provision(pod1, pod2)
    n1 = env.scheduled(pod1)
    assert n1.labels[ZONE] == ZONE_2
    n2 = env.scheduled(pod2)
    assert n2.labels[ZONE] == ZONE_3
    assert len({n1.name, n2.name}) == 2


def test_should_allow_violation_of_preferred_pod_affinity(env):
    """Topology / Pod Affinity/Anti-Affinity / should allow violation of preferred pod affinity"""
    topology = [spread(HOSTNAME, labels=LABELS)]
    aff_pod2 = unschedulable_pod(pod_preferences=[affinity_term(HOSTNAME, labels={"security": "s2"}, weight=50)])
    pods = [*unschedulable_pods(10, labels=LABELS, topology_spread_constraints=topology), aff_pod2]
    env.apply(topology_pool())
    env.provision(pods)
    # should be scheduled as the pod it has affinity to doesn't exist, but it's only a preference
    env.scheduled(aff_pod2)


def test_should_allow_violation_of_preferred_pod_anti_affinity(env):
    """Topology / Pod Affinity/Anti-Affinity / should allow violation of preferred pod anti-affinity"""
    aff_pods = unschedulable_pods(10, pod_anti_preferences=[affinity_term(ZONE, labels=LABELS, weight=50)])
    pods = [*unschedulable_pods(3, labels=LABELS, topology_spread_constraints=[spread(ZONE, labels=LABELS)]), *aff_pods]
    env.apply(topology_pool())
    env.provision(pods)
    for p in aff_pods:
        env.scheduled(p)


def test_should_separate_nodes_using_simple_pod_anti_affinity_on_hostname(env):
    """Topology / Pod Affinity/Anti-Affinity / should separate nodes using simple pod anti-affinity on hostname"""
    # pod affinity/anti-affinity are bidirectional, so run this a few times to ensure we handle it regardless
    # of pod scheduling order
    env.apply(topology_pool())
    for _ in range(10):
        aff_pod1 = unschedulable_pod(labels=AFF_LABELS)
        # aff_pod2 will avoid aff_pod1
        aff_pod2 = unschedulable_pod(pod_anti_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS)])
        env.provision(aff_pod2, aff_pod1)
        n1 = env.scheduled(aff_pod1)
        n2 = env.scheduled(aff_pod2)
        assert n1.name != n2.name


def test_should_not_violate_pod_anti_affinity_on_zone(env):
    """Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone"""
    zone1_pod = unschedulable_pod(labels=AFF_LABELS, requests={"cpu": "2"}, node_selector={ZONE: ZONE_1})
    zone2_pod = unschedulable_pod(labels=AFF_LABELS, requests={"cpu": "2"}, node_selector={ZONE: ZONE_2})
    zone3_pod = unschedulable_pod(labels=AFF_LABELS, requests={"cpu": "2"}, node_selector={ZONE: ZONE_3})
    aff_pod = unschedulable_pod(pod_anti_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])
    env.apply(topology_pool())
    env.provision(zone1_pod, zone2_pod, zone3_pod, aff_pod)
    # the three larger zone specific pods should get scheduled first due to first fit descending onto one
    # node per zone.
    env.scheduled(zone1_pod)
    env.scheduled(zone2_pod)
    env.scheduled(zone3_pod)
    # the pod with anti-affinity
    env.not_scheduled(aff_pod)


def test_should_not_violate_pod_anti_affinity_on_zone_other_schedules_first(env):
    """Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (other schedules first)"""
    p = unschedulable_pod(labels=AFF_LABELS, requests={"cpu": "2"})
    aff_pod = unschedulable_pod(pod_anti_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])
    env.apply(topology_pool())
    env.provision(p, aff_pod)
    # the pod we need to avoid schedules first, but we don't know where.
    env.scheduled(p)
    # the pod with anti-affinity
    env.not_scheduled(aff_pod)


def test_should_not_violate_pod_anti_affinity_arch(env):
    """Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity (arch)

    arm-instance-type → Graviton types (kubernetes.io/arch arm64)."""
    tsc = [spread(HOSTNAME, labels=AFF_LABELS)]
    aff_pod1 = unschedulable_pod(
        topology_spread_constraints=tsc, labels=AFF_LABELS, requests={"cpu": "2"}, node_selector={ARCH: "arm64"}
    )
    # aff_pod2 will try to get scheduled on a node with a different arch from aff_pod1. Due to resource
    # requests we try to schedule it last
    aff_pod2 = unschedulable_pod(
        labels=AFF_LABELS,
        topology_spread_constraints=tsc,
        requests={"cpu": "1"},
        pod_anti_requirements=[affinity_term(ARCH, labels=AFF_LABELS)],
    )
    env.apply(topology_pool())
    env.provision(aff_pod1, aff_pod2)
    n1 = env.scheduled(aff_pod1)
    n2 = env.scheduled(aff_pod2)
    # should not be scheduled on nodes with the same arch
    assert n1.labels[ARCH] != n2.labels[ARCH]


def _zone_pods(**options) -> list[dict]:
    return [
        unschedulable_pod(requests={"cpu": "2"}, node_selector={ZONE: zone}, **options)
        for zone in (ZONE_1, ZONE_2, ZONE_3)
    ]


def test_should_violate_preferred_pod_anti_affinity_on_zone_inverse(env):
    """Topology / Pod Affinity/Anti-Affinity / should violate preferred pod anti-affinity on zone (inverse)"""
    zone_pods = _zone_pods(pod_anti_preferences=[affinity_term(ZONE, labels=AFF_LABELS, weight=10)])
    aff_pod = unschedulable_pod(labels=AFF_LABELS)
    env.apply(topology_pool())
    env.provision(*zone_pods, aff_pod)
    # three pods with anti-affinity will schedule first due to first fit-descending
    for p in zone_pods:
        env.scheduled(p)
    # the anti-affinity was a preference, so this can schedule
    env.scheduled(aff_pod)


def test_should_not_violate_pod_anti_affinity_on_zone_inverse(env):
    """Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (inverse)"""
    zone_pods = _zone_pods(pod_anti_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])
    aff_pod = unschedulable_pod(labels=AFF_LABELS)
    env.apply(topology_pool())
    env.provision(*zone_pods, aff_pod)
    for p in zone_pods:
        env.scheduled(p)
    # every zone has a pod with anti-affinity rules that prevent it from scheduling
    env.not_scheduled(aff_pod)


def test_should_not_violate_pod_anti_affinity_on_zone_schr_dinger(env):
    """Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (Schrödinger)"""
    zone_anywhere_pod = unschedulable_pod(
        pod_anti_requirements=[affinity_term(ZONE, labels=AFF_LABELS)], requests={"cpu": "2"}
    )
    aff_pod = unschedulable_pod(labels=AFF_LABELS)
    env.apply(topology_pool())
    env.provision(zone_anywhere_pod, aff_pod)
    # the pod with anti-affinity will schedule first due to first fit-descending, but we don't know which zone
    node1 = env.scheduled(zone_anywhere_pod)
    # this pod cannot schedule since the pod with anti-affinity could potentially be in any zone
    env.not_scheduled(aff_pod)

    # a second batching will now allow the pod to schedule as the zoneAnywherePod has been committed to a zone
    env.provision(aff_pod)
    node2 = env.scheduled(aff_pod)
    assert node1.labels[ZONE] != node2.labels[ZONE]


def test_should_not_violate_pod_anti_affinity_on_zone_inverse_w_existing_nodes(env):
    """Topology / Pod Affinity/Anti-Affinity / should not violate pod anti-affinity on zone (inverse w/existing nodes)"""
    zone_pods = _zone_pods(pod_anti_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])
    aff_pod = unschedulable_pod(labels=AFF_LABELS)
    # provision these so we get three nodes that exist in the cluster with anti-affinity to a pod that we will
    # then try to schedule
    env.apply(topology_pool())
    env.provision(*zone_pods)
    for p in zone_pods:
        env.scheduled(p)
    # every zone has an existing pod (not from this batch) with anti-affinity rules that prevent it from scheduling
    env.provision(aff_pod)
    env.not_scheduled(aff_pod)


def test_should_violate_preferred_pod_anti_affinity_on_zone_inverse_w_existing_nodes(env):
    """Topology / Pod Affinity/Anti-Affinity / should violate preferred pod anti-affinity on zone (inverse w/existing nodes)"""
    zone_pods = _zone_pods(pod_anti_preferences=[affinity_term(ZONE, labels=AFF_LABELS, weight=10)])
    aff_pod = unschedulable_pod(labels=AFF_LABELS)
    env.apply(topology_pool())
    env.provision(*zone_pods)
    for p in zone_pods:
        env.scheduled(p)
    # this pod with no anti-affinity rules can schedule, though it couldn't if the anti-affinity were required
    env.provision(aff_pod)
    env.scheduled(aff_pod)


def test_should_allow_violation_of_a_pod_affinity_preference_with_a_conflicting_required_constraint(env):
    """Topology / Pod Affinity/Anti-Affinity / should allow violation of a pod affinity preference with a conflicting required constraint"""
    constraint = spread(HOSTNAME, labels=LABELS)
    aff_pod1 = unschedulable_pod(labels=AFF_LABELS)
    aff_pods = unschedulable_pods(
        3,
        labels=LABELS,
        # limit these pods to one per host
        topology_spread_constraints=[constraint],
        # with a preference to the other pod
        pod_preferences=[affinity_term(HOSTNAME, labels=AFF_LABELS, weight=50)],
    )
    env.apply(topology_pool())
    pods = [*aff_pods, aff_pod1]
    env.provision(pods)
    # all pods should be scheduled since the affinity term is just a preference
    for p in pods:
        env.scheduled(p)
    # and we'll get three nodes due to the topology spread
    assert skew_values(env.skew(constraint)) == [1, 1, 1]


def test_should_support_pod_anti_affinity_with_a_zone_topology(env):
    """Topology / Pod Affinity/Anti-Affinity / should support pod anti-affinity with a zone topology"""

    def create_pods():
        return unschedulable_pods(3, labels=AFF_LABELS, pod_anti_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])

    top = everything(ZONE)
    # one pod will schedule
    env.apply(topology_pool())
    env.provision(create_pods())
    assert skew_values(env.skew(top)) == [1]
    delete_unscheduled(env)
    # second pod in a second zone
    env.provision(create_pods())
    assert skew_values(env.skew(top)) == [1, 1]
    delete_unscheduled(env)
    # third pod in the last zone
    env.provision(create_pods())
    assert skew_values(env.skew(top)) == [1, 1, 1]
    delete_unscheduled(env)
    # and nothing else can schedule
    env.provision(create_pods())
    assert skew_values(env.skew(top)) == [1, 1, 1]
    delete_unscheduled(env)


def test_should_not_schedule_pods_with_affinity_to_a_non_existent_pod(env):
    """Topology / Pod Affinity/Anti-Affinity / should not schedule pods with affinity to a non-existent pod"""
    aff_pods = unschedulable_pods(10, pod_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])
    env.apply(topology_pool())
    env.provision(aff_pods)
    # the pod we have affinity to is not in the cluster, so all of these pods are unschedulable
    for p in aff_pods:
        env.not_scheduled(p)


def test_should_support_pod_affinity_with_zone_topology_unconstrained_target(env):
    """Topology / Pod Affinity/Anti-Affinity / should support pod affinity with zone topology (unconstrained target)"""
    target_pod = unschedulable_pod(labels=AFF_LABELS)
    # aff_pods all want to schedule in the same zone as target_pod, but can't as its zone is undetermined
    aff_pods = unschedulable_pods(10, pod_requirements=[affinity_term(ZONE, labels=AFF_LABELS)])
    env.apply(topology_pool())
    env.provision(*aff_pods, target_pod)
    top = everything(ZONE)
    # these pods can't schedule as the pod they have affinity to isn't limited to any particular zone
    for p in aff_pods:
        env.not_scheduled(p)
    assert skew_values(env.skew(top)) == [1]

    # now that target_pod has been scheduled to a node, its zone is committed and the pods with affinity to it
    # should schedule in the same zone
    env.provision(aff_pods)
    for p in aff_pods:
        env.scheduled(p)
    assert skew_values(env.skew(top)) == [11]


def test_should_support_pod_affinity_with_zone_topology_constrained_target(env):
    """Topology / Pod Affinity/Anti-Affinity / should support pod affinity with zone topology (constrained target)"""
    aff_pod1 = unschedulable_pod(labels=AFF_LABELS, node_requirements=[requirement(ZONE, "In", ZONE_1)])
    # aff_pods will all be scheduled in the same zone as aff_pod1
    aff_pods = [*unschedulable_pods(10, pod_requirements=[affinity_term(ZONE, labels=AFF_LABELS)]), aff_pod1]
    env.apply(topology_pool())
    env.provision(aff_pods)
    assert skew_values(env.skew(everything(ZONE))) == [11]


def test_should_handle_multiple_dependent_affinities():
    """Topology / Pod Affinity/Anti-Affinity / should handle multiple dependent affinities

    ExpectCleanedUp and cluster.Reset between the 50 rounds → a fresh Env per round."""
    db_labels = {"type": "db", "spread": "spread"}
    web_labels = {"type": "web", "spread": "spread"}
    cache_labels = {"type": "cache", "spread": "spread"}
    ui_labels = {"type": "ui", "spread": "spread"}
    for _ in range(50):
        env = Env()
        env.apply(topology_pool())
        # we have to schedule DB -> Web -> Cache -> UI in that order or else there are pod affinity violations
        pods = [
            unschedulable_pod(labels=db_labels),
            unschedulable_pod(labels=web_labels, pod_requirements=[affinity_term(HOSTNAME, labels=db_labels)]),
            unschedulable_pod(labels=cache_labels, pod_requirements=[affinity_term(HOSTNAME, labels=web_labels)]),
            unschedulable_pod(labels=ui_labels, pod_requirements=[affinity_term(HOSTNAME, labels=cache_labels)]),
        ]
        env.provision(pods)
        for p in pods:
            env.scheduled(p)


def test_should_fail_to_schedule_pods_with_unsatisfiable_dependencies(env):
    """Topology / Pod Affinity/Anti-Affinity / should fail to schedule pods with unsatisfiable dependencies"""
    db_labels = {"type": "db", "spread": "spread"}
    web_labels = {"type": "web", "spread": "spread"}
    env.apply(topology_pool())
    # this pod wants to schedule with a non-existent pod, this test just ensures that the scheduling loop
    # doesn't infinite loop
    p = unschedulable_pod(labels=db_labels, pod_requirements=[affinity_term(HOSTNAME, labels=web_labels)])
    env.provision(p)
    env.not_scheduled(p)


def test_should_filter_pod_affinity_topologies_by_namespace_no_matching_pods(env):
    """Topology / Pod Affinity/Anti-Affinity / should filter pod affinity topologies by namespace, no matching pods"""
    topology = [spread(HOSTNAME, labels=LABELS)]
    env.apply(namespace("other-ns-no-match"))
    aff_pod1 = unschedulable_pod(labels=AFF_LABELS, namespace="other-ns-no-match")
    # aff_pod2 will try to get scheduled with aff_pod1
    aff_pod2 = unschedulable_pod(pod_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS)])
    # creates 10 nodes due to topo spread
    pods = [*unschedulable_pods(10, labels=LABELS, topology_spread_constraints=topology), aff_pod1, aff_pod2]
    env.apply(topology_pool())
    env.provision(pods)
    # the target pod gets scheduled
    env.scheduled(aff_pod1)
    # but the one with affinity does not since the target pod is not in the same namespace and doesn't
    # match the namespace list or namespace selector
    env.not_scheduled(aff_pod2)


def test_should_filter_pod_affinity_topologies_by_namespace_matching_pods_namespace_list(env):
    """Topology / Pod Affinity/Anti-Affinity / should filter pod affinity topologies by namespace, matching pods namespace list"""
    topology = [spread(HOSTNAME, labels=LABELS)]
    env.apply(namespace("other-ns-list"))
    aff_pod1 = unschedulable_pod(labels=AFF_LABELS, namespace="other-ns-list")
    # aff_pod2 will try to get scheduled with aff_pod1
    aff_pod2 = unschedulable_pod(
        pod_requirements=[affinity_term(HOSTNAME, labels=AFF_LABELS, namespaces=["other-ns-list"])]
    )
    pods = [*unschedulable_pods(10, labels=LABELS, topology_spread_constraints=topology), aff_pod1, aff_pod2]
    env.apply(topology_pool())
    env.provision(pods)
    n1 = env.scheduled(aff_pod1)
    n2 = env.scheduled(aff_pod2)
    # should be scheduled on the same node
    assert n1.name == n2.name


def test_should_filter_pod_affinity_topologies_by_namespace_empty_namespace_selector(env):
    """Topology / Pod Affinity/Anti-Affinity / should filter pod affinity topologies by namespace, empty namespace selector"""
    topology = [spread(HOSTNAME, labels=LABELS)]
    env.apply(namespace("empty-ns-selector", {"foo": "bar"}))
    aff_pod1 = unschedulable_pod(labels=AFF_LABELS, namespace="empty-ns-selector")
    # aff_pod2 will try to get scheduled with aff_pod1
    aff_pod2 = unschedulable_pod(
        pod_requirements=[
            # select all pods in all namespaces since the selector is empty
            affinity_term(HOSTNAME, labels=AFF_LABELS, namespace_selector={"matchLabels": {}})
        ]
    )
    pods = [*unschedulable_pods(10, labels=LABELS, topology_spread_constraints=topology), aff_pod1, aff_pod2]
    env.apply(topology_pool())
    env.provision(pods)
    n1 = env.scheduled(aff_pod1)
    n2 = env.scheduled(aff_pod2)
    # should be scheduled on the same node due to the empty namespace selector
    assert n1.name == n2.name


# ------------------------------------------------------------------ DefaultConstraints


def replica_set(selector: dict[str, str]) -> dict:
    """``test.ReplicaSet``: no replicas of its own here (envtest runs no ReplicaSet controller), only its selector."""
    from harness import random_name

    name = random_name("replicaset")
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {"containers": [{"name": "app", "image": "pause"}]},
            },
        },
    }


def service(selector: dict[str, str]) -> dict:
    """``test.Service``."""
    from harness import random_name

    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": random_name("service"), "namespace": "default"},
        "spec": {"selector": dict(selector), "ports": [{"port": 80}]},
    }


def set_defaults(env: Env, *constraints: dict) -> None:
    """The --scheduler-config PodTopologySpread defaultConstraints (no labelSelector: it is deduced per pod)."""
    env.reader_options["default_constraints"] = tuple(constraints)


def owned_pods(rs: dict, count: int, **options) -> list[dict]:
    """``ownedPods``: pods carrying LABELS, controlled by the ReplicaSet."""
    return unschedulable_pods(count, labels=LABELS, owner=("ReplicaSet", rs["metadata"]["name"]), **options)


ZONE_DEFAULT = spread(ZONE)
HOSTNAME_DEFAULT = spread(HOSTNAME)


def with_selector(constraint: dict, selector: dict[str, str] = LABELS) -> dict:
    return {**constraint, "labelSelector": {"matchLabels": dict(selector)}}


@pytest.fixture
def rs(env):
    """The DefaultConstraints BeforeEach: a ReplicaSet selecting LABELS."""
    made = replica_set(LABELS)
    env.apply(made)
    return made


def test_should_apply_default_zonal_spread_to_a_pod_that_declares_no_constraints_of_its_own(env, rs):
    """Topology / DefaultConstraints / should apply default zonal spread to a pod that declares no constraints of its own"""
    set_defaults(env, ZONE_DEFAULT)
    env.apply(topology_pool())
    env.provision(owned_pods(rs, 4))
    assert skew_values(env.skew(with_selector(ZONE_DEFAULT))) == [1, 1, 2]


def test_should_apply_default_hostname_spread_to_a_pod_that_declares_no_constraints_of_its_own(env, rs):
    """Topology / DefaultConstraints / should apply default hostname spread to a pod that declares no constraints of its own"""
    set_defaults(env, HOSTNAME_DEFAULT)
    env.apply(topology_pool())
    env.provision(owned_pods(rs, 3))
    # hostname spread with maxSkew 1 puts every pod on its own node
    assert skew_values(env.skew(with_selector(HOSTNAME_DEFAULT))) == [1, 1, 1]


def test_should_not_apply_the_default_to_a_pod_that_declares_its_own_constraints(env, rs):
    """Topology / DefaultConstraints / should NOT apply the default to a pod that declares its own constraints"""
    own_constraint = [spread(HOSTNAME, labels=LABELS, max_skew=3)]
    set_defaults(env, HOSTNAME_DEFAULT)
    env.apply(topology_pool())
    pods = owned_pods(rs, 3, topology_spread_constraints=own_constraint)
    env.provision(pods)
    assert len(node_names(env, pods)) == 1


def test_should_carry_mindomains_through_a_synthesized_default(env, rs):
    """Topology / DefaultConstraints / should carry minDomains through a synthesized default"""
    min_domains_default = spread(ZONE, min_domains=3)
    set_defaults(env, min_domains_default)
    env.apply(topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)]))
    env.provision(owned_pods(rs, 3))
    assert skew_values(env.skew(with_selector(min_domains_default))) == [1, 1]


def _single_zone_min_domains(action: str) -> tuple[dict, dict]:
    """``singleZoneMinDomains``: the default, and the NodePool limited to test-zone-1."""
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1)])
    return spread(ZONE, when_unsatisfiable=action, min_domains=3), pool


def test_should_not_schedule_past_a_synthesized_donotschedule_default_that_can_t_be_satisfied(env, rs):
    """Topology / DefaultConstraints / should NOT schedule past a synthesized DoNotSchedule default that can't be satisfied"""
    default, pool = _single_zone_min_domains("DoNotSchedule")
    set_defaults(env, default)
    env.apply(pool)
    pods = owned_pods(rs, 3)
    env.provision(pods)
    # One pod fits; a second in the only eligible zone would exceed maxSkew against a global minimum of 0.
    assert sum(env.is_scheduled(p) for p in pods) == 1


def test_should_relax_a_synthesized_scheduleanyway_default_when_it_can_t_be_satisfied(env, rs):
    """Topology / DefaultConstraints / should relax a synthesized ScheduleAnyway default when it can't be satisfied"""
    default, pool = _single_zone_min_domains("ScheduleAnyway")
    set_defaults(env, default)
    env.apply(pool)
    pods = owned_pods(rs, 3)
    env.provision(pods)
    for p in pods:
        env.scheduled(p)


def test_should_be_a_no_op_when_no_default_constraints_are_configured(env, rs):
    """Topology / DefaultConstraints / should be a no-op when no default constraints are configured"""
    env.apply(topology_pool())
    pods = owned_pods(rs, 3)
    env.provision(pods)
    assert len(node_names(env, pods)) == 1


def test_should_not_apply_the_default_to_a_pod_with_no_owner_and_no_matching_service(env, rs):
    """Topology / DefaultConstraints / should not apply the default to a pod with no owner and no matching service"""
    set_defaults(env, HOSTNAME_DEFAULT)
    env.apply(topology_pool())
    pods = unschedulable_pods(3, labels=LABELS)
    env.provision(pods)
    assert len(node_names(env, pods)) == 1


def test_should_count_pre_existing_cluster_pods_through_the_deduced_selector(env, rs):
    """Topology / DefaultConstraints / should count pre-existing cluster pods through the deduced selector"""
    set_defaults(env, ZONE_DEFAULT)
    existing = node(labels={ZONE: ZONE_1})
    env.apply(topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)]), existing)
    owner = ("ReplicaSet", rs["metadata"]["name"])
    env.apply(
        pod(labels=LABELS, owner=owner, node_name=existing["metadata"]["name"]),
        pod(labels=LABELS, owner=owner, node_name=existing["metadata"]["name"]),
    )
    new_pods = owned_pods(rs, 2)
    env.provision(new_pods)
    for p in new_pods:
        assert env.scheduled(p).labels[ZONE] == ZONE_2
    # zone-1 keeps its 2 pre-existing pods; both new pods go to zone-2.
    assert skew_values(env.skew(with_selector(ZONE_DEFAULT))) == [2, 2]


def test_should_spread_each_workload_independently(env, rs):
    """Topology / DefaultConstraints / should spread each workload independently"""
    set_defaults(env, ZONE_DEFAULT)
    other_labels = {"test": "other"}
    other_rs = replica_set(other_labels)
    env.apply(topology_pool(), other_rs)
    pods = [
        *owned_pods(rs, 3),
        *unschedulable_pods(3, labels=other_labels, owner=("ReplicaSet", other_rs["metadata"]["name"])),
    ]
    env.provision(pods)
    for p in pods:
        env.scheduled(p)
    # Each workload spreads 1/1/1 over its own three zones, rather than the two sharing one group.
    assert skew_values(env.skew(with_selector(ZONE_DEFAULT))) == [1, 1, 1]
    assert skew_values(env.skew(with_selector(ZONE_DEFAULT, other_labels))) == [1, 1, 1]


def test_should_spread_each_deployment_revision_independently(env, rs):
    """Topology / DefaultConstraints / should spread each Deployment revision independently"""
    set_defaults(env, ZONE_DEFAULT)
    old_labels = {"test": "test", "pod-template-hash": "old"}
    new_labels = {"test": "test", "pod-template-hash": "new"}
    old_rs = replica_set(old_labels)
    new_rs = replica_set(new_labels)
    env.apply(topology_pool(), old_rs, new_rs)
    pods = [
        *unschedulable_pods(3, labels=old_labels, owner=("ReplicaSet", old_rs["metadata"]["name"])),
        *unschedulable_pods(3, labels=new_labels, owner=("ReplicaSet", new_rs["metadata"]["name"])),
    ]
    env.provision(pods)
    for p in pods:
        env.scheduled(p)
    # Each revision spreads 1/1/1 on its own.
    assert skew_values(env.skew(with_selector(ZONE_DEFAULT, old_labels))) == [1, 1, 1]
    assert skew_values(env.skew(with_selector(ZONE_DEFAULT, new_labels))) == [1, 1, 1]


def test_should_deduce_a_selector_from_a_matching_service_for_a_pod_with_no_supported_owner(env, rs):
    """Topology / DefaultConstraints / should deduce a selector from a matching service for a pod with no supported owner"""
    set_defaults(env, ZONE_DEFAULT)
    env.apply(topology_pool(), service(LABELS))
    pods = unschedulable_pods(4, labels=LABELS)
    for p in pods:
        p["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "test-job", "uid": "test-job-uid", "controller": True}
        ]
    env.provision(pods)
    assert skew_values(env.skew(with_selector(ZONE_DEFAULT))) == [1, 1, 2]


# ------------------------------------------------------------------ Taints


def test_should_taint_nodes_with_nodepool_taints(env):
    """Taints / should taint nodes with NodePool taints"""
    taint = {"key": "test", "value": "bar", "effect": "NoSchedule"}
    env.apply(topology_pool(taints=[taint]))
    p = unschedulable_pod(tolerations=[{"effect": "NoSchedule", "operator": "Exists"}])
    env.provision(p)
    assert taint in env.scheduled(p).taints


def test_should_schedule_pods_that_tolerate_nodepool_constraints(env):
    """Taints / should schedule pods that tolerate NodePool constraints"""
    pool = topology_pool(taints=[{"key": "test-key", "value": "test-value", "effect": "NoSchedule"}])
    env.apply(pool)
    pods = [
        # Tolerates with OpExists
        unschedulable_pod(tolerations=[{"key": "test-key", "operator": "Exists", "effect": "NoSchedule"}]),
        # Tolerates with OpEqual
        unschedulable_pod(
            tolerations=[{"key": "test-key", "value": "test-value", "operator": "Equal", "effect": "NoSchedule"}]
        ),
    ]
    env.provision(pods)
    for p in pods:
        env.scheduled(p)
    env.apply(pool)
    other_pods = [
        # Missing toleration
        unschedulable_pod(),
        # key mismatch with OpExists
        unschedulable_pod(tolerations=[{"key": "invalid", "operator": "Exists"}]),
        # value mismatch
        unschedulable_pod(tolerations=[{"key": "test-key", "operator": "Equal", "effect": "NoSchedule"}]),
    ]
    env.provision(other_pods)
    for p in other_pods:
        env.not_scheduled(p)


def test_should_provision_nodes_with_taints_and_schedule_pods_if_the_taint_is_only_a_startup_taint(env):
    """Taints / should provision nodes with taints and schedule pods if the taint is only a startup taint"""
    env.apply(
        topology_pool(startup_taints=[{"key": "ignore-me", "value": "nothing-to-see-here", "effect": "NoSchedule"}])
    )
    p = unschedulable_pod()
    env.provision(p)
    env.scheduled(p)


def test_should_not_generate_taints_for_opexists(env):
    """Taints / should not generate taints for OpExists

    Upstream's one "default" taint is node.kubernetes.io/not-ready, which envtest's API server
    (TaintNodesByCondition) puts on every new Node; the simulated kubelet does not, so here no
    taint other than that one may be on the node."""
    env.apply(topology_pool())
    p = unschedulable_pod(tolerations=[{"key": "test-key", "operator": "Exists", "effect": "NoExecute"}])
    env.provision(p)
    taints = env.scheduled(p).taints
    assert [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"] == []
