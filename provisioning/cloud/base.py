"""The CloudProvider protocol and the plain data it speaks.

``aws.py`` implements it with boto3 (the only module that imports boto3); the simulated
AWS of the embedded default is the same code against a moto server. Pricing is a separate
``PriceSource`` because moto has no prices: the simulation prices from the bundled
snapshot and a simulated spot market, production from the Pricing API and spot history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# ------------------------------------------------------------------ EC2NodeClass resolution


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    zone_id: str = ""
    available_ips: int = 0


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str = ""


@dataclass(frozen=True)
class Image:
    """An AMI the EC2NodeClass selected, with what it can run on."""

    id: str
    name: str
    arch: str  # "amd64" | "arm64"
    variant: str = "standard"  # "standard" | "nvidia" | "neuron"
    creation_date: str = ""
    deprecated: bool = False


@dataclass(frozen=True)
class CapacityReservation:
    """A capacity reservation the EC2NodeClass selected (``status.capacityReservations``)."""

    id: str
    instance_type: str
    zone: str
    owner_id: str = ""
    available: int = 0  # instances left
    instance_match_criteria: str = "targeted"  # | "open"
    reservation_type: str = "default"  # | "capacity-block"
    interruptible: bool = False
    end_time: str | None = None  # ISO 8601, UTC
    state: str = "active"  # | "expiring"


@dataclass(frozen=True)
class ResolvedNodeClass:
    """What an EC2NodeClass's selectors found; ``problems`` say why it is not Ready."""

    name: str
    ami_family: str
    subnets: tuple[Subnet, ...] = ()
    security_groups: tuple[SecurityGroup, ...] = ()
    images: tuple[Image, ...] = ()
    instance_profile: str = ""
    problems: tuple[str, ...] = ()
    capacity_reservations: tuple[CapacityReservation, ...] = ()

    @property
    def ready(self) -> bool:
        return not self.problems

    @property
    def zones(self) -> frozenset[str]:
        return frozenset(s.zone for s in self.subnets)


# ------------------------------------------------------------------ launch


@dataclass(frozen=True)
class LaunchOption:
    """One offering a NodeClaim may launch as, in the order to try (cheapest first)."""

    instance_type: str
    zone: str
    capacity_type: str
    price: float
    # A reserved offering's reservation: the launch targets it.
    reservation_id: str = ""
    reservation_type: str = ""  # "default" | "capacity-block"


@dataclass(frozen=True)
class LaunchRequest:
    """What a launch needs. For a batch (:meth:`CloudProvider.launch_batch`) the name and
    uid are the batch's: its token, the ClientToken of its CreateFleet."""

    nodeclaim_name: str
    nodeclaim_uid: str  # the EC2 ClientToken: a retried launch never starts a second instance
    nodepool: str
    nodeclass_spec: dict[str, Any]
    nodeclass: ResolvedNodeClass
    options: tuple[LaunchOption, ...]
    capacity_type: str  # the capacity type to launch now: "reserved", "spot" or "on-demand"
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    # A first attempt skips looking for an instance launched before: none can exist, and
    # the ClientToken covers a call that reached EC2 but whose answer was lost.
    first_attempt: bool = False
    # NodeOverlays set the options' prices: CreateFleet is to take the offerings in the order
    # of those prices (its priorities), not by EC2's own list prices.
    price_overlaid: bool = False


@dataclass(frozen=True)
class Instance:
    id: str
    instance_type: str
    zone: str
    capacity_type: str
    state: str
    launch_time: datetime | None = None
    image_id: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()
    capacity_reservation_id: str = ""  # the reservation it runs in (capacity type "reserved")

    @property
    def launched_with(self) -> dict[str, Any]:
        """What drift compares against the EC2NodeClass's status later (what is known of it)."""
        facts: dict[str, Any] = {"imageId": self.image_id, "subnetId": self.subnet_id}
        facts["securityGroupIds"] = sorted(self.security_group_ids)
        facts["capacityReservationId"] = self.capacity_reservation_id
        return {key: value for key, value in facts.items() if value}

    @property
    def provider_id(self) -> str:
        return f"aws:///{self.zone}/{self.id}"


