"""Spend over time, computed from the NodeClaims themselves: what each one cost, when.

A NodeClaim costs its ``price_per_hour`` from ``launched_at`` (or ``created_at``, for one that
has an instance but never went through our launch, as a mirrored claim) until ``deleted_at``,
or until now while it runs. A claim that never had an instance cost nothing.

``series(start, end, step, by)`` is the time series the spend page draws and the REST API
serves (``spend/?from=&to=&step=``): the average $/hour of each NodePool (or capacity type)
in each bucket of ``step``, time-weighted, so a claim that ran half of a bucket counts half
its price there. ``report(range_name)`` is everything the page shows.

Both read only the claims that overlap the range (one query, plain tuples of floats and
names) and make one sweep over their start and end events: the events are bucketed rather
than sorted, so the cost is O(claims + buckets × groups). The month so far, which spans far
more claims than a short range, is summed by the database.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, Protocol, TypeVar

from django.db import connections
from django.db.models import FloatField, Func, Q, QuerySet, Sum, Value
from django.db.models.functions import Cast, Coalesce, Greatest, Least
from django.utils import timezone

from provisioning.models import NodeClaim
from provisioning.services.catalog import on_demand_prices

BY_NODEPOOL = "nodepool"
BY_CAPACITY_TYPE = "capacity_type"
GROUPINGS = (BY_NODEPOOL, BY_CAPACITY_TYPE)
BY_SPOT_SAVINGS = "spot_savings"
BY_DISCOUNTS = "discounts"
SPOT = "spot"
SPOT_SAVINGS = "spot savings"
# A longer series is refused: charts and API answers stay small whatever is asked.
MAX_BUCKETS = 2_000


class SpendError(ValueError):
    """A query that cannot be answered (end before start, a step of zero, too many buckets, an
    unknown grouping): ``field`` names the parameter, the message says what would be valid."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Range:
    """A range of the spend page: its length and the bucket it is drawn with."""

    name: str
    label: str
    length: timedelta
    step: timedelta
    step_label: str


RANGES: dict[str, Range] = {
    r.name: r
    for r in (
        Range("1h", "1 hour", timedelta(hours=1), timedelta(minutes=1), "a minute"),
        Range("24h", "24 hours", timedelta(hours=24), timedelta(minutes=15), "15 minutes"),
        Range("7d", "7 days", timedelta(days=7), timedelta(hours=2), "2 hours"),
        Range("30d", "30 days", timedelta(days=30), timedelta(hours=6), "6 hours"),
    )
}
DEFAULT_RANGE = "24h"


class Span(NamedTuple):
    """What one NodeClaim cost: ``price_per_hour`` (what was paid: after NodeOverlay
    discounts, a reservation's committed price, spot as launched) from ``start`` until
    ``end`` (epoch seconds; ``end`` None while it runs), and ``list_price_per_hour`` before
    discounts (None: the same). A tuple: a month holds tens of thousands."""

    start: float
    end: float | None
    nodepool: str
    capacity_type: str
    instance_type: str
    price_per_hour: float
    list_price_per_hour: float | None = None

    def until(self, now: float) -> float:
        return now if self.end is None else min(self.end, now)

    @property
    def list_price(self) -> float:
        return self.price_per_hour if self.list_price_per_hour is None else self.list_price_per_hour


class Timed(Protocol):
    """What the sweep reads of a span: where it starts and where it ends by ``now``."""

    @property
    def start(self) -> float: ...

    def until(self, now: float) -> float: ...


T = TypeVar("T", bound=Timed)


