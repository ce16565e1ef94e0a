"""Upstream's scheduling suite (``pkg/controllers/provisioning/scheduling/suite_test.go`` lines
2606-5745), ported: ``Describe("Existing Nodes")`` (with its DaemonSets Context), "No
Pre-Binding", "VolumeUsage", "Deleting Nodes", "Metrics", "Reserved Instance Types",
"NodePool requirements instance filtering", "Dynamic Resource Allocation (DRA)" and
``Context("Offering Overrides")``.

Upstream's ``Context("Scheduling")`` BeforeEach makes a NodePool with ``karpenter.sh/capacity-type
In [spot, on-demand, reserved]``; karpweb has no reserved capacity yet (issue #19), so here it is
``In [spot, on-demand]`` (``suite_pool``).

Mappings used throughout (besides README.md's table):

* Nodes of upstream's ``test.Node`` / ``test.NodeClaimAndNode``: Node documents (``harness.node``)
  with the same allocatable. A NodeClaim-linked node carries the NodeClaim's labels (the
  ``karpenter.k8s.aws/ec2nodeclass`` label) and, once ``ExpectMakeNodesInitialized`` ran,
  ``karpenter.sh/registered`` and ``karpenter.sh/initialized``; a node Karpenter launched but that
  is not initialized yet has ``karpenter.sh/registered`` only.
* ``cluster.MarkForDeletion(node)``: the Node document gets ``metadata.deletionTimestamp`` (held by
  the ``karpenter.sh/termination`` finalizer) and the ``karpenter.sh/disrupted:NoSchedule`` taint,
  what a node being disrupted or deleted carries (``mark_for_deletion``). ``ExpectEvicted(pod)``
  (the pod terminating but still there): the pod gets ``metadata.deletionTimestamp`` (``evict``).
* Upstream's fake catalog where the "Deleting Nodes" tests read its type names: a NodePool
  restricted to the real stand-ins of the fake types (``FAKE_CATALOG``); ``small-instance-type``
  (2 cpu, 2Gi, the cheapest that holds a 100M pod) is ``t3.small`` (2 vCPU, 2 GiB), the cheapest
  of them that holds it.
* ``fake.ResourceGPUVendorA`` / ``ResourceGPUVendorB``: ``nvidia.com/gpu`` / ``aws.amazon.com/neuron``.
* The pod error "nodepool requirements filtered out all available instance types": karpweb's
  reason for the same cause, naming the NodePool: ``NodePool <name>: <requirement> matches none of
  the offered values (...)`` or ``NodePool <name>: its EC2NodeClass offers no available instance
  type the NodePool allows`` (``assert_filtered_out``).
"""

from __future__ import annotations

import copy

from harness import (
    ARCH,
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    NODEPOOL,
    ZONE,
    ZONE_1,
    Env,
    Manifest,
    affinity_term,
    daemon_set,
    key_of,
    node,
    node_pool,
    random_name,
    requirement,
    unschedulable_pod,
    unschedulable_pods,
)

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/provisioning/scheduling/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

_VOLUMES = (
    "volume topology: karpweb does not read PersistentVolumeClaims, PersistentVolumes, StorageClasses or "
    "CSINodes (volume limits, volume zones and provisioner support are not modelled)"
)
_METRICS = "metrics of the Go scheduler (Prometheus collectors of the provisioning controller)"
_RESERVED = "reserved capacity (karpenter.sh/capacity-type reserved) is issue #19, not built yet"
_DRA = (
    "Dynamic Resource Allocation is not supported: karpweb does not read ResourceClaims or DeviceClasses, "
    "and has no DRA errors to report"
)
_OVERRIDES = (
    "per-offering CapacityOverride / OverheadOverride (the AWS provider's Nitro sandbox slots): karpweb's "
    "offerings carry zone, capacity type and price only, and an instance type has one capacity"
)