@dataclass(frozen=True)
class BatchLaunch:
    """What one launch for several NodeClaims of identical launch input gave: an instance
    for some, each tagged with its NodeClaim, and why the others got none."""

    instances: dict[str, Instance]  # NodeClaim name → its instance
    shortfall: CloudError | None = None  # set when a NodeClaim got no instance


class CloudError(Exception):
    """A cloud call failed; ``reason`` is a short CamelCase code for NodeClaim status."""

    reason = "LaunchFailed"

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        if reason:
            self.reason = reason


class InsufficientCapacity(CloudError):
    """No instance: every offering tried lacked capacity. ``unavailable`` are to be
    marked in the ICE cache for 3 minutes."""

    reason = "InsufficientCapacity"

    def __init__(self, message: str, unavailable: tuple[LaunchOption, ...] = ()) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class Throttled(CloudError):
    """The API asked us to slow down; retry with exponential backoff and jitter."""

    reason = "RequestLimitExceeded"


class NodeClassNotReady(CloudError):
    reason = "NodeClassNotReady"


# ------------------------------------------------------------------ protocols


class CloudProvider(Protocol):
    region: str

    def instance_type_infos(self) -> list[dict[str, Any]]:
        """``DescribeInstanceTypes`` (all pages; hvm; x86_64 and arm64), raw dicts."""

    def instance_type_zones(self) -> dict[str, set[str]]:
        """``DescribeInstanceTypeOfferings`` by availability zone: type → zones."""

    def zone_ids(self) -> dict[str, str]:
        """Availability zone name → zone id."""

    def resolve_nodeclass(self, name: str, spec: dict[str, Any]) -> ResolvedNodeClass:
        """Subnets, security groups, AMIs, instance profile and capacity reservations."""

    def launch(self, request: LaunchRequest) -> Instance: ...

    def launch_batch(self, request: LaunchRequest, nodeclaims: tuple[str, ...]) -> BatchLaunch:
        """One instance for each NodeClaim named, all with ``request``'s launch input, from one
        call; a retry (``first_attempt`` false) takes what an earlier attempt launched first."""

    def terminate(self, instance_id: str) -> None: ...

    def list_instances(self, instance_ids: Iterable[str] | None = None) -> list[Instance]:
        """Instances this cluster launched (by the cluster tag), for garbage collection; only
        those of ``instance_ids`` when given (one call for a few, not a listing of all)."""

    def instance_statuses(self) -> list[dict[str, Any]]:
        """``DescribeInstanceStatus`` of the instances with an impaired instance or system
        status or a scheduled event (three calls, ORed, each id once), raw dicts."""

    def interruption_queue(self, name: str) -> MessageQueue:
        """The SQS queue of that name (as upstream's setting: the name, not the URL)."""


@dataclass(frozen=True)
class QueueMessage:
    body: str
    receipt: str
    message_id: str = ""
    sent_at: float | None = None  # Unix seconds (SentTimestamp)
    receive_count: int = 1  # ApproximateReceiveCount: more than 1 is a redelivery


class MessageQueue(Protocol):
    name: str

    def receive(
        self, max_messages: int = 10, wait_seconds: int = 20, visibility_seconds: int = 20
    ) -> list[QueueMessage]:
        """One ReceiveMessage long poll."""

    def delete(self, message: QueueMessage) -> None: ...


class PricingUnavailable(Exception):
    """The price source could not be reached; callers fall back to the snapshot."""


class PriceSource(Protocol):
    def on_demand_prices(self) -> dict[str, float]:
        """Instance type → USD/hour (Linux, shared tenancy)."""

    def spot_prices(self) -> dict[tuple[str, str], float]:
        """(instance type, zone) → the latest spot price, USD/hour."""
