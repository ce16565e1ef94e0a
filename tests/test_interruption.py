"""Interruptions end to end: events go through the simulated AWS's EventBridge rules (or straight
into its SQS queue, as upstream's suite sends them), the consumer's batch handling reads them
with boto3 over HTTP, and the nodes are disrupted on the simulated cluster; instance health from
DescribeInstanceStatus; node repair from node conditions."""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest

sys.path.insert(0, str(Path(__file__).parent / "upstream"))

from disruption_env import DisruptionEnv, RecordingCluster, node_pool  # noqa: E402

from provisioning.cloud import messages  # noqa: E402
from provisioning.models import ClusterNode, ClusterPod, Disruption, Interruption, NodeClaim  # noqa: E402

ACCOUNT = "123456789012"


# ------------------------------------------------------------------ the parser (pure)


def envelope(source: str, detail_type: str, detail: dict, *, version: str = "0", resources=()) -> str:
    return json.dumps(
        {
            "version": version,
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": ACCOUNT,
            "time": "2026-12-03T10:00:00Z",
            "region": "us-east-1",
            "resources": list(resources),
            "detail": detail,
        }
    )


def spot(instance: str) -> str:
    return envelope(*messages.SPOT_WARNING, {"instance-id": instance, "instance-action": "terminate"})


def state(instance: str, value: str) -> str:
    return envelope(*messages.STATE_CHANGE, {"instance-id": instance, "state": value})


def health(*instances: str, service: str = "EC2", category: str = "scheduledChange") -> str:
    return envelope(
        *messages.HEALTH_EVENT,
        {
            "service": service,
            "eventTypeCategory": category,
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "affectedEntities": [{"entityValue": i} for i in instances],
        },
    )


@pytest.mark.parametrize(
    ("body", "kind", "ids"),
    [
        (spot("i-1"), messages.SPOT_INTERRUPTED, ("i-1",)),
        (envelope(*messages.REBALANCE, {"instance-id": "i-2"}), messages.REBALANCE_RECOMMENDATION, ("i-2",)),
        (health("i-3", "i-4"), messages.SCHEDULED_CHANGE, ("i-3", "i-4")),
        (state("i-5", "stopping"), messages.INSTANCE_STOPPED, ("i-5",)),
        (state("i-5", "Stopped"), messages.INSTANCE_STOPPED, ("i-5",)),
        (state("i-6", "shutting-down"), messages.INSTANCE_TERMINATED, ("i-6",)),
        (state("i-6", "terminated"), messages.INSTANCE_TERMINATED, ("i-6",)),
        (
            envelope(*messages.RESERVATION_WARNING, {"instance-id": "i-7", "instance-action": "terminate"}),
            messages.CAPACITY_RESERVATION_INTERRUPTED,
            ("i-7",),
        ),
        # No-ops: counted and deleted, nothing done.
        (state("i-8", "running"), messages.NO_OP, ()),
        (state("i-8", "pending"), messages.NO_OP, ()),
        (health("i-9", service="EBS"), messages.NO_OP, ()),
        (health("i-9", category="issue"), messages.NO_OP, ()),
        (envelope("aws.ec2", "EC2 Something Else", {"instance-id": "i-1"}), messages.NO_OP, ()),
        (spot("i-1").replace('"version": "0"', '"version": "1"'), messages.NO_OP, ()),
        ("", messages.NO_OP, ()),
    ],
)
def test_the_parser_dispatches_on_version_source_and_detail_type(body, kind, ids):
    parsed = messages.parse(body)
    assert (parsed.kind, parsed.instance_ids) == (kind, ids)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not an EventBridge event object"),
        (envelope(*messages.SPOT_WARNING, {"instance-action": "terminate"}), "detail.instance-id"),
        (json.dumps({"version": "0", "source": "aws.ec2", "detail-type": messages.SPOT_WARNING[1]}), "detail"),
        (spot("i-1").replace("2026-12-03T10:00:00Z", "yesterday"), "time"),
    ],
)
def test_a_message_that_does_not_parse_says_why(body, says):
    with pytest.raises(messages.UnparsableMessage, match=says):
        messages.parse(body)


# ------------------------------------------------------------------ against the simulated AWS


