"""Upstream's NodeClaim drift suite (``pkg/controllers/nodeclaim/disruption/drift_test.go``), ported.

Upstream's NodeClaim disruption controller writes a ``Drifted`` status condition, with the
drift reason, that the disruption controller reads later. karpweb keeps no condition: each
disruption round computes every node's drift from its NodeClaim row, its NodePool and its
EC2NodeClass (``disruption.drift``, read by ``services.disruption``) and plans with it. So
"reconcile the NodeClaim, then read its condition" is "take the round's picture of the
cluster and read the node's drift reason" (``drift_of``): ``IsTrue()`` is a reason, a
condition removed (or never set, or Unknown) is none. Where upstream asks for a reason, the
reason's name is the same (NodePoolDrifted, RequirementsDrifted, InstanceTypeNotFound).

Mapped as:

* the NodePool hash annotations (``karpenter.sh/nodepool-hash`` and its version): karpweb
  records the hashes on the NodeClaim when it is created (``spec.driftHashes``: version,
  nodepool, nodeclass) and hashes the NodePool as it is at each round. Upstream's hash
  controller reconciling the NodePool is the next round reading it;
* the cloud provider's drift (``cp.Drifted = "drifted"``): the AWS provider's, an AMI the
  EC2NodeClass no longer selects (``provider_drift``: the instance was launched with
  ami-old, the EC2NodeClass's status resolves ami-new only), reason AMIDrift;
* ``cp.InstanceTypes`` and their offerings: the catalog the round loads (``catalog_without``);
* the Launched condition: the NodeClaim's state (Unknown: still launching; False: failed);
* a NodeClaim not managed by this Karpenter (a NodeClassRef of another provider's kind):
  a Node with a NodePool label whose NodeClaim is not one of karpweb's rows;
* ``it`` (the fake provider's first type) is m5.large, spot in us-east-1a (``test-zone-1a``).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from disruption_env import ZONE_1, DisruptionEnv, node_pool

from provisioning.models import ClusterNode, EC2NodeClass, NodeClaim
from provisioning.services import catalog as catalog_service
from provisioning.services import disruption

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/nodeclaim/disruption/drift_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

_RESERVED = (
    "karpweb has no capacity reservations: its catalog has no reserved offerings (capacityReservationSelectorTerms "
    "are not resolved), so no NodeClaim is of capacity type reserved and none can be demoted to on-demand"
)
NOT_PORTED: dict[str, str] = {
    "Drift / NodePool Static Drift / should not return drifted if karpenter.sh/nodepool-hash annotation is not "
    "present on the NodePool": (
        "karpweb stores no hash on the NodePool: a round hashes the NodePool's template as it is then, so a NodePool "
        "always has one (the NodeClaim's side, a claim without a recorded hash, is ported)"
    ),
    "Drift / Reserved Capacity / InstanceTypeNotFound / shouldn't drift when a matching instance type exists with "
    "reserved and on-demand offerings": _RESERVED,
    "Drift / Reserved Capacity / InstanceTypeNotFound / shouldn't drift when a matching instance type exists with "
    "reserved offerings": _RESERVED,
    "Drift / Reserved Capacity / InstanceTypeNotFound / shouldn't drift when a matching instance type exists with "
    "on-demand offerings": _RESERVED,
    "Drift / Reserved Capacity / InstanceTypeNotFound / should drift when a matching instance type exists but the "
    "only offering is spot": _RESERVED,
    "Drift / Reserved Capacity / InstanceTypeNotFound / should drift when a matching instance type exists but there "
    "are no compatible offerings": _RESERVED,
}

IT = "m5.large"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"


# ------------------------------------------------------------------ helpers


def claim_node(env: DisruptionEnv, **options) -> str:
    """The BeforeEach's NodeClaim (launched, no Drifted condition) and its Node: ``it``, spot,
    in test-zone-1a, stamped with its NodePool's hashes."""
    options.setdefault("instance_type", IT)
    options.setdefault("zone", ZONE_1)
    options.setdefault("capacity_type", "spot")
    return env.node(**options)


