"""The simulated AWS delivers interruption events and instance health as EC2 does: the seeded
interruption queue and its five EventBridge rules, ``/_karpweb/interrupt`` (events routed by
moto's rules into the queue), the spot notice that ends in termination, DescribeInstanceStatus
and ``/_karpweb/impair``. Spoken to with boto3 over HTTP, no patching.

The ``simulated_aws`` fixture is shared by the session: every test here reads the queue only
after draining it, and keeps to the messages about its own instances. Spot interruptions of
real instances run on a server of their own with a 2 s notice, so none ends in the shared one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError
from simaws import SimulatedAWS, stop_simulated_aws

from provisioning.cloud.simulated.interruptions import SPOT_NOTICE_ENV, spot_notice_from_env
from provisioning.cloud.simulated.seed import INTERRUPTION_RULES, interruption_rule_name
from provisioning.launcher import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
ACCOUNT = "123456789012"
REGION = "us-east-1"
# An instance id moto never made: events for it are sent all the same.
STRANGER = "i-0123456789abcdef0"
ONE_ATTEMPT = Config(retries={"total_max_attempts": 1})
IMAGE_PARAMETER = "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"
DETAIL_TYPES = {
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "scheduled-change": ("aws.health", "AWS Health Event"),
    "stopping": ("aws.ec2", "EC2 Instance State-change Notification"),
    "terminating": ("aws.ec2", "EC2 Instance State-change Notification"),
    "capacity-reservation-interruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}
KARPENTER_EVENT_CODES = [
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
]


def client(sim, service: str):
    return boto3.client(service, config=ONE_ATTEMPT, **sim.client_kwargs())


class Account:
    """The clients of one simulated AWS, and the helpers the tests share."""

    def __init__(self, sim: SimulatedAWS, queue: str) -> None:
        self.sim = sim
        self.queue = queue
        self.ec2 = client(sim, "ec2")
        self.sqs = client(sim, "sqs")
        self.events = client(sim, "events")
        self.queue_url = self.sqs.get_queue_url(QueueName=queue)["QueueUrl"] if queue else ""
        ssm = client(sim, "ssm")
        self.image_id = ssm.get_parameter(Name=IMAGE_PARAMETER)["Parameter"]["Value"]
        found = self.ec2.describe_subnets(Filters=[{"Name": "tag:karpenter.sh/discovery", "Values": [sim.cluster]}])[
            "Subnets"
        ]
        self.subnets = {s["AvailabilityZone"]: s["SubnetId"] for s in found}
        self.launched: list[str] = []

    def launch(self, count: int = 1, zone: str = "us-east-1b") -> list[str]:
        reservation = self.ec2.run_instances(
            ImageId=self.image_id,
            InstanceType="m5.large",
            MinCount=count,
            MaxCount=count,
            SubnetId=self.subnets[zone],
        )
        ids = [i["InstanceId"] for i in reservation["Instances"]]
        self.launched += ids
        return ids

    def state(self, instance_id: str) -> str:
        found = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        return found["State"]["Name"]

    def post(self, path: str, payload) -> requests.Response:
        data = payload if isinstance(payload, str | bytes) else json.dumps(payload)
        return requests.post(f"{self.sim.endpoint_url}{path}", data=data, timeout=10)

    def interrupt(self, instance_ids: list[str], kind: str) -> dict:
        answer = self.post("/_karpweb/interrupt", {"instanceIds": instance_ids, "kind": kind})
        assert answer.status_code == 200, answer.text
        return answer.json()

    def impair(self, **payload) -> dict:
        answer = self.post("/_karpweb/impair", payload)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def drain(self) -> None:
        """Receive and delete until the queue is empty."""
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            messages = got.get("Messages") or []
            if not messages:
                return
            for message in messages:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def messages(self, instance_ids: list[str], count: int, timeout: float = 5.0) -> list[dict]:
        """The bodies of the next ``count`` messages about ``instance_ids`` (each deleted), in
        the order received; waits up to ``timeout`` for them, then a moment for one too many."""
        bodies: list[dict] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            messages = got.get("Messages") or []
            for message in messages:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                body = json.loads(message["Body"])
                if set(about(body)) & set(instance_ids):
                    bodies.append(body)
            if len(bodies) >= count:
                deadline = min(deadline, time.monotonic() + 0.3)
            if not messages:
                time.sleep(0.1)
        return bodies

    def statuses(self, **kwargs) -> dict[str, dict]:
        found = self.ec2.describe_instance_status(**kwargs)["InstanceStatuses"]
        return {s["InstanceId"]: s for s in found}

    def forget(self) -> None:
        """Put the instances of a test back to health and terminate them."""
        if self.launched:
            self.impair(instanceIds=self.launched, check="ok", event="none")
            self.ec2.terminate_instances(InstanceIds=self.launched)
            self.launched = []


def about(body: dict) -> list[str]:
    detail = body.get("detail") or {}
    if "instance-id" in detail:
        return [detail["instance-id"]]
    return [e.get("entityValue", "") for e in detail.get("affectedEntities") or []]


@pytest.fixture
def aws(simulated_aws):
    account = Account(simulated_aws, simulated_aws.cluster)
    account.drain()
    yield account
    account.forget()


def start(*args: str, env: dict[str, str] | None = None) -> SimulatedAWS:
    """A simulated AWS of its own, with extra arguments and environment."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "provisioning.cloud.simulated", "--port", str(port), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=60, proc=proc)
    except BaseException:
        stop_simulated_aws(proc)
        raise
    return SimulatedAWS(f"http://127.0.0.1:{port}", REGION, "my-cluster", "1.33", proc)