_V = "Scheduling / VolumeUsage"
_M = "Scheduling / Metrics"
_ZONE_METRIC = f"{_M} / Pending Pods by Effective Zone Metric"
_R = "Scheduling / Reserved Instance Types"
_D = "Scheduling / Dynamic Resource Allocation (DRA)"

NOT_PORTED: dict[str, str] = {
    f"{_V} / should launch multiple nodes if required due to volume limits": _VOLUMES,
    f"{_V} / should launch a single node if all pods use the same PVC": _VOLUMES,
    f"{_V} / should not fail for NFS volumes": _VOLUMES,
    f"{_V} / should schedule pods using a PV with multiple zones": _VOLUMES,
    f"{_V} / should preserve unconstrained PV alternatives after ignoring hostname affinity / for local volumes": _VOLUMES,
    f"{_V} / should preserve unconstrained PV alternatives after ignoring hostname affinity / for hostpath volumes": _VOLUMES,
    f"{_V} / should schedule pods using a StorageClass with multiple zones in AllowedTopologies": _VOLUMES,
    f"{_V} / should schedule pods when a valid multi-volume topology alternative remains after pruning disjoint branches": _VOLUMES,
    f"{_V} / should launch nodes for pods with ephemeral volume using the specified storage class name": _VOLUMES,
    f"{_V} / should launch nodes for pods with ephemeral volume using a default storage class": _VOLUMES,
    f"{_V} / should launch nodes for pods with ephemeral volume using the newest storage class": _VOLUMES,
    f"{_V} / should not launch nodes for pod with storageClass that uses an unsupported provisioner": _VOLUMES,
    f"{_V} / should not launch nodes for pod with bound persistentVolume that uses an unsupported provisioner": _VOLUMES,
    f"{_V} / should not launch nodes for pod with storageClass that uses an unsupported topology key": _VOLUMES,
    f"{_V} / should not launch nodes for pod with unbound volume for volumeBindingMode immediate": _VOLUMES,
    f"{_V} / should not launch nodes for pod with deleting persistentVolumeClaim": _VOLUMES,
    f"{_V} / should not launch nodes for pod with bound persistentVolume that is marked for deletion": _VOLUMES,
    f"{_V} / should not launch nodes for pod with Lost persistentVolumeClaim": _VOLUMES,
    f"{_V} / should handle pods with PVCs with defined volumeName / when pv.kubernetes.io/bind-completed is missing": _VOLUMES,
    f"{_V} / should handle pods with PVCs with defined volumeName / when pv.kubernetes.io/bind-completed is present": _VOLUMES,
    f"{_V} / should launch nodes for pods with ephemeral volume without a storage class when the PVC is bound / non-existent storage class": _VOLUMES,
    f"{_V} / should launch nodes for pods with ephemeral volume without a storage class when the PVC is bound / explicitly disabled storage class (empty string)": _VOLUMES,
    f"{_V} / should not launch nodes for pods with ephemeral volume without a storage class when the PVC is unbound / non-existent storage class": _VOLUMES,
    f"{_V} / should not launch nodes for pods with ephemeral volume without a storage class when the PVC is unbound / explicitly disabled storage class (empty string)": _VOLUMES,
    f"{_V} / CSIMigration / should launch nodes for pods with non-dynamic PVC using a migrated PVC/PV": _VOLUMES,
    f"{_V} / CSIMigration / should launch nodes for pods with ephemeral volume using a migrated PVC/PV": _VOLUMES,
    f"{_M} / should surface the queueDepth metric while executing the scheduling loop": _METRICS,
    f"{_M} / should surface the UnschedulablePodsCount metric while executing the scheduling loop": _METRICS,
    f"{_M} / should surface the schedulingDuration metric after executing a scheduling loop": _METRICS,
    f"{_M} / should set the PodSchedulerDecisionSeconds metric after a scheduling loop": _METRICS,
    f"{_ZONE_METRIC} / should report metric correctly for volume constraints / when PVC does not restrict pod to a single zone": _METRICS,
    f"{_ZONE_METRIC} / should report metric correctly for volume constraints / when PVC restricts pod to a single zone": _METRICS,
    f"{_ZONE_METRIC} / should report metric correctly for volume constraints / when PVC restricts pod to no zone": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pods are flexible to zones": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pods are flexible to zones (2)": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when multiple pods have different zone constraints": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pod has preffered zone affinity": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pods have required pod affinity": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pods have required pod anti-affinity": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pods have restricting TSCs": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when TSC is unsatisfiable": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pod affinity is unsatisfiable": _METRICS,
    f"{_ZONE_METRIC} / should report zone of pods corectly / when pod anti-affinity is unsatisfiable": _METRICS,
    f"{_R} / shouldn't fallback to on-demand or spot when compatible reserved offerings are available": _RESERVED,
    f"{_R} / should correctly track reservations shared across nodepools": _RESERVED,
    f"{_R} / should correctly track reservations for multiple nodepools with distinct reservations for the same instance pool": _RESERVED,
    f"{_R} / should correctly track multiple reservations for the same instance pool": _RESERVED,
    f"{_R} / shouldn't fallback to a lower weight NodePool if a reserved offering is available": _RESERVED,
    f"{_R} / shouldn't relax preferences when a pod fails to schedule due to a reserved offering error": _RESERVED,
    f"{_R} / should handle multiple pods on reserved nodes": _RESERVED,
    f"{_D} / should handle DRA pods correctly / container with resource claims": _DRA,
    f"{_D} / should handle DRA pods correctly / init container with resource claims": _DRA,
    f"{_D} / should handle DRA pods correctly / pod with both container and init container resource claims": _DRA,
    f"{_D} / should handle DaemonSet pods with DRA requirements based on IgnoreDRARequests flag value": _DRA,
    "Scheduling / Offering Overrides / should only select instance types whose offerings have CapacityOverride when pod requests an override resource": _OVERRIDES,
    "Scheduling / Offering Overrides / should reject instance type when override allocatable fits but override offerings are unavailable": _OVERRIDES,
}

