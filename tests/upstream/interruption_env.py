"""Upstream's interruption suite's environment (``aws/karpenter-provider-aws``
``pkg/controllers/interruption/suite_test.go``), on the real service and the simulated AWS.

Upstream runs its interruption controller over a fake SQS API whose ``ReceiveMessage`` answers
what the test set, and its instance status controller over a fake EC2 whose
``DescribeInstanceStatus`` answers what the test set. Here:

* the queue is a real SQS queue of the simulated AWS (moto, over HTTP), one per test, read by
  the consumer's own :class:`~provisioning.cloud.aws.AWSQueue`; the test sends upstream's
  messages into it (``send``), and one reconcile of the controller is one receive and its batch
  handled as the consumer handles it (``drain_queue``);
* ``DescribeInstanceStatus`` is the simulated AWS's health layer, set through
  ``POST /_karpweb/impair`` (``impair``): a failed check back-dated by ``impairedSeconds``
  (upstream's ``ImpairedSince: now`` then ``Clock.Step(time.Hour)``), or a scheduled event;
  one reconcile of the instance status controller is one
  :func:`~provisioning.services.interruption.check_instance_status`;
* the cluster is the simulated cluster's rows (``DisruptionEnv`` over a ``RecordingCluster``),
  its nodes on instances launched in the simulated EC2, so every handler, the drain and the
  termination run against the cloud they would run against;
* metrics are read as Prometheus scrapes them (``generate_latest`` over ``ClusterState``).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from disruption_env import DisruptionEnv, RecordingCluster, node_pool  # noqa: E402

from provisioning.models import ClusterNode, NodeClaim  # noqa: E402

ACCOUNT = "000000000000"  # upstream's defaultAccountID
REGION = "us-east-1"
EC2_SOURCE = "aws.ec2"
HEALTH_SOURCE = "aws.health"


# ------------------------------------------------------------------ upstream's message builders


def _metadata(detail_type: str, source: str, instance_id: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": ACCOUNT,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:instance/{instance_id}"],
    }


def spot_interruption_message(instance_id: str) -> str:
    """Upstream's ``spotInterruptionMessage``."""
    event = _metadata("EC2 Spot Instance Interruption Warning", EC2_SOURCE, instance_id)
    event["detail"] = {"instance-id": instance_id, "instance-action": "terminate"}
    return json.dumps(event)


def capacity_reservation_interruption_message(instance_id: str) -> str:
    """Upstream's ``capacityReservationInterruptionMessage``."""
    event = _metadata("EC2 Capacity Reservation Instance Interruption Warning", EC2_SOURCE, instance_id)
    event["detail"] = {"instance-id": instance_id, "instance-action": "terminate"}
    return json.dumps(event)


def state_change_message(instance_id: str, state: str) -> str:
    """Upstream's ``stateChangeMessage``."""
    event = _metadata("EC2 Instance State-change Notification", EC2_SOURCE, instance_id)
    event["detail"] = {"instance-id": instance_id, "state": state}
    return json.dumps(event)


def scheduled_change_message(instance_id: str) -> str:
    """Upstream's ``scheduledChangeMessage``."""
    event = _metadata("AWS Health Event", HEALTH_SOURCE, instance_id)
    event["detail"] = {
        "service": "EC2",
        "eventTypeCategory": "scheduledChange",
        "affectedEntities": [{"entityValue": instance_id}],
    }
    return json.dumps(event)


def random_instance_id() -> str:
    """Upstream's ``fake.InstanceID()``: an instance no NodeClaim of the cluster has."""
    return f"i-{uuid.uuid4().hex[:17]}"


# ------------------------------------------------------------------ fixtures


@pytest.fixture(name="aws")
def aws_fixture(simulated_aws, monkeypatch):
    """The simulated AWS, and the environment that points the product's boto3 at it. The
    simulated AWS is the session's: every impairment a test set is cleared afterwards, and the
    instances it launched are terminated (so the cluster's instances do not pile up)."""
    from provisioning.services import cloud

    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    cloud.get_cloud.cache_clear()  # a cloud an earlier test made for other credentials
    simulated_aws.impaired = []
    simulated_aws.launched = []
    yield simulated_aws
    cloud.get_cloud.cache_clear()
    if simulated_aws.impaired:
        answer = requests.post(
            f"{simulated_aws.endpoint_url}/_karpweb/impair",
            json={"instanceIds": sorted(set(simulated_aws.impaired)), "check": "ok", "event": "none"},
            timeout=10,
        )
        answer.raise_for_status()
    if simulated_aws.launched:
        ec2 = boto3.client("ec2", **simulated_aws.client_kwargs())
        ec2.terminate_instances(InstanceIds=simulated_aws.launched)


@pytest.fixture(name="queue")
def queue_fixture(aws):
    """Upstream's ``InterruptionQueue: "test-cluster"``: a queue of this test's own, and the
    consumer's view of it (``sqs_client`` is the test's own client, to send and count)."""
    from provisioning.services.cloud import get_cloud

    sqs = boto3.client("sqs", **aws.client_kwargs())
    name = f"interruptions-{uuid.uuid4().hex[:8]}"
    sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "300"})
    source = get_cloud().interruption_queue(name)
    source.sqs_client = sqs
    yield source
    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])


