"""The read pages of the dashboard: pending pods, decisions, nodes and disruptions, with the
Django client: who may see them, what they show, htmx partials, and query counts that stay
flat as rows grow."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from uipages import add_decision, add_disruption, add_node, add_pod

from provisioning.models import ClusterPod, NodeClaim

pytestmark = pytest.mark.django_db

PAGES = ["/pods/", "/decisions/", "/nodes/", "/disruptions/"]


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("vera", password="pw")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return client


@pytest.mark.parametrize("path", PAGES)
def test_pages_need_a_login(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/accounts/login/?next={path}")


@pytest.mark.parametrize("path", PAGES)
def test_empty_pages_say_so(viewer, path):
    response = viewer.get(path)
    assert response.status_code == 200
    assert b'class="empty"' in response.content


def test_pending_pods_show_requests_constraints_and_the_reason(viewer):
    add_pod(
        "web-1",
        "shop",
        cpu="250m",
        memory="512Mi",
        nodeSelector={"kubernetes.io/arch": "arm64"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    add_pod("batch-1", "jobs", cpu="64", reason="no instance type of NodePool general has 64 cpu")
    add_pod("bound-1", "shop", node="ip-10-0-0-1")
    text = viewer.get("/pods/").content.decode()
    assert "shop/web-1" in text and "jobs/batch-1" in text
    assert "bound-1" not in text  # bound pods are not pending
    assert "cpu 250m" in text and "memory 512Mi" in text
    assert "nodeSelector kubernetes.io/arch=arm64" in text
    assert "tolerates gpu:NoSchedule" in text
    assert "no instance type of NodePool general has 64 cpu" in text
    assert 'hx-trigger="every 3s"' in text  # live while pods wait


def test_pending_pods_filter_by_namespace_and_nodepool(viewer):
    claim = add_node("ip-10-0-0-9", nodepool="gpu")
    NodeClaim.objects.filter(pk=claim.pk).update(state=NodeClaim.State.LAUNCHED)
    add_pod("train-1", "ml", nominated=claim.name)
    add_pod("web-1", "shop")
    by_namespace = viewer.get("/pods/?namespace=shop").content.decode()
    assert "shop/web-1" in by_namespace and "ml/train-1" not in by_namespace
    by_pool = viewer.get("/pods/?nodepool=gpu").content.decode()
    assert "ml/train-1" in by_pool and "shop/web-1" not in by_pool
    assert "nominated to" in by_pool and claim.name in by_pool


def test_pending_pods_htmx_gets_the_list_only_and_stops_polling_when_idle(viewer):
    add_pod("web-1")
    live = viewer.get("/pods/", headers={"HX-Request": "true"})
    assert live.status_code == 200
    assert b"<html" not in live.content and b'id="pending-list"' in live.content
    ClusterPod.objects.update(node_name="n1", phase=ClusterPod.Phase.RUNNING)
    idle = viewer.get("/pods/", headers={"HX-Request": "true"})
    assert idle.status_code == 286  # htmx stops polling on this status
    assert b"hx-trigger" not in idle.content


def test_decisions_list_and_explain_each_claim(viewer):
    decision = add_decision(
        ["shop/web-1", "shop/web-2", "jobs/huge"],
        unschedulable=[{"pod": "jobs/huge", "reason": "needs 512 cpu; the largest type has 192"}],
        unavailable={"spot:m5.xlarge:us-east-1b": "InsufficientInstanceCapacity", "spot:c7g.large:us-east-1a": "x"},
    )
    claim = add_node("ip-10-0-0-2", decision=decision)
    NodeClaim.objects.filter(pk=claim.pk).update(
        pods=["shop/web-1", "shop/web-2"],
        why="m5.xlarge spot is the cheapest offering that holds both pods",
        alternatives=[{"instanceType": "m6i.xlarge", "capacityType": "spot", "zone": "us-east-1a", "price": 0.0912}],
        launch_options=[{"instanceType": "m5.xlarge", "capacityType": "spot", "zone": "us-east-1a", "price": 0.08}],
    )
    listing = viewer.get("/decisions/").content.decode()
    assert f'href="/decisions/{decision.pk}/"' in listing
    detail = viewer.get(f"/decisions/{decision.pk}/").content.decode()
    assert "m5.xlarge" in detail and "cheapest offering that holds both pods" in detail
    assert "m6i.xlarge" in detail and "0.0912" in detail
    assert "shop/web-1" in detail
    assert "spot:m5.xlarge:us-east-1b" in detail and "InsufficientInstanceCapacity" in detail
    assert "spot:c7g.large:us-east-1a" not in detail  # not a type this claim could use
    assert "needs 512 cpu; the largest type has 192" in detail
    assert viewer.get("/decisions/999999/").status_code == 404
    assert "at their list prices (no NodeOverlay applied)" in detail


def test_a_decision_shows_the_overlay_that_set_each_price_it_compared(viewer):
    decision = add_decision(["shop/cache-0"])
    claim = add_node("ip-10-0-0-3", decision=decision, instance_type="r7i.large", capacity_type="on-demand")
    discounted = {"instanceType": "r7i.large", "capacityType": "on-demand", "zone": "us-east-1a", "price": 0.096579,
                  "listPrice": 0.1323, "overlays": ["savings-plan"]}  # fmt: skip
    NodeClaim.objects.filter(pk=claim.pk).update(
        price_per_hour="0.096579",
        list_price_per_hour="0.1323",
        alternatives=[
            {"instanceType": "r6g.large", "capacityType": "on-demand", "zone": "us-east-1a", "price": 0.1008}
        ],
        launch_options=[discounted, {**discounted, "zone": "us-east-1b"}],
    )
    detail = viewer.get(f"/decisions/{decision.pk}/").content.decode()
    chosen = re.search(r'<p class="chosen">(.*?)</p>', detail, re.S).group(1)
    assert "<strong>$0.0966</strong>/hour" in chosen and "list $0.1323" in chosen
    assert '<a href="/policies/NodeOverlay/savings-plan/">savings-plan</a>' in chosen
    assert "<td>r6g.large</td><td>on-demand</td><td>us-east-1a</td><td>0.1008</td><td>0.1008</td><td>—</td>" in detail
    assert (
        'at their prices after NodeOverlays: <a href="/policies/NodeOverlay/savings-plan/">savings-plan</a> priced 2'
        in (" ".join(detail.split()))
    )


def test_nodes_show_usage_against_allocatable_and_the_consolidation_note(viewer):
    claim = add_node("ip-10-0-0-3", note="not a candidate: consolidateAfter 5m not reached (2m left)")
    add_pod("web-1", node="ip-10-0-0-3", cpu="1", memory="2Gi")
    add_pod("web-2", node="ip-10-0-0-3", cpu="500m", memory="1Gi")
    add_node("ip-10-0-0-4", capacity_type="on-demand", instance_type="c6i.large")
    text = viewer.get("/nodes/").content.decode()
    assert "1.50 of 3.92 cores" in text
    assert "3.0 of 14.0 GiB" in text
    assert "consolidateAfter 5m not reached" in text
    spot_only = viewer.get("/nodes/?capacity_type=spot").content.decode()
    assert claim.name in spot_only and "c6i.large" not in spot_only
    detail = viewer.get(f"/nodes/{claim.name}/").content.decode()
    assert "default/web-1" in detail and "default/web-2" in detail
    assert viewer.get("/nodes/nope/").status_code == 404


def test_disruptions_are_logged_with_reason_and_savings(viewer):
    claim = add_node("ip-10-0-0-5")
    add_disruption([claim.name])
    for path in ("/disruptions/", "/nodes/", f"/nodes/{claim.name}/"):
        text = viewer.get(path).content.decode()
        assert "Underutilized" in text and "0.0400" in text and "cheaper m5.large" in text, path


def _queries(client, path: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx.captured_queries)


def _seed(count: int, offset: int) -> None:
    for i in range(offset, offset + count):
        decision = add_decision([f"default/p{i}"])
        claim = add_node(f"n{i}", decision=decision, nodepool=f"pool{i % 3}")
        add_pod(f"p{i}", node=f"n{i}")
        add_pod(f"q{i}", reason="no room")
        add_disruption([claim.name])


@pytest.mark.parametrize("path", ["/pods/", "/decisions/", "/nodes/", "/disruptions/", "/"])
def test_query_counts_do_not_grow_with_rows(viewer, path):
    _seed(3, 0)
    few = _queries(viewer, path)
    _seed(12, 3)
    assert _queries(viewer, path) == few


def test_detail_query_counts_do_not_grow_with_rows(viewer):
    decision = add_decision(["default/p0"])
    claim = add_node("n0", decision=decision)
    few = (_queries(viewer, f"/decisions/{decision.pk}/"), _queries(viewer, f"/nodes/{claim.name}/"))
    for i in range(1, 10):
        add_node(f"n{i}", decision=decision)
        add_pod(f"p{i}", node="n0")
    assert (_queries(viewer, f"/decisions/{decision.pk}/"), _queries(viewer, f"/nodes/{claim.name}/")) == few


def test_the_overview_names_offerings_out_of_capacity(viewer, clean_redis):
    from provisioning.cloud import ice

    ice.mark_unavailable(clean_redis, "spot", "m5.xlarge", "us-east-1b", "InsufficientInstanceCapacity")
    text = viewer.get("/").content.decode()
    assert "1 offering is out of capacity" in text and "spot:m5.xlarge:us-east-1b" in text
