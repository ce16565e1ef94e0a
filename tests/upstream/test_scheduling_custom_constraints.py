"""Upstream's scheduling suite, ``Describe("Custom Constraints")``
(``pkg/controllers/provisioning/scheduling/suite_test.go``), ported.

The Its check how node selectors, required node affinity and preferred node affinity meet a
NodePool's requirements and labels: which pods get a node, on which zone, instance type or
label value, and which stay pending. Upstream has the Contexts "Well Known Labels",
"Constraints Validation" and "Scheduling Logic" twice in this Describe, the second copy the
same as the first but for a few Its; the second copy's tests run the first copy's bodies.

Upstream's ``Context("Scheduling")`` BeforeEach makes a NodePool with ``karpenter.sh/capacity-type
In [spot, on-demand, reserved]``; karpweb has no reserved capacity yet, so here it is ``In [spot,
on-demand]`` (``base_pool``). Tests that set ``nodePool.Spec.Template.Spec.Requirements`` replace
that requirement, as upstream's assignment does.

Mappings used throughout (besides README.md's table):

* the fake label ``integer`` (each fake type's cpu count: 2, 4 or 16):
  ``karpenter.k8s.aws/instance-cpu``. As among the fake types, the cheapest real type with more
  than 8 vCPUs has 16 and the cheapest with fewer than 8 has 2.
* ``default-instance-type`` (4 cpu): ``m5.xlarge`` (4 vCPU); ``arm-instance-type`` (arm64, 16 cpu,
  128Gi): ``r6g.4xlarge`` (arm64, 16 vCPU, 128 GiB).
* ``v1.RestrictedLabels`` is ``{kubernetes.io/hostname}``; ``v1.RestrictedLabelDomains`` is
  ``{karpenter.sh}`` in core, to which the AWS provider adds ``karpenter.k8s.aws``
  (aws/karpenter-provider-aws ``pkg/apis/v1/labels.go``); both domains are tried here.
"""

from __future__ import annotations

from harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    OS,
    ZONE,
    ZONE_1,
    ZONE_2,
    ZONE_3,
    Env,
    Manifest,
    node_pool,
    requirement,
    unschedulable_pod,
)

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}

INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"  # upstream's fake label ``integer``
DEFAULT_INSTANCE_TYPE = "m5.xlarge"  # upstream's default-instance-type (4 cpu)
ARM_INSTANCE_TYPE = "r6g.4xlarge"  # upstream's arm-instance-type (arm64, 16 cpu, 128Gi)
RESTRICTED_LABELS = (HOSTNAME,)
RESTRICTED_LABEL_DOMAINS = ("karpenter.sh", "karpenter.k8s.aws")


def base_pool(**options) -> Manifest:
    """The ``Context("Scheduling")`` BeforeEach NodePool: capacity type spot or on-demand."""
    options.setdefault("requirements", [requirement(CAPACITY_TYPE, "In", "spot", "on-demand")])
    return node_pool(**options)


def upstream_pod(*, node_preferences: list[Manifest] | None = None, **options) -> Manifest:
    """``test.UnschedulablePod``, its ``NodePreferences`` as upstream builds them: one preferred
    term of weight 1 holding every preference."""
    manifest = unschedulable_pod(**options)
    if node_preferences:
        affinity = manifest["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "preference": {"matchExpressions": [dict(r) for r in node_preferences]}}
        ]
    return manifest


# ------------------------------------------------------------------ NodePool with Labels


def test_should_schedule_unconstrained_pods_that_don_t_have_matching_node_selectors(env: Env):
    """Scheduling / Custom Constraints / NodePool with Labels / should schedule unconstrained pods that don't have matching node selectors"""
    env.apply(base_pool(labels={"test-key": "test-value"}))
    p = upstream_pod()
    env.provision(p)
    node = env.scheduled(p)
    assert node.labels.get("test-key") == "test-value"


