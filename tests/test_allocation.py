"""Allocation: each node's cost split over its pods (the larger of the cpu and memory share
of its allocatable, Kubecost's default), idle capacity apart; the samples the beat records at
every resolution; and the series read back by namespace and by pod label. Figures are worked
out by hand in the comments and recomputed here from the requests, independently of the
service's arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from builders import nodeclaim
from django.db import connection
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.test.utils import CaptureQueriesContext
from uipages import add_node, add_pod

from provisioning.models import Allocation, AllocationBucket, ClusterPod, NodeClaim
from provisioning.services import allocation, spend
from provisioning.services.allocation import NodeCost, PodRequest
from provisioning.services.spend import SpendError

T0 = datetime(2026, 3, 15, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
GIB = 2**30


def at(minute: int = 0, second: int = 0) -> datetime:
    return T0 + timedelta(minutes=minute, seconds=second)


def expected_split(per_hour: float, allocatable: tuple[int, int], requests: list[tuple[int, int]]):
    """The definition, written out again: each pod's $/hour and the idle $/hour."""
    cpu, memory = allocatable
    fractions = [max(c / cpu, m / memory) for c, m in requests]
    scale = max(1.0, sum(fractions))
    charged = [per_hour * f / scale for f in fractions]
    return charged, per_hour - sum(charged)


# ------------------------------------------------------------------ the arithmetic


def test_a_pods_share_is_the_larger_of_its_cpu_and_memory_shares_and_the_rest_is_idle():
    # A node of 4 cpu and 16 GiB at $0.80/hour. web asks 1 cpu (1/4) and 2 GiB (1/8): 1/4,
    # $0.20. api asks 500m (1/8) and 8 GiB (1/2): 1/2, $0.40. A quarter is idle: $0.20.
    requests = [(1000, 2 * GIB), (500, 8 * GIB)]
    fractions, idle = allocation.shares(4000, 16 * GIB, requests)
    assert fractions == pytest.approx([0.25, 0.5]) and idle == pytest.approx(0.25)
    charged, idle_cost = expected_split(0.80, (4000, 16 * GIB), requests)
    assert charged == pytest.approx([0.20, 0.40]) and idle_cost == pytest.approx(0.20)
    assert [0.80 * f for f in fractions] == pytest.approx(charged) and 0.80 * idle == pytest.approx(idle_cost)


def test_shares_over_the_whole_node_are_scaled_down_to_fill_it_and_nothing_is_idle():
    # One pod asks 3/4 of the cpu, the other 3/4 of the memory: 1.5 nodes' worth, so each
    # pays half the node.
    requests = [(3000, 2 * GIB), (500, 12 * GIB)]
    fractions, idle = allocation.shares(4000, 16 * GIB, requests)
    assert fractions == pytest.approx([0.5, 0.5]) and idle == 0.0
    charged, idle_cost = expected_split(1.0, (4000, 16 * GIB), requests)
    assert charged == pytest.approx(fractions) and idle_cost == pytest.approx(0.0)


def test_a_node_whose_allocatable_is_unknown_is_idle_whole():
    assert allocation.shares(0, 0, [(1000, GIB)]) == ([0.0], 1.0)
    assert allocation.shares(4000, 16 * GIB, []) == ([], 1.0)


def test_allocation_groups_by_namespace_and_by_label_value_with_unlabelled_pods_apart():
    nodes = [NodeCost("n1", 0.80, 4000, 16 * GIB), NodeCost("", 0.20, 0, 0)]  # the second has not registered
    pods = [
        PodRequest("n1", "shop", ("storefront",), 1000, 2 * GIB),
        PodRequest("n1", "shop", ("payments",), 500, 8 * GIB),
        PodRequest("n1", "jobs", (None,), 1000, GIB),
        PodRequest("elsewhere", "jobs", ("storefront",), 1000, GIB),  # on a node without a claim: no cost known
    ]
    rates = allocation.allocate(nodes, pods, ["team"])
    charged, idle = expected_split(0.80, (4000, 16 * GIB), [(1000, 2 * GIB), (500, 8 * GIB), (1000, GIB)])
    assert rates == pytest.approx(
        {
            ("namespace", "shop"): charged[0] + charged[1],
            ("namespace", "jobs"): charged[2],
            ("label:team", "storefront"): charged[0],
            ("label:team", "payments"): charged[1],
            ("label:team", "(no team)"): charged[2],
            ("idle", "idle"): idle + 0.20,
        }
    )
    # by hand: shop 0.20 + 0.40, jobs 1/4 of the cpu: 0.20, idle 0 on n1 and the whole 0.20 claim
    assert rates[("namespace", "shop")] == pytest.approx(0.60) and rates[("idle", "idle")] == pytest.approx(0.20)


