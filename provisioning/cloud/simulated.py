"""The simulated AWS of the embedded default: a moto server seeded like an EKS account
prepared for Karpenter, an insufficient-capacity knob, and a simulated spot market.

``python -m provisioning.cloud.simulated --port P`` serves moto on 127.0.0.1:P. Before it
listens, the same process seeds moto's in-memory backends (no API calls, so nothing is
refused by the reserved-name checks of the public API):

* EC2: a VPC with one private subnet per availability zone of the region and a cluster
  security group, all tagged ``karpenter.sh/discovery: <cluster>``; Amazon-owned EKS AMIs
  (AL2023 standard/nvidia/neuron, Bottlerocket standard/nvidia, AL2 x86_64/arm64/gpu,
  Windows Server 2019/2022/2025) with the names Amazon gives them.
* SSM: the public parameters the AMI aliases resolve through (``/aws/service/eks/...``,
  ``/aws/service/bottlerocket/...``, ``/aws/service/ami-windows-latest/...``), both the
  ``recommended``/``latest`` and the pinned-version paths.
* IAM: the role ``KarpenterNodeRole-<cluster>`` and an instance profile of the same name.

In front of moto sits :class:`CapacityMiddleware`:

* Offerings listed as exhausted (``capacity-type:instance-type:zone``; ``*`` for the zone
  or the capacity type matches any) get EC2's insufficient-capacity answers: RunInstances
  fails with ``InsufficientInstanceCapacity`` (HTTP 500, the EC2 XML error body), and an
  instant CreateFleet launches from the remaining overrides only, reporting each exhausted
  override in ``errorSet``. The set comes from ``KARPWEB_SIM_INSUFFICIENT_CAPACITY``
  (comma-separated) at start and from ``GET``/``POST /_karpweb/insufficient-capacity``
  (JSON ``{"offerings": [...]}``; POST replaces the set) at runtime.
* ``ClientToken`` makes RunInstances and CreateFleet idempotent as on EC2 (moto ignores
  it): a repeated token replays the first answer instead of launching again, and a token
  reused with different parameters gets ``IdempotentParameterMismatch``.

:class:`SimulatedPrices` is the price source of the simulation (moto has no prices).
This module imports moto only inside the functions that run the server, so the price
model is cheap to import.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import ipaddress
import json
import logging
import math
import os
import re
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode
from xml.sax.saxutils import escape

DEFAULT_REGION = "us-east-1"
DEFAULT_CLUSTER = "my-cluster"
DEFAULT_KUBERNETES_VERSION = "1.33"
CONTROL_PATH = "/_karpweb/insufficient-capacity"
INSUFFICIENT_CAPACITY_ENV = "KARPWEB_SIM_INSUFFICIENT_CAPACITY"
DISCOVERY_TAG = "karpenter.sh/discovery"

# The release the seeded AMIs belong to (names and creation dates follow from it).
AMI_RELEASE = "20261101"
BOTTLEROCKET_VERSION = "1.50.0"
WINDOWS_RELEASE = "2026.11.12"
EKS_AMI_OWNER = "602401143452"
BOTTLEROCKET_AMI_OWNER = "092701018921"
WINDOWS_AMI_OWNER = "801119661308"

EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
LAUNCH_ACTIONS = ("CreateFleet", "RunInstances")
CAPACITY_TYPES = ("spot", "on-demand", "*")


# ------------------------------------------------------------------ the simulated spot market


def _unit(text: str) -> float:
    """A stable number in [0, 1) for ``text`` (the same on every machine and run)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 2**32


_FAMILY = re.compile(r"^([a-z]+)(\d+)")


def base_discount(family: str) -> float:
    """The family's base spot discount, 55%–75%, picked by a stable hash of its name."""
    return 0.55 + 0.20 * _unit(f"family:{family}")


def family_discount(family: str) -> float:
    """The base discount plus the terms for older generations and burstable families."""
    discount = base_discount(family)
    match = _FAMILY.match(family)
    if match:
        generation = int(match.group(2))
        if generation <= 3:
            discount += 0.08
        elif generation == 4:
            discount += 0.05
        elif generation == 5:
            discount += 0.02
        if match.group(1) == "t":
            discount += 0.05
    return discount


def zone_variation(instance_type: str, zone: str) -> float:
    """A stable ±3 points per zone and instance type."""
    return (_unit(f"zone:{zone}/{instance_type}") - 0.5) * 0.06


def spot_discount(instance_type: str, zone: str) -> float:
    """The fraction of the on-demand price a spot instance saves; see :class:`SimulatedPrices`."""
    discount = family_discount(instance_type.split(".", 1)[0]) + zone_variation(instance_type, zone)
    return min(max(discount, 0.10), 0.88)


