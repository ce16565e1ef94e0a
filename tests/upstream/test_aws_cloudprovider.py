"""The AWS provider's cloud provider suite (``pkg/cloudprovider/suite_test.go``), its scheduling and drift parts ported.

Most of the suite calls ``cloudProvider.Create`` on a NodeClaim and inspects the EC2 requests
the fake EC2 API recorded; that is launch plumbing, listed in ``NOT_PORTED``. Ported are the Its
whose outcome is a scheduling decision: how many NodeClaims minValues makes the provisioner
launch and how many instance types each carries to CreateFleet (``MinValues``), and which zones
the NodeClaims of EC2NodeClasses with different subnets land in (``Subnet Compatibility``); and
the drift Its (``NodeClaim Drift``).

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

NodeClaim Drift runs on the disruption service's environment (``disruption_env.py``), since
karpweb has no ``IsDrifted`` to call: each disruption round reads every node's drift
(``disruption.drift``, from ``services.disruption``), the provider's part after the NodePool's:
the EC2NodeClass's static hash, then the AMI, security groups and subnet the instance was
launched with against those the EC2NodeClass's status resolves. So:

* ``cloudProvider.IsDrifted(ctx, nodeClaim)`` is the node's drift reason in the round's picture
  of the cluster (``drift_of``; "" when none), by the same names (AMIDrift, SubnetDrift,
  SecurityGroupDrift, NodeClassDrift);
* the instance DescribeInstances returns (its subnet, its security groups) and the NodeClaim's
  ``status.imageID`` are what karpweb's NodeClaim records when its instance is launched
  (``spec.launched``: imageId, subnetId, securityGroupIds, from EC2's answer); karpweb does not
  describe the instance again to compute drift;
* the ``karpenter.k8s.aws/ec2nodeclass-hash`` annotations: karpweb records the EC2NodeClass's
  hash, with its hash version, on the NodeClaim when it is created (``spec.driftHashes``) and
  hashes the EC2NodeClass's spec as it is at each round. A NodeClass annotation upstream sets
  to another value is the NodeClaim recording another hash than the EC2NodeClass's now;
* upstream's ``IsDrifted`` error (no subnets or security groups in the status, a NodeClaim
  without its image or instance-type label) leaves the NodeClaim's Drifted condition as it was
  (not set): karpweb compares only what both sides say, and the port asserts the node is not
  drifted;
* the NodeClaim is created at the test's start, as upstream's (so the core's
  InstanceTypeNotFound check, made from a NodeClaim's first hour on, is not), on demand in
  us-east-1a as its NodePool requires; the selected instance type (the first amd64 one) is
  m5.large; the fake AMI, subnet and security group IDs are IDs of the same form; the two
  subnets are in us-east-1a and us-east-1b (upstream's "zone-1" and "zone-2");
* ``mergo.Merge`` of an Entry's changes is :func:`merged` (maps and lists merged element by
  element, other values replaced), or a plain replacement where upstream merges without
  ``WithSliceDeepCopy`` (the dynamic fields' selector terms).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from disruption_env import NODECLASS, DisruptionEnv
from disruption_env import node_pool as disruption_node_pool
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

from provisioning.models import ClusterNode, EC2NodeClass, NodeClaim
from provisioning.scheduling.snapshot import Snapshot
from provisioning.services import disruption as service
from provisioning.services.policy import delete_resource

SOURCE = "aws/karpenter-provider-aws pkg/cloudprovider/suite_test.go"
COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

_CREATE = (
    "calls cloudProvider.Create on a NodeClaim and checks the NodeClaim or error it returns: launch plumbing "
    "(NodeClass readiness, ICE errors, image, zone id, annotations), tested in tests/test_cloud_aws.py"
)
_CONTEXT = "the EC2 Context field of the CreateFleet request: EC2 API plumbing, tested in tests/test_cloud_aws.py"
_RESERVATION_COUNTS = (
    "the count is marked on the EC2NodeClass status when karpweb's launch records the instance and when it "
    "terminates the claim; ported at the provider level (test_aws_capacityreservation_provider.py) and tested "
    "through a launch in tests/test_reservations_cloud.py"
)
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
    "CloudProvider / NodeClaim Drift / should error drift if NodeClaim doesn't have provider id": (
        "karpweb's NodeClaims get their instance id (provider id) when they launch, and the round computes the drift "
        "of launched NodeClaims only: one without is still pending or launching, whose drift is not evaluated (ported "
        "as Launched Unknown in test_nodeclaim_drift.py)"
    ),
    "CloudProvider / NodeClaim Drift / should error if the underlying NodeClaim doesn't exist": (
        "karpweb does not describe the instance to compute drift: the round compares what the NodeClaim recorded at "
        "launch (spec.launched: image, subnet, security groups) with the EC2NodeClass's status, so whether "
        "DescribeInstances still returns the instance plays no part in drift (an instance gone is garbage "
        "collection's, tested in tests/test_cloud_services.py)"
    ),
    "CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if "
    "karpenter.k8s.aws/ec2nodeclass-hash-version annotation is not present on the NodeClass": (
        "karpweb stores no hash on the EC2NodeClass: a round hashes its spec as it is then, at karpweb's hash "
        "version, so an EC2NodeClass always has both (the NodeClaim's side, a claim without a recorded version, is "
        "ported)"
    ),
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
    "CloudProvider / Capacity Reservations / should mark capacity reservations as launched": _RESERVATION_COUNTS,
    "CloudProvider / Capacity Reservations / should mark capacity reservations as terminated": _RESERVATION_COUNTS,
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


# ------------------------------------------------------------------ NodeClaim Drift

ARM_AMI, AMD_AMI = "ami-0a11a11a11a11a11a", "ami-0d22d22d22d22d22d"  # armAMIID, amdAMIID
VALID_SUBNET_1, VALID_SUBNET_2 = "subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"
VALID_SECURITY_GROUP = "sg-0a1b2c3d4e5f60001"
SELECTED_INSTANCE_TYPE = "m5.large"  # the first amd64 type of the NodePool's
ARCH = "kubernetes.io/arch"


def _fake(prefix: str) -> str:
    """``fake.ImageID()``, ``fake.SubnetID()``, ``fake.SecurityGroupID()``: an ID nothing selects."""
    return f"{prefix}-{uuid.uuid4().hex[:17]}"


def _amis(*ids: str) -> list[dict]:
    arch = {ARM_AMI: "arm64", AMD_AMI: "amd64"}
    return [{"id": i, "name": i, "requirements": [{"key": ARCH, "operator": "In", "values": [arch[i]]}]} for i in ids]


DRIFT_STATUS = {
    "instanceProfile": "test-profile",
    "subnets": [{"id": VALID_SUBNET_1, "zone": ZONE_1}, {"id": VALID_SUBNET_2, "zone": ZONE_2}],
    "securityGroups": [{"id": VALID_SECURITY_GROUP}],
    "amis": _amis(ARM_AMI, AMD_AMI),
}


def drift_nodeclass(status: Mapping[str, Any] | None = None, **spec: Any) -> dict:
    """The NodeClaim Drift BeforeEach's EC2NodeClass ``default``: its status resolves the two
    subnets, the security group and both AMIs (``status`` replaces it); ``spec`` merged over
    the suite's own."""
    manifest = copy.deepcopy(NODECLASS)
    manifest["spec"].update(copy.deepcopy(spec))
    manifest["status"] = copy.deepcopy(dict(DRIFT_STATUS if status is None else status))
    return manifest


