"""Upstream's NodeClaim disruption suite (``pkg/controllers/nodeclaim/disruption/suite_test.go``), ported.

The suite's own Its check that the NodeClaim disruption controller sets and removes its two
conditions, ``Drifted`` and ``Consolidatable``, in one reconcile. karpweb keeps neither as a
condition; every round computes both (``test_nodeclaim_drift.py`` and
``test_nodeclaim_consolidatable.py`` say how), so here one reconcile is one round's plan
(``env.plan()``, which also keeps on each NodeClaim when it was first seen drifted):

* ``Drifted`` is the node's drift reason in the round's picture, and the ``driftedAt`` stamp
  the round keeps on its NodeClaim (karpweb's record of the condition: the earliest drift is
  replaced first); "removed" is no reason and the stamp gone;
* ``Consolidatable`` is the round finding nothing that keeps the node from consolidation
  (``candidates.not_consolidatable``, what emptiness and consolidation ask);
* ``cp.Drifted = "drifted"`` is the AWS provider's drift: the instance was launched with an
  AMI its EC2NodeClass no longer selects (reason AMIDrift);
* the fake instance type ``it`` is m5.large spot in us-east-1a; the NodeClaim is initialized,
  created 10 minutes before the test, its last pod event 5 minutes ago; upstream's
  ``ExpectMakeNodeClaimsInitialized`` is its ``initialized`` state;
* ``test.StaticNodePool()`` with ``spec.replicas`` 1 is a NodePool with ``spec.replicas: 1``.
"""

from __future__ import annotations

from datetime import timedelta

from disruption_env import ZONE_1, DisruptionEnv, node_pool

from provisioning.disruption.candidates import not_consolidatable
from provisioning.models import ClusterNode, EC2NodeClass, NodeClaim
from provisioning.services import disruption

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/nodeclaim/disruption/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}

IT = "m5.large"


# ------------------------------------------------------------------ helpers


def claim_node(env: DisruptionEnv, **options) -> str:
    """The BeforeEach's NodeClaim and Node: ``it``, initialized, its last pod event 5 minutes ago."""
    options.setdefault("instance_type", IT)
    options.setdefault("zone", ZONE_1)
    options.setdefault("capacity_type", "spot")
    options.setdefault("age", timedelta(minutes=10))
    node = env.node(**options)
    ClusterNode.objects.filter(name=node).update(last_pod_change_at=env.now - timedelta(minutes=5))
    return node


def provider_drift(node: str) -> None:
    """``cp.Drifted = "drifted"``: the node's instance was launched with ami-old, and the
    EC2NodeClass's status resolves ami-new only."""
    claim = NodeClaim.objects.get(node_name=node)
    claim.spec = {**claim.spec, "launched": {"imageId": "ami-old"}}
    claim.save(update_fields=["spec"])
    nodeclass = EC2NodeClass.objects.get(name="default")
    nodeclass.status = {**(nodeclass.status or {}), "amis": [{"id": "ami-new", "name": "ami-new"}]}
    nodeclass.save(update_fields=["status"])


def reconcile(env: DisruptionEnv) -> None:
    """``ExpectObjectReconciled(nodeClaimDisruptionController, nodeClaim)``: the round's plan."""
    env.plan()


def drifted(env: DisruptionEnv, node: str) -> str | None:
    """The node's ``Drifted`` condition: its drift reason in the round's picture (None: none),
    which must agree with the stamp the last round kept on its NodeClaim."""
    candidate = next(c for c in disruption._picture(env.now).candidates if c.name == node)
    stamped = "driftedAt" in NodeClaim.objects.get(node_name=node).spec
    assert stamped == (candidate.drift_reason is not None)
    return None if candidate.drift_reason is None else candidate.drift_reason.split(":")[0]


def consolidatable(env: DisruptionEnv, node: str) -> bool:
    picture = disruption._picture(env.now)
    candidate = next(c for c in picture.candidates if c.name == node)
    return not_consolidatable(candidate, picture.policies[candidate.nodepool], env.now.timestamp()) is None


# ------------------------------------------------------------------ Disruption


def test_should_set_multiple_disruption_conditions_simultaneously(disruption_env: DisruptionEnv):
    """Disruption / should set multiple disruption conditions simultaneously"""
    env = disruption_env
    env.apply(node_pool(consolidation_policy="WhenEmpty", consolidate_after="30s"))
    node = claim_node(env)
    provider_drift(node)
    env.advance(60)
    reconcile(env)
    assert drifted(env, node) == "AMIDrift"
    assert consolidatable(env, node) is True


def test_should_not_set_consolidatable_condition_for_static_nodepool(disruption_env: DisruptionEnv):
    """Disruption / should not set consolidatable condition for Static Nodepool"""
    env = disruption_env
    static = node_pool(consolidation_policy="WhenEmpty", consolidate_after="30s")
    static["spec"]["replicas"] = 1
    env.apply(static)
    node = claim_node(env)
    provider_drift(node)
    env.advance(60)
    reconcile(env)
    assert drifted(env, node) == "AMIDrift"
    assert consolidatable(env, node) is False


def test_should_remove_multiple_disruption_conditions_simultaneously(disruption_env: DisruptionEnv):
    """Disruption / should remove multiple disruption conditions simultaneously

    Both conditions set by hand first: the NodeClaim stamped drifted by an earlier round, and
    the node consolidatable under consolidateAfter 0s; then consolidateAfter Never, and the
    node not drifted."""
    env = disruption_env
    env.apply(node_pool(consolidate_after="0s"))
    node = claim_node(env)
    claim = NodeClaim.objects.get(node_name=node)
    claim.spec = {**claim.spec, "driftedAt": (env.now - timedelta(minutes=1)).isoformat()}
    claim.save(update_fields=["spec"])
    assert consolidatable(env, node) is True
    env.apply(node_pool(consolidate_after="Never"))
    reconcile(env)
    assert drifted(env, node) is None
    assert consolidatable(env, node) is False
