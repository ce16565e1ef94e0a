"""Interruption events and instance health in front of moto, delivered as EC2 delivers them.

:class:`InterruptionMiddleware` is WSGI middleware around the simulated AWS:

* ``POST /_karpweb/interrupt`` with JSON ``{"instanceIds": ["i-..."], "kind": K}`` puts, for
  each instance, the EventBridge event EC2 (or AWS Health) sends for that kind through moto's
  ``put_events``; the rules seeded with the interruption queue route it into the queue as
  AWS would (``seed.seed_interruption_queue``). Kinds:

  * ``spot-interruption``: *EC2 Spot Instance Interruption Warning*
    (``{"instance-id", "instance-action": "terminate"}``). The notice is kept: after
    ``KARPWEB_SIM_SPOT_NOTICE_SECONDS`` (120) the instance is terminated, whatever anyone did
    meanwhile, with the state-change events ``shutting-down`` and ``terminated`` (unless it
    was terminated within the notice, or moto never had it).
  * ``rebalance``: *EC2 Instance Rebalance Recommendation* (``{"instance-id"}``).
  * ``scheduled-change``: the *AWS Health Event* of a scheduled instance retirement
    (``AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED``, category ``scheduledChange``).
  * ``stopping`` / ``terminating``: moto stops / terminates the instance, and the
    *EC2 Instance State-change Notification* ``stopping`` / ``shutting-down`` follows.
  * ``capacity-reservation-interruption``: *EC2 Capacity Reservation Instance Interruption
    Warning* (``{"instance-id", "instance-action": "terminate"}``), an interruptible
    reservation reclaiming the instance.

  The answer is ``{"sent": N}``, the number of events put. Instances moto does not know get
  their events all the same (the account may hold instances nobody provisioned).
* ``DescribeInstanceStatus``, which moto does not model, is answered here from a health layer
  of its own (every check ``ok``/``passed`` unless impaired), with EC2's XML, ``InstanceId.N``,
  ``IncludeAllInstances``, the filters of :data:`STATUS_FILTERS` and ``MaxResults``/``NextToken``.
* ``POST /_karpweb/impair`` sets that layer: ``{"instanceIds": [...], "check":
  "instance"|"system"|"ok"}`` fails a status check since now (``"impairedSeconds": N`` back-dates
  it) or clears both, ``{"instanceIds": [...], "event": CODE}`` schedules an EC2 event (CODE one
  of :data:`SCHEDULED_EVENTS`; ``"none"`` clears them; ``"notBeforeSeconds"`` moves its
  start, default 14 days ahead). ``GET /_karpweb/impair`` shows every instance set apart from
  the default.

Control endpoints answer 400 ``{"error": ...}`` naming the field at fault, 405 to other methods.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import io
import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from provisioning.cloud import messages
from provisioning.cloud.simulated.capacity import EC2_XMLNS, ec2_error, read_body
from provisioning.cloud.simulated.seed import DEFAULT_REGION, account_id

INTERRUPT_PATH = "/_karpweb/interrupt"
IMPAIR_PATH = "/_karpweb/impair"
SPOT_NOTICE_ENV = "KARPWEB_SIM_SPOT_NOTICE_SECONDS"
DEFAULT_SPOT_NOTICE_SECONDS = 120.0

SPOT_INTERRUPTION = "spot-interruption"
REBALANCE = "rebalance"
SCHEDULED_CHANGE = "scheduled-change"
STOPPING = "stopping"
TERMINATING = "terminating"
RESERVATION_INTERRUPTION = "capacity-reservation-interruption"
KINDS = (SPOT_INTERRUPTION, REBALANCE, SCHEDULED_CHANGE, STOPPING, TERMINATING, RESERVATION_INTERRUPTION)

RETIREMENT_EVENT_TYPE = "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"
SCHEDULED_CHANGE_LEAD = timedelta(days=14)  # Health notices come about two weeks ahead

# EC2's scheduled events (DescribeInstanceStatus eventsSet) and their descriptions.
SCHEDULED_EVENTS = {
    "instance-retirement": "The instance is running on degraded hardware",
    "instance-reboot": "The instance is scheduled for a reboot",
    "system-reboot": "The instance is scheduled for a system reboot",
    "system-maintenance": "The instance is scheduled for system maintenance",
    "instance-stop": "The instance is scheduled for stop",
}
CLEAR_EVENTS = "none"
CHECKS = ("instance", "system", "ok")
MAINTENANCE_WINDOW = timedelta(hours=2)  # notAfter of the reboot and maintenance events

INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
STATE_CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}
# DescribeInstanceStatus filters answered here (EC2 has a few more, none of them about health).
STATUS_FILTERS = (
    "availability-zone",
    "event.code",
    "event.description",
    "event.instance-event-id",
    "instance-state-code",
    "instance-state-name",
    "instance-status.reachability",
    "instance-status.status",
    "system-status.reachability",
    "system-status.status",
)
MAX_RESULTS = (5, 1000)

_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/,\s]+/\d{8}/([^/]+)/([^/]+)/aws4_request")
_FILTER_NAME = re.compile(r"^Filter\.(\d+)\.Name$")
_FILTER_VALUE = re.compile(r"^Filter\.(\d+)\.Value\.(\d+)$")
_INSTANCE_ID_PARAM = re.compile(r"^InstanceId\.(\d+)$")

Response = tuple[str, list, bytes]


class BadRequest(ValueError):
    """A control request the endpoint refuses (400), with the reason for the caller."""


def spot_notice_from_env(environ: dict[str, str] | None = None) -> float:
    """The seconds between a spot interruption warning and the termination
    (``KARPWEB_SIM_SPOT_NOTICE_SECONDS``, default 120); ValueError if it is not a number ≥ 0."""
    raw = (environ if environ is not None else os.environ).get(SPOT_NOTICE_ENV, "").strip()
    if not raw:
        return DEFAULT_SPOT_NOTICE_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{raw!r}: expected the seconds of the spot notice, a number of 0 or more (EC2: 120)")
    return seconds


def include_account_in_events() -> None:
    """moto's default EventBridge input template leaves out ``account``; AWS delivers it.
    Put it back, in AWS's order of the envelope fields (this process only)."""
    from moto.events.utils import EventTemplateParser

    EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE = (
        '{"version": "0", "id": "<id>", "detail-type": "<detail-type>", "source": "<source>", '
        '"account": "<account>", "time": <time>, "region": "<region>", "resources": <resources>, '
        '"detail": <detail>}'
    )


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class InstanceHealth:
    """The status checks and scheduled events DescribeInstanceStatus reports, per instance;
    shared by the request threads. Instances not set here pass every check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._impaired: dict[str, dict[str, float]] = {}  # instance → {"instance"|"system": since}
        self._events: dict[str, dict[str, dict[str, Any]]] = {}  # instance → code → event

    def impair(self, instance_ids: Iterable[str], check: str, since: float | None = None) -> None:
        """Fail the ``instance`` or ``system`` check of each instance, since ``since`` (or since
        its check first failed, else now); ``ok`` passes both again."""
        now = time.time()
        with self._lock:
            for instance_id in instance_ids:
                if check == "ok":
                    self._impaired.pop(instance_id, None)
                    continue
                checks = self._impaired.setdefault(instance_id, {})
                if since is not None or check not in checks:
                    checks[check] = now if since is None else since

    def schedule(self, instance_ids: Iterable[str], code: str, not_before: float | None = None) -> None:
        """Schedule the EC2 event ``code`` for each instance (one per code; a new one replaces
        it); ``none`` clears the instance's events."""
        start = time.time() + SCHEDULED_CHANGE_LEAD.total_seconds() if not_before is None else not_before
        with self._lock:
            for instance_id in instance_ids:
                if code == CLEAR_EVENTS:
                    self._events.pop(instance_id, None)
                    continue
                event = {
                    "instanceEventId": f"instance-event-{uuid.uuid4().hex[:17]}",
                    "code": code,
                    "description": SCHEDULED_EVENTS[code],
                    "notBefore": start,
                }
                if code in ("instance-reboot", "system-reboot", "system-maintenance"):
                    event["notAfter"] = start + MAINTENANCE_WINDOW.total_seconds()
                self._events.setdefault(instance_id, {})[code] = event

    def impaired_since(self, instance_id: str) -> dict[str, float]:
        with self._lock:
            return dict(self._impaired.get(instance_id, {}))

    def events(self, instance_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self._events.get(instance_id, {}).values()]

    def describe(self, instance_id: str) -> dict[str, Any]:
        """The instance as ``GET /_karpweb/impair`` shows it."""
        impaired = self.impaired_since(instance_id)
        shown: dict[str, Any] = {}
        for check in ("instance", "system"):
            since = impaired.get(check)
            status = {"status": "ok"} if since is None else {"status": "impaired", "impairedSince": _iso(since)}
            shown[f"{check}Status"] = status
        shown["events"] = [
            {k: _iso(v) if k in ("notBefore", "notAfter") else v for k, v in e.items()}
            for e in self.events(instance_id)
        ]
        return shown

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            ids = sorted(set(self._impaired) | set(self._events))
        return {instance_id: self.describe(instance_id) for instance_id in ids}


