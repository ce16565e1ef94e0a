"""Spend: $/hour over time by NodePool and by capacity type, spot savings, the month so far
and its projection, for a range of 1 hour to 30 days; the same series as CSV."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_safe

from provisioning.services import spend
from provisioning.ui import charts
from provisioning.ui.access import VIEWER, role_required
from provisioning.ui.htmx import wants_partial

CSV_HEADER = ("start", "end", "by", "group", "usd_per_hour", "usd")


@require_safe
@role_required(VIEWER)
def spend_page(request: HttpRequest) -> HttpResponse:
    range_name = request.GET.get("range", spend.DEFAULT_RANGE)
    if range_name not in spend.RANGES:  # an old or mistyped link still shows the page
        range_name = spend.DEFAULT_RANGE
    report = spend.report(range_name)
    if request.GET.get("format") == "csv":
        return _csv(report)
    context = {
        "report": report,
        "ranges": spend.RANGES.values(),
        "nodepool_chart": _chart(report.by_nodepool, "spend-nodepool", "$/hour by NodePool"),
        "capacity_chart": _chart(report.by_capacity_type, "spend-capacity", "$/hour by capacity type"),
        "savings_chart": _chart(report.savings, "spend-savings", "Spot savings against on-demand, $/hour"),
    }
    template = "provisioning/spend.html"
    if wants_partial(request):
        template += "#spend-range"
    return render(request, template, context)


def _chart(series: spend.Series, chart_id: str, title: str) -> SafeString | None:
    if not series.groups:
        return None
    # charts escapes every text it draws
    return mark_safe(charts.stacked_area(series.edges, series.values, chart_id=chart_id, title=title))


def _csv(report: spend.Report) -> HttpResponse:
    """One row per bucket and group of each breakdown and of the savings."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    filename = f"karpweb-spend-{report.range.name}-{_iso(report.end).replace(':', '')}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(CSV_HEADER)
    for series in (report.by_nodepool, report.by_capacity_type, report.savings):
        for start, end, group, per_hour, dollars in series.rows():
            writer.writerow((_iso(start), _iso(end), series.by, group, f"{per_hour:.6f}", f"{dollars:.6f}"))
    return response


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