@dataclass(frozen=True)
class Series:
    """Average $/hour of each group in each bucket: bucket ``i`` runs from ``edges[i]`` to
    ``edges[i + 1]`` (the last one may be shorter: it ends with the range). A series of
    allocation (by namespace or pod label) has the idle capacity apart, in ``idle``."""

    by: str
    edges: tuple[datetime, ...]
    values: Mapping[str, tuple[float, ...]]  # group → $/hour per bucket, groups sorted
    idle: tuple[float, ...] | None = None  # $/hour no pod requested, per bucket (allocation only)

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(self.values)

    @property
    def buckets(self) -> int:
        return len(self.edges) - 1

    def hours(self, index: int) -> float:
        return (self.edges[index + 1] - self.edges[index]).total_seconds() / 3600

    def cost(self, group: str | None = None) -> float:
        """Dollars over the whole range, of one group or of all (idle capacity apart)."""
        groups = self.values if group is None else (group,)
        return sum(self.values[g][i] * self.hours(i) for g in groups for i in range(self.buckets))

    @property
    def idle_cost(self) -> float:
        return sum(v * self.hours(i) for i, v in enumerate(self.idle or ()))

    def rows(self) -> Iterator[tuple[datetime, datetime, str, float, float]]:
        """``(start, end, group, $/hour, $)`` per bucket and group, in time order."""
        for i in range(self.buckets):
            for group, values in self.values.items():
                yield self.edges[i], self.edges[i + 1], group, values[i], values[i] * self.hours(i)

    def idle_rows(self) -> Iterator[tuple[datetime, datetime, float, float]]:
        """``(start, end, $/hour, $)`` of the idle capacity per bucket (none but for allocation)."""
        for i, value in enumerate(self.idle or ()):
            yield self.edges[i], self.edges[i + 1], value, value * self.hours(i)

    def totals(self) -> list[tuple[str, float]]:
        """Each group's dollars over the range, the dearest first."""
        return sorted(((group, self.cost(group)) for group in self.values), key=lambda item: (-item[1], item[0]))

    def top(self, limit: int) -> dict[str, tuple[float, ...]]:
        """The values of the ``limit`` dearest groups (in their order), the others added up
        as one group ``(N more)``: a chart of hundreds of label values stays readable."""
        if len(self.values) <= limit:
            return dict(self.values)
        kept = {group for group, _ in self.totals()[:limit]}
        others = [values for group, values in self.values.items() if group not in kept]
        folded = {group: values for group, values in self.values.items() if group in kept}
        folded[f"({len(others)} more)"] = tuple(sum(column) for column in zip(*others, strict=True))
        return folded


@dataclass(frozen=True)
class Month:
    """The calendar month so far (UTC) and where it is heading at the current rate."""

    start: datetime
    end: datetime  # the first of the next month
    now: datetime
    cost: float  # dollars since ``start``
    per_hour_now: float  # what the claims running now cost

    @property
    def hours_left(self) -> float:
        return (self.end - self.now).total_seconds() / 3600

    @property
    def projection(self) -> float:
        return self.cost + self.per_hour_now * self.hours_left


@dataclass(frozen=True)
class Report:
    """What the spend page shows for one range."""

    range: Range
    start: datetime
    end: datetime
    by_nodepool: Series
    by_capacity_type: Series
    savings: Series  # one group, SPOT_SAVINGS: on-demand price minus spot's list price
    savings_per_hour_now: float
    discounts: Series  # list price minus what was paid, by capacity type ("reserved": reservations)
    discounts_per_hour_now: float
    list_cost: float  # dollars over the range at list prices
    allocation: Series  # by namespace or a pod label, idle apart
    month: Month
    ever_ran: bool  # False until some NodeClaim had an instance: the page's empty state

    @property
    def cost(self) -> float:
        """Dollars paid over the range (effective prices)."""
        return self.by_nodepool.cost()

    @property
    def discounted(self) -> float:
        """What paying less than list saved over the range (negative: surcharges cost more).
        To the millionth of a dollar: the two sums part in their last bits when they agree."""
        return round(self.list_cost - self.cost, 6) + 0.0

    @property
    def surcharged(self) -> float:
        """What paying more than list cost over the range (a NodeOverlay surcharge)."""
        return max(0.0, -self.discounted)


# ------------------------------------------------------------------ the REST API's series


def series(
    start: datetime, end: datetime, step: timedelta, by: str = BY_NODEPOOL, *, now: datetime | None = None
) -> Series:
    """Average $/hour by NodePool or capacity type (``by``) in buckets of ``step`` from
    ``start`` to ``end``, from the claims; or allocated by namespace (``namespace``) or pod
    label (``label:KEY``), idle apart, from the allocation record. The one query path of the
    page, its CSV and the REST API. Raises :class:`SpendError` naming the parameter at fault."""
    now = now or timezone.now()
    if by not in GROUPINGS:
        return _allocation().series(start, end, step, by, now=now)
    edges = bucket_edges(start, end, step)
    return sweep(claim_spans(start, min(end, now)), edges, now, by, _GROUP_OF[by], _price)