class InterruptionMiddleware:
    """WSGI middleware in front of moto: the interruption endpoint, the spot notice that ends
    in termination, DescribeInstanceStatus and its impairment endpoint."""

    def __init__(
        self,
        app: Callable,
        region: str = DEFAULT_REGION,
        spot_notice_seconds: float = DEFAULT_SPOT_NOTICE_SECONDS,
        health: InstanceHealth | None = None,
    ) -> None:
        self.app = app
        self.region = region
        self.spot_notice_seconds = spot_notice_seconds
        self.health = health or InstanceHealth()
        # One lock for everything this middleware does to moto, so a termination and its
        # events are never interleaved with another's.
        self._lock = threading.RLock()
        self._spot_timers: dict[str, threading.Timer] = {}
        include_account_in_events()

    # -------------------------------------------------------------- WSGI

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == INTERRUPT_PATH:
            return _respond(start_response, self._interrupt_endpoint(environ))
        if path == IMPAIR_PATH:
            return _respond(start_response, self._impair_endpoint(environ))
        params = self._describe_instance_status_params(environ)
        if params is None:
            return self.app(environ, start_response)
        return _respond(start_response, self._describe_instance_status(environ, params))

    # -------------------------------------------------------------- interruptions

    def interrupt(self, instance_ids: list[str], kind: str) -> int:
        """Send the events of ``kind`` for each instance (and stop or terminate it in moto, or
        start the spot notice); the number of events put."""
        if kind not in KINDS:
            raise BadRequest(f"kind: expected one of {', '.join(KINDS)}")
        sent = 0
        for instance_id in dict.fromkeys(instance_ids):
            with self._lock:
                if kind == SPOT_INTERRUPTION:
                    detail = {"instance-id": instance_id, "instance-action": "terminate"}
                    sent += self._put(*messages.SPOT_WARNING, detail, [self._arn(instance_id)])
                    self._start_spot_notice(instance_id)
                elif kind == REBALANCE:
                    sent += self._put(*messages.REBALANCE, {"instance-id": instance_id}, [self._arn(instance_id)])
                elif kind == RESERVATION_INTERRUPTION:
                    # An interruptible reservation being reclaimed: a 2-minute warning, as EC2's.
                    detail = {"instance-id": instance_id, "instance-action": "terminate"}
                    sent += self._put(*messages.RESERVATION_WARNING, detail, [self._arn(instance_id)])
                elif kind == SCHEDULED_CHANGE:
                    sent += self._put(*messages.HEALTH_EVENT, self._retirement(instance_id), [instance_id])
                elif kind == STOPPING:
                    instance = self._instance(instance_id)
                    if instance is not None and instance.state not in ("shutting-down", "terminated", "stopped"):
                        self._moto(instance.stop, instance_id)
                    sent += self._state_change(instance_id, "stopping")
                else:
                    instance = self._instance(instance_id)
                    if instance is not None and instance.state != "terminated":
                        self._moto(instance.terminate, instance_id)
                    sent += self._state_change(instance_id, "shutting-down")
        return sent

    def _start_spot_notice(self, instance_id: str) -> None:
        """EC2 sends one warning per interruption; another warning for the same instance keeps
        the first deadline."""
        if instance_id in self._spot_timers:
            return
        timer = threading.Timer(self.spot_notice_seconds, self._reclaim, args=(instance_id,))
        timer.daemon = True
        timer.name = f"spot-notice-{instance_id}"
        self._spot_timers[instance_id] = timer
        timer.start()

    def _reclaim(self, instance_id: str) -> None:
        """The end of the spot notice: EC2 takes the instance back."""
        with self._lock:
            self._spot_timers.pop(instance_id, None)
            instance = self._instance(instance_id)
            if instance is None or instance.state == "terminated":
                return  # no such instance, or terminated within the notice: nothing left to take
            self._moto(instance.terminate, instance_id)
            from moto.ec2.models.instances import StateReason

            reason = "Server.SpotInstanceTermination"
            instance.state_reason = StateReason(f"{reason}: Spot instance termination", reason)
            self._state_change(instance_id, "shutting-down")
            self._state_change(instance_id, "terminated")

    def pending_spot_terminations(self) -> list[str]:
        with self._lock:
            return sorted(self._spot_timers)

    def _state_change(self, instance_id: str, state: str) -> int:
        return self._put(*messages.STATE_CHANGE, {"instance-id": instance_id, "state": state}, [self._arn(instance_id)])

    def _retirement(self, instance_id: str) -> dict[str, Any]:
        now = datetime.now(UTC).replace(microsecond=0)
        start = now + SCHEDULED_CHANGE_LEAD
        end = start + timedelta(hours=1)
        description = (
            f"EC2 has detected degradation of the underlying hardware hosting your Amazon EC2 instance "
            f"{instance_id} in the {self.region} region. Due to this degradation your instance could already be "
            f"unreachable. We will stop your instance after {format_datetime(start, usegmt=True)}."
        )
        return {
            "eventArn": (
                f"arn:aws:health:{self.region}::event/EC2/{RETIREMENT_EVENT_TYPE}/"
                f"{RETIREMENT_EVENT_TYPE}_{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:12]}"
            ),
            "service": "EC2",
            "eventScopeCode": "ACCOUNT_SPECIFIC",
            "communicationId": uuid.uuid4().hex,
            "lastUpdatedTime": format_datetime(now, usegmt=True),
            "statusCode": "upcoming",
            "eventRegion": self.region,
            "eventTypeCode": RETIREMENT_EVENT_TYPE,
            "eventTypeCategory": "scheduledChange",
            "startTime": format_datetime(start, usegmt=True),
            "endTime": format_datetime(end, usegmt=True),
            "eventDescription": [{"language": "en_US", "latestDescription": description}],
            "affectedEntities": [{"entityValue": instance_id}],
        }

    def _put(self, source: str, detail_type: str, detail: dict[str, Any], resources: list[str]) -> int:
        from moto.events.models import events_backends

        entry = {"Source": source, "DetailType": detail_type, "Detail": json.dumps(detail), "Resources": resources}
        answers = events_backends[account_id()][self.region].put_events([entry])
        return sum(1 for answer in answers if "EventId" in answer)

    def _arn(self, instance_id: str) -> str:
        from moto.utilities.utils import get_partition

        return f"arn:{get_partition(self.region)}:ec2:{self.region}:{account_id()}:instance/{instance_id}"

    def _ec2(self, region: str | None = None) -> Any:
        from moto.ec2.models import ec2_backends

        return ec2_backends[account_id()][region or self.region]

    def _instance(self, instance_id: str) -> Any:
        return self._ec2().get_instance_by_id(instance_id)

    @staticmethod
    def _moto(change: Callable[[], Any], instance_id: str) -> None:
        try:
            change()
        except Exception as exc:  # the event goes out all the same
            print(f"simulated AWS: {instance_id}: {exc!r}", file=sys.stderr)

    def _interrupt_endpoint(self, environ: dict[str, Any]) -> Response:
        if environ.get("REQUEST_METHOD") != "POST":
            return _json("405 Method Not Allowed", {"error": f"POST {INTERRUPT_PATH}"})
        try:
            payload = _json_object(environ, '{"instanceIds": ["i-..."], "kind": "spot-interruption"}')
            _no_other_fields(payload, ("instanceIds", "kind"))
            instance_ids = _instance_ids(payload)
            kind = payload.get("kind")
            if kind not in KINDS:
                raise BadRequest(f"kind: expected one of {', '.join(KINDS)}, got {json.dumps(kind)}")
            sent = self.interrupt(instance_ids, kind)
        except BadRequest as exc:
            return _json("400 Bad Request", {"error": str(exc)})
        return _json("200 OK", {"sent": sent})

    # -------------------------------------------------------------- impairments

    def _impair_endpoint(self, environ: dict[str, Any]) -> Response:
        method = environ.get("REQUEST_METHOD")
        if method == "GET":
            return _json("200 OK", {"instances": self.health.snapshot()})
        if method != "POST":
            return _json("405 Method Not Allowed", {"error": f"GET or POST {IMPAIR_PATH}"})
        try:
            payload = _json_object(environ, '{"instanceIds": ["i-..."], "check": "instance"}')
            _no_other_fields(payload, ("instanceIds", "check", "impairedSeconds", "event", "notBeforeSeconds"))
            instance_ids = list(dict.fromkeys(_instance_ids(payload)))
            check, event = payload.get("check"), payload.get("event")
            if check is None and event is None:
                codes = ", ".join([*SCHEDULED_EVENTS, CLEAR_EVENTS])
                raise BadRequest(f'expected "check" ({", ".join(CHECKS)}) or "event" ({codes})')
            if check is not None and check not in CHECKS:
                raise BadRequest(f"check: expected one of {', '.join(CHECKS)}, got {json.dumps(check)}")
            if event is not None and event not in SCHEDULED_EVENTS and event != CLEAR_EVENTS:
                codes = ", ".join([*SCHEDULED_EVENTS, CLEAR_EVENTS])
                raise BadRequest(f"event: expected one of {codes}, got {json.dumps(event)}")
            impaired_seconds = _seconds(payload, "impairedSeconds", minimum=0)
            if impaired_seconds is not None and check not in ("instance", "system"):
                raise BadRequest('impairedSeconds: only with "check": "instance" or "system"')
            not_before_seconds = _seconds(payload, "notBeforeSeconds")
            if not_before_seconds is not None and event not in SCHEDULED_EVENTS:
                raise BadRequest(f'notBeforeSeconds: only with "event": one of {", ".join(SCHEDULED_EVENTS)}')
            ec2 = self._ec2()
            unknown = [i for i in instance_ids if ec2.get_instance_by_id(i) is None]
            if unknown:
                raise BadRequest(f"instanceIds: no such instance in the simulated EC2: {', '.join(unknown)}")
        except BadRequest as exc:
            return _json("400 Bad Request", {"error": str(exc)})
        now = time.time()
        if check is not None:
            since = None if impaired_seconds is None else now - impaired_seconds
            self.health.impair(instance_ids, check, since)
        if event is not None:
            not_before = None if not_before_seconds is None else now + not_before_seconds
            self.health.schedule(instance_ids, event, not_before)
        shown = {instance_id: self.health.describe(instance_id) for instance_id in instance_ids}
        return _json("200 OK", {"impaired": len(instance_ids), "instances": shown})

    # -------------------------------------------------------------- DescribeInstanceStatus

    def _describe_instance_status_params(self, environ: dict[str, Any]) -> list[tuple[str, str]] | None:
        """The Query API parameters of an EC2 DescribeInstanceStatus call, else None. Reading
        the body puts it back, so the next application sees the request unchanged."""
        scope = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
        if scope and scope.group(2) != "ec2":
            return None
        params = parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        content_type = environ.get("CONTENT_TYPE", "")
        if environ.get("REQUEST_METHOD") == "POST" and content_type.startswith("application/x-www-form-urlencoded"):
            body = read_body(environ)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            params += parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        if next((v for k, v in params if k == "Action"), "") != "DescribeInstanceStatus":
            return None
        if scope:
            environ["karpweb.region"] = scope.group(1)
        return params

    def _describe_instance_status(self, environ: dict[str, Any], params: list[tuple[str, str]]) -> Response:
        get = dict(params).get
        if (get("DryRun") or "").lower() == "true":
            return ec2_error(
                "DryRunOperation", "Request would have succeeded, but DryRun flag is set.", "412 Precondition Failed"
            )
        numbered = sorted((int(m.group(1)), v) for k, v in params if (m := _INSTANCE_ID_PARAM.match(k)))
        instance_ids = list(dict.fromkeys(v for _, v in numbered))
        include_all = (get("IncludeAllInstances") or "").lower() == "true"
        names: dict[int, str] = {}
        values: dict[int, list[tuple[int, str]]] = {}
        for key, value in params:
            if m := _FILTER_NAME.match(key):
                names[int(m.group(1))] = value
            elif m := _FILTER_VALUE.match(key):
                values.setdefault(int(m.group(1)), []).append((int(m.group(2)), value))
        filters = [(names[n], [v for _, v in sorted(values.get(n, []))]) for n in sorted(names)]
        for name, wanted in filters:
            if name not in STATUS_FILTERS:
                return ec2_error("InvalidParameterValue", f"The filter '{name}' is invalid", "400 Bad Request")
            if not wanted:
                return ec2_error(
                    "InvalidParameterValue", f"The filter '{name}' needs at least one value", "400 Bad Request"
                )
        max_results = get("MaxResults")
        if max_results is not None:
            if instance_ids:
                return ec2_error(
                    "InvalidParameterCombination",
                    "The parameter instancesSet cannot be used with the parameter maxResults",
                    "400 Bad Request",
                )
            if not max_results.isdigit() or not MAX_RESULTS[0] <= int(max_results) <= MAX_RESULTS[1]:
                return ec2_error(
                    "InvalidParameterValue",
                    f"Value ( {max_results} ) for parameter maxResults is invalid. "
                    f"Expecting a value between {MAX_RESULTS[0]} and {MAX_RESULTS[1]}.",
                    "400 Bad Request",
                )

        region = environ.get("karpweb.region") or self.region
        try:
            ec2 = self._ec2(region)
        except KeyError:
            return ec2_error("InvalidParameterValue", f"Unknown region {region}", "400 Bad Request")
        malformed = [i for i in instance_ids if not INSTANCE_ID.match(i)]
        if malformed:
            return ec2_error("InvalidInstanceID.Malformed", f'Invalid id: "{malformed[0]}"', "400 Bad Request")
        with self._lock:
            everything = ec2.all_instances()
            by_id = {instance.id: instance for instance in everything}
            missing = [i for i in instance_ids if i not in by_id]
            if missing:
                noun = "ID" if len(missing) == 1 else "IDs"
                verb = "does" if len(missing) == 1 else "do"
                return ec2_error(
                    "InvalidInstanceID.NotFound",
                    f"The instance {noun} '{', '.join(missing)}' {verb} not exist",
                    "400 Bad Request",
                )
            candidates = [by_id[i] for i in instance_ids] if instance_ids else everything
            statuses = [self._status(instance) for instance in candidates if include_all or instance.state == "running"]
        statuses = [s for s in statuses if all(_matches(s, name, wanted) for name, wanted in filters)]

        token = get("NextToken")
        if token:
            after = _token_instance(token)
            order = [instance.id for instance in candidates]
            if after not in order:
                return ec2_error(
                    "InvalidPaginationToken",
                    f"The pagination token {token} is not valid or is expired.",
                    "400 Bad Request",
                )
            position = order.index(after)
            statuses = [s for s in statuses if order.index(s["instanceId"]) > position]
        next_token = ""
        if max_results is not None and len(statuses) > int(max_results):
            statuses = statuses[: int(max_results)]
            next_token = _make_token(statuses[-1]["instanceId"])

        items = "".join(_status_xml(status) for status in statuses)
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceStatusResponse xmlns="{EC2_XMLNS}">'
            f"<requestId>{uuid.uuid4()}</requestId><instanceStatusSet>{items}</instanceStatusSet>"
            + (f"<nextToken>{escape(next_token)}</nextToken>" if next_token else "")
            + "</DescribeInstanceStatusResponse>"
        ).encode()
        return "200 OK", [("Content-Type", "text/xml")], body

    def _status(self, instance: Any) -> dict[str, Any]:
        """One item of ``instanceStatusSet``, before filtering."""
        state = instance.state
        impaired = self.health.impaired_since(instance.id)
        status: dict[str, Any] = {
            "instanceId": instance.id,
            "availabilityZone": instance.availability_zone or "",
            "instanceState": {"code": STATE_CODES.get(state, instance.state_code), "name": state},
        }
        for check in ("instance", "system"):
            if state != "running":
                status[f"{check}Status"] = {"status": "not-applicable", "details": []}
                continue
            since = impaired.get(check)
            detail = {"name": "reachability", "status": "passed" if since is None else "failed"}
            if since is not None:
                detail["impairedSince"] = since
            status[f"{check}Status"] = {"status": "ok" if since is None else "impaired", "details": [detail]}
        status["events"] = [] if state == "terminated" else self.health.events(instance.id)
        return status


