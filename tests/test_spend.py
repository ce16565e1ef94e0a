"""Spend over time: the cost series from NodeClaims (figures worked out by hand), the month
so far and its projection, spot savings; and the SVG chart drawn from a series."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
from builders import nodeclaim

from provisioning.services import spend
from provisioning.services.spend import Span, SpendError
from provisioning.ui.charts import stacked_area

SVG = "{http://www.w3.org/2000/svg}"
NOW = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def at(hour: int, minute: int = 0, second: int = 0, day: int = 15) -> datetime:
    return datetime(2026, 3, day, hour, minute, second, tzinfo=UTC)


@pytest.fixture
def claims(db):
    """Around the range 10:00-12:00 of March 15, priced so each bucket's figure is easy to
    work out by hand."""
    # half of the first hour, a quarter of the second, then deleted
    nodeclaim("a", 0.10, launched_at=at(10, 30), deleted_at=at(11, 15))
    # spot, from before the range and still running
    nodeclaim("b", 0.04, launched_at=at(9), capacity_type="spot")
    # the last quarter of the second hour, still running
    nodeclaim("c", 1.00, launched_at=at(11, 45), nodepool="gpu", instance_type="g5.xlarge")
    # ran and ended before the range: only the month sees it
    nodeclaim("d", 0.30, launched_at=at(8), deleted_at=at(9, 30))
    # planned, never launched: costs nothing
    nodeclaim("e", 0.50, created_at=at(10))
    # carries an instance without our launch (mirrored): costs from its creation
    nodeclaim("f", 0.20, created_at=at(10), instance_id="i-mirrored")


# ------------------------------------------------------------------ the series


def test_each_bucket_holds_the_time_weighted_average_per_nodepool(claims):
    series = spend.series(at(10), at(12), HOUR, by="nodepool", now=NOW)
    assert series.edges == (at(10), at(11), at(12))
    assert series.groups == ("general", "gpu")
    # general: a 0.10 × 1/2 + b 0.04 + f 0.20, then a 0.10 × 1/4 + b + f
    assert series.values["general"] == pytest.approx((0.29, 0.265))
    assert series.values["gpu"] == pytest.approx((0.0, 0.25))  # c 1.00 × 1/4
    assert series.cost("general") == pytest.approx(0.555)
    assert series.cost() == pytest.approx(0.805)


def test_each_bucket_holds_the_time_weighted_average_per_capacity_type(claims):
    series = spend.series(at(10), at(12), HOUR, by="capacity_type", now=NOW)
    assert series.groups == ("on-demand", "spot")
    assert series.values["on-demand"] == pytest.approx((0.25, 0.475))
    assert series.values["spot"] == pytest.approx((0.04, 0.04))


def test_a_claim_over_many_buckets_counts_whole_inside_and_in_part_at_its_ends(db):
    nodeclaim("x", 0.60, launched_at=at(10, 0, 30), deleted_at=at(10, 5, 30))
    series = spend.series(at(10), at(11), timedelta(minutes=1), now=NOW)
    assert series.buckets == 60
    assert series.values["general"][:7] == pytest.approx((0.3, 0.6, 0.6, 0.6, 0.6, 0.3, 0.0))
    assert sum(series.values["general"][6:]) == 0
    assert series.cost() == pytest.approx(0.05)  # five minutes at $0.60/hour


def test_a_claim_that_starts_on_a_bucket_edge_leaves_the_bucket_before_it_empty(db):
    nodeclaim("x", 0.60, launched_at=at(10, 1), deleted_at=at(10, 3))
    series = spend.series(at(10), at(10, 4), timedelta(minutes=1), now=NOW)
    assert series.values["general"] == (0.0, 0.6, 0.6, 0.0)


def test_a_running_claim_costs_until_now_and_a_short_last_bucket_is_not_diluted(db):
    nodeclaim("x", 0.60, launched_at=at(9))
    now = at(11, 20)
    series = spend.series(at(10), now, HOUR, now=now)
    assert series.edges == (at(10), at(11), now)
    assert series.values["general"] == pytest.approx((0.6, 0.6))
    assert series.cost() == pytest.approx(0.6 * (1 + 20 / 60))


def test_the_series_reads_the_claims_with_one_query(claims, django_assert_num_queries):
    with django_assert_num_queries(1):
        spend.series(at(10), at(12), HOUR, now=NOW)


def test_rows_are_one_per_bucket_and_group(claims):
    rows = list(spend.series(at(10), at(12), HOUR, now=NOW).rows())
    assert [(start, group) for start, _, group, _, _ in rows] == [
        (at(10), "general"),
        (at(10), "gpu"),
        (at(11), "general"),
        (at(11), "gpu"),
    ]
    start, end, group, per_hour, dollars = rows[3]
    assert (end, per_hour, dollars) == (at(12), pytest.approx(0.25), pytest.approx(0.25))


def test_the_sweep_agrees_with_adding_up_every_overlap():
    """Random spans against the plain definition: price × overlap / bucket length."""
    rng = random.Random(7)
    start = at(0).timestamp()
    edges = tuple(at(0) + i * timedelta(minutes=15) for i in range(40)) + (at(9, 50),)
    now = at(10)
    spans = []
    for _ in range(300):
        begin = start + rng.uniform(-3600, 11 * 3600)
        end = None if rng.random() < 0.3 else begin + rng.uniform(0, 5 * 3600)
        spans.append(Span(begin, end, rng.choice("pqr"), "on-demand", "m5.large", rng.choice((0.1, 0.25, 1.5))))
    series = spend.sweep(spans, edges, now, "nodepool", lambda s: s.nodepool, lambda s: s.price_per_hour)
    for i in range(len(edges) - 1):
        lo, hi = edges[i].timestamp(), edges[i + 1].timestamp()
        for group in "pqr":
            expected = sum(
                s.price_per_hour * max(0.0, min(s.until(now.timestamp()), hi) - max(s.start, lo))
                for s in spans
                if s.nodepool == group
            ) / (hi - lo)
            assert series.values[group][i] == pytest.approx(expected, abs=1e-9), (group, i)


@pytest.mark.parametrize(
    ("start", "end", "step", "by", "message"),
    [
        (at(10), at(12), timedelta(0), "nodepool", "step: must be longer than zero"),
        (at(12), at(10), HOUR, "nodepool", "to: must be after from"),
        (at(0), at(23), timedelta(seconds=1), "nodepool", "more than 2000"),
        (at(10), at(12), HOUR, "zone", "by: 'zone' is not one of nodepool, capacity_type"),
        (at(10).replace(tzinfo=None), at(12), HOUR, "nodepool", r"from, to: need a time zone"),
    ],
)
def test_a_range_that_cannot_be_charted_is_refused(db, start, end, step, by, message):
    with pytest.raises(SpendError, match=message):
        spend.series(start, end, step, by=by, now=NOW)


def test_a_page_range_starts_on_a_multiple_of_its_step():
    start, end, step = spend.window("24h", at(12, 7))
    assert (start, end, step) == (at(12, 0, day=14), at(12, 7), timedelta(minutes=15))
    edges = spend.bucket_edges(start, end, step)
    assert len(edges) == 98 and edges[-2:] == (at(12), at(12, 7))
    with pytest.raises(SpendError, match="range: '2d' is not one of 1h, 24h, 7d, 30d"):
        spend.window("2d", NOW)


def test_a_page_range_ends_on_the_second_so_no_bucket_is_shorter_than_a_printed_second():
    # A fraction past an edge: the range ends on the edge, and its last bucket is a whole step.
    start, end, step = spend.window("1h", at(12) + timedelta(microseconds=300_000))
    assert end == at(12)
    edges = spend.bucket_edges(start, end, step)
    assert len(edges) == 61 and edges[-2:] == (at(11, 59), at(12))
    start, end, step = spend.window("1h", at(12, 0, 7) + timedelta(microseconds=999_999))
    assert spend.bucket_edges(start, end, step)[-2:] == (at(12), at(12, 0, 7))


# ------------------------------------------------------------------ the page's report


def test_the_month_so_far_and_its_projection(claims):
    # From February into March: the two hours after midnight count.
    nodeclaim("g", 1.00, launched_at=datetime(2026, 2, 28, 22, tzinfo=UTC), deleted_at=at(2, day=1))
    month = spend.report("1h", now=NOW).month
    assert month.start == at(0, day=1) and month.end == datetime(2026, 4, 1, tzinfo=UTC)
    # a 0.075 + b 0.12 + c 0.25 + d 0.45 + f 0.40 + g 2.00
    assert month.cost == pytest.approx(3.295)
    assert month.per_hour_now == pytest.approx(1.24)  # b, c and f run
    assert month.hours_left == pytest.approx(396)  # 16.5 days to April 1
    assert month.projection == pytest.approx(3.295 + 1.24 * 396)


def test_spot_savings_are_the_on_demand_price_of_the_same_type_less_what_spot_paid(claims, monkeypatch):
    monkeypatch.setattr(spend, "on_demand_prices", lambda: {"m5.large": 0.096, "g5.xlarge": 1.006})
    report = spend.report("1h", now=NOW)
    assert report.savings.groups == (spend.SPOT_SAVINGS,)
    assert report.savings.buckets == 60
    assert report.savings.values[spend.SPOT_SAVINGS] == pytest.approx((0.056,) * 60)  # b only: it is spot
    assert report.savings_per_hour_now == pytest.approx(0.056)
    assert report.savings.cost() == pytest.approx(0.056)


def test_the_report_takes_three_queries_the_range_the_month_and_the_allocation(claims, django_assert_num_queries):
    with django_assert_num_queries(3):
        report = spend.report("7d", now=NOW)
    assert report.by_nodepool.groups == ("general", "gpu") and report.ever_ran


def test_nothing_ever_ran_until_a_claim_had_an_instance(db):
    assert spend.report(now=NOW).ever_ran is False
    nodeclaim("e", 0.50, created_at=at(10))  # planned only
    assert spend.report(now=NOW).ever_ran is False
    nodeclaim("old", 0.10, launched_at=at(1, day=1) - timedelta(days=90), deleted_at=at(1, day=1) - timedelta(days=89))
    report = spend.report(now=NOW)
    assert report.ever_ran is True and report.by_nodepool.groups == () and report.month.cost == 0


# ------------------------------------------------------------------ the chart


def chart(values: dict, count: int = 8, **options) -> ET.Element:
    edges = [at(10) + i * timedelta(minutes=15) for i in range(count + 1)]
    return ET.fromstring(stacked_area(edges, values, chart_id="spend-np", title="$/hour by NodePool", **options))


def test_the_chart_has_one_series_per_group_and_a_legend():
    root = chart({"general": [0.1] * 8, "gpu": [0.5] * 4 + [1.0] * 4})
    assert root.get("role") == "img" and root.get("aria-labelledby") == "spend-np-title spend-np-desc"
    assert root.find(f"{SVG}title").text == "$/hour by NodePool"
    desc = root.find(f"{SVG}desc").text
    assert "2026-03-15 10:00–12:00 UTC" in desc and "general $0.1000/hour" in desc and "gpu $0.7500/hour" in desc
    series = root.findall(f".//{SVG}g[@class='series']")
    assert [g.get("data-group") for g in series] == ["general", "gpu"]
    legend = root.find(f".//{SVG}g[@class='legend']")
    assert [t.text for t in legend.iter(f"{SVG}text")] == ["general", "gpu"]
    fills = [g.find(f"{SVG}path").get("fill") for g in series]
    assert [r.get("fill") for r in legend.iter(f"{SVG}rect")] == fills and len(set(fills)) == 2


def test_every_point_has_a_tooltip_and_the_groups_stack():
    root = chart({"general": [0.1] * 8, "gpu": [0.5] * 4 + [1.0] * 4})
    general, gpu = root.findall(f".//{SVG}g[@class='series']")
    tips = [c.find(f"{SVG}title").text for c in gpu.iter(f"{SVG}circle")]
    assert len(tips) == 8
    assert tips[0] == "gpu: $0.5000/hour, 2026-03-15 10:00–10:15 UTC"
    assert tips[7] == "gpu: $1.0000/hour, 2026-03-15 11:45–12:00 UTC"
    below = [float(c.get("cy")) for c in general.iter(f"{SVG}circle")]
    above = [float(c.get("cy")) for c in gpu.iter(f"{SVG}circle")]
    assert all(a < b for a, b in zip(above, below, strict=True))  # higher up: gpu sits on general


def test_the_axes_show_times_and_dollars():
    root = chart({"general": [0.1] * 8, "gpu": [0.5] * 4 + [1.0] * 4})
    x_labels = [t.text for t in root.find(f".//{SVG}g[@class='axis x']").iter(f"{SVG}text")]
    y_labels = [t.text for t in root.find(f".//{SVG}g[@class='axis y']").iter(f"{SVG}text")]
    assert x_labels == ["10:00", "10:30", "11:00", "11:30", "12:00"]
    assert y_labels == ["$0.00", "$0.50", "$1.00", "$1.50"]  # the top total is 1.10
    days = [at(0, day=1) + i * timedelta(hours=6) for i in range(4 * 30 + 1)]
    month = ET.fromstring(stacked_area(days, {"a": [2.0] * 120}, chart_id="m", title="t"))
    labels = [t.text for t in month.find(f".//{SVG}g[@class='axis x']").iter(f"{SVG}text")]
    assert labels == ["Mar 05", "Mar 12", "Mar 19", "Mar 26"]  # weekly, at UTC midnight


def test_every_text_is_escaped():
    nasty = "<script>alert('x')</script> & \"q\""
    svg = stacked_area([at(10), at(11)], {nasty: [1.0]}, chart_id='c"><script>', title="<b>$ & more</b>", unit="/h<i>")
    assert "<script>" not in svg and "<b>" not in svg and "<i>" not in svg
    root = ET.fromstring(svg)  # well-formed despite it all
    assert root.find(f"{SVG}title").text == "<b>$ & more</b>"
    assert root.find(f".//{SVG}g[@class='series']").get("data-group") == nasty
    assert [t.text for t in root.find(f".//{SVG}g[@class='legend']").iter(f"{SVG}text")] == [nasty]
    assert root.find(f".//{SVG}circle/{SVG}title").text.startswith(f"{nasty}: $1.0000/h<i>")


def test_a_long_legend_wraps_and_the_chart_grows_to_hold_it():
    names = [f"nodepool-with-a-long-name-{i}" for i in range(12)]
    root = chart({name: [0.1] * 8 for name in names})
    ys = {float(r.get("y")) for r in root.find(f".//{SVG}g[@class='legend']").iter(f"{SVG}rect")}
    assert len(ys) > 1
    assert float(root.get("viewBox").split()[3]) >= max(ys) + 12


def test_values_that_do_not_fit_the_buckets_are_refused():
    with pytest.raises(ValueError, match="general: 3 values for 8 buckets"):
        chart({"general": [0.1] * 3})
