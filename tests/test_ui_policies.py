"""The Policies pages: list, edit with the form or YAML (validated live by THE validator,
errors at their fields), review as a diff, apply with optimistic concurrency, history with
revert, create from starters, delete; and who may do what."""

from __future__ import annotations

import copy
import html as html_lib
import re

import pytest
import yaml
from builders import nodepool, requirement
from django.contrib.auth.models import Group, User

from provisioning.crd.manifest import dump_yaml
from provisioning.models import AuditEntry, ClusterNode, EC2NodeClass, NodeOverlay, NodePool
from provisioning.services.policy import apply_manifest, delete_resource
from provisioning.ui import starters

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def signed_in(client, role: str):
    user = User.objects.create(username=f"{role}-user")  # force_login needs no password
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    return client


@pytest.fixture
def viewer(client):
    return signed_in(client, "viewer")


@pytest.fixture
def editor(client):
    return signed_in(client, "editor")


@pytest.fixture
def seeded(seed_nodepool, seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="cli", actor="seed")
    return apply_manifest(seed_nodepool, source="cli", actor="seed").obj


def text(response) -> str:
    return response.content.decode()


def form_data(client, url: str, **changes) -> dict:
    """What the browser would post from the edit form at ``url``: every input with its
    current value, then ``changes`` (input name -> value) on top."""
    page = client.get(url)
    assert page.status_code == 200
    data: dict = {}
    for bound in _bound_fields(page.context):
        value = bound.value()
        if value is None or value is False:
            continue
        data[bound.html_name] = [str(v) for v in value] if isinstance(value, list) else str(value)
    data.update(changes)
    return data


def _bound_fields(context):
    editor = context["editor"]
    state = context["state"]
    yield from state
    if editor.name == "form":
        yield from editor.form
        for formset in editor.formsets.values():
            yield from formset.management_form
            for row in formset.forms:
                yield from row
    else:
        yield from editor.form


def changed_lines(diff: str) -> list[str]:
    """The added and removed lines of a unified diff, without its two file headers."""
    return [line for line in diff.splitlines()[2:] if line[:1] in ("+", "-")]


def error_slot(html: str, slot_id: str) -> str:
    """The text of the error slot ``slot_id`` (errors next to one input, row or list)."""
    match = re.search(rf'<div id="{re.escape(slot_id)}"[^>]*>(.*?)</div>', html, re.S)
    assert match, f"no error slot {slot_id}"
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", match.group(1))).strip()


# ---------------------------------------------------------------- access