@pytest.fixture
def aws(simulated_aws, monkeypatch):
    from provisioning.services import cloud

    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    cloud.get_cloud.cache_clear()  # a cloud an earlier test made for other credentials
    yield simulated_aws
    cloud.get_cloud.cache_clear()


@pytest.fixture
def queue(aws):
    """A queue of this test's own, and the real consumer's view of it."""
    from provisioning.services.cloud import get_cloud

    sqs = boto3.client("sqs", **aws.client_kwargs())
    name = f"interruptions-{uuid.uuid4().hex[:8]}"
    sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "300"})
    source = get_cloud().interruption_queue(name)
    source.sqs_client = sqs
    yield source
    sqs.delete_queue(QueueUrl=source.url)


@pytest.fixture
def env(db, redis_url, settings, monkeypatch, aws):
    """The simulated cluster (recording its events) over the real cloud: the simulated AWS."""
    from provisioning import cluster as cluster_package
    from provisioning.services import connections
    from provisioning.services import disruption as service

    settings.REDIS_URL = redis_url
    connections.reset()
    connections.get_redis().flushdb()
    recording = RecordingCluster()
    monkeypatch.setattr(service, "get_cluster", lambda: recording)
    monkeypatch.setattr(cluster_package, "get_cluster", lambda: recording)
    environment = DisruptionEnv(recording)
    environment.apply(node_pool())
    yield environment
    connections.reset()


def instance(aws, instance_type: str = "m5.large", zone: str = "us-east-1a", spot_market: bool = True) -> str:
    ec2 = boto3.client("ec2", **aws.client_kwargs())
    image = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amazon-eks-node-al2023-*"]}])
    subnet = next(s["SubnetId"] for s in ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == zone)
    launch = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot_market else {}
    # Tagged as karpweb tags what it launches, so the cloud lists it as this cluster's.
    tags = [
        {"Key": "kubernetes.io/cluster/my-cluster", "Value": "owned"},
        {"Key": "karpenter.sh/nodepool", "Value": "default"},
    ]
    launch["TagSpecifications"] = [{"ResourceType": "instance", "Tags": tags}]
    reservation = ec2.run_instances(
        ImageId=image["Images"][0]["ImageId"],
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        **launch,
    )
    return reservation["Instances"][0]["InstanceId"]


def node_on(env: DisruptionEnv, aws, *, pods: int = 3, capacity_type: str = "spot", **options) -> tuple[str, str]:
    """A node of the NodePool on a real (simulated) instance, with ``pods`` pods on it."""
    instance_type = options.pop("instance_type", "m5.large")
    iid = instance(aws, instance_type, spot_market=capacity_type == "spot")
    node = env.node(instance_type=instance_type, capacity_type=capacity_type, **options)
    NodeClaim.objects.filter(node_name=node).update(instance_id=iid)
    ClusterNode.objects.filter(name=node).update(instance_id=iid)
    env.pods(pods, node=node, labels={"app": "web"})
    return node, iid


def send(queue, body: str) -> None:
    queue.sqs_client.send_message(QueueUrl=queue.url, MessageBody=body)


def drain_queue(queue, *, wait: int = 1) -> int:
    """One receive and its batch handled, as the consumer does it."""
    from provisioning.services.interruption import handle_batch

    return handle_batch(queue, queue.receive(10, wait, 20))


