"""Upstream's scheduling suite: preferential fallback, instance type compatibility, binpacking
and in-flight nodes (``suite_test.go`` lines 1126-2605).

Every test starts from the suite's ``Context("Scheduling")`` NodePool: ``karpenter.sh/capacity-type
In [spot, on-demand, reserved]``; reserved capacity does not exist in karpweb yet, so here it is
``In [spot, on-demand]`` (``suite_pool``). Where upstream replaces the NodePool's requirements,
the test replaces them too.

Upstream's fake catalog, where a test relies on its shape, is a NodePool restricted to real types
with the same properties (``FAKE_CATALOG``): ``small-instance-type`` (2 cpu, 2Gi) is ``t3.small``
(2 vCPU, 2 GiB), ``default-instance-type`` (4 cpu) is ``c5.xlarge`` (4 vCPU), the GPU types are
``g4dn.xlarge`` (``nvidia.com/gpu``) and ``inf1.xlarge`` (``aws.amazon.com/neuron``), and
``arm-instance-type`` (arm64, 16 cpu, 128Gi) is ``r7g.4xlarge`` (arm64, 16 vCPU, 128 GiB).
In-flight nodes are the nodes an earlier ``provision`` round launched; a node is "initialized"
when it carries ``karpenter.sh/initialized=true``, as upstream's cluster state reads it.
"""

from __future__ import annotations

import copy
import random

from harness import (
    ARCH,
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    NODEPOOL,
    OS,
    ZONE,
    ZONE_1,
    ZONE_2,
    ZONE_3,
    Env,
    NodeView,
    daemon_set,
    ec2_node_class,
    node_pool,
    random_name,
    requirement,
    skew_values,
    spread,
    unschedulable_pod,
    unschedulable_pods,
)

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"
NOT_PORTED: dict[str, str] = {
    "Scheduling / In-Flight Nodes / Taints / should consider a tainted NotReady node as in-flight even if initialized": (
        "it passes upstream only because the scheduler's cluster state is not reconciled after the taints are "
        "added (on an initialized node StateNode.Taints() counts them): there is no behaviour to port; an "
        "uninitialized node's ephemeral taints are ignored, as the tests before it check"
    ),
}

INITIALIZED = "karpenter.sh/initialized"
REGISTERED = "karpenter.sh/registered"
INSTANCE_SIZE = "karpenter.k8s.aws/instance-size"
INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
NVIDIA_GPU = "nvidia.com/gpu"
NEURON = "aws.amazon.com/neuron"

SMALL_TYPE = "t3.small"  # small-instance-type: 2 vCPU, 2 GiB (1.93 cpu, 1.49 GB allocatable)
DEFAULT_TYPE = "c5.xlarge"  # default-instance-type: 4 vCPU (3.92 cpu allocatable)
GPU_TYPE = "g4dn.xlarge"  # gpu-vendor-instance-type: nvidia.com/gpu
GPU_B_TYPE = "inf1.xlarge"  # gpu-vendor-b-instance-type: aws.amazon.com/neuron
ARM_TYPE = "r7g.4xlarge"  # arm-instance-type: arm64, 16 vCPU, 128 GiB
FAKE_CATALOG = (SMALL_TYPE, DEFAULT_TYPE, GPU_TYPE, GPU_B_TYPE, ARM_TYPE)
# default-instance-type where upstream fills it by memory: exactly two 1.8G pods fit its 4Gi.
# c5n.large (5.25 GiB) has 4.51 GB allocatable: two 1.8G pods and two 400M pods, never three 1.8G.
MEMORY_DEFAULT_TYPE = "c5n.large"
MEMORY_CATALOG = (SMALL_TYPE, MEMORY_DEFAULT_TYPE, ARM_TYPE)
# fake.InstanceTypes(5) (fake-it-0..4, 1..5 cpu; only fake-it-4 is size "large" and has the
# "special" label): four m5 sizes and one GPU type, each of its own instance-size; the GPU type
# alone has karpenter.k8s.aws/instance-gpu-count (the "special" label).
FIVE_TYPES = ("m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge", "g4dn.8xlarge")
# The catalog's largest type has 896 vCPU and 32 TiB: these ask for more than any type has.
MORE_CPU_THAN_ANY_TYPE = "1024"
MORE_MEMORY_THAN_ANY_TYPE = "64Ti"


def suite_pool(*extra, **options):
    """The suite's NodePool (``Context("Scheduling")`` BeforeEach), with ``extra`` requirements."""
    return node_pool(requirements=[requirement(CAPACITY_TYPE, "In", "spot", "on-demand"), *extra], **options)


def types_in(*names: str):
    return requirement(INSTANCE_TYPE, "In", *names)


def cpu_millis(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def remaining_cpu(env: Env, name: str) -> int:
    """The node's allocatable cpu less what the pods bound to it request (upstream's Available())."""
    found = next(n for n in env.snapshot().nodes if n.name == name)
    return found.remaining().get("cpu", 0)


def daemonset_cpu(env: Env, name: str) -> int:
    """The cpu the DaemonSet pods bound to the node request (upstream's DaemonSetRequests())."""
    found = next(n for n in env.snapshot().nodes if n.name == name)
    return sum(p.requests.get("cpu", 0) for p in found.pods if p.owner is not None and p.owner.kind == "DaemonSet")


def edit_node(env: Env, view: NodeView, *, labels=None, taints=None, capacity=None) -> dict:
    """Re-apply the node with changed labels (added), taints (replaced) or capacity (replaced)."""
    manifest = copy.deepcopy(view.manifest)
    if labels:
        manifest["metadata"]["labels"].update(labels)
    if taints is not None:
        manifest["spec"]["taints"] = [dict(t) for t in taints]
    if capacity is not None:
        manifest["status"]["capacity"] = dict(capacity)
    env.apply(manifest)
    return manifest


def preferred(*terms: tuple[int, list]):
    """A pod spec's preferred node affinity: one term per (weight, matchExpressions)."""
    return {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": weight, "preference": {"matchExpressions": list(expressions)}}
                    for weight, expressions in terms
                ]
            }
        }
    }


