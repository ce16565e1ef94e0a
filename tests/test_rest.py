"""The REST API: manifests in JSON and YAML, optimistic concurrency, dry runs, errors as
Kubernetes Status, roles per method, tokens, throttling, and the read-only views."""

from __future__ import annotations

import copy
import io

import pytest
import yaml
from builders import on_demand_general
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from uipages import add_decision, add_disruption, add_node, add_pod

from provisioning import crd
from provisioning.models import AuditEntry, NodeClaim, NodeOverlay, NodePool
from provisioning.rest.throttling import PerToken
from provisioning.services.policy import apply_manifest

pytestmark = pytest.mark.django_db

NODEPOOLS = "/api/v1/nodepools/"


def client_for(role: str) -> APIClient:
    user = User.objects.create_user(f"{role}-user")
    user.groups.add(Group.objects.get(name=role))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def editor(seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="cli")
    return client_for("editor")


@pytest.fixture
def viewer():
    return client_for("viewer")


def create(client: APIClient, manifest: dict, **kw):
    return client.post(NODEPOOLS, manifest, format="json", **kw)


# ------------------------------------------------------------------ auth and roles


def test_requests_without_credentials_get_401_naming_the_scheme():
    response = APIClient().get(NODEPOOLS)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "Unauthorized"


def test_drf_create_token_gives_a_working_token():
    User.objects.create_user("robot").groups.add(Group.objects.get(name="viewer"))
    out = io.StringIO()
    call_command("drf_create_token", "robot", stdout=out)
    key = out.getvalue().split()[2]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get(NODEPOOLS).status_code == 200


def test_viewers_read_and_editors_write(viewer, editor, seed_nodepool):
    refused = create(viewer, seed_nodepool)
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        "This needs the editor role; you are a viewer. An admin grants roles: manage.py grant USER ROLE."
    )
    assert create(editor, seed_nodepool).status_code == 201
    assert viewer.get(NODEPOOLS + "general/").status_code == 200
    assert viewer.delete(NODEPOOLS + "general/").status_code == 403
    assert NodePool.objects.filter(name="general").exists()