def test_should_not_schedule_pods_that_have_conflicting_node_selectors(env: Env):
    """Scheduling / Custom Constraints / NodePool with Labels / should not schedule pods that have conflicting node selectors"""
    env.apply(base_pool(labels={"test-key": "test-value"}))
    p = upstream_pod(node_selector={"test-key": "different-value"})
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_pods_that_have_node_selectors_with_undefined_key(env: Env):
    """Scheduling / Custom Constraints / NodePool with Labels / should not schedule pods that have node selectors with undefined key"""
    env.apply(base_pool())
    p = upstream_pod(node_selector={"test-key": "test-value"})
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_pods_that_have_matching_requirements(env: Env):
    """Scheduling / Custom Constraints / NodePool with Labels / should schedule pods that have matching requirements"""
    env.apply(base_pool(labels={"test-key": "test-value"}))
    p = upstream_pod(node_requirements=[requirement("test-key", "In", "test-value", "another-value")])
    env.provision(p)
    node = env.scheduled(p)
    assert node.labels.get("test-key") == "test-value"


def test_should_not_schedule_pods_that_have_conflicting_requirements(env: Env):
    """Scheduling / Custom Constraints / NodePool with Labels / should not schedule pods that have conflicting requirements"""
    env.apply(base_pool(labels={"test-key": "test-value"}))
    p = upstream_pod(node_requirements=[requirement("test-key", "In", "another-value")])
    env.provision(p)
    env.not_scheduled(p)


# ------------------------------------------------------------------ Well Known Labels


def test_should_use_nodepool_constraints(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should use NodePool constraints"""
    env.apply(node_pool(requirements=[requirement(ZONE, "In", ZONE_2)]))
    p = upstream_pod()
    env.provision(p)
    assert env.scheduled(p).labels.get(ZONE) == ZONE_2


def test_should_use_node_selectors(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should use node selectors"""
    env.apply(node_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)]))
    p = upstream_pod(node_selector={ZONE: ZONE_2})
    env.provision(p)
    assert env.scheduled(p).labels.get(ZONE) == ZONE_2