def simulated_spot_price(instance_type: str, zone: str, on_demand: float) -> float:
    """The spot price of ``instance_type`` in ``zone`` given its on-demand price."""
    raw = on_demand * (1.0 - spot_discount(instance_type, zone))
    ceiling = on_demand * 0.9
    price = round(raw, 4)
    if price <= 0 or price > ceiling:  # four decimals are too coarse for sub-cent prices
        price = math.floor(raw * 1e6) / 1e6
    return price


class SimulatedPrices:
    """A deterministic spot market over the catalog snapshot's on-demand list prices.

    ``on_demand_prices()`` is the table given (instance type → USD/hour). ``spot_prices()``
    prices every type with a positive on-demand price in every given zone:

    ``spot = on_demand × (1 − discount)``, where ``discount`` is

    * a base discount per instance family between 55% and 75%, picked by a stable hash
      (SHA-256) of the family name (``m5``, ``c6i``...), so all sizes of a family get
      about the same discount (:func:`base_discount`);
    * deeper for older generations (+8 points for generation ≤ 3, +5 for 4, +2 for 5) and
      for burstable ``t`` families (+5 points) (:func:`family_discount`);
    * varied per zone by ±3 points with a stable hash of zone and instance type, so the
      cheapest zone differs between types (:func:`zone_variation`);
    * clamped to 10%–88% (:func:`spot_discount`).

    For example m5.large at $0.096 on demand costs $0.0273 spot in us-east-1a.

    Prices are rounded to 4 decimals (6 for the few sub-cent prices where 4 decimals would
    break a bound); a spot price is always positive and never above 90% of on-demand.
    No randomness: the same inputs give the same prices in every process and run.
    """

    def __init__(self, snapshot_on_demand: dict[str, float], zones: list[str]) -> None:
        self._on_demand = dict(snapshot_on_demand)
        self._zones = list(zones)

    def on_demand_prices(self) -> dict[str, float]:
        return dict(self._on_demand)

    def spot_prices(self) -> dict[tuple[str, str], float]:
        return {
            (instance_type, zone): simulated_spot_price(instance_type, zone, price)
            for instance_type, price in sorted(self._on_demand.items())
            if price and price > 0
            for zone in self._zones
        }


# ------------------------------------------------------------------ what the account holds


@dataclass(frozen=True)
class SeedImage:
    """An Amazon-published EKS AMI and the SSM parameters that point at it."""

    name: str
    family: str  # "AL2023" | "AL2" | "Bottlerocket" | "Windows2019" | ...
    arch: str  # EC2 spelling: "x86_64" | "arm64"
    variant: str  # "standard" | "nvidia" | "neuron"
    owner_id: str
    ssm_parameters: tuple[str, ...]
    platform: str = ""  # "windows" for Windows AMIs

    @property
    def image_id(self) -> str:
        # Stable across restarts, so launch templates named by content hash stay reusable.
        return "ami-" + hashlib.sha256(self.name.encode()).hexdigest()[:17]

    @property
    def description(self) -> str:
        return f"EKS-optimized {self.family} {self.variant} node AMI for Kubernetes ({self.arch})"