@pytest.fixture(name="interruption_env")
def interruption_env_fixture(db, redis_url, settings, monkeypatch, aws):
    """Upstream's BeforeEach: an empty cluster with NodePool ``default``, the ICE cache and the
    instance status controller's memory (Redis) cleared, the real cloud being the simulated AWS."""
    from provisioning import cluster as cluster_package
    from provisioning.services import connections
    from provisioning.services import disruption as service

    settings.REDIS_URL = redis_url
    connections.reset()
    redis = connections.get_redis()
    for key in redis.scan_iter("karpweb:*"):
        redis.delete(key)
    recording = RecordingCluster()
    monkeypatch.setattr(service, "get_cluster", lambda: recording)
    monkeypatch.setattr(cluster_package, "get_cluster", lambda: recording)
    environment = DisruptionEnv(recording)
    environment.cloud = aws
    environment.apply(node_pool())
    yield environment
    connections.reset()


# ------------------------------------------------------------------ the cluster


def launch(aws, count: int = 1, *, instance_type: str = "m5.large", zone: str = "us-east-1a", spot: bool = True):
    """``count`` instances in the simulated EC2, tagged as karpweb tags what it launches."""
    ec2 = boto3.client("ec2", **aws.client_kwargs())
    image = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amazon-eks-node-al2023-*"]}])
    subnet = next(s["SubnetId"] for s in ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == zone)
    options: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    tags = [
        {"Key": "kubernetes.io/cluster/my-cluster", "Value": "owned"},
        {"Key": "karpenter.sh/nodepool", "Value": "default"},
    ]
    options["TagSpecifications"] = [{"ResourceType": "instance", "Tags": tags}]
    reservation = ec2.run_instances(
        ImageId=image["Images"][0]["ImageId"],
        InstanceType=instance_type,
        MinCount=count,
        MaxCount=count,
        SubnetId=subnet,
        **options,
    )
    ids = [i["InstanceId"] for i in reservation["Instances"]]
    aws.launched.extend(ids)
    return ids


def nodes_on(
    env: DisruptionEnv,
    count: int,
    *,
    pods: int = 0,
    capacity_type: str = "spot",
    instance_type: str = "m5.large",
    zone: str = "us-east-1a",
    **options: Any,
) -> list[tuple[str, str]]:
    """Upstream's ``NodeClaimAndNode`` with NodePool ``default``, ``count`` times: a NodeClaim
    and its Node on an instance of the simulated EC2 (one launch call for all), ``pods`` pods
    on each; (node, instance id) each."""
    ids = launch(env.cloud, count, instance_type=instance_type, zone=zone, spot=capacity_type == "spot")
    out = []
    for iid in ids:
        node = env.node(instance_type=instance_type, zone=zone, capacity_type=capacity_type, **options)
        NodeClaim.objects.filter(node_name=node).update(instance_id=iid)
        ClusterNode.objects.filter(name=node).update(instance_id=iid)
        if pods:
            env.pods(pods, node=node, labels={"app": "web"})
        out.append((node, iid))
    return out


def node_on(env: DisruptionEnv, **options: Any) -> tuple[str, str]:
    return nodes_on(env, 1, **options)[0]


# ------------------------------------------------------------------ the queue


def send(queue, *bodies: str) -> None:
    """Upstream's ``ExpectMessagesCreated``: the bodies put in the queue, ten a call."""
    for start in range(0, len(bodies), 10):
        entries = [{"Id": str(i), "MessageBody": body} for i, body in enumerate(bodies[start : start + 10])]
        answer = queue.sqs_client.send_message_batch(QueueUrl=queue.url, Entries=entries)
        assert not answer.get("Failed"), answer["Failed"]


def drain_queue(queue, *, wait: int = 1) -> int:
    """One reconcile of upstream's interruption controller: one ``ReceiveMessage`` and its
    batch handled as the consumer handles it; the messages deleted."""
    from provisioning.services.interruption import handle_batch

    return handle_batch(queue, queue.receive(10, wait, 20))


def left_in(queue) -> int:
    """The messages still in the queue, visible or being handled."""
    attributes = queue.sqs_client.get_queue_attributes(
        QueueUrl=queue.url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


# ------------------------------------------------------------------ DescribeInstanceStatus


def impair(aws, instance_ids: Iterable[str], **payload: Any) -> dict:
    """``POST /_karpweb/impair``: a failed ``check`` (``instance``/``system``, back-dated by
    ``impairedSeconds``), ``check: ok`` to clear, or a scheduled ``event``."""
    ids = list(instance_ids)
    answer = requests.post(f"{aws.endpoint_url}/_karpweb/impair", json={"instanceIds": ids, **payload}, timeout=10)
    assert answer.status_code == 200, f"POST /_karpweb/impair: {answer.status_code} {answer.text[:300]}"
    aws.impaired.extend(ids)
    return answer.json()


# ------------------------------------------------------------------ metrics


def metric(sample: str, **labels: str) -> float:
    """The sum of the samples named ``sample`` whose labels include ``labels``, as Prometheus
    scrapes them (upstream's ``ExpectMetricCounterValue``); 0 when there is none."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from provisioning.observability.cluster import ClusterState

    registry = CollectorRegistry()
    registry.register(ClusterState())
    total = 0.0
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total
