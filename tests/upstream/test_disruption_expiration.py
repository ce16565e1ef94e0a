"""Upstream's NodeClaim expiration suite (``pkg/controllers/nodeclaim/expiration/suite_test.go``), ported.

Upstream's expiration controller reconciles one NodeClaim: past ``spec.expireAfter`` since its
creation it deletes the NodeClaim (forcefully: no budget, no replacement first), counts it in
``karpenter_nodeclaims_disrupted_total`` and its reschedulable pods in
``karpenter_pods_disruption_initiated_total``; before that it requeues for the time left.
Here expiration is the first step of every disruption round (``planner._expire`` over the
service's picture, ``services.disruption``) on the simulated cluster (``disruption_env.py``):

* ``ExpectObjectReconciled(expirationController, nodeClaim)`` is one round (``env.step()``).
  An expired node's ``Expired`` command is forceful: it starts in the round that plans it
  (no 15 s re-check), tainted and draining at once;
* ``ExpectNotFound(nodeClaim)`` (deleted: the test's NodeClaim has no finalizer) is that
  command: the node's ``Expired`` disruption is draining after the round, and carried on it
  leaves the NodeClaim terminated and the Node gone (``expect_deleted``). ``ExpectExists``
  is no disruption of the node and its NodeClaim still active;
* upstream's NodeClaim records its own ``spec.expireAfter`` (copied from its NodePool when it
  was created): karpweb's NodeClaim row does the same (``spec.expireAfter``), and the round
  reads the claim's own before its NodePool's (``candidates.expire_after``);
* upstream applies the NodeClaim alone (no Node) in most Its; karpweb's unit of disruption is
  a node, and a NodeClaim with no Node is in flight (its registration TTL, not expiration,
  removes one that never registers), so every NodeClaim here has its Node;
* the NodeClaim is created at the test's start (age 0) and upstream's ``env.Clock.Step`` moves
  the test's clock (``env.advance``);
* a NodeClaim not managed by this Karpenter (a NodeClassRef of another provider's kind) is,
  as in ``test_nodeclaim_drift.py``, a Node with its NodePool's label whose NodeClaim is not
  one of karpweb's rows;
* ``karpenter_nodeclaims_disrupted_total`` is read as Prometheus scrapes it (``ClusterState``);
  karpweb's series carries ``reason``, ``nodepool`` and ``capacity_type``, not upstream's
  ``consolidation_type`` (always "" for expiration) nor ``termination_mode`` (always
  "graceful" here), so the port matches the labels karpweb has;
* upstream's ``RequeueAfter`` (when the controller looks again) has no counterpart: karpweb
  plans every 10 s. What it says, that the NodeClaim expires that much later, is checked by
  the rounds at either side of the moment (within upstream's one-second tolerance).
"""

from __future__ import annotations

from datetime import timedelta

from disruption_env import DisruptionEnv, node_pool
from interruption_env import metric

from provisioning.disruption.model import EXPIRED
from provisioning.models import ClusterNode, Disruption, NodeClaim
from provisioning.services import disruption

SOURCE = "kubernetes-sigs/karpenter pkg/controllers/nodeclaim/expiration/suite_test.go"
COMMIT = "2266468104f36373ed002241afaee2d3bbc26078"

NOT_PORTED: dict[str, str] = {}


# ------------------------------------------------------------------ helpers


def claim_node(env: DisruptionEnv, expire_after: str = "30s", **options) -> str:
    """The BeforeEach's NodeClaim (with ``spec.expireAfter``, created now) and its Node."""
    options.setdefault("age", timedelta(0))
    return env.node(claim_spec={"expireAfter": expire_after}, **options)


def disruptions_of(node: str) -> list[Disruption]:
    return [d for d in Disruption.objects.order_by("pk") if node in d.nodes]


def finish(env: DisruptionEnv, command: Disruption, max_rounds: int = 10) -> None:
    """Carry the command on (drain, terminate), 16 s apart, planning nothing new."""
    for _ in range(max_rounds):
        command.refresh_from_db()
        if command.state not in disruption.ACTIVE:
            return
        disruption.advance(command, env.now)
        env.advance(16)


def expect_deleted(env: DisruptionEnv, node: str) -> Disruption:
    """``ExpectNotFound(nodeClaim)``: the round expired the node at once (its forceful command
    is draining), and carried on, its NodeClaim is terminated and its Node gone."""
    (found,) = disruptions_of(node)
    assert found.reason == EXPIRED
    assert found.state in (Disruption.State.DRAINING, Disruption.State.DONE)
    finish(env, found)
    assert found.state == Disruption.State.DONE
    assert NodeClaim.objects.get(node_name=node).state == NodeClaim.State.TERMINATED
    assert not ClusterNode.objects.filter(name=node).exists()
    return found


def expect_exists(node: str) -> None:
    """``ExpectExists(nodeClaim)``: nothing disrupts it; its NodeClaim is still active."""
    assert disruptions_of(node) == []
    assert NodeClaim.objects.get(node_name=node).state in NodeClaim.ACTIVE_STATES


def expired_now(env: DisruptionEnv, node: str) -> bool:
    """Whether the round now plans the node's expiration (nothing is written)."""
    return any(c.reason == EXPIRED and node in c.candidates for c in env.plan().commands)


def disrupted_total(nodepool: str = "default") -> float:
    return metric("karpenter_nodeclaims_disrupted_total", reason="expired", nodepool=nodepool)


def pods_disruption_initiated_total(nodepool: str = "default") -> float:
    return metric("karpenter_pods_disruption_initiated_total", reason="expired", nodepool=nodepool)


# ------------------------------------------------------------------ Metrics