# ------------------------------------------------------------------ the record


@pytest.fixture
def cluster(db):
    """n1: 4 cpu, 16 GiB at $0.80 with shop/web-1 (team storefront; 1 cpu, 2 GiB) and
    shop/api-1 (team payments; 500m, 8 GiB); n2: 2 cpu, 8 GiB at $0.40 with jobs/batch-1 (no
    team; 1500m, 1 GiB) and a finished pod; a claim at $0.20 whose node has not registered;
    and a claim deleted before, which costs nothing now."""
    launched = T0 - timedelta(hours=1)
    add_node("n1", price="0.80", cpu="4", memory="16Gi", launched_at=launched)
    add_node("n2", price="0.40", cpu="2", memory="8Gi", launched_at=launched)
    nodeclaim("n3-claim", 0.20, launched_at=launched)
    nodeclaim("gone", 5.00, launched_at=launched, deleted_at=launched + MINUTE)
    add_pod("web-1", "shop", node="n1", cpu="1", memory="2Gi", labels={"team": "storefront"})
    add_pod("api-1", "shop", node="n1", cpu="500m", memory="8Gi", labels={"team": "payments"})
    add_pod("batch-1", "jobs", node="n2", cpu="1500m", memory="1Gi")
    done = add_pod("done-1", "jobs", node="n2", cpu="500m", memory="4Gi", labels={"team": "payments"})
    ClusterPod.objects.filter(pk=done.pk).update(phase=ClusterPod.Phase.SUCCEEDED)


def rates_by_hand(with_api: bool = True) -> dict[tuple[str, str], float]:
    """The cluster fixture's split, from its requests, by the definition."""
    n1 = [(1000, 2 * GIB)] + ([(500, 8 * GIB)] if with_api else [])
    (web, *api), idle1 = expected_split(0.80, (4000, 16 * GIB), n1)
    (batch,), idle2 = expected_split(0.40, (2000, 8 * GIB), [(1500, GIB)])
    rates = {
        ("namespace", "shop"): web + sum(api),
        ("namespace", "jobs"): batch,
        ("label:team", "storefront"): web,
        ("label:team", "(no team)"): batch,
        ("idle", "idle"): idle1 + idle2 + 0.20,
    }
    if with_api:
        rates[("label:team", "payments")] = api[0]
    return rates


def test_a_sample_splits_the_claims_running_now(cluster):
    sample = allocation.record(at(0))
    assert sample.rates == pytest.approx(rates_by_hand())
    # by hand: shop 0.60, jobs 0.30, idle 0.20 (n1) + 0.10 (n2) + 0.20 (not registered)
    assert sample.rates[("namespace", "shop")] == pytest.approx(0.60)
    assert sample.rates[("idle", "idle")] == pytest.approx(0.50)
    assert sample.per_hour == pytest.approx(1.40) and (sample.nodes, sample.pods) == (3, 3)


def buckets() -> dict[int, list[tuple[datetime, float]]]:
    out: dict[int, list[tuple[datetime, float]]] = {}
    for b in AllocationBucket.objects.order_by("resolution", "start"):
        out.setdefault(b.resolution, []).append((b.start, b.seconds))
    return out


def cost(resolution: int, start: datetime, by: str, name: str) -> float:
    return Allocation.objects.get(bucket__resolution=resolution, bucket__start=start, by=by, name=name).cost


@pytest.fixture
def sampled(cluster):
    """Three samples: at 10:00 (standing for the minute before), at 10:00:30, and, after
    api-1 went, at 10:10 (standing for the two minutes before: at most two periods)."""
    allocation.record(at(0))
    allocation.record(at(0, 30))
    ClusterPod.objects.filter(name="api-1").delete()
    allocation.record(at(10))