def test_should_not_schedule_nodes_with_a_hostname_selector(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule nodes with a hostname selector"""
    env.apply(base_pool())
    p = upstream_pod(node_selector={HOSTNAME: "red-node"})
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_the_pod_if_nodeselector_unknown(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule the pod if nodeselector unknown"""
    env.apply(node_pool(requirements=[requirement(ZONE, "In", ZONE_1)]))
    p = upstream_pod(node_selector={ZONE: "unknown"})
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_if_node_selector_outside_of_nodepool_constraints(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule if node selector outside of NodePool constraints"""
    env.apply(node_pool(requirements=[requirement(ZONE, "In", ZONE_1)]))
    p = upstream_pod(node_selector={ZONE: ZONE_2})
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_compatible_requirements_with_operator_in(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=In"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement(ZONE, "In", ZONE_3)])
    env.provision(p)
    assert env.scheduled(p).labels.get(ZONE) == ZONE_3


def test_should_schedule_compatible_requirements_with_operator_gt(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=Gt

    ``integer Gt 8``: ``karpenter.k8s.aws/instance-cpu Gt 8``; the cheapest such type has 16 vCPUs,
    as arm-instance-type (16) is the only fake type above 8."""
    env.apply(node_pool(requirements=[requirement(INSTANCE_CPU, "Gt", 8)]))
    p = upstream_pod()
    env.provision(p)
    assert env.scheduled(p).labels.get(INSTANCE_CPU) == "16"


def test_should_schedule_compatible_requirements_with_operator_lt(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=Lt

    ``integer Lt 8``: ``karpenter.k8s.aws/instance-cpu Lt 8``; the cheapest such type has 2 vCPUs,
    as small-instance-type (2) is the cheapest fake type below 8."""
    env.apply(node_pool(requirements=[requirement(INSTANCE_CPU, "Lt", 8)]))
    p = upstream_pod()
    env.provision(p)
    assert env.scheduled(p).labels.get(INSTANCE_CPU) == "2"


def test_should_schedule_compatible_requirements_with_operator_gte(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=Gte

    ``integer Gte 16``: ``karpenter.k8s.aws/instance-cpu Gte 16``; the cheapest such type has 16 vCPUs."""
    env.apply(node_pool(requirements=[requirement(INSTANCE_CPU, "Gte", 16)]))
    p = upstream_pod()
    env.provision(p)
    assert env.scheduled(p).labels.get(INSTANCE_CPU) == "16"


def test_should_schedule_compatible_requirements_with_operator_lte(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=Lte

    ``integer Lte 2``: ``karpenter.k8s.aws/instance-cpu Lte 2``; the cheapest such type has 2 vCPUs."""
    env.apply(node_pool(requirements=[requirement(INSTANCE_CPU, "Lte", 2)]))
    p = upstream_pod()
    env.provision(p)
    assert env.scheduled(p).labels.get(INSTANCE_CPU) == "2"


def test_should_not_schedule_incompatible_preferences_and_requirements_with_operator_in(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule incompatible preferences and requirements with Operator=In"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement(ZONE, "In", "unknown")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_compatible_requirements_with_operator_notin(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=NotIn"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement(ZONE, "NotIn", ZONE_1, ZONE_2, "unknown")])
    env.provision(p)
    assert env.scheduled(p).labels.get(ZONE) == ZONE_3


def test_should_not_schedule_incompatible_preferences_and_requirements_with_operator_notin(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule incompatible preferences and requirements with Operator=NotIn"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement(ZONE, "NotIn", ZONE_1, ZONE_2, ZONE_3, "unknown")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_compatible_preferences_and_requirements_with_operator_in(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible preferences and requirements with Operator=In"""
    env.apply(base_pool())
    p = upstream_pod(
        node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3, "unknown")],
        node_preferences=[requirement(ZONE, "In", ZONE_2, "unknown")],
    )
    env.provision(p)
    assert env.scheduled(p).labels.get(ZONE) == ZONE_2


def test_should_schedule_incompatible_preferences_and_requirements_with_operator_in(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule incompatible preferences and requirements with Operator=In"""
    env.apply(base_pool())
    p = upstream_pod(
        node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3, "unknown")],
        node_preferences=[requirement(ZONE, "In", "unknown")],
    )
    env.provision(p)
    env.scheduled(p)


def test_should_schedule_compatible_preferences_and_requirements_with_operator_notin(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible preferences and requirements with Operator=NotIn"""
    env.apply(base_pool())
    p = upstream_pod(
        node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3, "unknown")],
        node_preferences=[requirement(ZONE, "NotIn", ZONE_1, ZONE_3)],
    )
    env.provision(p)
    assert env.scheduled(p).labels.get(ZONE) == ZONE_2


def test_should_schedule_incompatible_preferences_and_requirements_with_operator_notin(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule incompatible preferences and requirements with Operator=NotIn"""
    env.apply(base_pool())
    p = upstream_pod(
        node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3, "unknown")],
        node_preferences=[requirement(ZONE, "NotIn", ZONE_1, ZONE_2, ZONE_3)],
    )
    env.provision(p)
    env.scheduled(p)


def test_should_schedule_compatible_node_selectors_preferences_and_requirements(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible node selectors, preferences and requirements"""
    env.apply(base_pool())
    p = upstream_pod(
        node_selector={ZONE: ZONE_3},
        node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3)],
        node_preferences=[requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3)],
    )
    env.provision(p)
    assert env.scheduled(p).labels.get(ZONE) == ZONE_3


