"""The cluster's state, read from the database when Prometheus scrapes: a custom collector.

A fixed number of queries whatever the number of rows (about fifteen), each grouped in the
database where it can be. Series per pod are capped (``KARPWEB_METRICS_MAX_POD_SERIES``,
pending pods first, the rest counted in ``karpweb_metrics_pod_series_omitted``); series per
node and per offering are as many as Karpenter's.

Where the labels differ from Karpenter's, they are a subset: a node's series carry the node
name, NodePool, instance type, capacity type, zone and architecture, not every well-known
label; a pod's ``owner`` is ``Kind/name`` rather than an API path.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from provisioning.models import ClusterNode, ClusterPod, Decision, Disruption, Interruption, NodeClaim, NodePool
from provisioning.scheduling.quantity import QuantityError, to_int

CONTROLLER = "provisioner"
# Node labels a series carries, by the label name Karpenter gives each (its snake_case form).
NODE_LABELS = {
    "nodepool": "karpenter.sh/nodepool",
    "instance_type": "node.kubernetes.io/instance-type",
    "capacity_type": "karpenter.sh/capacity-type",
    "zone": "topology.kubernetes.io/zone",
    "arch": "kubernetes.io/arch",
}
POD_LABELS = ["name", "namespace", "owner", "node", *NODE_LABELS, "phase"]


class ClusterState(Collector):
    def collect(self) -> Iterator[Metric]:
        node_labels = _node_labels()
        yield from pods(node_labels)
        yield from nodes(node_labels)
        yield from nodeclaims()
        yield from nodepools()
        yield from decisions()
        yield from interruptions()
        yield offering_prices()


# ------------------------------------------------------------------ pods


def pods(node_labels: Mapping[str, dict[str, str]]) -> Iterator[Metric]:
    from provisioning.services.provision import pending_pods

    limit = max(0, settings.KARPWEB_METRICS_MAX_POD_SERIES)
    state = GaugeMetricFamily(
        "karpenter_pods_state",
        "Pod state is the current state of pods, labeled by the pod name, namespace, owner, node, nodepool name, "
        "zone, architecture, capacity type, instance type and pod phase.",
        labels=POD_LABELS,
    )
    # An empty node name sorts first: pending pods keep their series when the cap bites.
    rows = ClusterPod.objects.order_by("node_name", "namespace", "name").values_list(
        "namespace", "name", "owner", "node_name", "phase"
    )[:limit]
    shown = 0
    for namespace, name, owner, node, phase in rows:
        on_node = node_labels.get(node, {})
        state.add_metric([name, namespace, owner, node, *(on_node.get(k, "") for k in NODE_LABELS), phase], 1)
        shown += 1
    yield state
    yield _gauge(
        "karpweb_metrics_pod_series_omitted",
        "Pods left out of karpenter_pods_state by KARPWEB_METRICS_MAX_POD_SERIES (bound pods go first).",
        ClusterPod.objects.count() - shown,
    )
    unschedulable = ClusterPod.objects.filter(node_name="").exclude(unschedulable_reason="").count()
    yield _gauge(
        "karpenter_scheduler_unschedulable_pods_count",
        "The number of unschedulable Pods.",
        unschedulable,
        controller=CONTROLLER,
    )
    yield _gauge(
        "karpenter_scheduler_queue_depth",
        "The number of pods currently waiting to be scheduled: pending and not nominated to a NodeClaim "
        "that will take them, so the next provisioning run plans for them.",
        pending_pods().count(),
        controller=CONTROLLER,
    )


# ------------------------------------------------------------------ nodes


def nodes(node_labels: Mapping[str, dict[str, str]]) -> Iterator[Metric]:
    names = [*NODE_LABELS, "node_name", "resource_type"]
    requests = GaugeMetricFamily(
        "karpenter_nodes_total_pod_requests",
        "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
        labels=names,
    )
    allocatable = GaugeMetricFamily(
        "karpenter_nodes_allocatable", "Node allocatable are the resources allocatable by nodes.", labels=names
    )
    bound = (
        ClusterPod.objects.exclude(node_name="")
        .values("node_name")
        .annotate(cpu=Sum("cpu_millis"), memory=Sum("memory_bytes"))
        .order_by()
    )
    requested = {row["node_name"]: row for row in bound}
    amounts = dict(ClusterNode.objects.values_list("name", "manifest__status__allocatable"))
    for node, labels in sorted(node_labels.items()):
        values = [labels.get(k, "") for k in NODE_LABELS] + [node]
        row = requested.get(node) or {"cpu": 0, "memory": 0}
        requests.add_metric([*values, "cpu"], (row["cpu"] or 0) / 1000)
        requests.add_metric([*values, "memory"], row["memory"] or 0)
        for resource, amount in _resources(amounts.get(node)).items():
            allocatable.add_metric([*values, resource], amount)
    yield requests
    yield allocatable
    yield _gauge("karpenter_cluster_state_node_count", "Current count of nodes in cluster state", len(node_labels))


def _node_labels() -> dict[str, dict[str, str]]:
    """Node name → the labels its series carry (the NodePool column when the label is missing)."""
    out = {}
    for name, nodepool, labels in ClusterNode.objects.values_list("name", "nodepool", "manifest__metadata__labels"):
        labels = labels if isinstance(labels, dict) else {}
        out[name] = {key: str(labels.get(label, "")) for key, label in NODE_LABELS.items()}
        out[name]["nodepool"] = out[name]["nodepool"] or nodepool
    return out


def _resources(quantities: Any) -> dict[str, float]:
    """A resource list in Karpenter's metric units: cpu in cores, the rest in base units; the
    resource name as its label value (``ephemeral-storage`` → ``ephemeral_storage``)."""
    out = {}
    for resource, quantity in (quantities if isinstance(quantities, dict) else {}).items():
        try:
            amount = to_int(resource, quantity)
        except (QuantityError, ArithmeticError, TypeError, ValueError):
            continue  # a mirrored node's odd quantity must not cost the whole scrape
        out[_resource_label(resource)] = amount / 1000 if resource == "cpu" else amount
    return out


def _resource_label(resource: str) -> str:
    return resource.lower().replace("-", "_")


# ------------------------------------------------------------------ NodeClaims


def nodeclaims() -> Iterator[Metric]:
    created = CounterMetricFamily(
        "karpenter_nodeclaims_created",
        "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, "
        "the owning nodepool, and if min values was relaxed for this nodeclaim.",
        labels=["nodepool", "reason", "min_values_relaxed"],
    )
    # NodeClaim rows are kept when terminated: counting them is a counter that never goes down.
    for row in NodeClaim.objects.values("nodepool_name", "disruption__reason").annotate(n=Count("id")).order_by():
        reason = (row["disruption__reason"] or "provisioned").lower()
        # karpweb never relaxes minValues (upstream's Strict policy).
        created.add_metric([row["nodepool_name"], reason, "false"], row["n"])
    yield created
    terminated = NodeClaim.objects.filter(state=NodeClaim.State.TERMINATED)
    yield _grouped(
        CounterMetricFamily(
            "karpenter_nodeclaims_terminated",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, "
            "and zone.",
            labels=["nodepool", "capacity_type", "zone"],
        ),
        terminated,
        ["nodepool_name", "capacity_type", "zone"],
    )
    registered = NodeClaim.objects.exclude(registered_at=None)
    yield _grouped(
        CounterMetricFamily(
            "karpenter_nodes_created",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
            labels=["nodepool", "zone"],
        ),
        registered,
        ["nodepool_name", "zone"],
    )
    yield _grouped(
        CounterMetricFamily(
            "karpenter_nodes_terminated",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
            labels=["nodepool", "zone"],
        ),
        registered.filter(state=NodeClaim.State.TERMINATED),
        ["nodepool_name", "zone"],
    )
    yield _grouped(
        GaugeMetricFamily("karpweb_nodeclaims", "NodeClaims by NodePool and state.", labels=["nodepool", "state"]),
        NodeClaim.objects.all(),
        ["nodepool_name", "state"],
    )
    spend = GaugeMetricFamily(
        "karpweb_spend_dollars_per_hour",
        "What the running NodeClaims cost, in USD per hour at the price each was launched at, by NodePool and "
        "capacity type.",
        labels=["nodepool", "capacity_type"],
    )
    running = (
        NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES)
        .exclude(instance_id="")
        .values("nodepool_name", "capacity_type")
        .annotate(price=Sum("price_per_hour"))
        .order_by("nodepool_name", "capacity_type")
    )
    for row in running:
        spend.add_metric([row["nodepool_name"], row["capacity_type"]], float(row["price"] or 0))
    yield spend


def _grouped(family: Metric, rows, columns: list[str]) -> Metric:
    for row in rows.values(*columns).annotate(n=Count("id")).order_by(*columns):
        family.add_metric([str(row[c]) for c in columns], row["n"])
    return family


# ------------------------------------------------------------------ NodePools


def nodepools() -> Iterator[Metric]:
    from provisioning.services.catalog import load_catalog

    labels = ["nodepool", "resource_type"]
    usage = GaugeMetricFamily(
        "karpenter_nodepools_usage",
        "The amount of resources that have been provisioned for a nodepool (the capacity of its NodeClaims, "
        "in flight included). Labeled by nodepool name and resource type.",
        labels=labels,
    )
    types = {it.name: it for it in load_catalog().instance_types()}
    # A NodePool whose last node went reports zero, rather than a series that just stops.
    empty = dict.fromkeys(("cpu", "memory", "pods", "ephemeral-storage", "nodes"), 0)
    totals: dict[str, Counter] = defaultdict(Counter)
    for name in NodePool.objects.values_list("name", flat=True):
        totals[name].update(empty)
    claims = NodeClaim.objects.filter(state__in=NodeClaim.ACTIVE_STATES).values_list(
        "nodepool_name", "instance_type", "launch_options__0__instanceType"
    )
    for nodepool, chosen, first_option in claims:
        # A claim still launching counts as its cheapest option, as the solver counts it.
        it = types.get(chosen or first_option or "")
        totals[nodepool]["nodes"] += 1
        if it is not None:
            totals[nodepool].update(it.capacity)
    for nodepool, amounts in sorted(totals.items()):
        for resource, amount in sorted(amounts.items()):
            usage.add_metric([nodepool, _resource_label(resource)], amount / 1000 if resource == "cpu" else amount)
    yield usage
    limit = GaugeMetricFamily(
        "karpenter_nodepools_limit",
        "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool "
        "name and resource type.",
        labels=labels,
    )
    for name, spec in NodePool.objects.values_list("name", "spec"):
        for resource, amount in sorted(_resources((spec or {}).get("limits")).items()):
            limit.add_metric([name, resource], amount)
    yield limit


# ------------------------------------------------------------------ decisions and disruptions


def decisions() -> Iterator[Metric]:
    yield CounterMetricFamily(
        "karpweb_decisions",
        "Provisioning runs that planned for pending pods (each recorded as a Decision).",
        value=Decision.objects.count(),
    )
    performed = CounterMetricFamily(
        "karpenter_voluntary_disruption_decisions",
        "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
        labels=["decision", "reason", "consolidation_type"],
    )
    by_pool = CounterMetricFamily(
        "karpenter_voluntary_disruption_decisions_by_nodepool",
        "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, "
        "reason, and consolidation type.",
        labels=["nodepool", "decision", "reason", "consolidation_type"],
    )
    totals, pools = _performed_disruptions()
    for key, n in sorted(totals.items()):
        performed.add_metric(list(key), n)
    for key, n in sorted(pools.items()):
        by_pool.add_metric(list(key), n)
    yield performed
    yield by_pool


def _performed_disruptions() -> tuple[Counter, Counter]:
    """Disruptions carried out (past their 15 s re-check), by Karpenter's labels, and by
    NodePool too (each NodePool of a command's nodes once, as upstream). A command that
    started replacing keeps its replacement claims even when cancelled later, so the set of
    rows counted only grows."""
    started = Q(state__in=(Disruption.State.DRAINING, Disruption.State.DONE)) | Q(replacements__isnull=False)
    rows = list(
        Disruption.objects.filter(started).distinct().values_list("reason", "nodes", "replacement_plan", "nodeclaims")
    )
    pool_of = dict(
        NodeClaim.objects.filter(name__in={c for *_, claims in rows for c in claims or ()}).values_list(
            "name", "nodepool_name"
        )
    )
    totals, pools = Counter(), Counter()
    for reason, nodes, plan, claims in rows:
        labels = _disruption_labels(reason, nodes, plan)
        totals[labels] += 1
        for pool in sorted({pool_of[c] for c in claims or () if c in pool_of}):
            pools[(pool, *labels)] += 1
    return totals, pools


def _disruption_labels(reason: str, nodes: Iterable[str], plan: Any) -> tuple[str, str, str]:
    decision = "replace" if plan else "delete"
    if reason == "Empty":
        kind = "empty"
    elif reason == "Underutilized":
        kind = "multi" if len(list(nodes)) > 1 else "single"
    else:
        kind = ""  # drift and expiration are not consolidation
    return decision, reason.lower(), kind


# ------------------------------------------------------------------ interruptions

# Upstream's message-queue latency buckets are its DurationBuckets.
QUEUE_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)


def interruptions() -> Iterator[Metric]:
    """The interruption controller's counters, from the rows each message, unhealthy instance
    and repair leaves (kept, so they only grow); a message naming several instances is one."""
    queue = Interruption.objects.filter(source=Interruption.Source.QUEUE)
    received = CounterMetricFamily(
        "karpenter_interruption_received_messages",
        "Count of messages received from the SQS queue. Broken down by message type and whether the message was "
        "actionable.",
        labels=["message_type"],
    )
    for row in queue.exclude(kind="unparsable").values("kind").annotate(n=Count("message_id", distinct=True)):
        received.add_metric([row["kind"]], row["n"])
    yield received
    yield CounterMetricFamily(
        "karpenter_interruption_deleted_messages",
        "Count of messages deleted from the SQS queue.",
        value=queue.filter(deleted=True).values("message_id").distinct().count(),
    )
    waits: dict[str, float] = {}
    for message_id, received_at, event_time in queue.exclude(event_time=None).values_list(
        "message_id", "received_at", "event_time"
    ):
        waits.setdefault(message_id, max(0.0, (received_at - event_time).total_seconds()))
    yield _histogram(
        "karpenter_interruption_message_queue_duration_seconds",
        "Amount of time an interruption message is on the queue before it is processed by karpenter.",
        list(waits.values()),
        QUEUE_BUCKETS,
    )
    unhealthy = CounterMetricFamily(
        "karpenter_interruption_instance_status_unhealthy",
        "Number of instances found unhealthy by DescribeInstanceStatus, by category; each instance and category "
        "once until it recovers.",
        labels=["category"],
    )
    categories = {"instance_status": "InstanceStatus", "system_status": "SystemStatus", "event_status": "EventStatus"}
    health = Interruption.objects.filter(source=Interruption.Source.INSTANCE_STATUS)
    for row in health.values("kind").annotate(n=Count("id")).order_by("kind"):
        unhealthy.add_metric([categories.get(row["kind"], row["kind"])], row["n"])
    yield unhealthy
    repaired = CounterMetricFamily(
        "karpenter_nodeclaims_unhealthy_disrupted",
        "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was "
        "disrupted, the owning nodepool, and capacity type.",
        labels=["condition", "nodepool", "capacity_type"],
    )
    counts: Counter = Counter()
    for detail, pool, capacity in Interruption.objects.filter(source=Interruption.Source.NODE_REPAIR).values_list(
        "detail", "nodepool", "capacity_type"
    ):
        counts[(_snake((detail or {}).get("condition", "")), pool, capacity)] += 1
    for key, n in sorted(counts.items()):
        repaired.add_metric(list(key), n)
    yield repaired
    yield nodeclaims_disrupted()
    yield pods_disruption_initiated()


def pods_disruption_initiated() -> Metric:
    """The reschedulable pods of every NodeClaim whose drain began, by the disruption's reason."""
    family = CounterMetricFamily(
        "karpenter_pods_disruption_initiated",
        "Number of pod disruptions initiated in total by Karpenter, incremented by the reschedulable pod count "
        "whenever the underlying nodeclaim is disrupted. Labeled by reason the nodeclaim was disrupted, the owning "
        "nodepool and the capacity type. Pods owned by DaemonSets and mirror pods are excluded.",
        labels=["reason", "nodepool", "capacity_type"],
    )
    rows = list(Disruption.objects.exclude(drain_started_at=None).values_list("reason", "pods_displaced"))
    claims = dict(
        (name, (pool, capacity))
        for name, pool, capacity in NodeClaim.objects.filter(
            name__in={c for _, counts in rows for c in counts or {}}
        ).values_list("name", "nodepool_name", "capacity_type")
    )
    totals: Counter = Counter()
    for reason, counts in rows:
        for name, count in (counts or {}).items():
            pool, capacity = claims.get(name, ("", ""))
            totals[(reason.lower(), pool, capacity)] += count
    for key, n in sorted(totals.items()):
        family.add_metric(list(key), n)
    return family


def nodeclaims_disrupted() -> Metric:
    """Every NodeClaim a disruption took, whatever the reason: consolidation, drift, expiry, an
    interruption's kind, "unhealthy"."""
    family = CounterMetricFamily(
        "karpenter_nodeclaims_disrupted",
        "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted and "
        "the owning nodepool.",
        labels=["reason", "nodepool", "capacity_type"],
    )
    started = Q(state__in=(Disruption.State.DRAINING, Disruption.State.DONE)) | Q(replacements__isnull=False)
    rows = list(Disruption.objects.filter(started).distinct().values_list("reason", "nodeclaims"))
    claims = dict(
        (name, (pool, capacity))
        for name, pool, capacity in NodeClaim.objects.filter(
            name__in={c for _, names in rows for c in names or ()}
        ).values_list("name", "nodepool_name", "capacity_type")
    )
    counts: Counter = Counter()
    for reason, names in rows:
        for name in names or ():
            pool, capacity = claims.get(name, ("", ""))
            counts[(reason.lower(), pool, capacity)] += 1
    for key, n in sorted(counts.items()):
        family.add_metric(list(key), n)
    return family


def _histogram(name: str, documentation: str, values: list[float], buckets: tuple[float, ...]) -> Metric:
    cumulative = [(str(float(b)), sum(1 for v in values if v <= b)) for b in buckets]
    cumulative.append(("+Inf", len(values)))
    return HistogramMetricFamily(name, documentation, buckets=cumulative, sum_value=sum(values))


def _snake(text: str) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch.isupper() and i and not text[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


# ------------------------------------------------------------------ offering prices

_prices: tuple[Any, Metric] | None = None


def offering_prices() -> Metric:
    """Every offering with a price, from the catalog every other part uses. The family is
    kept while the catalog is the same object (it changes at most every 12 hours)."""
    global _prices
    from provisioning.services.catalog import load_catalog

    catalog = load_catalog()
    if _prices is None or _prices[0] is not catalog:
        family = GaugeMetricFamily(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "Instance type offering estimated hourly price used when making informed decisions on node cost "
            "calculation, based on instance type, capacity type, and zone.",
            labels=["instance_type", "capacity_type", "zone"],
        )
        for it in catalog.instance_types():
            for offering in it.offerings:
                if offering.price is not None:
                    family.add_metric([it.name, offering.capacity_type, offering.zone], offering.price)
        _prices = (catalog, family)
    return _prices[1]


def _gauge(name: str, documentation: str, value: float, **labels: str) -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family