# ============================================================== Preferential Fallback


def test_should_not_relax_the_final_term(env):
    """Scheduling / Preferential Fallback / Required / should not relax the final term

    default-instance-type is c5.xlarge."""
    pool = node_pool(requirements=[requirement(ZONE, "In", ZONE_1), types_in(DEFAULT_TYPE)])
    p = unschedulable_pod(node_requirements=[requirement(ZONE, "In", "invalid")])
    env.apply(pool)
    env.provision(p)
    env.not_scheduled(p)


def test_should_relax_multiple_terms(env):
    """Scheduling / Preferential Fallback / Required / should relax multiple terms"""
    p = unschedulable_pod(
        node_requirement_terms=[
            [requirement(ZONE, "In", "invalid")],
            [requirement(ZONE, "In", "invalid")],
            [requirement(ZONE, "In", ZONE_1)],
            [requirement(ZONE, "In", ZONE_2)],
        ]
    )
    env.apply(suite_pool())
    env.provision(p)
    assert env.scheduled(p).labels[ZONE] == ZONE_1


def test_should_relax_all_terms(env):
    """Scheduling / Preferential Fallback / Preferred / should relax all terms"""
    p = unschedulable_pod(
        spec=preferred(
            (1, [requirement(ZONE, "In", "invalid")]),
            (1, [requirement(INSTANCE_TYPE, "In", "invalid")]),
        )
    )
    env.apply(suite_pool())
    env.provision(p)
    env.scheduled(p)


def test_should_relax_to_use_lighter_weights(env):
    """Scheduling / Preferential Fallback / Preferred / should relax to use lighter weights

    The heaviest preference asks for an instance type named like a zone, which no type is."""
    pool = node_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)])
    p = unschedulable_pod(
        spec=preferred(
            (100, [requirement(INSTANCE_TYPE, "In", ZONE_3)]),
            (50, [requirement(ZONE, "In", ZONE_2)]),
            (1, [requirement(ZONE, "In", ZONE_1)]),
        )
    )
    env.apply(pool)
    env.provision(p)
    assert env.scheduled(p).labels[ZONE] == ZONE_2


def test_should_schedule_even_if_preference_is_conflicting_with_requirement(env):
    """Scheduling / Preferential Fallback / Preferred / should schedule even if preference is conflicting with requirement"""
    p = unschedulable_pod(
        spec={
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [requirement(ZONE, "NotIn", ZONE_3)]}}
                    ],
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [requirement(ZONE, "In", ZONE_3)]}]
                    },
                }
            }
        },
    )
    env.apply(suite_pool())
    env.provision(p)
    assert env.scheduled(p).labels[ZONE] == ZONE_3


def test_should_schedule_even_if_preference_requirements_are_conflicting(env):
    """Scheduling / Preferential Fallback / Preferred / should schedule even if preference requirements are conflicting

    Upstream's NodePreferences are one preferred term holding both requirements (so the term
    itself is contradictory); it is built as such here."""
    p = unschedulable_pod(
        spec=preferred((1, [requirement(ZONE, "In", "invalid"), requirement(ZONE, "NotIn", "invalid")])),
    )
    env.apply(suite_pool())
    env.provision(p)
    env.scheduled(p)


# ============================================================== Instance Type Compatibility


def test_should_not_schedule_if_requesting_more_resources_than_any_instance_type_has(env):
    """Scheduling / Instance Type Compatibility / should not schedule if requesting more resources than any instance type has

    Upstream asks 512 cpu of a catalog whose largest type has 16; the real catalog's largest has
    896 vCPU, so the pod asks 1024."""
    env.apply(suite_pool())
    p = unschedulable_pod(requests={"cpu": MORE_CPU_THAN_ANY_TYPE})
    env.provision(p)
    env.not_scheduled(p)


def test_should_launch_pods_with_different_archs_on_different_instances(env):
    """Scheduling / Instance Type Compatibility / should launch pods with different archs on different instances"""
    pool = node_pool(requirements=[requirement(ARCH, "In", "arm64", "amd64")])
    env.apply(pool)
    pods = [
        unschedulable_pod(node_selector={ARCH: "amd64"}),
        unschedulable_pod(node_selector={ARCH: "arm64"}),
    ]
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 2


def test_should_exclude_instance_types_that_are_not_supported_by_the_pod_constraints_node_affinity_instance_type(env):
    """Scheduling / Instance Type Compatibility / should exclude instance types that are not supported by the pod constraints (node affinity/instance type)

    arm-instance-type is r7g.4xlarge (arm64)."""
    env.apply(node_pool(requirements=[requirement(ARCH, "In", "amd64")]))
    p = unschedulable_pod(node_requirements=[types_in(ARM_TYPE)])
    env.provision(p)
    env.not_scheduled(p)


