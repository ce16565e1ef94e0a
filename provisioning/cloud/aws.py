"""The CloudProvider on EC2 through boto3 (the only module that imports boto3 or botocore).

The same code serves real AWS and the simulated AWS of the embedded default: endpoint and
credentials come from boto3's standard environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID`` ...), never from here.

* Catalog inputs: ``DescribeInstanceTypes``, ``DescribeInstanceTypeOfferings``, zone ids
  (reference Part II §3.1); prices in :class:`AWSPrices` (§4.1, §4.3).
* EC2NodeClass resolution: subnets, security groups, AMIs (aliases through the public SSM
  parameters of §1.2), the instance profile (created for ``role``).
* Launch (§5): one launch template per EC2NodeClass, AMI and node settings, named by a hash
  of its content; then CreateFleet (instant) or RunInstances, ``ClientToken`` = the
  NodeClaim uid, EC2 errors mapped to reasons for people (§4.6, §5.4). A batch of
  NodeClaims of identical input (§5.1 item 8) is one CreateFleet under the batch's token,
  each instance then tagged with its NodeClaim.

This module makes the calls and turns botocore's errors into ours; what the calls carry
and what their answers mean is worked out in modules without boto3: ``selectors``,
``userdata``, ``launchtemplate``, ``launchplan``, ``describe``, ``tags``, ``errors`` and
``pricing``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from provisioning.cloud.base import (
    BatchLaunch,
    CapacityReservation,
    CloudError,
    Image,
    Instance,
    InsufficientCapacity,
    LaunchOption,
    LaunchRequest,
    NodeClassNotReady,
    PricingUnavailable,
    QueueMessage,
    ResolvedNodeClass,
    SecurityGroup,
    Subnet,
)
from provisioning.cloud.config import AWSConfig
from provisioning.cloud.describe import TypeFacts, image_from, instance_from, type_facts
from provisioning.cloud.errors import (
    NOT_FOUND_CODES,
    SPOT_SLR_CODE,
    TEMPLATE_NOT_FOUND_CODES,
    cloud_error,
    insufficient_capacity,
    is_capacity_error,
)
from provisioning.cloud.instancestatus import FILTER_SETS
from provisioning.cloud.launchplan import (
    Planned,
    client_token,
    errors_summary,
    fleet_failure,
    fleet_instances,
    fleet_request,
    launch_options,
    pair_instances,
    plan_launch,
    run_instances_request,
    unique,
)
from provisioning.cloud.launchtemplate import launch_template_data, template_name
from provisioning.cloud.pricing import (
    SPOT_PRODUCT_DESCRIPTIONS,
    currency_for,
    get_products_filters,
    latest_spot_prices,
    parse_price_list,
    pricing_api_region,
)
from provisioning.cloud.reservations import from_ec2 as reservation_from_ec2
from provisioning.cloud.reservations import queries as reservation_queries
from provisioning.cloud.selectors import (
    alias_parameters,
    best_images,
    describe_term,
    describe_terms,
    image_query,
    selector_filters,
)
from provisioning.cloud.tags import (
    LAUNCH_BATCH_TAG,
    NODECLAIM_TAG,
    NODEPOOL_TAG,
    base_tags,
    batch_tags,
    instance_profile_name,
    instance_profile_path,
    instance_profile_tags,
    launch_tags,
    nodeclaim_tags,
    tag_list,
    tag_specifications,
)
from provisioning.crd.ec2nodeclass import effective_ami_family

log = logging.getLogger(__name__)

BOTO_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3})
MAX_RUN_INSTANCES_ATTEMPTS = 20  # offerings tried by one RunInstances launch before giving up
LIVE_STATES = ("pending", "running", "stopping", "stopped", "shutting-down")
OWNED_STATES = ("pending", "running", "stopping", "stopped")  # an instance a NodeClaim can still have
Launched = TypeVar("Launched")
TEMPLATE_CACHE_SECONDS = 60.0
PROFILE_CACHE_SECONDS = 300.0


def error_code(err: BaseException) -> str:
    if isinstance(err, ClientError):
        return str(err.response.get("Error", {}).get("Code") or "")
    return ""


def to_cloud_error(err: Exception, action: str) -> CloudError:
    """A botocore exception as the CloudError a caller can act on."""
    if isinstance(err, ClientError):
        return cloud_error(action, error_code(err), str(err.response.get("Error", {}).get("Message") or ""))
    if isinstance(err, BotoCoreError):
        return CloudError(f"{action}: AWS could not be reached ({err})", reason="CloudUnreachable")
    return CloudError(f"{action}: {err}")


def _session(config: AWSConfig, session_kwargs: dict[str, Any] | None) -> boto3.session.Session:
    return boto3.session.Session(**{"region_name": config.region, **(session_kwargs or {})})


class _CapacityError(Exception):
    """A launch call answered with an insufficient-capacity-class error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def of_fleet(self, request: LaunchRequest, planned: list[Planned]) -> CloudError:
        """As a fleet answer that names no offering: every offering planned is exhausted."""
        return fleet_failure({"Errors": [{"ErrorCode": self.code, "ErrorMessage": self.message}]}, request, planned)


