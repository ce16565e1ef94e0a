"""Upstream's provisioner suite (``pkg/controllers/provisioning/suite_test.go``), ported.

The suite drives the Go provisioner end to end; its Its about what gets planned (nodes
launched, pods placed or left pending, NodePool limits, DaemonSet overhead, node labels and
taints, the requirements and requests of the NodeClaims, relaxation, weighted and static
NodePools, minValues) run here against THE solver and the real catalog.

Mappings used throughout (besides README.md's table):

* "4 cpu / 4Gi vs 2 cpu / 2Gi" (``default-instance-type`` vs ``small-instance-type``), which
  the DaemonSet tests use to tell whether a daemon's overhead was counted: the pod (1 cpu,
  1Gi) alone fits a 2-vCPU type, pod and daemon (3 cpu, 3Gi) need a 4-vCPU type; the node's
  ``karpenter.k8s.aws/instance-cpu`` says which (no real 4-vCPU type has 4 GiB, so the vCPU
  count is what is compared).
* the fake label ``size`` (``small``: at most 4 cpu or 8Gi; ``large``: more of both):
  ``karpenter.k8s.aws/instance-cpu`` ``Lt 5`` / ``Gt 4``.
* ``fake.com/vendor-a`` / ``vendor-b``: ``nvidia.com/gpu`` / ``aws.amazon.com/neuron``.
* the custom instance types the MinValuesPolicy tests install (``instance-type-1..3``):
  ``m5.large``, ``m5.xlarge``, ``m5.2xlarge``, those the test leaves out marked unavailable in
  every offering (the ICE cache); offerings in two zones only: an EC2NodeClass with subnets in
  two zones.
"""

from __future__ import annotations

from harness import (
    ARCH,
    CAPACITY_TYPE,
    HOSTNAME,
    INSTANCE_TYPE,
    NODEPOOL,
    OS,
    ZONE,
    ZONE_1,
    ZONE_2,
    ZONE_3,
    Env,
    NodeView,
    affinity_term,
    daemon_set,
    ec2_node_class,
    key_of,
    node,
    node_pool,
    requirement,
    spread,
    unschedulable_pod,
    unschedulable_pods,
)

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/provisioning/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

_BATCHER = (
    "timing of the Go provisioner's batcher (idle and max durations on a fake clock); karpweb's batch "
    "window is tested in tests/test_provision.py"
)
_GRACE = (
    "terminationGracePeriod is copied onto the NodeClaim spec by the controller that creates NodeClaims "
    "(provisioning.services.provision), not chosen by the solver; the global default is a Go operator option"
)
_HEALTHY = (
    "cluster state's podHealthyNodePoolScheduledTime bookkeeping for NodeRegistrationHealthy NodePools "
    "(scheduling metrics of the Go controller)"
)
_VOLUMES = "volume topology: karpweb does not read PersistentVolumeClaims, PersistentVolumes or StorageClasses"

NOT_PORTED: dict[str, str] = {
    "Provisioning / Batcher / should provision single pod if no other pod is received within the batch idle duration": (
        _BATCHER
    ),
    "Provisioning / Batcher / should not extend the timeout if we receive the same pod within the batch idle duration": (
        _BATCHER
    ),
    "Provisioning / Batcher / should extend the timeout if we receive a new pod within the batch idle duration": (
        _BATCHER
    ),
    "Provisioning / should expect nodeclaim terminationGracePeriod to be the global value when the nodepool "
    "terminationGracePeriod is not set": _GRACE,
    "Provisioning / should expect nodeclaim terminationGracePeriod to be the nil when the nodepool "
    "terminationGracePeriod and global terminationGracePeriod is not set": _GRACE,
    "Provisioning / should respect terminationGracePeriod value set on the nodePool over global "
    "terminationGracePeriod": _GRACE,
    "Provisioning / should mark podHealthyNodePoolScheduledTime if it is scheduled against a nodePool with "
    "NodeRegistrationHealthy=true": _HEALTHY,
    "Provisioning / should not mark podHealthyNodePoolScheduledTime if it is scheduled against a nodePool with "
    "NodeRegistrationHealthy=False": _HEALTHY,
    "Provisioning / should not use a different NodePool hash on the NodeClaim if the NodePool changes during "
    "scheduling": (
        "the NodePool hash annotation across the Go provisioner's Schedule/CreateNodeClaims split; karpweb's "
        "drift hashes are stamped by provisioning.services.provision, not the solver"
    ),
    "Provisioning / NodeClaim Creation / should create a nodeclaim request restricting instance types on "
    "operating system": (
        "in the real catalog an instance type's kubernetes.io/os comes from the EC2NodeClass's AMI family, the same "
        "for all of its types: no OS narrows one EC2NodeClass's types as the fake's 'ios' (only arm-instance-type) does"
    ),
    "Provisioning / NodeClaim Creation / should create a nodeclaim request with the correct owner reference": (
        "the NodeClaim object's ownerReferences (NodePool UID) are written by provisioning.services.provision; "
        "the solver's ClaimPlan only names its NodePool"
    ),
    "Provisioning / NodeClaim Creation / should create a nodeclaim request propagating the nodeClass reference": (
        "spec.nodeClassRef is copied from the NodePool template onto the NodeClaim by provisioning.services.provision "
        "(karpweb has one NodeClass kind, EC2NodeClass); the solver's ClaimPlan carries no nodeClassRef"
    ),
    "Provisioning / Volume Topology Requirements / should not schedule if invalid pvc": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule with an empty storage class if the pvc is bound": (
        _VOLUMES
    ),
    "Provisioning / Volume Topology Requirements / should not schedule with an empty storage class if the pvc is "
    "not bound": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule with a missing storage class if the pvc is bound": (
        _VOLUMES
    ),
    "Provisioning / Volume Topology Requirements / should not schedule with a missing storage class if the pvc is "
    "not bound": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule valid pods when a pod with an invalid pvc is "
    "encountered (pvc)": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule valid pods when a pod with an invalid pvc is "
    "encountered (storage class)": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule valid pods when a pod with an invalid pvc is "
    "encountered (volume name)": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule to storage class zones if volume does not exist": (
        _VOLUMES
    ),
    "Provisioning / Volume Topology Requirements / should schedule to storage class zones if volume does not exist "
    "(ephemeral volume)": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should not schedule if storage class zones are incompatible": (
        _VOLUMES
    ),
    "Provisioning / Volume Topology Requirements / should not schedule if storage class zones are incompatible "
    "(ephemeral volume)": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule to volume zones if volume already bound": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should schedule to volume zones if volume already bound "
    "(ephemeral volume)": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should ignore hostname affinity scheduling when using local path "
    "volumes / when using local volumes": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should ignore hostname affinity scheduling when using local path "
    "volumes / when using hostpath volumes": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should ignore hostname affinity scheduling when using local path "
    "volumes (ephemeral volume) / when using local volumes": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should ignore hostname affinity scheduling when using local path "
    "volumes (ephemeral volume) / when using hostpath volumes": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should not ignore hostname affinity when using non-local path "
    "volumes": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should not schedule if volume zones are incompatible": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should not schedule if volume zones are incompatible (ephemeral "
    "volume)": _VOLUMES,
    "Provisioning / Volume Topology Requirements / should not relax an added volume topology zone node-selector "
    "away": _VOLUMES,
}

INSTANCE_CPU = "karpenter.k8s.aws/instance-cpu"
INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
NVIDIA_GPU = "nvidia.com/gpu"
NEURON = "aws.amazon.com/neuron"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"
# upstream's fake label ``size``: small (cpu <= 4 or memory <= 8Gi), large (more of both)
SIZE_SMALL = requirement(INSTANCE_CPU, "Lt", 5)
SIZE_LARGE = requirement(INSTANCE_CPU, "Gt", 4)
# upstream's default-instance-type, where a test names it
DEFAULT_INSTANCE_TYPE = "m5.large"
# upstream's instance-type-1..3 of the MinValuesPolicy tests (cheapest first)
TYPE_1, TYPE_2, TYPE_3 = "m5.large", "m5.xlarge", "m5.2xlarge"
# quantities no real instance type holds (upstream's 10000Gi exceeds the fake's 128Gi; the
# catalog has 32 TiB types)
TOO_MUCH_CPU, TOO_MUCH_MEMORY = "10000", "100000Gi"


def vcpus(view: NodeView) -> int:
    """The vCPUs of the node's instance type (upstream reads the fake type's capacity)."""
    return int(view.labels[INSTANCE_CPU])