@pytest.fixture(scope="module")
def short_notice():
    """A simulated AWS whose spot notice is 2 s, with a queue named apart from the cluster."""
    sim = start("--interruption-queue", "karpweb-test-interruptions", env={SPOT_NOTICE_ENV: "2"})
    try:
        yield Account(sim, "karpweb-test-interruptions")
    finally:
        stop_simulated_aws(sim.process)


def assert_envelope(body: dict, kind: str, instance_id: str) -> None:
    source, detail_type = DETAIL_TYPES[kind]
    assert list(body) == ["version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"]
    assert body["version"] == "0"
    uuid.UUID(body["id"])
    assert (body["source"], body["detail-type"]) == (source, detail_type)
    assert body["account"] == ACCOUNT
    assert body["region"] == REGION
    sent = datetime.strptime(body["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(sent - datetime.now(UTC)) < timedelta(seconds=30)
    if source == "aws.health":
        assert body["resources"] == [instance_id]  # Health names the entity, EC2 its ARN
    else:
        assert body["resources"] == [f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}"]


# ------------------------------------------------------------------ seeding


def test_the_queue_is_seeded_as_the_getting_started_cloudformation_makes_it(aws):
    attributes = aws.sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["MessageRetentionPeriod"] == "300"
    assert attributes["SqsManagedSseEnabled"] == "true"
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:my-cluster"
    assert attributes["QueueArn"] == arn
    allow, deny = json.loads(attributes["Policy"])["Statement"]
    assert allow["Effect"] == "Allow"
    assert sorted(allow["Principal"]["Service"]) == ["events.amazonaws.com", "sqs.amazonaws.com"]
    assert (allow["Action"], allow["Resource"]) == ("sqs:SendMessage", arn)
    assert (deny["Effect"], deny["Principal"], deny["Action"], deny["Resource"]) == ("Deny", "*", "sqs:*", arn)
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_five_rules_on_the_default_bus_route_ec2_and_health_events_to_the_queue(aws):
    rules = {r["Name"]: r for r in aws.events.list_rules(NamePrefix="my-cluster-")["Rules"]}
    expected = {f"my-cluster-{logical}": (source, detail) for logical, source, detail in INTERRUPTION_RULES}
    assert set(rules) == set(expected)
    assert "my-cluster-SpotInterruptionRule" in rules
    for name, (source, detail_type) in expected.items():
        rule = rules[name]
        assert rule["State"] == "ENABLED"
        assert rule["EventBusName"] == "default"
        assert json.loads(rule["EventPattern"]) == {"source": [source], "detail-type": [detail_type]}
        targets = aws.events.list_targets_by_rule(Rule=name)["Targets"]
        assert targets == [
            {"Id": "KarpenterInterruptionQueueTarget", "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:my-cluster"}
        ]


def test_a_rule_name_stays_within_eventbridges_64_characters():
    assert interruption_rule_name("my-cluster", "SpotInterruptionRule") == "my-cluster-SpotInterruptionRule"
    long = interruption_rule_name("q" * 80, "CapacityReservationInterruptionRule")
    assert len(long) == 64
    assert long.endswith("-CapacityReservationInterruptionRule")


def test_interruption_queue_names_another_queue_and_an_empty_one_none(short_notice):
    sim = start("--interruption-queue", "")
    try:
        none = Account(sim, "")
        assert none.sqs.list_queues().get("QueueUrls", []) == []
        assert none.events.list_rules()["Rules"] == []
        (instance_id,) = none.launch()
        assert none.interrupt([instance_id], "rebalance") == {"sent": 1}  # put, and routed nowhere
    finally:
        stop_simulated_aws(sim.process)
    urls = short_notice.sqs.list_queues()["QueueUrls"]
    assert [u.rsplit("/", 1)[1] for u in urls] == ["karpweb-test-interruptions"]
    names = {r["Name"] for r in short_notice.events.list_rules()["Rules"]}
    assert names == {f"karpweb-test-interruptions-{logical}" for logical, _, _ in INTERRUPTION_RULES}


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {SPOT_NOTICE_ENV: "soon"}, f"{SPOT_NOTICE_ENV}: 'soon'"),
        ((), {SPOT_NOTICE_ENV: "-1"}, f"{SPOT_NOTICE_ENV}: '-1'"),
        (("--interruption-queue", "my queue"), {}, "--interruption-queue: 'my queue'"),
    ],
)
def test_junk_settings_are_named(args, env, message):
    done = subprocess.run(
        [sys.executable, "-m", "provisioning.cloud.simulated", "--port", "0", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_the_spot_notice_setting():
    assert spot_notice_from_env({}) == 120
    assert spot_notice_from_env({SPOT_NOTICE_ENV: "2.5"}) == 2.5
    assert spot_notice_from_env({SPOT_NOTICE_ENV: "0"}) == 0
    for junk in ("nan", "inf", "-3", "two"):
        with pytest.raises(ValueError, match="seconds of the spot notice"):
            spot_notice_from_env({SPOT_NOTICE_ENV: junk})


# ------------------------------------------------------------------ interruption events


@pytest.mark.parametrize(
    "kind", ["rebalance", "scheduled-change", "stopping", "terminating", "capacity-reservation-interruption"]
)
def test_each_kind_lands_in_the_queue_as_eventbridge_delivers_it(aws, kind):
    (instance_id,) = aws.launch()
    assert aws.interrupt([instance_id], kind) == {"sent": 1}
    (body,) = aws.messages([instance_id], 1)
    assert_envelope(body, kind, instance_id)
    detail = body["detail"]
    if kind == "rebalance":
        assert detail == {"instance-id": instance_id}
    elif kind == "capacity-reservation-interruption":
        assert detail == {"instance-id": instance_id, "instance-action": "terminate"}
    elif kind == "stopping":
        assert detail == {"instance-id": instance_id, "state": "stopping"}
    elif kind == "terminating":
        assert detail == {"instance-id": instance_id, "state": "shutting-down"}
    else:
        assert detail["service"] == "EC2"
        assert detail["eventTypeCategory"] == "scheduledChange"
        assert detail["eventTypeCode"] == "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
        assert detail["eventArn"].startswith(
            "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/"
        )
        assert detail["affectedEntities"] == [{"entityValue": instance_id}]
        (description,) = detail["eventDescription"]
        assert description["language"] == "en_US"
        assert instance_id in description["latestDescription"]
        start = datetime.strptime(detail["startTime"], "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
        end = datetime.strptime(detail["endTime"], "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
        assert start > datetime.now(UTC) + timedelta(days=13)
        assert end > start


def test_a_spot_warning_for_an_instance_nobody_launched_is_sent_all_the_same(aws):
    (instance_id,) = aws.launch()
    assert aws.interrupt([instance_id, STRANGER], "rebalance") == {"sent": 2}
    bodies = aws.messages([instance_id, STRANGER], 2)
    assert sorted(b["detail"]["instance-id"] for b in bodies) == sorted([instance_id, STRANGER])
    # No spot warning of a launched instance here: its notice would end in the shared server.
    assert aws.interrupt([STRANGER], "spot-interruption") == {"sent": 1}
    (body,) = aws.messages([STRANGER], 1)
    assert_envelope(body, "spot-interruption", STRANGER)
    assert body["detail"] == {"instance-id": STRANGER, "instance-action": "terminate"}


def test_stopping_and_terminating_change_the_instance_in_ec2(aws):
    stopping, terminating = aws.launch(2)
    assert aws.interrupt([stopping], "stopping") == {"sent": 1}
    assert aws.interrupt([terminating], "terminating") == {"sent": 1}
    assert aws.state(stopping) == "stopped"
    assert aws.state(terminating) == "terminated"
    bodies = aws.messages([stopping, terminating], 2)
    assert {(b["detail"]["instance-id"], b["detail"]["state"]) for b in bodies} == {
        (stopping, "stopping"),
        (terminating, "shutting-down"),
    }


def test_one_event_per_instance_named_once(aws):
    ids = aws.launch(3)
    assert aws.interrupt([*ids, ids[0]], "scheduled-change") == {"sent": 3}
    bodies = aws.messages(ids, 3)
    assert sorted(about(b)[0] for b in bodies) == sorted(ids)
    assert len({b["id"] for b in bodies}) == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("not json", "JSON object"),
        ("", "JSON object"),
        ('["i-0123456789abcdef0"]', "JSON object"),
        ({"kind": "rebalance"}, "instanceIds"),
        ({"instanceIds": [], "kind": "rebalance"}, "instanceIds"),
        ({"instanceIds": "i-0123456789abcdef0", "kind": "rebalance"}, "instanceIds"),
        ({"instanceIds": [7], "kind": "rebalance"}, "instanceIds"),
        ({"instanceIds": ["node-1"], "kind": "rebalance"}, "instanceIds"),
        ({"instanceIds": ["i-XYZ"], "kind": "rebalance"}, "instanceIds"),
        ({"instanceIds": [STRANGER]}, "kind"),
        ({"instanceIds": [STRANGER], "kind": "spot"}, "kind"),
        ({"instanceIds": [STRANGER], "kind": "rebalance", "instanceId": STRANGER}, '"instanceId"'),
    ],
)
def test_a_bad_interrupt_request_is_refused_naming_the_field(aws, body, field):
    answer = aws.post("/_karpweb/interrupt", body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert field in error
    if field == "kind":
        assert "spot-interruption, rebalance, scheduled-change, stopping, terminating" in error
    if field == "instanceIds":
        assert '"i-0123456789abcdef0"' in error
    assert aws.messages([STRANGER], 1, timeout=0.1) == []


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_interrupt_is_post_only(simulated_aws, method):
    answer = requests.request(method, f"{simulated_aws.endpoint_url}/_karpweb/interrupt", timeout=10)
    assert answer.status_code == 405
    assert "POST" in answer.json()["error"]


# ------------------------------------------------------------------ the spot notice


def test_a_spot_interruption_ends_in_termination_after_the_notice(short_notice):
    sim = short_notice
    sim.drain()
    warned, twice, saved_by_the_platform = sim.launch(3)
    started = time.monotonic()
    assert sim.interrupt([warned, twice, saved_by_the_platform], "spot-interruption") == {"sent": 3}
    assert sim.interrupt([twice], "spot-interruption") == {"sent": 1}  # the first deadline holds
    sim.ec2.terminate_instances(InstanceIds=[saved_by_the_platform])  # drained and gone within the notice
    assert sim.state(warned) == "running"
    warnings = sim.messages([warned, twice, saved_by_the_platform], 4, timeout=1)
    assert time.monotonic() - started < 2, "too slow to see the notice before it ends"
    for body in warnings:
        assert_envelope(body, "spot-interruption", body["detail"]["instance-id"])
    assert sorted(b["detail"]["instance-id"] for b in warnings) == sorted([warned, twice, twice, saved_by_the_platform])

    changes = sim.messages([warned, twice, saved_by_the_platform], 4, timeout=15)
    assert time.monotonic() - started >= 2
    for body in changes:
        assert_envelope(body, "terminating", body["detail"]["instance-id"])
    for instance_id in (warned, twice):
        states = [b["detail"]["state"] for b in changes if b["detail"]["instance-id"] == instance_id]
        assert states == ["shutting-down", "terminated"]
        found = sim.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        assert found["State"]["Name"] == "terminated"
        assert found["StateReason"]["Code"] == "Server.SpotInstanceTermination"
    assert not [b for b in changes if b["detail"]["instance-id"] == saved_by_the_platform]


def test_the_notice_ends_the_instance_whatever_state_it_is_in(short_notice):
    sim = short_notice
    sim.drain()
    (instance_id,) = sim.launch()
    sim.interrupt([instance_id], "spot-interruption")
    sim.interrupt([instance_id], "stopping")
    assert sim.state(instance_id) == "stopped"
    bodies = sim.messages([instance_id], 4, timeout=15)
    assert [(b["detail-type"], b["detail"].get("state")) for b in bodies] == [
        ("EC2 Spot Instance Interruption Warning", None),
        ("EC2 Instance State-change Notification", "stopping"),
        ("EC2 Instance State-change Notification", "shutting-down"),
        ("EC2 Instance State-change Notification", "terminated"),
    ]
    assert sim.state(instance_id) == "terminated"


# ------------------------------------------------------------------ DescribeInstanceStatus


def assert_check(check: dict, status: str, reachability: str | None) -> None:
    assert check["Status"] == status
    if reachability is None:
        assert "Details" not in check
    else:
        (detail,) = check["Details"]
        assert (detail["Name"], detail["Status"]) == ("reachability", reachability)


def test_a_running_instance_passes_both_checks(aws):
    (instance_id,) = aws.launch(zone="us-east-1c")
    (status,) = aws.ec2.describe_instance_status(InstanceIds=[instance_id])["InstanceStatuses"]
    assert status["InstanceId"] == instance_id
    assert status["AvailabilityZone"] == "us-east-1c"
    assert status["InstanceState"] == {"Code": 16, "Name": "running"}
    assert_check(status["InstanceStatus"], "ok", "passed")
    assert_check(status["SystemStatus"], "ok", "passed")
    assert "ImpairedSince" not in status["InstanceStatus"]["Details"][0]
    assert status.get("Events", []) == []


def test_only_running_instances_unless_all_are_asked_for(aws):
    running, stopped = aws.launch(2)
    aws.ec2.stop_instances(InstanceIds=[stopped])
    assert set(aws.statuses(InstanceIds=[running, stopped])) == {running}
    everything = aws.statuses(InstanceIds=[running, stopped], IncludeAllInstances=True)
    assert set(everything) == {running, stopped}
    assert everything[stopped]["InstanceState"] == {"Code": 80, "Name": "stopped"}
    assert_check(everything[stopped]["InstanceStatus"], "not-applicable", None)
    assert_check(everything[stopped]["SystemStatus"], "not-applicable", None)
    by_state = aws.statuses(IncludeAllInstances=True, Filters=[{"Name": "instance-state-name", "Values": ["stopped"]}])
    assert stopped in by_state
    assert running not in by_state
    assert all(s["InstanceState"]["Name"] == "stopped" for s in by_state.values())
    assert stopped not in aws.statuses()
    assert running in aws.statuses()


def test_an_impaired_check_with_its_impaired_since(aws):
    broken, system, healthy = aws.launch(3)
    answer = aws.impair(instanceIds=[broken], check="instance", impairedSeconds=300)
    assert answer["impaired"] == 1
    assert answer["instances"][broken]["instanceStatus"]["status"] == "impaired"
    aws.impair(instanceIds=[system], check="system")
    now = datetime.now(UTC)

    statuses = aws.statuses(InstanceIds=[broken, system, healthy])
    assert_check(statuses[broken]["InstanceStatus"], "impaired", "failed")
    assert_check(statuses[broken]["SystemStatus"], "ok", "passed")
    since = statuses[broken]["InstanceStatus"]["Details"][0]["ImpairedSince"]
    assert abs(since - (now - timedelta(seconds=300))) < timedelta(seconds=5)
    assert_check(statuses[system]["SystemStatus"], "impaired", "failed")
    assert abs(statuses[system]["SystemStatus"]["Details"][0]["ImpairedSince"] - now) < timedelta(seconds=5)
    assert_check(statuses[healthy]["InstanceStatus"], "ok", "passed")

    # Failing again keeps the first failure's time unless it is given.
    aws.impair(instanceIds=[broken], check="instance")
    (again,) = aws.ec2.describe_instance_status(InstanceIds=[broken])["InstanceStatuses"]
    assert again["InstanceStatus"]["Details"][0]["ImpairedSince"] == since

    instance_impaired = aws.statuses(Filters=[{"Name": "instance-status.status", "Values": ["impaired"]}])
    assert broken in instance_impaired
    assert system not in instance_impaired
    assert healthy not in instance_impaired
    system_impaired = aws.statuses(Filters=[{"Name": "system-status.status", "Values": ["impaired"]}])
    assert system in system_impaired
    assert broken not in system_impaired
    failed = aws.statuses(Filters=[{"Name": "instance-status.reachability", "Values": ["failed"]}])
    assert broken in failed
    assert system not in failed
    ok = aws.statuses(
        InstanceIds=[broken, system, healthy], Filters=[{"Name": "instance-status.status", "Values": ["ok"]}]
    )
    assert set(ok) == {system, healthy}

    aws.impair(instanceIds=[broken, system], check="ok")
    for status in aws.statuses(InstanceIds=[broken, system]).values():
        assert_check(status["InstanceStatus"], "ok", "passed")
        assert_check(status["SystemStatus"], "ok", "passed")


def test_scheduled_events_and_the_event_code_filter(aws):
    retiring, rebooting, healthy = aws.launch(3)
    aws.impair(instanceIds=[retiring], event="instance-retirement")
    aws.impair(instanceIds=[rebooting], event="system-maintenance", notBeforeSeconds=0)
    now = datetime.now(UTC)

    statuses = aws.statuses(InstanceIds=[retiring, rebooting, healthy])
    (retirement,) = statuses[retiring]["Events"]
    assert retirement["Code"] == "instance-retirement"
    assert retirement["Description"] == "The instance is running on degraded hardware"
    assert retirement["InstanceEventId"].startswith("instance-event-")
    assert abs(retirement["NotBefore"] - (now + timedelta(days=14))) < timedelta(seconds=5)
    (maintenance,) = statuses[rebooting]["Events"]
    assert maintenance["Code"] == "system-maintenance"
    assert abs(maintenance["NotBefore"] - now) < timedelta(seconds=5)
    assert maintenance["NotAfter"] > maintenance["NotBefore"]
    assert statuses[healthy].get("Events", []) == []
    assert_check(statuses[retiring]["InstanceStatus"], "ok", "passed")  # an event is no failed check

    # The filter Karpenter's poller sends: any of its five codes.
    scheduled = aws.statuses(Filters=[{"Name": "event.code", "Values": KARPENTER_EVENT_CODES}])
    assert {retiring, rebooting} <= set(scheduled)
    assert healthy not in scheduled
    only_retirement = aws.statuses(Filters=[{"Name": "event.code", "Values": ["instance-retirement"]}])
    assert retiring in only_retirement
    assert rebooting not in only_retirement
    both = aws.statuses(
        Filters=[
            {"Name": "event.code", "Values": ["system-*"]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]
    )
    assert rebooting in both
    assert retiring not in both

    aws.impair(instanceIds=[retiring, rebooting], event="none")
    assert all(s.get("Events", []) == [] for s in aws.statuses(InstanceIds=[retiring, rebooting]).values())


def test_pages_of_max_results_with_next_token(aws):
    ids = aws.launch(7)
    aws.impair(instanceIds=ids, check="system", impairedSeconds=600)
    impaired = [{"Name": "system-status.status", "Values": ["impaired"]}]
    pages = [aws.ec2.describe_instance_status(Filters=impaired, MaxResults=5)]
    while pages[-1].get("NextToken"):
        pages.append(aws.ec2.describe_instance_status(Filters=impaired, MaxResults=5, NextToken=pages[-1]["NextToken"]))
    assert len(pages) >= 2
    assert len(pages[0]["InstanceStatuses"]) == 5
    assert all(len(page["InstanceStatuses"]) <= 5 for page in pages)
    seen = [s["InstanceId"] for page in pages for s in page["InstanceStatuses"]]
    assert len(seen) == len(set(seen))
    assert set(ids) <= set(seen)

    paginator = aws.ec2.get_paginator("describe_instance_status")
    paged = [
        s["InstanceId"]
        for page in paginator.paginate(Filters=impaired, PaginationConfig={"PageSize": 5})
        for s in page["InstanceStatuses"]
    ]
    assert paged == seen


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"InstanceIds": [STRANGER]}, "InvalidInstanceID.NotFound"),
        ({"InstanceIds": ["i-nope"]}, "InvalidInstanceID.Malformed"),
        ({"Filters": [{"Name": "instance-health", "Values": ["ok"]}]}, "InvalidParameterValue"),
        ({"MaxResults": 4}, "InvalidParameterValue"),
        ({"MaxResults": 1001}, "InvalidParameterValue"),
        ({"MaxResults": 5, "NextToken": "not-a-token"}, "InvalidPaginationToken"),
        ({"MaxResults": 5, "InstanceIds": [STRANGER]}, "InvalidParameterCombination"),
        ({"DryRun": True}, "DryRunOperation"),
    ],
)
def test_describe_instance_status_errors_are_ec2s(aws, kwargs, code):
    with pytest.raises(ClientError) as caught:
        aws.ec2.describe_instance_status(**kwargs)
    assert caught.value.response["Error"]["Code"] == code


