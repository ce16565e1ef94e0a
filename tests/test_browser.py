"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright) against
a live server: log in, watch a pending pod get a node, open its decision. A screenshot of
every page lands in var/test-artifacts/screenshots/ (ignored by git)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from builders import deployment, nodepool, requirement
from django.contrib.auth.models import Group, User

from provisioning.cluster import simulated
from provisioning.models import ClusterPod, Decision, NodeClaim
from provisioning.services import catalog as catalog_service
from provisioning.services import cloud as cloud_service
from provisioning.services import connections, provision
from provisioning.services.policy import apply_manifest
from provisioning.services.simulate import default_solver

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parent.parent / "var" / "test-artifacts" / "screenshots"

pytestmark = [
    pytest.mark.slow,
    # CI installs Chromium, so there a missing browser fails rather than skips.
    pytest.mark.skipif(
        shutil.which(CHROMIUM) is None and not os.environ.get("CI"),
        reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium; .ci/run installs it)",
    ),
]

# Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
# between page actions are ordinary synchronous calls, which Django would otherwise refuse.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server, transactional_db):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.base = live_server.url  # type: ignore[attr-defined]
    yield page
    context.close()
    # A page that broke its own script or hit the content security policy is a failure.
    assert not errors, errors


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def log_in(page, username: str, role: str) -> None:
    user = User.objects.create_user(username, password="a-long-test-password")
    user.groups.add(Group.objects.get(name=role))
    page.goto(page.base + "/")
    assert "/accounts/login/" in page.url
    shot(page, "login")
    page.fill("#id_username", username)
    page.fill("#id_password", "a-long-test-password")
    page.click("button[type=submit]")
    page.wait_for_url(page.base + "/")
    assert page.locator("h1").inner_text() == "Overview"


@pytest.fixture
def simulated_cloud(simulated_aws, redis_url, settings, monkeypatch, seed_ec2nodeclass):
    """The simulated AWS behind boto3, the seed's EC2NodeClass and an on-demand NodePool;
    launches are queued to a list the test drains, instead of a Celery worker."""
    from provisioning import tasks

    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    settings.REDIS_URL = redis_url
    settings.AWS_REGION = simulated_aws.region
    settings.KARPWEB_CLUSTER_NAME = "karpweb-browser-test"
    connections.reset()
    cloud_service.get_cloud.cache_clear()
    queued: list[int] = []
    monkeypatch.setattr(tasks.launch_nodeclaim, "delay", queued.append)
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(
        nodepool(
            requirement("karpenter.sh/capacity-type", "on-demand"),
            requirement("karpenter.k8s.aws/instance-category", "c", "m"),
        ),
        source="cli",
    )
    yield queued
    connections.reset()
    cloud_service.get_cloud.cache_clear()


def test_log_in_watch_a_pending_pod_get_a_node_and_open_its_decision(page, simulated_cloud):
    log_in(page, "vera", "viewer")
    shot(page, "overview")

    pods, _ = simulated.workload_pods([deployment("web", 1, cpu="1", memory="1Gi")])
    simulated.apply_pods(pods)
    page.click("nav >> text=Pending pods")
    row = page.locator("#pending-list tbody tr")
    assert row.count() == 1 and "default/web-" in row.first.inner_text()
    assert page.locator("#pending-list .badge", has_text="live").is_visible()
    shot(page, "pending-pods")

    # One pass of the pipeline: decide, launch through boto3, the kubelet registers, bind.
    decision = provision.provision_once()
    assert decision is not None and simulated_cloud
    for claim_id in simulated_cloud:
        cloud_service.launch_nodeclaim(claim_id)
    catalog = catalog_service.load_catalog()
    assert simulated.register_launched(0, catalog.instance_type)
    assert simulated.bind_pending(default_solver()) == 1

    # The live list notices on its own (htmx polling) and then goes quiet.
    page.locator("#pending-list .empty").wait_for()
    assert page.locator("#pending-list").get_attribute("hx-trigger") is None
    shot(page, "pending-pods-bound")

    page.click("nav >> text=Nodes")
    claim = NodeClaim.objects.get()
    node_row = page.locator("table.nodes tbody tr")
    assert node_row.count() == 1
    assert claim.instance_type in node_row.first.inner_text()
    assert re.search(r"1\.00 of \d+\.\d\d cores", node_row.first.inner_text())
    shot(page, "nodes")

    page.click("nav >> text=Decisions")
    page.click(f"a[href='/decisions/{decision.pk}/']")
    section = page.locator(f"#claim-{claim.name}")
    assert claim.instance_type in section.inner_text()
    assert "Why:" in section.inner_text()
    assert ClusterPod.objects.get().key in section.inner_text()
    shot(page, "decision")
    assert Decision.objects.count() == 1
