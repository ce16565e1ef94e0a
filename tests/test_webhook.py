"""The admission webhook speaks AdmissionReview v1 exactly as the API server expects."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from provisioning.launcher import free_port, wait_for_port
from provisioning.services.policy import apply_manifest

ROOT = Path(__file__).resolve().parent.parent

# As the webhook role serves it: the web role does not (tests/test_access.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("webhook_role")]

URL = "/webhook/validate"


def review(obj, *, operation="CREATE", old=None, kind=None, uid=None, dry_run=False, api_version="admission.k8s.io/v1"):
    source = obj if isinstance(obj, dict) else old or {}
    group, _, version = source.get("apiVersion", "karpenter.sh/v1").partition("/")
    kind = kind or {"group": group, "version": version, "kind": source.get("kind", "NodePool")}
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": kind,
            "resource": {"group": kind["group"], "version": kind["version"], "resource": "nodepools"},
            "name": (source.get("metadata") or {}).get("name"),
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
        },
    }


def post(client, body, **extra):
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **extra)


def answer(response):
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    return body["response"]


def test_the_seed_nodepool_is_allowed_with_a_when_underutilized_warning(client, seed_nodepool):
    request = review(seed_nodepool)
    result = answer(post(client, request))
    assert result["uid"] == request["request"]["uid"]
    assert result["allowed"] is True
    assert any("WhenUnderutilized" in w for w in result["warnings"])
    assert all(len(w) <= 120 for w in result["warnings"])


def test_the_seed_ec2nodeclass_is_allowed_without_warnings(client, seed_ec2nodeclass):
    result = answer(post(client, review(seed_ec2nodeclass)))
    assert result["allowed"] is True
    assert "warnings" not in result


def test_a_nodepool_for_an_unknown_nodeclass_is_allowed_with_a_warning(client, seed_nodepool, seed_ec2nodeclass):
    assert any("not found" in w for w in answer(post(client, review(seed_nodepool)))["warnings"])
    apply_manifest(seed_ec2nodeclass, source="cli")
    assert not any("not found" in w for w in answer(post(client, review(seed_nodepool)))["warnings"])


def test_an_invalid_nodepool_is_denied_with_every_error_and_its_path(client, seed_nodepool):
    bad = copy.deepcopy(seed_nodepool)
    requirements = bad["spec"]["template"]["spec"]["requirements"]
    requirements[0]["operator"] = "Sometimes"
    requirements[1]["values"] = []
    bad["spec"]["weight"] = 500
    result = answer(post(client, review(bad)))
    assert result["allowed"] is False
    assert result["status"]["code"] == 422
    message = result["status"]["message"]
    assert message.startswith('NodePool.karpenter.sh "general" is invalid: [')
    assert 'spec.template.spec.requirements[0].operator: Unsupported value: "Sometimes"' in message
    assert "spec.template.spec.requirements[1]: requirements with operator 'In' must have a value defined" in message
    assert "spec.weight: Invalid value: 500: should be less than or equal to 100" in message


def test_objects_arrive_without_defaults_and_are_defaulted_before_validation(client, seed_nodepool):
    del seed_nodepool["spec"]["disruption"]
    assert answer(post(client, review(seed_nodepool)))["allowed"] is True


def test_update_applies_transition_rules_with_the_old_object(client, seed_nodepool):
    new = copy.deepcopy(seed_nodepool)
    new["spec"]["template"]["spec"]["nodeClassRef"]["group"] = "example.com"
    result = answer(post(client, review(new, operation="UPDATE", old=seed_nodepool)))
    assert result["allowed"] is False
    assert "nodeClassRef.group is immutable" in result["status"]["message"]
    renamed = copy.deepcopy(seed_nodepool)
    renamed["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "other"
    assert answer(post(client, review(renamed, operation="UPDATE", old=seed_nodepool)))["allowed"] is True


def test_create_ignores_an_old_object_for_transition_rules(client, seed_nodepool):
    old = copy.deepcopy(seed_nodepool)
    old["spec"]["template"]["spec"]["nodeClassRef"]["group"] = "example.com"
    assert answer(post(client, review(seed_nodepool, operation="CREATE", old=old)))["allowed"] is True


def test_delete_is_always_allowed_and_warns_when_the_nodeclass_is_in_use(client, seed_nodepool, seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="cli")
    request = review(None, operation="DELETE", old=seed_ec2nodeclass)
    result = answer(post(client, request))
    assert result == {"uid": request["request"]["uid"], "allowed": True}
    apply_manifest(seed_nodepool, source="cli")
    result = answer(post(client, review(None, operation="DELETE", old=seed_ec2nodeclass)))
    assert result["allowed"] is True
    assert result["warnings"] == ["EC2NodeClass 'default' is still used by NodePool general; they stop launching nodes"]


def test_delete_of_an_invalid_object_is_allowed(client):
    old = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": {"weight": "no"}}
    assert answer(post(client, review(None, operation="DELETE", old=old)))["allowed"] is True


def test_dry_run_has_no_side_effects(client, seed_ec2nodeclass):
    from provisioning.models import AuditEntry, EC2NodeClass

    result = answer(post(client, review(seed_ec2nodeclass, dry_run=True)))
    assert result["allowed"] is True
    assert not EC2NodeClass.objects.exists()
    assert not AuditEntry.objects.exists()


def test_another_kind_is_denied_with_a_message(client):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    request = review(pod, kind={"group": "", "version": "v1", "kind": "Pod"})
    result = answer(post(client, request))
    assert result["allowed"] is False
    assert result["status"]["code"] == 400
    assert (
        "karpweb validates NodePool (karpenter.sh/v1), EC2NodeClass (karpenter.k8s.aws/v1) "
        "or NodeOverlay (karpenter.sh/v1alpha1)"
        in (result["status"]["message"])
    )


def test_an_object_of_another_kind_than_announced_is_denied(client, seed_ec2nodeclass):
    request = review(seed_ec2nodeclass, kind={"group": "karpenter.sh", "version": "v1", "kind": "NodePool"})
    result = answer(post(client, request))
    assert result["allowed"] is False


def test_a_v1beta1_review_is_answered_in_v1beta1(client, seed_ec2nodeclass):
    response = post(client, review(seed_ec2nodeclass, api_version="admission.k8s.io/v1beta1"))
    assert response.json()["apiVersion"] == "admission.k8s.io/v1beta1"


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"this is not json", "not JSON"),
        (b"", "not JSON"),
        (b"[1, 2]", "expected an AdmissionReview object"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "no request"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}), "no string uid"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}),
            "no string uid",
        ),
        (json.dumps({"apiVersion": "v1", "kind": "Pod", "request": {"uid": "x"}}), "expected kind AdmissionReview"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"\xff\xfe\x00", "not JSON"),
    ],
    ids=["not-json", "empty", "a-list", "no-request", "no-uid", "uid-not-string", "wrong-kind", "deep", "binary"],
)
def test_malformed_bodies_without_a_uid_get_400_with_a_json_error(client, body, fragment):
    response = post(client, body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]


def test_a_huge_body_is_refused_with_400(client, settings):
    settings.KARPWEB_MAX_MANIFEST_BYTES = 1024
    response = post(client, json.dumps(review({"x": "y" * 5000})))
    assert response.status_code == 400
    assert "limit" in response.json()["error"]


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "a string",
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool"},
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": []},
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "x"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [{"key": "k", "operator": "In", "values": ["v"]}] * 10_000,
                        "nodeClassRef": {"group": "g", "kind": "k", "name": "n"},
                    }
                }
            },
        },
        {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": {"a": {"b": {}}}},
    ],
    ids=["no-object", "string-object", "no-metadata", "spec-is-a-list", "10000-requirements", "unknown-fields"],
)
def test_bad_objects_with_a_uid_get_a_well_formed_deny(client, obj):
    request = review(obj)
    request["request"]["kind"] = {"group": "karpenter.sh", "version": "v1", "kind": "NodePool"}
    result = answer(post(client, request))
    assert result["uid"] == request["request"]["uid"]
    assert result["allowed"] is False
    assert result["status"]["code"] in (400, 422)
    assert result["status"]["message"]


def test_deeply_nested_objects_with_a_uid_are_denied_not_crashed(client):
    deep: dict = {}
    node = deep
    for _ in range(500):
        node["x"] = {}
        node = node["x"]
    obj = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": deep}
    result = answer(post(client, review(obj)))
    assert result["allowed"] is False
    assert "nested more than 64 levels" in result["status"]["message"]


def test_get_is_not_allowed(client):
    assert client.get(URL).status_code == 405


def test_many_errors_stay_a_bounded_message(client, seed_nodepool):
    seed_nodepool["spec"]["template"]["spec"]["requirements"] = [
        {"key": f"bad key {i}", "operator": "In", "values": ["v"]} for i in range(100)
    ]
    result = answer(post(client, review(seed_nodepool)))
    assert result["allowed"] is False
    assert len(result["status"]["message"]) < 40_000


# ------------------------------------------------------------------ each role serves its own URLs


def serve(role: str, tmp_path, port: int):
    """``KARPWEB_ROLE=<role> .venv/bin/gunicorn karpweb.wsgi``, exactly (gunicorn's defaults, plain
    HTTP, no certificates), on a free port and a fresh SQLite database."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
    env.update(KARPWEB_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="karpweb.settings")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    argv = [gunicorn, "karpweb.wsgi", "--bind", f"127.0.0.1:{port}"]
    return subprocess.Popen(
        argv, cwd=ROOT, env={**env, "KARPWEB_ROLE": role}, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )


@pytest.mark.slow
def test_the_webhook_role_serves_the_webhook_over_plain_http_and_nothing_of_the_web(tmp_path, seed_ec2nodeclass):
    port = free_port()
    proc = serve("webhook", tmp_path, port)
    try:
        wait_for_port(port, timeout=30, proc=proc)
        base = f"http://127.0.0.1:{port}"
        request = review(seed_ec2nodeclass)
        reply = requests.post(f"{base}/webhook/validate", json=request, timeout=10)
        assert reply.status_code == 200
        assert reply.json()["response"] == {"uid": request["request"]["uid"], "allowed": True}
        assert requests.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
        for path in ("/", "/accounts/login/", "/admin/", "/api/v1/nodepools/", "/api/schema/", "/policies/"):
            assert requests.get(base + path, timeout=10, allow_redirects=False).status_code == 404, path
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_the_web_role_does_not_serve_the_webhook(tmp_path, seed_ec2nodeclass):
    port = free_port()
    proc = serve("web", tmp_path, port)
    try:
        wait_for_port(port, timeout=30, proc=proc)
        base = f"http://127.0.0.1:{port}"
        assert requests.post(f"{base}/webhook/validate", json=review(seed_ec2nodeclass), timeout=10).status_code == 404
        assert requests.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
        assert requests.get(f"{base}/", timeout=10, allow_redirects=False).status_code == 302  # to sign in
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ------------------------------------------------------------------ NodeOverlay (karpenter.sh/v1alpha1)

