"""The what-if page: who may use it, pasted and uploaded manifests planned against the
policies in force (or the input's own edits of them), errors that name the document and
the field, htmx partial against full page, CSRF, and that nothing is written."""

from __future__ import annotations

import re

import pytest
import yaml
from builders import deployment, nodeclaim, nodepool, on_demand_general, requirement
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from provisioning.models import AuditEntry, ClusterPod, Decision, EC2NodeClass, NodeClaim, NodePool
from provisioning.services import whatif
from provisioning.services.policy import apply_manifest

pytestmark = pytest.mark.django_db

GENERAL = on_demand_general()
# Names no instance family (families are c5, m6i...): every type is forbidden.
NO_FAMILY = nodepool(requirement("karpenter.k8s.aws/instance-family", "m", "c", "r"))


@pytest.fixture
def policies(seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(GENERAL, source="cli")


@pytest.fixture
def viewer(client, django_user_model):
    """A signed-in viewer, the least role that may use the page."""
    user = django_user_model.objects.create_user("vera")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    return client


def paste(*documents: dict) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False)


def words(html: str) -> str:
    """The page with its whitespace collapsed, to look for phrases across line breaks."""
    return " ".join(html.split())


def plan(client: Client, text: str = "", htmx: bool = False, **extra):
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    response = client.post("/whatif/", {"manifests": text, **extra}, **headers)
    assert response.status_code == 200
    return response


def test_anonymous_users_are_sent_to_the_login_page(client):
    assert client.get("/whatif/")["Location"] == "/accounts/login/?next=/whatif/"
    response = client.post("/whatif/", {"manifests": paste(deployment("web", 2))})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_form_says_which_policies_it_plans_with(viewer, policies):
    html = viewer.get("/whatif/").content.decode()
    assert "planned with the policies in force (EC2NodeClass default, NodePool general)" in words(html)
    form = re.search(r"<form class=\"whatif\".*?</form>", html, re.S).group(0)
    assert 'method="post"' in form and 'enctype="multipart/form-data"' in form
    assert 'name="csrfmiddlewaretoken"' in form and 'name="manifests"' in form and 'type="file" name="file"' in form
    assert 'hx-post="/whatif/" hx-target="#whatif-result"' in form
    assert '<div id="whatif-result"' in html and "The input cannot be planned" not in html


def test_a_pasted_deployment_gets_nodeclaims_and_a_price(viewer, policies):
    response = plan(viewer, paste(deployment("web", 4)))
    result = response.context["result"]
    claims = result.plan["nodeClaims"]
    assert claims and all(claim["nodePool"] == "general" and claim["capacityType"] == "on-demand" for claim in claims)
    assert sorted(pod for claim in claims for pod in claim["pods"]) == [f"default/web-{i}" for i in range(4)]
    assert result.per_hour > 0 and result.per_hour == pytest.approx(sum(c["pricePerHour"] for c in claims), abs=1e-6)
    html = response.content.decode()
    assert f"<strong>${result.per_hour:.4f}</strong>/hour" in html
    assert f"${result.per_hour * 730:,.2f} a month" in html
    first = claims[0]
    assert f"<td>{first['instanceType']}</td>" in html.replace(
        f' title="options in price order: {", ".join(first["instanceTypeOptions"])}"', ""
    )
    assert "every pod has a place" in html and "Unschedulable pods" not in html


def test_without_javascript_the_whole_page_comes_back_with_the_text_kept(viewer, policies):
    text = paste(deployment("web", 2))
    html = plan(viewer, text).content.decode()
    assert "<html" in html and '<form class="whatif"' in html and "<h2>Plan</h2>" in html
    assert yaml.safe_load(re.search(r"<textarea[^>]*>(.*?)</textarea>", html, re.S).group(1)) == yaml.safe_load(text)


def test_htmx_gets_the_result_only(viewer, policies):
    body = plan(viewer, paste(deployment("web", 2)), htmx=True).content.decode()
    assert body.lstrip().startswith('<div id="whatif-result"') and "<h2>Plan</h2>" in body
    assert "<html" not in body and "<form" not in body