def drift_of(env: DisruptionEnv, node: str) -> str | None:
    """The node's drift reason in the round's picture of the cluster (None: not drifted, or
    not evaluated at all: not one of karpweb's NodeClaims)."""
    candidate = next((c for c in disruption._picture(env.now).candidates if c.name == node), None)
    if candidate is None or candidate.drift_reason is None:
        return None
    return candidate.drift_reason.split(":")[0]


def evaluated(env: DisruptionEnv, node: str) -> bool:
    """Whether the round takes the node as a NodeClaim of its own (its drift is evaluated)."""
    return any(c.name == node for c in disruption._picture(env.now).candidates)


def provider_drift(node: str, *, resolved: tuple[str, ...] = ("ami-new",)) -> None:
    """``cp.Drifted = "drifted"``: the node's instance was launched with ami-old and the
    EC2NodeClass's status resolves ``resolved``."""
    claim = NodeClaim.objects.get(node_name=node)
    claim.spec = {**claim.spec, "launched": {"imageId": "ami-old"}}
    claim.save(update_fields=["spec"])
    nodeclass = EC2NodeClass.objects.get(name="default")
    nodeclass.status = {**(nodeclass.status or {}), "amis": [{"id": ami, "name": ami} for ami in resolved]}
    nodeclass.save(update_fields=["status"])


def record_hashes(node: str, hashes: dict[str, str]) -> None:
    """The hashes (upstream: the hash annotations) the node's NodeClaim recorded."""
    claim = NodeClaim.objects.get(node_name=node)
    claim.spec = {**claim.spec, "driftHashes": hashes}
    claim.save(update_fields=["spec"])


def catalog_without(monkeypatch, change) -> None:
    """``cp.InstanceTypes = ...``: the round loads the bundled catalog changed by ``change``."""
    changed = change(catalog_service.bundled_catalog())
    monkeypatch.setattr(catalog_service, "load_catalog", lambda *args, **kwargs: changed)


def requirement(key: str, operator: str, *values: str) -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


# ------------------------------------------------------------------ Drift


def test_should_detect_drift(disruption_env: DisruptionEnv):
    """Drift / Drift / should detect drift"""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    provider_drift(node)
    assert drift_of(env, node) == "AMIDrift"


def test_should_ignore_drift_for_nodeclaims_not_managed_by_this_instance_of_karpenter(disruption_env: DisruptionEnv):
    """Drift / Drift / should ignore drift for NodeClaims not managed by this instance of Karpenter

    The Node has its NodePool's label and an AMI the EC2NodeClass no longer selects, but its
    NodeClaim is not karpweb's: its drift is not evaluated (upstream: the condition stays Unknown)."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    provider_drift(node)
    assert drift_of(env, node) == "AMIDrift"
    NodeClaim.objects.filter(node_name=node).delete()
    ClusterNode.objects.filter(name=node).update(nodeclaim="")
    assert not evaluated(env, node)
    assert drift_of(env, node) is None


def test_should_detect_stale_instance_type_drift_if_the_instance_type_label_doesnt_exist(disruption_env: DisruptionEnv):
    """Drift / should detect stale instance type drift if the instance type label doesn't exist"""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    row = ClusterNode.objects.get(name=node)
    labels = {k: v for k, v in row.manifest["metadata"]["labels"].items() if k != INSTANCE_TYPE}
    row.manifest = {**row.manifest, "metadata": {**row.manifest["metadata"], "labels": labels}}
    row.save(update_fields=["manifest"])
    env.advance(2 * 3600)
    assert drift_of(env, node) == "InstanceTypeNotFound"