REGISTERED = "karpenter.sh/registered"
INITIALIZED = "karpenter.sh/initialized"
NODECLASS_LABEL = "karpenter.k8s.aws/ec2nodeclass"
DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
UNREGISTERED_TAINT = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
DELETED_AT = "2024-01-01T00:00:00Z"
INSTANCE_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
NVIDIA_GPU = "nvidia.com/gpu"  # fake.ResourceGPUVendorA
NEURON = "aws.amazon.com/neuron"  # fake.ResourceGPUVendorB

SMALL_TYPE = "t3.small"  # small-instance-type: 2 vCPU, 2 GiB
# The real stand-ins of the fake catalog: small-instance-type, default-instance-type (4 cpu),
# gpu-vendor-instance-type, gpu-vendor-b-instance-type, arm-instance-type (arm64, 16 cpu, 128Gi).
FAKE_CATALOG = (SMALL_TYPE, "c5.xlarge", "g4dn.xlarge", "inf1.xlarge", "r7g.4xlarge")
# The catalog's largest type has 896 vCPU and 32 TiB: a daemon asking for more fits no type,
# as upstream's 100 cpu / 100Gi daemon fits no fake type.
MORE_CPU_THAN_ANY_TYPE = "1024"
MORE_MEMORY_THAN_ANY_TYPE = "64Ti"

# Upstream's error for a NodePool whose requirements leave no instance type, as karpweb words it.
FILTERED_OUT = ("matches none of the offered values", "offers no available instance type the NodePool allows")

POD_LABELS = {"pdb-test": "value"}


def suite_pool(*extra: Manifest, **options) -> Manifest:
    """The suite's NodePool (``Context("Scheduling")`` BeforeEach), with ``extra`` requirements."""
    return node_pool(requirements=[requirement(CAPACITY_TYPE, "In", "spot", "on-demand"), *extra], **options)