def _matches(status: dict[str, Any], name: str, wanted: list[str]) -> bool:
    """EC2's filter semantics: any of the values (``*`` and ``?`` are wildcards)."""
    if name == "availability-zone":
        found = [status["availabilityZone"]]
    elif name == "instance-state-name":
        found = [status["instanceState"]["name"]]
    elif name == "instance-state-code":
        found = [str(status["instanceState"]["code"])]
    elif name.endswith(".status"):
        found = [status[_CHECK_KEYS[name.split(".")[0]]]["status"]]
    elif name.endswith(".reachability"):
        found = [d["status"] for d in status[_CHECK_KEYS[name.split(".")[0]]]["details"]]
    else:
        field = {"event.code": "code", "event.description": "description", "event.instance-event-id": "instanceEventId"}
        found = [e[field[name]] for e in status["events"]]
    return any(fnmatch.fnmatchcase(value, pattern) for value in found for pattern in wanted)


_CHECK_KEYS = {"instance-status": "instanceStatus", "system-status": "systemStatus"}


def _status_xml(status: dict[str, Any]) -> str:
    def check(tag: str) -> str:
        details = ""
        for detail in status[tag]["details"]:
            since = (
                f"<impairedSince>{_iso(detail['impairedSince'])}</impairedSince>" if "impairedSince" in detail else ""
            )
            details += f"<item><name>{detail['name']}</name><status>{detail['status']}</status>{since}</item>"
        inner = f"<status>{status[tag]['status']}</status>" + (f"<details>{details}</details>" if details else "")
        return f"<{tag}>{inner}</{tag}>"

    events = ""
    for event in status["events"]:
        events += (
            f"<item><instanceEventId>{escape(event['instanceEventId'])}</instanceEventId>"
            f"<code>{escape(event['code'])}</code><description>{escape(event['description'])}</description>"
            f"<notBefore>{_iso(event['notBefore'])}</notBefore>"
            + (f"<notAfter>{_iso(event['notAfter'])}</notAfter>" if "notAfter" in event else "")
            + "</item>"
        )
    state = status["instanceState"]
    return (
        f"<item><instanceId>{escape(status['instanceId'])}</instanceId>"
        f"<availabilityZone>{escape(status['availabilityZone'])}</availabilityZone>"
        f"<instanceState><code>{state['code']}</code><name>{escape(state['name'])}</name></instanceState>"
        f"{check('systemStatus')}{check('instanceStatus')}"
        + (f"<eventsSet>{events}</eventsSet>" if events else "")
        + "</item>"
    )


