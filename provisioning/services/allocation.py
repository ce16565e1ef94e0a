"""Allocation: the cost of each node split over the pods on it, recorded over time, so spend
can be read per namespace and per team.

**How a node's cost is split** (Kubecost's default): a pod's share of its node is the larger
of its cpu request's share and its memory request's share of the node's allocatable; the
node's effective ``price_per_hour`` times that share is what the pod costs. What no pod asked
for is *idle*, kept apart rather than spread over the pods. Shares that add up to more than
the node (one pod asks for most of the cpu, another for most of the memory) are scaled down
to fill it exactly, so the pods of a node never cost more than the node. A claim without a
registered node (launching, registering) is idle whole; pods that finished hold nothing.

**Why samples.** Pods come and go without a row that remembers where they ran and when, so
the beat calls :func:`record` every ``KARPWEB_SPEND_SAMPLE_SECONDS`` (60 s): it splits the
cost of the claims over the pods on their nodes then and adds it, for the time since the
previous sample (at most two periods, so a stopped worker leaves a gap rather than a
guess), to the buckets of every resolution the spend page charts with (1 minute, 15 minutes,
2 hours, 6 hours; one per range). A claim launched or gone in that time counts for its own
seconds of it (a gone one as idle: its pods are elsewhere by then), so what is recorded adds
up to what the claims cost, as the spend series counts it. A bucket keeps the seconds it
was sampled and each group's dollars; a group's average $/hour in it is its dollars over
those seconds. A page reads one row per bucket and group of its range at its own resolution
(the 30 days are 120 buckets), whatever the number of pods, nodes or samples; the REST API
reads the coarsest resolution that is no longer than the step it asks for and still
reaches back far enough.

**Why the label keys are configured** (``KARPWEB_SPEND_LABELS``, default ``team``) instead
of every label of every pod recorded: a record per pod would be 10,000 rows a minute on a
large cluster, and the page would add them up on every view; aggregated per namespace and
per value of a few chosen keys, a sample is a few dozen rows whatever the number of pods. The
price is that a key added to the setting has its history from then on only.

Pods without the label (or with an empty value) are grouped as ``(no KEY)``, a name no
label value can take.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connections, transaction
from django.db.models import FloatField, Q
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from provisioning.crd.labels import qualified_name_errors
from provisioning.models import Allocation, AllocationBucket, ClusterNode, ClusterPod
from provisioning.scheduling.quantity import to_int
from provisioning.services import spend

BY_NAMESPACE = "namespace"
LABEL = "label:"
IDLE = "idle"
FINISHED = (ClusterPod.Phase.SUCCEEDED, ClusterPod.Phase.FAILED)


@dataclass(frozen=True)
class Resolution:
    """Buckets of ``seconds`` (starting on multiples of it since 1970, as the page's do),
    kept for ``keep``."""

    seconds: int
    keep: timedelta


# One per range of the spend page (its step), finest first.
RESOLUTIONS = (
    Resolution(60, timedelta(days=2)),
    Resolution(15 * 60, timedelta(days=8)),
    Resolution(2 * 3600, timedelta(days=35)),
    Resolution(6 * 3600, timedelta(days=400)),
)


def label_keys() -> tuple[str, ...]:
    return tuple(settings.KARPWEB_SPEND_LABELS)


def groupings() -> tuple[str, ...]:
    """What allocation can be read by: the namespace, and each recorded label key."""
    return (BY_NAMESPACE, *(LABEL + key for key in label_keys()))


def unlabelled(key: str) -> str:
    return f"(no {key})"


def check_by(by: str) -> str:
    """``by`` if allocation is recorded by it, else :class:`spend.SpendError` saying what is."""
    if by == BY_NAMESPACE or by in groupings():
        return by
    recorded = ", ".join(label_keys()) or "none"
    if by.startswith(LABEL):
        key = by[len(LABEL) :]
        if not key:
            raise spend.SpendError("by", f"label: needs a pod label key, such as label:team (recorded: {recorded})")
        problems = qualified_name_errors(key)
        if problems:
            raise spend.SpendError("by", f"{key!r} is not a label key: {'; '.join(problems)}")
        raise spend.SpendError(
            "by", f"the pod label {key} is not recorded; recorded: {recorded} (the setting KARPWEB_SPEND_LABELS)"
        )
    valid = ", ".join((*spend.GROUPINGS, BY_NAMESPACE, "label:KEY"))
    raise spend.SpendError("by", f"{by!r} is not one of {valid} (recorded label keys: {recorded})")


# ------------------------------------------------------------------ the arithmetic


class NodeCost(NamedTuple):
    """A claim: its node (empty before it registered, and once it is gone), its effective
    $/hour, its node's allocatable cpu (millicores) and memory (bytes), zero while unknown,
    and when it cost (epoch seconds; ``end`` None while it runs)."""

    node: str
    per_hour: float
    cpu_millis: int
    memory_bytes: int
    start: float = 0.0
    end: float | None = None


class PodRequest(NamedTuple):
    """A pod on a node: its namespace, the value of each recorded label key (None when it
    has none), and its requests."""

    node: str
    namespace: str
    labels: tuple[str | None, ...]
    cpu_millis: int
    memory_bytes: int


def shares(
    cpu_allocatable: int, memory_allocatable: int, requests: Sequence[tuple[int, int]]
) -> tuple[list[float], float]:
    """The fraction of a node each pod (``(cpu millicores, memory bytes)``) is charged, and
    the idle fraction: the larger of a pod's cpu and memory shares, scaled down together
    when they add up to more than the node."""
    fractions = [
        max(
            cpu / cpu_allocatable if cpu_allocatable > 0 else 0.0,
            memory / memory_allocatable if memory_allocatable > 0 else 0.0,
        )
        for cpu, memory in requests
    ]
    total = sum(fractions)
    if total > 1:
        return [f / total for f in fractions], 0.0
    return fractions, 1.0 - total


def allocate(
    nodes: Iterable[NodeCost], pods: Iterable[PodRequest], keys: Sequence[str]
) -> dict[tuple[str, str], float]:
    """$/hour of each ``(by, name)``: every namespace, every value of each key in ``keys``
    (``label:KEY``), and ``(idle, idle)``. Groups that cost nothing are left out."""
    on_node = by_node(pods)
    rates: dict[tuple[str, str], float] = defaultdict(float)
    for node in nodes:
        _add_node(rates, node, on_node.get(node.node, []) if node.node else [], keys)
    return dict(rates)


def by_node(pods: Iterable[PodRequest]) -> dict[str, list[PodRequest]]:
    on_node: dict[str, list[PodRequest]] = defaultdict(list)
    for pod in pods:
        on_node[pod.node].append(pod)
    return on_node


def _add_node(
    rates: dict[tuple[str, str], float], node: NodeCost, residents: Sequence[PodRequest], keys: Sequence[str]
) -> None:
    fractions, idle = shares(node.cpu_millis, node.memory_bytes, [(p.cpu_millis, p.memory_bytes) for p in residents])
    if idle > 0:
        rates[(IDLE, IDLE)] += node.per_hour * idle
    for pod, fraction in zip(residents, fractions, strict=True):
        cost = node.per_hour * fraction
        if cost <= 0:
            continue
        rates[(BY_NAMESPACE, pod.namespace)] += cost
        for key, value in zip(keys, pod.labels, strict=True):
            rates[(LABEL + key, value or unlabelled(key))] += cost


# ------------------------------------------------------------------ sampling


@dataclass(frozen=True)
class Sample:
    """What :func:`record` added: the split at ``at``, standing for the ``seconds`` before it."""

    at: datetime
    seconds: float
    rates: dict[tuple[str, str], float] = field(default_factory=dict)
    nodes: int = 0
    pods: int = 0

    @property
    def per_hour(self) -> float:
        """The running claims' cost: idle and the namespaces together."""
        return sum(rate for (by, _), rate in self.rates.items() if by in (IDLE, BY_NAMESPACE))


def current(
    now: datetime, keys: Sequence[str], since: datetime | None = None
) -> tuple[list[NodeCost], list[PodRequest]]:
    """The claims that cost something between ``since`` (default: ``now``) and ``now``, with
    their nodes' allocatable, and the pods on the nodes running at ``now`` with their
    requests and labels: three queries, the node manifests and pod labels read only for the
    fields needed. A claim gone by ``now`` has no node: its pods are elsewhere or gone."""
    claims = spend.ran_between(since or now, now).values_list(
        "node_name",
        Cast("price_per_hour", FloatField()),
        spend.EpochSeconds(Coalesce("launched_at", "created_at")),
        spend.EpochSeconds("deleted_at"),
    )
    on_nodes = spend.running_at(now).exclude(node_name="").values("node_name")
    allocatable = dict(
        ClusterNode.objects.filter(name__in=on_nodes).values_list("name", "manifest__status__allocatable")
    )
    nodes = []
    for name, price, start, end in claims:
        if end is not None and end <= now.timestamp():
            nodes.append(NodeCost("", price, 0, 0, start, end))
        else:
            nodes.append(NodeCost(name, price, *_cpu_and_memory(allocatable.get(name) if name else None), start))
    labels = KeyTransform("labels", KeyTransform("metadata", "manifest"))
    columns = [KeyTextTransform(key, labels) for key in keys]
    rows = (
        ClusterPod.objects.filter(node_name__in=on_nodes)
        .exclude(phase__in=FINISHED)
        .order_by()
        .values_list("node_name", "namespace", "cpu_millis", "memory_bytes", *columns)
    )
    pods = [PodRequest(row[0], row[1], tuple(row[4:]), row[2], row[3]) for row in rows]
    return nodes, pods


def _cpu_and_memory(allocatable: object) -> tuple[int, int]:
    if not isinstance(allocatable, dict):
        return 0, 0
    out = []
    for resource in ("cpu", "memory"):
        try:
            out.append(to_int(resource, allocatable[resource]))
        except (KeyError, TypeError, ValueError, ArithmeticError):
            out.append(0)
    return out[0], out[1]


def record(now: datetime | None = None) -> Sample:
    """Split the claims' cost over the pods on their nodes now and add it to the record for
    the time since the previous sample (the sample period the first time, at most two
    periods). A claim counts only for the part of that time it ran: one launched or gone
    since is charged its seconds, and one gone is idle (its pods are elsewhere by now), so
    the record adds up to what the claims cost. One caller at a time (the task holds a
    lock): two at once would both add that time."""
    now = now or timezone.now()
    period = float(settings.KARPWEB_SPEND_SAMPLE_SECONDS)
    last = (
        AllocationBucket.objects.filter(resolution=RESOLUTIONS[0].seconds)
        .order_by("-start")
        .values_list("sampled_at", flat=True)
        .first()
    )
    seconds = period if last is None else min((now - last).total_seconds(), 2 * period)
    if seconds <= 0:  # not after the last sample: that time is counted already
        return Sample(now, 0.0)
    keys = label_keys()
    nodes, pods = current(now, keys, since=now - timedelta(seconds=seconds))
    running = [n for n in nodes if n.end is None]
    pieces, dollars = _dollars(now.timestamp() - seconds, now.timestamp(), nodes, pods, keys)
    with transaction.atomic():
        buckets = _add_seconds(pieces, now)
        _add_costs(buckets, dollars)
        expired = Q()
        for r in RESOLUTIONS:
            expired |= Q(resolution=r.seconds, start__lt=now - r.keep)
        AllocationBucket.objects.filter(expired).delete()
    return Sample(now, seconds, allocate(running, pods, keys), len(running), len(pods))


def _dollars(
    begin: float, end: float, nodes: Sequence[NodeCost], pods: Sequence[PodRequest], keys: Sequence[str]
) -> tuple[list[tuple[int, float, float]], dict[tuple[int, float], dict[tuple[str, str], float]]]:
    """The pieces ``(resolution, bucket start, seconds)`` of the time from ``begin`` to
    ``end`` and the dollars of each group in each: claims that ran all that time add their
    split's rate times the piece's length; the others, each over its own overlap with it."""
    on_node = by_node(pods)
    whole = allocate([n for n in nodes if n.end is None and n.start <= begin], pods, keys)
    partial = []
    for node in nodes:
        if node.end is not None or node.start > begin:
            rates: dict[tuple[str, str], float] = defaultdict(float)
            _add_node(rates, node, on_node.get(node.node, []) if node.node else [], keys)
            partial.append((node.start, end if node.end is None else node.end, rates))
    pieces, dollars = [], {}
    for r in RESOLUTIONS:
        for start, length in _pieces(begin, end, r.seconds):
            pieces.append((r.seconds, start, length))
            added = dollars[(r.seconds, start)] = {group: rate * length / 3600 for group, rate in whole.items()}
            first, last = max(start, begin), min(start + r.seconds, end)
            for ran_from, ran_until, node_rates in partial:
                overlap = min(last, ran_until) - max(first, ran_from)
                if overlap <= 0:
                    continue
                for group, rate in node_rates.items():
                    added[group] = added.get(group, 0.0) + rate * overlap / 3600
    return pieces, dollars


def _pieces(begin: float, end: float, length: int) -> list[tuple[float, float]]:
    """``(bucket start, seconds)`` of the time from ``begin`` to ``end`` in each bucket of
    ``length`` seconds it touches."""
    out, t = [], begin
    while t < end:
        start = math.floor(t / length) * length
        until = min(start + length, end)
        out.append((float(start), until - t))
        t = until
    return out


def _add_seconds(pieces: list[tuple[int, float, float]], now: datetime) -> dict[tuple[int, float], AllocationBucket]:
    wanted = {(resolution, start): length for resolution, start, length in pieces}
    match = Q()
    for resolution, start in wanted:
        match |= Q(resolution=resolution, start=datetime.fromtimestamp(start, UTC))
    found = {(b.resolution, b.start.timestamp()): b for b in AllocationBucket.objects.filter(match)}
    for key, bucket in found.items():
        bucket.seconds += wanted[key]
        bucket.sampled_at = now
    AllocationBucket.objects.bulk_update(found.values(), ["seconds", "sampled_at"])
    new = [
        AllocationBucket(
            resolution=resolution, start=datetime.fromtimestamp(start, UTC), seconds=length, sampled_at=now
        )
        for (resolution, start), length in wanted.items()
        if (resolution, start) not in found
    ]
    for bucket in AllocationBucket.objects.bulk_create(new):
        found[(bucket.resolution, bucket.start.timestamp())] = bucket
    return found


def _add_costs(
    buckets: dict[tuple[int, float], AllocationBucket], dollars: dict[tuple[int, float], dict[tuple[str, str], float]]
) -> None:
    found = {
        (row.bucket_id, row.by, row.name): row
        for row in Allocation.objects.filter(bucket__in=[b.pk for b in buckets.values()])
    }
    new: list[Allocation] = []
    for key, groups in dollars.items():
        bucket = buckets[key]
        for (by, name), cost in groups.items():
            row = found.get((bucket.pk, by, name))
            if row is None:
                row = found[(bucket.pk, by, name)] = Allocation(bucket=bucket, by=by, name=name, cost=0.0)
                new.append(row)
            row.cost += cost
    Allocation.objects.bulk_update([row for row in found.values() if row.pk], ["cost"], batch_size=500)
    Allocation.objects.bulk_create(new, batch_size=500)


# ------------------------------------------------------------------ reading


class Share(NamedTuple):
    """A group's average $/hour over one recorded bucket, as a span the spend sweep reads."""

    start: float
    end: float
    name: str
    per_hour: float

    def until(self, now: float) -> float:
        return min(self.end, now)


def resolution_for(step: timedelta, start: datetime, now: datetime) -> Resolution:
    """The coarsest resolution no longer than ``step`` whose record reaches back to
    ``start``; the finest that does when none is that short; the coarsest if none does."""
    kept = [r for r in RESOLUTIONS if start >= now - r.keep]
    fitting = [r for r in kept if r.seconds <= step.total_seconds()]
    if fitting:
        return fitting[-1]
    return kept[0] if kept else RESOLUTIONS[-1]


def series(start: datetime, end: datetime, step: timedelta, by: str, *, now: datetime) -> spend.Series:
    """Average $/hour allocated to each group of ``by`` (``namespace`` or ``label:KEY``) in
    buckets of ``step``, idle capacity apart (``Series.idle``): one query, one row per
    recorded bucket and group."""
    check_by(by)
    edges = spend.bucket_edges(start, end, step)
    length = resolution_for(step, start, now).seconds
    first = datetime.fromtimestamp(math.floor(start.timestamp() / length) * length, UTC)
    rows = Allocation.objects.filter(
        bucket__resolution=length, bucket__start__gte=first, bucket__start__lt=min(end, now), by__in=(by, IDLE)
    ).values_list(spend.EpochSeconds("bucket__start"), "bucket__seconds", "by", "name", "cost")
    sql, params = rows.query.sql_with_params()
    groups: list[Share] = []
    idle: list[Share] = []
    with connections[rows.db].cursor() as cursor:
        cursor.execute(sql, params)
        for begin, seconds, row_by, name, cost in cursor.fetchall():
            share = Share(begin, begin + length, name, cost * 3600 / seconds if seconds else 0.0)
            (idle if row_by == IDLE else groups).append(share)
    if not groups and not idle:
        return spend.Series(by=by, edges=edges, values={}, idle=None)  # nothing recorded in the range
    if _aligned(step, edges, length):
        values, idle_values = _as_recorded(groups, edges, length), _as_recorded(idle, edges, length).get(IDLE)
    else:
        values = spend.sweep(groups, edges, now, by, _name, _per_hour).values
        idle_values = spend.sweep(idle, edges, now, IDLE, _name, _per_hour).values.get(IDLE)
    return spend.Series(by=by, edges=edges, values=values, idle=idle_values or (0.0,) * (len(edges) - 1))


def _aligned(step: timedelta, edges: tuple[datetime, ...], length: int) -> bool:
    """Whether the series' buckets are the recorded ones (the page's ranges always are)."""
    return step.total_seconds() == length and edges[0].timestamp() % length == 0


def _as_recorded(shares: list[Share], edges: tuple[datetime, ...], length: int) -> dict[str, tuple[float, ...]]:
    """The series of shares whose buckets are the series' own (a bucket of ``length`` from
    each edge, the last one cut short by the range's end): each value where it falls."""
    first, count = edges[0].timestamp(), len(edges) - 1
    values: dict[str, list[float]] = {}
    for share in shares:
        index = round((share.start - first) / length)
        if 0 <= index < count and share.per_hour:
            values.setdefault(share.name, [0.0] * count)[index] = round(share.per_hour, 9) + 0.0
    return {name: tuple(values[name]) for name in sorted(values)}


class Row(NamedTuple):
    """A line of the allocation table: dollars over the range, the share of the nodes'
    cost (idle included), and the average $/hour."""

    name: str
    cost: float
    share: float
    per_hour: float

    @property
    def percent(self) -> float:
        return self.share * 100


def table(series: spend.Series) -> tuple[list[Row], Row, Row]:
    """The groups of an allocation series, the dearest first; the idle capacity; the total."""
    hours = sum(series.hours(i) for i in range(series.buckets))
    total = series.cost() + series.idle_cost

    def row(name: str, cost: float) -> Row:
        return Row(name, cost, cost / total if total else 0.0, cost / hours if hours else 0.0)

    return [row(name, cost) for name, cost in series.totals()], row(IDLE, series.idle_cost), row("total", total)


def _name(share: Share) -> str:
    return share.name


def _per_hour(share: Share) -> float:
    return share.per_hour