def _allocation():
    # allocation reads the claims through this module; imported when first needed.
    from provisioning.services import allocation

    return allocation


def window(range_name: str, now: datetime) -> tuple[datetime, datetime, timedelta]:
    """``(start, end, step)`` of a page range ending now; the start is a multiple of the step
    (UTC), so buckets keep their edges from one refresh to the next. The end is now to the
    whole second, as the page and its CSV print it: a fraction of a second past an edge would
    make a last bucket that begins and ends at the same printed time."""
    r = RANGES.get(range_name)
    if r is None:
        raise SpendError("range", f"{range_name!r} is not one of {', '.join(RANGES)}")
    step = r.step.total_seconds()
    start = math.floor((now - r.length).timestamp() / step) * step
    return datetime.fromtimestamp(start, UTC), now.replace(microsecond=0), r.step


def bucket_edges(start: datetime, end: datetime, step: timedelta) -> tuple[datetime, ...]:
    """Where the buckets of ``step`` from ``start`` begin, and ``end`` (the last bucket is
    shorter when the step does not divide the range)."""
    if start.tzinfo is None or end.tzinfo is None:  # a naive time would be read in the server's zone
        raise SpendError("from, to", "need a time zone (2026-03-15T10:00:00Z, or +00:00)")
    if step <= timedelta(0):
        raise SpendError("step", "must be longer than zero")
    if end <= start:
        raise SpendError("to", "must be after from")
    count = math.ceil((end - start) / step)
    if count > MAX_BUCKETS:
        raise SpendError("step", f"that makes {count} buckets, more than {MAX_BUCKETS}; take a longer step")
    return tuple(start + i * step for i in range(count)) + (end,)


# ------------------------------------------------------------------ the page


def report(range_name: str = DEFAULT_RANGE, by: str = "namespace", *, now: datetime | None = None) -> Report:
    """The page's figures for ``range_name`` (a key of :data:`RANGES`): both breakdowns, spot
    savings, discounts and the list price from the claims over the range (one query), the
    month so far and its projection summed by the database (one more), and the allocation by
    ``by`` (``namespace`` or ``label:KEY``) from its record (one more)."""
    now = now or timezone.now()
    start, end, step = window(range_name, now)
    spans = claim_spans(start, now)
    edges = bucket_edges(start, end, step)
    # The catalog is read only when there is spot to compare.
    on_demand = on_demand_prices() if any(s.capacity_type == SPOT for s in spans) else {}

    def saved(span: Span) -> float:
        return _saved(span, on_demand)

    by_nodepool, by_capacity_type, savings, discounts = sweep_all(
        spans,
        edges,
        now,
        [
            (BY_NODEPOOL, _GROUP_OF[BY_NODEPOOL], _price),
            (BY_CAPACITY_TYPE, _GROUP_OF[BY_CAPACITY_TYPE], _price),
            (BY_SPOT_SAVINGS, lambda span: SPOT_SAVINGS, saved),
            (BY_DISCOUNTS, _GROUP_OF[BY_CAPACITY_TYPE], _discount),
        ],
    )
    return Report(
        range=RANGES[range_name],
        start=start,
        end=end,
        by_nodepool=by_nodepool,
        by_capacity_type=by_capacity_type,
        savings=savings,
        savings_per_hour_now=sum(saved(s) for s in spans if s.end is None),
        discounts=discounts,
        discounts_per_hour_now=sum(_discount(s) for s in spans if s.end is None),
        list_cost=_dollars(spans, start, end, now, _list_price),
        allocation=_allocation().series(start, end, step, by, now=now),
        month=month_so_far(now),
        ever_ran=bool(spans) or _started().exists(),
    )