def test_should_fire_a_karpenter_nodeclaims_disrupted_total_metric_when_expired(disruption_env: DisruptionEnv):
    """Expiration / Metrics / should fire a karpenter_nodeclaims_disrupted_total metric when expired

    As upstream's, the NodeClaim's NodePool is not applied: the NodeClaim's own expireAfter
    is all expiration reads."""
    env = disruption_env
    node = claim_node(env)
    env.advance(60)
    env.step()
    expect_deleted(env, node)
    assert disrupted_total() == 1


def test_should_fire_a_karpenter_nodeclaims_disrupted_total_metric_when_expired_2(disruption_env: DisruptionEnv):
    """Expiration / Metrics / should fire a karpenter_nodeclaims_disrupted_total metric when expired

    The second It of that name: a spot NodeClaim, its NodePool applied."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env, capacity_type="spot")
    env.advance(60)
    env.step()
    expect_deleted(env, node)
    assert disrupted_total() == 1


def test_should_fire_karpenter_pods_disruption_initiated_total_by_the_count_of_reschedulable_pods_on_the_node_when_expired(
    disruption_env: DisruptionEnv,
):
    """Expiration / Metrics / should fire karpenter_pods_disruption_initiated_total by the count of reschedulable pods on the node when expired

    Two ReplicaSet pods and a DaemonSet pod (not reschedulable) on the node."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    env.pod(node=node)
    env.pod(node=node)
    env.pod(node=node, owner="DaemonSet")
    env.advance(60)
    env.step()
    expect_deleted(env, node)
    assert disrupted_total() == 1
    assert pods_disruption_initiated_total() == 2


# ------------------------------------------------------------------ Expiration (DescribeTable)


def test_should_remove_nodeclaims_that_are_expired(disruption_env: DisruptionEnv):
    """Expiration / Expiration / should remove nodeclaims that are expired"""
    env = disruption_env
    node = claim_node(env)
    env.advance(60)
    env.step()
    expect_deleted(env, node)


def test_should_ignore_expired_nodeclaims_that_are_not_managed_by_this_karpenter_instance(
    disruption_env: DisruptionEnv,
):
    """Expiration / Expiration / should ignore expired NodeClaims that are not managed by this Karpenter instance

    The Node keeps its NodePool's label; its NodeClaim (expireAfter 30s) is not karpweb's."""
    env = disruption_env
    node = claim_node(env)
    env.advance(60)
    assert expired_now(env, node)  # karpweb's own NodeClaim of that age would expire
    NodeClaim.objects.filter(node_name=node).delete()
    ClusterNode.objects.filter(name=node).update(nodeclaim="")
    env.step()
    assert disruptions_of(node) == []
    assert ClusterNode.objects.filter(name=node).exists()


# ------------------------------------------------------------------ the rest


def test_should_not_remove_the_nodeclaims_when_expiration_is_disabled(disruption_env: DisruptionEnv):
    """Expiration / should not remove the NodeClaims when expiration is disabled

    expireAfter Never; upstream reconciles at once, the port a year later too."""
    env = disruption_env
    node = claim_node(env, expire_after="Never")
    env.step()
    expect_exists(node)
    env.advance(365 * 24 * 3600)
    env.step()
    expect_exists(node)


def test_should_not_remove_non_expired_nodeclaims(disruption_env: DisruptionEnv):
    """Expiration / should not remove non-expired NodeClaims"""
    env = disruption_env
    node = claim_node(env, expire_after="200s")
    env.step()
    expect_exists(node)


def test_should_delete_nodeclaims_if_the_nodeclaim_is_expired_but_the_node_isn_t(disruption_env: DisruptionEnv):
    """Expiration / should delete NodeClaims if the nodeClaim is expired but the node isn't

    The Node is created 60 s after its NodeClaim (when the NodeClaim has expired)."""
    env = disruption_env
    node = claim_node(env)
    env.advance(60)
    row = ClusterNode.objects.get(name=node)
    row.manifest["metadata"]["creationTimestamp"] = env.now.isoformat().replace("+00:00", "Z")
    row.save(update_fields=["manifest"])
    env.step()
    expect_deleted(env, node)


def test_should_return_the_requeue_interval_for_the_time_between_now_and_when_the_nodeclaim_expires(
    disruption_env: DisruptionEnv,
):
    """Expiration / should return the requeue interval for the time between now and when the nodeClaim expires

    At 100 s of an expireAfter of 200 s, the NodeClaim expires 100 s later (± 1 s): not at
    99 s from now, at 101 s."""
    env = disruption_env
    node = claim_node(env, expire_after="200s")
    env.advance(100)
    assert not expired_now(env, node)
    env.advance(99)
    assert not expired_now(env, node)
    env.advance(2)
    assert expired_now(env, node)


def test_shouldn_t_expire_the_same_nodeclaim_multiple_times(disruption_env: DisruptionEnv):
    """Expiration / shouldn't expire the same NodeClaim multiple times

    Upstream's finalizer keeps the deleted NodeClaim: here a pod whose eviction a
    PodDisruptionBudget refuses keeps the node draining (expireAfter 30s, no
    terminationGracePeriod), so the second round finds it still there."""
    env = disruption_env
    env.apply(node_pool())
    node = claim_node(env)
    env.pod(node=node, labels={"app": "kept"})
    env.pdb(labels={"app": "kept"}, max_unavailable=0)
    env.advance(60)
    env.step()
    (first,) = disruptions_of(node)
    assert (first.reason, first.state) == (EXPIRED, Disruption.State.DRAINING)
    assert NodeClaim.objects.get(node_name=node).state in NodeClaim.ACTIVE_STATES
    assert disrupted_total() == 1
    env.step()
    assert disruptions_of(node) == [first]
    assert disrupted_total() == 1