def test_should_exclude_instance_types_that_are_not_supported_by_the_pod_constraints_node_affinity_operating_system(
    env,
):
    """Scheduling / Instance Type Compatibility / should exclude instance types that are not supported by the pod constraints (node affinity/operating system)

    Upstream's only type that runs "ios" is arm64, which the NodePool excludes; no real type runs
    "ios" at all (an AL2023 EC2NodeClass launches linux only)."""
    env.apply(node_pool(requirements=[requirement(ARCH, "In", "amd64")]))
    p = unschedulable_pod(node_requirements=[requirement(OS, "In", "ios")])
    env.provision(p)
    env.not_scheduled(p)


def test_should_exclude_instance_types_that_are_not_supported_by_the_provider_constraints_arch(env):
    """Scheduling / Instance Type Compatibility / should exclude instance types that are not supported by the provider constraints (arch)

    Upstream's catalog is FAKE_CATALOG here (the NodePool is restricted to it): only r7g.4xlarge
    (arm64, 16 vCPU) has 14 cpu, and the NodePool allows amd64 only."""
    env.apply(node_pool(requirements=[requirement(ARCH, "In", "amd64"), types_in(*FAKE_CATALOG)]))
    p = unschedulable_pod(limits={"cpu": "14"})
    env.provision(p)
    env.not_scheduled(p)


def test_should_launch_pods_with_different_operating_systems_on_different_instances(env):
    """Scheduling / Instance Type Compatibility / should launch pods with different operating systems on different instances

    Upstream's fake types run linux and windows alike; a real EC2NodeClass launches one AMI
    family, so here the NodePool is two: the suite's over the AL2023 EC2NodeClass and its twin
    over a Windows2022 one."""
    windows = ec2_node_class("windows", amiSelectorTerms=[{"alias": "windows2022@latest"}])
    linux_pool = node_pool(requirements=[requirement(ARCH, "In", "arm64", "amd64")])
    windows_pool = node_pool(requirements=[requirement(ARCH, "In", "arm64", "amd64")], nodeclass="windows")
    env.apply(windows, linux_pool, windows_pool)
    pods = [
        unschedulable_pod(node_selector={OS: "linux"}),
        unschedulable_pod(node_selector={OS: "windows"}),
    ]
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 2


def test_should_launch_pods_with_different_instance_type_node_selectors_on_different_instances(env):
    """Scheduling / Instance Type Compatibility / should launch pods with different instance type node selectors on different instances

    small-instance-type is t3.small, default-instance-type c5.xlarge; the first pod selects with
    the deprecated beta.kubernetes.io/instance-type label, as upstream's."""
    env.apply(node_pool(requirements=[requirement(ARCH, "In", "arm64", "amd64")]))
    pods = [
        unschedulable_pod(node_selector={"beta.kubernetes.io/instance-type": SMALL_TYPE}),
        unschedulable_pod(node_selector={INSTANCE_TYPE: DEFAULT_TYPE}),
    ]
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 2


def test_should_launch_pods_with_different_zone_selectors_on_different_instances(env):
    """Scheduling / Instance Type Compatibility / should launch pods with different zone selectors on different instances"""
    env.apply(node_pool(requirements=[requirement(ARCH, "In", "arm64", "amd64")]))
    pods = [
        unschedulable_pod(node_selector={ZONE: ZONE_1}),
        unschedulable_pod(node_selector={ZONE: ZONE_2}),
    ]
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 2


def test_should_launch_pods_with_resources_that_aren_t_on_any_single_instance_type_on_different_instances(env):
    """Scheduling / Instance Type Compatibility / should launch pods with resources that aren't on any single instance type on different instances

    The two fake GPUs are nvidia.com/gpu and aws.amazon.com/neuron: no real type has both."""
    env.apply(suite_pool())
    pods = [
        unschedulable_pod(limits={NVIDIA_GPU: "1"}),
        unschedulable_pod(limits={NEURON: "1"}),
    ]
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 2


def test_should_fail_to_schedule_a_pod_with_resources_requests_that_aren_t_on_a_single_instance_type(env):
    """Scheduling / Instance Type Compatibility / should fail to schedule a pod with resources requests that aren't on a single instance type

    The two fake GPUs are nvidia.com/gpu and aws.amazon.com/neuron: no real type has both."""
    env.apply(suite_pool())
    p = unschedulable_pod(limits={NVIDIA_GPU: "1", NEURON: "1"})
    env.provision(p)
    env.not_scheduled(p)


def test_should_filter_instance_types_that_match_labels(env):
    """Scheduling / Instance Type Compatibility / Provider Specific Labels / should filter instance types that match labels

    fake.InstanceTypes(5) is FIVE_TYPES and the ``size`` label karpenter.k8s.aws/instance-size:
    "large" (only the biggest, fake-it-4) is 8xlarge (g4dn.8xlarge), "small" (the cheapest,
    fake-it-0) is large (m5.large)."""
    env.apply(suite_pool(types_in(*FIVE_TYPES)))
    pods = [
        unschedulable_pod(node_selector={INSTANCE_SIZE: "8xlarge"}),
        unschedulable_pod(node_selector={INSTANCE_SIZE: "large"}),
    ]
    env.provision(pods)
    assert env.scheduled(pods[0]).labels[INSTANCE_TYPE] == "g4dn.8xlarge"
    assert env.scheduled(pods[1]).labels[INSTANCE_TYPE] == "m5.large"