class AWSCloud:
    """:class:`~provisioning.cloud.base.CloudProvider` on EC2."""

    def __init__(self, config: AWSConfig, session_kwargs: dict[str, Any] | None = None) -> None:
        self.config = config
        self.region = config.region
        self._session = _session(config, session_kwargs)
        self.ec2 = self._session.client("ec2", config=BOTO_CONFIG)
        self.ssm = self._session.client("ssm", config=BOTO_CONFIG)
        self._iam: Any = None
        self._lock = threading.Lock()
        self._type_facts: dict[str, TypeFacts | None] = {}
        self._templates: dict[str, float] = {}  # launch template name → known to exist until
        self._profiles: dict[tuple[str, str], float] = {}  # (profile, role) → ensured until

    @property
    def iam(self) -> Any:
        if self._iam is None:
            self._iam = self._session.client("iam", config=BOTO_CONFIG)
        return self._iam

    def _call(self, action: str, method: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return method(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise to_cloud_error(exc, action) from exc

    def _pages(self, client: Any, operation: str, key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        try:
            for page in client.get_paginator(operation).paginate(**kwargs):
                yield from page.get(key, [])
        except (ClientError, BotoCoreError) as exc:
            raise to_cloud_error(exc, operation) from exc

    # -------------------------------------------------------------- catalog inputs (§3.1)

    def instance_type_infos(self) -> list[dict[str, Any]]:
        infos = list(
            self._pages(
                self.ec2,
                "describe_instance_types",
                "InstanceTypes",
                Filters=[
                    {"Name": "supported-virtualization-type", "Values": ["hvm"]},
                    {"Name": "processor-info.supported-architecture", "Values": ["x86_64", "arm64"]},
                ],
                PaginationConfig={"PageSize": 100},
            )
        )
        with self._lock:
            for info in infos:
                self._type_facts[info["InstanceType"]] = type_facts(info)
        return infos

    def instance_type_zones(self) -> dict[str, set[str]]:
        zones: dict[str, set[str]] = {}
        for offering in self._pages(
            self.ec2,
            "describe_instance_type_offerings",
            "InstanceTypeOfferings",
            LocationType="availability-zone",
            PaginationConfig={"PageSize": 1000},
        ):
            zones.setdefault(offering["InstanceType"], set()).add(offering["Location"])
        return zones

    def zone_ids(self) -> dict[str, str]:
        response = self._call("DescribeAvailabilityZones", self.ec2.describe_availability_zones)
        return {z["ZoneName"]: z.get("ZoneId", "") for z in response.get("AvailabilityZones", [])}

    # -------------------------------------------------------------- EC2NodeClass resolution

    def resolve_nodeclass(self, name: str, spec: dict[str, Any]) -> ResolvedNodeClass:
        family = effective_ami_family(spec) or ""
        problems: list[str] = []

        subnets = self._resolve_subnets(spec.get("subnetSelectorTerms") or [])
        if not subnets:
            terms = describe_terms(spec.get("subnetSelectorTerms"))
            problems.append(f"no subnet matches subnetSelectorTerms ({terms})")
        groups = self._resolve_security_groups(spec.get("securityGroupSelectorTerms") or [])
        if not groups:
            terms = describe_terms(spec.get("securityGroupSelectorTerms"))
            problems.append(f"no security group matches securityGroupSelectorTerms ({terms})")
        images, image_problems = self._resolve_images(spec.get("amiSelectorTerms") or [])
        problems += image_problems
        if not images and not image_problems:
            problems.append(f"no AMI matches amiSelectorTerms ({describe_terms(spec.get('amiSelectorTerms'))})")
        if not family:
            problems.append("amiFamily is required when amiSelectorTerms has no alias")

        profile = ""
        if spec.get("instanceProfile"):
            profile = str(spec["instanceProfile"])
        elif spec.get("role"):
            profile, problem = self._ensure_instance_profile(name, str(spec["role"]), spec.get("tags") or {})
            if problem:
                problems.append(problem)
        else:
            problems.append("neither role nor instanceProfile is set")

        return ResolvedNodeClass(
            name=name,
            ami_family=family,
            subnets=tuple(subnets),
            security_groups=tuple(groups),
            images=tuple(images),
            instance_profile=profile,
            problems=tuple(problems),
            capacity_reservations=self.capacity_reservations(spec.get("capacityReservationSelectorTerms") or []),
        )

    def capacity_reservations(self, terms: list[dict[str, Any]]) -> tuple[CapacityReservation, ...]:
        """The active reservations ``capacityReservationSelectorTerms`` select (each query of
        ``reservations.queries`` once; terms are ORed), by id; those past their end left out."""
        found: dict[str, CapacityReservation] = {}
        now = datetime.now(UTC)
        for query in reservation_queries(terms):
            for raw in self._pages(self.ec2, "describe_capacity_reservations", "CapacityReservations", **query):
                end = raw.get("EndDate")
                if isinstance(end, datetime) and (end if end.tzinfo else end.replace(tzinfo=UTC)) <= now:
                    continue  # ended: EC2 may still call it active for a while
                found[raw["CapacityReservationId"]] = reservation_from_ec2(raw, now)
        return tuple(sorted(found.values(), key=lambda r: r.id))

    def _resolve_subnets(self, terms: list[dict[str, Any]]) -> list[Subnet]:
        found: dict[str, Subnet] = {}
        for term in terms:
            filters = selector_filters(term, "subnet-id")
            if not filters:
                continue
            for s in self._pages(self.ec2, "describe_subnets", "Subnets", Filters=filters):
                found[s["SubnetId"]] = Subnet(
                    id=s["SubnetId"],
                    zone=s["AvailabilityZone"],
                    zone_id=s.get("AvailabilityZoneId", ""),
                    available_ips=int(s.get("AvailableIpAddressCount", 0)),
                )
        return sorted(found.values(), key=lambda s: (s.zone, s.id))

    def _resolve_security_groups(self, terms: list[dict[str, Any]]) -> list[SecurityGroup]:
        found: dict[str, SecurityGroup] = {}
        for term in terms:
            filters = selector_filters(term, "group-id", "group-name")
            if not filters:
                continue
            for g in self._pages(self.ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
                found[g["GroupId"]] = SecurityGroup(id=g["GroupId"], name=g.get("GroupName", ""))
        return sorted(found.values(), key=lambda g: g.id)

    def _resolve_images(self, terms: list[dict[str, Any]]) -> tuple[list[Image], list[str]]:
        candidates: list[Image] = []
        problems: list[str] = []
        for term in terms:
            if term.get("alias"):
                found, problem = self._images_by_alias(term["alias"])
            elif term.get("ssmParameter"):
                found, problem = self._images_by_parameter(term["ssmParameter"])
            else:
                found, problem = self._images_by_query(term), ""
            if problem:
                problems.append(problem)
            elif not found:
                problems.append(f"no AMI matches amiSelectorTerms ({describe_term(term)})")
            candidates += found
        images = best_images(candidates)
        if images:
            # Terms are ORed: a term that matched nothing is no problem while others matched.
            problems = [p for p in problems if not p.startswith("no AMI matches")]
        return images, problems

    def _images_by_alias(self, alias: str) -> tuple[list[Image], str]:
        paths, problem = alias_parameters(alias, self.config.kubernetes_version)
        if problem:
            return [], problem
        values: dict[str, str] = {}
        for start in range(0, len(paths), 10):
            chunk = [p for p, _, _ in paths[start : start + 10]]
            response = self._call("GetParameters", self.ssm.get_parameters, Names=chunk)
            values.update({p["Name"]: p["Value"] for p in response.get("Parameters", [])})
        wanted = {values[p]: (arch, variant) for p, arch, variant in paths if p in values}
        if not wanted:
            k8s = self.config.kubernetes_version
            return [], f"no AMI matches amiSelectorTerms (alias {alias}: no SSM parameter for Kubernetes {k8s})"
        images = []
        for raw in self._describe_images(Filters=[{"Name": "image-id", "Values": sorted(wanted)}]):
            arch, variant = wanted[raw["ImageId"]]
            images.append(image_from(raw, variant=variant, ec2_arch=arch))
        if not images:
            return [], f"no AMI matches amiSelectorTerms (alias {alias}: its AMIs are not in this region)"
        return images, ""

    def _images_by_parameter(self, parameter: str) -> tuple[list[Image], str]:
        try:
            value = self.ssm.get_parameter(Name=parameter)["Parameter"]["Value"]
        except ClientError as exc:
            if error_code(exc) in NOT_FOUND_CODES:
                return [], f"no AMI matches amiSelectorTerms (ssmParameter {parameter} does not exist)"
            raise to_cloud_error(exc, "GetParameter") from exc
        except BotoCoreError as exc:
            raise to_cloud_error(exc, "GetParameter") from exc
        images = [image_from(raw) for raw in self._describe_images(Filters=[{"Name": "image-id", "Values": [value]}])]
        return images, ""

    def _images_by_query(self, term: dict[str, Any]) -> list[Image]:
        query = image_query(term)
        if not query:
            return []
        images = [image_from(raw) for raw in self._describe_images(**query)]
        return [image for image in images if image.arch]

    def _describe_images(self, **kwargs: Any) -> list[dict[str, Any]]:
        return list(self._pages(self.ec2, "describe_images", "Images", IncludeDeprecated=True, **kwargs))

    def instance_profile_name(self, nodeclass: str) -> str:
        return instance_profile_name(self.config, nodeclass)

    def _ensure_instance_profile(self, nodeclass: str, role: str, spec_tags: dict[str, str]) -> tuple[str, str]:
        """Create (or repair) the instance profile for ``role``; returns its name, or "" and
        the problem when IAM would not (the EC2NodeClass is then not ready)."""
        name = instance_profile_name(self.config, nodeclass)
        role_name = role.rsplit("/", 1)[-1]  # an ARN names the role last
        key = (name, role_name)
        if self._profiles.get(key, 0.0) > time.monotonic():
            return name, ""
        try:
            try:
                profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            except ClientError as exc:
                if error_code(exc) != "NoSuchEntity":
                    raise
                try:
                    profile = self.iam.create_instance_profile(
                        InstanceProfileName=name,
                        Path=instance_profile_path(self.config, nodeclass),
                        Tags=tag_list(instance_profile_tags(self.config, nodeclass, spec_tags)),
                    )["InstanceProfile"]
                except ClientError as exc2:
                    if error_code(exc2) != "EntityAlreadyExists":
                        raise
                    profile = self.iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
            attached = [r["RoleName"] for r in profile.get("Roles", [])]
            if role_name not in attached:
                for other in attached:
                    self.iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=other)
                try:
                    self.iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role_name)
                except ClientError as exc:
                    if error_code(exc) == "NoSuchEntity":
                        return "", f"role {role_name} does not exist in IAM"
                    raise
        except (ClientError, BotoCoreError) as exc:
            detail = f"{error_code(exc)}: {exc}" if isinstance(exc, ClientError) else str(exc)
            return "", f"instance profile for role {role_name} could not be ensured ({detail})"
        self._profiles[key] = time.monotonic() + PROFILE_CACHE_SECONDS
        return name, ""

    # -------------------------------------------------------------- launch templates (§5.3)

    def launch_template_for(self, request: LaunchRequest, image: Image, reservation: LaunchOption | None = None) -> str:
        """The name of the launch template for this request's node settings on ``image`` (and
        the capacity reservation of ``reservation``, a reserved offering), created when missing
        (see :mod:`provisioning.cloud.launchtemplate`)."""
        data = launch_template_data(request, image, self.config, reservation)
        tags = base_tags(request, self.config)
        name = template_name(data, tags)
        with self._lock:
            if self._templates.get(name, 0.0) > time.monotonic():
                return name
        try:
            self.ec2.describe_launch_templates(LaunchTemplateNames=[name])
        except ClientError as exc:
            if error_code(exc) not in TEMPLATE_NOT_FOUND_CODES:
                raise to_cloud_error(exc, "DescribeLaunchTemplates") from exc
            try:
                self.ec2.create_launch_template(
                    LaunchTemplateName=name,
                    LaunchTemplateData=data,
                    TagSpecifications=tag_specifications(tags, ("launch-template",)),
                )
                log.info("created launch template %s for EC2NodeClass %s", name, request.nodeclass.name)
            except ClientError as exc2:
                # Another worker created it between our describe and create: same content.
                if error_code(exc2) != "InvalidLaunchTemplateName.AlreadyExistsException":
                    raise to_cloud_error(exc2, "CreateLaunchTemplate") from exc2
                log.debug("launch template %s was created by another worker", name)
            except BotoCoreError as exc2:
                raise to_cloud_error(exc2, "CreateLaunchTemplate") from exc2
        except BotoCoreError as exc:
            raise to_cloud_error(exc, "DescribeLaunchTemplates") from exc
        with self._lock:
            self._templates[name] = time.monotonic() + TEMPLATE_CACHE_SECONDS
        return name

    def prepare_launch(self, request: LaunchRequest, infos: Iterable[dict[str, Any]] = ()) -> None:
        """What a launch would otherwise do first, done ahead: learn the launch facts of
        ``infos`` (DescribeInstanceTypes answers, as the catalog keeps them) and make sure
        the request's launch template exists for each of its AMIs."""
        with self._lock:
            for info in infos:
                self._type_facts.setdefault(info["InstanceType"], type_facts(info))
        for image in request.nodeclass.images:
            self.launch_template_for(request, image)

    def _forget_templates(self) -> None:
        with self._lock:
            self._templates.clear()

    # -------------------------------------------------------------- instance types for a launch

    def _facts_for(self, instance_types: set[str]) -> dict[str, TypeFacts | None]:
        with self._lock:
            missing = sorted(t for t in instance_types if t not in self._type_facts)
        for start in range(0, len(missing), 100):
            chunk = missing[start : start + 100]
            found = {
                info["InstanceType"]: type_facts(info)
                for info in self._pages(
                    self.ec2,
                    "describe_instance_types",
                    "InstanceTypes",
                    Filters=[{"Name": "instance-type", "Values": chunk}],
                )
            }
            with self._lock:
                for name in chunk:
                    self._type_facts[name] = found.get(name)
        with self._lock:
            return {t: self._type_facts.get(t) for t in instance_types}

    def plan(self, request: LaunchRequest) -> list[Planned]:
        """The offerings of the request's capacity type to try, cheapest first (see
        :mod:`provisioning.cloud.launchplan`), their launch templates created."""
        options = launch_options(request)
        facts = self._facts_for({o.instance_type for o in options})
        return plan_launch(
            request, options, facts, lambda image, option: self.launch_template_for(request, image, option)
        )

    # -------------------------------------------------------------- launch (§5.1)

    def launch(self, request: LaunchRequest) -> Instance:
        self._check_ready(request)
        existing = None if request.first_attempt else self.find_instance(request.nodeclaim_name)
        if existing is not None:
            log.info("nodeclaim %s already has instance %s", request.nodeclaim_name, existing.id)
            return existing
        if not any(o.capacity_type == request.capacity_type for o in request.options):
            raise InsufficientCapacity(
                f"NodeClaim {request.nodeclaim_name} has no {request.capacity_type} offering left to launch"
            )
        if self.config.launch_api == "run-instances":
            return self._rebuilding_lost_templates(lambda: self._run_instances(request, self.plan(request)))
        return self._rebuilding_lost_templates(lambda: self._create_fleet(request, self.plan(request)))

    def _check_ready(self, request: LaunchRequest) -> None:
        if not request.nodeclass.ready:
            raise NodeClassNotReady(
                f"EC2NodeClass {request.nodeclass.name} is not ready: {'; '.join(request.nodeclass.problems)}"
            )

    def _rebuilding_lost_templates(self, launch: Callable[[], Launched]) -> Launched:
        """``launch()``; once more when a launch template was deleted behind our back (cache
        TTL), after forgetting the cache so the templates are built again."""
        try:
            return launch()
        except CloudError as exc:
            if exc.reason != "LaunchTemplateNotFound":
                raise
        self._forget_templates()
        return launch()

    def find_instance(self, nodeclaim_name: str) -> Instance | None:
        """The live instance already launched for a NodeClaim (a retried launch returns it)."""
        return next(iter(self._owned_instances(NODECLAIM_TAG, nodeclaim_name)), None)

    def _owned_instances(self, tag: str, value: str) -> list[Instance]:
        """This cluster's instances tagged ``tag=value`` that a NodeClaim can still have."""
        filters = [
            {"Name": f"tag:{tag}", "Values": [value]},
            {"Name": f"tag:{self.config.cluster_tag}", "Values": ["owned"]},
            {"Name": "instance-state-name", "Values": list(OWNED_STATES)},
        ]
        return [
            instance_from(raw)
            for reservation in self._pages(self.ec2, "describe_instances", "Reservations", Filters=filters)
            for raw in reservation.get("Instances", [])
        ]

    def _create_fleet(self, request: LaunchRequest, planned: list[Planned]) -> Instance:
        tags = launch_tags(request, self.config)
        kwargs = fleet_request(request, planned, tag_specifications(tags, ("instance", "volume", "fleet")))
        try:
            response = self._launch_call("CreateFleet", self.ec2.create_fleet, request.nodeclaim_uid, kwargs)
        except _CapacityError as exc:
            raise exc.of_fleet(request, planned) from exc
        launched = next(iter(fleet_instances(response, request, tags)), None)
        if launched is None:
            raise fleet_failure(response, request, planned)
        if response.get("Errors"):
            log.info("fleet for %s launched despite errors: %s", request.nodeclaim_name, errors_summary(response))
        # Its groups are the launch template's, as in _run_instances (moto's description has
        # the VPC's default group instead): drift compares them with the EC2NodeClass later.
        instance = replace(
            self._describe_instance(launched.id) or launched, security_group_ids=launched.security_group_ids
        )
        if request.capacity_type == "reserved" and not instance.capacity_reservation_id:
            # Not described yet: the reservation is the one of the offering it launched as.
            hit = next(
                (
                    p.option
                    for p in planned
                    if (p.option.instance_type, p.option.zone) == (instance.instance_type, instance.zone)
                ),
                None,
            )
            if hit is not None:
                instance = replace(instance, capacity_type="reserved", capacity_reservation_id=hit.reservation_id)
        return instance

    # -------------------------------------------------------------- a batch: one fleet (§5.1 step 8)

    def launch_batch(self, request: LaunchRequest, nodeclaims: tuple[str, ...]) -> BatchLaunch:
        """One instant CreateFleet of ``len(nodeclaims)`` instances under the batch's token
        (``request.nodeclaim_uid``), then each instance tagged with its NodeClaim (CreateTags),
        as upstream tags after launch. A retry first takes what an earlier attempt launched
        (found by the batch tag; paired as that attempt paired them) and launches the rest."""
        self._check_ready(request)
        names = sorted(set(nodeclaims))
        earlier = [] if request.first_attempt else self._owned_instances(LAUNCH_BATCH_TAG, request.nodeclaim_uid)
        owned = pair_instances(names, earlier)
        rest = [name for name in names if name not in owned]
        shortfall: CloudError | None = None
        if rest:
            # The whole batch goes under the batch's token; a remainder under one derived from
            # it and the NodeClaims left, so a retry of that remainder replays it as well.
            token = request.nodeclaim_uid if len(rest) == len(names) else client_token(request.nodeclaim_uid, *rest)
            fresh, shortfall = self._rebuilding_lost_templates(lambda: self._fleet(request, len(rest), token))
            owned.update(pair_instances(rest, fresh))
        tagged = {name: self._tag(instance, nodeclaim_tags(request, name)) for name, instance in owned.items()}
        return BatchLaunch(tagged, shortfall if len(tagged) < len(names) else None)

    def _fleet(self, request: LaunchRequest, count: int, token: str) -> tuple[list[Instance], CloudError | None]:
        """``count`` instances of the request's capacity type from one CreateFleet, and why
        fewer came when they did."""
        if not any(o.capacity_type == request.capacity_type for o in request.options):
            missing = f"NodeClaim {request.nodeclaim_name} has no {request.capacity_type} offering left to launch"
            return [], InsufficientCapacity(missing)
        planned = self.plan(request)
        tags = batch_tags(request, self.config)
        kwargs = fleet_request(request, planned, tag_specifications(tags, ("instance", "volume", "fleet")), count)
        try:
            response = self._launch_call("CreateFleet", self.ec2.create_fleet, token, kwargs)
        except _CapacityError as exc:
            return [], exc.of_fleet(request, planned)
        instances = fleet_instances(response, request, tags)
        if len(instances) < count:
            return instances, fleet_failure(response, request, planned, count)
        return instances, None

    def _tag(self, instance: Instance, tags: dict[str, str]) -> Instance:
        """``instance`` with ``tags`` (CreateTags, unless it has them already)."""
        if tags.items() <= instance.tags.items():
            return instance
        self._call("CreateTags", self.ec2.create_tags, Resources=[instance.id], Tags=tag_list(tags))
        return replace(instance, tags={**instance.tags, **tags})

    def _run_instances(self, request: LaunchRequest, planned: list[Planned]) -> Instance:
        exhausted: list[LaunchOption] = []
        errors: list[dict[str, Any]] = []
        tags = tag_specifications(launch_tags(request, self.config), ("instance", "volume"))
        for attempt, p in enumerate(planned[:MAX_RUN_INSTANCES_ATTEMPTS]):
            kwargs = run_instances_request(request, p, tags)
            # The first offering uses the NodeClaim uid itself; the next ones tokens derived
            # from it, so a retried launch replays each attempt instead of launching twice.
            token = request.nodeclaim_uid if attempt == 0 else client_token(request.nodeclaim_uid, p.option)
            try:
                response = self._launch_call("RunInstances", self.ec2.run_instances, token, kwargs)
            except _CapacityError as exc:
                errors.append({"ErrorCode": exc.code, "ErrorMessage": exc.message})
                if exc.code == SPOT_SLR_CODE:
                    exhausted += [q.option for q in planned if q.option.capacity_type == "spot"]
                    break
                exhausted.append(p.option)
                continue
            raw = response["Instances"][0]
            instance = self._describe_instance(raw["InstanceId"]) or instance_from(raw)
            # Its groups are the launch template's, as EC2 applies them (moto's answer has the
            # VPC's default group instead); drift compares them with the EC2NodeClass later.
            groups = tuple(g.id for g in request.nodeclass.security_groups)
            if p.option.reservation_id:
                return dataclasses.replace(
                    instance,
                    security_group_ids=groups,
                    capacity_type="reserved",
                    capacity_reservation_id=p.option.reservation_id,
                )
            return dataclasses.replace(instance, security_group_ids=groups)
        raise insufficient_capacity(request, unique(exhausted), errors)

    def _launch_call(self, action: str, method: Any, token: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One launch call with ``ClientToken``; ICE-class errors become :class:`_CapacityError`.
        A token already used with other parameters (the NodeClaim's offerings changed since
        an earlier, failed attempt) is retried once with a token derived from the parameters."""
        for candidate in (token, client_token(token, json.dumps(kwargs, sort_keys=True, default=str))):
            try:
                return method(ClientToken=candidate, **kwargs)
            except ClientError as exc:
                code = error_code(exc)
                if code == "IdempotentParameterMismatch" and candidate == token:
                    continue
                if is_capacity_error(code):
                    raise _CapacityError(code, str(exc.response.get("Error", {}).get("Message", ""))) from exc
                raise to_cloud_error(exc, action) from exc
            except BotoCoreError as exc:
                raise to_cloud_error(exc, action) from exc
        raise AssertionError("unreachable")

    def _describe_instance(self, instance_id: str) -> Instance | None:
        try:
            response = self.ec2.describe_instances(InstanceIds=[instance_id])
        except (ClientError, BotoCoreError):
            return None  # eventual consistency right after a launch: the caller has enough
        for reservation in response.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                return instance_from(raw)
        return None

    # -------------------------------------------------------------- lifecycle

    def terminate(self, instance_id: str) -> None:
        try:
            self.ec2.terminate_instances(InstanceIds=[instance_id])
        except ClientError as exc:
            if error_code(exc) == "InvalidInstanceID.NotFound":
                return  # already gone
            raise to_cloud_error(exc, "TerminateInstances") from exc
        except BotoCoreError as exc:
            raise to_cloud_error(exc, "TerminateInstances") from exc

    def list_instances(self, instance_ids: Iterable[str] | None = None) -> list[Instance]:
        filters = [
            {"Name": f"tag:{self.config.cluster_tag}", "Values": ["owned"]},
            {"Name": "tag-key", "Values": [NODEPOOL_TAG]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        if instance_ids is not None:
            ids = sorted(set(instance_ids))
            if not ids:
                return []
            # A filter, not InstanceIds: an id EC2 no longer knows is left out, not an error.
            filters.append({"Name": "instance-id", "Values": ids})
        return [
            instance_from(raw)
            for reservation in self._pages(
                self.ec2, "describe_instances", "Reservations", Filters=filters, PaginationConfig={"PageSize": 1000}
            )
            for raw in reservation.get("Instances", [])
        ]

    # -------------------------------------------------------------- interruptions and health

    def instance_statuses(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for filters in FILTER_SETS:
            for status in self._pages(self.ec2, "describe_instance_status", "InstanceStatuses", Filters=filters):
                seen.setdefault(status.get("InstanceId", ""), status)
        return list(seen.values())

    def interruption_queue(self, name: str) -> AWSQueue:
        return AWSQueue(self._session, name)


class AWSQueue:
    """The interruption queue: long polls as upstream's SQS provider makes them
    (``pkg/providers/sqs``), the URL looked up once from the name."""

    def __init__(self, session: boto3.session.Session, name: str) -> None:
        self.name = name
        # A long poll holds its connection for up to 20 s: the read timeout must outlast it.
        config = BOTO_CONFIG.merge(Config(read_timeout=40, max_pool_connections=20))
        self.sqs = session.client("sqs", config=config)
        self._url = ""

    @property
    def url(self) -> str:
        if not self._url:
            try:
                self._url = self.sqs.get_queue_url(QueueName=self.name)["QueueUrl"]
            except (ClientError, BotoCoreError) as exc:
                raise to_cloud_error(exc, "GetQueueUrl") from exc
        return self._url

    def receive(
        self, max_messages: int = 10, wait_seconds: int = 20, visibility_seconds: int = 20
    ) -> list[QueueMessage]:
        try:
            answer = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=max_messages,
                WaitTimeSeconds=wait_seconds,
                VisibilityTimeout=visibility_seconds,
                MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"],
                MessageAttributeNames=["All"],
            )
        except (ClientError, BotoCoreError) as exc:
            raise to_cloud_error(exc, "ReceiveMessage") from exc
        out = []
        for raw in answer.get("Messages") or []:
            attributes = raw.get("Attributes") or {}
            sent, count = attributes.get("SentTimestamp"), attributes.get("ApproximateReceiveCount")
            out.append(
                QueueMessage(
                    body=raw.get("Body") or "",
                    receipt=raw["ReceiptHandle"],
                    message_id=raw.get("MessageId", ""),
                    sent_at=int(sent) / 1000 if sent and str(sent).isdigit() else None,
                    receive_count=int(count) if count and str(count).isdigit() else 1,
                )
            )
        return out

    def delete(self, message: QueueMessage) -> None:
        try:
            self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message.receipt)
        except (ClientError, BotoCoreError) as exc:
            raise to_cloud_error(exc, "DeleteMessage") from exc


# ------------------------------------------------------------------ prices (§4.1, §4.3)


class AWSPrices:
    """:class:`~provisioning.cloud.base.PriceSource` on the Price List API and EC2 spot
    price history (the queries and their reading are in :mod:`provisioning.cloud.pricing`).
    Any failure raises ``PricingUnavailable`` (callers use the snapshot)."""

    def __init__(self, config: AWSConfig, session_kwargs: dict[str, Any] | None = None) -> None:
        self.config = config
        session = _session(config, session_kwargs)
        self.pricing = session.client("pricing", region_name=pricing_api_region(config.region), config=BOTO_CONFIG)
        self.ec2 = session.client("ec2", config=BOTO_CONFIG)

    def _query(self, filters: list[dict[str, str]]) -> dict[str, float]:
        items: list[str] = []
        for page in self.pricing.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2", Filters=filters, PaginationConfig={"PageSize": 100}
        ):
            items += page.get("PriceList", [])
        return parse_price_list(items, currency_for(self.config.region))

    def on_demand_prices(self) -> dict[str, float]:
        try:
            with ThreadPoolExecutor(max_workers=2) as pool:
                shared, metal = pool.map(self._query, get_products_filters(self.config.region))
        except (ClientError, BotoCoreError) as exc:
            raise PricingUnavailable(f"Price List API ({pricing_api_region(self.config.region)}): {exc}") from exc
        if not shared or not metal:
            empty = "shared-tenancy" if not shared else "bare-metal"
            raise PricingUnavailable(f"Price List API returned no {empty} on-demand prices for {self.config.region}")
        return {**shared, **metal}

    def spot_prices(self) -> dict[tuple[str, str], float]:
        try:
            pages = self.ec2.get_paginator("describe_spot_price_history").paginate(
                ProductDescriptions=list(SPOT_PRODUCT_DESCRIPTIONS),
                StartTime=datetime.now(UTC),
                PaginationConfig={"PageSize": 2000},
            )
            latest = latest_spot_prices(record for page in pages for record in page.get("SpotPriceHistory", []))
        except (ClientError, BotoCoreError) as exc:
            raise PricingUnavailable(f"DescribeSpotPriceHistory: {exc}") from exc
        if not latest:
            raise PricingUnavailable(f"DescribeSpotPriceHistory returned no spot prices for {self.config.region}")
        return latest