def drift_env(env: DisruptionEnv, nodeclass: dict | None = None, **launched: Any) -> str:
    """The NodeClaim Drift BeforeEach: the NodePool (on-demand) and EC2NodeClass applied, and a
    NodeClaim of the selected instance type, created now, stamped with their hashes, whose
    instance was launched with the amd64 AMI into the first subnet with the security group
    (``launched`` changes what it was launched with; None: not known)."""
    env.apply(nodeclass or drift_nodeclass())
    env.apply(disruption_node_pool(requirements=[requirement(CAPACITY_TYPE, "In", ON_DEMAND)]))
    facts = {"imageId": AMD_AMI, "subnetId": VALID_SUBNET_1, "securityGroupIds": [VALID_SECURITY_GROUP]}
    facts.update(launched)
    return env.node(
        instance_type=SELECTED_INSTANCE_TYPE,
        zone=ZONE_1,
        capacity_type=ON_DEMAND,
        age=timedelta(minutes=1),
        claim_spec={"launched": {k: v for k, v in facts.items() if v is not None}},
    )


def drift_of(env: DisruptionEnv, node: str) -> str:
    """``cloudProvider.IsDrifted(ctx, nodeClaim)``: the node's drift reason in the round's
    picture of the cluster ("" when it is not drifted)."""
    candidate = next(c for c in service._picture(env.now).candidates if c.name == node)
    return (candidate.drift_reason or "").split(":")[0]