def test_anonymous_visitors_are_sent_to_the_login(client, seeded):
    for url in ("/policies/", "/policies/NodePool/general/", "/policies/NodePool/general/edit/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url


def test_a_viewer_reads_but_every_write_is_forbidden(viewer, seeded):
    listing = viewer.get("/policies/")
    assert listing.status_code == 200 and "general" in text(listing)
    assert "New NodePool" not in text(listing)
    detail = viewer.get("/policies/NodePool/general/")
    assert detail.status_code == 200 and "Edit</a>" not in text(detail)
    entry = AuditEntry.objects.get(name="general")
    manifest = dump_yaml([seeded.to_manifest(server_fields=False)])
    writes = [
        ("get", "/policies/NodePool/general/edit/", {}),
        ("post", "/policies/NodePool/general/edit/", {"editor": "yaml", "expected_version": "1", "review": "1"}),
        ("post", "/policies/NodePool/general/validate/", {"editor": "yaml", "manifest": manifest}),
        ("get", "/policies/new/NodePool/?starter=nodepool-gpu", {}),
        ("post", "/policies/new/NodePool/", {"editor": "yaml", "manifest": manifest, "review": "1"}),
        ("post", "/policies/apply/", {"manifest": manifest, "expected_version": "1"}),
        ("get", f"/policies/NodePool/general/history/{entry.pk}/revert/", {}),
        ("get", "/policies/NodePool/general/delete/", {}),
        ("post", "/policies/NodePool/general/delete/", {"expected_version": "1"}),
    ]
    for method, url, data in writes:
        assert getattr(viewer, method)(url, data).status_code == 403, (method, url)
    assert NodePool.objects.get().resource_version == 1
    assert AuditEntry.objects.count() == 2


def test_forms_need_the_csrf_token(seeded):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    signed_in(client, "editor")
    response = client.post("/policies/NodePool/general/delete/", {"expected_version": "1"})
    assert response.status_code == 403
    assert NodePool.objects.exists()


# ---------------------------------------------------------------- the list


def test_the_list_shows_policies_with_their_status(viewer, seeded):
    apply_manifest(nodepool(requirement("kubernetes.io/arch", "arm64"), name="orphan", nodeclass="gone"), source="cli")
    EC2NodeClass.objects.filter(name="default").update(
        status={"conditions": [{"type": "Ready", "status": "False", "message": "no subnet matches"}]}
    )
    ClusterNode.objects.create(name="n1", nodepool="general")
    ClusterNode.objects.create(name="n2", nodepool="general")
    html = text(viewer.get("/policies/"))
    general = re.search(r"<tr>\s*<td><a href=\"/policies/NodePool/general/\">.*?</tr>", html, re.S).group(0)
    assert "WhenEmptyOrUnderutilized" in general
    assert "cpu 1000, memory 1000Gi" in general
    assert "<td>2</td>" in general
    assert "Not ready" in general and "no subnet matches" in general
    orphan = re.search(r"<tr>\s*<td><a href=\"/policies/NodePool/orphan/\">.*?</tr>", html, re.S).group(0)
    assert "missing" in orphan and "<td>0</td>" in orphan
    assert "EC2NodeClass &#x27;gone&#x27; not found" in orphan


def test_the_list_explains_empty_states_and_offers_starters_to_editors(editor):
    html = text(editor.get("/policies/"))
    assert "No NodePools yet" in html and "No EC2NodeClasses yet" in html
    for starter in starters.STARTERS:
        assert f"?starter={starter.slug}" in html


def test_the_list_costs_the_same_number_of_queries_for_many_nodepools(viewer, seeded, django_assert_max_num_queries):
    def add_pools(first: int, count: int) -> None:
        for i in range(first, first + count):
            apply_manifest(nodepool(requirement("kubernetes.io/arch", "amd64"), name=f"pool-{i}"), source="cli")
            ClusterNode.objects.create(name=f"node-{i}", nodepool=f"pool-{i}")

    add_pools(0, 2)
    viewer.get("/policies/")  # the session and the role, once
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        viewer.get("/policies/")
    add_pools(2, 20)
    with django_assert_max_num_queries(len(few)):
        response = viewer.get("/policies/")
    assert text(response).count('href="/policies/NodePool/pool-') == 22


# ---------------------------------------------------------------- editing with the form


def test_the_form_shows_the_current_values(editor, seeded):
    page = editor.get("/policies/NodePool/general/edit/")
    assert page.status_code == 200
    form = page.context["editor"]
    assert form.form["node_class"].value() == "default"
    assert form.form["limit_cpu"].value() == "1000"
    assert form.form["consolidation_policy"].value() == "WhenUnderutilized"
    rows = form.formsets["requirements"].forms
    assert rows[0]["key"].value() == "karpenter.sh/capacity-type"
    assert rows[0]["values"].value() == "spot, on-demand"
    assert rows[3]["operator"].value() == "NotIn"
    assert len(rows) == 4 + 2  # and two blank rows to fill without JavaScript


def test_an_editor_changes_a_nodepool_with_the_form_review_then_confirm(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    data = form_data(
        editor,
        url,
        **{
            "weight": "20",
            "limit_cpu": "500",
            "consolidate_after": "5m",
            "requirements-4-key": "karpenter.k8s.aws/instance-generation",
            "requirements-4-operator": "Gt",
            "requirements-4-values": "5",
            "requirements-3-DELETE": "on",
            "taints-0-key": "dedicated",
            "taints-0-value": "batch",
            "taints-0-effect": "NoSchedule",
            "budgets-0-nodes": "20%",
            "review": "1",
        },
    )
    review = editor.post(url, data)
    assert review.status_code == 200, text(review)
    diff = review.context["diff"]
    assert "+  weight: 20" in diff
    assert "-    cpu: 1000\n+    cpu: 500" in diff
    assert "+        - key: karpenter.k8s.aws/instance-generation\n+          operator: Gt" in diff
    assert "+            - '5'" in diff
    assert "-        - key: karpenter.k8s.aws/instance-size" in diff
    assert "+      taints:\n+        - effect: NoSchedule\n+          key: dedicated\n+          value: batch" in diff
    assert "-      - nodes: 10%\n-    consolidateAfter: 30s\n+      - nodes: 20%\n+    consolidateAfter: 5m" in diff
    assert "Review: change NodePool" in text(review) and 'class="add"' in text(review)
    assert NodePool.objects.get().resource_version == 1  # nothing saved before the confirmation

    # "Change it in the YAML editor" carries the reviewed manifest there.
    change = review.context["change"]
    in_yaml = editor.post(
        change["url"],
        {**{f.html_name: f.value() for f in change["state"]}, "manifest": change["manifest"]["manifest"].value()},
    )
    assert in_yaml.context["editor"].name == "yaml" and "weight: 20" in text(in_yaml)

    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    saved = editor.post("/policies/apply/", confirm)
    assert saved.status_code == 302 and saved["Location"] == "/policies/NodePool/general/"
    pool = NodePool.objects.get()
    assert pool.resource_version == 2 and pool.weight == 20
    spec = pool.spec
    assert spec["limits"] == {"cpu": 500, "memory": "1000Gi"}
    assert spec["disruption"]["consolidateAfter"] == "5m"
    assert spec["disruption"]["consolidationPolicy"] == "WhenUnderutilized"  # untouched, kept as written
    assert [r["key"] for r in spec["template"]["spec"]["requirements"]] == [
        "karpenter.sh/capacity-type",
        "kubernetes.io/arch",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/instance-generation",
    ]
    entry = AuditEntry.objects.filter(name="general").first()
    assert (entry.action, entry.source, entry.actor) == ("updated", "ui", "editor-user")
    assert "+  weight: 20" in entry.diff
    assert "NodePool general updated." in text(editor.get(saved["Location"]))


def test_fields_the_form_does_not_show_are_kept(editor, seeded):
    manifest = seeded.to_manifest(server_fields=False)
    manifest["metadata"]["labels"] = {"team": "platform"}
    manifest["spec"]["template"]["metadata"] = {"labels": {"tier": "web"}}
    manifest["spec"]["template"]["spec"]["startupTaints"] = [{"key": "init", "effect": "NoSchedule"}]
    manifest["spec"]["limits"]["nvidia.com/gpu"] = 4
    apply_manifest(manifest, source="cli")
    url = "/policies/NodePool/general/edit/"
    review = editor.post(url, form_data(editor, url, weight="7", review="1"))
    assert review.status_code == 200
    assert changed_lines(review.context["diff"]) == ["+  weight: 7"]


def test_an_unchanged_form_is_no_change(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    review = editor.post(url, form_data(editor, url, review="1"))
    assert review.status_code == 200
    assert review.context["diff"] == ""
    assert "No changes" in text(review) and "/policies/apply/" not in text(review)


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": "2, 4"},
            "must have a single positive integer value",
        ),
        ({"key": "karpenter.sh/foo", "operator": "In", "values": "x"}, 'label domain "karpenter.sh" is restricted'),
        ({"key": "kubernetes.io/arch", "operator": "In", "values": "amd64", "min_values": "2"}, "minValues"),
    ],
    ids=["gt-with-two-values", "restricted-key", "min-values"],
)
def test_an_invalid_requirement_shows_the_validators_message_at_its_row(editor, seeded, row, expected):
    url = "/policies/NodePool/general/edit/"
    data = form_data(editor, url, review="1", **{f"requirements-4-{k}": v for k, v in row.items()})
    response = editor.post(url, data)
    assert response.status_code == 200  # the form again, with its errors
    html = text(response)
    at_row = error_slot(html, "errors-requirements-4") + error_slot(html, "errors-id_requirements-4-key")
    assert expected in at_row
    for other in range(4):  # the valid rows stay clean
        assert error_slot(html, f"errors-requirements-{other}") == ""
    assert "Not valid yet: each problem is shown at its field" in html
    assert NodePool.objects.get().resource_version == 1


