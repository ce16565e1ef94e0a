"""The spend page: who may see it, its charts and figures, ranges as links and as htmx
swaps, the empty state, the CSV download, and a query count that does not grow with the
number of NodeClaims."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from builders import nodeclaim
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from provisioning.services.catalog import on_demand_prices

pytestmark = pytest.mark.django_db

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def viewer(client, django_user_model):
    """A signed-in viewer, the least role that may read the page."""
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("vera")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return client


@pytest.fixture
def running():
    """Claims that ran the whole of the last 30 hours: $0.60/hour on-demand, and a spot
    m5.large at $0.04/hour."""
    launched = timezone.now() - timedelta(hours=30)
    nodeclaim("od", 0.60, launched_at=launched)
    nodeclaim("sp", 0.04, launched_at=launched, capacity_type="spot", nodepool="batch")


def test_anonymous_users_are_sent_to_the_login_page(client):
    response = client.get("/spend/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/spend/"
    csv_response = client.get("/spend/?format=csv")
    assert csv_response.status_code == 302


def test_before_anything_ran_the_page_says_so(viewer):
    response = viewer.get("/spend/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "No NodeClaim has run yet" in html and "<svg" not in html


def test_a_range_in_which_nothing_ran_says_so_and_still_shows_the_month(viewer):
    long_ago = timezone.now() - timedelta(days=3)
    nodeclaim("old", 0.50, launched_at=long_ago, deleted_at=long_ago + timedelta(hours=2))
    html = viewer.get("/spend/?range=1h").content.decode()
    assert "No NodeClaim has run yet" not in html and "<svg" not in html
    assert html.count("Nothing ran in the last 1 hour.") == 2
    assert "No spot capacity ran in the last 1 hour" in html
    assert "this month so far" in html and "<strong>$0.0000</strong>/hour now" in html


def test_a_viewer_sees_both_breakdowns_the_savings_and_the_month(viewer, running):
    response = viewer.get("/spend/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<a href="/spend/">Spend</a>' in html and '<a href="/whatif/">What-if</a>' in html  # the nav
    charts = [ET.fromstring(svg) for svg in re.findall(r"<svg .*?</svg>", html, re.S)]
    titles = [chart.find("{http://www.w3.org/2000/svg}title").text for chart in charts]
    assert titles == [
        "$/hour by NodePool",
        "$/hour by capacity type",
        "Spot savings against on-demand, $/hour",
    ]
    groups = [
        [g.get("data-group") for g in c.iter("{http://www.w3.org/2000/svg}g") if g.get("data-group")] for c in charts
    ]
    assert groups == [["batch", "general"], ["on-demand", "spot"], ["spot savings"]]
    report = response.context["report"]
    assert report.month.per_hour_now == pytest.approx(0.64)
    assert "<strong>$0.6400</strong>/hour now" in html
    saved = on_demand_prices()["m5.large"] - 0.04
    assert f"spot saves <strong>${saved:.4f}</strong>/hour now" in html
    assert f"projected for {report.month.start:%B}" in html


def test_ranges_are_plain_links_that_htmx_also_swaps(viewer, running):
    html = viewer.get("/spend/").content.decode()
    for name in ("1h", "24h", "7d", "30d"):
        assert f'href="/spend/?range={name}" hx-get="/spend/?range={name}" hx-target="#spend-range"' in html
    assert re.search(r'href="/spend/\?range=24h"[^>]*class="current" aria-current="page">24 hours<', html)
    week = viewer.get("/spend/?range=7d")
    assert week.context["report"].range.name == "7d"
    assert week.context["report"].by_nodepool.buckets in (84, 85)  # 7 days of 2 hours, and the one now
    assert re.search(r'class="current" aria-current="page">7 days<', week.content.decode())


def test_an_unknown_range_shows_the_default_one(viewer, running):
    response = viewer.get("/spend/?range=1y")
    assert response.status_code == 200 and response.context["report"].range.name == "24h"


def test_htmx_gets_the_range_section_only_and_history_gets_the_whole_page(viewer, running):
    partial = viewer.get("/spend/?range=1h", HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert partial.status_code == 200
    assert body.lstrip().startswith('<div id="spend-range"') and "<html" not in body and "<svg" in body
    assert 'hx-get="/spend/?range=1h" hx-trigger="every 60s"' in body  # keeps its range when it polls
    # Going back to a URL htmx pushed asks for it again: that needs the whole page.
    restored = viewer.get("/spend/?range=1h", HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert "<html" in restored.content.decode()


def test_the_csv_has_a_row_per_bucket_and_group(viewer, running):
    response = viewer.get("/spend/?range=1h&format=csv")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert re.fullmatch(
        r'attachment; filename="karpweb-spend-1h-\d{4}-\d\d-\d\dT\d{6}Z\.csv"', response["Content-Disposition"]
    )
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["start", "end", "by", "group", "usd_per_hour", "usd"]
    buckets = len({row[0] for row in rows[1:]})
    assert buckets in (60, 61)
    by = [(row[2], row[3]) for row in rows[1:]]
    assert by.count(("nodepool", "general")) == buckets and by.count(("nodepool", "batch")) == buckets
    assert by.count(("capacity_type", "on-demand")) == buckets and by.count(("capacity_type", "spot")) == buckets
    assert by.count(("spot_savings", "spot savings")) == buckets
    assert len(rows) == 1 + 5 * buckets
    for start, end, _, _, _, _ in rows[1:]:
        assert ISO_UTC.match(start) and ISO_UTC.match(end) and start < end
    general = [row for row in rows[1:] if row[3] == "general"]
    assert {row[4] for row in general} == {"0.600000"}  # it ran through every bucket
    assert general[0][5] == "0.010000"  # a minute of it


def test_the_page_costs_the_same_queries_with_many_more_claims(viewer, running, django_assert_max_num_queries):
    viewer.get("/spend/")
    with CaptureQueriesContext(connection) as few:
        viewer.get("/spend/")
    launched = timezone.now() - timedelta(hours=3)
    for i in range(60):
        nodeclaim(
            f"more-{i}", 0.1, launched_at=launched, nodepool=f"pool-{i % 7}", deleted_at=launched + timedelta(hours=1)
        )
    with django_assert_max_num_queries(len(few)):
        response = viewer.get("/spend/")
    assert len(response.context["report"].by_nodepool.groups) == 9
    with django_assert_max_num_queries(len(few)):
        viewer.get("/spend/?range=30d&format=csv")


def test_the_page_only_reads(viewer):
    assert viewer.post("/spend/").status_code == 405