def fake_catalog_pool() -> Manifest:
    """The suite's NodePool over the real stand-ins of upstream's fake instance types."""
    return suite_pool(requirement(INSTANCE_TYPE, "In", *FAKE_CATALOG))


def replace_requirements(pool: Manifest, *requirements: Manifest) -> Manifest:
    """``test.ReplaceRequirements``: the same NodePool with only ``requirements``."""
    out = copy.deepcopy(pool)
    out["spec"]["template"]["spec"]["requirements"] = [dict(r) for r in requirements]
    return out


def claim_linked_node(*, allocatable: dict, labels: dict | None = None, initialized: bool = True) -> Manifest:
    """``test.NodeClaimAndNode``: a node with the NodeClaim's labels (the EC2NodeClass label by
    default) and the ``karpenter.sh/unregistered:NoExecute`` taint; ``initialized``
    (``ExpectMakeNodes(Claims)Initialized``): without the taint, labelled registered and initialized."""
    if initialized:
        return node(
            labels={NODECLASS_LABEL: "default", **(labels or {}), REGISTERED: "true", INITIALIZED: "true"},
            allocatable=allocatable,
        )
    return node(
        labels={NODECLASS_LABEL: "default", **(labels or {})},
        taints=[dict(UNREGISTERED_TAINT)],
        allocatable=allocatable,
    )


def mark_for_deletion(env: Env, name: str) -> None:
    """``cluster.MarkForDeletion``: the node is being deleted (deletionTimestamp, held by the
    termination finalizer) and carries the disrupted taint."""
    manifest = copy.deepcopy(env.get("Node", name))
    manifest["metadata"]["deletionTimestamp"] = DELETED_AT
    manifest["metadata"]["finalizers"] = ["karpenter.sh/termination"]
    manifest.setdefault("spec", {}).setdefault("taints", []).append(dict(DISRUPTED_TAINT))
    env.apply(manifest)


def evict(env: Env, pod_manifest: Manifest) -> None:
    """``ExpectEvicted``: the pod is terminating (deletionTimestamp set) and still exists, bound."""
    current = env.objects[("Pod", key_of(pod_manifest))]
    current["metadata"]["deletionTimestamp"] = DELETED_AT


def pdb(name: str | None = None, *, max_unavailable=None, min_available=None) -> Manifest:
    """``test.PodDisruptionBudget`` selecting ``POD_LABELS``."""
    spec: Manifest = {"selector": {"matchLabels": dict(POD_LABELS)}}
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name or random_name("pdb"), "namespace": "default"},
        "spec": spec,
    }


def assert_filtered_out(reason: str | None, pool: str) -> None:
    """The pod's reason says NodePool ``pool``'s requirements filtered out every instance type."""
    assert reason is not None
    assert reason.startswith(f"NodePool {pool}: "), reason
    assert any(phrase in reason for phrase in FILTERED_OUT), reason


# ============================================================== Existing Nodes


def test_should_schedule_a_pod_to_an_existing_node_unowned_by_karpenter(env: Env):
    """Scheduling / Existing Nodes / should schedule a pod to an existing node unowned by Karpenter

    ``ExpectMakeNodesInitialized`` labels the node registered and initialized."""
    existing = node(
        labels={REGISTERED: "true", INITIALIZED: "true"},
        allocatable={"cpu": "10", "memory": "10Gi", "pods": "110"},
    )
    env.apply(existing)
    env.apply(suite_pool())
    p = unschedulable_pod(requests={"cpu": "10m"}, limits={"cpu": "10m"})
    env.provision(p)
    assert env.scheduled(p).name == existing["metadata"]["name"]


def test_should_schedule_multiple_pods_to_an_existing_node_unowned_by_karpenter(env: Env):
    """Scheduling / Existing Nodes / should schedule multiple pods to an existing node unowned by Karpenter"""
    existing = node(
        labels={REGISTERED: "true", INITIALIZED: "true"},
        allocatable={"cpu": "10", "memory": "100Gi", "pods": "110"},
    )
    env.apply(existing)
    env.apply(suite_pool())
    pods = unschedulable_pods(100, requests={"cpu": "10m"}, limits={"cpu": "10m"})
    env.provision(pods)
    for p in pods:
        assert env.scheduled(p).name == existing["metadata"]["name"]