SAVINGS_PLAN = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "savings-plan"},
    "spec": {
        "weight": 10,
        "requirements": [
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m7i", "c7i"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ],
        "priceAdjustment": "-27%",
    },
}


def test_a_nodeoverlay_create_is_allowed(client):
    request = review(SAVINGS_PLAN)
    assert request["request"]["kind"] == {"group": "karpenter.sh", "version": "v1alpha1", "kind": "NodeOverlay"}
    result = answer(post(client, request))
    assert result == {"uid": request["request"]["uid"], "allowed": True}


def test_an_invalid_nodeoverlay_is_denied_naming_the_object_and_every_field(client):
    bad = copy.deepcopy(SAVINGS_PLAN)
    bad["spec"]["price"] = "0.05"
    bad["spec"]["capacity"] = {"cpu": "2"}
    bad["spec"]["weight"] = 0
    result = answer(post(client, review(bad)))
    assert result["allowed"] is False
    assert result["status"]["code"] == 422 and result["status"]["reason"] == "Invalid"
    message = result["status"]["message"]
    assert message.startswith('NodeOverlay.karpenter.sh "savings-plan" is invalid: [')
    assert "spec: cannot set both 'price' and 'priceAdjustment'" in message
    assert "spec.capacity[cpu]: invalid resource restricted" in message
    assert "spec.weight: Invalid value: 0: should be greater than or equal to 1" in message


def test_a_nodeoverlay_update_is_validated_and_a_delete_allowed(client):
    changed = copy.deepcopy(SAVINGS_PLAN)
    changed["spec"]["priceAdjustment"] = "-101%"
    result = answer(post(client, review(changed, operation="UPDATE", old=SAVINGS_PLAN)))
    assert result["allowed"] is False and "spec.priceAdjustment" in result["status"]["message"]
    assert answer(post(client, review(None, operation="DELETE", old=SAVINGS_PLAN)))["allowed"] is True


def test_a_nodeoverlay_sent_as_another_version_is_refused(client):
    kind = {"group": "karpenter.sh", "version": "v1", "kind": "NodeOverlay"}
    result = answer(post(client, review(SAVINGS_PLAN, kind=kind)))
    assert result["allowed"] is False and result["status"]["code"] == 400
    assert "NodeOverlay (karpenter.sh/v1alpha1)" in result["status"]["message"]


@pytest.mark.slow
def test_the_webhook_roles_metrics_are_on_the_metrics_port_only(tmp_path, seed_ec2nodeclass):
    """gunicorn -c deploy/gunicorn.conf.py as the webhook pods run it (plain HTTP here): the port
    the API server calls has no /metrics; the master serves its workers' on KARPWEB_METRICS_PORT."""
    from prometheus_client.parser import text_string_to_metric_families

    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
    env.update(KARPWEB_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="karpweb.settings")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    env.update(
        KARPWEB_ROLE="webhook",
        WEBHOOK_TLS="false",
        BIND=f"127.0.0.1:{port}",
        KARPWEB_METRICS_PORT=str(metrics_port),
        KARPWEB_METRICS_ADDR="127.0.0.1",
    )
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        str(ROOT / "deploy" / "gunicorn.conf.py"),
        "karpweb.wsgi:application",
    ]
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, timeout=30, proc=proc)
        wait_for_port(metrics_port, timeout=10, proc=proc)
        base = f"http://127.0.0.1:{port}"
        request = review(seed_ec2nodeclass)
        reply = requests.post(f"{base}/webhook/validate", json=request, timeout=10)
        assert reply.json()["response"] == {"uid": request["request"]["uid"], "allowed": True}
        assert requests.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
        assert requests.get(f"{base}/metrics", timeout=10).status_code == 404

        scrape = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        assert scrape.status_code == 200, log.read_text()[-3000:]
        counts = {
            (s.labels["kind"], s.labels["operation"], s.labels["result"]): s.value
            for family in text_string_to_metric_families(scrape.text)
            for s in family.samples
            if s.name == "karpweb_webhook_request_duration_seconds_count"
        }
        assert counts == {("EC2NodeClass", "CREATE", "allowed"): 1.0}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