def launched_with(node: str, **facts: Any) -> None:
    """The instance as DescribeInstances returns it, and the NodeClaim's ``status.imageID``:
    what the NodeClaim recorded at launch (None: not recorded)."""
    claim = NodeClaim.objects.get(node_name=node)
    launched = {**claim.spec["launched"], **facts}
    claim.spec = {**claim.spec, "launched": {k: v for k, v in launched.items() if v is not None}}
    claim.save(update_fields=["spec"])


def recorded_hashes(node: str, change) -> None:
    """The NodeClaim's hash annotations: what its NodeClaim recorded when it was created."""
    claim = NodeClaim.objects.get(node_name=node)
    claim.spec = {**claim.spec, "driftHashes": change(dict(claim.spec["driftHashes"]))}
    claim.save(update_fields=["spec"])


def set_status(**status: Any) -> None:
    """The EC2NodeClass's status changed (upstream's ``nodeClass.Status... ; ExpectApplied``)."""
    nodeclass = EC2NodeClass.objects.get(name="default")
    nodeclass.status = {**nodeclass.status, **status}
    nodeclass.save(update_fields=["status"])


def test_should_not_fail_if_nodeclass_does_not_exist(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should not fail if NodeClass does not exist"""
    env = disruption_env
    node = drift_env(env)
    delete_resource("EC2NodeClass", "default", source="cli")
    assert drift_of(env, node) == ""


def test_should_not_fail_if_nodepool_does_not_exist(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should not fail if NodePool does not exist"""
    env = disruption_env
    node = drift_env(env)
    delete_resource("NodePool", "default", source="cli")
    assert drift_of(env, node) == ""


def test_should_return_drifted_if_the_ami_is_not_valid(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should return drifted if the AMI is not valid"""
    env = disruption_env
    node = drift_env(env)
    launched_with(node, imageId=_fake("ami"))
    assert drift_of(env, node) == "AMIDrift"


def test_should_return_drifted_if_there_are_multiple_drift_reasons(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should return drifted if there are multiple drift reasons

    Another AMI, subnet and security group than the EC2NodeClass resolves, and an EC2NodeClass
    hash that is not the one the NodeClaim recorded: static drift is reported first."""
    env = disruption_env
    node = drift_env(env)
    launched_with(node, imageId=_fake("ami"), subnetId=_fake("subnet"), securityGroupIds=[_fake("sg")])
    recorded_hashes(node, lambda hashes: {**hashes, "nodeclass": "abcdefghijkl"})
    assert drift_of(env, node) == "NodeClassDrift"


def test_should_return_drifted_if_the_subnet_is_not_valid(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should return drifted if the subnet is not valid"""
    env = disruption_env
    node = drift_env(env)
    launched_with(node, subnetId=_fake("subnet"))
    assert drift_of(env, node) == "SubnetDrift"


def test_should_return_an_error_if_subnets_are_empty(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should return an error if subnets are empty

    Upstream's error leaves the NodeClaim not drifted; karpweb does not compare the instance's
    subnet with none, so the node is not drifted."""
    env = disruption_env
    node = drift_env(env)
    set_status(subnets=[])
    assert drift_of(env, node) == ""


def test_should_not_return_drifted_if_the_nodeclaim_is_valid(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should not return drifted if the NodeClaim is valid"""
    env = disruption_env
    node = drift_env(env)
    assert drift_of(env, node) == ""


def test_should_return_an_error_if_the_security_groups_are_empty(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should return an error if the security groups are empty

    Upstream's error leaves the NodeClaim not drifted; karpweb does not compare the instance's
    security groups with none, so the node is not drifted (though its group is another)."""
    env = disruption_env
    node = drift_env(env)
    set_status(securityGroups=[])
    launched_with(node, securityGroupIds=[_fake("sg")])
    assert drift_of(env, node) == ""


def test_should_return_drifted_if_the_instance_security_groups_doesn_t_match_the_discovered_values(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / should return drifted if the instance security groups doesn't match the discovered values"""
    env = disruption_env
    node = drift_env(env)
    launched_with(node, securityGroupIds=[_fake("sg")])
    assert drift_of(env, node) == "SecurityGroupDrift"


def test_should_return_drifted_if_there_are_more_instance_security_groups_present_than_in_the_discovered_values(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / should return drifted if there are more instance security groups present than in the discovered values"""
    env = disruption_env
    node = drift_env(env)
    launched_with(node, securityGroupIds=[_fake("sg"), VALID_SECURITY_GROUP])
    assert drift_of(env, node) == "SecurityGroupDrift"


def test_should_return_drifted_if_more_security_groups_are_present_than_instance_security_groups_then_discovered_from_nodeclass(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / should return drifted if more security groups are present than instance security groups then discovered from nodeclass"""
    env = disruption_env
    node = drift_env(env)
    set_status(
        securityGroups=[
            {"id": VALID_SECURITY_GROUP, "name": "test-securitygroup"},
            {"id": _fake("sg"), "name": "test-securitygroup"},
        ]
    )
    assert drift_of(env, node) == "SecurityGroupDrift"


def test_should_not_return_drifted_if_the_security_groups_match(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should not return drifted if the security groups match"""
    env = disruption_env
    node = drift_env(env)
    assert drift_of(env, node) == ""


def test_should_error_if_the_nodeclaim_doesn_t_have_the_instance_type_label(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should error if the NodeClaim doesn't have the instance-type label

    Upstream's error leaves the NodeClaim not drifted: here its Node has no instance-type label."""
    env = disruption_env
    node = drift_env(env)
    row = ClusterNode.objects.get(name=node)
    labels = {k: v for k, v in row.manifest["metadata"]["labels"].items() if k != INSTANCE_TYPE}
    row.manifest = {**row.manifest, "metadata": {**row.manifest["metadata"], "labels": labels}}
    row.save(update_fields=["manifest"])
    assert drift_of(env, node) == ""


def test_should_error_if_the_nodeclaim_doesn_t_have_imageid(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / should error if the NodeClaim doesn't have ImageID

    Upstream's error leaves the NodeClaim not drifted; karpweb does not compare an image the
    NodeClaim did not record."""
    env = disruption_env
    node = drift_env(env)
    launched_with(node, imageId=None)
    assert drift_of(env, node) == ""


def test_should_return_drifted_if_the_ami_no_longer_matches_the_existing_nodeclaims_instance_type(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / should return drifted if the AMI no longer matches the existing NodeClaims instance type

    The EC2NodeClass selects the amd64 AMI alone (amiFamily Custom); the instance was launched
    with the arm64 one."""
    env = disruption_env
    node = drift_env(env)
    launched_with(node, imageId=ARM_AMI)
    env.apply(
        drift_nodeclass(
            {**DRIFT_STATUS, "amis": _amis(AMD_AMI)}, amiFamily="Custom", amiSelectorTerms=[{"id": AMD_AMI}]
        )
    )
    assert drift_of(env, node) == "AMIDrift"


# ------------------------------------------------------------------ NodeClaim Drift / Static Drift Detection

STATIC_SPEC: dict[str, Any] = {
    "userData": "Fake Userdata",
    "tags": {"fakeKey": "fakeValue"},
    "context": "fake-context",
    "detailedMonitoring": False,
    "amiSelectorTerms": [{"alias": "al2023@latest"}],
    "associatePublicIPAddress": False,
    "metadataOptions": {
        "httpEndpoint": "disabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "optional",
    },
    "blockDeviceMappings": [
        {
            "deviceName": "fakeName",
            "rootVolume": False,
            "ebs": {
                "deleteOnTermination": False,
                "encrypted": False,
                "iops": 0,
                "kmsKeyID": "fakeKMSKeyID",
                "snapshotID": "fakeSnapshot",
                "throughput": 0,
                "volumeSize": "2G",
                "volumeType": "standard",
            },
        }
    ],
}


def merged(base: Any, changes: Any) -> Any:
    """``mergo.Merge(base, changes, mergo.WithOverride, mergo.WithSliceDeepCopy)``: maps merged
    key by key, lists element by element, any other value of ``changes`` replacing the base's."""
    if isinstance(base, dict) and isinstance(changes, dict):
        return {**base, **{k: merged(base[k], v) if k in base else v for k, v in changes.items()}}
    if isinstance(base, list) and isinstance(changes, list):
        return [merged(b, c) for b, c in zip(base, changes, strict=False)] + base[len(changes) :] + changes[len(base) :]
    return copy.deepcopy(changes)


def static_env(env: DisruptionEnv) -> str:
    """The Static Drift Detection BeforeEach: the EC2NodeClass with every statically hashed
    field set, and a NodeClaim stamped with its hash."""
    return drift_env(env, drift_nodeclass(**STATIC_SPEC))


def _static_drift_case(env: DisruptionEnv, changes: Mapping[str, Any]) -> None:
    node = static_env(env)
    assert drift_of(env, node) == ""
    env.apply(drift_nodeclass(**merged(STATIC_SPEC, dict(changes))))
    assert drift_of(env, node) == "NodeClassDrift"


STATIC_ENTRIES: dict[str, dict[str, Any]] = {
    "UserData": {"userData": "userdata-test-2"},
    "Tags": {"tags": {"keyTag-test-3": "valueTag-test-3"}},
    "Context": {"context": "context-2"},
    "DetailedMonitoring": {"detailedMonitoring": True},
    "InstanceStorePolicy": {"instanceStorePolicy": "RAID0"},
    "AssociatePublicIPAddress": {"associatePublicIPAddress": True},
    "MetadataOptions HTTPEndpoint": {"metadataOptions": {"httpEndpoint": "enabled"}},
    "MetadataOptions HTTPProtocolIPv6": {"metadataOptions": {"httpProtocolIPv6": "enabled"}},
    "MetadataOptions HTTPPutResponseHopLimit": {"metadataOptions": {"httpPutResponseHopLimit": 10}},
    "MetadataOptions HTTPTokens": {"metadataOptions": {"httpTokens": "required"}},
    "BlockDeviceMapping DeviceName": {"blockDeviceMappings": [{"deviceName": "map-device-test-3"}]},
    "BlockDeviceMapping RootVolume": {"blockDeviceMappings": [{"rootVolume": True}]},
    "BlockDeviceMapping DeleteOnTermination": {"blockDeviceMappings": [{"ebs": {"deleteOnTermination": True}}]},
    "BlockDeviceMapping Encrypted": {"blockDeviceMappings": [{"ebs": {"encrypted": True}}]},
    "BlockDeviceMapping IOPS": {"blockDeviceMappings": [{"ebs": {"iops": 10}}]},
    "BlockDeviceMapping KMSKeyID": {"blockDeviceMappings": [{"ebs": {"kmsKeyID": "test"}}]},
    "BlockDeviceMapping SnapshotID": {"blockDeviceMappings": [{"ebs": {"snapshotID": "test"}}]},
    "BlockDeviceMapping Throughput": {"blockDeviceMappings": [{"ebs": {"throughput": 10}}]},
    "BlockDeviceMapping VolumeType": {"blockDeviceMappings": [{"ebs": {"volumeType": "io1"}}]},
}


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_userdata(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / UserData"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["UserData"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_tags(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / Tags"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["Tags"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_context(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / Context"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["Context"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_detailedmonitoring(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / DetailedMonitoring"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["DetailedMonitoring"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_instancestorepolicy(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / InstanceStorePolicy"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["InstanceStorePolicy"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_associatepublicipaddress(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / AssociatePublicIPAddress"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["AssociatePublicIPAddress"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_metadataoptions_httpendpoint(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / MetadataOptions HTTPEndpoint"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["MetadataOptions HTTPEndpoint"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_metadataoptions_httpprotocolipv6(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / MetadataOptions HTTPProtocolIPv6"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["MetadataOptions HTTPProtocolIPv6"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_metadataoptions_httpputresponsehoplimit(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / MetadataOptions HTTPPutResponseHopLimit"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["MetadataOptions HTTPPutResponseHopLimit"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_metadataoptions_httptokens(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / MetadataOptions HTTPTokens"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["MetadataOptions HTTPTokens"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_devicename(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping DeviceName"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping DeviceName"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_rootvolume(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping RootVolume"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping RootVolume"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_deleteontermination(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping DeleteOnTermination"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping DeleteOnTermination"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_encrypted(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping Encrypted"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping Encrypted"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_iops(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping IOPS"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping IOPS"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_kmskeyid(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping KMSKeyID"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping KMSKeyID"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_snapshotid(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping SnapshotID"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping SnapshotID"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_throughput(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping Throughput"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping Throughput"])


def test_should_return_drifted_if_a_statically_drifted_ec2nodeclass_spec_field_is_updated_blockdevicemapping_volumetype(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted if a statically drifted EC2NodeClass.Spec field is updated / BlockDeviceMapping VolumeType"""
    _static_drift_case(disruption_env, STATIC_ENTRIES["BlockDeviceMapping VolumeType"])


def test_should_return_drifted_when_updating_blockdevicemapping_volumesize(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should return drifted when updating blockDeviceMapping volumeSize"""
    env = disruption_env
    node = static_env(env)
    env.apply(drift_nodeclass(**merged(STATIC_SPEC, {"blockDeviceMappings": [{"ebs": {"volumeSize": "10G"}}]})))
    assert drift_of(env, node) == "NodeClassDrift"


def _dynamic_case(env: DisruptionEnv, changes: Mapping[str, Any]) -> None:
    """``mergo.Merge(nodeClass, changes, mergo.WithOverride)``: the selector terms replaced; what
    they resolve to (the status) is as it was."""
    node = static_env(env)
    assert drift_of(env, node) == ""
    env.apply(drift_nodeclass(**{**STATIC_SPEC, **changes}))
    assert drift_of(env, node) == ""


def test_should_not_return_drifted_if_dynamic_fields_are_updated_ami_drift(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if dynamic fields are updated / AMI Drift"""
    _dynamic_case(disruption_env, {"amiFamily": "AL2023", "amiSelectorTerms": [{"tags": {"ami-key-1": "ami-value-1"}}]})


def test_should_not_return_drifted_if_dynamic_fields_are_updated_subnet_drift(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if dynamic fields are updated / Subnet Drift"""
    _dynamic_case(disruption_env, {"subnetSelectorTerms": [{"tags": {"sn-key-1": "sn-value-1"}}]})


def test_should_not_return_drifted_if_dynamic_fields_are_updated_securitygroup_drift(disruption_env: DisruptionEnv):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if dynamic fields are updated / SecurityGroup Drift"""
    _dynamic_case(disruption_env, {"securityGroupSelectorTerms": [{"tags": {"sg-key": "sg-value"}}]})


def _unstamped_case(env: DisruptionEnv, change) -> None:
    """The NodeClaim records ``change(its hashes)``; the EC2NodeClass's tags then change (which
    drifts a NodeClaim that recorded its hash and version)."""
    node = static_env(env)
    recorded_hashes(node, change)
    env.apply(drift_nodeclass(**{**STATIC_SPEC, "tags": {"Test Key": "Test Value"}}))
    assert drift_of(env, node) == ""


def test_should_not_return_drifted_if_karpenter_k8s_aws_ec2nodeclass_hash_annotation_is_not_present_on_the_nodeclaim(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if karpenter.k8s.aws/ec2nodeclass-hash annotation is not present on the NodeClaim"""
    _unstamped_case(disruption_env, lambda hashes: {k: v for k, v in hashes.items() if k != "nodeclass"})


def test_should_not_return_drifted_if_the_nodeclaim_s_karpenter_k8s_aws_ec2nodeclass_hash_version_annotation_does_not_match_the_ec2nodeclass_s(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if the NodeClaim's karpenter.k8s.aws/ec2nodeclass-hash-version annotation does not match the EC2NodeClass's

    The NodeClaim records hash test-hash-222222 at version test-hash-version-2; the
    EC2NodeClass is hashed at karpweb's version (upstream's test-hash-version-1)."""
    _unstamped_case(
        disruption_env, lambda hashes: {**hashes, "version": "test-hash-version-2", "nodeclass": "test-hash-222222"}
    )


def test_should_not_return_drifted_if_karpenter_k8s_aws_ec2nodeclass_hash_version_annotation_is_not_present_on_the_nodeclaim(
    disruption_env: DisruptionEnv,
):
    """CloudProvider / NodeClaim Drift / Static Drift Detection / should not return drifted if karpenter.k8s.aws/ec2nodeclass-hash-version annotation is not present on the NodeClaim"""
    _unstamped_case(
        disruption_env,
        lambda hashes: {k: v for k, v in {**hashes, "nodeclass": "test-hash-222222"}.items() if k != "version"},
    )


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
