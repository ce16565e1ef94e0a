"""Insufficient capacity and idempotency in front of moto (which has neither).

:class:`CapacityMiddleware` is WSGI middleware around moto's app:

* Offerings listed as exhausted (``capacity-type:instance-type:zone``; ``*`` for the zone
  or the capacity type matches any) get EC2's insufficient-capacity answers: RunInstances
  fails with ``InsufficientInstanceCapacity`` (HTTP 500, the EC2 XML error body), and an
  instant CreateFleet launches from the remaining overrides only, reporting each exhausted
  override in ``errorSet``. A key ending in ``=N`` has N instances left: launches take from
  it until none is left, so an instant fleet of several instances can be filled in part
  (from the next overrides, then short, each override that ran out in ``errorSet``, as
  EC2 answers). The set comes from ``KARPWEB_SIM_INSUFFICIENT_CAPACITY`` (comma-separated)
  at start and from ``GET``/``POST /_karpweb/insufficient-capacity`` (JSON
  ``{"offerings": [...]}``; POST replaces the set; GET shows what is left) at runtime.
* ``ClientToken`` makes RunInstances and CreateFleet idempotent as on EC2 (moto ignores
  it): a repeated token replays the first answer instead of launching again, and a token
  reused with different parameters gets ``IdempotentParameterMismatch``.
* Each launch call is noted as it arrives, before it waits for the one moto launches at a
  time: ``GET /_karpweb/launch-calls`` lists ``{"action", "clientToken", "at"}`` (Unix
  seconds), the moment a call reached EC2, for measuring how long pods wait for one.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode
from xml.sax.saxutils import escape

from provisioning.cloud.simulated.reservations import (
    FULL_CODE,
    RELEASE_PATH,
    RESERVATIONS_PATH,
    TARGET_PARAM,
    CapacityReservations,
    launched_instance_ids,
    with_reservation_ids,
)
from provisioning.cloud.simulated.seed import DEFAULT_REGION, account_id

CONTROL_PATH = "/_karpweb/insufficient-capacity"
LAUNCH_CALLS_PATH = "/_karpweb/launch-calls"
LAUNCH_CALLS_KEPT = 10_000
INSUFFICIENT_CAPACITY_ENV = "KARPWEB_SIM_INSUFFICIENT_CAPACITY"
EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
LAUNCH_ACTIONS = ("CreateFleet", "RunInstances")
DEFAULT_CAPACITY_TYPE = "TargetCapacitySpecification.DefaultTargetCapacityType"
# The other EC2 actions the capacity reservations change the answer of.
RESERVATION_ACTIONS = ("DescribeCapacityReservations", "DescribeInstances", "TerminateInstances")
CAPACITY_TYPES = ("spot", "on-demand", "*")


def parse_offering_keys(keys: Iterable[str]) -> set[str]:
    """Validate ``capacity-type:instance-type:zone`` keys, each optionally ``=N`` (instances
    left); raises ValueError naming a bad one."""
    return set(_parse_limits(keys))


def _parse_limits(keys: Iterable[str]) -> dict[str, int | None]:
    """Keys as given → the offering and how many instances it has left (None: none at all)."""
    result: dict[str, int | None] = {}
    for raw in keys:
        if not isinstance(raw, str):
            raise ValueError(f"{raw!r}: expected a string capacity-type:instance-type:zone")
        key = raw.strip()
        if not key:
            continue
        offering, _, count = key.partition("=")
        parts = offering.split(":")
        if len(parts) != 3 or not all(parts) or parts[0] not in CAPACITY_TYPES:
            raise ValueError(f"{key!r}: expected capacity-type:instance-type:zone, capacity type spot or on-demand")
        if count and not count.isdigit():
            raise ValueError(f"{key!r}: the count after = must be a whole number of instances left")
        result[offering] = int(count) if count else None
    return result


class ExhaustedOfferings:
    """The offerings without capacity, or with only a few instances left, shared by the
    request threads."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._left = _parse_limits(keys)  # offering → instances left; None: exhausted

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ExhaustedOfferings:
        raw = (environ if environ is not None else os.environ).get(INSUFFICIENT_CAPACITY_ENV, "")
        return cls(raw.split(","))

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(k if n is None else f"{k}={n}" for k, n in self._left.items())

    def replace(self, keys: Iterable[str]) -> list[str]:
        parsed = _parse_limits(keys)
        with self._lock:
            self._left = parsed
        return self.keys()

    def exhausted(self, capacity_type: str, instance_type: str, zone: str | None) -> bool:
        return self.take(capacity_type, instance_type, zone, 1, dry_run=True) == 0

    def take(self, capacity_type: str, instance_type: str, zone: str | None, wanted: int, dry_run: bool = False) -> int:
        """How many of ``wanted`` instances the offering can launch now; they are taken from
        every limit that matches it (unless ``dry_run``)."""
        zones = ("*", zone) if zone else ("*",)
        candidates = [f"{ct}:{instance_type}:{z}" for ct in (capacity_type, "*") for z in zones]
        with self._lock:
            limits = {key: self._left[key] for key in candidates if key in self._left}
            granted = min([wanted, *(left or 0 for left in limits.values())])
            if not dry_run:
                for key, left in limits.items():
                    if left is not None:
                        self._left[key] = left - granted
            return granted