def test_each_sample_adds_the_time_since_the_last_to_a_bucket_of_every_resolution(sampled):
    assert buckets() == {
        60: [(at(-1), 60.0), (at(0), 30.0), (at(8), 60.0), (at(9), 60.0)],
        900: [(at(-15), 60.0), (at(0), 150.0)],
        7200: [(at(-120), 60.0), (at(0), 150.0)],
        21600: [(at(-240), 210.0)],
    }
    before, after = rates_by_hand(), rates_by_hand(with_api=False)
    assert cost(60, at(-1), "namespace", "shop") == pytest.approx(before[("namespace", "shop")] * 60 / 3600)
    assert cost(900, at(0), "namespace", "shop") == pytest.approx(
        (before[("namespace", "shop")] * 30 + after[("namespace", "shop")] * 120) / 3600
    )
    assert cost(21600, at(-240), "label:team", "payments") == pytest.approx(
        before[("label:team", "payments")] * 90 / 3600
    )
    assert not Allocation.objects.filter(bucket__resolution=60, bucket__start=at(9), name="payments").exists()


def test_a_sample_at_the_time_of_the_last_adds_nothing(sampled):
    seconds = buckets()
    again = allocation.record(at(10))
    assert again.seconds == 0 and buckets() == seconds


def test_buckets_older_than_their_resolution_keeps_are_dropped(sampled):
    allocation.record(at(3 * 24 * 60))  # three days later: minutes are kept two days, the rest longer
    kept = buckets()
    assert [start for start, _ in kept[60]] == [at(3 * 24 * 60 - 2), at(3 * 24 * 60 - 1)]  # its two minutes
    assert [start for start, _ in kept[900]][:2] == [at(-15), at(0)]
    assert not Allocation.objects.filter(bucket__resolution=60, bucket__start__lt=at(24 * 60)).exists()


def test_the_series_by_namespace_averages_each_bucket_over_its_sampled_time_with_idle_apart(sampled):
    before, after = rates_by_hand(), rates_by_hand(with_api=False)
    series = spend.series(at(-15), at(10), timedelta(minutes=15), "namespace", now=at(10))
    assert series.edges == (at(-15), at(0), at(10))
    assert series.groups == ("jobs", "shop")
    shop_later = (before[("namespace", "shop")] * 30 + after[("namespace", "shop")] * 120) / 150
    assert shop_later == pytest.approx(0.28)  # by hand: (0.60 × 30 s + 0.20 × 120 s) / 150 s
    assert series.values["shop"] == pytest.approx((0.60, shop_later))
    assert series.values["jobs"] == pytest.approx((0.30, 0.30))
    idle_later = (before[("idle", "idle")] * 30 + after[("idle", "idle")] * 120) / 150
    assert series.idle == pytest.approx((0.50, idle_later))
    hours = (0.25, 10 / 60)
    assert series.cost() == pytest.approx(sum((0.60 + 0.30, shop_later + 0.30)[i] * hours[i] for i in range(2)))
    assert series.idle_cost == pytest.approx(0.50 * hours[0] + idle_later * hours[1])


def test_the_series_by_a_label_has_a_group_for_pods_without_it(sampled):
    series = spend.series(at(-15), at(10), timedelta(minutes=15), "label:team", now=at(10))
    assert series.groups == ("(no team)", "payments", "storefront")
    assert series.values["payments"] == pytest.approx((0.40, 0.40 * 30 / 150))
    assert series.values["storefront"] == pytest.approx((0.20, 0.20))
    assert series.values["(no team)"] == pytest.approx((0.30, 0.30))


def test_minutes_without_a_sample_are_empty_and_the_series_reads_with_one_query(sampled, django_assert_num_queries):
    with django_assert_num_queries(1):
        series = spend.series(at(-1), at(10), MINUTE, "namespace", now=at(10))
    assert series.buckets == 11
    assert series.values["shop"] == pytest.approx((0.60, 0.60, 0, 0, 0, 0, 0, 0, 0, 0.20, 0.20))


