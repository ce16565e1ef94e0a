"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright) against
a live server: log in, watch a pending pod get a node, open its decision and the spend
chart; edit a NodePool with an invalid requirement, see the error at its row, fix and save;
plan a what-if. A screenshot of every page lands in var/test-artifacts/screenshots/
(ignored by git)."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from builders import deployment, nodepool, requirement
from django.contrib.auth.models import Group, User

from provisioning.cluster import simulated
from provisioning.models import AuditEntry, ClusterPod, Decision, NodeClaim, NodePool
from provisioning.services import catalog as catalog_service
from provisioning.services import cloud as cloud_service
from provisioning.services import connections, launchbatch, provision
from provisioning.services.policy import apply_manifest
from provisioning.services.simulate import default_solver
from provisioning.ui.views import policy_edit

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
    # Everything the console shows a person: errors (a failed resource, the content security
    # policy, htmx's own), warnings and logs alike, and uncaught exceptions.
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text} ({m.location.get('url', '')})"))
    page.on("pageerror", lambda exc: console.append(f"uncaught: {exc}"))
    page.console = console  # type: ignore[attr-defined]
    page.base = live_server.url  # type: ignore[attr-defined]
    yield page
    context.close()
    assert not console, console


def clean_console(page, after: str) -> None:
    """Nothing in the console since the test began: checked on every page and after every edit."""
    page.wait_for_load_state()
    assert not page.console, f"after {after}: {page.console}"


def apply_policies(nodeclass: dict) -> None:
    """The seed's EC2NodeClass and an on-demand NodePool of c and m types."""
    apply_manifest(nodeclass, source="cli")
    apply_manifest(
        nodepool(
            requirement("karpenter.sh/capacity-type", "on-demand"),
            requirement("karpenter.k8s.aws/instance-category", "c", "m"),
        ),
        source="cli",
    )