def test_should_not_schedule_with_incompatible_labels(env):
    """Scheduling / Instance Type Compatibility / Provider Specific Labels / should not schedule with incompatible labels

    As the test before: fake-it-0 is m5.large (size large), fake-it-4 g4dn.8xlarge (size 8xlarge)."""
    env.apply(suite_pool(types_in(*FIVE_TYPES)))
    pods = [
        unschedulable_pod(node_selector={INSTANCE_SIZE: "8xlarge", INSTANCE_TYPE: "m5.large"}),
        unschedulable_pod(node_selector={INSTANCE_SIZE: "large", INSTANCE_TYPE: "g4dn.8xlarge"}),
    ]
    env.provision(pods)
    env.not_scheduled(pods[0])
    env.not_scheduled(pods[1])


def test_should_schedule_optional_labels(env):
    """Scheduling / Instance Type Compatibility / Provider Specific Labels / should schedule optional labels

    The ``special`` label, which only fake-it-4 has, is karpenter.k8s.aws/instance-gpu-count,
    which of FIVE_TYPES only g4dn.8xlarge has."""
    env.apply(suite_pool(types_in(*FIVE_TYPES)))
    p = unschedulable_pod(node_requirements=[requirement(INSTANCE_GPU_COUNT, "Exists")])
    env.provision(p)
    node = env.scheduled(p)
    assert INSTANCE_GPU_COUNT in node.labels
    assert node.labels[INSTANCE_TYPE] == "g4dn.8xlarge"


def test_should_schedule_without_optional_labels_if_disallowed(env):
    """Scheduling / Instance Type Compatibility / Provider Specific Labels / should schedule without optional labels if disallowed

    As the test before; the NodePool is a plain test.NodePool() restricted to FIVE_TYPES."""
    env.apply(node_pool(requirements=[types_in(*FIVE_TYPES)]))
    p = unschedulable_pod(node_requirements=[requirement(INSTANCE_GPU_COUNT, "DoesNotExist")])
    env.provision(p)
    assert INSTANCE_GPU_COUNT not in env.scheduled(p).labels


# ============================================================== Binpacking


def test_should_schedule_a_small_pod_on_the_smallest_instance(env):
    """Scheduling / Binpacking / should schedule a small pod on the smallest instance

    Upstream's catalog is FAKE_CATALOG; small-instance-type is t3.small."""
    env.apply(suite_pool(types_in(*FAKE_CATALOG)))
    p = unschedulable_pod(requests={"memory": "100M"})
    env.provision(p)
    assert env.scheduled(p).labels[INSTANCE_TYPE] == SMALL_TYPE


def test_should_schedule_a_small_pod_on_the_smallest_possible_instance_type(env):
    """Scheduling / Binpacking / should schedule a small pod on the smallest possible instance type

    2000M fills most of upstream's small-instance-type (2Gi) but fits it; t3.small's 1.49 GB
    allocatable does not hold it, so small-instance-type is t3.medium (2 vCPU, 4 GiB) here, with
    t3.small added to FAKE_CATALOG as a type too small."""
    env.apply(suite_pool(types_in("t3.medium", *FAKE_CATALOG)))
    p = unschedulable_pod(requests={"memory": "2000M"})
    env.provision(p)
    assert env.scheduled(p).labels[INSTANCE_TYPE] == "t3.medium"


def test_should_take_pod_runtime_class_into_consideration(env):
    """Scheduling / Binpacking / should take pod runtime class into consideration

    The RuntimeClass's 2 cpu of pod overhead is in spec.overhead, as the RuntimeClass admission
    plugin sets it. Upstream's catalog is FAKE_CATALOG: 3 cpu does not fit t3.small (1.93 cpu)
    and the pod without overhead would; default-instance-type is c5.xlarge."""
    env.apply(suite_pool(types_in(*FAKE_CATALOG)))
    p = unschedulable_pod(requests={"cpu": "1"}, overhead={"cpu": "2"}, spec={"runtimeClassName": "my-runtime-class"})
    env.provision(p)
    assert env.scheduled(p).labels[INSTANCE_TYPE] == DEFAULT_TYPE


def test_should_schedule_multiple_small_pods_on_the_smallest_possible_instance_type(env):
    """Scheduling / Binpacking / should schedule multiple small pods on the smallest possible instance type

    Upstream's catalog is FAKE_CATALOG; small-instance-type is t3.small (11 pods), which holds all five."""
    pods = unschedulable_pods(5, requests={"memory": "10M"})
    env.apply(suite_pool(types_in(*FAKE_CATALOG)))
    env.provision(pods)
    names = set()
    for p in pods:
        node = env.scheduled(p)
        names.add(node.name)
        assert node.labels[INSTANCE_TYPE] == SMALL_TYPE
    assert len(names) == 1


def test_should_create_new_nodes_when_a_node_is_at_capacity(env):
    """Scheduling / Binpacking / should create new nodes when a node is at capacity

    Upstream's default-instance-type holds exactly two 1.8G pods; here MEMORY_CATALOG, whose
    default-instance-type c5n.large (4.51 GB allocatable) holds two and t3.small none."""
    env.apply(suite_pool(types_in(*MEMORY_CATALOG)))
    pods = unschedulable_pods(40, node_selector={ARCH: "amd64"}, requests={"memory": "1.8G"})
    env.provision(pods)
    names = set()
    for p in pods:
        node = env.scheduled(p)
        names.add(node.name)
        assert node.labels[INSTANCE_TYPE] == MEMORY_DEFAULT_TYPE
    assert len(names) == 20