def read_body(environ: dict[str, Any]) -> bytes:
    """The request body: Content-Length bytes, or all of a chunked one (never a read that
    waits for a kept-alive connection to close)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    stream = environ["wsgi.input"]
    if length > 0:
        return stream.read(length)
    return stream.read() if environ.get("wsgi.input_terminated") else b""


def insufficient_capacity_message(capacity_type: str, instance_type: str, zone: str | None, zones: list[str]) -> str:
    if capacity_type == "spot":
        return "There is no Spot capacity available that matches your request."
    others = ", ".join(z for z in zones if z != zone)
    return (
        f"We currently do not have sufficient {instance_type} capacity in the Availability Zone you requested "
        f"({zone or 'unspecified'}). Our system will be working on provisioning additional capacity. "
        f"You can currently get {instance_type} capacity by not specifying an Availability Zone in your request "
        f"or choosing {others}."
    )


def ec2_error(code: str, message: str, status: str = "500 Internal Server Error") -> tuple[str, list, bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()
    return status, [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))], body


_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/,\s]+/\d{8}/([^/]+)/([^/]+)/aws4_request")
_CONFIG = re.compile(r"^LaunchTemplateConfigs\.(\d+)\.(.+)$")
_OVERRIDE = re.compile(r"^Overrides\.(\d+)\.(.+)$")
# The override fields echoed back in an errorSet item, in EC2's order.
_OVERRIDE_FIELDS = (
    ("InstanceType", "instanceType"),
    ("MaxPrice", "maxPrice"),
    ("SubnetId", "subnetId"),
    ("AvailabilityZone", "availabilityZone"),
    ("WeightedCapacity", "weightedCapacity"),
    ("Priority", "priority"),
    ("ImageId", "imageId"),
)


@dataclass
class _FleetConfig:
    index: int
    fields: list[tuple[str, str]]  # everything but the overrides, keys without the config prefix
    overrides: list[tuple[int, list[tuple[str, str]]]]

    def field(self, name: str) -> str:
        return next((v for k, v in self.fields if k == name), "")


class CapacityMiddleware:
    """WSGI middleware in front of moto: the insufficient-capacity knob, its control
    endpoint and ``ClientToken`` idempotency for RunInstances and CreateFleet."""

    def __init__(
        self,
        app: Callable,
        offerings: ExhaustedOfferings,
        region: str = DEFAULT_REGION,
        reservations: CapacityReservations | None = None,
    ) -> None:
        self.app = app
        self.offerings = offerings
        self.reservations = reservations if reservations is not None else CapacityReservations()
        self.region = region
        self._launch_lock = threading.Lock()
        self._client_tokens: dict[tuple[str, str, str], tuple[str, tuple[str, list, bytes]]] = {}
        self.launch_calls: collections.deque[dict[str, Any]] = collections.deque(maxlen=LAUNCH_CALLS_KEPT)

    # -------------------------------------------------------------- WSGI

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == CONTROL_PATH:
            return self._respond(start_response, self._control(environ))
        if environ.get("PATH_INFO") == LAUNCH_CALLS_PATH:
            return self._respond(start_response, _json("200 OK", {"calls": list(self.launch_calls)}))
        if environ.get("PATH_INFO") in (RESERVATIONS_PATH, RELEASE_PATH):
            return self._respond(start_response, self._reservations_control(environ))
        arrived = time.time()
        params = self._ec2_launch_params(environ)
        if params is None:
            return self.app(environ, start_response)
        action = next(v for k, v in params if k == "Action")
        if action in RESERVATION_ACTIONS:
            return self._respond(start_response, self._reservation_action(environ, action, params))
        token = next((v for k, v in params if k == "ClientToken"), "")
        self.launch_calls.append({"action": action, "clientToken": token, "at": arrived})
        with self._launch_lock:
            return self._respond(start_response, self._launch(environ, params))

    def _ec2_launch_params(self, environ: dict[str, Any]) -> list[tuple[str, str]] | None:
        """The Query API parameters of an EC2 RunInstances/CreateFleet call, else None.
        Reading the body puts it back, so moto sees the request unchanged."""
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
        action = next((v for k, v in params if k == "Action"), "")
        if action not in LAUNCH_ACTIONS and action not in RESERVATION_ACTIONS:
            return None
        if next((v for k, v in params if k == "DryRun"), "").lower() == "true":
            return None  # EC2 checks permissions only; moto answers DryRunOperation
        if scope:
            environ["karpweb.region"] = scope.group(1)
        return params

    @staticmethod
    def _respond(start_response: Callable, response: tuple[str, list, bytes]) -> list[bytes]:
        status, headers, body = response
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]

    def _forward(self, environ: dict[str, Any], params: list[tuple[str, str]] | None = None) -> tuple[str, list, bytes]:
        """Let moto answer (with ``params`` as the form body when given)."""
        environ = dict(environ)
        if params is not None:
            body = urlencode(params).encode()
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            environ["QUERY_STRING"] = ""
        captured: dict[str, Any] = {}
        chunks: list[bytes] = []

        def start(status: str, headers: list, exc_info: Any = None) -> Callable[[bytes], None]:
            captured["status"], captured["headers"] = status, list(headers)
            return chunks.append

        result = self.app(environ, start)
        try:
            chunks.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close:
                close()
        return captured["status"], captured["headers"], b"".join(chunks)

    # -------------------------------------------------------------- control endpoint

    def _control(self, environ: dict[str, Any]) -> tuple[str, list, bytes]:
        method = environ.get("REQUEST_METHOD")
        if method == "POST":
            try:
                payload = json.loads(read_body(environ) or b"{}")
                keys = payload["offerings"] if isinstance(payload, dict) else None
                if not isinstance(keys, list):
                    raise ValueError('expected {"offerings": ["capacity-type:instance-type:zone", ...]}')
                self.offerings.replace(keys)
            except (ValueError, KeyError) as exc:
                return _json("400 Bad Request", {"error": str(exc).strip("'\"")})
        elif method != "GET":
            return _json("405 Method Not Allowed", {"error": "GET or POST"})
        return _json("200 OK", {"offerings": self.offerings.keys()})

    # -------------------------------------------------------------- capacity reservations

    def _reservations_control(self, environ: dict[str, Any]) -> tuple[str, list, bytes]:
        method = environ.get("REQUEST_METHOD")
        try:
            payload = json.loads(read_body(environ) or b"{}") if method in ("POST", "DELETE") else {}
        except ValueError as exc:
            return _json("400 Bad Request", {"error": f"not JSON: {exc}"})
        if environ.get("PATH_INFO") == RELEASE_PATH:
            if method != "POST":
                return _json("405 Method Not Allowed", {"error": "POST"})
            ids = payload.get("instanceIds") if isinstance(payload, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                return _json("400 Bad Request", {"error": 'expected {"instanceIds": ["i-...", ...]}'})
            return _json("200 OK", {"released": self.reservations.release(ids)})
        if method == "POST":
            try:
                created = self.reservations.create(payload)
            except ValueError as exc:
                return _json("400 Bad Request", {"error": str(exc)})
            return _json("201 Created", created.as_json())
        if method == "DELETE":
            ids = payload.get("ids") if isinstance(payload, dict) else None
            if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
                return _json("400 Bad Request", {"error": 'expected {"ids": ["cr-...", ...]} or no body'})
            return _json("200 OK", {"deleted": self.reservations.delete(ids)})
        if method != "GET":
            return _json("405 Method Not Allowed", {"error": "GET, POST or DELETE"})
        return _json("200 OK", {"capacityReservations": self.reservations.listing()})

    def _reservation_action(
        self, environ: dict[str, Any], action: str, params: list[tuple[str, str]]
    ) -> tuple[str, list, bytes]:
        if action == "DescribeCapacityReservations":
            return "200 OK", [("Content-Type", "text/xml")], self.reservations.describe(params)
        response = self._forward(environ)
        if not response[0].startswith("200"):
            return response
        if action == "TerminateInstances":
            self.reservations.release([v for k, v in params if k.startswith("InstanceId.")])
            return response
        status, headers, body = response
        return status, headers, with_reservation_ids(body, self.reservations.reservation_of())

    # -------------------------------------------------------------- launches

    def _backend(self, environ: dict[str, Any]) -> Any:
        from moto.ec2.models import ec2_backends

        return ec2_backends[account_id()][environ.get("karpweb.region") or self.region]

    def _launch(self, environ: dict[str, Any], params: list[tuple[str, str]]) -> tuple[str, list, bytes]:
        action = next(v for k, v in params if k == "Action")
        token = next((v for k, v in params if k == "ClientToken"), "")
        if token:
            fingerprint = hashlib.sha256(
                repr(sorted((k, v) for k, v in params if k not in ("ClientToken", "Version"))).encode()
            ).hexdigest()
            key = (environ.get("karpweb.region") or self.region, action, token)
            seen = self._client_tokens.get(key)
            if seen:
                if seen[0] != fingerprint:
                    return ec2_error(
                        "IdempotentParameterMismatch",
                        f"The client token {token} was already used with different parameters.",
                        "400 Bad Request",
                    )
                return seen[1]
        if action == "RunInstances":
            response, launched = self._run_instances(environ, params)
        else:
            response, launched = self._create_fleet(environ, params)
        if token and launched:
            self._client_tokens[key] = (fingerprint, response)
        return response

    def _zones(self, ec2: Any) -> list[str]:
        return sorted(z.name for z in ec2.describe_availability_zones())

    @staticmethod
    def _subnet_zone(ec2: Any, subnet_id: str) -> str | None:
        if not subnet_id:
            return None
        try:
            return ec2.get_subnet(subnet_id).availability_zone
        except Exception:
            return None

    @staticmethod
    def _template_data(ec2: Any, template_id: str, template_name: str, version: str) -> tuple[Any, dict]:
        try:
            template = (
                ec2.get_launch_template(template_id) if template_id else ec2.get_launch_template_by_name(template_name)
            )
            number = {"$Latest": template.latest_version_number, "$Default": template.default_version_number}.get(
                version or "$Default", version
            )
            return template, template.get_version(number).data or {}
        except Exception:
            return None, {}

    def _template_zone(self, ec2: Any, data: dict) -> str | None:
        zone = (data.get("Placement") or {}).get("AvailabilityZone")
        interfaces = data.get("NetworkInterfaces") or data.get("NetworkInterface") or []
        if not zone and interfaces:
            zone = self._subnet_zone(ec2, interfaces[0].get("SubnetId", ""))
        return zone

    def _run_instances(self, environ: dict, params: list[tuple[str, str]]) -> tuple[tuple[str, list, bytes], bool]:
        ec2 = self._backend(environ)
        get = dict(params).get
        _, data = self._template_data(
            ec2,
            get("LaunchTemplate.LaunchTemplateId", ""),
            get("LaunchTemplate.LaunchTemplateName", ""),
            get("LaunchTemplate.Version", ""),
        )
        instance_type = get("InstanceType") or data.get("InstanceType") or "m1.small"
        zone = (
            get("Placement.AvailabilityZone")
            or self._subnet_zone(ec2, get("SubnetId") or get("NetworkInterface.1.SubnetId", ""))
            or self._template_zone(ec2, data)
        )
        market = get("InstanceMarketOptions.MarketType") or (data.get("InstanceMarketOptions") or {}).get("MarketType")
        capacity_type = "spot" if market == "spot" else "on-demand"
        reservation = get(TARGET_PARAM) or _reservation_target(data)
        if reservation:
            # A reservation's instances are its own: the offerings' knob does not apply.
            refused = self.reservations.check(reservation, instance_type, zone)
            if refused is not None:
                return ec2_error(
                    *refused, "400 Bad Request" if refused[0] != FULL_CODE else "500 Internal Server Error"
                ), False
        elif self.offerings.take(capacity_type, instance_type, zone, 1) == 0:
            message = insufficient_capacity_message(capacity_type, instance_type, zone, self._zones(ec2))
            return ec2_error("InsufficientInstanceCapacity", message), False
        response = self._forward(environ)
        if reservation and response[0].startswith("200"):
            self.reservations.add_instances(reservation, launched_instance_ids(response[2]))
        return response, response[0].startswith("200")

    def _create_fleet(self, environ: dict, params: list[tuple[str, str]]) -> tuple[tuple[str, list, bytes], bool]:
        get = dict(params).get
        if (get("Type") or "maintain") != "instant":
            response = self._forward(environ)
            return response, response[0].startswith("200")
        ec2 = self._backend(environ)
        capacity_type = get(DEFAULT_CAPACITY_TYPE) or "on-demand"
        others: list[tuple[str, str]] = []
        configs: dict[int, _FleetConfig] = {}
        for key, value in params:
            match = _CONFIG.match(key)
            if not match:
                others.append((key, value))
                continue
            index, rest = int(match.group(1)), match.group(2)
            config = configs.setdefault(index, _FleetConfig(index, [], []))
            override = _OVERRIDE.match(rest)
            if override:
                number, field = int(override.group(1)), override.group(2)
                entry = next((o for o in config.overrides if o[0] == number), None)
                if entry is None:
                    entry = (number, [])
                    config.overrides.append(entry)
                entry[1].append((field, value))
            else:
                config.fields.append((rest, value))

        # Like EC2, fill the target from the overrides in order, each up to what it has left;
        # an override exhausted, or run out before the target was met, is an errorSet item.
        needed = int(get("TargetCapacitySpecification.TotalTargetCapacity") or 1)
        pools: list[tuple[_FleetConfig, list[tuple[str, str]], int]] = []  # config, override, instances
        errors: list[str] = []
        zones = self._zones(ec2)
        reserved: dict[int, str] = {}  # config index → the reservation its launch template targets
        for config in (configs[i] for i in sorted(configs)):
            template, data = self._template_data(
                ec2,
                config.field("LaunchTemplateSpecification.LaunchTemplateId"),
                config.field("LaunchTemplateSpecification.LaunchTemplateName"),
                config.field("LaunchTemplateSpecification.Version"),
            )
            reservation = _reservation_target(data)
            if reservation:
                reserved[config.index] = reservation
            for _number, fields in sorted(config.overrides, key=lambda o: o[0]) or [(0, [])]:
                values = dict(fields)
                instance_type = values.get("InstanceType") or data.get("InstanceType", "")
                zone = (
                    values.get("AvailabilityZone")
                    or self._subnet_zone(ec2, values.get("SubnetId", ""))
                    or self._template_zone(ec2, data)
                )
                if reservation:
                    refused = self.reservations.check(reservation, instance_type, zone) if needed else None
                    got = 0 if refused else min(needed, self.reservations.available(reservation))
                    if got:
                        pools.append((config, fields, got))
                        needed -= got
                    if refused or needed:
                        code, message = refused or (FULL_CODE, f"Insufficient capacity in {reservation}.")
                        errors.append(self._error_item(config, template, values, capacity_type, message, code))
                    continue
                if instance_type and self.offerings.exhausted(capacity_type, instance_type, zone):
                    got = 0
                elif not needed:
                    continue
                else:
                    got = self.offerings.take(capacity_type, instance_type, zone, needed) if instance_type else needed
                    pools.append((config, fields, got))
                    needed -= got
                if not got or needed:
                    message = insufficient_capacity_message(capacity_type, instance_type, zone, zones)
                    errors.append(self._error_item(config, template, values, capacity_type, message))

        if not errors and not reserved:
            response = self._forward(environ)
            return response, response[0].startswith("200")
        if not pools:
            fleet_id = f"fleet-{uuid.uuid4()}"
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{EC2_XMLNS}">'
                f"<requestId>{uuid.uuid4()}</requestId><fleetId>{fleet_id}</fleetId>"
                f"<errorSet>{''.join(errors)}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
            ).encode()
            return ("200 OK", [("Content-Type", "text/xml")], body), False

        # moto launches a whole fleet from one override: one fleet per pool, answered as one.
        answers = []
        target = "TargetCapacitySpecification.TotalTargetCapacity"
        prefix = "LaunchTemplateConfigs.1."
        for config, fields, count in pools:
            rewritten = [(k, str(count) if k == target else v) for k, v in others]
            # moto knows on-demand and spot only: a Capacity Block's fleet runs as on-demand there.
            rewritten = [
                (k, "on-demand" if k == DEFAULT_CAPACITY_TYPE and v == "capacity-block" else v) for k, v in rewritten
            ]
            rewritten += [(prefix + k, v) for k, v in config.fields]
            if config.overrides:
                rewritten += [(f"{prefix}Overrides.1.{k}", v) for k, v in fields]
            answer = self._forward(environ, rewritten)
            if not answer[0].startswith("200"):
                return answer, False
            if config.index in reserved:
                self.reservations.add_instances(reserved[config.index], launched_instance_ids(answer[2]))
            answers.append(answer[2])
        status, headers, _ = answer
        return (status, headers, _add_fleet_errors(_merge_fleet_instances(answers), errors)), True

    @staticmethod
    def _error_item(
        config: _FleetConfig,
        template: Any,
        values: dict[str, str],
        lifecycle: str,
        message: str,
        code: str = "InsufficientInstanceCapacity",
    ) -> str:
        spec = ""
        template_id = config.field("LaunchTemplateSpecification.LaunchTemplateId") or getattr(template, "id", "")
        name = config.field("LaunchTemplateSpecification.LaunchTemplateName") or getattr(template, "name", "")
        version = config.field("LaunchTemplateSpecification.Version")
        if template is not None and version in ("", "$Latest", "$Default"):
            latest = version == "$Latest"
            version = str(template.latest_version_number if latest else template.default_version_number)
        for tag, value in (("launchTemplateId", template_id), ("launchTemplateName", name), ("version", version)):
            if value:
                spec += f"<{tag}>{escape(value)}</{tag}>"
        overrides = "".join(
            f"<{tag}>{escape(values[field])}</{tag}>" for field, tag in _OVERRIDE_FIELDS if values.get(field)
        )
        return (
            "<item><launchTemplateAndOverrides>"
            f"<launchTemplateSpecification>{spec}</launchTemplateSpecification>"
            f"<overrides>{overrides}</overrides></launchTemplateAndOverrides>"
            f"<lifecycle>{escape(lifecycle)}</lifecycle><errorCode>{escape(code)}</errorCode>"
            f"<errorMessage>{escape(message)}</errorMessage></item>"
        )


def _reservation_target(template_data: dict) -> str:
    """The capacity reservation a launch template's data targets, or ""."""
    spec = template_data.get("CapacityReservationSpecification") or {}
    return str((spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId") or "")


def _merge_fleet_instances(bodies: list[bytes]) -> bytes:
    """The first CreateFleet answer with the launched instances of all of them."""
    first, *rest = (body.decode("utf-8") for body in bodies)
    items = "".join(_between(text, "<fleetInstanceSet>", "</fleetInstanceSet>") for text in rest)
    if not items:
        return first.encode()
    if "<fleetInstanceSet>" in first:
        return first.replace("</fleetInstanceSet>", f"{items}</fleetInstanceSet>", 1).encode()
    return re.sub(r"<fleetInstanceSet\s*/>", f"<fleetInstanceSet>{items}</fleetInstanceSet>", first, count=1).encode()


def _between(text: str, start: str, end: str) -> str:
    if start not in text:
        return ""
    return text.split(start, 1)[1].rsplit(end, 1)[0]


def _add_fleet_errors(body: bytes, items: list[str]) -> bytes:
    """Put ``items`` into the ``errorSet`` of moto's CreateFleet response."""
    text = body.decode("utf-8")
    joined = "".join(items)
    for empty in ("<errorSet/>", "<errorSet />", "<errorSet></errorSet>"):
        if empty in text:
            return text.replace(empty, f"<errorSet>{joined}</errorSet>", 1).encode()
    if "<errorSet>" in text:
        return text.replace("<errorSet>", f"<errorSet>{joined}", 1).encode()
    return text.replace("</CreateFleetResponse>", f"<errorSet>{joined}</errorSet></CreateFleetResponse>", 1).encode()


def _json(status: str, payload: dict[str, Any]) -> tuple[str, list, bytes]:
    return status, [("Content-Type", "application/json")], json.dumps(payload).encode()
