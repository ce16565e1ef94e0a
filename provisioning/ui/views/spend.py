"""Spend: $/hour over time by NodePool and by capacity type, list against effective prices
(discounts and reservations), spot savings, the month so far and its projection, and the
cost allocated by namespace or pod label with idle capacity apart, for a range of 1 hour to
30 days; the same series as CSV."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_safe

from provisioning.services import allocation, spend
from provisioning.ui import charts
from provisioning.ui.access import VIEWER, role_required
from provisioning.ui.htmx import wants_partial

CSV_HEADER = ("start", "end", "by", "group", "usd_per_hour", "usd")
# The allocation chart draws this many groups and adds up the others: a label with hundreds
# of values stays readable (the table lists every one).
CHART_GROUPS = 9
IDLE_COLOUR = "#bdbdbd"
IDLE_LABEL = "idle (requested by no pod)"


@require_safe
@role_required(VIEWER)
def spend_page(request: HttpRequest) -> HttpResponse:
    range_name = request.GET.get("range", spend.DEFAULT_RANGE)
    if range_name not in spend.RANGES:  # an old or mistyped link still shows the page
        range_name = spend.DEFAULT_RANGE
    by = request.GET.get("by", allocation.BY_NAMESPACE)
    if by not in allocation.groupings():  # a label no longer recorded: the namespaces
        by = allocation.BY_NAMESPACE
    report = spend.report(range_name, by)
    if request.GET.get("format") == "csv":
        return _csv(report)
    rows, idle, total = allocation.table(report.allocation)
    context = {
        "report": report,
        "ranges": spend.RANGES.values(),
        # What every link of the page keeps: the grouping, when it is not the default.
        "by_query": "" if by == allocation.BY_NAMESPACE else "&" + urlencode({"by": by}),
        "groupings": [(g, _by_label(g), urlencode({"range": range_name, "by": g})) for g in allocation.groupings()],
        "by": by,
        "by_label": _by_label(by),
        "nodepool_chart": _chart(report.by_nodepool, "spend-nodepool", "$/hour by NodePool"),
        "capacity_chart": _chart(report.by_capacity_type, "spend-capacity", "$/hour by capacity type"),
        "savings_chart": _chart(report.savings, "spend-savings", "Spot savings against on-demand, $/hour"),
        "discounts_chart": _chart(
            report.discounts, "spend-discounts", "Saved against list prices by capacity type, $/hour"
        ),
        "allocation_chart": _allocation_chart(report.allocation, _by_label(by)),
        "allocation_rows": rows,
        "allocation_idle": idle,
        "allocation_total": total,
    }
    template = "provisioning/spend.html"
    if wants_partial(request):
        template += "#spend-range"
    return render(request, template, context)


def _by_label(by: str) -> str:
    return by.removeprefix(allocation.LABEL)


def _chart(series: spend.Series, chart_id: str, title: str) -> SafeString | None:
    if not series.groups:
        return None
    return _svg(series.edges, series.values, chart_id, title)


def _allocation_chart(series: spend.Series, label: str) -> SafeString | None:
    """The groups (the dearest few, the others added up) with the idle capacity on top, in
    grey: the whole of the nodes' cost, split."""
    if series.idle is None:
        return None
    values = series.top(CHART_GROUPS)
    values[IDLE_LABEL] = series.idle
    title = f"$/hour allocated by {label}, and idle"
    return _svg(series.edges, values, "spend-allocation", title, {IDLE_LABEL: IDLE_COLOUR})


def _svg(
    edges: Sequence[datetime],
    values: Mapping[str, Sequence[float]],
    chart_id: str,
    title: str,
    colours: Mapping[str, str] | None = None,
) -> SafeString:
    # charts escapes every text it draws
    return mark_safe(charts.stacked_area(edges, values, chart_id=chart_id, title=title, colours=colours))


def _csv(report: spend.Report) -> HttpResponse:
    """One row per bucket and group of each breakdown, of the savings and discounts, and of
    the allocation (``by`` its grouping) with its idle capacity (``by`` idle)."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    filename = f"karpweb-spend-{report.range.name}-{_iso(report.end).replace(':', '')}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(CSV_HEADER)
    for series in (report.by_nodepool, report.by_capacity_type, report.savings, report.discounts, report.allocation):
        for start, end, group, per_hour, dollars in series.rows():
            writer.writerow((_iso(start), _iso(end), series.by, group, f"{per_hour:.6f}", f"{dollars:.6f}"))
    for start, end, per_hour, dollars in report.allocation.idle_rows():
        idle = allocation.IDLE
        writer.writerow((_iso(start), _iso(end), idle, idle, f"{per_hour:.6f}", f"{dollars:.6f}"))
    return response


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