def shot(page, name: str) -> None:
    """A screenshot of the page, whose console must still be empty."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    clean_console(page, f"the page {name}")


def log_in(page, username: str, role: str) -> None:
    user = User.objects.create_user(username, password="a-long-test-password")
    user.groups.add(Group.objects.get_or_create(name=role)[0])  # a flushed database has no groups
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
    launches (a batch or a single claim) are queued to a list the test drains, instead of
    to a Celery worker."""

    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    settings.REDIS_URL = redis_url
    settings.AWS_REGION = simulated_aws.region
    settings.KARPWEB_CLUSTER_NAME = "karpweb-browser-test"
    connections.reset()
    cloud_service.get_cloud.cache_clear()
    queued: list[list[NodeClaim]] = []
    monkeypatch.setattr(launchbatch, "dispatch", queued.extend)
    apply_policies(seed_ec2nodeclass)
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
    for launch in simulated_cloud:  # what the launch tasks do
        if launch[0].launch_batch:
            launchbatch.launch_batch(launch[0].launch_batch)
        else:
            cloud_service.launch_nodeclaim(launch[0].pk)
    catalog = catalog_service.load_catalog()
    assert simulated.register_launched(0, catalog.instance_type)
    assert simulated.bind_pending(default_solver()) == 1

    # The live list notices on its own (htmx polling) and then goes quiet.
    page.locator("#pending-list .empty").wait_for()
    assert page.locator("#pending-list").get_attribute("hx-trigger") is None
    shot(page, "pending-pods-bound")
    from provisioning.services import allocation

    assert allocation.record().pods == 1  # the beat's minute sample: the pod on its node

    page.click("nav >> text=Nodes")
    claim = NodeClaim.objects.get()
    node_row = page.locator("table.nodes tbody tr")
    assert node_row.count() == 1
    assert claim.instance_type in node_row.first.inner_text()
    assert re.search(r"1\.00 of \d+\.\d\d cores", node_row.first.inner_text())
    shot(page, "nodes")
    page.click("a[href='/disruptions/']")  # the disruptions log
    page.wait_for_url("**/disruptions/")
    shot(page, "disruptions")

    # A spot interruption of the node, as the queue's consumer handles it: on the Interruptions page.
    from django.utils import timezone

    from provisioning.cloud import messages
    from provisioning.services import interruption

    claim.refresh_from_db()
    warning = messages.Message(messages.SPOT_INTERRUPTED, (claim.instance_id,), detail={"instance-action": "terminate"})
    interruption.act(warning, timezone.now(), source="queue", message_id="browser-test")
    page.click("nav >> text=Interruptions")
    row = page.locator("table tbody tr", has_text=claim.instance_id)
    assert row.count() == 1 and "spot interruption warning" in row.first.inner_text()
    shot(page, "interruptions")

    page.click("nav >> text=Decisions")
    shot(page, "decisions")
    page.click(f"a[href='/decisions/{decision.pk}/']")
    section = page.locator(f"#claim-{claim.name}")
    assert claim.instance_type in section.inner_text()
    assert "Why:" in section.inner_text()
    assert ClusterPod.objects.get().key in section.inner_text()
    shot(page, "decision")
    assert Decision.objects.count() == 1

    page.click("nav >> text=Spend")
    page.click("#spend-range nav >> text=1 h")  # htmx swaps the range in place
    page.wait_for_url("**/spend/?range=1h")
    chart = page.locator("#spend-range svg").first
    chart.wait_for()
    assert "general" in chart.inner_html()  # the NodePool's series and legend
    assert claim.instance_type  # launched, so it costs: the figure is not zero
    assert "$0.0000" not in page.locator("#spend-range .figures").inner_text().split("/hour now")[0]
    shot(page, "spend")

    # The allocation by the team label, from the sample taken while the pod ran.
    page.click("#spend-allocation nav >> text=team")  # htmx swaps the range in place, keeping it
    page.wait_for_url("**/spend/?range=1h&by=label%3Ateam")
    allocated = page.locator("#spend-allocation svg")
    allocated.wait_for()
    assert "(no team)" in allocated.inner_html() and "idle (requested by no pod)" in allocated.inner_html()
    assert "(no team)" in page.locator("#spend-allocation table").inner_text()
    shot(page, "spend-allocation")


def test_edit_a_nodepool_see_the_error_at_its_row_fix_and_save(page, seed_ec2nodeclass):
    apply_policies(seed_ec2nodeclass)
    log_in(page, "eddie", "editor")
    page.click("nav >> text=Policies")
    shot(page, "policies")
    page.click("a[href='/policies/NodePool/general/']")
    page.click("a.button:text-is('Edit')")
    page.wait_for_url("**/policies/NodePool/general/edit/")
    shot(page, "policy-edit")
    # An operator that takes one integer, with two values: the validator objects, live.
    page.select_option("#id_requirements-1-operator", "Gt")
    row_errors = page.locator("#errors-requirements-1, #errors-id_requirements-1-values, #errors-id_requirements-1-key")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.rows-requirements .field-errors')].some(e => e.textContent.trim())"
    )
    assert "integer" in " ".join(row_errors.all_inner_texts())
    assert "Not valid yet" in page.locator("#validation").inner_text()
    shot(page, "policy-edit-invalid")

    page.select_option("#id_requirements-1-operator", "In")
    clean_console(page, "choosing the operator In")
    page.fill("#id_weight", "42")
    page.locator("#validation .verdict.ok").wait_for()
    clean_console(page, "typing the weight")
    page.click("button[name=review]")
    assert "weight: 42" in page.locator("body").inner_text()
    shot(page, "policy-review")
    page.click("button:has-text('Save NodePool')")
    page.wait_for_url("**/policies/NodePool/general/")
    assert NodePool.objects.get(name="general").weight == 42
    assert AuditEntry.objects.filter(name="general", actor="eddie", source="ui").exists()
    shot(page, "policy-detail")