def test_should_pack_small_and_large_pods_together(env):
    """Scheduling / Binpacking / should pack small and large pods together

    MEMORY_CATALOG as the test before: two 1.8G pods per c5n.large leave room for the 400M pods."""
    large = unschedulable_pods(40, node_selector={ARCH: "amd64"}, requests={"memory": "1.8G"})
    small = unschedulable_pods(20, node_selector={ARCH: "amd64"}, requests={"memory": "400M"})
    env.apply(suite_pool(types_in(*MEMORY_CATALOG)))
    env.provision(large + small)
    names = set()
    for p in large + small:
        node = env.scheduled(p)
        names.add(node.name)
        assert node.labels[INSTANCE_TYPE] == MEMORY_DEFAULT_TYPE
    assert len(names) == 20


def test_should_pack_nodes_tightly(env):
    """Scheduling / Binpacking / should pack nodes tightly

    Upstream's fake.InstanceTypes(5) go up to 5 cpu and its first pod asks 4.5; no real type has 5
    or 6 vCPU, so the catalog is c5.large, c5.xlarge and c5.2xlarge (7.91 cpu allocatable) and the
    first pod asks 7.5 cpu: nearly all of the largest type, with no room for the 1 cpu pod."""
    env.apply(suite_pool(types_in("c5.large", "c5.xlarge", "c5.2xlarge")))
    pods = [unschedulable_pod(requests={"cpu": "7.5"}), unschedulable_pod(requests={"cpu": "1"})]
    env.provision(pods)
    nodes = [env.scheduled(p) for p in pods]
    assert len(nodes) == 2
    assert nodes[0].labels[INSTANCE_TYPE] != nodes[1].labels[INSTANCE_TYPE]


def test_should_handle_zero_quantity_resource_requests(env):
    """Scheduling / Binpacking / should handle zero-quantity resource requests"""
    env.apply(suite_pool())
    p = unschedulable_pod(requests={"foo.com/weird-resources": "0"}, limits={"foo.com/weird-resources": "0"})
    env.provision(p)
    env.scheduled(p)


def test_should_not_schedule_pods_that_exceed_every_instance_type_s_capacity(env):
    """Scheduling / Binpacking / should not schedule pods that exceed every instance type's capacity

    Upstream asks 2Ti of a catalog whose largest type has 128Gi; the real catalog's largest has
    32 TiB, so the pod asks 64Ti."""
    env.apply(suite_pool())
    p = unschedulable_pod(requests={"memory": MORE_MEMORY_THAN_ANY_TYPE})
    env.provision(p)
    env.not_scheduled(p)


def test_should_create_new_nodes_when_a_node_is_at_capacity_due_to_pod_limits_per_node():
    """Scheduling / Binpacking / should create new nodes when a node is at capacity due to pod limits per node

    Upstream's types take 5 pods each: here the EC2NodeClass sets kubelet.maxPods 5, over
    FAKE_CATALOG, whose cheapest (small-instance-type) is t3.small."""
    env = Env(nodeclass=ec2_node_class(kubelet={"maxPods": 5}))
    env.apply(suite_pool(types_in(*FAKE_CATALOG)))
    pods = unschedulable_pods(25, node_selector={ARCH: "amd64"}, requests={"memory": "1m", "cpu": "1m"})
    env.provision(pods)
    names = set()
    for p in pods:
        node = env.scheduled(p)
        names.add(node.name)
        assert node.labels[INSTANCE_TYPE] == SMALL_TYPE
    assert len(names) == 5


def test_should_take_into_account_initcontainer_resource_requests_when_binpacking(env):
    """Scheduling / Binpacking / should take into account initContainer resource requests when binpacking

    Upstream's catalog is FAKE_CATALOG: the init container's 2 cpu do not fit t3.small (1.93 cpu),
    the app container's 1 cpu would; default-instance-type is c5.xlarge."""
    env.apply(suite_pool(types_in(*FAKE_CATALOG)))
    p = unschedulable_pod(
        requests={"memory": "1Gi", "cpu": "1"},
        init_containers=[{"resources": {"requests": {"memory": "1Gi", "cpu": "2"}}}],
    )
    env.provision(p)
    assert env.scheduled(p).labels[INSTANCE_TYPE] == DEFAULT_TYPE


def test_should_not_schedule_pods_when_initcontainer_resource_requests_are_greater_than_available_instance_types(env):
    """Scheduling / Binpacking / should not schedule pods when initContainer resource requests are greater than available instance types

    Upstream's init container asks 1Ti of a catalog whose largest type has 128Gi; the real
    catalog's largest has 32 TiB, so it asks 64Ti."""
    env.apply(suite_pool())
    p = unschedulable_pod(
        requests={"memory": "1Gi", "cpu": "1"},
        init_containers=[{"resources": {"requests": {"memory": MORE_MEMORY_THAN_ANY_TYPE, "cpu": "2"}}}],
    )
    env.provision(p)
    env.not_scheduled(p)


def test_should_select_for_valid_instance_types_regardless_of_price(env):
    """Scheduling / Binpacking / should select for valid instance types, regardless of price

    Upstream's "small" (1 cpu, $2), "medium" (2 cpu, $3) and "large" (4 cpu, $1) are m8azn.medium
    (1 vCPU, spot $0.0362), m8idb.large (2 vCPU, spot $0.0772) and t3.xlarge (4 vCPU, spot $0.02):
    the largest is the cheapest, the middle one the dearest."""
    small, medium, large = "m8azn.medium", "m8idb.large", "t3.xlarge"
    env.apply(suite_pool(types_in(medium, small, large)))
    p = unschedulable_pod(limits={"cpu": "1m", "memory": "1Mi"})
    result = env.provision(p)
    node = env.scheduled(p)
    assert node.labels[INSTANCE_TYPE] == large
    assert len(result.claims) == 1
    assert set(result.claims[0].requirements[INSTANCE_TYPE].values) == {small, medium, large}


