"""EC2 instance health from ``DescribeInstanceStatus``, judged as upstream's provider judges it
(``aws/karpenter-provider-aws`` ``pkg/providers/instancestatus``). No boto3 here: the raw
``InstanceStatuses`` items in, the unhealthy instances out.

* A failed instance or system status check counts once it has been impaired for
  ``UNHEALTHY_AFTER`` (120 s): the instance is broken, so it is terminated forcefully.
* A scheduled event (reboot, maintenance, retirement, stop) counts at once: the host warrants
  vacating, with a normal drain, as the same event from EventBridge is handled.
* EBS status checks are ignored (a failed volume may be a pod's, not the node's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from provisioning.cloud.messages import EVENT_STATUS, INSTANCE_STATUS, SYSTEM_STATUS

UNHEALTHY_AFTER = 120.0
EVENT_CODES = ("instance-reboot", "system-reboot", "system-maintenance", "instance-retirement", "instance-stop")
# DescribeInstanceStatus ANDs filters of different names: one call per set, ORed.
FILTER_SETS = (
    [{"Name": "instance-status.status", "Values": ["impaired"]}],
    [{"Name": "system-status.status", "Values": ["impaired"]}],
    [{"Name": "event.code", "Values": list(EVENT_CODES)}],
)
CATEGORIES = {INSTANCE_STATUS: "InstanceStatus", SYSTEM_STATUS: "SystemStatus", EVENT_STATUS: "EventStatus"}
FORCEFUL = frozenset({INSTANCE_STATUS, SYSTEM_STATUS})


@dataclass(frozen=True)
class Unhealthy:
    instance_id: str
    kind: str  # instance_status | system_status | event_status (upstream's message kinds)
    since: datetime
    checks: tuple[str, ...]  # the failed checks or the event codes

    @property
    def category(self) -> str:
        """The metric's label: InstanceStatus, SystemStatus or EventStatus."""
        return CATEGORIES[self.kind]

    @property
    def forceful(self) -> bool:
        return self.kind in FORCEFUL


def unhealthy(statuses: list[dict], now: datetime) -> list[Unhealthy]:
    """One entry per (instance, category) that is unhealthy now."""
    out: list[Unhealthy] = []
    seen: set[str] = set()
    for status in statuses:
        instance = status.get("InstanceId") or ""
        if not instance or instance in seen:
            continue
        seen.add(instance)
        for kind, key in ((INSTANCE_STATUS, "InstanceStatus"), (SYSTEM_STATUS, "SystemStatus")):
            failed = [
                d
                for d in (status.get(key) or {}).get("Details") or []
                if d.get("Status") == "failed"
                and (now - _aware(d.get("ImpairedSince"), now)).total_seconds() >= UNHEALTHY_AFTER
            ]
            if failed:
                since = min(_aware(d.get("ImpairedSince"), now) for d in failed)
                out.append(Unhealthy(instance, kind, since, tuple(str(d.get("Name") or "") for d in failed)))
        events = [e for e in status.get("Events") or [] if e.get("Code") in EVENT_CODES]
        if events:
            out.append(Unhealthy(instance, EVENT_STATUS, now, tuple(str(e["Code"]) for e in events)))
    return out


def _aware(value, now: datetime) -> datetime:
    """boto3 parses ``impairedSince`` to an aware datetime; a missing one counts as now."""
    if not isinstance(value, datetime):
        return now
    return value if value.tzinfo else value.replace(tzinfo=now.tzinfo)
