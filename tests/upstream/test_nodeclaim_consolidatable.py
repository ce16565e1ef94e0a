"""Upstream's NodeClaim consolidation suite (``pkg/controllers/nodeclaim/disruption/consolidation_test.go``), ported.

Upstream's NodeClaim disruption controller writes a ``Consolidatable`` status condition that
emptiness and consolidation read later: True once the NodePool's ``consolidateAfter`` has
passed since the NodeClaim's last pod event (since it initialized when no pod came),
removed while it has not, when ``consolidateAfter`` is Never, or when the NodeClaim is not
initialized. karpweb keeps no condition (as ``test_disruption_emptiness.py`` says): each
round asks of every node whether it may be consolidated yet (``candidates.not_consolidatable``
over the service's picture of the cluster, the question emptiness and consolidation ask), so
"reconcile, then read the condition" is "take the round's picture and ask" (``consolidatable``):

* ``IsTrue()``: the round finds nothing that keeps the node from consolidation; a condition
  removed (or never set) is a reason it must wait; ``IsUnknown()`` (never evaluated) is a
  node the round does not take as one of its own NodeClaims;
* a condition upstream sets True by hand before the reconcile that removes it is the node
  consolidatable first (the BeforeEach's node is: its last pod event 5 minutes ago, under a
  consolidateAfter of 1m), then changed as the It changes it;
* ``Status.LastPodEventTime`` is the Node row's ``last_pod_change_at`` (the simulated
  cluster's record of when its pods last changed); zero is none recorded, and the round
  counts from the NodeClaim's initialization then;
* the ``Initialized`` condition is the NodeClaim's state: True is ``initialized``; Unknown
  (upstream's lifecycle: the Node registered, its initialization not decided yet) and False
  (which upstream's lifecycle never sets) are both ``registered``, the one state karpweb has
  for a registered NodeClaim not initialized;
* a NodeClaim not managed by this Karpenter (a NodeClassRef of another provider's kind) is, as
  in ``test_nodeclaim_drift.py``, a Node with its NodePool's label whose NodeClaim is not one
  of karpweb's rows;
* the fake instance type ``it`` (100 cpu, spot and on-demand in test-zone-1a) is m5.large spot
  in us-east-1a. The NodeClaim was created 10 minutes before the test (upstream's is created
  at its start, after its last pod event 5 minutes back, which a real one cannot be).
"""

from __future__ import annotations

from datetime import timedelta

from disruption_env import ZONE_1, DisruptionEnv, node_pool

from provisioning.disruption.candidates import not_consolidatable
from provisioning.models import ClusterNode, NodeClaim
from provisioning.services import disruption

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/nodeclaim/disruption/consolidation_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}

IT = "m5.large"


# ------------------------------------------------------------------ helpers


def pool(**options) -> dict:
    """The BeforeEach's NodePool: WhenEmptyOrUnderutilized, consolidateAfter 1m."""
    options.setdefault("consolidation_policy", "WhenEmptyOrUnderutilized")
    options.setdefault("consolidate_after", "1m")
    return node_pool(**options)


def claim_node(env: DisruptionEnv, **options) -> str:
    """The BeforeEach's NodeClaim and Node: ``it``, initialized, its last pod event 5 minutes ago."""
    options.setdefault("instance_type", IT)
    options.setdefault("zone", ZONE_1)
    options.setdefault("capacity_type", "spot")
    options.setdefault("age", timedelta(minutes=10))
    node = env.node(**options)
    last_pod_event(env, node, env.now - timedelta(minutes=5))
    return node


def last_pod_event(env: DisruptionEnv, node: str, moment) -> None:
    """``nodeClaim.Status.LastPodEventTime = moment`` (None: zero, no pod event)."""
    ClusterNode.objects.filter(name=node).update(last_pod_change_at=moment)


def consolidatable(env: DisruptionEnv, node: str) -> bool | None:
    """The node's ``Consolidatable`` condition as the round sees it now: True, False (removed
    or not set), or None (Unknown: not one of the round's own NodeClaims)."""
    picture = disruption._picture(env.now)
    candidate = next((c for c in picture.candidates if c.name == node), None)
    if candidate is None:
        return None
    return not_consolidatable(candidate, picture.policies[candidate.nodepool], env.now.timestamp()) is None