def left_in(queue) -> int:
    attributes = queue.sqs_client.get_queue_attributes(
        QueueUrl=queue.url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def reasons(env: DisruptionEnv) -> list[str]:
    return [e.reason for e in env.cluster.events]


def test_a_spot_interruption_through_eventbridge_drains_the_node_and_avoids_its_offering(env, aws, queue):
    from provisioning.cloud import ice
    from provisioning.services.connections import get_redis
    from provisioning.services.provision import read_inputs

    node, iid = node_on(env, aws)
    events = boto3.client("events", **aws.client_kwargs())
    rule = f"spot-{uuid.uuid4().hex[:6]}"
    pattern = {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]}
    events.put_rule(Name=rule, EventPattern=json.dumps(pattern))
    arn = queue.sqs_client.get_queue_attributes(QueueUrl=queue.url, AttributeNames=["QueueArn"])["Attributes"]
    events.put_targets(Rule=rule, Targets=[{"Id": "queue", "Arn": arn["QueueArn"]}])
    try:
        events.put_events(
            Entries=[
                {
                    "Source": "aws.ec2",
                    "DetailType": "EC2 Spot Instance Interruption Warning",
                    "Detail": json.dumps({"instance-id": iid, "instance-action": "terminate"}),
                    "Resources": [f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/{iid}"],
                }
            ]
        )
        assert drain_queue(queue) == 1
    finally:
        events.remove_targets(Rule=rule, Ids=["queue"])
        events.delete_rule(Name=rule)

    (forced,) = env.disruptions()
    assert (forced.reason, forced.nodes, forced.state) == ("spot_interrupted", [node], Disruption.State.DRAINING)
    assert forced.terminate_by is None  # a normal drain: PDBs and do-not-disrupt until the grace period
    assert env.tainted(node)
    assert {"SpotInterrupted", "TerminatingOnInterruption"} <= set(reasons(env))
    assert ice.is_unavailable(get_redis(), "spot", "m5.large", "us-east-1a")
    assert 170 <= get_redis().ttl(ice.PREFIX + "spot:m5.large:us-east-1a") <= 180
    (row,) = Interruption.objects.all()
    assert (row.kind, row.instance_id, row.node, row.deleted) == ("spot_interrupted", iid, node, True)
    assert left_in(queue) == 0
    # Evicted at once (no PDB here): their new capacity is planned by the next provisioning run.
    assert len(env.cluster.evictions) == 3
    inputs = read_inputs()
    assert inputs is not None and {p.key for p in inputs.pending} == set(env.cluster.evictions)


def test_the_pods_of_an_interrupted_node_count_as_pending_while_it_drains(env, aws, queue):
    """A PodDisruptionBudget lets one pod go at a time: the provisioning run plans for the others
    still on the node as well as for the one evicted."""
    from provisioning.services.provision import read_inputs, solve_inputs

    node, iid = node_on(env, aws, pods=4)
    env.pdb(labels={"app": "web"}, max_unavailable=1)
    send(queue, spot(iid))
    assert drain_queue(queue) == 1
    assert len(env.cluster.evictions) == 1 and len(env.cluster.refused) == 3
    inputs = read_inputs()
    assert inputs is not None
    assert [p.key for p in inputs.pending] == env.cluster.evictions
    assert {p.key for p in inputs.displaced} == set(env.cluster.refused)
    solved = solve_inputs(inputs=inputs)
    planned = {key for claim in solved.plan.claims for key in claim.pods}
    assert planned == {p.key for p in [*inputs.pending, *inputs.displaced]}
    # The interrupted offering is not among the new claim's options.
    assert all(
        (o.instance_type, o.zone, o.capacity_type) != ("m5.large", "us-east-1a", "spot")
        for claim in solved.plan.claims
        for o in claim.options
    )


def test_a_scheduled_change_drains_every_affected_instance(env, aws, queue):
    first, a = node_on(env, aws, pods=1)
    second, b = node_on(env, aws, pods=1)
    send(queue, health(a, b))
    assert drain_queue(queue) == 1
    assert {tuple(d.nodes) for d in env.disruptions()} == {(first,), (second,)}
    assert {d.reason for d in env.disruptions()} == {"scheduled_change"}
    assert reasons(env).count("InstanceUnhealthy") == 4  # on each NodeClaim and each Node


@pytest.mark.parametrize(
    ("value", "kind", "event"),
    [
        ("stopping", "instance_stopped", "InstanceStopping"),
        ("shutting-down", "instance_terminated", "InstanceTerminating"),
    ],
)
def test_a_state_change_drains_the_node(env, aws, queue, value, kind, event):
    node, iid = node_on(env, aws, pods=1)
    send(queue, state(iid, value))
    assert drain_queue(queue) == 1
    (forced,) = env.disruptions()
    assert (forced.reason, forced.nodes) == (kind, [node])
    assert event in reasons(env)


def test_a_state_change_that_is_not_a_stop_or_termination_is_deleted_and_does_nothing(env, aws, queue):
    _, iid = node_on(env, aws, pods=1)
    send(queue, state(iid, "running"))
    assert drain_queue(queue) == 1
    assert not env.disruptions()
    assert left_in(queue) == 0
    assert Interruption.objects.get().kind == "no_op"


def test_a_rebalance_recommendation_is_an_event_only_by_default(env, aws, queue):
    node, iid = node_on(env, aws, pods=1)
    send(queue, envelope(*messages.REBALANCE, {"instance-id": iid}))
    assert drain_queue(queue) == 1
    assert not env.disruptions()
    assert "SpotRebalanceRecommendation" in reasons(env)
    assert "karpweb.io/rebalance" in Interruption.objects.get().action


def test_a_rebalance_recommendation_replaces_the_node_when_the_nodepool_asks_within_its_budget(env, aws, queue):
    from provisioning.models import NodePool

    NodePool.objects.filter(name="default").update(annotations={"karpweb.io/rebalance": "replace"})
    node, iid = node_on(env, aws, pods=1)
    send(queue, envelope(*messages.REBALANCE, {"instance-id": iid}))
    assert drain_queue(queue) == 1
    (forced,) = env.disruptions()
    assert (forced.reason, forced.nodes) == ("rebalance_recommendation", [node])


def test_a_rebalance_recommendation_waits_for_the_disruption_budget(env, aws, queue):
    from provisioning.models import NodePool

    env.apply(node_pool(budgets=[{"nodes": "0"}]))
    NodePool.objects.filter(name="default").update(annotations={"karpweb.io/rebalance": "replace"})
    _, iid = node_on(env, aws, pods=1)
    send(queue, envelope(*messages.REBALANCE, {"instance-id": iid}))
    assert drain_queue(queue) == 1
    assert not env.disruptions()
    assert "budget allows no more nodes" in Interruption.objects.get().action


def test_pods_a_budget_blocks_for_good_stay_put_as_upstream_plans_them(env, aws, queue):
    """maxUnavailable 0: no new capacity for them (upstream's CurrentlyReschedulablePods); they
    go at the node's terminationGracePeriod, or with the instance."""
    from provisioning.services.provision import read_inputs, solve_inputs

    node_on(env, aws, pods=2)
    env.pdb(labels={"app": "web"}, max_unavailable=0)
    send(queue, spot(ClusterNode.objects.get().instance_id))
    drain_queue(queue)
    inputs = read_inputs()
    assert inputs is not None and len(inputs.displaced) == 2
    assert solve_inputs(inputs=inputs).plan.claims == ()


def test_a_message_for_an_instance_this_cluster_does_not_own_is_deleted_quietly(env, aws, queue):
    send(queue, spot("i-0123456789abcdef0"))
    assert drain_queue(queue) == 1
    assert not env.disruptions() and left_in(queue) == 0
    assert "no NodeClaim" in Interruption.objects.get().action


def test_a_message_that_does_not_parse_is_logged_counted_and_deleted(env, aws, queue, caplog):
    send(queue, "{this is not an event")
    assert drain_queue(queue) == 1
    assert left_in(queue) == 0
    row = Interruption.objects.get()
    assert (row.kind, row.deleted) == ("unparsable", True)
    assert "does not parse" in caplog.text


def test_a_message_whose_handling_fails_comes_back_after_the_visibility_timeout(env, aws, queue, monkeypatch):
    from provisioning.services import disruption as service
    from provisioning.services.interruption import handle_batch

    node, iid = node_on(env, aws, pods=1)
    send(queue, spot(iid))

    def broken(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(service, "force", broken)
    assert handle_batch(queue, queue.receive(10, 1, 1)) == 0  # not deleted
    assert left_in(queue) == 1
    monkeypatch.undo()
    for key, value in aws.env().items():
        monkeypatch.setenv(key, value)
    import time

    time.sleep(1.2)  # the visibility timeout of 1 s
    assert handle_batch(queue, queue.receive(10, 2, 20)) == 1
    assert [d.nodes for d in env.disruptions()] == [[node]]
    assert Interruption.objects.count() == 1  # the redelivery found its row


def test_a_second_message_for_a_draining_node_changes_nothing(env, aws, queue):
    node, iid = node_on(env, aws, pods=1)
    send(queue, spot(iid))
    send(queue, state(iid, "terminated"))
    assert drain_queue(queue) + drain_queue(queue) == 2
    assert len(env.disruptions()) == 1


def test_an_interruption_takes_over_a_node_a_consolidation_only_planned(env, aws, queue):
    node, iid = node_on(env, aws, pods=1)
    planned = Disruption.objects.create(reason="Underutilized", nodes=[node], planned_at=env.now)
    send(queue, spot(iid))
    assert drain_queue(queue) == 1
    planned.refresh_from_db()
    assert planned.state == Disruption.State.CANCELLED
    assert env.disruptions(Disruption.State.DRAINING)[0].reason == "spot_interrupted"


def test_the_interrupted_node_is_terminated_once_drained(env, aws, queue):
    from provisioning.services import disruption as service

    node, iid = node_on(env, aws, pods=2)
    send(queue, spot(iid))
    drain_queue(queue)
    service.run(timezone_now() + timedelta(seconds=10))  # past the minimum drain time
    assert not ClusterNode.objects.filter(name=node).exists()
    ec2 = boto3.client("ec2", **aws.client_kwargs())
    (reservation,) = ec2.describe_instances(InstanceIds=[iid])["Reservations"]
    assert reservation["Instances"][0]["State"]["Name"] in ("shutting-down", "terminated")
    assert env.disruptions()[0].state == Disruption.State.DONE


def timezone_now():
    from django.utils import timezone

    return timezone.now()


# ------------------------------------------------------------------ node repair


def unhealthy(node: str, condition: str = "Ready", status: str = "False", minutes: float = 31) -> None:
    row = ClusterNode.objects.get(name=node)
    since = (datetime.now(UTC) - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [c for c in row.manifest.get("status", {}).get("conditions", []) if c.get("type") != condition]
    conditions.append({"type": condition, "status": status, "lastTransitionTime": since})
    row.manifest.setdefault("status", {})["conditions"] = conditions
    row.ready = condition != "Ready"
    row.save()


def test_node_repair_terminates_a_node_not_ready_for_30_minutes_forcefully(env, aws):
    from provisioning.services import repair

    nodes = [node_on(env, aws, pods=2, capacity_type="on-demand")[0] for _ in range(5)]
    env.pdb(labels={"app": "web"}, max_unavailable=0)
    unhealthy(nodes[0])
    (row,) = repair.repair()
    assert (row.kind, row.node, row.detail["condition"]) == ("unhealthy", nodes[0], "Ready")
    (forced,) = env.disruptions()
    assert forced.terminate_by is not None and forced.reason == "unhealthy"
    # Forceful: the PodDisruptionBudget does not hold the pods.
    assert len(env.cluster.deleted_pods) == 2 and not env.cluster.evictions


def test_node_repair_waits_for_the_toleration(env, aws):
    from provisioning.services import repair

    node, _ = node_on(env, aws, pods=0, capacity_type="on-demand")
    unhealthy(node, minutes=29)
    unhealthy(node, "AcceleratedHardwareReady", minutes=9)
    assert repair.repair() == [] and not env.disruptions()
    unhealthy(node, "AcceleratedHardwareReady", minutes=11)
    (row,) = repair.repair()
    assert row.detail["condition"] == "AcceleratedHardwareReady"


def test_node_repair_leaves_a_nodepool_alone_when_more_than_20_percent_is_unhealthy(env, aws):
    from provisioning.services import repair

    nodes = [node_on(env, aws, pods=0, capacity_type="on-demand")[0] for _ in range(5)]
    unhealthy(nodes[0])
    unhealthy(nodes[1], "Ready", "Unknown", minutes=1)  # matches a policy: counts, though not due
    assert repair.repair() == []
    assert "NodeRepairBlocked" in reasons(env)
    blocked = [e for e in env.cluster.events if e.reason == "NodeRepairBlocked"]
    assert blocked[0].message == "more than 20% nodes are unhealthy in the nodepool"
    # Looked at again only after 5 minutes, whatever changed meanwhile.
    unhealthy(nodes[1], "Ready", "True", minutes=1)
    assert repair.repair() == []


def test_node_repair_rounds_up_the_share_of_a_small_nodepool(env, aws):
    from provisioning.services import repair

    nodes = [node_on(env, aws, pods=0, capacity_type="on-demand")[0] for _ in range(3)]
    unhealthy(nodes[0])  # 1 of 3 (33%) is within 20% of 3 rounded up
    assert [r.node for r in repair.repair()] == [nodes[0]]


def test_node_repair_policies_and_share_are_settings(env, aws, settings):
    from provisioning.services import repair

    settings.KARPWEB_REPAIR_POLICIES = "NetworkingReady=False:1m"
    settings.KARPWEB_REPAIR_MAX_UNHEALTHY = "100%"
    nodes = [node_on(env, aws, pods=0, capacity_type="on-demand")[0] for _ in range(2)]
    unhealthy(nodes[0])  # Ready=False is no policy now
    unhealthy(nodes[1], "NetworkingReady", minutes=2)
    assert [r.node for r in repair.repair()] == [nodes[1]]
    with pytest.raises(ValueError, match="KARPWEB_REPAIR_POLICIES"):
        repair.policies("Ready:30m")


def test_the_pods_running_again_figure(env, aws, queue):
    from provisioning.cluster import simulated
    from provisioning.services.interruption import pods_running_again
    from provisioning.services.simulate import default_solver

    node, iid = node_on(env, aws, pods=2, capacity_type="on-demand")
    other = env.node(instance_type="m5.2xlarge")
    send(queue, spot(iid))
    drain_queue(queue)
    row = Interruption.objects.get()
    assert pods_running_again(row) is None  # evicted, not bound yet
    simulated.bind_pending(default_solver())
    assert set(
        ClusterPod.objects.filter(name__in=[p.split("/")[1] for p in row.pods]).values_list("node_name", flat=True)
    ) == {other}
    assert pods_running_again(row) is not None


def test_the_metrics_count_messages_deletions_queue_time_and_disrupted_nodeclaims(env, aws, queue):
    from prometheus_client import CollectorRegistry, generate_latest

    from provisioning.observability.cluster import ClusterState
    from provisioning.services import repair

    _, iid = node_on(env, aws, pods=1)
    send(queue, spot(iid))
    send(queue, state("i-0fffffffffffffff0", "running"))
    send(queue, "not json")
    assert drain_queue(queue) + drain_queue(queue) + drain_queue(queue) >= 3
    sick, _ = node_on(env, aws, pods=0, capacity_type="on-demand", instance_type="m5.xlarge")
    for _ in range(4):
        node_on(env, aws, pods=0, capacity_type="on-demand")
    unhealthy(sick, "AcceleratedHardwareReady", minutes=11)
    assert repair.repair()
    registry = CollectorRegistry()
    registry.register(ClusterState())
    text = generate_latest(registry).decode()
    assert 'karpenter_interruption_received_messages_total{message_type="spot_interrupted"} 1.0' in text
    assert 'karpenter_interruption_received_messages_total{message_type="no_op"} 1.0' in text
    assert "karpenter_interruption_deleted_messages_total 3.0" in text
    assert "karpenter_interruption_message_queue_duration_seconds_count 2.0" in text
    assert (
        'karpenter_nodeclaims_disrupted_total{capacity_type="spot",nodepool="default",reason="spot_interrupted"} 1.0'
        in text
    )
    assert (
        'karpenter_nodeclaims_unhealthy_disrupted_total{capacity_type="on-demand",'
        'condition="accelerated_hardware_ready",nodepool="default"} 1.0' in text
    )


def test_sim_node_sets_a_condition_and_sim_status_shows_a_draining_node(env, aws, queue, capsys):
    from django.core.management import call_command

    node, iid = node_on(env, aws, pods=1)
    call_command("sim", "node", node, "--condition", "Ready=False", "--since", "31m")
    row = ClusterNode.objects.get(name=node)
    (ready,) = [c for c in row.manifest["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and not row.ready
    since = datetime.fromisoformat(ready["lastTransitionTime"].replace("Z", "+00:00"))
    assert timedelta(minutes=30) < datetime.now(UTC) - since < timedelta(minutes=32)
    env.pdb(labels={"app": "web"}, max_unavailable=0)  # keeps it draining
    send(queue, spot(iid))
    drain_queue(queue)
    capsys.readouterr()
    call_command("sim", "status", "--format", "json")
    (shown,) = json.loads(capsys.readouterr().out)["nodes"]
    assert (shown["name"], shown["instanceId"], shown["deleting"], shown["ready"]) == (node, iid, True, False)


def test_sim_node_says_what_is_wrong(db, capsys):
    from django.core.management import call_command

    with pytest.raises(SystemExit):
        call_command("sim", "node", "ip-nowhere", "--condition", "Ready=False")
    assert "not in the simulated cluster" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        call_command("sim", "node", "ip-nowhere", "--condition", "Ready=Maybe")
    assert "Type=True|False|Unknown" in capsys.readouterr().err


def test_the_interruptions_page_shows_each_message_and_how_long_the_pods_waited(env, aws, queue, client):
    from django.contrib.auth.models import Group, User
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from provisioning.cluster import simulated
    from provisioning.services.simulate import default_solver

    user = User.objects.create_user("vera", password="pw")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    node, iid = node_on(env, aws, pods=2)
    env.node(instance_type="m5.2xlarge")
    send(queue, spot(iid))
    drain_queue(queue)
    page = client.get("/interruptions/").content.decode()
    assert "spot interruption warning" in page and iid in page and node in page and "waiting" in page
    assert "spot interruption warning" in client.get("/").content.decode()  # the overview's last ones
    simulated.bind_pending(default_solver())
    assert "after " in client.get("/interruptions/").content.decode()
    with CaptureQueriesContext(connection) as few:
        client.get("/interruptions/")
    for _ in range(3):
        _, other = node_on(env, aws, pods=2)
        send(queue, spot(other))
        drain_queue(queue)
    with CaptureQueriesContext(connection) as more:
        client.get("/interruptions/")
    assert len(more.captured_queries) == len(few.captured_queries)
    assert ClusterNode.objects.get(name=node).disruption_note.startswith("being drained: spot_interrupted")


# ------------------------------------------------------------------ the simulated AWS's own queue and health


@pytest.fixture
def seeded_queue(aws):
    """The queue the simulated AWS made at start (named after the cluster), emptied first."""
    from provisioning.services.cloud import get_cloud

    source = get_cloud().interruption_queue("my-cluster")
    source.sqs_client = boto3.client("sqs", **aws.client_kwargs())
    while True:  # (PurgeQueue may be called once a minute only)
        batch = source.receive(10, 0, 30)
        if not batch:
            return source
        for message in batch:
            source.delete(message)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("spot-interruption", "spot_interrupted"),
        ("scheduled-change", "scheduled_change"),
        ("stopping", "instance_stopped"),
        ("terminating", "instance_terminated"),
    ],
)
def test_each_kind_the_simulated_aws_sends_through_its_rules_is_handled(env, aws, seeded_queue, kind, reason):
    import requests

    node, iid = node_on(env, aws, pods=1)
    answer = requests.post(
        f"{aws.endpoint_url}/_karpweb/interrupt", json={"instanceIds": [iid], "kind": kind}, timeout=10
    )
    assert answer.json() == {"sent": 1}
    assert drain_queue(seeded_queue, wait=2) == 1
    (forced,) = env.disruptions()
    assert (forced.reason, forced.nodes) == (reason, [node])


def test_a_rebalance_the_simulated_aws_sends_is_an_event(env, aws, seeded_queue):
    import requests

    _, iid = node_on(env, aws, pods=1)
    requests.post(
        f"{aws.endpoint_url}/_karpweb/interrupt", json={"instanceIds": [iid], "kind": "rebalance"}, timeout=10
    ).raise_for_status()
    assert drain_queue(seeded_queue, wait=2) == 1
    assert not env.disruptions() and "SpotRebalanceRecommendation" in reasons(env)


def impair(aws, body: dict) -> None:
    import requests

    requests.post(f"{aws.endpoint_url}/_karpweb/impair", json=body, timeout=10).raise_for_status()


def test_an_instance_impaired_for_120_s_is_terminated_forcefully(env, aws):
    from provisioning.services.interruption import check_instance_status

    node, iid = node_on(env, aws, pods=2)
    env.pdb(labels={"app": "web"}, max_unavailable=0)
    try:
        impair(aws, {"instanceIds": [iid], "check": "system", "impairedSeconds": 60})
        assert check_instance_status() == [] and not env.disruptions()  # not yet 120 s
        impair(aws, {"instanceIds": [iid], "check": "ok"})
        impair(aws, {"instanceIds": [iid], "check": "system", "impairedSeconds": 130})
        (row,) = check_instance_status()
        assert (row.kind, row.node, row.source) == ("system_status", node, "instance-status")
        (forced,) = env.disruptions()
        assert forced.terminate_by is not None  # forceful: the PDB does not hold the pods
        assert len(env.cluster.deleted_pods) == 2
        assert check_instance_status() == []  # counted once until it recovers
        assert Interruption.objects.count() == 1
    finally:
        impair(aws, {"instanceIds": [iid], "check": "ok"})


def test_a_scheduled_event_drains_normally(env, aws):
    from provisioning.services.interruption import check_instance_status

    node, iid = node_on(env, aws, pods=1)
    try:
        impair(aws, {"instanceIds": [iid], "event": "instance-retirement"})
        (row,) = check_instance_status()
        assert row.kind == "event_status" and "instance-retirement" in row.summary
        (forced,) = env.disruptions()
        assert forced.terminate_by is None and forced.nodes == [node]
    finally:
        impair(aws, {"instanceIds": [iid], "event": "none"})


def test_instance_status_dry_run_counts_and_does_nothing(env, aws, settings):
    from provisioning.services.interruption import check_instance_status

    settings.KARPWEB_INSTANCE_STATUS_DRY_RUN = True
    _, iid = node_on(env, aws, pods=1)
    try:
        impair(aws, {"instanceIds": [iid], "check": "instance", "impairedSeconds": 200})
        (row,) = check_instance_status()
        assert "dry run" in row.action and not env.disruptions()
    finally:
        impair(aws, {"instanceIds": [iid], "check": "ok"})


def test_the_demo_interrupts_a_spot_node_now_and_then(env, aws, seeded_queue):
    from provisioning.services import demo
    from provisioning.services.connections import get_redis

    node_on(env, aws, pods=1, capacity_type="on-demand")
    assert demo.interrupt_now_and_then(get_redis(), endpoint=aws.endpoint_url) is None  # no spot node yet
    node, iid = node_on(env, aws, pods=1)
    assert demo.interrupt_now_and_then(get_redis(), endpoint=aws.endpoint_url) == iid
    assert demo.interrupt_now_and_then(get_redis(), endpoint=aws.endpoint_url) is None  # one lately
    assert 0 < get_redis().ttl(demo.INTERRUPTED_KEY) <= demo.INTERRUPT_EVERY
    assert drain_queue(seeded_queue, wait=2) == 1
    (forced,) = env.disruptions()
    assert (forced.reason, forced.nodes) == ("spot_interrupted", [node])


def test_a_drain_asks_the_cloud_about_its_own_instances_only(env, aws, queue):
    """One DescribeInstances filtered to the node's instance, not a listing of the cluster's."""
    from provisioning.services.cloud import get_cloud

    node_on(env, aws, pods=1)
    _, iid = node_on(env, aws, pods=1)
    listed = get_cloud().list_instances([iid, "i-0000000000000dead"])
    assert [i.id for i in listed] == [iid]
    assert get_cloud().list_instances([]) == []


def test_a_message_whose_deletion_fails_is_not_recorded_as_deleted_and_comes_back(env, aws, queue, monkeypatch):
    from provisioning.services.interruption import handle_batch

    send(queue, state("i-0123456789abcdef0", "running"))

    def refused(message):
        raise RuntimeError("the queue went away")

    monkeypatch.setattr(queue, "delete", refused)
    assert handle_batch(queue, queue.receive(10, 1, 1)) == 0
    assert not Interruption.objects.get().deleted
    monkeypatch.undo()
    import time

    time.sleep(1.2)
    assert handle_batch(queue, queue.receive(10, 2, 20)) == 1
    row = Interruption.objects.get()  # the redelivery found its row
    assert row.deleted and left_in(queue) == 0
