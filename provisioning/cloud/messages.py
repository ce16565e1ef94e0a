"""The messages of the interruption queue, parsed as upstream's interruption controller parses
them (``aws/karpenter-provider-aws`` ``pkg/controllers/interruption/parser.go`` and
``messages/*``). No boto3 here: the body of an SQS message in, a :class:`Message` out.

EventBridge delivers an event as ``{"version": "0", "id", "detail-type", "source", "account",
"time", "region", "resources", "detail"}``. The parser is chosen by (version, source,
detail-type); an unknown triple, or a known one whose detail says it is of no concern (a
state that is not a stop or a termination, a Health event not about EC2's scheduled
changes), is a no-op, still counted and deleted. A body that is not such an envelope raises
:class:`UnparsableMessage`: it is logged, counted and deleted too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

# Upstream's message kinds (messages.Kind), which are also the metrics' label values.
SPOT_INTERRUPTED = "spot_interrupted"
REBALANCE_RECOMMENDATION = "rebalance_recommendation"
SCHEDULED_CHANGE = "scheduled_change"
INSTANCE_STOPPED = "instance_stopped"
INSTANCE_TERMINATED = "instance_terminated"
CAPACITY_RESERVATION_INTERRUPTED = "capacity_reservation_interrupted"
NO_OP = "no_op"
# From DescribeInstanceStatus, not the queue.
INSTANCE_STATUS = "instance_status"
SYSTEM_STATUS = "system_status"
EVENT_STATUS = "event_status"

QUEUE_KINDS = (
    SPOT_INTERRUPTED,
    REBALANCE_RECOMMENDATION,
    SCHEDULED_CHANGE,
    INSTANCE_STOPPED,
    INSTANCE_TERMINATED,
    CAPACITY_RESERVATION_INTERRUPTED,
    NO_OP,
)

# The (source, detail-type) of each event the queue's EventBridge rules send, version "0".
SPOT_WARNING = ("aws.ec2", "EC2 Spot Instance Interruption Warning")
REBALANCE = ("aws.ec2", "EC2 Instance Rebalance Recommendation")
HEALTH_EVENT = ("aws.health", "AWS Health Event")
STATE_CHANGE = ("aws.ec2", "EC2 Instance State-change Notification")
RESERVATION_WARNING = ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning")
RULES = {
    "ScheduledChangeRule": HEALTH_EVENT,
    "SpotInterruptionRule": SPOT_WARNING,
    "RebalanceRule": REBALANCE,
    "InstanceStateChangeRule": STATE_CHANGE,
    "CapacityReservationInterruptionRule": RESERVATION_WARNING,
}

STOPPED_STATES = frozenset({"stopping", "stopped"})
ACCEPTED_STATES = STOPPED_STATES | {"shutting-down", "terminated"}


class UnparsableMessage(ValueError):
    """The body is not an EventBridge event: logged, counted and deleted."""


@dataclass(frozen=True)
class Message:
    kind: str
    instance_ids: tuple[str, ...] = ()
    id: str = ""
    time: datetime | None = None  # when the event happened, for the queue-duration metric
    source: str = ""
    detail_type: str = ""
    detail: dict = field(default_factory=dict, compare=False)

    @property
    def summary(self) -> str:
        """What the event says, in a few words, for the Interruptions view."""
        if self.kind == SPOT_INTERRUPTED:
            return f"spot interruption warning ({self.detail.get('instance-action') or 'terminate'})"
        if self.kind == CAPACITY_RESERVATION_INTERRUPTED:
            return f"capacity reservation interruption warning ({self.detail.get('instance-action') or 'terminate'})"
        if self.kind in (INSTANCE_STOPPED, INSTANCE_TERMINATED):
            return f"instance state {self.detail.get('state', '')}"
        if self.kind == SCHEDULED_CHANGE:
            return f"AWS Health {self.detail.get('eventTypeCode', 'scheduled change')}"
        if self.kind == REBALANCE_RECOMMENDATION:
            return "rebalance recommendation"
        if self.kind in (INSTANCE_STATUS, SYSTEM_STATUS, EVENT_STATUS):
            return f"{self.detail.get('category', self.kind)}: {', '.join(self.detail.get('checks') or ())}"
        return f"{self.source} {self.detail_type}".strip() or "empty message"


def parse(body: str | None) -> Message:
    """The message in an SQS body; raises :class:`UnparsableMessage`."""
    if not body:
        return Message(NO_OP)
    try:
        event = json.loads(body)
    except ValueError as exc:
        raise UnparsableMessage(f"the body is not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise UnparsableMessage(f"the body is JSON {type(event).__name__}, not an EventBridge event object")
    for name in ("version", "source", "detail-type", "id"):
        if not isinstance(event.get(name, ""), str):
            raise UnparsableMessage(f"{name}: expected a string, got {event[name]!r}")
    when = _time(event.get("time"))
    source, detail_type = event.get("source", ""), event.get("detail-type", "")
    common = {"id": event.get("id", ""), "time": when, "source": source, "detail_type": detail_type}
    if event.get("version") != "0" or (source, detail_type) not in RULES.values():
        return Message(NO_OP, **common)
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise UnparsableMessage(f"detail: expected an object for {detail_type!r}, got {detail!r}")
    common["detail"] = detail
    if (source, detail_type) == HEALTH_EVENT:
        if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
            return Message(NO_OP, **common)
        entities = detail.get("affectedEntities") or []
        if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
            raise UnparsableMessage("detail.affectedEntities: expected a list of {entityValue: instance id}")
        ids = tuple(_instance_id(e.get("entityValue"), "detail.affectedEntities[].entityValue") for e in entities)
        return Message(SCHEDULED_CHANGE, ids, **common)
    instance = _instance_id(detail.get("instance-id"), "detail.instance-id")
    if (source, detail_type) == STATE_CHANGE:
        state = str(detail.get("state") or "").lower()
        if state not in ACCEPTED_STATES:
            return Message(NO_OP, **common)
        return Message(INSTANCE_STOPPED if state in STOPPED_STATES else INSTANCE_TERMINATED, (instance,), **common)
    kind = {
        SPOT_WARNING: SPOT_INTERRUPTED,
        REBALANCE: REBALANCE_RECOMMENDATION,
        RESERVATION_WARNING: CAPACITY_RESERVATION_INTERRUPTED,
    }[source, detail_type]
    return Message(kind, (instance,), **common)


def _instance_id(value, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UnparsableMessage(f"{where}: expected an instance id (i-...), got {value!r}")
    return value


def _time(value) -> datetime | None:
    if not value:
        return None
    if not isinstance(value, str):
        raise UnparsableMessage(f"time: expected an RFC 3339 timestamp, got {value!r}")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UnparsableMessage(f"time: expected an RFC 3339 timestamp, got {value!r}") from None
