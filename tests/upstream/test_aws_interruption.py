"""Upstream's interruption suite (``pkg/controllers/interruption/suite_test.go`` of
``aws/karpenter-provider-aws``), ported.

The environment is ``interruption_env.py``: a real SQS queue of the simulated AWS read by the
consumer's own ``AWSQueue``, DescribeInstanceStatus answered by the simulated AWS's health
layer, the simulated cluster's rows with each node on an instance of the simulated EC2. So:

* ``ExpectMessagesCreated`` is :func:`send` (the messages put in the queue) and
  ``ExpectSingletonReconciled(ctx, controller)`` is :func:`drain_queue` (one ``ReceiveMessage``
  and its batch handled, as ``manage.py interruptions`` handles it). The receive is one call
  by construction; ``DeleteMessage`` calls are the messages it deleted, and
  :func:`left_in` (0) says none is left behind.
* ``ExpectSingletonReconciled(ctx, instanceStatusController)`` is one
  ``check_instance_status()`` (every minute in the worker), at a moment the test passes.
* Upstream deletes the NodeClaim (``ExpectNotFound``; with a finalizer, a DeletionTimestamp):
  here the node is disrupted at once, a ``Disruption`` of the message's kind in ``draining``
  (tainted, its pods going) or ``done``. Upstream's ``karpenter.sh/nodeclaim-termination-timestamp``
  annotation (forceful termination) is the disruption's ``terminate_by``.
* ``ExpectExists`` of a NodeClaim left alone: no disruption of its node, the claim still active.
* The ICE cache is Redis (``provisioning.cloud.ice``), as the provisioner reads it.
* ``karpenter_nodeclaims_disrupted_total`` and ``karpenter_interruption_instance_status_unhealthy_total``
  are read as Prometheus scrapes them (``ClusterState``); karpweb's ``nodeclaims_disrupted``
  carries ``reason``, ``nodepool`` and ``capacity_type`` and the port matches the labels
  upstream names.
* ``interruption.InstanceStatusDryRun`` is the setting ``KARPWEB_INSTANCE_STATUS_DRY_RUN``.
* Upstream's fake provider IDs are instances launched in the simulated EC2 (m5.large spot in
  us-east-1a unless the test says otherwise); ``fake.InstanceID()`` for an instance of no
  NodeClaim is :func:`random_instance_id`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.stub import Stubber
from disruption_env import DisruptionEnv
from interruption_env import (  # noqa: F401  (the *_fixture names register the fixtures)
    aws_fixture,
    capacity_reservation_interruption_message,
    drain_queue,
    impair,
    interruption_env_fixture,
    left_in,
    metric,
    node_on,
    nodes_on,
    queue_fixture,
    random_instance_id,
    scheduled_change_message,
    send,
    spot_interruption_message,
    state_change_message,
)

from provisioning.cloud.base import CloudError
from provisioning.models import Disruption, Interruption, NodeClaim
from provisioning.services import interruption

SOURCE = "aws/karpenter-provider-aws pkg/controllers/interruption/suite_test.go"
COMMIT = "1d927085dd81a9df9301e613f371dac5b4d16bfe"

NOT_PORTED: dict[str, str] = {}

RESERVATION = {
    "karpenter.k8s.aws/capacity-reservation-id": "cr-56fac701cc1951b03",
    "karpenter.k8s.aws/capacity-reservation-type": "default",
}
HOUR = 3600


@pytest.fixture
def env(interruption_env: DisruptionEnv) -> DisruptionEnv:
    return interruption_env


@pytest.fixture
def no_queue(settings):
    """Upstream's ``InterruptionQueue: ""`` of the instance status Its: no queue is consumed;
    DescribeInstanceStatus is checked all the same."""
    settings.KARPWEB_INTERRUPTION_QUEUE = ""


@pytest.fixture
def dry_run(settings, no_queue):
    """``interruption.InstanceStatusDryRun = true``."""
    settings.KARPWEB_INSTANCE_STATUS_DRY_RUN = True


# ------------------------------------------------------------------ helpers


def disruption_of(node: str) -> Disruption | None:
    """The disruption that took ``node`` (upstream's deleted NodeClaim), if any."""
    rows = [d for d in Disruption.objects.order_by("pk") if node in d.nodes]
    return rows[-1] if rows else None


def expect_deleted(node: str, reason: str) -> Disruption:
    """``ExpectNotFound(nodeClaim)``: the node is disrupted at once for ``reason``."""
    found = disruption_of(node)
    assert found is not None, f"{node} was not disrupted"
    assert found.reason == reason
    assert found.state in (Disruption.State.DRAINING, Disruption.State.DONE)
    return found


def expect_exists(node: str) -> None:
    """``ExpectExists(nodeClaim)`` (no DeletionTimestamp): nothing disrupts the node."""
    assert disruption_of(node) is None
    assert NodeClaim.objects.get(node_name=node).state in NodeClaim.ACTIVE_STATES


def disrupted(reason: str) -> float:
    return metric("karpenter_nodeclaims_disrupted_total", reason=reason, nodepool="default")


def unhealthy(category: str) -> float:
    return metric("karpenter_interruption_instance_status_unhealthy_total", category=category)


def check(env: DisruptionEnv, minutes: float = 0):
    """One reconcile of the instance status controller, ``minutes`` after the test's start."""
    return interruption.check_instance_status(now=env.now + timedelta(minutes=minutes))


# ------------------------------------------------------------------ Processing Messages


def test_should_delete_the_nodeclaim_when_receiving_a_spot_interruption_warning(env, aws, queue):
    """InterruptionHandling / Processing Messages / should delete the NodeClaim when receiving a spot interruption warning"""
    node, iid = node_on(env)
    send(queue, spot_interruption_message(iid))
    assert drain_queue(queue) == 1
    assert disrupted("spot_interrupted") == 1
    expect_deleted(node, "spot_interrupted")
    assert left_in(queue) == 0


def test_should_delete_the_nodeclaim_when_receiving_a_capacity_reservation_interruption_warning(env, aws, queue):
    """InterruptionHandling / Processing Messages / should delete the NodeClaim when receiving a capacity reservation interruption warning

    The NodeClaim carries upstream's capacity reservation labels (id and type); the environment's
    catalog has no reservation, so the node is priced as on-demand."""
    node, iid = node_on(env, capacity_type="on-demand", labels=RESERVATION)
    send(queue, capacity_reservation_interruption_message(iid))
    assert drain_queue(queue) == 1
    assert disrupted("capacity_reservation_interrupted") == 1
    expect_deleted(node, "capacity_reservation_interrupted")
    assert left_in(queue) == 0


def test_should_mark_the_capacity_reservation_as_unavailable_when_getting_an_interruption_warning(env, aws, queue):
    """InterruptionHandling / Processing Messages / should mark the capacity reservation as unavailable when getting an interruption warning

    Upstream's availability cache is the EC2NodeClass's ``status.capacityReservations`` (the
    count each entry has left, which the reserved offerings read): set to 0 for the reservation."""
    from provisioning.models import EC2NodeClass

    rid = RESERVATION["karpenter.k8s.aws/capacity-reservation-id"]
    entry = {"id": rid, "instanceType": "m5.large", "availabilityZone": "us-east-1a", "availableInstanceCount": 5}
    other = {**entry, "id": "cr-0other"}
    EC2NodeClass.objects.filter(name="default").update(status={"capacityReservations": [entry, other]})
    node, iid = node_on(env, capacity_type="on-demand", labels=RESERVATION)
    send(queue, capacity_reservation_interruption_message(iid))
    assert drain_queue(queue) == 1
    counts = {
        e["id"]: e["availableInstanceCount"]
        for e in EC2NodeClass.objects.get(name="default").status["capacityReservations"]
    }
    assert counts == {rid: 0, "cr-0other": 5}
    expect_deleted(node, "capacity_reservation_interrupted")


def test_should_delete_the_nodeclaim_when_receiving_a_scheduled_change_message(env, aws, queue):
    """InterruptionHandling / Processing Messages / should delete the NodeClaim when receiving a scheduled change message"""
    node, iid = node_on(env)
    send(queue, scheduled_change_message(iid))
    assert drain_queue(queue) == 1
    assert disrupted("scheduled_change") == 1
    expect_deleted(node, "scheduled_change")
    assert left_in(queue) == 0


def test_should_delete_the_nodeclaim_when_receiving_a_state_change_message(env, aws, queue):
    """InterruptionHandling / Processing Messages / should delete the NodeClaim when receiving a state change message"""
    states = ["terminated", "stopped", "stopping", "shutting-down"]
    nodes = nodes_on(env, len(states))
    send(queue, *(state_change_message(iid, state) for (_, iid), state in zip(nodes, states, strict=True)))
    assert drain_queue(queue) == 4
    assert disrupted("instance_terminated") == 2
    assert disrupted("instance_stopped") == 2
    for (node, _), state in zip(nodes, states, strict=True):
        expect_deleted(node, "instance_stopped" if state.startswith("stop") else "instance_terminated")
    assert left_in(queue) == 0


def _multiple_messages(env, queue, builder, kind: str) -> None:
    """Upstream's 100 NodeClaims and 100 messages in one ReceiveMessage: SQS hands out at most
    10 a call, so here the consumer receives until the queue hands out nothing more, each batch
    handled as one reconcile. A message whose handling failed would stay (invisible for 20 s):
    every one is deleted the first time it is received."""
    from provisioning.services.interruption import handle_batch

    nodes = nodes_on(env, 100)
    send(queue, *(builder(iid) for _, iid in nodes))
    received = deleted = 0
    for _ in range(30):
        batch = queue.receive(10, 1, 20)
        if not batch:
            break
        received += len(batch)
        deleted += handle_batch(queue, batch)
    assert received == deleted == 100
    assert left_in(queue) == 0
    assert Interruption.objects.filter(deleted=True).count() == 100
    for node, _ in nodes:
        expect_deleted(node, kind)


@pytest.mark.slow
def test_should_handle_multiple_messages_that_cause_nodeclaim_deletion_with_spot_interruption_messages(env, aws, queue):
    """InterruptionHandling / Processing Messages / should handle multiple messages that cause nodeClaim deletion / with spot interruption messages"""
    _multiple_messages(env, queue, spot_interruption_message, "spot_interrupted")


@pytest.mark.slow
def test_should_handle_multiple_messages_that_cause_nodeclaim_deletion_with_capacity_reservation_interruption_messages(
    env, aws, queue
):
    """InterruptionHandling / Processing Messages / should handle multiple messages that cause nodeClaim deletion / with capacity reservation interruption messages"""
    _multiple_messages(env, queue, capacity_reservation_interruption_message, "capacity_reservation_interrupted")


def test_should_delete_a_message_when_the_message_can_t_be_parsed(env, aws, queue):
    """InterruptionHandling / Processing Messages / should delete a message when the message can't be parsed

    ``{"field1": "value1", "field2": "value2"}`` is no EventBridge event karpweb knows (no version,
    source or detail-type): a no-op, as upstream's parser makes it, and deleted."""
    send(queue, '{"field1": "value1", "field2": "value2"}')
    assert drain_queue(queue) == 1
    assert left_in(queue) == 0
    (row,) = Interruption.objects.all()
    assert row.deleted and row.disruption is None


def test_should_delete_a_state_change_message_when_the_state_isn_t_in_accepted_states(env, aws, queue):
    """InterruptionHandling / Processing Messages / should delete a state change message when the state isn't in accepted states"""
    node, iid = node_on(env)
    send(queue, state_change_message(iid, "creating"))
    assert drain_queue(queue) == 1
    expect_exists(node)
    assert left_in(queue) == 0


def test_should_mark_the_ice_cache_for_the_offering_when_getting_a_spot_interruption_warning(env, aws, queue):
    """InterruptionHandling / Processing Messages / should mark the ICE cache for the offering when getting a spot interruption warning

    Upstream's t3.large spot in ``coretest-zone-1a`` is t3.large spot in us-east-1a."""
    from provisioning.cloud import ice
    from provisioning.services.connections import get_redis

    node, iid = node_on(env, instance_type="t3.large", zone="us-east-1a", capacity_type="spot")
    assert not ice.is_unavailable(get_redis(), "spot", "t3.large", "us-east-1a")
    send(queue, spot_interruption_message(iid))
    assert drain_queue(queue) == 1
    expect_deleted(node, "spot_interrupted")
    assert left_in(queue) == 0
    assert ice.is_unavailable(get_redis(), "spot", "t3.large", "us-east-1a")


# ------------------------------------------------------------------ DescribeInstanceStatus


def test_should_forcefully_terminate_the_nodeclaim_when_an_instance_is_unhealthy_due_to_ec2_system_status_checks(
    env, aws, no_queue
):
    """InterruptionHandling / Processing Messages / should forcefully terminate the NodeClaim when an instance is unhealthy due to EC2 system status checks

    Upstream's instance check ``initializing`` beside the failed system check is the simulated
    layer's instance check left ``ok``: only the system check counts either way."""
    node, iid = node_on(env)
    impair(aws, [iid], check="system", impairedSeconds=HOUR)
    check(env)
    assert disrupted("system_status") == 1
    assert unhealthy("SystemStatus") == 1
    assert expect_deleted(node, "system_status").terminate_by is not None


def test_should_forcefully_terminate_the_nodeclaim_when_an_instance_has_instancestatus_check_failure(
    env, aws, no_queue
):
    """InterruptionHandling / Processing Messages / should forcefully terminate the NodeClaim when an instance has InstanceStatus check failure"""
    node, iid = node_on(env)
    impair(aws, [iid], check="instance", impairedSeconds=HOUR)
    check(env)
    assert disrupted("instance_status") == 1
    assert unhealthy("InstanceStatus") == 1
    assert expect_deleted(node, "instance_status").terminate_by is not None


def test_should_annotate_the_nodeclaim_with_a_termination_timestamp_for_forceful_termination(env, aws, no_queue):
    """InterruptionHandling / Processing Messages / should annotate the NodeClaim with a termination timestamp for forceful termination

    Upstream's finalizer keeps the NodeClaim with its DeletionTimestamp: here the node is
    still there, draining, its disruption forceful from the check's moment. With a pod on it
    behind a PodDisruptionBudget that allows nothing, the forceful drain deletes it all the same."""
    node, iid = node_on(env, pods=1)
    env.pdb(labels={"app": "web"}, max_unavailable=0)
    impair(aws, [iid], check="system", impairedSeconds=HOUR)
    check(env)
    forced = expect_deleted(node, "system_status")
    assert forced.state == Disruption.State.DRAINING and node in env.node_names()
    assert forced.terminate_by == env.now
    assert len(env.cluster.deleted_pods) == 1 and not env.cluster.evictions


def test_should_not_annotate_the_nodeclaim_with_a_termination_timestamp_for_scheduled_maintenance_events(
    env, aws, no_queue
):
    """InterruptionHandling / Processing Messages / should NOT annotate the NodeClaim with a termination timestamp for scheduled maintenance events

    A scheduled event drains as a message from the queue does: through the PodDisruptionBudget,
    which keeps the pod on the node."""
    node, iid = node_on(env, pods=1)
    env.pdb(labels={"app": "web"}, max_unavailable=0)
    impair(aws, [iid], event="instance-retirement")
    check(env)
    forced = expect_deleted(node, "event_status")
    assert forced.state == Disruption.State.DRAINING and node in env.node_names()
    assert forced.terminate_by is None
    assert not env.cluster.deleted_pods and len(env.cluster.refused) == 1


def test_should_forcefully_terminate_when_an_instance_has_both_system_status_failure_and_a_scheduled_event(
    env, aws, no_queue
):
    """InterruptionHandling / Processing Messages / should forcefully terminate when an instance has both system status failure and a scheduled event"""
    node, iid = node_on(env, pods=1)
    impair(aws, [iid], check="system", impairedSeconds=HOUR)
    impair(aws, [iid], event="instance-retirement")
    check(env)
    forced = expect_deleted(node, "system_status")
    assert forced.state == Disruption.State.DRAINING and node in env.node_names()
    assert forced.terminate_by is not None
    assert [d.pk for d in env.disruptions()] == [forced.pk]  # the scheduled event's drain is the same


def test_should_not_re_annotate_the_nodeclaim_on_subsequent_reconciles(env, aws, no_queue):
    """InterruptionHandling / Processing Messages / should not re-annotate the NodeClaim on subsequent reconciles

    Upstream's unchanged resourceVersion: the disruption and the NodeClaim rows are unchanged by
    the next poll, a minute later."""
    from django.forms.models import model_to_dict

    node, iid = node_on(env, pods=1)
    impair(aws, [iid], check="system", impairedSeconds=HOUR)
    check(env)
    forced = expect_deleted(node, "system_status")
    assert forced.terminate_by == env.now
    before = (model_to_dict(forced), model_to_dict(NodeClaim.objects.get(node_name=node)))
    check(env, minutes=1)
    forced.refresh_from_db()
    assert forced.terminate_by == env.now
    assert (model_to_dict(forced), model_to_dict(NodeClaim.objects.get(node_name=node))) == before
    assert len(env.disruptions()) == 1


def test_should_delete_the_nodeclaim_when_an_instance_has_a_scheduled_maintenance_event(env, aws, no_queue):
    """InterruptionHandling / Processing Messages / should delete the NodeClaim when an instance has a scheduled maintenance event"""
    node, iid = node_on(env)
    impair(aws, [iid], event="instance-retirement")
    check(env)
    assert disrupted("event_status") == 1
    assert unhealthy("EventStatus") == 1
    expect_deleted(node, "event_status")


def test_should_not_delete_the_nodeclaim_when_dry_run_is_enabled_but_should_still_emit_the_metric(env, aws, dry_run):
    """InterruptionHandling / Processing Messages / should NOT delete the NodeClaim when dry run is enabled but should still emit the metric"""
    node, iid = node_on(env)
    impair(aws, [iid], check="instance", impairedSeconds=HOUR)
    check(env)
    assert unhealthy("InstanceStatus") == 1
    expect_exists(node)


def test_should_only_emit_the_metric_once_across_multiple_reconciles_for_the_same_unhealthy_instance(env, aws, dry_run):
    """InterruptionHandling / Processing Messages / should only emit the metric once across multiple reconciles for the same unhealthy instance"""
    _, iid = node_on(env)
    impair(aws, [iid], check="instance", impairedSeconds=HOUR)
    for minute in range(3):
        check(env, minutes=minute)
    assert unhealthy("InstanceStatus") == 1


def test_should_emit_the_metric_for_each_unique_unhealthy_instance(env, aws, dry_run):
    """InterruptionHandling / Processing Messages / should emit the metric for each unique unhealthy instance"""
    nodes = nodes_on(env, 2)
    impair(aws, [iid for _, iid in nodes], check="instance", impairedSeconds=HOUR)
    check(env)
    assert unhealthy("InstanceStatus") == 2
    check(env, minutes=1)
    assert unhealthy("InstanceStatus") == 2


def test_should_re_emit_the_metric_when_an_instance_recovers_and_becomes_unhealthy_again(env, aws, dry_run):
    """InterruptionHandling / Processing Messages / should re-emit the metric when an instance recovers and becomes unhealthy again"""
    _, iid = node_on(env)
    impair(aws, [iid], check="instance", impairedSeconds=HOUR)
    check(env)
    assert unhealthy("InstanceStatus") == 1
    impair(aws, [iid], check="ok")  # recovered: no longer in the DescribeInstanceStatus answer
    check(env, minutes=1)
    impair(aws, [iid], check="instance", impairedSeconds=HOUR)
    check(env, minutes=2)
    assert unhealthy("InstanceStatus") == 2


# ------------------------------------------------------------------ Error Handling


def test_should_send_an_error_on_polling_when_queuenotexists(env, aws):
    """Error Handling / should send an error on polling when QueueNotExists

    Upstream's fake SQS answers ReceiveMessage with ``QueueDoesNotExist``; here the queue the
    consumer is given does not exist in the simulated AWS, so the poll fails at its URL's
    lookup (``GetQueueUrl``) and the error reaches the consumer's loop."""
    from provisioning.services.cloud import get_cloud

    source = get_cloud().interruption_queue(f"no-such-queue-{random_instance_id()}")
    with pytest.raises(CloudError, match="GetQueueUrl") as raised:
        interruption.consume(source, lambda: False)
    assert "NonExistentQueue" in str(raised.value) or "QueueDoesNotExist" in str(raised.value)
    assert not Interruption.objects.exists()


def test_should_send_an_error_on_polling_when_accessdenied(env, aws, queue):
    """Error Handling / should send an error on polling when AccessDenied

    The simulated AWS enforces no IAM: as upstream sets its fake SQS's ReceiveMessage error,
    the consumer's own SQS client answers ReceiveMessage with ``AccessDenied`` (botocore's
    Stubber), and the error reaches the consumer's loop."""
    assert queue.url  # looked up before ReceiveMessage fails
    with Stubber(queue.sqs) as stub:
        stub.add_client_error("receive_message", service_error_code="AccessDenied", http_status_code=403)
        with pytest.raises(CloudError, match="ReceiveMessage") as raised:
            interruption.consume(queue, lambda: False)
    assert "AccessDenied" in str(raised.value)
    assert not Interruption.objects.exists()


def _already_deleted(queue, builder) -> None:
    send(queue, builder(random_instance_id()))
    assert drain_queue(queue) == 1  # handled without an error, and deleted
    assert left_in(queue) == 0
    (row,) = Interruption.objects.all()
    assert row.deleted and row.disruption is None and "no NodeClaim" in row.action


def test_should_not_return_an_error_when_deleting_a_nodeclaim_that_is_already_deleted_with_spot_interruption_messages(
    env, aws, queue
):
    """Error Handling / should not return an error when deleting a nodeClaim that is already deleted / with spot interruption messages"""
    _already_deleted(queue, spot_interruption_message)


def test_should_not_return_an_error_when_deleting_a_nodeclaim_that_is_already_deleted_with_capacity_reservation_interruption_messages(
    env, aws, queue
):
    """Error Handling / should not return an error when deleting a nodeClaim that is already deleted / with capacity reservation interruption messages"""
    _already_deleted(queue, capacity_reservation_interruption_message)
