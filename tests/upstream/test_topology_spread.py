"""Upstream's Topology suite, first half: topology spread constraints on zones, hostnames,
capacity types and custom labels, matchLabelKeys, and the node inclusion policies."""

from __future__ import annotations

from collections import Counter

from harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_CPU,
    INSTANCE_TYPE,
    ZONE,
    ZONE_1,
    ZONE_2,
    ZONE_3,
    Env,
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
    "Topology / should not spread an invalid label selector": (
        "never runs upstream: skipped on every Kubernetes >= 1.24, where the API server denies the selector "
        "value '{{ zqfmgb }}' at admission, so there is no upstream behaviour to port (karpweb's reader accepts "
        "the pod and treats the selector as one no pod matches)"
    ),
}

LABELS = {"test": "test"}
RR = {"cpu": "1.1"}

# upstream's single-pod-instance-type: a node the later (2 cpu) pods cannot join. A 2-vCPU amd64
# type has less than 2 cpu allocatable, so it holds the first pod and no 2-cpu pod.
SINGLE_POD_TYPE = "t3.small"

# upstream's default-instance-type holds 5 pods; every 4-vCPU type holds at least that many.
FIVE_POD_TYPES = [requirement(CAPACITY_TYPE, "Exists"), requirement(INSTANCE_CPU, "In", "4")]


def topology_pool(**options) -> dict:
    """The Describe("Topology") BeforeEach: a NodePool whose only requirement is capacity type Exists."""
    options.setdefault("requirements", [requirement(CAPACITY_TYPE, "Exists")])
    return node_pool(**options)


def with_requirements(pool: dict, *requirements: dict) -> dict:
    """``nodePool.Spec.Template.Spec.Requirements = [...]`` on the same NodePool."""
    pool["spec"]["template"]["spec"]["requirements"] = [dict(r) for r in requirements]
    return pool


def with_labels(pool: dict, labels: dict) -> dict:
    """``nodePool.Spec.Template.Labels = lo.Assign(..., labels)``."""
    metadata = pool["spec"]["template"].setdefault("metadata", {})
    metadata["labels"] = {**metadata.get("labels", {}), **labels}
    return pool


def skew(env: Env, constraint: dict) -> list[int]:
    """``ExpectSkew``, sorted for ``ConsistOf``. Upstream's ``TopologyListOptions`` lists every pod of
    the namespace for a nil labelSelector (``labels.Everything()``): an empty selector here."""
    if "labelSelector" not in constraint:
        constraint = {**constraint, "labelSelector": {}}
    return skew_values(env.skew(constraint))


def bound_pod(node_name: str | None = None, **options) -> dict:
    """``test.Pod``: no PodScheduled=False condition (bound when ``node_name`` is given)."""
    return pod(node_name=node_name, **options)


def small_node(labels: dict, taints=()) -> dict:
    """``test.Node`` with 100m cpu allocatable: a domain no pod of the test fits on."""
    return node(labels=labels, taints=list(taints), allocatable={"cpu": "100m"})


def all_at_most(counts: Counter, bound: int) -> bool:
    """``ToNot(ContainElements(BeNumerically(">", bound)))``."""
    return all(v <= bound for v in counts.values())


def test_should_ignore_unknown_topology_keys(env):
    """Topology / should ignore unknown topology keys"""
    env.apply(topology_pool())
    pods = [
        unschedulable_pod(labels=LABELS, topology_spread_constraints=[spread("unknown", labels=LABELS)]),
        unschedulable_pod(),
    ]
    env.provision(pods)
    env.not_scheduled(pods[0])
    env.scheduled(pods[1])


def test_should_not_spread_when_a_nil_label_selector_is_defined(env):
    """Topology / should not spread when a nil label selector is defined"""
    topology = [spread(ZONE)]
    pods = unschedulable_pods(2, labels=LABELS, topology_spread_constraints=topology)
    env.apply(topology_pool())
    env.provision(pods)
    assert skew(env, topology[0]) == [2]


# ------------------------------------------------------------------ Zonal