def test_session_auth_serves_the_browsable_api(client, seed_ec2nodeclass):
    user = User.objects.create_user("browser")
    user.groups.add(Group.objects.get(name="viewer"))
    client.force_login(user)
    page = client.get(NODEPOOLS, HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and b"<html" in page.content


# ------------------------------------------------------------------ policies


def test_the_seed_manifests_are_posted_and_read_back_unchanged_up_to_defaulting(
    editor, seed_nodepool, seed_ec2nodeclass
):
    created = create(editor, seed_nodepool)
    assert created.status_code == 201, created.json()
    read = editor.get(NODEPOOLS + "general/").json()
    expected = crd.default(copy.deepcopy(seed_nodepool))
    assert read["spec"] == expected["spec"]
    assert read["apiVersion"] == "karpenter.sh/v1" and read["kind"] == "NodePool"
    assert read["metadata"]["name"] == "general" and read["metadata"]["resourceVersion"] == "1"
    nodeclass = editor.get("/api/v1/ec2nodeclasses/default/").json()
    assert nodeclass["spec"] == crd.default(copy.deepcopy(seed_ec2nodeclass))["spec"]


def test_yaml_in_and_out(editor, seed_nodepool):
    body = yaml.safe_dump(seed_nodepool)
    created = editor.post(NODEPOOLS, body, content_type="application/yaml", HTTP_ACCEPT="application/yaml")
    assert created.status_code == 201
    assert created["Content-Type"].startswith("application/yaml")
    assert yaml.safe_load(created.content)["metadata"]["name"] == "general"
    assert created["ETag"] == '"1"'


def test_a_create_of_a_taken_name_is_409_already_exists(editor, seed_nodepool):
    create(editor, seed_nodepool)
    again = create(editor, seed_nodepool)
    assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"


def test_invalid_manifests_get_422_with_every_field_path(editor, seed_nodepool):
    bad = copy.deepcopy(seed_nodepool)
    bad["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Gt"
    bad["spec"]["weight"] = 500
    response = create(editor, bad)
    assert response.status_code == 422
    body = response.json()
    fields = {c["field"] for c in body["details"]["causes"]}
    assert "spec.weight" in fields
    assert any(f.startswith("spec.template.spec.requirements[0]") for f in fields)
    assert body["reason"] == "Invalid" and body["details"]["kind"] == "NodePool"
    assert not NodePool.objects.exists()


def test_a_stale_resource_version_is_409_with_the_current_object(editor, seed_nodepool):
    create(editor, seed_nodepool)
    first = editor.get(NODEPOOLS + "general/").json()
    first["spec"]["weight"] = 10
    assert editor.put(NODEPOOLS + "general/", first, format="json").status_code == 200
    stale = copy.deepcopy(first)  # still says resourceVersion 1
    stale["spec"]["weight"] = 20
    conflict = editor.put(NODEPOOLS + "general/", stale, format="json")
    assert conflict.status_code == 409
    assert conflict.json()["details"]["current"]["spec"]["weight"] == 10
    assert NodePool.objects.get().weight == 10  # the second writer did not overwrite the first


def test_if_match_guards_replace_patch_and_delete(editor, seed_nodepool):
    create(editor, seed_nodepool)
    current = editor.get(NODEPOOLS + "general/")
    etag = current["ETag"]
    patched = editor.patch(
        NODEPOOLS + "general/",
        b'{"spec": {"weight": 7}}',
        HTTP_IF_MATCH=etag,
        content_type="application/merge-patch+json",
    )
    assert patched.status_code == 200 and patched.json()["spec"]["weight"] == 7
    assert patched["ETag"] == '"2"'
    stale_patch = editor.patch(
        NODEPOOLS + "general/",
        b'{"spec": {"weight": 8}}',
        HTTP_IF_MATCH=etag,
        content_type="application/merge-patch+json",
    )
    assert stale_patch.status_code == 409
    assert editor.delete(NODEPOOLS + "general/", HTTP_IF_MATCH=etag).status_code == 409
    assert editor.delete(NODEPOOLS + "general/", HTTP_IF_MATCH='"2"').status_code == 200
    assert editor.get(NODEPOOLS + "general/").status_code == 404


def test_merge_patch_deletes_with_null_and_keeps_the_rest(editor, seed_nodepool):
    create(editor, seed_nodepool)
    response = editor.patch(
        NODEPOOLS + "general/",
        b'{"spec": {"limits": null}}',
        content_type="application/merge-patch+json",
        HTTP_IF_MATCH='"1"',
    )
    assert response.status_code == 200
    spec = response.json()["spec"]
    assert "limits" not in spec and spec["template"]["spec"]["nodeClassRef"]["name"] == "default"


def test_dry_run_validates_without_saving(editor, seed_nodepool):
    response = editor.post(NODEPOOLS + "?dryRun=All", seed_nodepool, format="json")
    assert response.status_code == 201 and response.json()["metadata"]["name"] == "general"
    assert not NodePool.objects.exists() and not AuditEntry.objects.filter(kind="NodePool").exists()
    create(editor, seed_nodepool)
    assert editor.delete(NODEPOOLS + "general/?dryRun=All", HTTP_IF_MATCH='"1"').status_code == 200
    assert NodePool.objects.exists()
    assert editor.post(NODEPOOLS + "?dryRun=Some", seed_nodepool, format="json").status_code == 400


def test_warnings_go_in_the_warning_header(editor, seed_nodepool):
    missing_class = copy.deepcopy(seed_nodepool)
    missing_class["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "nope"
    response = create(editor, missing_class)
    assert response.status_code == 201
    assert response["Warning"].startswith('299 - "') and "nope" in response["Warning"]


def test_every_write_is_audited_with_who(editor, seed_nodepool):
    create(editor, seed_nodepool)
    patch = b'{"spec": {"weight": 3}}'
    editor.patch(NODEPOOLS + "general/", patch, content_type="application/merge-patch+json", HTTP_IF_MATCH='"1"')
    editor.delete(NODEPOOLS + "general/", HTTP_IF_MATCH='"2"')
    entries = list(AuditEntry.objects.filter(kind="NodePool").order_by("at", "id"))
    assert [e.action for e in entries] == ["created", "updated", "deleted"]
    assert {e.source for e in entries} == {"rest"} and {e.actor for e in entries} == {"editor-user"}
    assert "+  weight: 3" in entries[1].diff.splitlines()


def test_the_url_and_the_body_must_agree(editor, seed_nodepool):
    create(editor, seed_nodepool)
    other = copy.deepcopy(seed_nodepool)
    other["metadata"]["name"] = "other"
    response = editor.put(NODEPOOLS + "general/", other, format="json")
    assert response.status_code == 400 and "does not match the name in the URL" in response.json()["message"]
    wrong_kind = editor.post("/api/v1/ec2nodeclasses/", seed_nodepool, format="json")
    assert wrong_kind.status_code == 400 and "takes EC2NodeClass" in wrong_kind.json()["message"]
    assert editor.put(NODEPOOLS + "missing/", seed_nodepool, format="json").status_code == 404


def test_bad_bodies_are_clear_errors(editor, settings):
    broken = editor.post(NODEPOOLS, b"kind: [unclosed", content_type="application/yaml")
    assert broken.status_code == 400 and "not valid YAML" in broken.json()["message"]
    assert editor.post(NODEPOOLS, b"<xml/>", content_type="application/xml").status_code == 415
    settings.KARPWEB_MAX_MANIFEST_BYTES = 100
    big = editor.post(NODEPOOLS, b"{" + b" " * 200 + b"}", content_type="application/json")
    assert big.status_code == 413 and big.json()["reason"] == "RequestEntityTooLarge"


def test_throttled_requests_get_429_with_retry_after(viewer, monkeypatch):
    from django.core.cache import cache

    cache.clear()
    monkeypatch.setattr(PerToken, "THROTTLE_RATES", {"token": "3/minute"})
    codes = [viewer.get(NODEPOOLS).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    throttled = viewer.get(NODEPOOLS)
    assert int(throttled["Retry-After"]) > 0 and throttled.json()["reason"] == "TooManyRequests"
    cache.clear()


def test_throttling_counts_per_token_not_per_user(viewer, client, monkeypatch):
    """The token's requests count apart from its user's browser session, and a token's key never
    appears in the cache: only its digest."""
    from django.core.cache import cache

    cache.clear()
    monkeypatch.setattr(PerToken, "THROTTLE_RATES", {"token": "3/minute"})
    user = User.objects.get(username="viewer-user")
    client.force_login(user)
    assert [viewer.get(NODEPOOLS).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert client.get(NODEPOOLS, HTTP_ACCEPT="application/json").status_code == 200  # the same user, not the token
    token = Token.objects.get(user=user)
    key = PerToken().get_cache_key(type("R", (), {"auth": token, "user": user})(), None)
    assert token.key not in key and key.startswith("throttle_token_token-")
    # A new token (the old one deleted in the admin site) is a new client.
    token.delete()
    viewer.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    assert viewer.get(NODEPOOLS).status_code == 200
    cache.clear()


def test_lists_page_by_cursor(editor, seed_nodepool):
    for name in ("a", "b", "c"):
        pool = copy.deepcopy(seed_nodepool)
        pool["metadata"]["name"] = name
        create(editor, pool)
    first = editor.get(NODEPOOLS + "?limit=2").json()
    assert [p["metadata"]["name"] for p in first["results"]] == ["a", "b"]
    second = editor.get(first["next"]).json()
    assert [p["metadata"]["name"] for p in second["results"]] == ["c"] and second["next"] is None


# ------------------------------------------------------------------ read-only views


def test_pods_filter_by_namespace_phase_nodepool_and_read_one(viewer):
    add_node("n1", nodepool="gpu")
    add_pod("train-1", "ml", node="n1", cpu="2")
    add_pod("web-1", "shop", reason="no room")
    pods = viewer.get("/api/v1/pods/?namespace=ml").json()["results"]
    assert [p["name"] for p in pods] == ["train-1"] and pods[0]["requests"]["cpuMillis"] == 2000
    assert [p["name"] for p in viewer.get("/api/v1/pods/?nodepool=gpu").json()["results"]] == ["train-1"]
    pending = viewer.get("/api/v1/pods/?phase=Pending&unschedulable=true").json()["results"]
    assert [p["name"] for p in pending] == ["web-1"] and pending[0]["unschedulableReason"] == "no room"
    assert viewer.get("/api/v1/pods/shop/web-1/").json()["namespace"] == "shop"
    assert viewer.get("/api/v1/pods/shop/nope/").status_code == 404
    assert viewer.get("/api/v1/pods/?phase=Sleeping").status_code == 400


def test_nodeclaims_and_nodes_filter_by_nodepool_state_and_capacity_type(viewer):
    add_node("n1", nodepool="general", capacity_type="spot")
    add_node("n2", nodepool="batch", capacity_type="on-demand")
    add_pod("p", node="n1", cpu="1", memory="1Gi")
    claims = viewer.get("/api/v1/nodeclaims/?capacity_type=spot").json()["results"]
    assert [c["name"] for c in claims] == ["n1-claim"] and claims[0]["pricePerHour"] == 0.08
    assert viewer.get("/api/v1/nodeclaims/n2-claim/").json()["nodepool"] == "batch"
    nodes = viewer.get("/api/v1/nodes/?nodepool=general").json()["results"]
    assert [n["name"] for n in nodes] == ["n1"]
    assert nodes[0]["requested"] == {"pods": 1, "cpuMillis": 1000, "memoryBytes": 2**30}
    assert [n["name"] for n in viewer.get("/api/v1/nodes/?capacity_type=on-demand").json()["results"]] == ["n2"]
    assert viewer.get("/api/v1/nodes/n1/").json()["allocatable"]["cpu"] == "3920m"


def test_decisions_carry_their_claims_and_reasons(viewer):
    decision = add_decision(["a/b"], unschedulable=[{"pod": "a/c", "reason": "too big"}])
    add_node("n1", decision=decision)
    body = viewer.get(f"/api/v1/decisions/{decision.pk}/").json()
    assert body["unschedulable"] == [{"pod": "a/c", "reason": "too big"}]
    assert [c["name"] for c in body["claims"]] == ["n1-claim"]
    listed = viewer.get("/api/v1/decisions/").json()["results"]
    assert listed[0]["id"] == decision.pk


def test_disruptions_filter_by_reason(viewer):
    claim = add_node("n1")
    add_disruption([claim.name], reason="Empty")
    add_disruption([claim.name], reason="Drifted")
    listed = viewer.get("/api/v1/disruptions/?reason=Empty").json()["results"]
    assert [d["reason"] for d in listed] == ["Empty"] and listed[0]["savingsPerHour"] == 0.04


def test_catalog_pages_through_the_types(viewer):
    first = viewer.get("/api/v1/catalog/instancetypes/?limit=50").json()
    assert len(first["results"]) == 50 and first["count"] > 1000 and first["previous"] is None
    second = viewer.get(first["next"]).json()
    assert len(second["results"]) == 50 and second["previous"]
    assert {t["name"] for t in first["results"]}.isdisjoint(t["name"] for t in second["results"])
    assert viewer.get("/api/v1/catalog/instancetypes/?limit=5000").status_code == 400


def test_catalog_filters_by_requirement(viewer):
    body = viewer.get("/api/v1/catalog/instancetypes/?require=karpenter.k8s.aws/instance-family=m5").json()
    assert body["count"] > 3 and all(t["name"].startswith("m5.") for t in body["results"])
    bad = viewer.get("/api/v1/catalog/instancetypes/?require=oops")
    assert bad.status_code == 400 and "expected KEY=VALUE" in bad.json()["message"]


def test_the_schema_and_its_docs_are_served(viewer, client):
    schema = viewer.get("/api/schema/")
    assert schema.status_code == 200
    document = yaml.safe_load(schema.content)
    assert "/api/v1/nodepools/{name}/" in document["paths"]
    assert "409" in document["paths"]["/api/v1/nodepools/{name}/"]["put"]["responses"]
    for method in ("put", "patch", "delete"):
        assert "428" in document["paths"]["/api/v1/nodepools/{name}/"][method]["responses"], method
    user = User.objects.create_user("docs")
    client.force_login(user)
    assert client.get("/api/docs/").status_code == 403  # no role, no docs
    user.groups.add(Group.objects.get(name="viewer"))
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content


def test_the_schema_and_its_docs_are_not_anonymous(client):
    for path in ("/api/schema/", "/api/docs/"):
        response = APIClient().get(path)
        assert response.status_code == 401 and response["WWW-Authenticate"] == "Token", path


# ------------------------------------------------------------------ a write names the version it read


def test_a_write_without_the_version_it_read_is_refused_with_428(editor, seed_nodepool):
    create(editor, seed_nodepool)
    current = editor.get(NODEPOOLS + "general/").json()
    unversioned = copy.deepcopy(current)
    del unversioned["metadata"]["resourceVersion"]
    unversioned["spec"]["weight"] = 7
    patch = b'{"spec": {"weight": 7}}'
    refused = [
        editor.put(NODEPOOLS + "general/", unversioned, format="json"),
        editor.patch(NODEPOOLS + "general/", patch, content_type="application/merge-patch+json"),
        editor.delete(NODEPOOLS + "general/"),
        editor.delete(NODEPOOLS + "general/?dryRun=All"),
    ]
    for response in refused:
        assert response.status_code == 428, response.json()
        body = response.json()
        assert body["kind"] == "Status" and body["reason"] == "PreconditionRequired"
        assert "metadata.resourceVersion" in body["message"] and "If-Match" in body["message"]
    stored = NodePool.objects.get(name="general")
    assert stored.resource_version == 1 and stored.weight != 7  # nothing was written
    assert [e.action for e in AuditEntry.objects.filter(kind="NodePool")] == ["created"]


def test_the_version_is_named_in_the_body_or_in_if_match_and_star_means_any(editor, seed_nodepool):
    create(editor, seed_nodepool)
    current = editor.get(NODEPOOLS + "general/").json()
    current["spec"]["weight"] = 5  # the body names resourceVersion 1
    assert editor.put(NODEPOOLS + "general/", current, format="json").status_code == 200
    patch = b'{"spec": {"weight": 6}}'
    merge = "application/merge-patch+json"
    assert editor.patch(NODEPOOLS + "general/", patch, content_type=merge, HTTP_IF_MATCH='"2"').status_code == 200
    stale = editor.patch(NODEPOOLS + "general/", patch, content_type=merge, HTTP_IF_MATCH='"2"')
    assert stale.status_code == 409
    # If-Match: * writes over whatever version is there, on purpose.
    anyway = editor.patch(NODEPOOLS + "general/", b'{"spec": {"weight": 8}}', content_type=merge, HTTP_IF_MATCH="*")
    assert anyway.status_code == 200 and anyway.json()["spec"]["weight"] == 8
    assert editor.delete(NODEPOOLS + "general/", HTTP_IF_MATCH="*").status_code == 200
    assert not NodePool.objects.exists()


def test_every_list_renders_as_yaml_too(viewer):
    decision = add_decision(["a/b"])
    claim = add_node("n1", decision=decision)
    add_disruption([claim.name])
    add_pod("p", node="n1")
    for path in ("pods", "nodeclaims", "nodes", "decisions", "disruptions", "nodepools"):
        response = viewer.get(f"/api/v1/{path}/?format=yaml")
        assert response.status_code == 200, path
        assert "results" in yaml.safe_load(response.content), path


def test_unknown_api_paths_get_a_status(viewer):
    response = viewer.get("/api/v1/pods/not-a-key/")
    assert response.status_code == 404 and response.json()["kind"] == "Status"


# ------------------------------------------------------------------ what-if and spend

WORKLOAD = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 6
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        resources: {requests: {cpu: "1", memory: 2Gi}}
"""


GENERAL = on_demand_general()


def test_simulate_answers_what_manage_py_simulate_prints(viewer, tmp_path, seed_ec2nodeclass):
    import json

    text = yaml.safe_dump_all([seed_ec2nodeclass, GENERAL]) + "---" + WORKLOAD
    response = viewer.post("/api/v1/simulate/?policies=input", text.encode(), content_type="application/yaml")
    assert response.status_code == 200, response.content  # a viewer may plan: nothing is written
    path = tmp_path / "input.yaml"
    path.write_text(text)
    out = io.StringIO()
    call_command("simulate", "-f", str(path), "--format", "json", stdout=out)
    expected, got = json.loads(out.getvalue()), response.json()
    for plan in (expected, got):
        plan["stats"].pop("solveSeconds")
    assert got == expected
    assert got["nodeClaims"] and got["totalPricePerHour"] > 0


def test_simulate_plans_with_the_policies_in_force(editor, viewer):
    create(editor, GENERAL)
    response = viewer.post("/api/v1/simulate/", WORKLOAD.encode(), content_type="application/yaml")
    assert response.status_code == 200
    assert {c["nodePool"] for c in response.json()["nodeClaims"]} == {"general"}
    assert not NodePool.objects.exclude(name="general").exists()


def test_simulate_rejects_invalid_input_with_a_status(viewer):
    bad = WORKLOAD.replace("replicas: 6", "replicas: -1")
    response = viewer.post("/api/v1/simulate/?policies=input", bad.encode(), content_type="application/yaml")
    assert response.status_code == 422 and "replicas" in response.json()["message"]
    assert (
        viewer.post("/api/v1/simulate/?policies=some", WORKLOAD.encode(), content_type="application/yaml").status_code
        == 400
    )


def test_the_disruption_what_if_answers_what_simulate_disruption_prints(viewer, tmp_path):
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_simulate_disruption import NOW, cluster

    documents = cluster()
    response = viewer.post(f"/api/v1/simulate/disruption/?now={NOW}", documents, format="json")
    assert response.status_code == 200, response.content  # a viewer may ask: nothing is written
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    out = io.StringIO()
    call_command("simulate", "--disruption", "-f", str(path), "--now", NOW, "--format", "json", stdout=out)
    expected, got = json.loads(out.getvalue()), response.json()
    for answer in (expected, got):
        answer["stats"].pop("seconds")
    assert got == expected and got["commands"][0]["candidates"] == ["ip-empty"]


def test_the_disruption_what_if_of_the_cluster_now_says_why_not_each_node(editor, viewer, seed_nodepool):
    from provisioning.models import ClusterNode

    create(editor, seed_nodepool)
    add_node("n1")
    response = viewer.get("/api/v1/simulate/disruption/")
    assert response.status_code == 200, response.content
    (node,) = response.json()["nodes"]
    assert node["name"] == "n1" and node["reason"]
    assert ClusterNode.objects.get(name="n1").disruption_note == ""  # asking writes nothing


def test_the_disruption_what_if_rejects_invalid_input_with_a_status(viewer):
    bad = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": {"template": 3}}
    response = viewer.post("/api/v1/simulate/disruption/", [bad], format="json")
    assert response.status_code == 422 and "NodePool x" in response.json()["message"]
    (cause,) = response.json()["details"]["causes"]
    assert cause["field"] == "spec.template" and cause["message"].startswith("NodePool x: ")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "creationTimestamp": "last week"}}
    response = viewer.post("/api/v1/simulate/disruption/", [node], format="json")
    assert response.status_code == 422
    (cause,) = response.json()["details"]["causes"]
    assert cause["field"] == "metadata.creationTimestamp" and cause["message"].startswith("Node n1: ")
    assert viewer.get("/api/v1/simulate/disruption/?now=soon").status_code == 400


def test_the_what_if_names_each_invalid_field_in_the_status_causes(viewer):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    response = viewer.post("/api/v1/simulate/", [pod], format="json")
    assert response.status_code == 422
    (cause,) = response.json()["details"]["causes"]
    assert cause["field"] == "spec.containers[0].resources.requests.cpu" and cause["message"].startswith("Pod p: ")


def test_spend_series_by_capacity_type(viewer):
    from datetime import timedelta

    from builders import nodeclaim
    from django.utils import timezone

    now = timezone.now().replace(microsecond=0)
    nodeclaim("a", 0.10, launched_at=now - timedelta(hours=3), capacity_type="spot")
    nodeclaim("b", 0.40, launched_at=now - timedelta(hours=3), deleted_at=now - timedelta(hours=1))
    start, end = (now - timedelta(hours=2)).isoformat(), now.isoformat()
    response = viewer.get("/api/v1/spend/", {"from": start, "to": end, "step": "1h", "by": "capacity_type"})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["groups"] == ["on-demand", "spot"] and body["stepSeconds"] == 3600
    first, second = body["buckets"]
    assert first["pricePerHour"] == {"on-demand": 0.4, "spot": 0.1}
    assert second["pricePerHour"] == {"on-demand": 0.0, "spot": 0.1}
    assert body["cost"] == pytest.approx(0.6)


@pytest.mark.parametrize(
    "query, field",
    [
        ({"step": "0m"}, "step"),
        ({"step": "fortnight"}, "step"),
        ({"from": "yesterday"}, "from"),
        ({"by": "zone"}, "by"),
        ({"step": "1m", "from": "2026-03-15T10:00:00Z", "to": "2026-03-15T09:00:00Z"}, "to"),
    ],
)
def test_spend_rejects_bad_queries_naming_the_parameter(viewer, query, field):
    response = viewer.get("/api/v1/spend/", query)
    assert response.status_code == 400
    assert response.json()["details"]["causes"][0]["field"] == field


@pytest.fixture
def recorded():
    """Ten minutes of allocation samples up to a whole minute, ``now``: n1 ($0.80; 4 cpu,
    16 GiB) holds shop/web-1 (a quarter, team storefront) and shop/api-1 (half, team
    payments); n2 ($0.40; 2 cpu, 8 GiB) holds jobs/batch-1 (three quarters, no team)."""
    from datetime import timedelta

    from django.utils import timezone

    from provisioning.services import allocation

    now = timezone.now().replace(second=0, microsecond=0)
    add_node("n1", price="0.80", cpu="4", memory="16Gi", launched_at=now - timedelta(hours=1))
    add_node("n2", price="0.40", cpu="2", memory="8Gi", launched_at=now - timedelta(hours=1))
    add_pod("web-1", "shop", node="n1", cpu="1", memory="2Gi", labels={"team": "storefront"})
    add_pod("api-1", "shop", node="n1", cpu="500m", memory="8Gi", labels={"team": "payments"})
    add_pod("batch-1", "jobs", node="n2", cpu="1500m", memory="1Gi")
    for minutes in range(9, -1, -1):
        allocation.record(now - timedelta(minutes=minutes))
    return now


def spend_query(now, **query):
    from datetime import timedelta

    return {"from": (now - timedelta(minutes=10)).isoformat(), "to": now.isoformat(), "step": "5m", **query}


def test_spend_allocated_by_namespace_has_idle_capacity_apart(viewer, recorded):
    response = viewer.get("/api/v1/spend/", spend_query(recorded, by="namespace"))
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["by"], body["groups"], body["recorded"], body["stepSeconds"]) == (
        "namespace",
        ["jobs", "shop"],
        True,
        300,
    )
    assert len(body["buckets"]) == 2
    for bucket in body["buckets"]:
        # shop: 0.80 × (1/4 + 1/2); jobs: 0.40 × 3/4; idle: 0.80 × 1/4 + 0.40 × 1/4
        assert bucket["pricePerHour"] == {"jobs": 0.3, "shop": 0.6} and bucket["idlePerHour"] == 0.3
    assert body["cost"] == pytest.approx(0.9 / 6) and body["idleCost"] == pytest.approx(0.3 / 6)


def test_spend_allocated_by_a_pod_label(viewer, recorded):
    body = viewer.get("/api/v1/spend/", spend_query(recorded, by="label:team")).json()
    assert body["groups"] == ["(no team)", "payments", "storefront"]
    assert body["buckets"][0]["pricePerHour"] == {"(no team)": 0.3, "payments": 0.4, "storefront": 0.2}


def test_spend_by_nodepool_says_nothing_of_idle_capacity(viewer, recorded):
    body = viewer.get("/api/v1/spend/", spend_query(recorded)).json()
    assert body["by"] == "nodepool" and "idleCost" not in body and "idlePerHour" not in body["buckets"][0]
    assert body["buckets"][0]["pricePerHour"] == {"general": 1.2}  # what the allocation splits


def test_spend_allocated_before_anything_was_recorded(viewer):
    body = viewer.get("/api/v1/spend/", {"by": "namespace"}).json()
    assert body["recorded"] is False and body["groups"] == [] and body["idleCost"] == 0
    assert {bucket["idlePerHour"] for bucket in body["buckets"]} == {0.0}


@pytest.mark.parametrize(
    ("by", "message"),
    [
        ("label:", "by: label: needs a pod label key, such as label:team (recorded: team)"),
        ("label:owner", "by: the pod label owner is not recorded; recorded: team (the setting KARPWEB_SPEND_LABELS)"),
        ("label:-x-", "by: '-x-' is not a label key: name part must consist of alphanumeric characters"),
        ("namespaces", "by: 'namespaces' is not one of nodepool, capacity_type, namespace, label:KEY"),
    ],
)
def test_spend_rejects_a_grouping_saying_what_is_recorded(viewer, by, message):
    response = viewer.get("/api/v1/spend/", {"by": by})
    assert response.status_code == 400
    body = response.json()
    assert body["details"]["causes"][0]["field"] == "by" and body["message"].startswith(message)


def test_the_schema_documents_spend_by_namespace_and_label(viewer):
    document = yaml.safe_load(viewer.get("/api/schema/").content)
    operation = document["paths"]["/api/v1/spend/"]["get"]
    (by,) = [p for p in operation["parameters"] if p["name"] == "by"]
    assert by["schema"]["pattern"] == "^(nodepool|capacity_type|namespace|label:.+)$"
    assert "label:KEY" in by["description"] and "KARPWEB_SPEND_LABELS" in by["description"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SpendSeries"
    }
    bucket = document["components"]["schemas"]["SpendBucket"]["properties"]
    assert {"pricePerHour", "idlePerHour"} <= set(bucket)
    assert "idleCost" in document["components"]["schemas"]["SpendSeries"]["properties"]


READS = [
    "/api/v1/nodepools/",
    "/api/v1/nodepools/general/",
    "/api/v1/nodepools/general/scale/",
    "/api/v1/ec2nodeclasses/",
    "/api/v1/ec2nodeclasses/default/",
    "/api/v1/nodeoverlays/",
    "/api/v1/pods/",
    "/api/v1/pods/default/p/",
    "/api/v1/nodeclaims/",
    "/api/v1/nodeclaims/n1-claim/",
    "/api/v1/nodes/",
    "/api/v1/nodes/n1/",
    "/api/v1/decisions/",
    "/api/v1/disruptions/",
    "/api/v1/spend/",
    "/api/v1/spend/?by=namespace",
    "/api/v1/spend/?by=label:team",
    "/api/v1/catalog/instancetypes/?require=karpenter.k8s.aws/instance-family=m5",
]
WRITES = [
    ("post", "/api/v1/nodepools/"),
    ("put", "/api/v1/nodepools/general/"),
    ("patch", "/api/v1/nodepools/general/"),
    ("delete", "/api/v1/nodepools/general/"),
    ("put", "/api/v1/nodepools/general/scale/"),
    ("patch", "/api/v1/nodepools/general/scale/"),
    ("post", "/api/v1/ec2nodeclasses/"),
    ("put", "/api/v1/ec2nodeclasses/default/"),
    ("patch", "/api/v1/ec2nodeclasses/default/"),
    ("delete", "/api/v1/ec2nodeclasses/default/"),
    ("post", "/api/v1/nodeoverlays/"),
    ("put", "/api/v1/nodeoverlays/savings-plan/"),
    ("patch", "/api/v1/nodeoverlays/savings-plan/"),
    ("delete", "/api/v1/nodeoverlays/savings-plan/"),
]


@pytest.fixture
def cluster_rows(editor, seed_nodepool):
    create(editor, seed_nodepool)
    claim = add_node("n1", decision=add_decision(["default/p"]))
    add_pod("p", node="n1")
    add_disruption([claim.name])


def test_every_read_needs_credentials_and_a_viewer_may_make_it(cluster_rows, viewer):
    for path in READS:
        assert APIClient().get(path).status_code == 401, path
        assert viewer.get(path).status_code == 200, path


def test_every_write_needs_the_editor_role(cluster_rows, viewer, seed_nodepool):
    for method, path in WRITES:
        assert getattr(APIClient(), method)(path, {}, format="json").status_code == 401, (method, path)
        response = getattr(viewer, method)(path, seed_nodepool, format="json")
        assert response.status_code == 403, (method, path)
    assert NodePool.objects.get().resource_version == 1


def test_a_path_with_a_newline_gets_a_status_too(viewer):
    response = viewer.get("/api/v1/pods/a%0Ab/")
    assert response.status_code == 404 and response.json()["kind"] == "Status"


# ------------------------------------------------------------------ nodeoverlays/

NODEOVERLAYS = "/api/v1/nodeoverlays/"


def savings_plan(**spec) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "savings-plan"},
        "spec": {
            "weight": 10,
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i", "c7i", "r7i"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "priceAdjustment": "-27%",
            **spec,
        },
    }


def conditions(manifest: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in manifest["status"]["conditions"]}


def test_nodeoverlays_are_created_read_patched_and_deleted_with_resource_versions(editor, viewer):
    created = editor.post(NODEOVERLAYS, savings_plan(), format="json")
    assert created.status_code == 201, created.content
    assert created["ETag"] == '"1"'
    body = created.json()
    assert body["apiVersion"] == "karpenter.sh/v1alpha1" and body["metadata"]["resourceVersion"] == "1"
    # Judged at once: no NodePool to apply to, and nothing it conflicts with.
    assert conditions(body) == {"ValidationSucceeded": ("True", "ValidationSucceeded"), "Ready": ("True", "Ready")}
    listed = viewer.get(NODEOVERLAYS).json()["results"]
    assert [o["metadata"]["name"] for o in listed] == ["savings-plan"]
    read = viewer.get(NODEOVERLAYS + "savings-plan/", HTTP_ACCEPT="application/yaml")
    assert yaml.safe_load(read.content)["spec"]["priceAdjustment"] == "-27%"

    patched = editor.patch(
        NODEOVERLAYS + "savings-plan/",
        b'{"spec": {"priceAdjustment": null, "price": "0.05"}}',
        HTTP_IF_MATCH='"1"',
        content_type="application/merge-patch+json",
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["spec"]["price"] == "0.05" and "priceAdjustment" not in patched.json()["spec"]
    assert patched["ETag"] == '"2"' and NodeOverlay.objects.get().generation == 2
    stale = editor.put(
        NODEOVERLAYS + "savings-plan/",
        {**savings_plan(), "metadata": {"name": "savings-plan", "resourceVersion": "1"}},
        format="json",
    )
    assert stale.status_code == 409 and stale.json()["details"]["current"]["spec"]["price"] == "0.05"

    assert [e.action for e in AuditEntry.objects.filter(kind="NodeOverlay").order_by("at", "id")] == [
        "created",
        "updated",
    ]
    assert AuditEntry.objects.filter(kind="NodeOverlay").first().source == "rest"
    assert editor.delete(NODEOVERLAYS + "savings-plan/", HTTP_IF_MATCH='"2"').status_code == 200
    assert not NodeOverlay.objects.exists()


def test_an_invalid_nodeoverlay_gets_422_naming_every_field(editor):
    response = editor.post(NODEOVERLAYS, savings_plan(price="0.05", weight=20000), format="json")
    assert response.status_code == 422
    body = response.json()
    assert body["details"]["kind"] == "NodeOverlay"
    assert {(c["field"], c["message"]) for c in body["details"]["causes"]} >= {
        ("spec", "cannot set both 'price' and 'priceAdjustment'"),
        ("spec.weight", "Invalid value: 20000: should be less than or equal to 10000"),
    }
    assert not NodeOverlay.objects.exists()


def test_the_nodeoverlays_endpoint_takes_only_nodeoverlays(editor, seed_nodepool):
    response = editor.post(NODEOVERLAYS, seed_nodepool, format="json")
    assert response.status_code == 400 and "this endpoint takes NodeOverlay" in response.json()["message"]


def test_an_overlay_of_equal_weight_that_meets_another_is_created_but_reported_in_conflict(editor):
    create(editor, GENERAL)
    assert editor.post(NODEOVERLAYS, savings_plan(), format="json").status_code == 201
    other = savings_plan(priceAdjustment="-10%")
    other["metadata"]["name"] = "edp"
    response = editor.post(NODEOVERLAYS, other, format="json")
    assert response.status_code == 201  # admitted, as upstream: the status says it is left out
    assert conditions(response.json()) == {"ValidationSucceeded": ("False", "Conflict"), "Ready": ("False", "Conflict")}
    message = response.json()["status"]["conditions"][0]["message"]
    assert message.startswith("not applied: it conflicts with NodeOverlay savings-plan of the same weight (10)")
    assert conditions(editor.get(NODEOVERLAYS + "savings-plan/").json())["Ready"] == ("True", "Ready")
    # Another weight settles it: the higher one wins where they meet.
    version = response.json()["metadata"]["resourceVersion"]
    settled = editor.patch(
        NODEOVERLAYS + "edp/",
        b'{"spec": {"weight": 5}}',
        content_type="application/merge-patch+json",
        HTTP_IF_MATCH=f'"{version}"',
    )
    assert conditions(settled.json())["Ready"] == ("True", "Ready")


def test_simulate_with_the_policies_in_force_prices_with_their_overlays(editor, viewer):
    create(editor, GENERAL)
    workload = WORKLOAD.encode()
    before = viewer.post("/api/v1/simulate/", workload, content_type="application/yaml").json()
    assert all(c["overlays"] == [] for c in before["nodeClaims"])
    discount = savings_plan(priceAdjustment="-60%")
    discount["spec"]["requirements"][0]["values"] = ["m7i", "c7i", "r7i", "m6i", "c6i", "r6i", "m5", "c5", "r5"]
    assert editor.post(NODEOVERLAYS, discount, format="json").status_code == 201
    after = viewer.post("/api/v1/simulate/", workload, content_type="application/yaml").json()
    claim = after["nodeClaims"][0]
    assert claim["overlays"] == ["savings-plan"]
    assert claim["pricePerHour"] == pytest.approx(claim["listPricePerHour"] * 0.4, abs=1e-6)
    assert after["totalPricePerHour"] < before["totalPricePerHour"]


def test_nodeclaims_show_list_and_effective_prices(viewer):
    claim = add_node("n1", decision=add_decision(["default/p"]))
    NodeClaim.objects.filter(pk=claim.pk).update(price_per_hour="0.07", list_price_per_hour="0.096")
    body = viewer.get("/api/v1/nodeclaims/n1-claim/").json()
    assert (body["pricePerHour"], body["listPricePerHour"]) == (0.07, 0.096)