def test_errors_land_at_their_fields(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    data = form_data(
        editor,
        url,
        review="1",
        weight="0",
        limit_memory="lots",
        expire_after="3 days",
        node_class="",
        **{"taints-0-key": "bad key", "budgets-0-nodes": "x", "budgets-0-schedule": "@daily"},
    )
    html = text(editor.post(url, data))
    assert "should be greater than or equal to 1" in error_slot(html, "errors-id_weight")
    assert "must be a quantity" in error_slot(html, "errors-id_limit_memory")
    assert "should match" in error_slot(html, "errors-id_expire_after")
    assert "name may not be empty" in error_slot(html, "errors-id_node_class")
    assert "bad key" in error_slot(html, "errors-id_taints-0-key")
    assert "should match" in error_slot(html, "errors-id_budgets-0-nodes")
    assert "'schedule' must be set with 'duration'" in error_slot(html, "errors-budgets-0")


def test_input_that_is_not_a_number_is_named_at_its_field_and_never_a_500(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    response = editor.post(
        url, form_data(editor, url, review="1", weight="heavy", **{"requirements-0-operator": "Nope"})
    )
    assert response.status_code == 200  # the form again, with its errors
    html = text(response)
    assert "Enter a whole number." in error_slot(html, "errors-id_weight")
    assert "Select a valid choice" in error_slot(html, "errors-id_requirements-0-operator")


@pytest.mark.parametrize(
    "method, url, data",
    [
        ("post", "/policies/NodePool/general/edit/", {"review": "1"}),
        ("post", "/policies/NodePool/general/edit/", {"editor": "form", "expected_version": "1", "review": "1"}),
        (
            "post",
            "/policies/NodePool/general/edit/",
            {"editor": "form", "expected_version": "1", "requirements-TOTAL_FORMS": "x", "add_row": "requirements"},
        ),
        ("post", "/policies/NodePool/general/validate/", {"editor": "nope", "requirements-TOTAL_FORMS": "99999"}),
        ("post", "/policies/NodePool/general/edit/", {"editor": "yaml", "expected_version": "1", "manifest": "- a"}),
        ("post", "/policies/new/NodePool/", {"editor": "yaml", "manifest": '{"kind": "NodePool"', "review": "1"}),
        ("post", "/policies/apply/", {"manifest": "kind: [", "expected_version": "1"}),
        ("post", "/policies/apply/", {"manifest": "kind: Pod"}),
        ("post", "/policies/apply/", {"manifest": "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: [1]"}),
        ("post", "/policies/apply/", {"manifest": "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {}"}),
        ("get", "/policies/Pod/x/edit/", {}),
        ("get", "/policies/NodePool/nope/edit/", {}),
        ("get", "/policies/new/NodePool/?starter=nope", {}),
        ("get", "/policies/NodePool/general/history/999999/revert/", {}),
        ("post", "/policies/NodePool/general/delete/", {}),
    ],
)
def test_bad_input_is_answered_never_a_500(editor, seeded, method, url, data):
    response = getattr(editor, method)(url, data)
    assert response.status_code in (200, 400, 404, 409, 422), text(response)[:500]
    assert NodePool.objects.get().resource_version == 1


def test_add_a_row_without_javascript_and_with_htmx(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    data = form_data(editor, url, add_row="taints")
    page = editor.post(url, data)
    assert page.status_code == 200 and "<html" in text(page)
    assert len(page.context["editor"].formsets["taints"].forms) == 3
    partial = editor.post(url, data, **HTMX)
    assert "<html" not in text(partial)
    assert 'id="nodepool-form"' in text(partial) and 'name="taints-2-key"' in text(partial)


# ---------------------------------------------------------------- live validation


def test_live_validation_returns_the_errors_at_their_fields_as_a_partial(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    data = form_data(editor, url, **{"requirements-1-operator": "Gt"})
    response = editor.post("/policies/NodePool/general/validate/", data, **HTMX)
    assert response.status_code == 200
    html = text(response)
    assert "<html" not in html and "<form" not in html
    assert html.lstrip().startswith('<div id="validation"')
    assert "Not valid yet" in html
    slot = re.search(r'<div id="errors-requirements-1"[^>]*hx-swap-oob="true"[^>]*>(.*?)</div>', html, re.S)
    assert slot and "single positive integer value" in slot.group(1)
    # every other slot is sent too, emptied, so a fixed error disappears
    assert re.search(r'<div id="errors-id_weight"[^>]*hx-swap-oob="true"[^>]*></div>', html)

    fixed = editor.post("/policies/NodePool/general/validate/", form_data(editor, url), **HTMX)
    assert "Valid. Review the changes" in text(fixed)
    assert 'id="errors-requirements-1" class="field-errors" hx-swap-oob="true"></div>' in text(fixed)


def test_live_validation_without_htmx_is_the_whole_page(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    response = editor.post("/policies/NodePool/general/validate/", form_data(editor, url, weight="0"))
    assert response.status_code == 200 and "<html" in text(response)
    assert "hx-swap-oob" not in text(response)
    assert "greater than or equal to 1" in error_slot(text(response), "errors-id_weight")


def test_the_editor_page_wires_live_validation_and_csrf(editor, seeded):
    html = text(editor.get("/policies/NodePool/general/edit/"))
    assert 'hx-post="/policies/NodePool/general/validate/"' in html
    assert 'hx-trigger="input changed delay:400ms, change"' in html
    assert "csrfmiddlewaretoken" in html and "X-CSRFToken" in html


# ---------------------------------------------------------------- editing YAML


def yaml_of(obj) -> str:
    return dump_yaml([obj.to_manifest(server_fields=False)])


def test_an_editor_changes_a_nodepool_with_yaml(editor, seeded):
    manifest = yaml_of(seeded).replace("consolidateAfter: 30s", "consolidateAfter: 10m")
    data = {"editor": "yaml", "expected_version": "1", "manifest": manifest}
    live = editor.post("/policies/NodePool/general/validate/", data, **HTMX)
    assert "Valid. Review the changes" in text(live)
    review = editor.post("/policies/NodePool/general/edit/", {**data, "review": "1"})
    assert "-    consolidateAfter: 30s\n+    consolidateAfter: 10m" in review.context["diff"]
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    assert editor.post("/policies/apply/", confirm).status_code == 302
    assert NodePool.objects.get().spec["disruption"]["consolidateAfter"] == "10m"


def test_yaml_errors_name_the_path_and_syntax_errors_the_line(editor, seeded):
    bad = yaml_of(seeded).replace("operator: NotIn", "operator: Maybe")
    data = {"editor": "yaml", "expected_version": "1", "manifest": bad}
    html = text(editor.post("/policies/NodePool/general/validate/", data, **HTMX))
    slot = error_slot(html, "errors-id_manifest")
    line = next(n for n, text in enumerate(bad.splitlines(), start=1) if "operator: Maybe" in text)
    assert f'line {line}: spec.template.spec.requirements[3].operator: Unsupported value: "Maybe"' in slot

    broken = {**data, "manifest": "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: [oops\n"}
    response = editor.post("/policies/NodePool/general/edit/", {**broken, "review": "1"})
    assert response.status_code == 200  # the form again, with its errors
    assert re.search(r"not valid YAML: .* at line \d+ column \d+", error_slot(text(response), "errors-id_manifest"))


def test_yaml_cannot_rename_or_change_kind(editor, seeded):
    renamed = yaml_of(seeded).replace("name: general", "name: other")
    response = editor.post(
        "/policies/NodePool/general/edit/",
        {"editor": "yaml", "expected_version": "1", "manifest": renamed, "review": "1"},
    )
    assert response.status_code == 200  # the form again, with its errors
    assert "metadata.name: the name cannot change here" in text(response)
    assert not NodePool.objects.filter(name="other").exists()


def test_an_ec2nodeclass_is_edited_with_yaml(editor, seeded):
    nodeclass = EC2NodeClass.objects.get()
    page = editor.get("/policies/EC2NodeClass/default/edit/")
    assert page.context["editor"].name == "yaml" and "role: KarpenterNodeRole-my-cluster" in text(page)
    manifest = yaml_of(nodeclass).replace("KarpenterNodeRole-my-cluster", "NodeRole-2")
    review = editor.post(
        "/policies/EC2NodeClass/default/edit/",
        {"editor": "yaml", "expected_version": str(nodeclass.resource_version), "manifest": manifest, "review": "1"},
    )
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    assert editor.post("/policies/apply/", confirm).status_code == 302
    assert EC2NodeClass.objects.get().spec["role"] == "NodeRole-2"


# ---------------------------------------------------------------- concurrency


def test_a_stale_version_shows_a_conflict_and_overwrites_nothing(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    data = form_data(editor, url, weight="30", review="1")
    review = editor.post(url, data)
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    # Meanwhile someone else changes it.
    theirs = seeded.to_manifest(server_fields=False)
    theirs["spec"]["limits"]["cpu"] = 2000
    apply_manifest(theirs, source="rest", actor="bob")

    response = editor.post("/policies/apply/", confirm)
    assert response.status_code == 200  # the conflict page
    html = text(response)
    assert "has been modified" in html and "resourceVersion 2" in html
    assert "cpu: 2000" in html  # the current version
    assert "+  weight: 30" in response.context["diff"]  # the change, against the current version
    pool = NodePool.objects.get()
    assert pool.spec["limits"]["cpu"] == 2000 and pool.weight == 0
    assert not AuditEntry.objects.filter(actor="editor-user").exists()

    # Saved as it is, the change would undo bob's: the diff says so. Merged by hand in the
    # YAML editor and reviewed against the current version, both changes are kept.
    assert "-    cpu: 2000\n+    cpu: 1000" in response.context["diff"]
    change = response.context["change"]
    mine = change["manifest"]["manifest"].value()
    again = {
        **{f.html_name: f.value() for f in change["state"]},
        "manifest": mine.replace("cpu: 1000", "cpu: 2000"),
        "review": "1",
    }
    review = editor.post(change["url"], again)
    assert review.status_code == 200
    assert changed_lines(review.context["diff"]) == ["+  weight: 30"]
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    assert editor.post("/policies/apply/", confirm).status_code == 302
    pool = NodePool.objects.get()
    assert (pool.weight, pool.spec["limits"]["cpu"]) == (30, 2000)


def test_a_form_opened_before_a_change_elsewhere_is_a_conflict_at_review(editor, seeded):
    url = "/policies/NodePool/general/edit/"
    data = form_data(editor, url, weight="30", review="1")
    apply_manifest(
        {**seeded.to_manifest(server_fields=False), "metadata": {"name": "general", "labels": {"x": "y"}}},
        source="rest",
    )
    response = editor.post(url, data)
    assert response.status_code == 200  # the conflict page
    assert "changed since you opened it" in text(response)


# ---------------------------------------------------------------- history and revert


def test_revert_goes_through_review_and_is_audited(editor, seeded):
    first = AuditEntry.objects.get(name="general")
    changed = seeded.to_manifest(server_fields=False)
    changed["spec"]["weight"] = 99
    apply_manifest(changed, source="rest", actor="bob")

    detail = text(editor.get("/policies/NodePool/general/"))
    assert f"/policies/NodePool/general/history/{first.pk}/revert/" in detail
    review = editor.get(f"/policies/NodePool/general/history/{first.pk}/revert/")
    assert review.status_code == 200
    assert "-  weight: 99" in review.context["diff"]
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    assert confirm["expected_version"] == "2"
    assert editor.post("/policies/apply/", confirm).status_code == 302
    assert NodePool.objects.get().weight == 0
    latest = AuditEntry.objects.filter(name="general").first()
    assert (latest.action, latest.actor) == ("updated", "editor-user")


def test_a_deleted_policy_keeps_its_history_and_can_be_restored(editor, seeded):
    delete_resource("NodePool", "general", source="rest", actor="bob")
    detail = editor.get("/policies/NodePool/general/")
    assert detail.status_code == 200 and "no longer exists" in text(detail)
    deletion = AuditEntry.objects.filter(name="general", action="deleted").get()
    review = editor.get(f"/policies/NodePool/general/history/{deletion.pk}/revert/")
    assert review.context["creating"] is True
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    assert editor.post("/policies/apply/", confirm).status_code == 302
    assert NodePool.objects.get().spec == seeded.spec


# ---------------------------------------------------------------- create and delete


@pytest.mark.parametrize("starter", starters.STARTERS, ids=lambda s: s.slug)
def test_create_from_each_starter(editor, seed_ec2nodeclass, starter):
    if starter.kind == "NodePool":
        apply_manifest(seed_ec2nodeclass, source="cli")
    page = editor.get(f"/policies/new/{starter.kind}/?starter={starter.slug}")
    assert page.status_code == 200
    manifest = page.context["editor"].form["manifest"].value()
    name = yaml.safe_load(manifest)["metadata"]["name"]
    if starter.kind == "EC2NodeClass":
        manifest = manifest.replace("name: default", "name: al2023")
        name = "al2023"
    data = {"editor": "yaml", "expected_version": "", "manifest": manifest}
    live = editor.post(f"/policies/new/{starter.kind}/validate/", data, **HTMX)
    assert "Valid. Review the changes" in text(live), text(live)
    review = editor.post(f"/policies/new/{starter.kind}/", {**data, "review": "1"})
    assert review.status_code == 200 and review.context["creating"]
    assert review.context["warnings"] == []
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    assert editor.post("/policies/apply/", confirm).status_code == 302
    entry = AuditEntry.objects.get(name=name, kind=starter.kind)
    assert (entry.action, entry.actor, entry.source) == ("created", "editor-user", "ui")


def test_create_never_replaces_an_existing_policy(editor, seeded):
    manifest = starters.find("NodePool", "nodepool-general").text
    data = {"editor": "yaml", "expected_version": "", "manifest": manifest, "review": "1"}
    response = editor.post("/policies/new/NodePool/", data)
    assert response.status_code == 200  # the form again, with its errors
    assert "NodePool &#x27;general&#x27; already exists" in text(response)
    # Even a confirmation crafted by hand is refused.
    forged = editor.post("/policies/apply/", {"manifest": manifest, "expected_version": "", "creating": "True"})
    assert forged.status_code == 200 and "already exists" in text(forged)
    assert NodePool.objects.get().resource_version == 1


def test_a_blank_starter_opens_and_explains_what_is_missing(editor):
    page = editor.get("/policies/new/NodePool/?starter=blank")
    manifest = page.context["editor"].form["manifest"].value()
    data = {"editor": "yaml", "expected_version": "", "manifest": manifest}
    html = text(editor.post("/policies/new/NodePool/validate/", data, **HTMX))
    assert "spec.template: Required value" in html


def test_delete_shows_warnings_and_needs_confirmation(editor, seeded):
    page = editor.get("/policies/EC2NodeClass/default/delete/")
    assert "still used by NodePool general" in text(page)
    assert EC2NodeClass.objects.exists()
    response = editor.post("/policies/EC2NodeClass/default/delete/", {"expected_version": "1"})
    assert response.status_code == 302 and response["Location"] == "/policies/"
    assert not EC2NodeClass.objects.exists()
    entry = AuditEntry.objects.filter(kind="EC2NodeClass").first()
    assert (entry.action, entry.actor, entry.source) == ("deleted", "editor-user", "ui")


def test_delete_of_a_changed_policy_is_a_conflict(editor, seeded):
    page = editor.get("/policies/NodePool/general/delete/")
    expected = page.context["form"]["expected_version"].value()
    changed = copy.deepcopy(seeded.to_manifest(server_fields=False))
    changed["spec"]["weight"] = 5
    apply_manifest(changed, source="rest")
    response = editor.post("/policies/NodePool/general/delete/", {"expected_version": expected})
    assert response.status_code == 200 and "has been modified" in text(response)
    assert NodePool.objects.exists()


# ---------------------------------------------------------------- NodeOverlays

SAVINGS_PLAN = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "savings-plan"},
    "spec": {
        "weight": 10,
        "requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i", "c7i"]},
        ],
        "priceAdjustment": "-27%",
    },
}
OVERLAY_URL = "/policies/NodeOverlay/savings-plan/edit/"


@pytest.fixture
def overlay(seeded):
    return apply_manifest(SAVINGS_PLAN, source="cli", actor="seed").obj


def test_the_list_shows_nodeoverlays_with_what_they_do_and_whether_they_apply(viewer, overlay):
    rival = {**SAVINGS_PLAN, "metadata": {"name": "edp"}, "spec": {**SAVINGS_PLAN["spec"], "priceAdjustment": "-5%"}}
    apply_manifest(rival, source="cli")
    html = text(viewer.get("/policies/"))
    row = re.search(r"<tr>\s*<td><a href=\"/policies/NodeOverlay/savings-plan/\">.*?</tr>", html, re.S).group(0)
    assert "<td>10</td>" in row and "price -27%" in row
    assert "capacity-type In on-demand; instance-family In m7i, c7i" in row
    assert "Applied" in row
    edp = re.search(r"<tr>\s*<td><a href=\"/policies/NodeOverlay/edp/\">.*?</tr>", html, re.S).group(0)
    assert "Conflict" in edp and "conflicts with NodeOverlay savings-plan of the same weight (10)" in edp


def test_the_nodeoverlay_page_says_what_it_changes_now(viewer, overlay):
    html = html_lib.unescape(text(viewer.get("/policies/NodeOverlay/savings-plan/")))
    # The seed's NodePool names families that do not exist (m, c, r): it allows no type.
    assert "Price -27%.</strong> It changes no instance type a NodePool allows." in html
    apply_manifest(nodepool(requirement("karpenter.k8s.aws/instance-category", "c", "m")), source="cli")
    html = html_lib.unescape(text(viewer.get("/policies/NodeOverlay/savings-plan/")))
    match = re.search(r"Price -27%\.</strong> It changes (\d+) instance types NodePool general allows\.", html)
    # m7i and c7i on demand: two families of a dozen sizes or so each.
    assert match and 20 <= int(match.group(1)) <= 40, html
    assert "priceAdjustment: -27%" in html  # the manifest, as YAML
    assert "created by seed" in html


def test_the_nodeoverlay_form_shows_the_current_values(editor, overlay):
    page = editor.get(OVERLAY_URL)
    assert page.status_code == 200
    form = page.context["editor"]
    assert form.name == "form" and form.form["weight"].value() == 10
    assert (form.form["price_kind"].value(), form.form["price_value"].value()) == ("priceAdjustment", "-27%")
    rows = form.formsets["requirements"].forms
    assert rows[1]["key"].value() == "karpenter.k8s.aws/instance-family" and rows[1]["values"].value() == "m7i, c7i"
    assert "min_values" not in rows[0].fields
    assert 'id="nodeoverlay-form"' in text(page) and "Add a row" in text(page)


def test_an_editor_changes_a_nodeoverlay_with_the_form_review_then_confirm(editor, overlay):
    data = form_data(
        editor,
        OVERLAY_URL,
        **{
            "weight": "50",
            "price_kind": "price",
            "price_value": "0.05",
            "requirements-2-key": "karpenter.sh/nodepool",
            "requirements-2-operator": "In",
            "requirements-2-values": "general",
            "capacity-0-resource": "smarter-devices/fuse",
            "capacity-0-quantity": "2",
            "review": "1",
        },
    )
    review = editor.post(OVERLAY_URL, data)
    assert review.status_code == 200, text(review)
    diff = review.context["diff"]
    assert "-  priceAdjustment: -27%" in diff and "+  price: '0.05'" in diff
    assert "+  capacity:\n+    smarter-devices/fuse: 2" in diff
    assert "+    - key: karpenter.sh/nodepool" in diff
    assert "-  weight: 10" in diff and "+  weight: 50" in diff
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    saved = editor.post("/policies/apply/", confirm)
    assert saved.status_code == 302 and saved["Location"] == "/policies/NodeOverlay/savings-plan/"
    stored = NodeOverlay.objects.get()
    assert (stored.weight, stored.spec["price"], stored.spec["capacity"]) == (50, "0.05", {"smarter-devices/fuse": 2})
    assert "priceAdjustment" not in stored.spec and stored.resource_version == 2
    entry = AuditEntry.objects.filter(kind="NodeOverlay").first()
    assert (entry.action, entry.source, entry.actor) == ("updated", "ui", "editor-user")
    assert stored.ready["status"] == "True"


@pytest.mark.parametrize(
    ("changes", "slot", "expected"),
    [
        ({"price_value": "27%"}, "errors-id_price_value", "a signed change: +0.05 or -0.5"),
        ({"weight": "0"}, "errors-id_weight", "greater than or equal to 1"),
        (
            {"capacity-0-resource": "cpu", "capacity-0-quantity": "2"},
            "errors-id_capacity-0-resource",
            "invalid resource restricted",
        ),
        (
            {"capacity-0-resource": "example.com/x", "capacity-0-quantity": "lots"},
            "errors-id_capacity-0-quantity",
            "must be a quantity",
        ),
        (
            {"requirements-2-key": "kubernetes.io/hostname", "requirements-2-values": "ip-1"},
            "errors-id_requirements-2-key",
            'label "kubernetes.io/hostname" is restricted',
        ),
    ],
    ids=["price", "weight", "restricted-resource", "quantity", "hostname"],
)
def test_live_validation_of_a_nodeoverlay_puts_each_error_at_its_field(editor, overlay, changes, slot, expected):
    data = form_data(editor, OVERLAY_URL, **changes)
    response = editor.post("/policies/NodeOverlay/savings-plan/validate/", data, **HTMX)
    assert response.status_code == 200
    html = text(response)
    assert "Not valid yet" in html
    found = re.search(rf'<div id="{re.escape(slot)}"[^>]*hx-swap-oob="true"[^>]*>(.*?)</div>', html, re.S)
    assert found and expected in html_lib.unescape(found.group(1)), html


def test_a_nodeoverlay_gets_a_capacity_row_with_htmx(editor, overlay):
    data = form_data(editor, OVERLAY_URL, add_row="capacity")
    partial = editor.post(OVERLAY_URL, data, **HTMX)
    assert partial.status_code == 200 and "<html" not in text(partial)
    assert 'id="nodeoverlay-form"' in text(partial) and 'name="capacity-1-resource"' in text(partial)


def test_a_nodeoverlay_is_edited_with_yaml_and_reverted_from_history(editor, overlay):
    manifest = yaml_of(overlay).replace("-27%", "-30%")
    data = {"editor": "yaml", "expected_version": "1", "manifest": manifest, "review": "1"}
    review = editor.post(OVERLAY_URL, data)
    assert review.status_code == 200 and "+  priceAdjustment: -30%" in review.context["diff"]
    confirm = {f.html_name: f.value() for f in review.context["confirm"]}
    assert editor.post("/policies/apply/", confirm).status_code == 302
    first = AuditEntry.objects.filter(kind="NodeOverlay", action="created").get()
    back = editor.get(f"/policies/NodeOverlay/savings-plan/history/{first.pk}/revert/")
    assert "+  priceAdjustment: -27%" in back.context["diff"]
    confirm = {f.html_name: f.value() for f in back.context["confirm"]}
    assert editor.post("/policies/apply/", confirm).status_code == 302
    assert NodeOverlay.objects.get().spec["priceAdjustment"] == "-27%"