def test_an_edited_nodepool_in_the_paste_replaces_the_current_one(viewer, policies):
    in_force = NodePool.objects.get(name="general").spec
    response = plan(viewer, paste(deployment("web", 3), NO_FAMILY))
    result = response.context["result"]
    assert result.replaced == ["NodePool general"] and result.current == ["EC2NodeClass default"]
    assert result.plan["nodeClaims"] == [] and result.per_hour == 0
    reasons = {entry["pod"]: entry["reason"] for entry in result.plan["unschedulable"]}
    assert set(reasons) == {"default/web-0", "default/web-1", "default/web-2"}
    assert all("karpenter.k8s.aws/instance-family" in reason for reason in reasons.values())
    html = response.content.decode()
    assert (
        "3 unschedulable" in html
        and "Planned with EC2NodeClass default; your input replaced NodePool general." in words(html)
    )
    assert "<td>default/web-0</td><td>NodePool general: karpenter.k8s.aws/instance-family" in html
    assert NodePool.objects.get(name="general").spec == in_force  # untouched


def test_bad_yaml_is_shown_with_its_line(viewer, policies):
    body = plan(viewer, "kind: Deployment\nmetadata:\n  name: web\n  labels: [a\n", htmx=True).content.decode()
    assert "The input cannot be planned" in body
    error = re.search(r"<ul class=\"errors\"><li>(.*?)</li></ul>", body).group(1)
    assert error.startswith("pasted manifests: not valid YAML:") and "at line 5 column 1" in error


def test_an_invalid_nodepool_is_named_with_its_field_path(viewer, policies):
    bad = nodepool(requirement("karpenter.sh/capacity-type", "spot", operator="Sometimes"), name="edited")
    errors = plan(viewer, paste(deployment("web", 1), bad)).context["errors"]
    assert any(
        e.startswith("NodePool edited: spec.template.spec.requirements[0].operator:") and "Sometimes" in e
        for e in errors
    ), errors


def test_errors_count_documents_in_the_input_not_among_the_policies_in_force(viewer, policies):
    errors = plan(viewer, "kind: Deployment\nmetadata: [web]\n").context["errors"]
    assert errors == ["Deployment (document 1): metadata: must be an object (a mapping of fields), not a list"]


@pytest.mark.parametrize(
    "text",
    [
        "- just\n- a list\n",
        "42\n",
        "kind: Deployment\nmetadata: {name: web}\nspec: {replicas: lots, template: {}}\n",
        "kind: Deployment\nmetadata: [web]\n",
        "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: {requests: {cpu: much}}}]}\n",
        "kind: NodePool\nmetadata: {name: general}\nspec: {template: {spec: {requirements: 7}}}\n",
        "kind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: -3}}\n",
        '{"kind": "Deployment", "metadata": {"name": "web"}',
        "a: &a [*a]\n",
    ],
)
def test_malformed_input_is_an_error_for_people_never_a_crash(viewer, policies, text):
    response = plan(viewer, text)
    assert response.context["errors"] and response.context["result"] is None
    assert "The input cannot be planned" in response.content.decode()


def test_nothing_but_a_paste_or_a_file_is_asked_for(viewer, policies):
    assert plan(viewer, "  \n").context["errors"] == ["paste manifests or choose a file, then plan"]
    assert plan(viewer, "---\n---\n").context["errors"] == [
        "no document found: YAML documents separated by ---, or JSON"
    ]


def test_an_uploaded_file_is_planned_with_the_paste(viewer, policies):
    upload = SimpleUploadedFile("app.yaml", paste(deployment("api", 2)).encode(), content_type="application/yaml")
    result = plan(viewer, paste(deployment("web", 1)), file=upload).context["result"]
    pods = sorted(pod for claim in result.plan["nodeClaims"] for pod in claim["pods"])
    assert pods == ["default/api-0", "default/api-1", "default/web-0"]


def test_an_upload_past_the_manifest_limit_is_refused(viewer, policies, settings):
    settings.KARPWEB_MAX_MANIFEST_BYTES = 2048
    big = paste(*(deployment(f"web-{i}", 1) for i in range(20))).encode()
    assert len(big) > 2048
    errors = plan(viewer, file=SimpleUploadedFile("big.yaml", big)).context["errors"]
    assert len(errors) == 1 and errors[0].startswith("big.yaml:") and "limit for a manifest" in errors[0]
    errors = plan(viewer, big.decode()).context["errors"]
    assert errors[0].startswith("pasted manifests:") and "limit for a manifest" in errors[0]
    not_text = SimpleUploadedFile("binary.yaml", b"\xff\xfe\x00kind")
    assert "not UTF-8" in plan(viewer, file=not_text).context["errors"][0]