def test_should_order_initialized_nodes_for_scheduling_uninitialized_nodes(env: Env):
    """Scheduling / Existing Nodes / should order initialized nodes for scheduling uninitialized nodes

    Upstream deploys 100 NodeClaims of the NodePool (each launched on the fake provider's cheapest
    type, its node registered) and initializes one picked at random; here 100 registered Nodes of
    the NodePool on one real type (``m5.large``, on-demand, ZONE_1), node 42 initialized."""
    from provisioning.cluster.simulated import node_manifest

    pool = suite_pool()
    env.apply(pool)
    name = pool["metadata"]["name"]
    it = next(t for t in env.snapshot().nodepools[0].instance_types if t.name == "m5.large")
    nodes = [
        node_manifest(
            random_name("node"),
            it,
            zone=ZONE_1,
            capacity_type="on-demand",
            nodepool=name,
            labels={NODECLASS_LABEL: "default", REGISTERED: "true"},
        )
        for _ in range(100)
    ]
    elem = 42
    nodes[elem]["metadata"]["labels"][INITIALIZED] = "true"
    env.apply(nodes)

    p = unschedulable_pod()
    env.provision(p)
    assert env.scheduled(p).name == nodes[elem]["metadata"]["name"]


def test_should_consider_a_pod_incompatible_with_an_existing_node_but_compatible_with_nodepool(env: Env):
    """Scheduling / Existing Nodes / should consider a pod incompatible with an existing node but compatible with NodePool

    The NodeClaim-linked node has no zone label, so a pod requiring ZONE_1 (test-zone-1) does not fit it."""
    env.apply(claim_linked_node(allocatable={"cpu": "10", "memory": "10Gi", "pods": "110"}))
    p = unschedulable_pod(node_requirements=[requirement(ZONE, "In", ZONE_1)])
    env.provision(p)
    env.not_scheduled(p)

    env.apply(suite_pool())
    env.provision(p)
    env.scheduled(p)


def test_should_not_subtract_daemonset_overhead_that_is_not_strictly_compatible_with_an_existing_node(env: Env):
    """Scheduling / Existing Nodes / Daemonsets / should not subtract daemonset overhead that is not strictly compatible with an existing node

    The DaemonSet requests more than any real type has (1024 cpu, 64Ti), as upstream's 100 cpu /
    100Gi is more than any fake type: modelled on every node the NodePool could launch, it leaves
    room for nothing. It requires ZONE_1 (test-zone-1), which the existing node has no label for."""
    existing = claim_linked_node(allocatable={"cpu": "1", "memory": "1Gi", "pods": "110"})
    ds = daemon_set(
        requests={"cpu": MORE_CPU_THAN_ANY_TYPE, "memory": MORE_MEMORY_THAN_ANY_TYPE},
        node_requirements=[requirement(ZONE, "In", ZONE_1)],
    )
    env.apply(suite_pool(), existing, ds)

    p = unschedulable_pod(requests={"cpu": "1", "memory": "1Gi"})
    env.provision(p)
    assert env.scheduled(p).name == existing["metadata"]["name"]

    pod2 = unschedulable_pod(requests={"cpu": "1", "memory": "1Gi"})
    env.provision(pod2)
    env.not_scheduled(pod2)


# ============================================================== No Pre-Binding


def test_should_not_bind_pods_to_nodes(env: Env):
    """Scheduling / No Pre-Binding / should not bind pods to nodes"""
    assert env.nodes() == []

    env.apply(suite_pool())
    initial = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(initial, bind=False)
    env.not_scheduled(initial)
    assert len(env.nodes()) == 1

    second = unschedulable_pod(limits={"cpu": "10m"})
    env.provision(second, bind=False)
    env.not_scheduled(second)
    assert len(env.nodes()) == 1


