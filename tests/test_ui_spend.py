"""The spend page: who may see it, its charts and figures, ranges as links and as htmx
swaps, the empty state, the CSV download, allocation by namespace and pod label with idle
capacity apart, list against effective prices, and a query count that does not grow with
the number of NodeClaims, pods or samples."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta

import pytest
from builders import nodeclaim
from django.contrib.humanize.templatetags.humanize import intcomma
from django.db import connection
from django.template.defaultfilters import floatformat
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from uipages import add_node, add_pod

from provisioning.models import NodeClaim
from provisioning.services import allocation
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
    # No claim has a list price of its own: list is what was paid, nothing saved, no surcharge.
    assert report.list_cost == pytest.approx(report.cost) and report.discounted == 0.0
    assert "discounts and reservations saved <strong>$0.00</strong>" in html
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


# ------------------------------------------------------------------ allocation, list and effective prices


@pytest.fixture
def allocated():
    """Nodes running for the last hour with pods in two namespaces and two teams (one pod has
    no team), and three samples of the last three minutes: n1 (4 cpu, 16 GiB, $0.80) holds
    shop/web-1 (1 cpu: a quarter, $0.20, storefront) and shop/api-1 (8 GiB: half, $0.40,
    payments); n2 (2 cpu, 8 GiB, $0.40) holds jobs/batch-1 (1500m: three quarters, $0.30).
    Idle: $0.20 + $0.10 = $0.30 of $1.20."""
    now = timezone.now()
    launched = now - timedelta(hours=1)
    add_node("n1", price="0.80", cpu="4", memory="16Gi", launched_at=launched)
    add_node("n2", price="0.40", cpu="2", memory="8Gi", launched_at=launched)
    add_pod("web-1", "shop", node="n1", cpu="1", memory="2Gi", labels={"team": "storefront"})
    add_pod("api-1", "shop", node="n1", cpu="500m", memory="8Gi", labels={"team": "payments"})
    add_pod("batch-1", "jobs", node="n2", cpu="1500m", memory="1Gi")
    for minutes in (2, 1, 0):
        allocation.record(now - timedelta(minutes=minutes))
    return now


def dollars(value: float) -> str:
    return intcomma(floatformat(value, 4))


def svg_groups(html: str, chart_id: str) -> list[str]:
    (svg,) = re.findall(rf'<svg [^>]*aria-labelledby="{chart_id}-title.*?</svg>', html, re.S)
    chart = ET.fromstring(svg)
    return [g.get("data-group") for g in chart.iter("{http://www.w3.org/2000/svg}g") if g.get("data-group")]


def table_rows(html: str) -> list[list[str]]:
    (table,) = re.findall(r'<table class="allocation">.*?</table>', html, re.S)
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
        if "<td" in row
    ]


def test_the_page_shows_allocation_by_namespace_with_idle_apart(viewer, allocated):
    response = viewer.get("/spend/")
    html = response.content.decode()
    assert "<h2>Allocation by namespace</h2>" in html
    assert svg_groups(html, "spend-allocation") == ["jobs", "shop", "idle (requested by no pod)"]
    rows = table_rows(html)
    assert [row[0] for row in rows] == ["shop", "jobs", "idle: requested by no pod", "the nodes' cost"]
    # Every rate held for every sampled bucket, so the shares are the rates' shares of $1.20.
    shares = {row[0]: row[2] for row in rows[:3]}
    assert shares == {"shop": f"{60 / 1.2:.1f}%", "jobs": f"{30 / 1.2:.1f}%", "idle: requested by no pod": "25.0%"}
    series = response.context["report"].allocation
    assert series.values["shop"][-1] == pytest.approx(0.60) and series.idle[-1] == pytest.approx(0.30)
    # Dollars to the hundredth of a cent, rounded as the page's filters round (half up: 0.07275
    # is 0.0728, where Python's format rounds the float just below it down).
    assert rows[3][1] == dollars(series.cost() + series.idle_cost)
    assert rows[0][1] == dollars(series.cost("shop")) and rows[2][1] == dollars(series.idle_cost)
    # Each grouping is a link that keeps the range, swapped by htmx.
    assert 'href="/spend/?range=24h&amp;by=namespace" hx-get="/spend/?range=24h&amp;by=namespace"' in html
    assert re.search(r'href="/spend/\?range=24h&amp;by=label%3Ateam"[^>]*>team<', html)


@pytest.mark.parametrize(("name", "step"), [("1h", 60), ("24h", 900), ("7d", 7200), ("30d", 21600)])
def test_every_range_reads_the_allocation_at_its_own_step(viewer, allocated, name, step):
    series = viewer.get(f"/spend/?range={name}").context["report"].allocation
    assert (series.edges[1] - series.edges[0]).total_seconds() == step
    sampled = [i for i, v in enumerate(series.values["shop"]) if v]
    assert sampled and sampled[-1] >= series.buckets - 2  # the last three minutes
    for i in sampled:  # every sampled bucket holds the rates the samples saw
        assert series.values["shop"][i] == pytest.approx(0.60) and series.values["jobs"][i] == pytest.approx(0.30)
        assert series.idle[i] == pytest.approx(0.30)


def test_allocation_by_a_label_groups_pods_without_it_and_every_link_keeps_it(viewer, allocated):
    response = viewer.get("/spend/?range=1h&by=label:team")
    html = response.content.decode()
    assert "<h2>Allocation by team</h2>" in html
    assert svg_groups(html, "spend-allocation") == [
        "(no team)",
        "payments",
        "storefront",
        "idle (requested by no pod)",
    ]
    assert [row[0] for row in table_rows(html)][:3] == ["payments", "(no team)", "storefront"]
    assert "pods without the label team are counted as (no team)" in html
    for name in ("1h", "24h", "7d", "30d"):
        query = f"range={name}&amp;by=label%3Ateam"
        assert f'href="/spend/?{query}" hx-get="/spend/?{query}" hx-target="#spend-range"' in html
    assert 'hx-get="/spend/?range=1h&amp;by=label%3Ateam" hx-trigger="every 60s"' in html
    assert 'href="/spend/?range=1h&amp;by=label%3Ateam&amp;format=csv"' in html
    partial = viewer.get("/spend/?range=1h&by=label:team", HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith('<div id="spend-range"') and "<html" not in partial
    assert "<h2>Allocation by team</h2>" in partial


def test_a_grouping_not_recorded_shows_the_namespaces(viewer, allocated):
    response = viewer.get("/spend/?by=label:owner")
    assert response.status_code == 200 and response.context["report"].allocation.by == "namespace"


def test_before_allocation_is_recorded_the_page_says_how_it_will_be(viewer, running):
    html = viewer.get("/spend/").content.decode()
    assert "No allocation recorded in the last 24 hours" in html and "spend-allocation-title" not in html


def test_the_csv_has_the_allocation_and_its_idle_capacity(viewer, allocated):
    sampled_at = allocated  # the last sample's time
    response = viewer.get("/spend/?range=1h&by=label:team&format=csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))[1:]
    allocated = [row for row in rows if row[2] == "label:team"]
    idle = [row for row in rows if row[2] == "idle"]
    buckets = len({row[0] for row in rows})
    assert {row[3] for row in allocated} == {"payments", "storefront", "(no team)"}
    assert len(allocated) == 3 * buckets and len(idle) == buckets
    # The bucket of the last sample's time (a second before it: the last bucket ends at the
    # request's second); the request may come in the next minute, a bucket later.
    when = lambda text: datetime.fromisoformat(text.replace("Z", "+00:00"))  # noqa: E731
    (bucket,) = {row[0] for row in rows if when(row[0]) <= sampled_at - timedelta(seconds=1) < when(row[1])}
    last = {row[3]: row[4] for row in allocated if row[0] == bucket}
    assert last == {"payments": "0.400000", "storefront": "0.200000", "(no team)": "0.300000"}
    assert [row[3:5] for row in idle if row[0] == bucket] == [["idle", "0.300000"]]
    nodepools = [row for row in rows if row[2] == "nodepool" and row[0] == bucket]
    assert sum(float(row[4]) for row in nodepools) == pytest.approx(1.20)  # the same nodes, by NodePool


def test_list_and_effective_prices_and_what_discounts_and_reservations_saved(viewer):
    launched = timezone.now() - timedelta(hours=30)
    add_node("discounted", price="0.70", list_price="1.00", capacity_type="on-demand", launched_at=launched)
    add_node("reserved", price="0.10", list_price="0.50", capacity_type="reserved", launched_at=launched)
    add_node("surcharged", price="0.30", list_price="0.20", capacity_type="spot", launched_at=launched)
    add_node("plain", price="0.05", capacity_type="spot", launched_at=launched)  # no list price: the same
    response = viewer.get("/spend/?range=1h")
    report = response.context["report"]
    hours = (report.end - report.start).total_seconds() / 3600  # an hour and the minute begun
    assert report.cost == pytest.approx((0.70 + 0.10 + 0.30 + 0.05) * hours)  # at the prices paid
    assert report.list_cost == pytest.approx((1.00 + 0.50 + 0.20 + 0.05) * hours)
    assert report.discounted == pytest.approx(0.60 * hours)  # 0.30 + 0.40 saved, less 0.10 of surcharge
    assert report.discounts.values["on-demand"][-1] == pytest.approx(0.30)
    assert report.discounts.values["reserved"][-1] == pytest.approx(0.40)
    assert report.discounts.groups == ("on-demand", "reserved")  # a surcharge saves nothing
    assert report.discounts_per_hour_now == pytest.approx(0.70)
    html = response.content.decode()
    assert f"<strong>${1.75 * hours:.2f}</strong> at list prices in the last 1 hour" in html
    assert f"discounts and reservations saved <strong>${0.60 * hours:.2f}</strong>" in html
    assert svg_groups(html, "spend-discounts") == ["on-demand", "reserved"]
    rows = list(csv.reader(io.StringIO(viewer.get("/spend/?range=1h&format=csv").content.decode())))
    assert {row[3] for row in rows if row[2] == "discounts"} == {"on-demand", "reserved"}
    # Without the discounts, the surcharge of 0.10 an hour is all there is.
    NodeClaim.objects.filter(node_name__in=["discounted", "reserved"]).update(list_price_per_hour=None)
    response = viewer.get("/spend/?range=1h")
    report = response.context["report"]
    hours = (report.end - report.start).total_seconds() / 3600
    assert report.discounted == pytest.approx(-0.10 * hours, abs=1e-6) and report.surcharged == -report.discounted
    assert f"surcharges cost <strong>${0.10 * hours:.2f}</strong> more" in response.content.decode()


def test_spot_savings_count_against_the_list_price_not_the_discount_twice(viewer):
    launched = timezone.now() - timedelta(hours=30)
    add_node(
        "sp", price="0.03", list_price="0.04", instance_type="m5.large", capacity_type="spot", launched_at=launched
    )
    report = viewer.get("/spend/?range=1h").context["report"]
    assert report.savings_per_hour_now == pytest.approx(on_demand_prices()["m5.large"] - 0.04)
    assert report.discounts_per_hour_now == pytest.approx(0.01)


def test_the_page_costs_the_same_queries_with_many_more_pods_nodes_and_samples(viewer, settings):
    settings.KARPWEB_SPEND_LABELS = ["team", "app"]
    now = timezone.now()
    add_node("n1", price="0.80", launched_at=now - timedelta(hours=2))
    add_pod("web-1", "shop", node="n1", labels={"team": "storefront"})
    for minutes in range(60, 40, -5):
        allocation.record(now - timedelta(minutes=minutes))
    paths = ("/spend/?by=label:app", "/spend/?range=30d&by=namespace", "/spend/?range=1h&format=csv")
    few = {}
    for path in paths:
        viewer.get(path)
        with CaptureQueriesContext(connection) as queries:
            assert viewer.get(path).status_code == 200
        few[path] = len(queries)
    for i in range(15):
        add_node(f"more-{i}", price="0.10", launched_at=now - timedelta(hours=2), capacity_type="on-demand")
        for k in range(4):
            add_pod(f"app{k}-{i}", f"ns-{i % 6}", node=f"more-{i}", cpu="100m", labels={"team": f"t{i % 5}"})
    for minutes in range(40, 0, -1):
        allocation.record(now - timedelta(minutes=minutes))
    for path in paths:
        with CaptureQueriesContext(connection) as many:
            assert viewer.get(path).status_code == 200
        assert len(many) <= few[path], path
    series = viewer.get("/spend/?by=label:app").context["report"].allocation
    assert series.groups == ("app0", "app1", "app2", "app3", "web")