def test_more_pods_than_a_web_request_plans_are_refused(viewer, policies, monkeypatch):
    monkeypatch.setattr(whatif, "MAX_PODS", 5)
    assert plan(viewer, paste(deployment("web", 5))).context["result"] is not None
    errors = plan(viewer, paste(deployment("web", 4), deployment("api", 2))).context["errors"]
    assert errors == ["Deployment api: takes the input past 5 pods, the most planned at once here"]


def test_planning_writes_nothing(viewer, policies):
    tables = (NodePool, EC2NodeClass, NodeClaim, Decision, ClusterPod, AuditEntry)
    before = [model.objects.count() for model in tables]
    with CaptureQueriesContext(connection) as queries:
        plan(viewer, paste(deployment("web", 3), NO_FAMILY))
        plan(viewer, paste(deployment("web", 3)), htmx=True)
    writes = [q["sql"] for q in queries if q["sql"].split()[0].upper() in {"INSERT", "UPDATE", "DELETE"}]
    assert writes == []
    assert [model.objects.count() for model in tables] == before


def test_every_post_needs_the_csrf_token(policies, django_user_model):
    client = Client(enforce_csrf_checks=True)
    user = django_user_model.objects.create_user("vera")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    text = paste(deployment("web", 1))
    assert client.post("/whatif/", {"manifests": text}).status_code == 403
    page = client.get("/whatif/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert client.post("/whatif/", {"manifests": text, "csrfmiddlewaretoken": token}).status_code == 200
    # htmx sends the token as a header, from <body hx-headers>
    header = re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"([^\"]+)\"\}'>", page).group(1)
    response = client.post("/whatif/", {"manifests": text}, HTTP_X_CSRFTOKEN=header, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "<h2>Plan</h2>" in response.content.decode()


def test_the_page_costs_the_same_queries_with_more_policies_and_nodeclaims(
    viewer, policies, django_assert_max_num_queries
):
    text = paste(deployment("web", 2))
    viewer.get("/whatif/")
    with CaptureQueriesContext(connection) as get_few:
        viewer.get("/whatif/")
    with CaptureQueriesContext(connection) as post_few:
        plan(viewer, text)
    for i in range(40):
        nodeclaim(f"c{i}", 0.1, launched_at=timezone.now())
    for i in range(6):
        apply_manifest(nodepool(requirement("karpenter.sh/capacity-type", "spot"), name=f"extra-{i}"), source="cli")
    with django_assert_max_num_queries(len(get_few)):
        viewer.get("/whatif/")
    with django_assert_max_num_queries(len(post_few)):
        plan(viewer, text)


def test_only_get_and_post(viewer):
    assert viewer.put("/whatif/").status_code == 405


# ------------------------------------------------------------------ disruption


def test_the_disruption_what_if_answers_for_the_cluster_now_and_writes_nothing(
    viewer, seed_nodepool, seed_ec2nodeclass
):
    from uipages import add_node

    from provisioning.models import ClusterNode, Disruption

    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(seed_nodepool, source="cli")
    add_node("ip-1")
    html = words(viewer.get("/whatif/disruption/").content.decode())
    assert "Commands for the cluster now" in html and "<td>ip-1</td>" in html
    assert not Disruption.objects.exists() and ClusterNode.objects.get().disruption_note == ""


def test_the_disruption_what_if_of_pasted_documents_names_the_blocking_budget(viewer):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_simulate_disruption import cluster

    response = viewer.post("/whatif/disruption/", {"manifests": paste(*cluster())}, HTTP_HX_REQUEST="true")
    body = words(response.content.decode())
    assert body.startswith('<div id="disruption-result"')
    assert "<td>Empty</td><td>ip-empty</td>" in body
    assert "PodDisruptionBudget default/db allows no disruption of pod default/db-0" in body
    bad = viewer.post("/whatif/disruption/", {"manifests": "kind: NodePool\nmetadata: {name: x}\nspec: {template: 3}"})
    assert "The input cannot be read" in bad.content.decode()