def test_should_detect_stale_instance_type_drift_if_the_instance_type_doesnt_exist(
    disruption_env: DisruptionEnv, monkeypatch
):
    """Drift / should detect stale instance type drift if the instance type doesn't exist

    Upstream empties the provider's list; here the catalog the round loads has no m5.large."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    catalog_without(monkeypatch, lambda c: dataclasses.replace(c, infos={k: v for k, v in c.infos.items() if k != IT}))
    env.advance(2 * 3600)
    assert drift_of(env, node) == "InstanceTypeNotFound"


def test_should_detect_stale_instance_type_drift_if_the_instance_type_offerings_doesnt_exist(
    disruption_env: DisruptionEnv, monkeypatch
):
    """Drift / should detect stale instance type drift if the instance type offerings doesn't exist

    Every type of the catalog the round loads is offered in no zone."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    catalog_without(monkeypatch, lambda c: dataclasses.replace(c, type_zones={k: frozenset() for k in c.type_zones}))
    env.advance(2 * 3600)
    assert drift_of(env, node) == "InstanceTypeNotFound"


def test_should_detect_stale_instance_type_drift_if_the_instance_type_offerings_arent_compatible_with_the_nodeclaim(
    disruption_env: DisruptionEnv, monkeypatch
):
    """Drift / should detect stale instance type drift if the instance type offerings aren't compatible with the nodeclaim

    Upstream moves every offering of the type to a random zone; here m5.large is offered only
    in us-east-1f, and the node is in us-east-1a."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    catalog_without(
        monkeypatch,
        lambda c: dataclasses.replace(c, type_zones={**c.type_zones, IT: frozenset({"us-east-1f"})}),
    )
    env.advance(2 * 3600)
    assert drift_of(env, node) == "InstanceTypeNotFound"


def test_should_detect_static_drift_before_cloud_provider_drift(disruption_env: DisruptionEnv):
    """Drift / should detect static drift before cloud provider drift"""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    provider_drift(node)
    claim = NodeClaim.objects.get(node_name=node)
    record_hashes(node, {**claim.spec["driftHashes"], "nodepool": "test-123"})
    assert drift_of(env, node) == "NodePoolDrifted"


def test_should_detect_node_requirement_drift_before_cloud_provider_drift(disruption_env: DisruptionEnv):
    """Drift / should detect node requirement drift before cloud provider drift"""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    provider_drift(node)
    env.apply(node_pool(requirements=[requirement(INSTANCE_TYPE, "DoesNotExist")]))
    assert drift_of(env, node) == "RequirementsDrifted"


def test_should_remove_the_status_condition_from_the_nodeclaim_when_the_nodeclaim_launch_condition_is_unknown(
    disruption_env: DisruptionEnv,
):
    """Drift / should remove the status condition from the nodeClaim when the nodeClaim launch condition is unknown

    Launched Unknown: the NodeClaim is still launching (its Node exists, as upstream applies it)."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    provider_drift(node)
    assert drift_of(env, node) == "AMIDrift"
    NodeClaim.objects.filter(node_name=node).update(state=NodeClaim.State.LAUNCHING)
    assert drift_of(env, node) is None


def test_should_remove_the_status_condition_from_the_nodeclaim_when_the_nodeclaim_launch_condition_is_false(
    disruption_env: DisruptionEnv,
):
    """Drift / should remove the status condition from the nodeClaim when the nodeClaim launch condition is false

    Launched False: the NodeClaim failed to launch."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    provider_drift(node)
    assert drift_of(env, node) == "AMIDrift"
    NodeClaim.objects.filter(node_name=node).update(state=NodeClaim.State.FAILED)
    assert drift_of(env, node) is None


def test_should_not_detect_drift_if_the_nodepool_does_not_exist(disruption_env: DisruptionEnv):
    """Drift / should not detect drift if the nodePool does not exist"""
    env = disruption_env
    node = claim_node(env)
    provider_drift(node)
    assert evaluated(env, node)
    assert drift_of(env, node) is None


def test_should_remove_the_status_condition_from_the_nodeclaim_if_the_nodeclaim_is_no_longer_drifted(
    disruption_env: DisruptionEnv,
):
    """Drift / should remove the status condition from the nodeClaim if the nodeClaim is no longer drifted

    Drifted (its AMI no longer selected), then not: the EC2NodeClass selects its AMI again."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    provider_drift(node)
    assert drift_of(env, node) == "AMIDrift"
    provider_drift(node, resolved=("ami-new", "ami-old"))
    assert drift_of(env, node) is None