def test_should_handle_resource_zeroing_of_extended_resources_by_kubelet(env: Env):
    """Scheduling / No Pre-Binding / should handle resource zeroing of extended resources by kubelet

    gpu-vendor-instance-type, the only fake type with vendor-a GPUs, has two of them, so one node
    holds both pods: the NodePool takes the NVIDIA types with two GPUs
    (``karpenter.k8s.aws/instance-gpu-count In [2]``). As upstream, the launched node (registered,
    not initialized) then has its status replaced: capacity ``{nvidia.com/gpu: 0}`` and allocatable
    ``{aws.amazon.com/neuron: 0}``."""
    assert env.nodes() == []

    env.apply(suite_pool(requirement(INSTANCE_GPU_COUNT, "In", "2")))
    initial = unschedulable_pod(limits={"cpu": "10m", NVIDIA_GPU: "1"})
    env.provision(initial, bind=False)
    env.not_scheduled(initial)
    nodes = env.nodes()
    assert len(nodes) == 1

    node1 = copy.deepcopy(nodes[0].manifest)
    node1["status"]["capacity"] = {NVIDIA_GPU: "0"}
    node1["status"]["allocatable"] = {NEURON: "0"}
    env.apply(node1)

    second = unschedulable_pod(limits={"cpu": "10m", NVIDIA_GPU: "1"})
    env.provision(second, bind=False)
    env.not_scheduled(second)
    assert len(env.nodes()) == 1


def test_should_respect_self_pod_affinity_without_pod_binding_zone(env: Env):
    """Scheduling / No Pre-Binding / should respect self pod affinity without pod binding (zone)"""
    labels = {"security": "s2"}
    pods = unschedulable_pods(2, labels=labels, pod_requirements=[affinity_term(ZONE, labels=labels)])
    env.apply(suite_pool())
    env.provision(pods[0], bind=False)
    env.provision(pods[1], bind=False)
    assert len(env.nodes()) == 1


# ============================================================== Deleting Nodes


def test_should_re_schedule_pods_from_a_deleting_node_when_pods_are_active(env: Env):
    """Scheduling / Deleting Nodes / should re-schedule pods from a deleting node when pods are active"""
    env.apply(fake_catalog_pool())
    p = unschedulable_pod(requests={"memory": "100M"})
    env.provision(p)
    n = env.scheduled(p)
    assert n.instance_type == SMALL_TYPE

    mark_for_deletion(env, n.name)
    env.provision()

    nodes = env.nodes()
    assert len(nodes) == 2
    for each in nodes:
        assert each.instance_type == SMALL_TYPE


def test_should_not_re_schedule_pods_from_a_deleting_node_when_pods_are_not_active(env: Env):
    """Scheduling / Deleting Nodes / should not re-schedule pods from a deleting node when pods are not active"""
    env.apply(fake_catalog_pool())
    p = unschedulable_pod(requests={"memory": "100M"})
    env.provision(p)
    n = env.scheduled(p)
    assert n.instance_type == SMALL_TYPE

    mark_for_deletion(env, n.name)
    evict(env, p)
    env.provision()

    assert len(env.nodes()) == 1


def test_should_not_re_schedule_pods_from_a_deleting_node_when_pods_are_owned_by_a_daemonset(env: Env):
    """Scheduling / Deleting Nodes / should not re-schedule pods from a deleting node when pods are owned by a DaemonSet

    The NodeClaim-linked node (not initialized) is labelled with the NodePool, ``t3.small``
    (small-instance-type), on-demand and ZONE_1 (upstream's ``test-zone-1a``), with 32 cpu
    allocatable."""
    pool = fake_catalog_pool()
    ds = daemon_set()
    env.apply(pool, ds)
    p = unschedulable_pod(owner=("DaemonSet", ds["metadata"]["name"]), requests={"memory": "100M"})
    n = claim_linked_node(
        initialized=False,
        allocatable={"cpu": "32"},
        labels={
            NODEPOOL: pool["metadata"]["name"],
            INSTANCE_TYPE: SMALL_TYPE,
            CAPACITY_TYPE: "on-demand",
            ZONE: ZONE_1,
        },
    )
    env.apply(n, p)
    env.bind(p, n)

    mark_for_deletion(env, n["metadata"]["name"])
    evict(env, p)
    env.provision()

    assert len(env.nodes()) == 1