def test_should_balance_pods_across_zones_match_labels(env):
    """Topology / Zonal / should balance pods across zones (match labels)"""
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(topology_pool())
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1, 2]


def test_should_balance_pods_across_zones_match_expressions(env):
    """Topology / Zonal / should balance pods across zones (match expressions)"""
    topology = [spread(ZONE, selector={"matchExpressions": [{"key": "test", "operator": "In", "values": ["test"]}]})]
    env.apply(topology_pool())
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1, 2]


def test_should_respect_nodepool_zonal_constraints(env):
    """Topology / Zonal / should respect NodePool zonal constraints"""
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3)])
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(pool)
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1, 2]


def test_should_respect_nodepool_zonal_constraints_subset_with_requirements(env):
    """Topology / Zonal / should respect NodePool zonal constraints (subset) with requirements"""
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)])
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(pool)
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [2, 2]


def test_should_respect_nodepool_zonal_constraints_subset_with_labels(env):
    """Topology / Zonal / should respect NodePool zonal constraints (subset) with labels"""
    pool = with_labels(topology_pool(), {ZONE: ZONE_1})
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(pool)
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [4]


def test_should_respect_nodepool_zonal_constraints_subset_with_requirements_and_labels(env):
    """Topology / Zonal / should respect NodePool zonal constraints (subset) with requirements and labels"""
    pool = with_labels(topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)]), {ZONE: ZONE_1})
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(pool)
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [4]


def test_should_respect_nodepool_zonal_constraints_subset_with_labels_across_nodepools(env):
    """Topology / Zonal / should respect NodePool zonal constraints (subset) with labels across NodePools"""
    pool = with_labels(topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)]), {ZONE: ZONE_1})
    pool2 = node_pool(labels={ZONE: ZONE_2})
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(pool, pool2)
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [2, 2]