def requests(cpu: str, memory: str | None = None) -> dict[str, str]:
    out = {"cpu": cpu}
    if memory is not None:
        out["memory"] = memory
    return out


def expect_claim_requirements(claim, *expected: tuple[str, str, list[str]]) -> None:
    """``ExpectNodeClaimRequirements``: each (key, operator, values) is on the claim, with the
    same set of values."""
    for key, operator, values in expected:
        found = claim.requirements.get(key)
        assert found is not None, f"the claim has no requirement on {key}: {claim.requirements}"
        assert found.operator == operator, f"{found} is not {operator}"
        assert set(found.values) == set(values), f"{found}: expected {sorted(values)}"


def cheapest_types(env: Env, nodepool: str, count: int, predicate=lambda it: True) -> set[str]:
    """The ``count`` cheapest instance types the NodePool's EC2NodeClass offers that satisfy
    ``predicate`` (by their cheapest available offering), as upstream truncates a NodeClaim's
    instance types to the 60 cheapest."""
    pool = next(p for p in env.snapshot().nodepools if p.name == nodepool)
    priced = []
    for it in pool.instance_types:
        prices = [o.price for o in it.offerings if o.available and o.price is not None]
        if prices and predicate(it):
            priced.append((min(prices), it.name))
    return {name for _, name in sorted(priced)[:count]}


def deleting(manifest: dict, finalizer: str = "karpenter.sh/termination") -> dict:
    """The object with a deletionTimestamp, held by a finalizer (``ExpectDeletionTimestampSet``)."""
    manifest["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    manifest["metadata"].setdefault("finalizers", []).append(finalizer)
    return manifest


def node_affinity(required_terms=None, preferred=None) -> dict:
    """A raw ``affinity.nodeAffinity`` (terms as lists of requirements; preferred as (weight, requirements))."""
    affinity: dict = {}
    if required_terms is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": list(term)} for term in required_terms]
        }
    if preferred is not None:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": weight, "preference": {"matchExpressions": list(term)}} for weight, term in preferred
        ]
    return {"affinity": {"nodeAffinity": affinity}}