# ============================================================== In-Flight Nodes


def test_should_not_launch_a_second_node_if_there_is_an_in_flight_node_that_can_support_the_pod(env):
    """Scheduling / In-Flight Nodes / should not launch a second node if there is an in-flight node that can support the pod"""
    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(initial)
    node1 = env.scheduled(initial)
    second = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(second)
    assert env.scheduled(second).name == node1.name


def test_should_not_launch_a_second_node_if_there_is_an_in_flight_node_that_can_support_the_pod_node_selectors(env):
    """Scheduling / In-Flight Nodes / should not launch a second node if there is an in-flight node that can support the pod (node selectors)"""
    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "10m"}, node_requirements=[requirement(ZONE, "In", ZONE_2)])
    env.provision(initial)
    node1 = env.scheduled(initial)

    second = unschedulable_pod(limits={"cpu": "10m"}, node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)])
    env.provision(second)
    assert env.scheduled(second).name == node1.name

    third = unschedulable_pod(limits={"cpu": "10m"}, node_requirements=[requirement(ZONE, "In", ZONE_1, ZONE_3)])
    env.provision(third)
    assert env.scheduled(third).name != node1.name


def test_should_launch_a_second_node_if_a_pod_won_t_fit_on_the_existingnodes_node(env):
    """Scheduling / In-Flight Nodes / should launch a second node if a pod won't fit on the existingNodes node

    The first node is a 2 vCPU type (1.93 cpu allocatable), as upstream's 2 cpu node."""
    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "1001m"})
    env.provision(initial)
    node1 = env.scheduled(initial)
    assert node1.allocatable["cpu"] == "1930m"

    second = unschedulable_pod(limits={"cpu": "1"})
    env.provision(second)
    assert env.scheduled(second).name != node1.name


def test_should_launch_a_second_node_if_a_pod_isn_t_compatible_with_the_existingnodes_node_node_selector(env):
    """Scheduling / In-Flight Nodes / should launch a second node if a pod isn't compatible with the existingNodes node (node selector)

    The first node is amd64 (the cheapest type for the pod, t3.nano), as upstream's default types."""
    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(initial)
    node1 = env.scheduled(initial)
    assert node1.labels[ARCH] == "amd64"

    second = unschedulable_pod(node_selector={ARCH: "arm64"})
    env.provision(second)
    assert env.scheduled(second).name != node1.name


def test_should_launch_a_second_node_if_an_in_flight_node_is_terminating(env):
    """Scheduling / In-Flight Nodes / should launch a second node if an in-flight node is terminating

    Upstream deletes the node and its NodeClaim (finalizers removed): here the node is deleted."""
    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(initial)
    node1 = env.scheduled(initial)
    env.delete(node1.manifest)

    second = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(second)
    assert env.scheduled(second).name != node1.name


def test_should_balance_pods_across_zones_with_in_flight_nodes(env):
    """Scheduling / In-Flight Nodes / Topology / should balance pods across zones with in-flight nodes"""
    labels = {"foo": "bar"}
    topology = [spread(ZONE, labels=labels, max_skew=1)]
    env.apply(suite_pool())
    env.provision(unschedulable_pods(4, labels=labels, topology_spread_constraints=topology))
    assert skew_values(env.skew(topology[0])) == [1, 1, 2]

    first_round_nodes = len(env.nodes())
    env.provision(unschedulable_pods(5, labels=labels, topology_spread_constraints=topology))
    assert skew_values(env.skew(topology[0])) == [3, 3, 3]
    assert len(env.nodes()) == first_round_nodes


def test_should_balance_pods_across_hostnames_with_in_flight_nodes(env):
    """Scheduling / In-Flight Nodes / Topology / should balance pods across hostnames with in-flight nodes"""
    labels = {"foo": "bar"}
    topology = [spread("kubernetes.io/hostname", labels=labels, max_skew=1)]
    env.apply(suite_pool())
    env.provision(unschedulable_pods(4, labels=labels, topology_spread_constraints=topology))
    assert skew_values(env.skew(topology[0])) == [1, 1, 1, 1]

    env.provision(unschedulable_pods(5, labels=labels, topology_spread_constraints=topology))
    assert skew_values(env.skew(topology[0])) == [1] * 9


def test_should_assume_pod_will_schedule_to_a_tainted_node_with_no_taints(env):
    """Scheduling / In-Flight Nodes / Taints / should assume pod will schedule to a tainted node with no taints"""
    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "8"})
    env.provision(initial)
    node1 = env.scheduled(initial)

    env.delete(initial)
    edit_node(env, node1, taints=[])

    second = unschedulable_pod()
    env.provision(second)
    assert env.scheduled(second).name == node1.name


def test_should_assume_pod_will_schedule_to_a_node_with_ephemeral_taint_node_kubernetes_io_not_ready_noexecute_when_the_node_is_uninitialized(
    env,
):
    """Scheduling / In-Flight Nodes / Taints / should assume pod will schedule to a node with ephemeral taint node.kubernetes.io/not-ready:NoExecute when the node is uninitialized"""
    env.apply(suite_pool())
    initial = unschedulable_pod()
    env.provision(initial)
    node1 = env.scheduled(initial)
    env.delete(initial)
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
    manifest = edit_node(env, node1, taints=[not_ready])

    second = unschedulable_pod()
    env.provision(second)
    assert env.scheduled(second).name == node1.name
    env.delete(second)

    manifest = copy.deepcopy(manifest)
    manifest["metadata"]["labels"][INITIALIZED] = "true"
    env.apply(manifest)
    third = unschedulable_pod()
    env.provision(third)
    assert env.scheduled(third).name != node1.name