def month_so_far(now: datetime) -> Month:
    """The calendar month's cost until ``now`` and the rate of the claims running then.

    A month holds far more claims than the page's range, so the database adds them up:
    each claim's price times the seconds it ran inside the month."""
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    first, until = Value(start.timestamp()), Value(now.timestamp())
    price = Cast("price_per_hour", FloatField())
    ran_from = Greatest(EpochSeconds(Coalesce("launched_at", "created_at")), first)
    ran_until = Least(Coalesce(EpochSeconds("deleted_at"), until), until)
    totals = _overlapping(start, now).aggregate(
        dollar_seconds=Sum(price * (ran_until - ran_from)),
        per_hour_now=Sum(price, filter=Q(deleted_at__isnull=True)),
    )
    next_month = (start + timedelta(days=32)).replace(day=1)
    return Month(
        start=start,
        end=next_month,
        now=now,
        cost=(totals["dollar_seconds"] or 0.0) / 3600,
        per_hour_now=totals["per_hour_now"] or 0.0,
    )


# ------------------------------------------------------------------ reading and sweeping


class EpochSeconds(Func):
    """A datetime as seconds since 1970 (a float), computed by the database: rows arrive
    without a datetime object to build for each, and sums over time stay in SQL."""

    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra_context):
        # julianday counts days since noon of 4714 BC; 1970-01-01 is day 2440587.5. Its double
        # is good to some 20 µs now: rounding to the millisecond puts a claim that starts on a
        # bucket's edge in that bucket, not a sliver of it in the one before.
        template = "ROUND((julianday(%(expressions)s) - 2440587.5) * 86400.0, 3)"
        return self.as_sql(compiler, connection, template=template, **extra_context)

    def as_postgresql(self, compiler, connection, **extra_context):
        template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"
        return self.as_sql(compiler, connection, template=template, **extra_context)


def _started() -> QuerySet[NodeClaim]:
    """Claims that had an instance: launched, or carrying one without our launch."""
    return NodeClaim.objects.filter(
        Q(launched_at__isnull=False) | ~Q(instance_id=""), price_per_hour__isnull=False
    ).order_by()


def _overlapping(start: datetime, end: datetime) -> QuerySet[NodeClaim]:
    """Claims that ran at some time between ``start`` and ``end``."""
    began_before_end = Q(launched_at__lt=end) | Q(launched_at__isnull=True, created_at__lt=end)
    still_running_at_start = Q(deleted_at__isnull=True) | Q(deleted_at__gt=start)
    return _started().filter(began_before_end, still_running_at_start)


def running_at(moment: datetime) -> QuerySet[NodeClaim]:
    """Claims that cost something at ``moment``: the ones the series count there."""
    return _overlapping(moment, moment)


def ran_between(start: datetime, end: datetime) -> QuerySet[NodeClaim]:
    """Claims that cost something at some time between ``start`` and ``end``."""
    return _overlapping(start, end)


def claim_spans(start: datetime, end: datetime) -> list[Span]:
    """The cost spans of the claims that ran at some time between ``start`` and ``end``."""
    rows = _overlapping(start, end).values_list(
        EpochSeconds(Coalesce("launched_at", "created_at")),
        EpochSeconds("deleted_at"),
        "nodepool_name",
        "capacity_type",
        "instance_type",
        Cast("price_per_hour", FloatField()),
        Cast(Coalesce("list_price_per_hour", "price_per_hour"), FloatField()),
    )
    # Every column is already a float or a string, so the rows are read with a plain cursor:
    # Django's per-value converters would take most of the time for a month of claims.
    sql, params = rows.query.sql_with_params()
    with connections[rows.db].cursor() as cursor:
        cursor.execute(sql, params)
        return [
            Span(begin, finish, nodepool, capacity_type or "unknown", instance_type, price, list_price)
            for begin, finish, nodepool, capacity_type, instance_type, price, list_price in cursor.fetchall()
        ]


def sweep(
    spans: Iterable[T],
    edges: tuple[datetime, ...],
    now: datetime,
    by: str,
    group_of: Callable[[T], str],
    rate_of: Callable[[T], float],
) -> Series:
    """Average ``rate_of(span)`` per hour of each group in each bucket, time-weighted."""
    return sweep_all(spans, edges, now, [(by, group_of, rate_of)])[0]