@pytest.mark.parametrize("step", [MINUTE, timedelta(minutes=15)])
def test_buckets_read_as_recorded_agree_with_the_sweep(sampled, monkeypatch, step):
    now = at(10, 20)
    as_recorded = spend.series(at(-15), now, step, "label:team", now=now)
    monkeypatch.setattr(allocation, "_aligned", lambda *args: False)
    swept = spend.series(at(-15), now, step, "label:team", now=now)
    assert as_recorded.groups == swept.groups and as_recorded.groups
    for group in swept.groups:
        assert as_recorded.values[group] == pytest.approx(swept.values[group], abs=1e-9)
    assert as_recorded.idle == pytest.approx(swept.idle, abs=1e-9)


def test_allocated_and_idle_add_up_to_what_the_claims_cost(cluster):
    for minute in range(11):
        if minute == 4:  # one more node, launched in the minute before
            add_node("n4", price="0.36", cpu="2", memory="8Gi", launched_at=at(3, 20))
            add_pod("solo-1", "solo", node="n4", cpu="1", memory="1Gi")
        if minute == 7:  # n2 gone in the minute before, its pod with it
            NodeClaim.objects.filter(name="n2-claim").update(deleted_at=at(6, 40))
            ClusterPod.objects.filter(name="batch-1").delete()
        allocation.record(at(minute))
    allocated = spend.series(at(0), at(10), MINUTE, "namespace", now=at(10))
    claims = spend.series(at(0), at(10), MINUTE, "nodepool", now=at(10))
    for i in range(allocated.buckets):
        total = sum(v[i] for v in allocated.values.values()) + allocated.idle[i]
        assert total == pytest.approx(sum(v[i] for v in claims.values.values()))
    assert allocated.cost() + allocated.idle_cost == pytest.approx(claims.cost())


def test_a_claim_launched_or_gone_since_the_last_sample_counts_for_the_seconds_it_ran(cluster):
    allocation.record(at(0))
    # n4 ($0.36; 2 cpu, 8 GiB) launched 20 s before the next sample; solo-1 asks half of it.
    add_node("n4", price="0.36", cpu="2", memory="8Gi", launched_at=at(0, 40))
    add_pod("solo-1", "solo", node="n4", cpu="1", memory="1Gi")
    # n2 went 15 s after the last sample, and batch-1 with it.
    NodeClaim.objects.filter(name="n2-claim").update(deleted_at=at(0, 15), state=NodeClaim.State.TERMINATED)
    ClusterPod.objects.filter(name="batch-1").delete()
    sample = allocation.record(at(1))
    assert sample.nodes == 3 and ("namespace", "jobs") not in sample.rates
    assert cost(60, at(0), "namespace", "solo") == pytest.approx(0.18 * 20 / 3600)
    assert cost(60, at(0), "namespace", "shop") == pytest.approx(0.60 * 60 / 3600)
    assert not Allocation.objects.filter(bucket__start=at(0), bucket__resolution=60, name="jobs").exists()
    # idle: n1's quarter and n3 the whole minute, n2 its last 15 s, n4's other half its 20 s
    idle = (0.20 * 60 + 0.20 * 60 + 0.40 * 15 + 0.18 * 20) / 3600
    assert cost(60, at(0), "idle", "idle") == pytest.approx(idle)
    claims = spend.series(at(0), at(1), MINUTE, "nodepool", now=at(1))
    allocated = spend.series(at(0), at(1), MINUTE, "namespace", now=at(1))
    assert allocated.cost() + allocated.idle_cost == pytest.approx(claims.cost())


def test_nothing_recorded_is_told_apart_from_nothing_allocated(db):
    series = spend.series(at(-60), at(0), MINUTE, "namespace", now=at(0))
    assert series.idle is None and series.groups == ()


def test_a_sample_costs_the_same_queries_with_many_more_pods_and_nodes(cluster):
    allocation.record(at(0))
    with CaptureQueriesContext(connection) as few:
        allocation.record(at(1))
    for i in range(20):
        add_node(f"more-{i}", price="0.10", launched_at=T0 - timedelta(hours=1))
        for k in range(5):
            add_pod(f"p{i}-{k}", f"ns-{k}", node=f"more-{i}", cpu="100m", labels={"team": f"t{i % 4}"})
    with CaptureQueriesContext(connection) as many:
        sample = allocation.record(at(2))
    assert len(many) == len(few) and sample.pods == 103


# ------------------------------------------------------------------ resolutions and groupings