def test_should_not_assume_pod_will_schedule_to_a_tainted_node(env):
    """Scheduling / In-Flight Nodes / Taints / should not assume pod will schedule to a tainted node"""
    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "8"})
    env.provision(initial)
    node1 = env.scheduled(initial)

    env.delete(initial)
    taint = {"key": "foo.com/taint", "value": "tainted", "effect": "NoSchedule"}
    edit_node(env, node1, labels={INITIALIZED: "true"}, taints=[*node1.taints, taint])

    second = unschedulable_pod()
    env.provision(second)
    assert env.scheduled(second).name != node1.name


def test_should_assume_pod_will_schedule_to_a_tainted_node_with_a_custom_startup_taint(env):
    """Scheduling / In-Flight Nodes / Taints / should assume pod will schedule to a tainted node with a custom startup taint

    Upstream's node carries the startup taint and one more its test node builder adds; the
    harness's node carries the startup taint only."""
    taint = {"key": "foo.com/taint", "value": "tainted", "effect": "NoSchedule"}
    env.apply(suite_pool(startup_taints=[taint]))
    initial = unschedulable_pod(limits={"cpu": "8"})
    env.provision(initial)
    node1 = env.scheduled(initial)

    env.delete(initial)
    assert taint in node1.taints

    second = unschedulable_pod()
    env.provision(second)
    assert env.scheduled(second).name == node1.name


def test_should_not_assume_pod_will_schedule_to_a_node_with_startup_taints_after_initialization(env):
    """Scheduling / In-Flight Nodes / Taints / should not assume pod will schedule to a node with startup taints after initialization"""
    startup = {"key": "ignore-me", "value": "nothing-to-see-here", "effect": "NoSchedule"}
    env.apply(suite_pool(startup_taints=[startup]))
    initial = unschedulable_pod()
    env.provision(initial)
    node1 = env.scheduled(initial)

    env.delete(initial)
    edit_node(env, node1, labels={INITIALIZED: "true"}, taints=[startup], capacity={"pods": "10"})

    second = unschedulable_pod()
    env.provision(second)
    assert env.scheduled(second).name != node1.name


def test_should_track_daemonset_usage_separately_so_we_know_how_many_ds_resources_are_remaining_to_be_scheduled(env):
    """Scheduling / In-Flight Nodes / Daemonsets / should track daemonset usage separately so we know how many DS resources are remaining to be scheduled

    Upstream's node is its 16 cpu type (15.9 allocatable) and the second pod asks 14.9: all that is
    left once the DaemonSet pod is bound. Here the node is the cheapest type for 8 cpu and the
    DaemonSet's 1, and the second pod asks its allocatable cpu less the DaemonSet pod's 1 cpu."""
    ds = daemon_set(requests={"cpu": "1", "memory": "1Gi"})
    env.apply(suite_pool(), ds)

    initial = unschedulable_pod(limits={"cpu": "8"})
    env.provision(initial)
    node1 = env.scheduled(initial)
    allocatable = cpu_millis(node1.allocatable["cpu"])

    ds_pod = unschedulable_pod(requests={"cpu": "1", "memory": "2Gi"}, owner=("DaemonSet", ds["metadata"]["name"]))
    env.delete(initial)
    env.apply(ds_pod)
    assert daemonset_cpu(env, node1.name) == 0
    assert remaining_cpu(env, node1.name) == allocatable
    env.bind(ds_pod, node1)
    assert daemonset_cpu(env, node1.name) == 1000
    assert remaining_cpu(env, node1.name) == allocatable - 1000

    second = unschedulable_pod(limits={"cpu": f"{allocatable - 1000}m"})
    env.provision(second)
    assert env.scheduled(second).name == node1.name


def test_should_handle_unexpected_daemonset_pods_binding_to_the_node(env):
    """Scheduling / In-Flight Nodes / Daemonsets / should handle unexpected daemonset pods binding to the node

    Upstream's node has 15.9 cpu allocatable, 14.9 once the DaemonSet pod is bound, and the second
    pod asks 15.5: here the node's allocatable cpu less 400m."""
    ds1 = daemon_set(node_selector={"my-node-label": "value"}, requests={"cpu": "1", "memory": "1Gi"})
    ds2 = daemon_set(requests={"cpu": "1m"})
    env.apply(suite_pool(), ds1, ds2)

    initial = unschedulable_pod(limits={"cpu": "8"})
    env.provision(initial)
    node1 = env.scheduled(initial)
    allocatable = cpu_millis(node1.allocatable["cpu"])
    edit_node(env, node1, labels={"my-node-label": "value"})

    ds_pod = unschedulable_pod(
        node_selector={"my-node-label": "value"},
        requests={"cpu": "1", "memory": "2Gi"},
        owner=("DaemonSet", ds1["metadata"]["name"]),
    )
    env.delete(initial)
    env.apply(ds_pod)
    assert daemonset_cpu(env, node1.name) == 0
    assert remaining_cpu(env, node1.name) == allocatable
    env.bind(ds_pod, node1)
    assert daemonset_cpu(env, node1.name) == 1000
    assert remaining_cpu(env, node1.name) == allocatable - 1000

    second = unschedulable_pod(limits={"cpu": f"{allocatable - 400}m"})
    env.provision(second)
    assert env.scheduled(second).name != node1.name