def sweep_all(
    spans: Iterable[T],
    edges: tuple[datetime, ...],
    now: datetime,
    series: Sequence[tuple[str, Callable[[T], str], Callable[[T], float]]],
) -> list[Series]:
    """Several series ``(by, group_of, rate_of)`` over the same buckets in one pass.

    Each span adds its rate where it starts and takes it away where it ends; a bucket it
    covers whole gets the running rate, the buckets where it starts and ends get their
    share. Events are placed by bucket index, so nothing is sorted, and where a span falls
    is worked out once for every series."""
    seconds = [edge.timestamp() for edge in edges]
    first, last, count = seconds[0], seconds[-1], len(seconds) - 1
    step = seconds[1] - seconds[0]
    until = min(last, now.timestamp())
    # Per series and group: $·s/h inside the buckets where spans start or end, and the $/h
    # that starts running whole from a bucket on.
    partials: list[dict[str, list[float]]] = [{} for _ in series]
    changes: list[dict[str, list[float]]] = [{} for _ in series]

    for span in spans:
        begin, finish = max(span.start, first), min(span.until(until), last)
        if finish <= begin:
            continue
        i = min(int((begin - first) // step), count - 1)
        j = max(i, min(math.ceil((finish - first) / step) - 1, count - 1))
        for (_, group_of, rate_of), partial, change in zip(series, partials, changes, strict=True):
            rate = rate_of(span)
            if not rate:
                continue
            group = group_of(span)
            if group not in partial:
                partial[group], change[group] = [0.0] * count, [0.0] * (count + 1)
            if i == j:
                partial[group][i] += rate * (finish - begin)
                continue
            partial[group][i] += rate * (seconds[i + 1] - begin)
            partial[group][j] += rate * (finish - seconds[j])
            change[group][i + 1] += rate
            change[group][j] -= rate

    return [
        Series(by=by, edges=edges, values=_averages(partial, change, seconds))
        for (by, _, _), partial, change in zip(series, partials, changes, strict=True)
    ]


def _averages(
    partial: dict[str, list[float]], change: dict[str, list[float]], seconds: list[float]
) -> dict[str, tuple[float, ...]]:
    values: dict[str, tuple[float, ...]] = {}
    for group in sorted(partial):
        running, averages = 0.0, []
        for k in range(len(seconds) - 1):
            running += change[group][k]
            length = seconds[k + 1] - seconds[k]
            average = (partial[group][k] + running * length) / length
            averages.append(round(average, 9) + 0.0)  # rounding drops float residue; + 0.0 drops -0.0
        values[group] = tuple(averages)
    return values


_GROUP_OF: dict[str, Callable[[Span], str]] = {
    BY_NODEPOOL: lambda span: span.nodepool,
    BY_CAPACITY_TYPE: lambda span: span.capacity_type,
}


def _price(span: Span) -> float:
    return span.price_per_hour


def _list_price(span: Span) -> float:
    return span.list_price


def _discount(span: Span) -> float:
    """What a claim pays less than its list price per hour: a NodeOverlay's discount, a
    reservation's committed price below on-demand. A surcharge is not a saving: nothing."""
    return max(0.0, span.list_price - span.price_per_hour)


def _saved(span: Span, on_demand: Mapping[str, float]) -> float:
    """What a spot claim saves per hour against the same type on-demand, both at list price
    (a discount on top is counted by :func:`_discount`, not twice); nothing when the catalog
    does not know the type."""
    if span.capacity_type != SPOT:
        return 0.0
    return max(0.0, on_demand.get(span.instance_type, span.list_price) - span.list_price)


def _dollars(
    spans: Iterable[Span], start: datetime, end: datetime, now: datetime, rate_of: Callable[[Span], float]
) -> float:
    """Dollars of ``rate_of`` over the time each span ran between ``start`` and ``end``."""
    first, last = start.timestamp(), min(end, now).timestamp()
    seconds = 0.0
    for span in spans:
        overlap = min(span.until(last), last) - max(span.start, first)
        if overlap > 0:
            seconds += rate_of(span) * overlap
    return seconds / 3600