def _make_token(instance_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": instance_id}).encode()).decode()


def _token_instance(token: str) -> str:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return decoded["after"] if isinstance(decoded, dict) and isinstance(decoded.get("after"), str) else ""
    except (ValueError, binascii.Error):
        return ""


# ------------------------------------------------------------------ control requests


def _json_object(environ: dict[str, Any], example: str) -> dict[str, Any]:
    raw = read_body(environ)
    try:
        payload = json.loads(raw or b"")
    except ValueError:
        raise BadRequest(f"the body must be a JSON object like {example}") from None
    if not isinstance(payload, dict):
        raise BadRequest(f"the body must be a JSON object like {example}, not {type(payload).__name__}")
    return payload


def _no_other_fields(payload: dict[str, Any], allowed: tuple[str, ...]) -> None:
    other = sorted(set(payload) - set(allowed))
    if other:
        raise BadRequest(f"unknown field {', '.join(map(json.dumps, other))}: expected {', '.join(allowed)}")


def _instance_ids(payload: dict[str, Any]) -> list[str]:
    ids = payload.get("instanceIds")
    expected = 'instanceIds: expected a non-empty list of instance ids like "i-0123456789abcdef0"'
    if not isinstance(ids, list) or not ids:
        raise BadRequest(expected)
    bad = [i for i in ids if not isinstance(i, str) or not INSTANCE_ID.match(i)]
    if bad:
        raise BadRequest(f"{expected}, got {json.dumps(bad[0])}")
    return ids


def _seconds(payload: dict[str, Any], field: str, minimum: float | None = None) -> float | None:
    value = payload.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or abs(value) == float("inf"):
        raise BadRequest(f"{field}: expected a number of seconds, got {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise BadRequest(f"{field}: expected {minimum:g} seconds or more, got {json.dumps(value)}")
    return float(value)


def _respond(start_response: Callable, response: Response) -> list[bytes]:
    status, headers, body = response
    headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]


def _json(status: str, payload: dict[str, Any]) -> Response:
    return status, [("Content-Type", "application/json")], json.dumps(payload).encode()