def set_not_initialized(node: str) -> None:
    """The NodeClaim's ``Initialized`` condition no longer True: registered, not initialized."""
    NodeClaim.objects.filter(node_name=node).update(state=NodeClaim.State.REGISTERED, initialized_at=None)


# ------------------------------------------------------------------ Underutilized


def test_should_ignore_nodeclaims_not_managed_by_this_instance_of_karpenter(disruption_env: DisruptionEnv):
    """Underutilized / should ignore NodeClaims not managed by this instance of Karpenter

    Beside the BeforeEach's NodeClaim (which the round takes, and finds consolidatable once
    the minute has passed), a Node of the NodePool whose NodeClaim is not karpweb's."""
    env = disruption_env
    env.apply(pool())
    managed = claim_node(env)
    unmanaged = claim_node(env)
    NodeClaim.objects.filter(node_name=unmanaged).delete()
    ClusterNode.objects.filter(name=unmanaged).update(nodeclaim="")
    last_pod_event(env, unmanaged, env.now)
    assert consolidatable(env, unmanaged) is None
    env.advance(60)
    assert consolidatable(env, unmanaged) is None
    assert consolidatable(env, managed) is True


def test_should_mark_nodeclaims_as_consolidatable(disruption_env: DisruptionEnv):
    """Underutilized / should mark NodeClaims as consolidatable"""
    env = disruption_env
    env.apply(pool())
    node = claim_node(env)
    last_pod_event(env, node, env.now)
    assert consolidatable(env, node) is False
    env.advance(60)
    assert consolidatable(env, node) is True


def test_should_mark_nodeclaims_as_consolidatable_based_on_the_nodeclaim_initialized_time(
    disruption_env: DisruptionEnv,
):
    """Underutilized / should mark NodeClaims as consolidatable based on the nodeclaim initialized time

    No pod event recorded; the NodeClaim initialized at the test's start (created 10 minutes
    earlier), and the clock is set to that moment."""
    env = disruption_env
    env.apply(pool())
    node = claim_node(env)
    last_pod_event(env, node, None)
    NodeClaim.objects.filter(node_name=node).update(initialized_at=env.now)
    assert consolidatable(env, node) is False
    env.advance(60)
    assert consolidatable(env, node) is True


def test_should_remove_the_status_condition_from_the_nodeclaim_when_lastpodevent_is_too_recent(
    disruption_env: DisruptionEnv,
):
    """Underutilized / should remove the status condition from the nodeClaim when lastPodEvent is too recent"""
    env = disruption_env
    env.apply(pool())
    node = claim_node(env)
    assert consolidatable(env, node) is True
    last_pod_event(env, node, env.now)
    assert consolidatable(env, node) is False


def test_should_remove_the_status_condition_from_the_nodeclaim_when_consolidateafter_is_never(
    disruption_env: DisruptionEnv,
):
    """Underutilized / should remove the status condition from the nodeClaim when consolidateAfter is never"""
    env = disruption_env
    env.apply(pool())
    node = claim_node(env)
    assert consolidatable(env, node) is True
    env.apply(pool(consolidate_after="Never"))
    assert consolidatable(env, node) is False


def test_should_remove_the_status_condition_from_the_nodeclaim_when_the_nodeclaim_initialization_condition_is_unknown(
    disruption_env: DisruptionEnv,
):
    """Underutilized / should remove the status condition from the nodeClaim when the nodeClaim initialization condition is unknown"""
    env = disruption_env
    env.apply(pool())
    node = claim_node(env)
    assert consolidatable(env, node) is True
    set_not_initialized(node)
    assert consolidatable(env, node) is False


def test_should_remove_the_status_condition_from_the_nodeclaim_when_the_nodeclaim_is_not_initialized(
    disruption_env: DisruptionEnv,
):
    """Underutilized / should remove the status condition from the nodeClaim when the nodeClaim is not initialized

    Initialized False is karpweb's registered state too; here the Node also lacks the
    karpenter.sh/initialized label, as a Node of a NodeClaim not initialized does."""
    env = disruption_env
    env.apply(pool())
    node = claim_node(env)
    assert consolidatable(env, node) is True
    set_not_initialized(node)
    row = ClusterNode.objects.get(name=node)
    labels = {k: v for k, v in row.manifest["metadata"]["labels"].items() if k != "karpenter.sh/initialized"}
    row.manifest = {**row.manifest, "metadata": {**row.manifest["metadata"], "labels": labels}}
    row.save(update_fields=["manifest"])
    assert consolidatable(env, node) is False
