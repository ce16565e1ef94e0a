"""What the cluster looks like now, for the overview (and later the REST API): pending pods,
nodes by NodePool and capacity type, spend and what it saves against on-demand, the last
decisions and disruptions, and the problems that need attention. A fixed number of queries,
whatever the number of rows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count

from provisioning.models import (
    ClusterNode,
    ClusterPod,
    Decision,
    Disruption,
    EC2NodeClass,
    Interruption,
    NodeClaim,
    NodePool,
)
from provisioning.services.catalog import on_demand_prices
from provisioning.services.inventory import with_recovery

HOURS_PER_MONTH = 730  # AWS bills a month as 730 hours


@dataclass
class PoolRow:
    nodepool: str
    capacity_type: str
    nodes: int = 0
    price_per_hour: float = 0.0


@dataclass
class Summary:
    pending: int = 0
    unschedulable: int = 0
    bound: int = 0
    nodes: int = 0
    rows: list[PoolRow] = field(default_factory=list)
    price_per_hour: float = 0.0
    on_demand_per_hour: float = 0.0
    decisions: list[Decision] = field(default_factory=list)
    disruptions: list[Disruption] = field(default_factory=list)
    interruptions: list = field(default_factory=list)  # (Interruption, seconds until its pods ran again)
    problems: list[str] = field(default_factory=list)

    @property
    def per_month(self) -> float:
        return self.price_per_hour * HOURS_PER_MONTH

    @property
    def savings_per_hour(self) -> float:
        return max(0.0, self.on_demand_per_hour - self.price_per_hour)

    @property
    def savings_percent(self) -> float:
        return 100 * self.savings_per_hour / self.on_demand_per_hour if self.on_demand_per_hour else 0.0


def summary() -> Summary:
    out = Summary()
    pods = {row["phase"]: row["n"] for row in ClusterPod.objects.values("phase").annotate(n=Count("id"))}
    out.pending = pods.get(ClusterPod.Phase.PENDING, 0)
    out.bound = pods.get(ClusterPod.Phase.RUNNING, 0)
    out.unschedulable = ClusterPod.objects.filter(node_name="").exclude(unschedulable_reason="").count()
    live = list(
        NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES)
        .exclude(instance_id="")
        .values_list("nodepool_name", "capacity_type", "instance_type", "price_per_hour")
    )
    on_demand = on_demand_prices()
    rows: dict[tuple[str, str], PoolRow] = {}
    for nodepool, capacity_type, instance_type, price in live:
        row = rows.setdefault((nodepool, capacity_type), PoolRow(nodepool, capacity_type))
        row.nodes += 1
        row.price_per_hour += float(price or 0)
        out.on_demand_per_hour += on_demand.get(instance_type, float(price or 0))
    out.rows = sorted(rows.values(), key=lambda r: (r.nodepool, r.capacity_type))
    out.nodes = ClusterNode.objects.count()
    out.price_per_hour = sum(r.price_per_hour for r in out.rows)
    out.decisions = list(Decision.objects.annotate(claim_count=Count("claims"))[:5])
    out.disruptions = list(Disruption.objects.all()[:5])
    acted = Interruption.objects.exclude(kind__in=("no_op", "unparsable")).exclude(nodeclaim="")
    out.interruptions = with_recovery(acted.select_related("disruption")[:5])
    out.problems = _problems(out)
    return out


def _unavailable_offerings() -> dict[str, str]:
    from provisioning.services.catalog import unavailable_now

    return unavailable_now()


def _problems(out: Summary) -> list[str]:
    problems = []
    if out.unschedulable:
        reasons: dict[str, int] = defaultdict(int)
        for reason in (
            ClusterPod.objects.filter(node_name="")
            .exclude(unschedulable_reason="")
            .values_list("unschedulable_reason", flat=True)[:200]
        ):
            reasons[reason] += 1
        top, count = max(reasons.items(), key=lambda kv: kv[1])
        problems.append(f"{out.unschedulable} pods cannot be scheduled; {count}× {top}")
    known = set(EC2NodeClass.objects.values_list("name", flat=True))
    for name, ref in NodePool.objects.values_list("name", "node_class_name"):
        if ref not in known:
            problems.append(
                f"NodePool {name} refers to EC2NodeClass {ref!r}, which does not exist: it launches nothing"
            )
    for nodeclass in EC2NodeClass.objects.all():
        ready: Any = nodeclass.ready_condition
        if ready and ready.get("status") == "False":
            problems.append(f"EC2NodeClass {nodeclass.name} is not ready: {ready.get('message', '')}")
    unavailable = _unavailable_offerings()
    if unavailable:
        more = len(unavailable) - 5
        shown = ", ".join(sorted(unavailable)[:5]) + (f" and {more} more" if more > 0 else "")
        problems.append(
            f"{len(unavailable)} offering{'s are' if len(unavailable) > 1 else ' is'} out of capacity "
            f"(InsufficientInstanceCapacity), not used for up to 3 minutes: {shown}"
        )
    failed = NodeClaim.objects.filter(state=NodeClaim.State.FAILED).order_by("-created_at")[:3]
    for claim in failed:
        problems.append(f"NodeClaim {claim.name} failed to launch: {claim.reason}: {claim.message[:160]}")
    return problems