# ------------------------------------------------------------------ NodeRequirement Drift

ON_DEMAND_LINUX = {CAPACITY_TYPE: "on-demand", OS: "linux"}


def _requirement_case(env: DisruptionEnv, old: list[dict], new: list[dict], labels: dict, drifted: bool) -> None:
    env.apply(node_pool(requirements=old))
    node = claim_node(env, capacity_type=labels.get(CAPACITY_TYPE, "spot"), labels=labels)
    assert drift_of(env, node) is None
    env.apply(node_pool(requirements=new))
    assert drift_of(env, node) == ("RequirementsDrifted" if drifted else None)


def test_should_return_drifted_if_the_nodepool_node_requirement_is_updated(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should return drifted if the nodePool node requirement is updated"""
    _requirement_case(
        disruption_env,
        [
            requirement(CAPACITY_TYPE, "In", "on-demand"),
            requirement(ARCH, "In", "amd64"),
            requirement(OS, "In", "linux"),
        ],
        [requirement(CAPACITY_TYPE, "In", "spot")],
        {CAPACITY_TYPE: "on-demand", ARCH: "amd64", OS: "linux"},
        True,
    )


@pytest.mark.xfail(
    strict=True,
    reason=(
        "karpweb reads a node's labels with those of its instance type (what a NodeClaim carries in a real "
        "cluster, where karpweb's Nodes need not), so the m5.large meets the new arch In [amd64] without the label "
        "this port removes from its Node, and does not drift; upstream's fixture NodeClaim lacks the label its "
        "type has, which a real one never does"
    ),
)
def test_should_return_drifted_if_a_new_node_requirement_is_added(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should return drifted if a new node requirement is added

    Upstream's NodeClaim carries only the labels the test gives it, no arch; a real m5.large
    Node is labelled kubernetes.io/arch amd64, which the new requirement allows, so that label
    is taken off the Node here."""
    env = disruption_env
    old = [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux")]
    new = [*old, requirement(ARCH, "In", "amd64")]
    env.apply(node_pool(requirements=old))
    node = claim_node(env, capacity_type="on-demand", labels=ON_DEMAND_LINUX)
    row = ClusterNode.objects.get(name=node)
    labels = {k: v for k, v in row.manifest["metadata"]["labels"].items() if k != ARCH}
    row.manifest = {**row.manifest, "metadata": {**row.manifest["metadata"], "labels": labels}}
    row.save(update_fields=["manifest"])
    assert drift_of(env, node) is None
    env.apply(node_pool(requirements=new))
    assert drift_of(env, node) == "RequirementsDrifted"


def test_should_return_drifted_if_a_node_requirement_is_reduced(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should return drifted if a node requirement is reduced"""
    _requirement_case(
        disruption_env,
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux", "windows")],
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "windows")],
        ON_DEMAND_LINUX,
        True,
    )


def test_should_not_return_drifted_if_a_node_requirement_is_expanded(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should not return drifted if a node requirement is expanded"""
    _requirement_case(
        disruption_env,
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux")],
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux", "windows")],
        ON_DEMAND_LINUX,
        False,
    )


def test_should_not_return_drifted_if_a_node_requirement_set_to_exists(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should not return drifted if a node requirement set to Exists"""
    _requirement_case(
        disruption_env,
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux")],
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "Exists")],
        ON_DEMAND_LINUX,
        False,
    )


def test_should_return_drifted_if_a_node_requirement_set_to_doesnotexists(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should return drifted if a node requirement set to DoesNotExists"""
    _requirement_case(
        disruption_env,
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux")],
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "DoesNotExist")],
        ON_DEMAND_LINUX,
        True,
    )


def test_should_not_return_drifted_if_a_nodeclaim_is_greater_then_node_requirement(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should not return drifted if a nodeClaim is greater then node requirement

    Upstream's Entry expects drifted (test-label 5 against Gt 10), whatever its text says."""
    _requirement_case(
        disruption_env,
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement("test-label", "Gt", "2")],
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement("test-label", "Gt", "10")],
        {CAPACITY_TYPE: "on-demand", "test-label": "5"},
        True,
    )


def test_should_not_return_drifted_if_a_nodeclaim_is_less_then_node_requirement(disruption_env: DisruptionEnv):
    """Drift / NodeRequirement Drift /  / should not return drifted if a nodeClaim is less then node requirement

    Upstream's Entry expects drifted (test-label 2 against Lt 1), whatever its text says."""
    _requirement_case(
        disruption_env,
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement("test-label", "Lt", "5")],
        [requirement(CAPACITY_TYPE, "In", "on-demand"), requirement("test-label", "Lt", "1")],
        {CAPACITY_TYPE: "on-demand", "test-label": "2"},
        True,
    )