def test_should_properly_handle_daemonset_resources_with_node_affinity_for_karpenter_sh_initialized_and_karpenter_sh_registered(
    env,
):
    """Scheduling / In-Flight Nodes / Daemonsets / Should properly handle DaemonSet resources with Node Affinity for `karpenter.sh/initialized` and `karpenter.sh/registered`

    Upstream tells both DaemonSets counted from the node it launched: its 16 cpu type, where the
    pod's 2 cpu and one DaemonSet's 1 would fit its 4 cpu type. Here the claim's requests (pod and
    DaemonSet overhead) are the pod's 2 cpu and both DaemonSets' 1, and the node's allocatable
    holds them all."""
    ds1 = daemon_set(node_requirements=[requirement(INITIALIZED, "In", "true")], requests={"cpu": "1"})
    env.apply(suite_pool(), ds1)
    ds2 = daemon_set(node_requirements=[requirement(REGISTERED, "In", "true")], requests={"cpu": "1"})
    env.apply(ds2)

    initial = unschedulable_pod(limits={"cpu": "2"})
    result = env.provision(initial)
    node1 = env.scheduled(initial)

    assert len(result.claims) == 1
    claim = result.claims[0]
    assert claim.requests["cpu"] == 4000
    allocatable = cpu_millis(node1.allocatable["cpu"])
    assert allocatable >= 4000
    assert REGISTERED not in claim.requirements
    assert INITIALIZED not in claim.requirements
    assert REGISTERED not in node1.labels
    assert INITIALIZED not in node1.labels

    ds1_pod = unschedulable_pod(requests={"cpu": "1"}, owner=("DaemonSet", ds1["metadata"]["name"]))
    env.apply(ds1_pod)
    ds2_pod = unschedulable_pod(requests={"cpu": "1"}, owner=("DaemonSet", ds2["metadata"]["name"]))
    env.apply(ds2_pod)
    env.delete(initial)
    assert daemonset_cpu(env, node1.name) == 0
    assert remaining_cpu(env, node1.name) == allocatable

    env.bind(ds1_pod, node1)
    env.bind(ds2_pod, node1)
    assert daemonset_cpu(env, node1.name) == 2000
    assert remaining_cpu(env, node1.name) == allocatable - 2000


def test_should_pack_in_flight_nodes_before_launching_new_nodes(env):
    """Scheduling / In-Flight Nodes / should pack in-flight nodes before launching new nodes

    Upstream's only type "medium" holds four 1 cpu pods with a bit to spare; here the only type is
    c5.2xlarge (7.91 cpu allocatable), which holds seven with 910m to spare. Upstream's batch sizes
    are rand.Intn(10); here a seeded generator's."""
    env.apply(suite_pool(types_in("c5.2xlarge")))
    rng = random.Random(2011)
    for _ in range(10):
        batch = unschedulable_pods(rng.randrange(10), limits={"cpu": "1"})
        env.provision(batch)
        for p in batch:
            env.scheduled(p)
    free = [n for n in env.snapshot().nodes if n.remaining().get("cpu", 0) >= 1000]
    assert len(free) <= 1


def test_should_not_launch_a_second_node_if_there_is_an_in_flight_node_that_can_support_the_pod_2011(env):
    """Scheduling / In-Flight Nodes / should not launch a second node if there is an in-flight node that can support the pod (#2011)"""
    env.apply(suite_pool())
    p = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(p, bind=False)
    assert len(env.nodes()) == 1

    env.apply(p)
    env.provision(p, bind=False)
    assert len(env.nodes()) == 1


def test_should_order_initialized_nodes_for_scheduling_uninitialized_nodes_when_all_other_nodes_are_inflight(env):
    """Scheduling / In-Flight Nodes / should order initialized nodes for scheduling uninitialized nodes when all other nodes are inflight

    Upstream's 99 in-flight NodeClaims have no Node yet; karpweb reads no NodeClaims, so they are
    nodes of the NodePool without karpenter.sh/registered and karpenter.sh/initialized (launched,
    not joined). The one initialized node (upstream's rand.Intn(100)) is the 58th. Each is an
    m5.large."""
    from provisioning.cluster.simulated import node_manifest

    pool = suite_pool()
    env.apply(pool)
    name = pool["metadata"]["name"]
    pool_input = next(p for p in env.snapshot().nodepools if p.name == name)
    it = next(t for t in pool_input.instance_types if t.name == "m5.large")
    elem = 57
    initialized = None
    for i in range(100):
        node_name = random_name("node")
        labels = {"karpenter.k8s.aws/ec2nodeclass": "default"}
        if i == elem:
            labels |= {REGISTERED: "true", INITIALIZED: "true"}
        manifest = node_manifest(
            node_name,
            it,
            zone=ZONE_1,
            capacity_type="on-demand",
            nodepool=name,
            labels=labels,
            provider_id=f"aws:///{ZONE_1}/i-{node_name}",
        )
        env.apply(manifest)
        if i == elem:
            initialized = node_name
    assert all(n.labels[NODEPOOL] == name for n in env.nodes())

    p = unschedulable_pod()
    env.provision(p)
    assert env.scheduled(p).name == initialized


def test_should_schedule_pods_with_the_same_host_port_to_different_nodes(env):
    """Scheduling / In-Flight Nodes / should schedule pods with the same host port to different nodes"""
    env.apply(suite_pool())
    pods = [unschedulable_pod(host_ports=[8080]), unschedulable_pod(host_ports=[8080])]
    env.provision(pods)
    assert env.scheduled(pods[0]).name != env.scheduled(pods[1]).name