def test_the_impair_endpoint_lists_what_it_set(aws):
    broken, retiring = aws.launch(2)
    aws.impair(instanceIds=[broken], check="system", impairedSeconds=130)
    aws.impair(instanceIds=[retiring], event="instance-stop")
    shown = requests.get(f"{aws.sim.endpoint_url}/_karpweb/impair", timeout=10).json()["instances"]
    assert shown[broken]["systemStatus"]["status"] == "impaired"
    assert shown[broken]["systemStatus"]["impairedSince"].endswith("Z")
    assert shown[broken]["instanceStatus"] == {"status": "ok"}
    assert shown[broken]["events"] == []
    assert [e["code"] for e in shown[retiring]["events"]] == ["instance-stop"]
    aws.impair(instanceIds=[broken], check="ok")
    shown = requests.get(f"{aws.sim.endpoint_url}/_karpweb/impair", timeout=10).json()["instances"]
    assert broken not in shown  # back to the default
    assert retiring in shown


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("{", "JSON object"),
        ({"check": "instance"}, "instanceIds"),
        ({"instanceIds": ["node-1"], "check": "instance"}, "instanceIds"),
        ({"instanceIds": [STRANGER], "check": "instance"}, "no such instance"),
        ({"instanceIds": "OWN"}, '"check"'),
        ({"instanceIds": "OWN", "check": "ebs"}, "check: expected one of instance, system, ok"),
        ({"instanceIds": "OWN", "event": "reboot"}, "event: expected one of instance-retirement"),
        ({"instanceIds": "OWN", "check": "instance", "impairedSeconds": -1}, "impairedSeconds"),
        ({"instanceIds": "OWN", "check": "instance", "impairedSeconds": True}, "impairedSeconds"),
        ({"instanceIds": "OWN", "check": "ok", "impairedSeconds": 10}, "impairedSeconds"),
        ({"instanceIds": "OWN", "check": "system", "notBeforeSeconds": 10}, "notBeforeSeconds"),
        ({"instanceIds": "OWN", "event": "instance-stop", "notBeforeSeconds": "soon"}, "notBeforeSeconds"),
        ({"instanceIds": "OWN", "check": "system", "since": 10}, '"since"'),
    ],
)
def test_a_bad_impair_request_is_refused_naming_the_field(aws, payload, field):
    if isinstance(payload, dict) and payload.get("instanceIds") == "OWN":
        payload = {**payload, "instanceIds": aws.launch()}
    answer = aws.post("/_karpweb/impair", payload)
    assert answer.status_code == 400
    assert field in answer.json()["error"]


def test_impair_is_get_or_post(simulated_aws):
    answer = requests.put(f"{simulated_aws.endpoint_url}/_karpweb/impair", json={}, timeout=10)
    assert answer.status_code == 405