def test_submitting_while_a_validation_is_in_flight_leaves_the_console_empty(page, seed_ec2nodeclass, monkeypatch):
    """Each edit starts a live validation; the person clicks Review while one is still running
    (slowed here to make sure) and the form is invalid. The page shows the errors; the console,
    nothing: no aborted request, no failed resource."""
    apply_policies(seed_ec2nodeclass)
    log_in(page, "eddie", "editor")
    page.goto(page.base + "/policies/NodePool/general/edit/")
    shot(page, "policy-edit-before-a-quick-submit")
    checked = policy_edit.check

    def slow_check(*args, **kwargs):
        time.sleep(0.6)
        return checked(*args, **kwargs)

    monkeypatch.setattr(policy_edit, "check", slow_check)
    page.select_option("#id_requirements-1-operator", "Gt")  # invalid: Gt takes one integer
    page.wait_for_timeout(100)
    page.fill("#id_weight", "43")  # a second validation while the first runs
    page.wait_for_timeout(450)
    with page.expect_navigation():
        page.click("button[name=review]")  # a third (the field's change), and the submit
    assert "Not valid yet" in page.locator("#validation").inner_text()
    assert "integer" in page.locator(".rows-requirements").inner_text()
    page.wait_for_timeout(1500)  # whatever was still in flight has ended by now
    shot(page, "policy-edit-submitted-invalid")
    assert NodePool.objects.get(name="general").weight != 43


def test_a_user_without_a_role_is_told_who_grants_one(page):
    User.objects.create_superuser("root", password="a-long-test-password")
    User.objects.create_user("newcomer", password="a-long-test-password")
    page.goto(page.base + "/accounts/login/")
    page.fill("#id_username", "newcomer")
    page.fill("#id_password", "a-long-test-password")
    page.click("button[type=submit]")
    page.wait_for_url(page.base + "/accounts/no-role/?next=/")
    text = page.locator("main").inner_text()
    assert "you have no role in karpweb yet" in text and "root" in text
    assert page.locator("nav").count() == 0
    shot(page, "no-role")


def test_plan_a_what_if(page, seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(nodepool(requirement("karpenter.k8s.aws/instance-category", "c", "m")), source="cli")
    log_in(page, "wanda", "viewer")
    page.click("nav >> text=What-if")
    page.fill("#whatif-manifests", yaml.safe_dump(deployment("api", 5, cpu="2", memory="4Gi")))
    page.click("button:has-text('Plan')")
    result = page.locator("#whatif-result")
    result.locator("table").first.wait_for()
    assert "general" in result.inner_text() and "$" in result.inner_text()
    shot(page, "whatif")
    assert not NodeClaim.objects.exists()  # a what-if writes nothing


def test_scale_a_static_nodepool_from_its_page(page, seed_ec2nodeclass):
    """The Replicas control of a static NodePool: an editor types a number, Scale swaps the card
    in place (htmx), the NodePool has the new replicas and the audit trail says who."""
    apply_manifest(seed_ec2nodeclass, source="cli")
    system = nodepool(requirement("karpenter.sh/capacity-type", "on-demand"), name="system")
    system["spec"]["replicas"] = 2
    apply_manifest(system, source="cli")
    log_in(page, "sally", "editor")
    page.goto(page.base + "/policies/NodePool/system/")
    assert "2 wanted" in page.locator("#replicas").inner_text()
    page.fill("#replicas input[name=replicas]", "3")
    page.click("#replicas button:has-text('Scale')")
    page.locator("#replicas [role=status]").wait_for()
    assert "scaled to 3 replicas" in page.locator("#replicas").inner_text()
    assert page.url == page.base + "/policies/NodePool/system/"  # swapped in place, no navigation
    assert NodePool.objects.get(name="system").spec["replicas"] == 3
    assert AuditEntry.objects.filter(name="system", actor="sally", source="ui").exists()
    shot(page, "policy-replicas")