def test_should_combine_multidimensional_node_selectors_preferences_and_requirements(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should combine multidimensional node selectors, preferences and requirements

    default-instance-type: m5.xlarge; arm-instance-type: r6g.4xlarge."""
    env.apply(base_pool())
    p = upstream_pod(
        node_selector={ZONE: ZONE_3, INSTANCE_TYPE: ARM_INSTANCE_TYPE},
        node_requirements=[
            requirement(ZONE, "In", ZONE_1, ZONE_3),
            requirement(INSTANCE_TYPE, "In", DEFAULT_INSTANCE_TYPE, ARM_INSTANCE_TYPE),
        ],
        node_preferences=[
            requirement(ZONE, "NotIn", "unknown"),
            requirement(INSTANCE_TYPE, "NotIn", "unknown"),
        ],
    )
    env.provision(p)
    node = env.scheduled(p)
    assert node.labels.get(ZONE) == ZONE_3
    assert node.labels.get(INSTANCE_TYPE) == ARM_INSTANCE_TYPE


# ------------------------------------------------------------------ Constraints Validation


def test_should_not_schedule_pods_that_have_node_selectors_with_restricted_labels(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should not schedule pods that have node selectors with restricted labels

    Upstream also checks cluster state's scheduling decision/success times and the
    ``karpenter_pods_scheduling_decision_duration_seconds`` histogram of the Go controller;
    those are not the solver's and are left out."""
    env.apply(base_pool())
    for label in RESTRICTED_LABELS:
        p = upstream_pod(node_requirements=[requirement(label, "In", "test")])
        env.provision(p)
        env.not_scheduled(p)


def test_should_not_schedule_pods_that_have_node_selectors_with_restricted_domains(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should not schedule pods that have node selectors with restricted domains"""
    env.apply(base_pool())
    for domain in RESTRICTED_LABEL_DOMAINS:
        p = upstream_pod(node_requirements=[requirement(domain + "/test", "In", "test")])
        env.provision(p)
        env.not_scheduled(p)


def test_should_schedule_pods_that_have_node_selectors_with_label_in_the_kubernetes_domains(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should schedule pods that have node selectors with label in the kubernetes domains"""
    domains = ("kubernetes.io", "k8s.io")
    env.apply(node_pool(requirements=[requirement(d + "/test", "In", "test-value") for d in domains]))
    for domain in domains:
        p = upstream_pod()
        env.provision(p)
        assert env.scheduled(p).labels.get(domain + "/test") == "test-value"


def test_should_schedule_pods_that_have_node_selectors_with_label_in_subdomain_from_kubernetes_domains(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should schedule pods that have node selectors with label in subdomain from kubernetes domains"""
    domains = ("kubernetes.io", "k8s.io")
    env.apply(node_pool(requirements=[requirement("subdomain." + d + "/test", "In", "test-value") for d in domains]))
    for domain in domains:
        p = upstream_pod()
        env.provision(p)
        assert env.scheduled(p).labels.get("subdomain." + domain + "/test") == "test-value"


def test_should_schedule_pods_that_have_node_selectors_with_label_in_wellknown_label_list(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should schedule pods that have node selectors with label in wellknown label list

    default-instance-type: m5.xlarge."""
    schedulable = [
        upstream_pod(node_selector={ZONE: ZONE_1}),
        upstream_pod(node_selector={INSTANCE_TYPE: DEFAULT_INSTANCE_TYPE}),
        upstream_pod(node_selector={ARCH: "arm64"}),
        upstream_pod(node_selector={OS: "linux"}),
        upstream_pod(node_selector={CAPACITY_TYPE: "spot"}),
    ]
    env.apply(base_pool())
    env.provision(schedulable)
    for p in schedulable:
        env.scheduled(p)


# ------------------------------------------------------------------ Scheduling Logic


def test_should_not_schedule_pods_with_nodepool_which_is_not_ready(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods with nodePool which is not ready

    (Upstream's It text ends with a space.) ``StatusConditions().SetFalse(ConditionReady, ...)``: the
    NodePool's ``status.conditions`` has Ready False."""
    np = base_pool()
    np["status"] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "NodePoolNotReady",
                "message": "Node Pool Not Ready",
                "lastTransitionTime": "2024-01-01T00:00:00Z",
            }
        ]
    }
    env.apply(np)
    p = upstream_pod()
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_pods_that_have_node_selectors_with_in_operator_and_undefined_key(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with In operator and undefined key"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement("test-key", "In", "test-value")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_pods_that_have_node_selectors_with_notin_operator_and_undefined_key(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that have node selectors with NotIn operator and undefined key"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement("test-key", "NotIn", "test-value")])
    env.provision(p)
    assert env.scheduled(p).labels.get("test-key") != "test-value"


def test_should_not_schedule_pods_that_have_node_selectors_with_exists_operator_and_undefined_key(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with Exists operator and undefined key"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement("test-key", "Exists")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_pods_that_with_doesnotexists_operator_and_undefined_key(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that with DoesNotExists operator and undefined key"""
    env.apply(base_pool())
    p = upstream_pod(node_requirements=[requirement("test-key", "DoesNotExist")])
    env.provision(p)
    assert "test-key" not in env.scheduled(p).labels


def test_should_schedule_unconstrained_pods_that_don_t_have_matching_node_selectors_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule unconstrained pods that don't have matching node selectors"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value")]))
    p = upstream_pod()
    env.provision(p)
    assert env.scheduled(p).labels.get("test-key") == "test-value"


def test_should_schedule_pods_that_have_node_selectors_with_matching_value_and_in_operator(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that have node selectors with matching value and In operator"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value")]))
    p = upstream_pod(node_requirements=[requirement("test-key", "In", "test-value")])
    env.provision(p)
    assert env.scheduled(p).labels.get("test-key") == "test-value"