def test_each_page_range_reads_the_resolution_of_its_step():
    now = at(0)
    for r in spend.RANGES.values():
        start, _, step = spend.window(r.name, now)
        assert allocation.resolution_for(step, start, now).seconds == step.total_seconds(), r.name


def test_the_api_reads_the_coarsest_resolution_within_the_step_that_reaches_back_far_enough():
    now = at(0)
    assert allocation.resolution_for(timedelta(hours=1), now - timedelta(hours=6), now).seconds == 900
    assert allocation.resolution_for(timedelta(minutes=5), now - timedelta(days=3), now).seconds == 900
    assert allocation.resolution_for(timedelta(hours=1), now - timedelta(days=10), now).seconds == 7200
    assert allocation.resolution_for(timedelta(days=1), now - timedelta(days=500), now).seconds == 21600


@pytest.mark.parametrize(
    ("by", "message"),
    [
        ("label:", r"by: label: needs a pod label key, such as label:team \(recorded: team\)"),
        ("label:Bad Key", r"by: 'Bad Key' is not a label key: name part must consist of alphanumeric"),
        (
            "label:owner",
            r"by: the pod label owner is not recorded; recorded: team \(the setting KARPWEB_SPEND_LABELS\)",
        ),
        (
            "zone",
            r"by: 'zone' is not one of nodepool, capacity_type, namespace, label:KEY \(recorded label keys: team\)",
        ),
        ("idle", r"by: 'idle' is not one of"),
    ],
)
def test_an_unknown_grouping_is_refused_saying_what_is_recorded(db, by, message):
    with pytest.raises(SpendError, match=message) as caught:
        spend.series(at(-60), at(0), MINUTE, by, now=at(0))
    assert caught.value.field == "by"


def test_the_label_keys_come_from_the_setting(cluster, settings):
    settings.KARPWEB_SPEND_LABELS = ["team", "app"]
    assert allocation.groupings() == ("namespace", "label:team", "label:app")
    sample = allocation.record(at(0))
    assert sample.rates[("label:app", "web")] == pytest.approx(0.20)  # pods are labelled app after their name
    assert spend.series(at(-1), at(0), MINUTE, "label:app", now=at(0)).groups == ("api", "batch", "web")


# ------------------------------------------------------------------ the periodic task


def test_the_beat_records_a_sample_every_minute_one_at_a_time(cluster, clean_redis, settings):
    import json

    from provisioning import tasks

    entry = settings.CELERY_BEAT_SCHEDULE["spend-allocation"]
    assert entry["task"] == tasks.record_allocation.name and entry["schedule"] == 60.0
    lock = clean_redis.lock(tasks.ALLOCATION_LOCK, timeout=30)
    assert lock.acquire(blocking=False)
    try:
        assert tasks.record_allocation() == {"skipped": "another sample is being recorded"}
        assert not AllocationBucket.objects.exists()
    finally:
        lock.release()
    result = tasks.record_allocation()
    assert json.loads(json.dumps(result)) == result
    assert result == {"nodes": 3, "pods": 3, "perHour": 1.4, "seconds": 60.0}
    # The minute before now, at every resolution (in two buckets where it straddles an edge)
    assert {r: sum(seconds for _, seconds in rows) for r, rows in buckets().items()} == {
        r.seconds: pytest.approx(60.0) for r in allocation.RESOLUTIONS
    }


def test_the_demo_runs_in_four_namespaces_labelled_by_team_but_one(db):
    from provisioning.cluster import simulated
    from provisioning.services import demo

    # A database of when the whole demo ran in "demo" still holds cache pods there.
    simulated.scale("demo", "Deployment", "cache", {"metadata": {"labels": {"app": "cache"}}}, 2)
    replicas = demo.step(30.0)
    assert min(replicas.values()) > 0
    team = KeyTextTransform("team", KeyTransform("labels", KeyTransform("metadata", "manifest")))
    rows = ClusterPod.objects.values_list("namespace", "owner", team).distinct()
    assert set(rows) == {
        ("demo", "Deployment/web", "storefront"),
        ("demo", "Deployment/api", "payments"),
        ("platform", "Deployment/cache", "platform"),
        ("analytics", "Deployment/batch", None),
        ("ml", "Deployment/train", "research"),
    }
    assert ClusterPod.objects.filter(owner="Deployment/cache").count() == replicas["cache"]