def container(cpu: str, memory: str, sidecar: bool = False) -> dict:
    """An init container requesting (and limited to) ``cpu`` and ``memory``; a native sidecar when ``sidecar``."""
    out: dict = {"resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


# ------------------------------------------------------------------ the suite's top-level Its


def test_should_provision_nodes(env):
    """Provisioning / should provision nodes

    The scheduling-decision duration metric upstream also checks is a Go metric, not ported."""
    env.apply(node_pool())
    p = unschedulable_pod()
    env.provision(p)
    assert len(env.nodes()) == 1
    env.scheduled(p)


def test_should_provision_nodes_for_multiple_pods(env):
    """Provisioning / Should provision nodes for multiple pods

    The scheduling-decision duration metric upstream also checks is a Go metric, not ported."""
    env.apply(node_pool())
    pods = unschedulable_pods(100)
    env.provision(pods)
    assert len(env.nodes()) != 0
    for p in pods:
        env.scheduled(p)


def test_should_ignore_nodepools_that_are_deleting(env):
    """Provisioning / should ignore NodePools that are deleting"""
    env.apply(node_pool(deletion_timestamp="2024-01-01T00:00:00Z"))
    p = unschedulable_pod()
    env.provision(p)
    assert len(env.nodes()) == 0
    env.not_scheduled(p)


def test_should_mark_pod_as_unschedulable_if_there_are_no_valid_nodepools(env):
    """Provisioning / should mark pod as unschedulable if there are no valid nodepools

    Upstream's "a scheduling decision was made, none succeeded" (cluster state's timestamps) is
    here the plan's reason for the pod; the metric is not ported."""
    env.apply(node_pool(deletion_timestamp="2024-01-01T00:00:00Z"))
    p = unschedulable_pod()
    result = env.provision(p)
    env.not_scheduled(p)
    assert key_of(p) in result.unschedulable


def test_should_provision_nodes_for_pods_with_supported_node_selectors(env):
    """Provisioning / should provision nodes for pods with supported node selectors

    default-instance-type: m5.large; test-zone-1: ZONE_1."""
    np = node_pool()
    schedulable = [
        unschedulable_pod(node_selector={NODEPOOL: np["metadata"]["name"]}),
        unschedulable_pod(node_selector={ZONE: ZONE_1}),
        unschedulable_pod(node_selector={INSTANCE_TYPE: DEFAULT_INSTANCE_TYPE}),
        unschedulable_pod(node_selector={ARCH: "arm64"}),
        unschedulable_pod(node_selector={OS: "linux"}),
    ]
    unschedulable = [
        unschedulable_pod(node_selector={NODEPOOL: "unknown"}),
        unschedulable_pod(node_selector={ZONE: "unknown"}),
        unschedulable_pod(node_selector={INSTANCE_TYPE: "unknown"}),
        unschedulable_pod(node_selector={ARCH: "unknown"}),
        unschedulable_pod(node_selector={OS: "unknown"}),
        unschedulable_pod(node_selector={CAPACITY_TYPE: "unknown"}),
        unschedulable_pod(node_selector={"foo": "bar"}),
    ]
    env.apply(np)
    env.provision(schedulable)
    for p in schedulable:
        env.scheduled(p)
    env.provision(unschedulable)
    for p in unschedulable:
        env.not_scheduled(p)


def test_should_provision_nodes_for_pods_with_supported_node_affinities(env):
    """Provisioning / should provision nodes for pods with supported node affinities

    default-instance-type: m5.large; test-zone-1: ZONE_1."""
    np = node_pool()

    def with_requirement(key: str, value: str) -> dict:
        return unschedulable_pod(node_requirements=[requirement(key, "In", value)])

    schedulable = [
        with_requirement(NODEPOOL, np["metadata"]["name"]),
        with_requirement(ZONE, ZONE_1),
        with_requirement(INSTANCE_TYPE, DEFAULT_INSTANCE_TYPE),
        with_requirement(ARCH, "arm64"),
        with_requirement(OS, "linux"),
    ]
    unschedulable = [
        with_requirement(NODEPOOL, "unknown"),
        with_requirement(ZONE, "unknown"),
        with_requirement(INSTANCE_TYPE, "unknown"),
        with_requirement(ARCH, "unknown"),
        with_requirement(OS, "unknown"),
        with_requirement(CAPACITY_TYPE, "unknown"),
        with_requirement("foo", "bar"),
    ]
    env.apply(np)
    env.provision(schedulable)
    for p in schedulable:
        env.scheduled(p)
    env.provision(unschedulable)
    for p in unschedulable:
        env.not_scheduled(p)


def test_should_provision_nodes_for_accelerators(env):
    """Provisioning / should provision nodes for accelerators

    fake.com/vendor-a: nvidia.com/gpu; fake.com/vendor-b: aws.amazon.com/neuron."""
    env.apply(node_pool())
    pods = [
        unschedulable_pod(limits={NVIDIA_GPU: "1"}),
        unschedulable_pod(limits={NEURON: "1"}),
    ]
    env.provision(pods)
    for p in pods:
        env.scheduled(p)


def test_should_provision_multiple_nodes_when_maxpods_is_set(env):
    """Provisioning / should provision multiple nodes when maxPods is set

    single-pod-instance-type (pods: 1): the EC2NodeClass's ``kubelet.maxPods: 1``, which gives
    every instance type room for one pod."""
    env.apply(ec2_node_class(kubelet={"maxPods": 1}))
    env.apply(node_pool())
    pods = [unschedulable_pod(), unschedulable_pod(), unschedulable_pod()]
    env.provision(pods)
    assert len(env.nodes()) == 3
    for p in pods:
        env.scheduled(p)


def test_should_schedule_all_pods_on_one_inflight_node_when_node_is_in_deleting_state(env):
    """Provisioning / should schedule all pods on one inflight node when node is in deleting state

    its[0] (default-instance-type): m5.large, the NodePool's only type (upstream's fake types all
    hold the five pods on one node; the cheapest real ones hold four). The node gets m5.large's
    allocatable (upstream's test.Node has none), so that only its deletion keeps the new pods off
    it; its three pods move with the two new ones to one new node, as upstream reschedules them."""
    np = node_pool(requirements=[requirement(INSTANCE_TYPE, "In", DEFAULT_INSTANCE_TYPE)])
    old = node(
        labels={NODEPOOL: np["metadata"]["name"], INSTANCE_TYPE: DEFAULT_INSTANCE_TYPE},
        allocatable={"cpu": "1930m", "memory": "7134Mi", "pods": "29", "ephemeral-storage": "17Gi"},
    )
    old["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    env.apply(old, np)
    for _ in range(3):
        p = unschedulable_pod()
        env.apply(p)
        env.bind(p, old)
    env.apply(deleting(old))
    result = env.provision(unschedulable_pod(), unschedulable_pod(), bind=False)
    assert len(env.nodes()) == 2
    for target in result.bindings.values():
        assert target != old["metadata"]["name"]


def _sidecar_nodepool() -> dict:
    """The NodePool of the sidecar tests: one family (c6i: 2, 4, 8, 16, 32... vCPUs), so that the
    effective requests (10.9 cpu, 4.9Gi) pick one size (16 vCPUs), as upstream's three added
    types (10/4Gi, 11/5Gi, 12/6Gi) let them pick 11/5Gi."""
    return node_pool(requirements=[requirement(INSTANCE_FAMILY, "In", "c6i")])


def _expect_requests(claim, cpu_millis: int, memory: str) -> None:
    gib = float(memory.removesuffix("Gi"))
    assert claim.requests["cpu"] == cpu_millis
    assert abs(claim.requests["memory"] - gib * 2**30) <= 10


def test_should_schedule_based_on_the_max_resource_requests_of_containers_and_initcontainers_with_sidecar_containers_when_initcontainer_comes_first(
    env,
):
    """Provisioning / should schedule based on the max resource requests of containers and initContainers with sidecar containers when initcontainer comes first

    Upstream adds types of 10/4Gi, 11/5Gi and 12/6Gi and expects 11/5Gi (the effective requests
    are 10.9 cpu, 4.9Gi). Here: c6i, whose smallest size holding 10.9 cpu has 16 vCPUs, and the
    claim's requests are those effective requests."""
    env.apply(_sidecar_nodepool())
    p = unschedulable_pod(
        requests=requests("6", "2Gi"),
        limits=requests("6", "2Gi"),
        init_containers=[container("10", "4Gi"), container("4.9", "2.9Gi", sidecar=True)],
    )
    env.provision(p)
    view = env.scheduled(p)
    assert vcpus(view) == 16
    _expect_requests(view.claim, 10900, "4.9Gi")


def test_should_schedule_based_on_the_max_resource_requests_of_containers_and_initcontainers_with_sidecar_containers_when_sidecar_container_comes_first_and_init_container_resources_are_smaller_than_container_resources(
    env,
):
    """Provisioning / should schedule based on the max resource requests of containers and initContainers with sidecar containers when sidecar container comes first and init container resources are smaller than container resources

    As the test before: c6i, 16 vCPUs, effective requests 10.9 cpu, 4.9Gi."""
    env.apply(_sidecar_nodepool())
    p = unschedulable_pod(
        requests=requests("6", "2Gi"),
        limits=requests("6", "2Gi"),
        init_containers=[container("4.9", "2.9Gi", sidecar=True), container("5", "1Gi")],
    )
    env.provision(p)
    view = env.scheduled(p)
    assert vcpus(view) == 16
    _expect_requests(view.claim, 10900, "4.9Gi")


def test_should_schedule_based_on_the_max_resource_requests_of_containers_and_initcontainers_with_sidecar_containers_when_sidecar_container_comes_first_and_init_container_resources_are_bigger_than_container_resources(
    env,
):
    """Provisioning / should schedule based on the max resource requests of containers and initContainers with sidecar containers when sidecar container comes first and init container resources are bigger than container resources

    As the test before: c6i, 16 vCPUs, effective requests 10.9 cpu, 4.9Gi."""
    env.apply(_sidecar_nodepool())
    p = unschedulable_pod(
        requests=requests("5", "1Gi"),
        limits=requests("5", "1Gi"),
        init_containers=[container("4.9", "2.9Gi", sidecar=True), container("6", "2Gi")],
    )
    env.provision(p)
    view = env.scheduled(p)
    assert vcpus(view) == 16
    _expect_requests(view.claim, 10900, "4.9Gi")


def test_should_schedule_based_on_the_pod_level_resources_requests(env):
    """Provisioning / should schedule based on the pod level resources requests

    Upstream expects its 10/4Gi type (pod-level requests 9.9 cpu, 3.9Gi). Here: c6i, whose
    smallest size holding 9.9 cpu has 16 vCPUs, and the claim's requests are 9.9 cpu, 3.9Gi."""
    env.apply(_sidecar_nodepool())
    p = unschedulable_pod(
        requests=requests("5", "1Gi"),
        limits=requests("5", "1Gi"),
        init_containers=[container("6", "2Gi"), container("4", "2Gi", sidecar=True)],
        spec={"resources": {"requests": requests("9.9", "3.9Gi"), "limits": requests("10", "4Gi")}},
    )
    env.provision(p)
    view = env.scheduled(p)
    assert vcpus(view) == 16
    _expect_requests(view.claim, 9900, "3.9Gi")


# ------------------------------------------------------------------ Resource Limits


def test_should_not_schedule_when_limits_are_exceeded(env):
    """Provisioning / Resource Limits / should not schedule when limits are exceeded

    The in-flight NodeClaim of 100 cpu (cluster.UpdateNodeClaim) is a node of the NodePool with
    that capacity and nothing allocatable yet."""
    np = node_pool(limits={"cpu": "20"})
    env.apply(np)
    env.apply(node(labels={NODEPOOL: np["metadata"]["name"]}, capacity={"cpu": "100"}))
    p = unschedulable_pod()
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_if_limits_would_be_met(env):
    """Provisioning / Resource Limits / should schedule if limits would be met

    A 2-vCPU type holds the 1.75 cpu pod within the 2 cpu limit."""
    env.apply(node_pool(limits={"cpu": "2"}))
    p = unschedulable_pod(requests=requests("1.75"))
    env.provision(p)
    env.scheduled(p)


def test_should_partially_schedule_if_limits_would_be_exceeded(env):
    """Provisioning / Resource Limits / should partially schedule if limits would be exceeded"""
    env.apply(node_pool(limits={"cpu": "3"}))
    labels = {"app": "foo"}
    options = dict(
        labels=labels,
        pod_anti_requirements=[affinity_term(HOSTNAME, labels=labels)],
        requests=requests("1.5"),
    )
    pods = [unschedulable_pod(**options), unschedulable_pod(**options)]
    env.provision(pods)
    scheduled = sum(1 for p in pods if env.is_scheduled(p))
    assert scheduled == 1
    assert len(pods) - scheduled == 1


def test_should_not_schedule_if_limits_would_be_exceeded(env):
    """Provisioning / Resource Limits / should not schedule if limits would be exceeded"""
    env.apply(node_pool(limits={"cpu": "2"}))
    p = unschedulable_pod(requests=requests("2.1"))
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_if_limits_would_be_exceeded_gpu(env):
    """Provisioning / Resource Limits / should not schedule if limits would be exceeded (GPU)

    fake.com/vendor-a: nvidia.com/gpu; every real type holds more than one pod, so a pods
    limit of 1 leaves no type, as upstream's."""
    env.apply(node_pool(limits={"pods": "1"}))
    p = unschedulable_pod(limits={NVIDIA_GPU: "1"})
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_to_a_nodepool_after_a_scheduling_round_if_limits_would_be_exceeded(env):
    """Provisioning / Resource Limits / should not schedule to a nodepool after a scheduling round if limits would be exceeded"""
    env.apply(node_pool(limits={"cpu": "2"}))
    p = unschedulable_pod(requests=requests("1.75"))
    env.provision(p)
    env.scheduled(p)
    p = unschedulable_pod(requests=requests("1.75"))
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_if_limits_would_be_exceeded_node(env):
    """Provisioning / Resource Limits / should not schedule if limits would be exceeded (node)"""
    env.apply(node_pool(limits={"nodes": "2"}))
    labels = {"app": "foo"}
    options = dict(
        labels=labels,
        pod_anti_requirements=[affinity_term(HOSTNAME, labels=labels)],
        requests=requests("1.5"),
    )
    p = unschedulable_pod(**options)
    env.provision(p)
    env.scheduled(p)
    p = unschedulable_pod(**options)
    env.provision(p)
    env.scheduled(p)
    p = unschedulable_pod(**options)
    env.provision(p)
    env.not_scheduled(p)


# ------------------------------------------------------------------ Daemonsets

POD_1CPU = requests("1", "1Gi")
DAEMON_2CPU = requests("2", "2Gi")


def test_should_account_for_daemonsets(env):
    """Provisioning / Daemonsets / should account for daemonsets

    4 cpu/4Gi (daemon counted) vs 2 cpu/2Gi: 4 vCPUs vs 2 (see the module docstring)."""
    env.apply(node_pool(), daemon_set(requests=DAEMON_2CPU))
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_account_for_daemonset_hostports(env):
    """Provisioning / Daemonsets / should account for daemonset hostports"""
    env.apply(node_pool(), daemon_set(requests=DAEMON_2CPU, host_ports=[8080]))
    p = unschedulable_pod(requests=POD_1CPU, host_ports=[8080])
    env.provision(p)
    env.not_scheduled(p)
    assert len(env.nodes()) == 0


def test_should_account_for_daemonsets_with_startup_taint(env):
    """Provisioning / Daemonsets / should account for daemonsets (with startup taint)

    4 cpu/4Gi: 4 vCPUs."""
    np = node_pool(startup_taints=[{"key": "foo.com/taint", "effect": "NoSchedule"}])
    env.apply(np, daemon_set(requests=DAEMON_2CPU))
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_not_schedule_if_daemonset_overhead_is_too_large(env):
    """Provisioning / Daemonsets / should not schedule if daemonset overhead is too large

    10000 cpu / 10000Gi: 10000 cpu / 100000Gi (the catalog has 32 TiB types)."""
    env.apply(node_pool(), daemon_set(requests=requests(TOO_MUCH_CPU, TOO_MUCH_MEMORY)))
    p = unschedulable_pod()
    env.provision(p)
    env.not_scheduled(p)


def test_should_account_for_overhead_using_daemonset_pod_spec_instead_of_daemonset_spec(env):
    """Provisioning / Daemonsets / should account for overhead using daemonset pod spec instead of daemonset spec

    4 cpu/4Gi: 4 vCPUs (the DaemonSet's spec, 4 cpu, would need 8)."""
    np = node_pool()
    ds = daemon_set(requests=requests("4", "4Gi"))
    env.apply(np, ds)
    ds_pod = unschedulable_pod(owner=("DaemonSet", ds["metadata"]["name"]), requests=DAEMON_2CPU)
    env.apply(np, ds_pod)
    p = unschedulable_pod(requests=POD_1CPU, node_selector={NODEPOOL: np["metadata"]["name"]})
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_not_schedule_if_resource_requests_are_not_defined_and_limits_requests_are_too_large(env):
    """Provisioning / Daemonsets / should not schedule if resource requests are not defined and limits (requests) are too large

    10000Gi: 100000Gi (the catalog has 32 TiB types)."""
    env.apply(
        node_pool(),
        daemon_set(limits=requests(TOO_MUCH_CPU, TOO_MUCH_MEMORY), requests=requests("1")),
    )
    p = unschedulable_pod()
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_based_on_the_max_resource_requests_of_containers_and_initcontainers(env):
    """Provisioning / Daemonsets / should schedule based on the max resource requests of containers and initContainers

    4 cpu/4Gi: 4 vCPUs (the init container's 3 cpu and 3Gi are the daemon's requests)."""
    init = {"resources": {"limits": requests(TOO_MUCH_CPU, "3Gi"), "requests": requests("3")}}
    env.apply(
        node_pool(),
        daemon_set(limits=requests(TOO_MUCH_CPU, "1Gi"), requests=requests("1"), init_containers=[init]),
    )
    p = unschedulable_pod()
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_not_schedule_if_combined_max_resources_are_too_large_for_any_node(env):
    """Provisioning / Daemonsets / should not schedule if combined max resources are too large for any node

    10000Gi: 100000Gi (the catalog has 32 TiB types)."""
    init = {"resources": {"limits": requests(TOO_MUCH_CPU, TOO_MUCH_MEMORY), "requests": requests("1")}}
    env.apply(
        node_pool(),
        daemon_set(limits=requests(TOO_MUCH_CPU, "1Gi"), requests=requests("1"), init_containers=[init]),
    )
    p = unschedulable_pod()
    env.provision(p)
    env.not_scheduled(p)


def test_should_not_schedule_if_initcontainer_resources_are_too_large(env):
    """Provisioning / Daemonsets / should not schedule if initContainer resources are too large

    10000Gi: 100000Gi (the catalog has 32 TiB types)."""
    init = {"resources": {"requests": requests(TOO_MUCH_CPU, TOO_MUCH_MEMORY)}}
    env.apply(node_pool(), daemon_set(init_containers=[init]))
    p = unschedulable_pod()
    env.provision(p)
    env.not_scheduled(p)


def test_should_be_able_to_schedule_pods_if_resource_requests_and_limits_are_not_defined(env):
    """Provisioning / Daemonsets / should be able to schedule pods if resource requests and limits are not defined"""
    env.apply(node_pool(), daemon_set())
    p = unschedulable_pod()
    env.provision(p)
    env.scheduled(p)


def test_should_ignore_daemonsets_without_matching_tolerations(env):
    """Provisioning / Daemonsets / should ignore daemonsets without matching tolerations

    2 cpu/2Gi (daemon not counted): 2 vCPUs."""
    env.apply(
        node_pool(taints=[{"key": "foo", "value": "bar", "effect": "NoSchedule"}]),
        daemon_set(requests=DAEMON_2CPU),
    )
    p = unschedulable_pod(tolerations=[{"operator": "Exists"}], requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 2


def test_should_ignore_daemonsets_with_an_invalid_selector(env):
    """Provisioning / Daemonsets / should ignore daemonsets with an invalid selector

    2 cpu/2Gi: 2 vCPUs."""
    env.apply(node_pool(), daemon_set(node_selector={"node": "invalid"}, requests=DAEMON_2CPU))
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 2


def test_should_ignore_daemonsets_when_no_instance_types_meet_the_daemonset_requirements(env):
    """Provisioning / Daemonsets / should ignore daemonsets when no instance types meet the daemonset requirements

    2 cpu/2Gi: 2 vCPUs."""
    env.apply(
        node_pool(),
        daemon_set(
            node_requirements=[requirement(INSTANCE_TYPE, "In", "non-existent-instance-type")],
            requests=DAEMON_2CPU,
        ),
    )
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 2


def test_should_account_for_daemonsets_with_a_custom_label_nodeselector_that_matches_the_nodepool(env):
    """Provisioning / Daemonsets / should account for daemonsets with a custom label nodeSelector that matches the nodepool

    4 cpu/4Gi: 4 vCPUs."""
    env.apply(
        node_pool(labels={"purpose": "monitoring"}),
        daemon_set(node_selector={"purpose": "monitoring"}, requests=DAEMON_2CPU),
    )
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_filter_out_daemonsets_based_on_instance_type_requirements(env):
    """Provisioning / Daemonsets / should filter out daemonsets based on instance type requirements

    size small / large: instance-cpu Lt 5 / Gt 4; 4 cpu/4Gi: 4 vCPUs (the small daemon counted,
    the large one, 10 cpu, not)."""
    env.apply(
        node_pool(),
        daemon_set(node_requirements=[SIZE_SMALL], requests=requests("1")),
        daemon_set(node_requirements=[SIZE_LARGE], requests=requests("10")),
    )
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_account_daemonsets_with_notin_operator_and_unspecified_key(env):
    """Provisioning / Daemonsets / should account daemonsets with NotIn operator and unspecified key

    test-zone-2: ZONE_2; 4 cpu/4Gi: 4 vCPUs."""
    env.apply(
        node_pool(),
        daemon_set(node_requirements=[requirement("foo", "NotIn", "bar")], requests=DAEMON_2CPU),
    )
    p = unschedulable_pod(node_requirements=[requirement(ZONE, "In", ZONE_2)], requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_remove_daemonset_node_hostname_affinity_when_considering_daemonset_schedulability(env):
    """Provisioning / Daemonsets / should remove daemonset node hostname affinity when considering daemonset schedulability

    4 cpu/4Gi: 4 vCPUs (the daemon pod's 2 cpu; the DaemonSet's spec, 4 cpu, would need 8)."""
    np = node_pool(labels={"foo": "bar"})
    ds = daemon_set(node_requirements=[requirement("foo", "In", "bar")], requests=requests("4", "4Gi"))
    env.apply(np, ds)
    ds_pod = unschedulable_pod(
        owner=("DaemonSet", ds["metadata"]["name"]),
        node_requirements=[requirement("metadata.name", "In", "node-name")],
        requests=DAEMON_2CPU,
    )
    env.apply(ds_pod)
    p = unschedulable_pod(requests=POD_1CPU, node_selector={"foo": "bar"})
    env.apply(np, p)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_consider_a_daemonset_schedulable_with_multiple_node_affinity_terms(env):
    """Provisioning / Daemonsets / should consider a daemonset schedulable with multiple node affinity terms

    4 cpu/4Gi: 4 vCPUs."""
    np = node_pool(labels={"foo": "bar"})
    ds = daemon_set(requests=DAEMON_2CPU)
    ds["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [requirement("foo", "In", "voo")]},
                    {"matchExpressions": [requirement("foo", "In", "bar")]},
                ]
            }
        }
    }
    env.apply(ds, np)
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_consider_a_daemonset_schedulable_with_an_incompatible_node_affinity_preference(env):
    """Provisioning / Daemonsets / should consider a daemonset schedulable with an incompatible node affinity preference

    4 cpu/4Gi: 4 vCPUs."""
    env.apply(
        node_pool(),
        daemon_set(node_preferences=[requirement("node", "In", "invalid")], requests=DAEMON_2CPU),
    )
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_consider_a_daemonset_schedulable_with_a_prefernoschedule_taint(env):
    """Provisioning / Daemonsets / should consider a daemonset schedulable with a PreferNoSchedule taint

    4 cpu/4Gi: 4 vCPUs."""
    env.apply(
        node_pool(taints=[{"key": "test", "effect": "PreferNoSchedule"}]),
        daemon_set(requests=DAEMON_2CPU),
    )
    p = unschedulable_pod(requests=POD_1CPU)
    env.provision(p)
    assert vcpus(env.scheduled(p)) == 4


def test_should_not_account_for_daemonset_hostports_when_daemonset_would_not_schedule_on_selected_node(env):
    """Provisioning / Daemonsets / should not account for daemonset hostports when daemonset would not schedule on selected node

    size small / large: instance-cpu Lt 5 / Gt 4; 4 cpu/4Gi: 4 vCPUs (the small daemon's 2 cpu
    counted; the large one's port 8080 does not clash)."""
    env.apply(
        node_pool(),
        daemon_set(requests=requests("4", "4Gi"), node_requirements=[SIZE_LARGE], host_ports=[8080]),
    )
    env.apply(
        node_pool(),
        daemon_set(requests=DAEMON_2CPU, node_requirements=[SIZE_SMALL], host_ports=[8081]),
    )
    p = unschedulable_pod(requests=POD_1CPU, node_requirements=[SIZE_SMALL], host_ports=[8080])
    env.provision(p)
    view = env.scheduled(p)
    assert vcpus(view) <= 4  # size small
    assert vcpus(view) == 4


# ------------------------------------------------------------------ Annotations


def test_should_annotate_nodes(env):
    """Provisioning / Annotations / should annotate nodes

    The node's annotations are its NodeClaim's: asserted on the claim the node was launched for."""
    env.apply(node_pool(annotations={DO_NOT_DISRUPT: "true"}))
    p = unschedulable_pod()
    env.provision(p)
    view = env.scheduled(p)
    assert getattr(view.claim, "annotations", {}).get(DO_NOT_DISRUPT) == "true"


# ------------------------------------------------------------------ Labels


def test_should_label_nodes(env):
    """Provisioning / Labels / should label nodes"""
    np = node_pool(
        labels={"test-key-1": "test-value-1"},
        requirements=[
            requirement("test-key-2", "In", "test-value-2"),
            requirement("test-key-3", "NotIn", "test-value-3"),
            requirement("test-key-4", "Lt", "4"),
            requirement("test-key-5", "Gt", "5"),
            requirement("test-key-6", "Exists"),
            requirement("test-key-7", "DoesNotExist"),
        ],
    )
    env.apply(np)
    p = unschedulable_pod()
    env.provision(p)
    labels = env.scheduled(p).labels
    assert labels.get(NODEPOOL) == np["metadata"]["name"]
    assert labels.get("test-key-1") == "test-value-1"
    assert labels.get("test-key-2") == "test-value-2"
    assert "test-key-3" in labels and labels["test-key-3"] != "test-value-3"
    assert "test-key-4" in labels and labels["test-key-4"] != "test-value-4"
    assert "test-key-5" in labels and labels["test-key-5"] != "test-value-5"
    assert "test-key-6" in labels
    assert "test-key-7" not in labels


def test_should_label_nodes_with_labels_in_the_kubernetes_domains(env):
    """Provisioning / Labels / should label nodes with labels in the kubernetes domains"""
    for domain in ("kubernetes.io", "k8s.io"):
        env.apply(node_pool(labels={f"{domain}/test": "test-value"}))
        p = unschedulable_pod(node_requirements=[requirement(f"{domain}/test", "In", "test-value")])
        env.provision(p)
        assert env.scheduled(p).labels.get(f"{domain}/test") == "test-value"


def test_should_label_nodes_with_labels_in_the_subdomain_from_kubernetes_domains(env):
    """Provisioning / Labels / should label nodes with labels in the subdomain from kubernetes domains"""
    for domain in ("kubernetes.io", "k8s.io"):
        key = f"subdomain.{domain}/test"
        env.apply(node_pool(labels={key: "test-value"}))
        p = unschedulable_pod(node_requirements=[requirement(key, "In", "test-value")])
        env.provision(p)
        assert env.scheduled(p).labels.get(key) == "test-value"


def test_should_not_label_nodes_with_well_known_labels_from_requirements(env):
    """Provisioning / Labels / should not label nodes with well-known labels from requirements"""
    windows_build = "node.kubernetes.io/windows-build"
    env.apply(
        node_pool(
            requirements=[
                requirement("foo", "In", "bar"),
                requirement(windows_build, "NotIn", "test-value"),
            ]
        )
    )
    p = unschedulable_pod()
    env.provision(p)
    labels = env.scheduled(p).labels
    assert labels.get(windows_build) != "test-value"
    assert labels.get("foo") == "bar"


# ------------------------------------------------------------------ Taints


def test_should_schedule_pods_that_tolerate_taints(env):
    """Provisioning / Taints / should schedule pods that tolerate taints"""
    env.apply(node_pool(taints=[{"key": NVIDIA_GPU, "value": "true", "effect": "NoSchedule"}]))
    pods = [
        unschedulable_pod(
            tolerations=[{"key": NVIDIA_GPU, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
        ),
        unschedulable_pod(tolerations=[{"key": NVIDIA_GPU, "operator": "Exists", "effect": "NoSchedule"}]),
        unschedulable_pod(tolerations=[{"key": NVIDIA_GPU, "operator": "Exists"}]),
        unschedulable_pod(tolerations=[{"operator": "Exists"}]),
    ]
    env.provision(pods)
    for p in pods:
        env.scheduled(p)


# ------------------------------------------------------------------ NodeClaim Creation


def test_should_create_a_nodeclaim_request_with_expected_requirements(env):
    """Provisioning / NodeClaim Creation / should create a nodeclaim request with expected requirements

    Upstream's instance types are all the fake's (fewer than its cap of 60); here: the 60
    cheapest of the catalog, all of which hold the pod (requests nothing)."""
    np = node_pool()
    env.apply(np)
    name = np["metadata"]["name"]
    p = unschedulable_pod()
    result = env.provision(p)
    assert len(result.claims) == 1
    expect_claim_requirements(
        result.claims[0],
        (INSTANCE_TYPE, "In", sorted(cheapest_types(env, name, 60))),
        (NODEPOOL, "In", [name]),
    )
    env.scheduled(p)


def test_should_create_a_nodeclaim_request_with_additional_expected_requirements(env):
    """Provisioning / NodeClaim Creation / should create a nodeclaim request with additional expected requirements

    The instance types: the catalog's 60 cheapest, as the test before."""
    np = node_pool(
        requirements=[
            requirement("custom-requirement-key", "In", "value"),
            requirement("custom-requirement-key2", "In", "value"),
        ]
    )
    env.apply(np)
    name = np["metadata"]["name"]
    p = unschedulable_pod()
    result = env.provision(p)
    assert len(result.claims) == 1
    expect_claim_requirements(
        result.claims[0],
        (INSTANCE_TYPE, "In", sorted(cheapest_types(env, name, 60))),
        (NODEPOOL, "In", [name]),
        ("custom-requirement-key", "In", ["value"]),
        ("custom-requirement-key2", "In", ["value"]),
    )
    env.scheduled(p)


def test_should_create_a_nodeclaim_request_restricting_instance_types_on_architecture(env):
    """Provisioning / NodeClaim Creation / should create a nodeclaim request restricting instance types on architecture

    arm-instance-type (the fake's only arm64 type): the 60 cheapest Graviton types."""
    np = node_pool(requirements=[requirement(ARCH, "In", "arm64")])
    env.apply(np)
    p = unschedulable_pod()
    result = env.provision(p)
    assert len(result.claims) == 1
    arm = cheapest_types(env, np["metadata"]["name"], 60, lambda it: it.labels.get(ARCH) == "arm64")
    expect_claim_requirements(
        result.claims[0],
        (ARCH, "In", ["arm64"]),
        (INSTANCE_TYPE, "In", sorted(arm)),
    )
    env.scheduled(p)


def test_should_create_a_nodeclaim_request_restricting_instance_types_based_on_pod_resource_requests(env):
    """Provisioning / NodeClaim Creation / should create a nodeclaim request restricting instance types based on pod resource requests

    gpu-vendor-instance-type (the fake's only fake.com/vendor-a type): every type with
    nvidia.com/gpu (fewer than 60)."""
    np = node_pool()
    env.apply(np)
    p = unschedulable_pod(requests={NVIDIA_GPU: "1"}, limits={NVIDIA_GPU: "1"})
    result = env.provision(p)
    assert len(result.claims) == 1
    gpu = cheapest_types(env, np["metadata"]["name"], 60, lambda it: it.capacity.get(NVIDIA_GPU, 0) > 0)
    assert len(gpu) < 60
    expect_claim_requirements(result.claims[0], (INSTANCE_TYPE, "In", sorted(gpu)))
    env.scheduled(p)


def test_should_create_a_nodeclaim_with_resource_requests(env):
    """Provisioning / NodeClaim Creation / should create a nodeclaim with resource requests

    fake.com/vendor-a: nvidia.com/gpu."""
    env.apply(node_pool())
    p = unschedulable_pod(
        requests={"cpu": "1", "memory": "1Mi", NVIDIA_GPU: "1"},
        limits={NVIDIA_GPU: "1"},
    )
    result = env.provision(p)
    assert len(result.claims) == 1
    claim = result.claims[0]
    assert len(claim.requests) == 4, claim.requests
    assert claim.requests == {"cpu": 1000, "memory": 2**20, NVIDIA_GPU: 1, "pods": 1}
    env.scheduled(p)


def test_should_create_a_nodeclaim_with_resource_requests_with_daemon_overhead(env):
    """Provisioning / NodeClaim Creation / should create a nodeclaim with resource requests with daemon overhead"""
    env.apply(node_pool(), daemon_set(requests=requests("1", "1Mi")))
    p = unschedulable_pod(requests=requests("1", "1Mi"))
    result = env.provision(p)
    assert len(result.claims) == 1
    claim = result.claims[0]
    assert claim.requests["cpu"] == 2000
    assert claim.requests["memory"] == 2 * 2**20
    assert claim.requests["pods"] == 2
    env.scheduled(p)


def test_should_not_double_count_daemon_overhead_when_multiple_pods_are_scheduled_to_the_same_nodeclaim(env):
    """Provisioning / NodeClaim Creation / should not double-count daemon overhead when multiple pods are scheduled to the same nodeclaim"""
    env.apply(node_pool(), daemon_set(requests=requests("1", "1Mi")))
    pod1 = unschedulable_pod(requests=requests("1", "1Mi"))
    pod2 = unschedulable_pod(requests=requests("1", "1Mi"))
    result = env.provision(pod1, pod2)
    assert len(result.claims) == 1
    claim = result.claims[0]
    assert claim.requests["cpu"] == 3000
    assert claim.requests["memory"] == 3 * 2**20
    assert claim.requests["pods"] == 3
    env.scheduled(pod1)
    env.scheduled(pod2)


# ------------------------------------------------------------------ Preferential Fallback


def test_should_not_relax_the_final_term(env):
    """Provisioning / Preferential Fallback / Required / should not relax the final term

    test-zone-1: ZONE_1."""
    p = unschedulable_pod(spec=node_affinity(required_terms=[[requirement(ZONE, "In", "invalid")]]))
    env.apply(node_pool(requirements=[requirement(ZONE, "In", ZONE_1)]))
    env.provision(p)
    env.not_scheduled(p)


def test_should_relax_multiple_terms(env):
    """Provisioning / Preferential Fallback / Required / should relax multiple terms

    test-zone-1, -2: ZONE_1, ZONE_2."""
    p = unschedulable_pod(
        spec=node_affinity(
            required_terms=[
                [requirement(ZONE, "In", "invalid")],
                [requirement(ZONE, "In", "invalid")],
                [requirement(ZONE, "In", ZONE_1)],
                [requirement(ZONE, "In", ZONE_2)],
            ]
        )
    )
    env.apply(node_pool())
    env.provision(p)
    assert env.scheduled(p).zone == ZONE_1


def test_should_relax_all_node_affinity_terms(env):
    """Provisioning / Preferential Fallback / Preferences / should relax all node affinity terms"""
    p = unschedulable_pod(
        spec=node_affinity(
            preferred=[
                (1, [requirement(ZONE, "In", "invalid")]),
                (1, [requirement(INSTANCE_TYPE, "In", "invalid")]),
            ]
        )
    )
    env.apply(node_pool())
    env.provision(p)
    env.scheduled(p)


def test_should_relax_to_use_lighter_weights(env):
    """Provisioning / Preferential Fallback / Preferences / should relax to use lighter weights

    test-zone-1, -2, -3: ZONE_1, ZONE_2, ZONE_3."""
    p = unschedulable_pod(
        spec=node_affinity(
            preferred=[
                (100, [requirement(INSTANCE_TYPE, "In", ZONE_3)]),
                (50, [requirement(ZONE, "In", ZONE_2)]),
                (1, [requirement(ZONE, "In", ZONE_1)]),
            ]
        )
    )
    env.apply(node_pool(requirements=[requirement(ZONE, "In", ZONE_1, ZONE_2)]))
    env.provision(p)
    assert env.scheduled(p).zone == ZONE_2


def test_should_tolerate_prefernoschedule_taint_only_after_trying_to_relax_affinity_terms(env):
    """Provisioning / Preferential Fallback / Preferences / should tolerate PreferNoSchedule taint only after trying to relax Affinity terms"""
    p = unschedulable_pod(
        spec=node_affinity(
            preferred=[
                (1, [requirement(ZONE, "In", "invalid")]),
                (1, [requirement(INSTANCE_TYPE, "In", "invalid")]),
            ]
        )
    )
    taint = {"key": "foo", "value": "bar", "effect": "PreferNoSchedule"}
    env.apply(node_pool(taints=[taint]))
    env.provision(p)
    assert taint in env.scheduled(p).taints


def _ignore_node_preference(env: Env, topology_key: str) -> None:
    pod1 = unschedulable_pod(labels={"app": "foo"}, requests=requests("2"))
    preferring = unschedulable_pod(
        labels={"app": "baz"},
        requests=requests("1"),
        node_preferences=[requirement(topology_key, "In", "value-1")],
    )
    env.apply(node_pool())
    env.provision(pod1, preferring)
    assert env.scheduled(pod1).name == env.scheduled(preferring).name


def test_should_ignore_node_preferredduringschedulingignoredduringexecution_affinity_topology_kubernetes_io_zone(env):
    """Provisioning / Preferential Fallback / Preferences / should ignore node preferredDuringSchedulingIgnoredDuringExecution affinity / topology.kubernetes.io/zone"""
    _ignore_node_preference(env, ZONE)


def test_should_ignore_node_preferredduringschedulingignoredduringexecution_affinity_kubernetes_io_hostname(env):
    """Provisioning / Preferential Fallback / Preferences / should ignore node preferredDuringSchedulingIgnoredDuringExecution affinity / kubernetes.io/hostname"""
    _ignore_node_preference(env, HOSTNAME)


def test_should_ignore_node_affinity_preferences(env):
    """Provisioning / Preferential Fallback / Ignore Preferences / should ignore node affinity preferences

    test-zone-1, -2: ZONE_1, ZONE_2."""
    env.snapshot_options["preference_policy"] = "Ignore"
    zone1_pod = unschedulable_pod(labels={"app": "foo"}, node_selector={ZONE: ZONE_1}, requests=requests("2"))
    zone2_pods = unschedulable_pods(2, labels={"app": "bar"}, node_selector={ZONE: ZONE_2}, requests=requests("3"))
    affinity_pod = unschedulable_pod(
        labels={"app": "baz"},
        requests=requests("1"),
        node_preferences=[requirement(ZONE, "In", ZONE_2)],
    )
    env.apply(node_pool())
    env.provision(zone1_pod, zone2_pods[0], zone2_pods[1], affinity_pod)
    zone1_node = env.scheduled(zone1_pod)
    zone2_node = env.scheduled(zone2_pods[0])
    env.scheduled(zone2_pods[1])
    affinity_node = env.scheduled(affinity_pod)
    assert affinity_node.name == zone1_node.name
    assert affinity_node.name != zone2_node.name


def _five_pod_nodepool() -> dict:
    """Upstream's five pods share a node because every fake type holds five pods. Here the
    NodePool allows only default-instance-type (m5.large, room for 29 pods): one node of it
    holds the five and costs less than two (the cheapest real types hold four pods, and two of
    them would be cheaper than one that holds five)."""
    return node_pool(requirements=[requirement(INSTANCE_TYPE, "In", DEFAULT_INSTANCE_TYPE)])


def _ignore_spread_preference(env: Env, topology_key: str) -> None:
    env.snapshot_options["preference_policy"] = "Ignore"
    labels = {"app": "foo"}
    pods = unschedulable_pods(
        5,
        labels=labels,
        topology_spread_constraints=[spread(topology_key, labels=labels, when_unsatisfiable="ScheduleAnyway")],
    )
    env.apply(_five_pod_nodepool())
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 1


def test_should_ignore_topologyspreadconstraint_preferences_topology_kubernetes_io_zone(env):
    """Provisioning / Preferential Fallback / Ignore Preferences / should ignore topologySpreadConstraint preferences / topology.kubernetes.io/zone"""
    _ignore_spread_preference(env, ZONE)


def test_should_ignore_topologyspreadconstraint_preferences_topology_kubernetes_io_zone_2(env):
    """Provisioning / Preferential Fallback / Ignore Preferences / should ignore topologySpreadConstraint preferences / topology.kubernetes.io/zone

    Upstream's second entry is also described "topology.kubernetes.io/zone"; its parameter is
    kubernetes.io/hostname."""
    _ignore_spread_preference(env, HOSTNAME)


def _ignore_anti_affinity_preference(env: Env, topology_key: str) -> None:
    env.snapshot_options["preference_policy"] = "Ignore"
    labels = {"app": "foo"}
    pods = unschedulable_pods(
        5,
        labels=labels,
        pod_anti_preferences=[affinity_term(topology_key, labels=labels, weight=1)],
    )
    env.apply(_five_pod_nodepool())
    env.provision(pods)
    assert len({env.scheduled(p).name for p in pods}) == 1


def test_should_ignore_pod_anti_affinity_preferences_topology_kubernetes_io_zone(env):
    """Provisioning / Preferential Fallback / Ignore Preferences / should ignore pod anti-affinity preferences / topology.kubernetes.io/zone"""
    _ignore_anti_affinity_preference(env, ZONE)


def test_should_ignore_pod_anti_affinity_preferences_topology_kubernetes_io_zone_2(env):
    """Provisioning / Preferential Fallback / Ignore Preferences / should ignore pod anti-affinity preferences / topology.kubernetes.io/zone

    Upstream's second entry is also described "topology.kubernetes.io/zone"; its parameter is
    kubernetes.io/hostname."""
    _ignore_anti_affinity_preference(env, HOSTNAME)


def _ignore_affinity_preference(env: Env, topology_key: str) -> None:
    env.snapshot_options["preference_policy"] = "Ignore"
    zone1_pod = unschedulable_pod(labels={"app": "foo"}, node_selector={ZONE: ZONE_1}, requests=requests("2"))
    zone2_pods = unschedulable_pods(2, labels={"app": "bar"}, node_selector={ZONE: ZONE_2}, requests=requests("3"))
    affinity_pod = unschedulable_pod(
        labels={"app": "baz"},
        requests=requests("1"),
        pod_preferences=[affinity_term(topology_key, labels={"app": "bar"}, weight=1)],
    )
    env.apply(node_pool())
    env.provision(zone1_pod, zone2_pods[0], zone2_pods[1], affinity_pod)
    zone1_node = env.scheduled(zone1_pod)
    zone2_node = env.scheduled(zone2_pods[0])
    env.scheduled(zone2_pods[0])
    affinity_node = env.scheduled(affinity_pod)
    assert affinity_node.name == zone1_node.name
    assert affinity_node.name != zone2_node.name


def test_should_ignore_pod_affinity_preferences_topology_kubernetes_io_zone(env):
    """Provisioning / Preferential Fallback / Ignore Preferences / should ignore pod affinity preferences / topology.kubernetes.io/zone

    test-zone-1, -2: ZONE_1, ZONE_2."""
    _ignore_affinity_preference(env, ZONE)


def test_should_ignore_pod_affinity_preferences_topology_kubernetes_io_zone_2(env):
    """Provisioning / Preferential Fallback / Ignore Preferences / should ignore pod affinity preferences / topology.kubernetes.io/zone

    Upstream's second entry is also described "topology.kubernetes.io/zone"; its parameter is
    kubernetes.io/hostname. test-zone-1, -2: ZONE_1, ZONE_2."""
    _ignore_affinity_preference(env, HOSTNAME)


# ------------------------------------------------------------------ Multiple NodePools


def test_should_schedule_to_an_explicitly_selected_nodepool(env):
    """Provisioning / Multiple NodePools / should schedule to an explicitly selected NodePool"""
    np = node_pool()
    env.apply(np, node_pool())
    p = unschedulable_pod(node_selector={NODEPOOL: np["metadata"]["name"]})
    env.provision(p)
    assert env.scheduled(p).labels[NODEPOOL] == np["metadata"]["name"]


def test_should_schedule_to_a_nodepool_by_labels(env):
    """Provisioning / Multiple NodePools / should schedule to a NodePool by labels"""
    np = node_pool(labels={"foo": "bar"})
    env.apply(np, node_pool())
    p = unschedulable_pod(node_selector={"foo": "bar"})
    env.provision(p)
    assert env.scheduled(p).labels[NODEPOOL] == np["metadata"]["name"]


def test_should_not_match_nodepool_with_prefernoschedule_taint_when_other_nodepool_match(env):
    """Provisioning / Multiple NodePools / should not match NodePool with PreferNoSchedule taint when other NodePool match"""
    np = node_pool(taints=[{"key": "foo", "value": "bar", "effect": "PreferNoSchedule"}])
    env.apply(np, node_pool())
    p = unschedulable_pod()
    env.provision(p)
    assert env.scheduled(p).labels[NODEPOOL] != np["metadata"]["name"]


def test_should_schedule_to_the_nodepool_with_the_highest_priority_always(env):
    """Provisioning / Multiple NodePools / Weighted NodePools / should schedule to the nodepool with the highest priority always"""
    pools = [node_pool(), node_pool(weight=20), node_pool(weight=100)]
    env.apply(pools)
    pods = [unschedulable_pod(), unschedulable_pod(), unschedulable_pod()]
    env.provision(pods)
    for p in pods:
        assert env.scheduled(p).labels[NODEPOOL] == pools[2]["metadata"]["name"]


def test_should_schedule_to_explicitly_selected_nodepool_even_if_other_nodepools_are_higher_priority(env):
    """Provisioning / Multiple NodePools / Weighted NodePools / should schedule to explicitly selected nodepool even if other nodePools are higher priority"""
    targeted = node_pool()
    env.apply(targeted, node_pool(weight=20), node_pool(weight=100))
    p = unschedulable_pod(node_selector={NODEPOOL: targeted["metadata"]["name"]})
    env.provision(p)
    assert env.scheduled(p).labels[NODEPOOL] == targeted["metadata"]["name"]


# ------------------------------------------------------------------ StaticNodePool


def test_should_not_create_nodeclaims_for_staticnodepool(env):
    """Provisioning / StaticNodePool / should not create NodeClaims for StaticNodePool

    test.StaticNodePool: spec.replicas, no limits."""
    env.apply(node_pool(replicas=2, limits={}))
    p = unschedulable_pod()
    env.provision(p)
    env.not_scheduled(p)


def test_should_still_provision_dynamic_nodeclaims_when_there_are_both_static_and_dynamic_nodepools(env):
    """Provisioning / StaticNodePool / should still provision dynamic NodeClaims when there are both Static and Dynamic NodePools"""
    targeted = node_pool()
    static = node_pool(replicas=1, limits={})
    env.apply(targeted, static)
    p = unschedulable_pod()
    env.provision(p)
    view = env.scheduled(p)
    assert view.labels[NODEPOOL] != static["metadata"]["name"]
    assert view.labels[NODEPOOL] == targeted["metadata"]["name"]


# ------------------------------------------------------------------ MinValuesPolicy

_NO_MIN_VALUES_RELAXATION = (
    "solver: min_values_policy BestEffort is not implemented (Snapshot.min_values_policy is read by nothing): "
    "minValues stay hard, where upstream lowers each to what the types offer, keeps the claim in the heavier "
    "NodePool and annotates it karpenter.sh/nodeclaim-min-values-relaxed=true (ClaimPlan has no annotations)"
)
SMALL_POD = requests("0.9", "0.9Gi")


def _only_types(env: Env, *available: str) -> None:
    """Of instance-type-1..3, only ``available`` can be launched: the others are out of
    capacity in every offering (upstream's provider lists only the available ones)."""
    for name in (TYPE_1, TYPE_2, TYPE_3):
        if name in available:
            continue
        for zone in env.zones:
            for capacity_type in ("spot", "on-demand"):
                env.mark_unavailable(capacity_type, name, zone)


def _instance_type_min_values_pool(weight: int = 100, min_values: int | None = 3) -> dict:
    return node_pool(
        weight=weight,
        requirements=[requirement(INSTANCE_TYPE, "In", TYPE_1, TYPE_2, TYPE_3, min_values=min_values)],
    )


def _expect_min_values(claim, key: str, values: list[str], min_values: int) -> None:
    found = claim.requirements.get(key)
    assert found is not None, f"the claim has no requirement on {key}: {claim.requirements}"
    assert found.operator == "In" and set(found.values) == set(values), found
    assert found.min_values == min_values, f"{found}: minValues {found.min_values}, expected {min_values}"


def test_should_not_schedule_when_minvalues_requirement_is_not_met(env):
    """Provisioning / MinValuesPolicy / with instance type requirements / with MinValuesPolicy set to Strict / should not schedule when minValues requirement is not met

    instance-type-1, -2 (the only types): m5.large, m5.xlarge; m5.2xlarge unavailable."""
    env.snapshot_options["min_values_policy"] = "Strict"
    _only_types(env, TYPE_1, TYPE_2)
    env.apply(_instance_type_min_values_pool())
    p = unschedulable_pod(requests=SMALL_POD)
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_even_when_minvalues_requirement_is_not_met(env):
    """Provisioning / MinValuesPolicy / with instance type requirements / with MinValuesPolicy set to BestEffort / should schedule even when minValues requirement is not met

    instance-type-1, -2: m5.large, m5.xlarge; m5.2xlarge unavailable. The NodeClaim-created
    metric is not ported."""
    env.snapshot_options["min_values_policy"] = "BestEffort"
    _only_types(env, TYPE_1, TYPE_2)
    env.apply(_instance_type_min_values_pool())
    p = unschedulable_pod(requests=SMALL_POD)
    env.provision(p)
    view = env.scheduled(p)
    assert view.instance_type == TYPE_1
    assert getattr(view.claim, "annotations", {}).get(MIN_VALUES_RELAXED) == "true"
    _expect_min_values(view.claim, INSTANCE_TYPE, [TYPE_1, TYPE_2], 2)


def test_should_relax_minvalues_before_falling_back_to_other_nodepools(env):
    """Provisioning / MinValuesPolicy / with instance type requirements / with MinValuesPolicy set to BestEffort / should relax minValues before falling back to other nodepools

    instance-type-1, -2: m5.large, m5.xlarge; m5.2xlarge unavailable."""
    env.snapshot_options["min_values_policy"] = "BestEffort"
    _only_types(env, TYPE_1, TYPE_2)
    default_pool = _instance_type_min_values_pool()
    env.apply(default_pool)
    env.apply(_instance_type_min_values_pool(weight=10, min_values=None))
    p = unschedulable_pod(requests=SMALL_POD)
    env.provision(p)
    view = env.scheduled(p)
    assert view.instance_type == TYPE_1
    assert MIN_VALUES_RELAXED in getattr(view.claim, "annotations", {})
    assert view.labels[NODEPOOL] == default_pool["metadata"]["name"]
    _expect_min_values(view.claim, INSTANCE_TYPE, [TYPE_1, TYPE_2], 2)


def test_should_choose_nodepool_with_higher_weight_when_relaxing_minvalues(env):
    """Provisioning / MinValuesPolicy / with instance type requirements / with MinValuesPolicy set to BestEffort / should choose nodepool with higher weight when relaxing minValues

    instance-type-1, -2: m5.large, m5.xlarge; m5.2xlarge unavailable. The NodeClaim-created
    metric is not ported."""
    env.snapshot_options["min_values_policy"] = "BestEffort"
    _only_types(env, TYPE_1, TYPE_2)
    default_pool = _instance_type_min_values_pool()
    env.apply(default_pool)
    env.apply(_instance_type_min_values_pool(weight=10))
    p = unschedulable_pod(requests=SMALL_POD)
    env.provision(p)
    view = env.scheduled(p)
    assert view.instance_type == TYPE_1
    assert getattr(view.claim, "annotations", {}).get(MIN_VALUES_RELAXED) == "true"
    assert view.labels[NODEPOOL] == default_pool["metadata"]["name"]
    _expect_min_values(view.claim, INSTANCE_TYPE, [TYPE_1, TYPE_2], 2)


def _two_zone_env() -> Env:
    """Instance types offered in test-zone-1 and -2 only: subnets in ZONE_1 and ZONE_2."""
    return Env(zones=(ZONE_1, ZONE_2))


def _zone_min_values_pool() -> dict:
    """The zone-minValues NodePool; upstream's provider has one instance type (instance-type-1),
    here the NodePool allows only m5.large."""
    return node_pool(
        requirements=[
            requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3, min_values=3),
            requirement(INSTANCE_TYPE, "In", TYPE_1),
        ]
    )


def test_should_not_schedule_when_zone_minvalues_requirement_is_not_met():
    """Provisioning / MinValuesPolicy / with zone requirements / with MinValuesPolicy set to Strict / should not schedule when zone minValues requirement is not met

    instance-type-1 offered in test-zone-1 and -2: m5.large, subnets in ZONE_1 and ZONE_2."""
    env = _two_zone_env()
    env.snapshot_options["min_values_policy"] = "Strict"
    env.apply(_zone_min_values_pool())
    p = unschedulable_pod(requests=SMALL_POD)
    env.provision(p)
    env.not_scheduled(p)


def test_should_schedule_even_when_zone_minvalues_requirement_is_not_met():
    """Provisioning / MinValuesPolicy / with zone requirements / with MinValuesPolicy set to BestEffort / should schedule even when zone minValues requirement is not met

    instance-type-1 offered in test-zone-1 and -2: m5.large, subnets in ZONE_1 and ZONE_2. The
    NodeClaim-created metric is not ported."""
    env = _two_zone_env()
    env.snapshot_options["min_values_policy"] = "BestEffort"
    env.apply(_zone_min_values_pool())
    p = unschedulable_pod(requests=SMALL_POD)
    env.provision(p)
    view = env.scheduled(p)
    assert view.instance_type == TYPE_1
    assert view.zone in (ZONE_1, ZONE_2)
    assert getattr(view.claim, "annotations", {}).get(MIN_VALUES_RELAXED) == "true"
    _expect_min_values(view.claim, ZONE, [ZONE_1, ZONE_2, ZONE_3], 2)


def test_should_schedule_when_minvalues_requirement_is_not_met():
    """Provisioning / MinValuesPolicy / with both instance type and zone requirements / with MinValuesPolicy set to BestEffort / should schedule when minValues requirement is not met

    instance-type-1 (the only type), offered in test-zone-1 and -2: m5.large (m5.xlarge and
    m5.2xlarge unavailable), subnets in ZONE_1 and ZONE_2. The NodeClaim-created metric is not
    ported."""
    env = _two_zone_env()
    env.snapshot_options["min_values_policy"] = "BestEffort"
    _only_types(env, TYPE_1)
    env.apply(
        node_pool(
            weight=100,
            requirements=[
                requirement(INSTANCE_TYPE, "In", TYPE_1, TYPE_2, TYPE_3, min_values=3),
                requirement(ZONE, "In", ZONE_1, ZONE_2, ZONE_3, min_values=3),
            ],
        )
    )
    p = unschedulable_pod(requests=SMALL_POD)
    env.provision(p)
    view = env.scheduled(p)
    assert view.instance_type == TYPE_1
    assert view.zone in (ZONE_1, ZONE_2)
    assert getattr(view.claim, "annotations", {}).get(MIN_VALUES_RELAXED) == "true"
    _expect_min_values(view.claim, INSTANCE_TYPE, [TYPE_1], 1)
    _expect_min_values(view.claim, ZONE, [ZONE_1, ZONE_2, ZONE_3], 2)