def test_should_not_schedule_pods_that_have_node_selectors_with_matching_value_and_notin_operator(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with matching value and NotIn operator"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value")]))
    p = upstream_pod(node_requirements=[requirement("test-key", "NotIn", "test-value")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_the_pod_with_exists_operator_and_defined_key(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule the pod with Exists operator and defined key"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value")]))
    p = upstream_pod(node_requirements=[requirement("test-key", "Exists")])
    env.provision(p)
    env.scheduled(p)


def test_should_not_schedule_the_pod_with_doesnotexists_operator_and_defined_key(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule the pod with DoesNotExists operator and defined key"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value")]))
    p = upstream_pod(node_requirements=[requirement("test-key", "DoesNotExist")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_pods_that_have_node_selectors_with_different_value_and_in_operator(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with different value and In operator"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value")]))
    p = upstream_pod(node_requirements=[requirement("test-key", "In", "another-value")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_pods_that_have_node_selectors_with_different_value_and_notin_operator(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that have node selectors with different value and NotIn operator"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value")]))
    p = upstream_pod(node_requirements=[requirement("test-key", "NotIn", "another-value")])
    env.provision(p)
    assert env.scheduled(p).labels.get("test-key") == "test-value"


def test_should_schedule_compatible_pods_to_the_same_node(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule compatible pods to the same node"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value", "another-value")]))
    pods = [
        upstream_pod(node_requirements=[requirement("test-key", "In", "test-value")]),
        upstream_pod(node_requirements=[requirement("test-key", "NotIn", "another-value")]),
    ]
    env.provision(pods)
    node1, node2 = env.scheduled(pods[0]), env.scheduled(pods[1])
    assert node1.labels.get("test-key") == "test-value"
    assert node2.labels.get("test-key") == "test-value"
    assert node1.name == node2.name