def test_should_not_reschedule_pods_from_a_deleting_node_when_pods_are_not_active_and_they_are_owned_by_a_replicaset(
    env: Env,
):
    """Scheduling / Deleting Nodes / should not reschedule pods from a deleting node when pods are not active and they are owned by a ReplicaSet

    The ReplicaSet is only named by the pod's owner reference: applied here it would be read as
    replicas of its own (envtest runs no ReplicaSet controller)."""
    env.apply(fake_catalog_pool())
    p = unschedulable_pod(owner=("ReplicaSet", random_name("replicaset")), requests={"memory": "100M"})
    env.provision(p)
    n = env.scheduled(p)
    assert n.instance_type == SMALL_TYPE

    mark_for_deletion(env, n.name)
    evict(env, p)
    env.provision()

    assert len(env.nodes()) == 1


def test_should_reschedule_pods_from_a_deleting_node_when_pods_are_not_active_and_they_are_owned_by_a_statefulset(
    env: Env,
):
    """Scheduling / Deleting Nodes / should reschedule pods from a deleting node when pods are not active and they are owned by a StatefulSet

    The StatefulSet is only named by the pod's owner reference: applied here it would be read as
    replicas of its own (envtest runs no StatefulSet controller)."""
    env.apply(fake_catalog_pool())
    p = unschedulable_pod(owner=("StatefulSet", random_name("statefulset")), requests={"memory": "100M"})
    env.provision(p)
    n = env.scheduled(p)
    assert n.instance_type == SMALL_TYPE

    mark_for_deletion(env, n.name)
    evict(env, p)
    env.provision()

    nodes = env.nodes()
    assert len(nodes) == 2
    for each in nodes:
        assert each.instance_type == SMALL_TYPE


def _blocked_by_pdbs(env: Env, *pdbs: Manifest) -> None:
    """The body of "should not reschedule pods from a deleting node when pods are blocked due to
    fully blocking PDBs"."""
    env.apply(fake_catalog_pool())
    p = unschedulable_pod(labels=POD_LABELS, requests={"memory": "100M"})
    env.provision(p)
    env.apply(*pdbs)
    n = env.scheduled(p)
    assert n.instance_type == SMALL_TYPE

    mark_for_deletion(env, n.name)
    env.provision()

    assert len(env.nodes()) == 1


def test_should_not_reschedule_pods_from_a_deleting_node_when_pods_are_blocked_due_to_fully_blocking_pdbs_0_max_unavailable(
    env: Env,
):
    """Scheduling / Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs / 0 max unavailable"""
    _blocked_by_pdbs(env, pdb(max_unavailable=0))


def test_should_not_reschedule_pods_from_a_deleting_node_when_pods_are_blocked_due_to_fully_blocking_pdbs_0_max_unavailable_2(
    env: Env,
):
    """Scheduling / Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs / 0% max unavailable"""
    _blocked_by_pdbs(env, pdb(max_unavailable="0%"))


def test_should_not_reschedule_pods_from_a_deleting_node_when_pods_are_blocked_due_to_fully_blocking_pdbs_100_min_available(
    env: Env,
):
    """Scheduling / Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs / 100% min available"""
    _blocked_by_pdbs(env, pdb(min_available="100%"))