def seed_images(kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> list[SeedImage]:
    """The AMIs of one EKS release for ``kubernetes_version``, with their SSM paths
    (reference Part II §1.2)."""
    k8s = kubernetes_version
    release = f"v{AMI_RELEASE}"
    eks = f"/aws/service/eks/optimized-ami/{k8s}"
    images: list[SeedImage] = []
    for arch, variant in (
        ("x86_64", "standard"),
        ("arm64", "standard"),
        ("x86_64", "nvidia"),
        ("arm64", "nvidia"),
        ("x86_64", "neuron"),
    ):
        name = f"amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{release}"
        base = f"{eks}/amazon-linux-2023/{arch}/{variant}"
        images.append(
            SeedImage(
                name,
                "AL2023",
                arch,
                variant,
                EKS_AMI_OWNER,
                (f"{base}/recommended/image_id", f"{base}/{name}/image_id"),
            )
        )
    for suffix, arch, variant in (
        ("", "x86_64", "standard"),
        ("-arm64", "arm64", "standard"),
        ("-gpu", "x86_64", "nvidia"),
    ):
        name = f"amazon-eks{suffix}-node-{k8s}-{release}"
        base = f"{eks}/amazon-linux-2{suffix}"
        images.append(
            SeedImage(
                name,
                "AL2",
                arch,
                variant,
                EKS_AMI_OWNER,
                (f"{base}/recommended/image_id", f"{base}/{name}/image_id"),
            )
        )
    for nvidia in ("", "-nvidia"):
        for arch in ("x86_64", "arm64"):
            build = hashlib.sha256(f"bottlerocket{nvidia}{arch}{k8s}".encode()).hexdigest()[:8]
            name = f"bottlerocket-aws-k8s-{k8s}{nvidia}-{arch}-v{BOTTLEROCKET_VERSION}-{build}"
            base = f"/aws/service/bottlerocket/aws-k8s-{k8s}{nvidia}/{arch}"
            images.append(
                SeedImage(
                    name,
                    "Bottlerocket",
                    arch,
                    "nvidia" if nvidia else "standard",
                    BOTTLEROCKET_AMI_OWNER,
                    (f"{base}/latest/image_id", f"{base}/{BOTTLEROCKET_VERSION}/image_id"),
                )
            )
    for year in ("2019", "2022", "2025"):
        stem = f"Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}"
        images.append(
            SeedImage(
                f"{stem}-{WINDOWS_RELEASE}",
                f"Windows{year}",
                "x86_64",
                "standard",
                WINDOWS_AMI_OWNER,
                (f"/aws/service/ami-windows-latest/{stem}/image_id",),
                platform="windows",
            )
        )
    return images


@dataclass(frozen=True)
class SeededAccount:
    region: str
    cluster: str
    vpc_id: str
    subnets: dict[str, str]  # zone → subnet id
    security_group_id: str
    images: tuple[SeedImage, ...]
    instance_profile: str


def _account_id() -> str:
    from moto.core import DEFAULT_ACCOUNT_ID

    return DEFAULT_ACCOUNT_ID


def seed_account(
    region: str = DEFAULT_REGION,
    cluster: str = DEFAULT_CLUSTER,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
) -> SeededAccount:
    """Fill moto's in-memory backends (this process) like an EKS account set up for Karpenter."""
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami
    from moto.ssm.models import Parameter, ssm_backends

    account = _account_id()
    ec2 = ec2_backends[account][region]
    discovery = {DISCOVERY_TAG: cluster}

    vpc = ec2.create_vpc("10.0.0.0/16")
    ec2.create_tags([vpc.id], {"Name": f"{cluster}-vpc", **discovery})
    zones = sorted(ec2.describe_availability_zones(), key=lambda z: z.name)
    prefix = max(19, 16 + math.ceil(math.log2(max(len(zones), 1))))
    blocks = ipaddress.ip_network("10.0.0.0/16").subnets(new_prefix=prefix)
    subnets: dict[str, str] = {}
    for zone, block in zip(zones, blocks, strict=False):
        subnet = ec2.create_subnet(vpc.id, str(block), availability_zone=zone.name)
        ec2.create_tags(
            [subnet.id],
            {
                "Name": f"{cluster}-private-{zone.name}",
                "kubernetes.io/role/internal-elb": "1",
                f"kubernetes.io/cluster/{cluster}": "shared",
                **discovery,
            },
        )
        subnets[zone.name] = subnet.id

    group = ec2.create_security_group(
        f"eks-cluster-sg-{cluster}",
        f"EKS created security group applied to ENI that is attached to EKS Control Plane master nodes, "
        f"as well as any managed workloads of cluster {cluster}.",
        vpc_id=vpc.id,
        tags={"Name": f"eks-cluster-sg-{cluster}", f"kubernetes.io/cluster/{cluster}": "owned", **discovery},
    )

    images = seed_images(kubernetes_version)
    created = datetime.strptime(AMI_RELEASE, "%Y%m%d").replace(tzinfo=UTC)
    ssm = ssm_backends[account][region]
    for image in images:
        ec2.amis[image.image_id] = Ami(
            ec2,
            ami_id=image.image_id,
            name=image.name,
            description=image.description,
            owner_id=image.owner_id,
            owner_alias="amazon",
            public=True,
            virtualization_type="hvm",
            architecture=image.arch,
            creation_date=created,
            platform=image.platform or None,
            hypervisor="xen",
            root_device_type="ebs",
            root_device_name="/dev/sda1" if image.platform == "windows" else "/dev/xvda",
            region_name=next(iter(subnets), f"{region}a"),
            boot_mode="uefi-preferred",
            tags=discovery,
        )
        for name in image.ssm_parameters:
            ssm._parameters[name].append(
                Parameter(
                    account_id=account,
                    name=name,
                    value=image.image_id,
                    parameter_type="String",
                    description=None,
                    allowed_pattern=None,
                    keyid=None,
                    last_modified_date=created,
                    version=1,
                    data_type="aws:ec2:image",
                )
            )

    return SeededAccount(
        region=region,
        cluster=cluster,
        vpc_id=vpc.id,
        subnets=subnets,
        security_group_id=group.id,
        images=tuple(images),
        instance_profile=_seed_iam(account, region, cluster),
    )


def _seed_iam(account: str, region: str, cluster: str) -> str:
    """The node role of the seed's EC2NodeClass and an instance profile of the same name."""
    try:
        from moto.iam.models import iam_backends
        from moto.utilities.utils import get_partition

        iam = iam_backends[account][get_partition(region)]
        role = f"KarpenterNodeRole-{cluster}"
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
        iam.create_role(
            role_name=role,
            assume_role_policy_document=json.dumps(trust),
            path="/",
            permissions_boundary=None,
            description=f"Karpenter node role of cluster {cluster}",
            tags=[{"Key": DISCOVERY_TAG, "Value": cluster}],
            max_session_duration=None,
        )
        iam.create_instance_profile(role, "/", role_names=[role])
        return role
    except Exception as exc:  # the simulation still serves EC2 and SSM without IAM
        print(f"simulated AWS: no IAM instance profile ({exc})", file=sys.stderr)
        return ""


# ------------------------------------------------------------------ insufficient capacity


def parse_offering_keys(keys: Iterable[str]) -> set[str]:
    """Validate ``capacity-type:instance-type:zone`` keys; raises ValueError naming a bad one."""
    result = set()
    for raw in keys:
        if not isinstance(raw, str):
            raise ValueError(f"{raw!r}: expected a string capacity-type:instance-type:zone")
        key = raw.strip()
        if not key:
            continue
        parts = key.split(":")
        if len(parts) != 3 or not all(parts) or parts[0] not in CAPACITY_TYPES:
            raise ValueError(f"{key!r}: expected capacity-type:instance-type:zone, capacity type spot or on-demand")
        result.add(key)
    return result


class ExhaustedOfferings:
    """The offerings without capacity, shared by the request threads."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._keys = frozenset(parse_offering_keys(keys))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ExhaustedOfferings:
        raw = (environ if environ is not None else os.environ).get(INSUFFICIENT_CAPACITY_ENV, "")
        return cls(raw.split(","))

    def keys(self) -> list[str]:
        return sorted(self._keys)

    def replace(self, keys: Iterable[str]) -> list[str]:
        parsed = frozenset(parse_offering_keys(keys))
        with self._lock:
            self._keys = parsed
        return sorted(parsed)

    def exhausted(self, capacity_type: str, instance_type: str, zone: str | None) -> bool:
        keys = self._keys
        for ct in (capacity_type, "*"):
            if f"{ct}:{instance_type}:*" in keys or (zone and f"{ct}:{instance_type}:{zone}" in keys):
                return True
        return False


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

    def __init__(self, app: Callable, offerings: ExhaustedOfferings, region: str = DEFAULT_REGION) -> None:
        self.app = app
        self.offerings = offerings
        self.region = region
        self._launch_lock = threading.Lock()
        self._client_tokens: dict[tuple[str, str, str], tuple[str, tuple[str, list, bytes]]] = {}

    # -------------------------------------------------------------- WSGI

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == CONTROL_PATH:
            return self._respond(start_response, self._control(environ))
        params = self._ec2_launch_params(environ)
        if params is None:
            return self.app(environ, start_response)
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
            body = self._read_body(environ)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            params += parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        action = next((v for k, v in params if k == "Action"), "")
        if action not in LAUNCH_ACTIONS:
            return None
        if next((v for k, v in params if k == "DryRun"), "").lower() == "true":
            return None  # EC2 checks permissions only; moto answers DryRunOperation
        if scope:
            environ["karpweb.region"] = scope.group(1)
        return params

    @staticmethod
    def _read_body(environ: dict[str, Any]) -> bytes:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        stream = environ["wsgi.input"]
        return stream.read(length) if length > 0 else stream.read()

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
                payload = json.loads(self._read_body(environ) or b"{}")
                keys = payload["offerings"] if isinstance(payload, dict) else None
                if not isinstance(keys, list):
                    raise ValueError('expected {"offerings": ["capacity-type:instance-type:zone", ...]}')
                self.offerings.replace(keys)
            except (ValueError, KeyError) as exc:
                return _json("400 Bad Request", {"error": str(exc).strip("'\"")})
        elif method != "GET":
            return _json("405 Method Not Allowed", {"error": "GET or POST"})
        return _json("200 OK", {"offerings": self.offerings.keys()})

    # -------------------------------------------------------------- launches

    def _backend(self, environ: dict[str, Any]) -> Any:
        from moto.ec2.models import ec2_backends

        return ec2_backends[_account_id()][environ.get("karpweb.region") or self.region]

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
        if self.offerings.exhausted(capacity_type, instance_type, zone):
            message = insufficient_capacity_message(capacity_type, instance_type, zone, self._zones(ec2))
            return ec2_error("InsufficientInstanceCapacity", message), False
        response = self._forward(environ)
        return response, response[0].startswith("200")

    def _create_fleet(self, environ: dict, params: list[tuple[str, str]]) -> tuple[tuple[str, list, bytes], bool]:
        get = dict(params).get
        if (get("Type") or "maintain") != "instant":
            response = self._forward(environ)
            return response, response[0].startswith("200")
        ec2 = self._backend(environ)
        capacity_type = get("TargetCapacitySpecification.DefaultTargetCapacityType") or "on-demand"
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

        kept: list[tuple[_FleetConfig, list[list[tuple[str, str]]]]] = []
        errors: list[str] = []
        zones = self._zones(ec2)
        for config in (configs[i] for i in sorted(configs)):
            template, data = self._template_data(
                ec2,
                config.field("LaunchTemplateSpecification.LaunchTemplateId"),
                config.field("LaunchTemplateSpecification.LaunchTemplateName"),
                config.field("LaunchTemplateSpecification.Version"),
            )
            survivors = []
            for _number, fields in sorted(config.overrides, key=lambda o: o[0]) or [(0, [])]:
                values = dict(fields)
                instance_type = values.get("InstanceType") or data.get("InstanceType", "")
                zone = (
                    values.get("AvailabilityZone")
                    or self._subnet_zone(ec2, values.get("SubnetId", ""))
                    or self._template_zone(ec2, data)
                )
                if instance_type and self.offerings.exhausted(capacity_type, instance_type, zone):
                    message = insufficient_capacity_message(capacity_type, instance_type, zone, zones)
                    errors.append(self._error_item(config, template, values, capacity_type, message))
                else:
                    survivors.append(fields)
            if survivors:
                kept.append((config, survivors))

        if not errors:
            response = self._forward(environ)
            return response, response[0].startswith("200")
        if not kept:
            fleet_id = f"fleet-{uuid.uuid4()}"
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{EC2_XMLNS}">'
                f"<requestId>{uuid.uuid4()}</requestId><fleetId>{fleet_id}</fleetId>"
                f"<errorSet>{''.join(errors)}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
            ).encode()
            return ("200 OK", [("Content-Type", "text/xml")], body), False

        rewritten = list(others)
        for new_index, (config, survivors) in enumerate(kept, start=1):
            prefix = f"LaunchTemplateConfigs.{new_index}."
            rewritten += [(prefix + k, v) for k, v in config.fields]
            if config.overrides:
                for new_number, fields in enumerate(survivors, start=1):
                    rewritten += [(f"{prefix}Overrides.{new_number}.{k}", v) for k, v in fields]
        status, headers, body = self._forward(environ, rewritten)
        if not status.startswith("200"):
            return (status, headers, body), False
        return (status, headers, _add_fleet_errors(body, errors)), True

    @staticmethod
    def _error_item(config: _FleetConfig, template: Any, values: dict[str, str], lifecycle: str, message: str) -> str:
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
            f"<lifecycle>{escape(lifecycle)}</lifecycle><errorCode>InsufficientInstanceCapacity</errorCode>"
            f"<errorMessage>{escape(message)}</errorMessage></item>"
        )


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


# ------------------------------------------------------------------ the process


def build_app(offerings: ExhaustedOfferings, region: str = DEFAULT_REGION) -> CapacityMiddleware:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    return CapacityMiddleware(DomainDispatcherApplication(create_backend_app), offerings, region)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provisioning.cloud.simulated", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--region", default=DEFAULT_REGION)
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("--kubernetes-version", default=DEFAULT_KUBERNETES_VERSION)
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)

    try:
        offerings = ExhaustedOfferings.from_env()
    except ValueError as exc:
        parser.error(f"{INSUFFICIENT_CAPACITY_ENV}: {exc}")
    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())

    seed_account(args.region, args.cluster, args.kubernetes_version)
    if stop.is_set():  # stopped while seeding
        return 0
    app = build_app(offerings, args.region)
    server = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.2,), name="moto", daemon=True)
    thread.start()
    print(f"simulated AWS on http://127.0.0.1:{server.server_port} (region {args.region})", flush=True)
    while not stop.wait(0.2):
        if not thread.is_alive():
            return 1
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