def test_should_schedule_incompatible_pods_to_the_different_node(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule incompatible pods to the different node"""
    env.apply(node_pool(requirements=[requirement("test-key", "In", "test-value", "another-value")]))
    pods = [
        upstream_pod(node_requirements=[requirement("test-key", "In", "test-value")]),
        upstream_pod(node_requirements=[requirement("test-key", "In", "another-value")]),
    ]
    env.provision(pods)
    node1, node2 = env.scheduled(pods[0]), env.scheduled(pods[1])
    assert node1.labels.get("test-key") == "test-value"
    assert node2.labels.get("test-key") == "another-value"
    assert node1.name != node2.name


def test_exists_operator_should_not_overwrite_the_existing_value(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / Exists operator should not overwrite the existing value"""
    env.apply(base_pool())
    p = upstream_pod(
        node_requirements=[
            requirement(ZONE, "In", "non-existent-zone"),
            requirement(ZONE, "Exists"),
        ]
    )
    env.provision(p)
    env.not_scheduled(p)


# ------------------------------------------------------------------ Well Known Labels (second copy)


def test_should_use_nodepool_constraints_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should use NodePool constraints

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_use_nodepool_constraints(env)


def test_should_use_node_selectors_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should use node selectors

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_use_node_selectors(env)


def test_should_not_schedule_nodes_with_a_hostname_selector_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule nodes with a hostname selector

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_nodes_with_a_hostname_selector(env)


def test_should_not_schedule_the_pod_if_nodeselector_unknown_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule the pod if nodeselector unknown

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_the_pod_if_nodeselector_unknown(env)


def test_should_not_schedule_if_node_selector_outside_of_nodepool_constraints_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule if node selector outside of NodePool constraints

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_if_node_selector_outside_of_nodepool_constraints(env)


def test_should_schedule_compatible_requirements_with_operator_in_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=In

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_requirements_with_operator_in(env)


def test_should_schedule_compatible_requirements_with_operator_gt_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=Gt

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_requirements_with_operator_gt(env)


def test_should_schedule_compatible_requirements_with_operator_lt_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=Lt

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_requirements_with_operator_lt(env)


def test_should_not_schedule_incompatible_preferences_and_requirements_with_operator_in_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule incompatible preferences and requirements with Operator=In

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_incompatible_preferences_and_requirements_with_operator_in(env)


def test_should_schedule_compatible_requirements_with_operator_notin_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible requirements with Operator=NotIn

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_requirements_with_operator_notin(env)


def test_should_not_schedule_incompatible_preferences_and_requirements_with_operator_notin_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should not schedule incompatible preferences and requirements with Operator=NotIn

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_incompatible_preferences_and_requirements_with_operator_notin(env)


def test_should_schedule_compatible_preferences_and_requirements_with_operator_in_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible preferences and requirements with Operator=In

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_preferences_and_requirements_with_operator_in(env)


def test_should_schedule_incompatible_preferences_and_requirements_with_operator_in_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule incompatible preferences and requirements with Operator=In

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_incompatible_preferences_and_requirements_with_operator_in(env)


def test_should_schedule_compatible_preferences_and_requirements_with_operator_notin_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible preferences and requirements with Operator=NotIn

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_preferences_and_requirements_with_operator_notin(env)


def test_should_schedule_incompatible_preferences_and_requirements_with_operator_notin_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule incompatible preferences and requirements with Operator=NotIn

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_incompatible_preferences_and_requirements_with_operator_notin(env)


def test_should_schedule_compatible_node_selectors_preferences_and_requirements_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should schedule compatible node selectors, preferences and requirements

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_node_selectors_preferences_and_requirements(env)


def test_should_combine_multidimensional_node_selectors_preferences_and_requirements_2(env: Env):
    """Scheduling / Custom Constraints / Well Known Labels / should combine multidimensional node selectors, preferences and requirements

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first.
    default-instance-type: m5.xlarge; arm-instance-type: r6g.4xlarge."""
    test_should_combine_multidimensional_node_selectors_preferences_and_requirements(env)


# ------------------------------------------------------------------ Constraints Validation (second copy)


def test_should_not_schedule_pods_that_have_node_selectors_with_restricted_labels_2(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should not schedule pods that have node selectors with restricted labels

    Upstream's second copy of this Context (suite_test.go lines 678-1124), without the first
    copy's metric checks."""
    test_should_not_schedule_pods_that_have_node_selectors_with_restricted_labels(env)


def test_should_not_schedule_pods_that_have_node_selectors_with_restricted_domains_2(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should not schedule pods that have node selectors with restricted domains

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_pods_that_have_node_selectors_with_restricted_domains(env)


def test_should_schedule_pods_that_have_node_selectors_with_label_in_kubernetes_domains(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should schedule pods that have node selectors with label in kubernetes domains

    Upstream's second copy of this Context (suite_test.go lines 678-1124): the first copy's
    "... label in the kubernetes domains"."""
    test_should_schedule_pods_that_have_node_selectors_with_label_in_the_kubernetes_domains(env)


def test_should_schedule_pods_that_have_node_selectors_with_label_in_subdomain_from_kubernetes_domains_2(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should schedule pods that have node selectors with label in subdomain from kubernetes domains

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_pods_that_have_node_selectors_with_label_in_subdomain_from_kubernetes_domains(env)


def test_should_schedule_pods_that_have_node_selectors_with_label_in_wellknown_label_list_2(env: Env):
    """Scheduling / Custom Constraints / Constraints Validation / should schedule pods that have node selectors with label in wellknown label list

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first.
    default-instance-type: m5.xlarge."""
    test_should_schedule_pods_that_have_node_selectors_with_label_in_wellknown_label_list(env)


# ------------------------------------------------------------------ Scheduling Logic (second copy)


def test_should_not_schedule_pods_that_have_node_selectors_with_in_operator_and_undefined_key_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with In operator and undefined key

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_pods_that_have_node_selectors_with_in_operator_and_undefined_key(env)


def test_should_schedule_pods_that_have_node_selectors_with_notin_operator_and_undefined_key_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that have node selectors with NotIn operator and undefined key

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_pods_that_have_node_selectors_with_notin_operator_and_undefined_key(env)


def test_should_not_schedule_pods_that_have_node_selectors_with_exists_operator_and_undefined_key_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with Exists operator and undefined key

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_pods_that_have_node_selectors_with_exists_operator_and_undefined_key(env)


def test_should_schedule_pods_that_with_doesnotexists_operator_and_undefined_key_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that with DoesNotExists operator and undefined key

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_pods_that_with_doesnotexists_operator_and_undefined_key(env)


def test_should_schedule_unconstrained_pods_that_don_t_have_matching_node_selectors_3(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule unconstrained pods that don't have matching node selectors

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_unconstrained_pods_that_don_t_have_matching_node_selectors_2(env)


def test_should_schedule_pods_that_have_node_selectors_with_matching_value_and_in_operator_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that have node selectors with matching value and In operator

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_pods_that_have_node_selectors_with_matching_value_and_in_operator(env)


def test_should_not_schedule_pods_that_have_node_selectors_with_matching_value_and_notin_operator_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with matching value and NotIn operator

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_pods_that_have_node_selectors_with_matching_value_and_notin_operator(env)


def test_should_schedule_the_pod_with_exists_operator_and_defined_key_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule the pod with Exists operator and defined key

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_the_pod_with_exists_operator_and_defined_key(env)


def test_should_not_schedule_the_pod_with_doesnotexists_operator_and_defined_key_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule the pod with DoesNotExists operator and defined key

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_the_pod_with_doesnotexists_operator_and_defined_key(env)


def test_should_not_schedule_pods_that_have_node_selectors_with_different_value_and_in_operator_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should not schedule pods that have node selectors with different value and In operator

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_not_schedule_pods_that_have_node_selectors_with_different_value_and_in_operator(env)


def test_should_schedule_pods_that_have_node_selectors_with_different_value_and_notin_operator_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule pods that have node selectors with different value and NotIn operator

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_pods_that_have_node_selectors_with_different_value_and_notin_operator(env)


def test_should_schedule_compatible_pods_to_the_same_node_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule compatible pods to the same node

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_compatible_pods_to_the_same_node(env)


def test_should_schedule_incompatible_pods_to_the_different_node_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / should schedule incompatible pods to the different node

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_should_schedule_incompatible_pods_to_the_different_node(env)


def test_exists_operator_should_not_overwrite_the_existing_value_2(env: Env):
    """Scheduling / Custom Constraints / Scheduling Logic / Exists operator should not overwrite the existing value

    Upstream's second copy of this Context (suite_test.go lines 678-1124), the same as the first."""
    test_exists_operator_should_not_overwrite_the_existing_value(env)