def test_should_not_reschedule_pods_from_a_deleting_node_when_pods_are_blocked_due_to_fully_blocking_pdbs_multiple_pdbs_on_the_same_pod(
    env: Env,
):
    """Scheduling / Deleting Nodes / should not reschedule pods from a deleting node when pods are blocked due to fully blocking PDBs / multiple PDBs on the same pod"""
    _blocked_by_pdbs(env, pdb("pdb-1", min_available="100%"), pdb("pdb-2", min_available="100%"))


# ============================================================== NodePool requirements instance filtering


def test_should_return_appropriate_pod_error_when_no_available_instance_types_exist(env: Env):
    """Scheduling / NodePool requirements instance filtering / should return appropriate pod error when no available instance types exist"""
    pool = suite_pool()
    env.apply(pool)
    normal = unschedulable_pod()
    env.provision(normal)
    env.scheduled(normal)

    pool = replace_requirements(pool, requirement(INSTANCE_TYPE, "In", "non-existent-instance-type"))
    env.apply(pool)

    p = unschedulable_pod(
        "test-pod-filtered",
        requests={"cpu": "32", "memory": "256Gi"},
        limits={"cpu": "32", "memory": "256Gi"},
    )
    result = env.provision(p)
    assert list(result.unschedulable) == [key_of(p)]
    env.not_scheduled(p)
    assert_filtered_out(result.unschedulable[key_of(p)], pool["metadata"]["name"])


def test_should_handle_multiple_pods_when_requirements_filter_out_all_instance_types(env: Env):
    """Scheduling / NodePool requirements instance filtering / should handle multiple pods when requirements filter out all instance types"""
    pool = replace_requirements(suite_pool(), requirement(ARCH, "In", "non-existent-arch"))
    env.apply(pool)
    pods = [unschedulable_pod(name) for name in ("pod-1", "pod-2", "pod-3")]
    result = env.provision(pods)
    assert sorted(result.unschedulable) == sorted(key_of(p) for p in pods)
    for p in pods:
        env.not_scheduled(p)
        assert_filtered_out(result.unschedulable[key_of(p)], pool["metadata"]["name"])


def test_should_handle_conflicting_requirements_that_eliminate_all_instance_types(env: Env):
    """Scheduling / NodePool requirements instance filtering / should handle conflicting requirements that eliminate all instance types"""
    pool = replace_requirements(
        suite_pool(),
        requirement(ARCH, "In", "amd64"),
        requirement(ARCH, "In", "arm64"),
    )
    env.apply(pool)
    p = unschedulable_pod("conflicting-requirements-pod")
    result = env.provision(p)
    assert list(result.unschedulable) == [key_of(p)]
    assert_filtered_out(result.unschedulable[key_of(p)], pool["metadata"]["name"])


def test_should_handle_zone_requirements_that_filter_out_all_instance_types(env: Env):
    """Scheduling / NodePool requirements instance filtering / should handle zone requirements that filter out all instance types"""
    pool = replace_requirements(suite_pool(), requirement(ZONE, "In", "non-existent-zone-1", "non-existent-zone-2"))
    env.apply(pool)
    p = unschedulable_pod("zone-filtered-pod")
    result = env.provision(p)
    assert list(result.unschedulable) == [key_of(p)]
    assert_filtered_out(result.unschedulable[key_of(p)], pool["metadata"]["name"])


# ============================================================== Dynamic Resource Allocation (DRA)


def test_should_handle_dra_pods_correctly_non_dra_pod_without_resource_claims(env: Env):
    """Scheduling / Dynamic Resource Allocation (DRA) / should handle DRA pods correctly / non-DRA pod without resource claims

    Upstream's ``test.NodePool()`` (no requirements) and a pending pod asking 1 cpu and 1Gi: one
    NodeClaim, no pod error."""
    env.apply(node_pool())
    p = unschedulable_pod("non-dra-pod", requests={"cpu": "1", "memory": "1Gi"}, phase="Pending")
    result = env.provision(p, bind=False)
    assert len(result.claims) == 1
    assert dict(result.unschedulable) == {}