def test_should_respect_nodepool_zonal_constraints_existing_pod(env):
    """Topology / Zonal / should respect NodePool zonal constraints (existing pod)

    1.1 cpu per pod: the cheapest type for one is a 2-vCPU type (under 2 cpu allocatable), so the
    first node is full, as upstream's small-instance-type is."""
    pool = topology_pool()
    env.apply(pool)
    first = unschedulable_pod(labels=LABELS, requests=RR, node_selector={ZONE: ZONE_3})
    env.provision(first)
    env.scheduled(first)

    with_requirements(pool, requirement(ZONE, "In", ZONE_1, ZONE_2))
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(pool)
    env.provision(unschedulable_pods(6, labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 2, 2]


def test_should_schedule_to_the_non_minimum_domain_if_its_all_that_s_available(env):
    """Topology / Zonal / should schedule to the non-minimum domain if its all that's available"""
    topology = [spread(ZONE, labels=LABELS, max_skew=5)]
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1)])
    env.apply(pool)
    env.provision(unschedulable_pod(labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1]

    env.apply(with_requirements(pool, requirement(ZONE, "In", ZONE_2)))
    env.provision(unschedulable_pod(labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1]

    env.apply(with_requirements(pool, requirement(ZONE, "In", ZONE_3)))
    env.provision(unschedulable_pods(10, labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1, 6]


def test_should_only_schedule_to_minimum_domains_if_already_violating_max_skew(env):
    """Topology / Zonal / should only schedule to minimum domains if already violating max skew"""
    topology = [spread(ZONE, labels=LABELS)]

    def create_pods(count: int) -> list[dict]:
        return unschedulable_pods(count, labels=LABELS, requests=RR, topology_spread_constraints=topology)

    env.apply(topology_pool())
    pods = create_pods(9)
    env.provision(pods)
    assert skew(env, topology[0]) == [3, 3, 3]

    for p in pods:
        if env.scheduled(p).zone != ZONE_1:
            env.delete(p)
    assert skew(env, topology[0]) == [3]

    env.provision(create_pods(3))
    assert skew(env, topology[0]) == sorted([3, 1, 2])


def test_should_not_violate_max_skew_when_unsat_do_not_schedule(env):
    """Topology / Zonal / should not violate max-skew when unsat = do not schedule"""
    topology = [spread(ZONE, labels=LABELS)]
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1)])
    env.apply(pool)
    env.provision(unschedulable_pod(labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1]

    env.apply(with_requirements(pool, requirement(ZONE, "In", ZONE_2, ZONE_3)))
    env.provision(unschedulable_pods(10, labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 2, 2]


def test_should_not_violate_max_skew_when_unsat_do_not_schedule_discover_domains(env):
    """Topology / Zonal / should not violate max-skew when unsat = do not schedule (discover domains)"""
    topology = [spread(ZONE, labels=LABELS)]
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1)])
    env.apply(pool)
    env.provision(unschedulable_pod(labels=LABELS, requests=RR))

    env.apply(with_requirements(pool, requirement(ZONE, "In", ZONE_2, ZONE_3)))
    env.provision(unschedulable_pods(10, labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 2, 2]


def _ignored_and_counted_pods(first: dict, second: dict, third: dict, wrong_namespace: str) -> list[dict]:
    """The pods of "should only count running/scheduled pods ...": the first seven are ignored."""
    terminating = bound_pod(labels=LABELS)
    terminating["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:10Z"
    terminating["metadata"]["finalizers"] = ["test/finalizer"]
    return [
        bound_pod(first["metadata"]["name"]),  # ignored, missing labels
        bound_pod(labels=LABELS),  # ignored, pending
        bound_pod(third["metadata"]["name"], labels=LABELS),  # ignored, no domain on node
        bound_pod(first["metadata"]["name"], labels=LABELS, namespace=wrong_namespace),  # ignored, wrong namespace
        terminating,  # ignored, terminating
        bound_pod(first["metadata"]["name"], labels=LABELS, phase="Failed"),  # ignored, phase=Failed
        bound_pod(first["metadata"]["name"], labels=LABELS, phase="Succeeded"),  # ignored, phase=Succeeded
        bound_pod(first["metadata"]["name"], labels=LABELS),
        bound_pod(first["metadata"]["name"], labels=LABELS),
        bound_pod(second["metadata"]["name"], labels=LABELS),
    ]


def test_should_only_count_running_scheduled_pods_with_matching_labels_scheduled_to_nodes_with_a_corresponding_domain(
    env,
):
    """Topology / Zonal / should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain"""
    wrong_namespace = "wrong-namespace"
    first = node(labels={ZONE: ZONE_1})
    second = node(labels={ZONE: ZONE_2})
    third = node()  # missing topology domain
    topology = [spread(ZONE, labels=LABELS)]
    env.apply(topology_pool(), first, second, third, namespace(wrong_namespace))
    env.provision(
        _ignored_and_counted_pods(first, second, third, wrong_namespace),
        unschedulable_pod(labels=LABELS, topology_spread_constraints=topology),
        unschedulable_pod(labels=LABELS, topology_spread_constraints=topology),
    )
    assert skew(env, topology[0]) == sorted([2, 2, 1])


def test_should_match_all_pods_when_labelselector_is_not_specified(env):
    """Topology / Zonal / should match all pods when labelSelector is not specified"""
    topology = [spread(ZONE)]
    env.apply(topology_pool())
    env.provision(unschedulable_pod())
    assert skew(env, topology[0]) == [1]


def test_should_handle_interdependent_selectors(env):
    """Topology / Zonal / should handle interdependent selectors

    default-instance-type (4 cpu, 5 pods) → 4-vCPU types (``instance-cpu In [4]``), which all hold
    five pods: the cheapest real types (the nanos) hold four, which alone would need a second node."""
    topology = [spread(HOSTNAME, labels=LABELS)]
    env.apply(topology_pool(requirements=FIVE_POD_TYPES))
    pods = unschedulable_pods(5, topology_spread_constraints=topology)
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 1


def test_should_respect_mindomains_constraints(env):
    """Topology / Zonal / should respect minDomains constraints"""
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)])
    topology = [spread(ZONE, labels=LABELS, min_domains=3)]
    env.apply(pool)
    env.provision(unschedulable_pods(3, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1]


def test_satisfied_mindomains_constraints_equal_should_allow_expected_pod_scheduling(env):
    """Topology / Zonal / satisfied minDomains constraints (equal) should allow expected pod scheduling"""
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3)])
    topology = [spread(ZONE, labels=LABELS, min_domains=3)]
    env.apply(pool)
    env.provision(unschedulable_pods(11, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == sorted([4, 4, 3])


def test_satisfied_mindomains_constraints_greater_than_minimum_should_allow_expected_pod_scheduling(env):
    """Topology / Zonal / satisfied minDomains constraints (greater than minimum) should allow expected pod scheduling"""
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3)])
    topology = [spread(ZONE, labels=LABELS, min_domains=2)]
    env.apply(pool)
    env.provision(unschedulable_pods(11, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == sorted([4, 4, 3])


# ------------------------------------------------------------------ Hostname


def test_should_balance_pods_across_nodes(env):
    """Topology / Hostname / should balance pods across nodes"""
    topology = [spread(HOSTNAME, labels=LABELS)]
    env.apply(topology_pool())
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1, 1, 1]


def test_should_balance_pods_on_the_same_hostname_up_to_maxskew(env):
    """Topology / Hostname / should balance pods on the same hostname up to maxskew"""
    topology = [spread(HOSTNAME, labels=LABELS, max_skew=4)]
    env.apply(topology_pool())
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [4]


def _app_spread_pod(app: str, arch: str | None = None) -> dict:
    options: dict = {
        "labels": {"app": app},
        "topology_spread_constraints": [spread(HOSTNAME, labels={"app": app})],
    }
    if arch is not None:
        options["node_requirements"] = [requirement(ARCH, "In", arch)]
    return unschedulable_pod(**options)


def test_balance_multiple_deployments_with_hostname_topology_spread(env):
    """Topology / Hostname / balance multiple deployments with hostname topology spread"""
    env.apply(topology_pool())
    pods = [_app_spread_pod("app1"), _app_spread_pod("app1"), _app_spread_pod("app2"), _app_spread_pod("app2")]
    env.provision(pods)
    for p in pods:
        env.scheduled(p)
    assert len(env.nodes()) == 2


def test_balance_multiple_deployments_with_hostname_topology_spread_varying_arch(env):
    """Topology / Hostname / balance multiple deployments with hostname topology spread & varying arch"""
    env.apply(topology_pool())
    pods = [
        _app_spread_pod("app1", "amd64"),
        _app_spread_pod("app1", "amd64"),
        _app_spread_pod("app2", "arm64"),
        _app_spread_pod("app2", "arm64"),
    ]
    env.provision(pods)
    for p in pods:
        env.scheduled(p)
    assert len(env.nodes()) == 4


# ------------------------------------------------------------------ CapacityType


def test_should_balance_pods_across_capacity_types(env):
    """Topology / CapacityType / should balance pods across capacity types"""
    topology = [spread(CAPACITY_TYPE, labels=LABELS)]
    env.apply(topology_pool())
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [2, 2]


def test_should_respect_nodepool_capacity_type_constraints(env):
    """Topology / CapacityType / should respect NodePool capacity type constraints"""
    pool = topology_pool(requirements=[requirement(CAPACITY_TYPE, "In", "spot", "on-demand")])
    topology = [spread(CAPACITY_TYPE, labels=LABELS)]
    env.apply(pool)
    env.provision(unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [2, 2]


def test_should_not_violate_max_skew_when_unsat_do_not_schedule_capacity_type(env):
    """Topology / CapacityType / should not violate max-skew when unsat = do not schedule (capacity type)"""
    topology = [spread(CAPACITY_TYPE, labels=LABELS)]
    pool = topology_pool(requirements=[requirement(CAPACITY_TYPE, "In", "spot")])
    env.apply(pool)
    env.provision(unschedulable_pod(labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1]

    env.apply(with_requirements(pool, requirement(CAPACITY_TYPE, "In", "on-demand")))
    env.provision(unschedulable_pods(5, labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 2]


def test_should_violate_max_skew_when_unsat_schedule_anyway_capacity_type(env):
    """Topology / CapacityType / should violate max-skew when unsat = schedule anyway (capacity type)"""
    topology = [spread(CAPACITY_TYPE, labels=LABELS, when_unsatisfiable="ScheduleAnyway")]
    pool = topology_pool(requirements=[requirement(CAPACITY_TYPE, "In", "spot")])
    env.apply(pool)
    env.provision(unschedulable_pod(labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1]

    env.apply(with_requirements(pool, requirement(CAPACITY_TYPE, "In", "on-demand")))
    env.provision(unschedulable_pods(5, labels=LABELS, requests=RR, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 5]


def test_should_only_count_running_scheduled_pods_with_matching_labels_scheduled_to_nodes_with_a_corresponding_domain_2(
    env,
):
    """Topology / CapacityType / should only count running/scheduled pods with matching labels scheduled to nodes with a corresponding domain"""
    wrong_namespace = "wrong-namespace"
    first = node(labels={CAPACITY_TYPE: "spot"})
    second = node(labels={CAPACITY_TYPE: "on-demand"})
    third = node()  # missing topology capacity type
    topology = [spread(CAPACITY_TYPE, labels=LABELS)]
    env.apply(topology_pool(), first, second, third, namespace(wrong_namespace))
    env.provision(
        _ignored_and_counted_pods(first, second, third, wrong_namespace),
        unschedulable_pod(labels=LABELS, topology_spread_constraints=topology),
        unschedulable_pod(labels=LABELS, topology_spread_constraints=topology),
    )
    assert skew(env, topology[0]) == [2, 3]


def test_should_match_all_pods_when_labelselector_is_not_specified_2(env):
    """Topology / CapacityType / should match all pods when labelSelector is not specified"""
    topology = [spread(CAPACITY_TYPE)]
    env.apply(topology_pool())
    env.provision(unschedulable_pod())
    assert skew(env, topology[0]) == [1]


def test_should_handle_interdependent_selectors_2(env):
    """Topology / CapacityType / should handle interdependent selectors

    default-instance-type (4 cpu, 5 pods) → 4-vCPU types (``instance-cpu In [4]``), which all hold
    five pods: the cheapest real types (the nanos) hold four, which alone would need a second node."""
    topology = [spread(HOSTNAME, labels=LABELS)]
    env.apply(topology_pool(requirements=FIVE_POD_TYPES))
    pods = unschedulable_pods(5, topology_spread_constraints=topology)
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 1


def test_should_balance_pods_across_capacity_types_node_required_affinity_constrained(env):
    """Topology / CapacityType / should balance pods across capacity-types (node required affinity constrained)"""
    pool = topology_pool()
    env.apply(pool)
    pods = unschedulable_pods(
        1,
        labels=LABELS,
        node_requirements=[requirement(ZONE, "In", ZONE_1), requirement(CAPACITY_TYPE, "In", "on-demand")],
    )
    env.provision(pods)
    env.scheduled(pods[0])

    topology = [spread(CAPACITY_TYPE, labels=LABELS)]
    env.apply(pool)
    env.provision(
        unschedulable_pods(
            5,
            labels=LABELS,
            node_requirements=[requirement(ZONE, "In", ZONE_2), requirement(CAPACITY_TYPE, "In", "spot")],
            topology_spread_constraints=topology,
        )
    )
    assert skew(env, topology[0]) == [1, 5]


def test_should_balance_pods_across_capacity_types_no_constraints(env):
    """Topology / CapacityType / should balance pods across capacity-types (no constraints)

    single-pod-instance-type → t3.small (2 vCPU, under 2 cpu allocatable): the on-demand node it
    launches cannot take any of the later 2-cpu pods, as the fake type's one pod slot is taken."""
    rr = {"cpu": "2"}
    pool = topology_pool()
    env.apply(pool)
    first = unschedulable_pod(
        labels=LABELS,
        node_selector={INSTANCE_TYPE: SINGLE_POD_TYPE},
        node_requirements=[requirement(CAPACITY_TYPE, "In", "on-demand")],
    )
    env.provision(first)
    env.scheduled(first)

    topology = [spread(CAPACITY_TYPE, labels=LABELS)]
    with_requirements(pool, requirement(CAPACITY_TYPE, "In", "spot"))
    env.apply(pool)
    env.provision(unschedulable_pods(5, labels=LABELS, requests=rr, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 2]


def test_should_balance_pods_across_arch_no_constraints(env):
    """Topology / CapacityType / should balance pods across arch (no constraints)

    single-pod-instance-type → t3.small (amd64, 2 vCPU, under 2 cpu allocatable): the node it launches
    cannot take any of the later 2-cpu pods; arm-instance-type → the Graviton types."""
    rr = {"cpu": "2"}
    pool = topology_pool()
    env.apply(pool)
    first = unschedulable_pod(
        labels=LABELS,
        node_selector={INSTANCE_TYPE: SINGLE_POD_TYPE},
        node_requirements=[requirement(ARCH, "In", "amd64")],
    )
    env.provision(first)
    env.scheduled(first)

    topology = [spread(ARCH, labels=LABELS)]
    with_requirements(pool, requirement(ARCH, "In", "arm64"))
    env.apply(pool)
    env.provision(unschedulable_pods(5, labels=LABELS, requests=rr, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 2]


# ------------------------------------------------------------------ Combined Hostname and Zonal Topology


def test_should_spread_pods_while_respecting_both_constraints_hostname_and_zonal(env):
    """Topology / Combined Hostname and Zonal Topology / should spread pods while respecting both constraints (hostname and zonal)"""
    topology = [spread(ZONE, labels=LABELS), spread(HOSTNAME, labels=LABELS, max_skew=3)]
    pool = topology_pool()
    for count, expected in ((2, [1, 1]), (3, [1, 2, 2]), (5, [3, 3, 4]), (11, [7, 7, 7])):
        env.apply(pool)
        env.provision(unschedulable_pods(count, labels=LABELS, topology_spread_constraints=topology))
        assert skew(env, topology[0]) == expected
        assert all_at_most(env.skew(topology[1]), 3), env.skew(topology[1])


def test_should_balance_pods_across_nodepool_requirements(env):
    """Topology / Combined Hostname and Zonal Topology / should balance pods across NodePool requirements"""
    spread_key = "capacity.spread.4-1"
    spot_pool = node_pool(
        requirements=[requirement(CAPACITY_TYPE, "In", "spot"), requirement(spread_key, "In", "2", "3", "4", "5")]
    )
    on_demand_pool = node_pool(
        requirements=[requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(spread_key, "In", "1")]
    )
    topology = [spread(spread_key, labels=LABELS)]
    env.apply(spot_pool, on_demand_pool)
    pods = unschedulable_pods(20, labels=LABELS, topology_spread_constraints=topology)
    env.provision(pods)
    for p in pods:
        env.scheduled(p)
    assert skew(env, topology[0]) == [4, 4, 4, 4, 4]
    assert skew(env, spread(CAPACITY_TYPE, labels=LABELS)) == [4, 16]


def test_should_spread_pods_while_respecting_both_constraints(env):
    """Topology / Combined Hostname and Zonal Topology / should spread pods while respecting both constraints"""
    topology = [
        spread(ZONE, labels=LABELS),
        spread(HOSTNAME, labels=LABELS, when_unsatisfiable="ScheduleAnyway"),
    ]
    pool = topology_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)])
    pool_b = node_pool(requirements=[requirement(ZONE, "In", ZONE_3)], limits={"cpu": "0"})
    env.apply(pool, pool_b)
    env.provision(unschedulable_pods(10, labels=LABELS, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1, 1]
    assert skew(env, topology[1]) == [1, 1]


def test_should_spread_pods_while_respecting_both_constraints_2(env):
    """Topology / Combined Hostname and Zonal Topology / should spread pods while respecting both constraints"""
    topology = [spread(CAPACITY_TYPE, labels=LABELS), spread(HOSTNAME, labels=LABELS, max_skew=3)]
    pool = topology_pool()
    for count, expected in ((2, [1, 1]), (3, [2, 3]), (5, [5, 5]), (11, [10, 11])):
        env.apply(pool)
        env.provision(unschedulable_pods(count, labels=LABELS, topology_spread_constraints=topology))
        assert skew(env, topology[0]) == expected
        assert all_at_most(env.skew(topology[1]), 3), env.skew(topology[1])


# ------------------------------------------------------------------ MatchLabelKeys


def test_should_support_matchlabelkeys(env):
    """Topology / MatchLabelKeys / should support matchLabelKeys"""
    matched_label = "test-label"
    topology = [spread(HOSTNAME, labels=LABELS, match_label_keys=[matched_label])]
    count = 2
    pods = unschedulable_pods(count, labels={**LABELS, matched_label: "value-a"}, topology_spread_constraints=topology)
    pods += unschedulable_pods(count, labels={**LABELS, matched_label: "value-b"}, topology_spread_constraints=topology)
    env.apply(topology_pool())
    env.provision(pods)
    assert skew(env, topology[0]) == [2, 2]


def test_should_ignore_unknown_labels_specified_in_matchlabelkeys(env):
    """Topology / MatchLabelKeys / should ignore unknown labels specified in matchLabelKeys"""
    topology = [spread(HOSTNAME, labels=LABELS, match_label_keys=["test-label"])]
    pods = unschedulable_pods(4, labels=LABELS, topology_spread_constraints=topology)
    env.apply(topology_pool())
    env.provision(pods)
    assert skew(env, topology[0]) == [1, 1, 1, 1]


# ------------------------------------------------------------------ NodeTaintsPolicy

SPREAD_LABEL = "fake-label"
TAINT = {"key": "taintname", "value": "taintvalue", "effect": "NoSchedule"}


def _two_tainted_nodes() -> tuple[dict, dict]:
    return (
        small_node({SPREAD_LABEL: "foo"}, [TAINT]),
        small_node({SPREAD_LABEL: "bar"}, [TAINT]),
    )


def test_should_balance_pods_across_a_label_nodetaintspolicy_ignore(env):
    """Topology / NodeTaintsPolicy / should balance pods across a label (NodeTaintsPolicy=ignore)"""
    pool = topology_pool(labels={SPREAD_LABEL: "baz"})
    node1, node2 = _two_tainted_nodes()
    env.apply(pool, node1, node2)
    env.provision()
    topology = [spread(SPREAD_LABEL, labels=LABELS, node_taints_policy="Ignore")]
    env.apply(pool)
    env.provision(unschedulable_pods(5, labels=LABELS, requests={"cpu": "1"}, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [1]


def test_should_balance_pods_across_a_label_nodetaintspolicy_honor(env):
    """Topology / NodeTaintsPolicy / should balance pods across a label (NodeTaintsPolicy=honor)"""
    pool = topology_pool(labels={SPREAD_LABEL: "baz"})
    node1, node2 = _two_tainted_nodes()
    env.apply(pool, node1, node2)
    env.provision()
    topology = [spread(SPREAD_LABEL, labels=LABELS, node_taints_policy="Honor")]
    env.apply(pool)
    env.provision(unschedulable_pods(5, labels=LABELS, requests={"cpu": "1"}, topology_spread_constraints=topology))
    assert skew(env, topology[0]) == [5]


def _discovered_pools() -> tuple[dict, dict]:
    pool = topology_pool(
        requirements=[requirement(CAPACITY_TYPE, "Exists"), requirement(SPREAD_LABEL, "In", "foo")],
    )
    tainted_pool = node_pool(
        taints=[{"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}],
        requirements=[requirement(CAPACITY_TYPE, "Exists"), requirement(SPREAD_LABEL, "In", "bar")],
    )
    return pool, tainted_pool


def test_should_balance_pods_across_a_label_when_discovered_from_the_nodepool_nodetaintspolicy_ignore(env):
    """Topology / NodeTaintsPolicy / should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=ignore)"""
    pool, tainted_pool = _discovered_pools()
    topology = [spread(SPREAD_LABEL, labels=LABELS, node_taints_policy="Ignore")]
    pods = unschedulable_pods(2, labels=LABELS, topology_spread_constraints=topology)
    env.apply(pool, tainted_pool)
    env.provision(pods)
    assert skew(env, topology[0]) == [1]


def test_should_balance_pods_across_a_label_when_discovered_from_the_nodepool_nodetaintspolicy_honor(env):
    """Topology / NodeTaintsPolicy / should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=honor)"""
    pool, tainted_pool = _discovered_pools()
    topology = [spread(SPREAD_LABEL, labels=LABELS, node_taints_policy="Honor")]
    pods = unschedulable_pods(2, labels=LABELS, topology_spread_constraints=topology)
    env.apply(pool, tainted_pool)
    env.provision(pods)
    assert skew(env, topology[0]) == [2]


def taint_value(pool: dict) -> str:
    return pool["spec"]["template"]["spec"]["taints"][0]["value"]


def test_should_balance_pods_across_a_label_when_mutually_exclusive_nodepools_by_taints_share_domains_nodetaintspolicy_honor(
    env,
):
    """Topology / NodeTaintsPolicy / should balance pods across a label when mutually exclusive NodePools (by taints) share domains (NodeTaintsPolicy=honor)"""
    pools = [
        node_pool(
            taints=[{"key": "taint-key", "value": f"nodepool-{i}", "effect": "NoSchedule"}],
            requirements=[requirement(CAPACITY_TYPE, "Exists"), requirement(SPREAD_LABEL, "In", *domains)],
        )
        for i, domains in enumerate((("foo", "bar"), ("foo", "baz")))
    ]
    topology = [spread(SPREAD_LABEL, labels=LABELS, node_taints_policy="Honor")]
    pods = []
    for i, np in enumerate(pools):
        pods += unschedulable_pods(
            (i + 1) * 2,
            labels=LABELS,
            topology_spread_constraints=topology,
            tolerations=[
                {
                    "key": "taint-key",
                    "effect": "NoSchedule",
                    "value": np["spec"]["template"]["spec"]["taints"][0]["value"],
                }
            ],
        )
    env.apply(pools[0], pools[1])
    env.provision(pods)
    assert skew(env, topology[0]) == [1, 2, 3]


# ------------------------------------------------------------------ NodeAffinityPolicy

AFFINITY_LABEL = "selector"
AFFINITY_MISMATCH = "mismatch"
AFFINITY_MATCH = "value"


def _affinity_setup(env: Env) -> dict:
    pool = topology_pool(labels={SPREAD_LABEL: "baz", AFFINITY_LABEL: AFFINITY_MATCH})
    node1 = small_node({SPREAD_LABEL: "foo", AFFINITY_LABEL: AFFINITY_MISMATCH})
    node2 = small_node({SPREAD_LABEL: "bar", AFFINITY_LABEL: AFFINITY_MISMATCH})
    env.apply(pool, node1, node2)
    env.provision()
    return pool


def test_should_balance_pods_across_a_label_nodeaffinitypolicy_ignore(env):
    """Topology / NodeAffinityPolicy / should balance pods across a label (NodeAffinityPolicy=ignore)"""
    pool = _affinity_setup(env)
    topology = [spread(SPREAD_LABEL, labels=LABELS, node_affinity_policy="Ignore")]
    env.apply(pool)
    env.provision(
        unschedulable_pods(
            5,
            labels=LABELS,
            requests={"cpu": "1"},
            node_selector={AFFINITY_LABEL: AFFINITY_MATCH},
            topology_spread_constraints=topology,
        )
    )
    assert skew(env, topology[0]) == [1]


def test_should_balance_pods_across_a_label_nodeaffinitypolicy_honor(env):
    """Topology / NodeAffinityPolicy / should balance pods across a label (NodeAffinityPolicy=honor)"""
    pool = _affinity_setup(env)
    topology = [spread(SPREAD_LABEL, labels=LABELS, node_affinity_policy="Honor")]
    env.apply(pool)
    env.provision(
        unschedulable_pods(
            5,
            labels=LABELS,
            requests={"cpu": "1"},
            node_selector={AFFINITY_LABEL: AFFINITY_MATCH},
            topology_spread_constraints=topology,
        )
    )
    assert skew(env, topology[0]) == [5]