def test_should_return_drifted_only_on_nodeclaims_that_are_drifted_from_an_updated_nodepool(
    disruption_env: DisruptionEnv,
):
    """Drift / NodeRequirement Drift / should return drifted only on NodeClaims that are drifted from an updated nodePool

    The second node is labelled windows (a real one would be a Windows EC2NodeClass's)."""
    env = disruption_env
    env.apply(
        node_pool(
            requirements=[requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux", "windows")]
        )
    )
    linux = claim_node(env, capacity_type="on-demand", labels=ON_DEMAND_LINUX)
    windows = claim_node(env, capacity_type="on-demand", labels={CAPACITY_TYPE: "on-demand", OS: "windows"})
    assert drift_of(env, linux) is None
    assert drift_of(env, windows) is None
    env.apply(node_pool(requirements=[requirement(CAPACITY_TYPE, "In", "on-demand"), requirement(OS, "In", "linux")]))
    assert drift_of(env, linux) is None
    assert drift_of(env, windows) == "RequirementsDrifted"


# ------------------------------------------------------------------ NodePool Static Drift


def static_pool(**changes) -> dict:
    """The Static Drift BeforeEach's NodePool: template annotations, labels, taints, startup
    taints, a NodeClassRef, expireAfter 5m and terminationGracePeriod 5m; ``changes`` merged
    over it as upstream's ``mergo.Merge(..., WithOverride)`` (maps merged, the rest replaced)."""
    pool = node_pool(
        labels={"keyLabel": "valueLabel", "keyLabel2": "valueLabel2", **changes.pop("labels", {})},
        annotations={
            "keyAnnotation": "valueAnnotation",
            "keyAnnotation2": "valueAnnotation2",
            **changes.pop("annotations", {}),
        },
        taints=changes.pop("taints", [{"key": "keyvalue1", "effect": "NoExecute"}]),
        expire_after=changes.pop("expire_after", "5m"),
        termination_grace_period=changes.pop("termination_grace_period", "5m"),
    )
    spec = pool["spec"]["template"]["spec"]
    spec["startupTaints"] = changes.pop("startup_taints", [{"key": "startupkeyvalue1", "effect": "NoExecute"}])
    if "nodeclass" in changes:
        spec["nodeClassRef"] = {**spec["nodeClassRef"], "name": changes.pop("nodeclass")}
    assert not changes, changes
    return pool


def _static_case(env: DisruptionEnv, **changes) -> None:
    env.apply(static_pool())
    node = claim_node(env, age=timedelta(minutes=1))
    assert drift_of(env, node) is None
    env.apply(static_pool(**changes))
    assert drift_of(env, node) == "NodePoolDrifted"


def test_should_detect_drift_on_changes_to_the_static_fields_annoations(disruption_env: DisruptionEnv):
    """Drift / NodePool Static Drift / should detect drift on changes to the static fields / Annoations"""
    _static_case(disruption_env, annotations={"keyAnnotationTest": "valueAnnotationTest"})


def test_should_detect_drift_on_changes_to_the_static_fields_labels(disruption_env: DisruptionEnv):
    """Drift / NodePool Static Drift / should detect drift on changes to the static fields / Labels"""
    _static_case(disruption_env, labels={"keyLabelTest": "valueLabelTest"})


def test_should_detect_drift_on_changes_to_the_static_fields_taints(disruption_env: DisruptionEnv):
    """Drift / NodePool Static Drift / should detect drift on changes to the static fields / Taints"""
    _static_case(disruption_env, taints=[{"key": "keytest2taint", "effect": "NoExecute"}])


def test_should_detect_drift_on_changes_to_the_static_fields_startuptaints(disruption_env: DisruptionEnv):
    """Drift / NodePool Static Drift / should detect drift on changes to the static fields / StartupTaints"""
    _static_case(disruption_env, startup_taints=[{"key": "keytest2taint", "effect": "NoExecute"}])


def test_should_detect_drift_on_changes_to_the_static_fields_nodeclassref_name(disruption_env: DisruptionEnv):
    """Drift / NodePool Static Drift / should detect drift on changes to the static fields / NodeClassRef Name

    The NodePool now names EC2NodeClass testName, which does not exist (upstream's neither)."""
    _static_case(disruption_env, nodeclass="testName")


def test_should_detect_drift_on_changes_to_the_static_fields_expireafter(disruption_env: DisruptionEnv):
    """Drift / NodePool Static Drift / should detect drift on changes to the static fields / ExpireAfter"""
    _static_case(disruption_env, expire_after="100m")


def test_should_detect_drift_on_changes_to_the_static_fields_terminationgraceperiod(disruption_env: DisruptionEnv):
    """Drift / NodePool Static Drift / should detect drift on changes to the static fields / TerminationGracePeriod"""
    _static_case(disruption_env, termination_grace_period="100m")


def _unstamped_case(env: DisruptionEnv, hashes) -> None:
    """The NodeClaim records ``hashes(its own)``; then the NodePool's template changes."""
    env.apply(static_pool())
    node = claim_node(env, age=timedelta(minutes=1))
    recorded = NodeClaim.objects.get(node_name=node).spec["driftHashes"]
    record_hashes(node, hashes(recorded))
    env.apply(static_pool(annotations={"keyAnnotationTest": "valueAnnotationTest"}))
    assert drift_of(env, node) is None


def test_should_not_return_drifted_if_karpenter_sh_nodepool_hash_annotation_is_not_present_on_the_nodeclaim(
    disruption_env: DisruptionEnv,
):
    """Drift / NodePool Static Drift / should not return drifted if karpenter.sh/nodepool-hash annotation is not present on the NodeClaim

    The NodeClaim records a hash version and no NodePool hash; the NodePool's template then
    changes (which drifts a NodeClaim that recorded one)."""
    _unstamped_case(disruption_env, lambda recorded: {k: v for k, v in recorded.items() if k != "nodepool"})


def test_should_not_return_drifted_if_the_nodeclaims_nodepool_hash_version_annotation_does_not_match_the_nodepools(
    disruption_env: DisruptionEnv,
):
    """Drift / NodePool Static Drift / should not return drifted if the NodeClaim's karpenter.sh/nodepool-hash-version annotation does not match the NodePool's"""
    _unstamped_case(
        disruption_env, lambda recorded: {**recorded, "version": "test-version-2", "nodepool": "test-hash-2"}
    )


def test_should_not_return_drifted_if_karpenter_sh_nodepool_hash_version_annotation_is_not_present_on_the_nodeclaim(
    disruption_env: DisruptionEnv,
):
    """Drift / NodePool Static Drift / should not return drifted if karpenter.sh/nodepool-hash-version annotation is not present on the NodeClaim"""
    _unstamped_case(
        disruption_env,
        lambda recorded: {k: v for k, v in {**recorded, "nodepool": "test-hash-111111111"}.items() if k != "version"},
    )
