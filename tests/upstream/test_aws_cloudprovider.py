"""The AWS provider's cloud provider suite (``pkg/cloudprovider/suite_test.go``), its scheduling parts ported.

Most of the suite calls ``cloudProvider.Create`` / ``IsDrifted`` on a NodeClaim and inspects the
EC2 requests the fake EC2 API recorded; those are launch and drift plumbing, listed in
``NOT_PORTED``. Ported are the Its whose outcome is a scheduling decision: how many NodeClaims
minValues makes the provisioner launch and how many instance types each carries to CreateFleet
(``MinValues``), and which zones the NodeClaims of EC2NodeClasses with different subnets land in
(``Subnet Compatibility``).

Mappings:

* ``fake.MakeUniqueInstancesAndFamilies`` with 1, 4 and 8 vCPU and spot prices 0.002 < 0.003 <
  0.004: real types of distinct families, a 1-vCPU type that holds one pod of 0.9 cpu and bigger
  types that hold both pods and cost less than two of the 1-vCPU type (so without minValues one
  node would do): r6g.medium (1 vCPU), c6g.large and c7g.large (2 vCPU).
* A CreateFleet request's overrides (the types it may launch): the NodeClaim's instance type
  options. The number of CreateFleet calls: the number of NodeClaims planned.
* Subnets: the harness gives every EC2NodeClass subnets in the same zones, so the Subnet
  Compatibility tests narrow each EC2NodeClass's offerings to the zones of the subnets its
  selector picks (``SubnetEnv``): test-subnet-1 in ``us-east-1a``, test-subnet-2 in
  ``us-east-1b``, and no zone at all for an EC2NodeClass whose selectors match nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from harness import (
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    NODEPOOL,
    ZONE_1,
    ZONE_2,
    Env,
    Result,
    ec2_node_class,
    holds,
    node_pool,
    requirement,
    total_requests,
    unschedulable_pod,
)

from provisioning.scheduling.snapshot import Snapshot

SOURCE = "aws/karpenter-provider-aws pkg/cloudprovider/suite_test.go"
COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

_CREATE = (
    "calls cloudProvider.Create on a NodeClaim and checks the NodeClaim or error it returns: launch plumbing "
    "(NodeClass readiness, ICE errors, image, zone id, annotations), tested in tests/test_cloud_aws.py"
)
_CONTEXT = "the EC2 Context field of the CreateFleet request: EC2 API plumbing, tested in tests/test_cloud_aws.py"
_DRIFT = "cloudProvider.IsDrifted: NodeClaim drift is issue #16's disruption work, not the solver"
_RESERVATIONS = "capacity reservations (karpenter.sh/capacity-type reserved) are issue #19, not built yet"
_SUBNET_IPS = (
    "which subnet of a zone CreateFleet gets (most available IPs, in-flight IP accounting): launch plumbing; the "
    "solver chooses zones, not subnets"
)
_EFA = (
    "whether the launched instance gets EFA interfaces, and so advertises vpc.amazonaws.com/efa, is decided by "
    "cloudProvider.Create from the NodeClaim's requests and the launch template's network interfaces: launch "
    "plumbing, not the solver; the EFA capacity an EC2NodeClass's networkInterfaces give is tested in "
    "tests/test_instancetypes.py"
)

NOT_PORTED: dict[str, str] = {
    "CloudProvider / should not proceed with instance creation if NodeClass is unknown": _CREATE,
    "CloudProvider / should return NodeClassNotReady error on creation if NodeClass is not ready": _CREATE,
    "CloudProvider / should return NodeClassNotReady error on creation if NodeClass tag validation fails": _CREATE,
    "CloudProvider / should return NodeClassNotReady error when observed generation doesn't match": _CREATE,
    "CloudProvider / should return an ICE error when there are no instance types to launch": _CREATE,
    "CloudProvider / should set ImageID in the status field of the nodeClaim": _CREATE,
    "CloudProvider / should return availability zone ID as a label on the nodeClaim": _CREATE,
    "CloudProvider / should expect a strict set of annotation keys": _CREATE,
    "CloudProvider / should return NodeClass Hash on the nodeClaim": _CREATE,
    "CloudProvider / should return NodeClass Hash Version on the nodeClaim": _CREATE,
    "CloudProvider / EC2 Context / should set context on the CreateFleet request if specified on the "
    "NodePool": _CONTEXT,
    "CloudProvider / EC2 Context / should not set context on the CreateFleet request when min values are relaxed "
    "even if specified on the NodePool": _CONTEXT,
    "CloudProvider / EC2 Context / should default to no EC2 Context": _CONTEXT,
    "CloudProvider / NodeClaim Drift / should not fail if NodeClass does not exist": _DRIFT,
    "CloudProvider / NodeClaim Drift / should not fail if NodePool does not exist": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return drifted if the AMI is not valid": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return drifted if there are multiple drift reasons": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return drifted if the subnet is not valid": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return an error if subnets are empty": _DRIFT,
    "CloudProvider / NodeClaim Drift / should not return drifted if the NodeClaim is valid": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return an error if the security groups are empty": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return drifted if the instance security groups doesn't match the "
    "discovered values": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return drifted if there are more instance security groups present "
    "than in the discovered values": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return drifted if more security groups are present than instance "
    "security groups then discovered from nodeclass": _DRIFT,
    "CloudProvider / NodeClaim Drift / should dynamically drift nodeclaims for capacity reservations": _DRIFT,
    "CloudProvider / NodeClaim Drift / should not drift when capacity reservation falls back to on-demand": _DRIFT,
    "CloudProvider / NodeClaim Drift / should not return drifted if the security groups match": _DRIFT,
    "CloudProvider / NodeClaim Drift / should error if the NodeClaim doesn't have the instance-type label": _DRIFT,
    "CloudProvider / NodeClaim Drift / should error if the NodeClaim doesn't have ImageID": _DRIFT,
    "CloudProvider / NodeClaim Drift / should error drift if NodeClaim doesn't have provider id": _DRIFT,
    "CloudProvider / NodeClaim Drift / should error if the underlying NodeClaim doesn't exist": _DRIFT,
    "CloudProvider / NodeClaim Drift / should return drifted if the AMI no longer matches the existing NodeClaims "
    "instance type": _DRIFT,
    **{
        "CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted "
        f"EC2NodeClass.Spec field is updated / {entry}": _DRIFT
        for entry in (
            "UserData",
            "Tags",
            "Context",
            "DetailedMonitoring",
            "InstanceStorePolicy",
            "AssociatePublicIPAddress",
            "MetadataOptions HTTPEndpoint",
            "MetadataOptions HTTPProtocolIPv6",
            "MetadataOptions HTTPPutResponseHopLimit",
            "MetadataOptions HTTPTokens",
            "BlockDeviceMapping DeviceName",
            "BlockDeviceMapping RootVolume",
            "BlockDeviceMapping DeleteOnTermination",
            "BlockDeviceMapping Encrypted",
            "BlockDeviceMapping IOPS",
            "BlockDeviceMapping KMSKeyID",
            "BlockDeviceMapping SnapshotID",
            "BlockDeviceMapping Throughput",
            "BlockDeviceMapping VolumeType",
        )
    },
    "CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted when updating "
    "blockDeviceMapping volumeSize": _DRIFT,
    **{
        "CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if dynamic fields are "
        f"updated / {entry}": _DRIFT
        for entry in ("AMI Drift", "Subnet Drift", "SecurityGroup Drift")
    },
    "CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if "
    "karpenter.k8s.aws/ec2nodeclass-hash annotation is not present on the NodeClaim": _DRIFT,
    "CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if the NodeClaim's "
    "karpenter.k8s.aws/ec2nodeclass-hash-version annotation does not match the EC2NodeClass's": _DRIFT,
    "CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if "
    "karpenter.k8s.aws/ec2nodeclass-hash-version annotation is not present on the NodeClass": _DRIFT,
    "CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if "
    "karpenter.k8s.aws/ec2nodeclass-hash-version annotation is not present on the NodeClaim": _DRIFT,
    "CloudProvider / Subnet Compatibility / should default to the cluster's subnets": (
        "checks the CreateFleet overrides built for m5.large (one per subnet, with its price as priority): EC2 API "
        "plumbing, tested in tests/test_cloud_aws.py"
    ),
    "CloudProvider / Subnet Compatibility / should launch instances into subnet with the most available IP "
    "addresses": _SUBNET_IPS,
    "CloudProvider / Subnet Compatibility / should launch instances into subnet with the most available IP "
    "addresses in-between cache refreshes": _SUBNET_IPS,
    "CloudProvider / Subnet Compatibility / should update in-flight IPs when a CreateFleet error occurs": (
        "a failing CreateFleet call and the subnet provider's in-flight IPs: launch plumbing (launch failures are "
        "tested in tests/test_cloud_aws.py)"
    ),
    "CloudProvider / EFA / should include vpc.amazonaws.com/efa on a nodeclaim if it requests it": _EFA,
    "CloudProvider / EFA / shouldn't include vpc.amazonaws.com/efa on a nodeclaim if it doesn't request it": _EFA,
    "CloudProvider / EFA / should include vpc.amazonaws.com/efa on a nodeclaim if nodeclass configured with "
    "EFA-only interfaces": _EFA,
    "CloudProvider / EFA / should not include vpc.amazonaws.com/efa on a nodeclaim if nodeclass configured with "
    "only interface (ENA) network interfaces": _EFA,
    "CloudProvider / Capacity Reservations / should mark capacity reservations as launched": _RESERVATIONS,
    "CloudProvider / Capacity Reservations / should mark capacity reservations as terminated": _RESERVATIONS,
    **{
        f"CloudProvider / Capacity Reservations / should include capacity reservation labels / {entry}": _RESERVATIONS
        for entry in (
            "when the capacity reservation type is default non-interruptible",
            "when the capacity reservation type is default interruptible",
            "when the capacity reservation type is capacity-block",
        )
    },
}

INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
SPOT, ON_DEMAND = "spot", "on-demand"

ONE_VCPU = "r6g.medium"  # instances[0]: 1 vCPU, holds one pod of 0.9 cpu
BIG = "c6g.large"  # instances[1]: holds both pods, cheaper than two r6g.medium
BIGGER = "c7g.large"  # uniqInstanceTypes[2] of the three-family test: holds both pods too
POD_REQUESTS = {"cpu": "0.9"}


def base_node_pool(**overrides) -> dict:
    """The BeforeEach NodePool: on-demand, on the EC2NodeClass ``default``."""
    overrides.setdefault("requirements", [requirement(CAPACITY_TYPE, "In", ON_DEMAND)])
    return node_pool(**overrides)


def _check_sizes(result: Result, one: Iterable[str], both: Iterable[str], capacity_types: Iterable[str]) -> None:
    """The mapping holds on the catalog: the ``one`` types hold a single pod, the ``both`` types hold two
    and cost less than two of a ``one`` type (so one node would do without minValues)."""
    pool = result.snapshot.nodepools[0]
    types = {t.name: t for t in pool.instance_types}
    cts = frozenset(capacity_types)
    for name in one:
        assert holds(types[name], total_requests(POD_REQUESTS, 1)) and not holds(
            types[name], total_requests(POD_REQUESTS, 2)
        )
    for name in both:
        assert holds(types[name], total_requests(POD_REQUESTS, 2)), name
        for small in one:
            assert types[name].cheapest_price(cts) < 2 * types[small].cheapest_price(cts), (name, small)


def _fleet_types(result: Result) -> list[str]:
    """The instance types of the last CreateFleet request (``CalledWithInput.Pop()``)."""
    return [o.instance_type for o in result.claims[-1].options]


class SubnetEnv(Env):
    """An Env whose EC2NodeClasses have subnets in different zones: ``subnet_zones`` maps an
    EC2NodeClass name to the zones of the subnets its selectors pick; its NodePools' offerings are
    those in these zones, as the catalog builds them for a resolved EC2NodeClass."""

    def __init__(self, subnet_zones: Mapping[str, Sequence[str]], **options) -> None:
        super().__init__(**options)
        self.subnet_zones = {name: frozenset(zones) for name, zones in subnet_zones.items()}

    def snapshot(self) -> Snapshot:
        snapshot = super().snapshot()
        pools = []
        for pool in snapshot.nodepools:
            zones = self.subnet_zones.get(pool.nodeclass)
            if zones is not None:
                types = tuple(
                    replace(t, offerings=tuple(o for o in t.offerings if o.zone in zones)) for t in pool.instance_types
                )
                pool = replace(pool, instance_types=types)
            pools.append(pool)
        return replace(snapshot, nodepools=tuple(pools))


# ------------------------------------------------------------------ MinValues


def test_createfleet_input_should_respect_minvalues_for_in_operator_requirement_from_nodepool(env):
    """CloudProvider / MinValues / CreateFleet input should respect minValues for In operator requirement from NodePool
    instances[0] (1 vCPU) → r6g.medium, instances[1] (8 vCPU) → c6g.large."""
    nodepool = node_pool(
        requirements=[
            requirement(CAPACITY_TYPE, "In", SPOT),
            requirement(INSTANCE_TYPE, "In", ONE_VCPU, BIG, min_values=2),
        ]
    )
    env.apply(nodepool)
    pod1, pod2 = unschedulable_pod(requests=POD_REQUESTS), unschedulable_pod(requests=POD_REQUESTS)
    result = env.provision(pod1, pod2)
    _check_sizes(result, [ONE_VCPU], [BIG], [SPOT])
    node1, node2 = env.scheduled(pod1), env.scheduled(pod2)
    assert node1.name != node2.name
    assert len(result.claims) == 2
    assert len(set(_fleet_types(result))) >= 2


def test_createfleet_input_should_respect_minvalues_for_exists_operator_in_requirement_from_nodepool(env):
    """CloudProvider / MinValues / CreateFleet input should respect minValues for Exists Operator in requirement from NodePool
    instances[0] (1 vCPU) → r6g.medium, instances[1] (8 vCPU) → c6g.large."""
    nodepool = node_pool(
        requirements=[
            requirement(INSTANCE_TYPE, "Exists", min_values=2),
            requirement(INSTANCE_TYPE, "In", ONE_VCPU, BIG, min_values=1),
        ]
    )
    env.apply(nodepool)
    pod1, pod2 = unschedulable_pod(requests=POD_REQUESTS), unschedulable_pod(requests=POD_REQUESTS)
    result = env.provision(pod1, pod2)
    _check_sizes(result, [ONE_VCPU], [BIG], [SPOT, ON_DEMAND])
    node1, node2 = env.scheduled(pod1), env.scheduled(pod2)
    assert node1.name != node2.name
    assert len(result.claims) == 2
    assert len(set(_fleet_types(result))) >= 2


def test_createfleet_input_should_respect_minvalues_from_multiple_keys_in_nodepool(env):
    """CloudProvider / MinValues / CreateFleet input should respect minValues from multiple keys in NodePool
    uniqInstanceTypes (1, 4, 8 vCPU, one family each) → r6g.medium, c6g.large, c7g.large."""
    names = [ONE_VCPU, BIG, BIGGER]
    families = [name.split(".")[0] for name in names]
    nodepool = node_pool(
        requirements=[
            requirement(INSTANCE_TYPE, "In", *names, min_values=2),
            requirement(INSTANCE_FAMILY, "In", *families, min_values=3),
        ]
    )
    env.apply(nodepool)
    pod1, pod2 = unschedulable_pod(requests=POD_REQUESTS), unschedulable_pod(requests=POD_REQUESTS)
    result = env.provision(pod1, pod2)
    _check_sizes(result, [ONE_VCPU], [BIG, BIGGER], [SPOT, ON_DEMAND])
    node1, node2 = env.scheduled(pod1), env.scheduled(pod2)
    assert node1.name != node2.name
    assert len(result.claims) == 2
    fleet = _fleet_types(result)
    assert len(set(fleet)) == 3
    assert len({name.split(".")[0] for name in fleet}) == 3


# ------------------------------------------------------------------ Subnet Compatibility


def test_should_launch_instances_into_subnets_that_are_excluded_by_another_nodepool():
    """CloudProvider / Subnet Compatibility / should launch instances into subnets that are excluded by another NodePool
    The EC2NodeClass selects test-subnet-1 (us-east-1a), the second one test-subnet-2 (us-east-1b)."""
    env = SubnetEnv({"default": [ZONE_1], "nodeclass-2": [ZONE_2]})
    env.apply(ec2_node_class("default", subnetSelectorTerms=[{"tags": {"Name": "test-subnet-1"}}]))
    env.apply(base_node_pool())
    pod_subnet1 = unschedulable_pod()
    env.provision(pod_subnet1)
    assert env.scheduled(pod_subnet1).zone == ZONE_1

    env.apply(
        ec2_node_class(
            "nodeclass-2",
            subnetSelectorTerms=[{"tags": {"Name": "test-subnet-2"}}],
            securityGroupSelectorTerms=[{"tags": {"*": "*"}}],
        )
    )
    nodepool2 = node_pool(nodeclass="nodeclass-2")
    env.apply(nodepool2)
    pod_subnet2 = unschedulable_pod(node_selector={NODEPOOL: nodepool2["metadata"]["name"]})
    env.provision(pod_subnet2)
    assert env.scheduled(pod_subnet2).zone == ZONE_2


def test_should_launch_instances_with_an_alternate_nodepool_when_a_nodeclass_selects_0_subnets_security_groups_or_amis():
    """CloudProvider / Subnet Compatibility / should launch instances with an alternate NodePool when a NodeClass selects 0 subnets, security groups, or amis
    The misconfigured EC2NodeClass's selectors match nothing: no subnet, so no offering."""
    env = SubnetEnv({"misconfigured": []})
    misconfigured = ec2_node_class(
        "misconfigured",
        subnetSelectorTerms=[{"tags": {"Name": "nothing"}}],
        securityGroupSelectorTerms=[{"tags": {"Name": "nothing"}}],
        amiFamily="Custom",
        amiSelectorTerms=[{"tags": {"Name": "nothing"}}],
    )
    env.apply(base_node_pool(), node_pool(nodeclass="misconfigured"), misconfigured)
    pod = unschedulable_pod()
    env.provision(pod)
    env.scheduled(pod)
