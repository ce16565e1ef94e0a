"""Logs: JSON lines with the request id or the task they were written for; a decision and a
disruption each logged once, with the fields that say what and why."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from builders import deployment, nodepool, requirement
from celery import shared_task, signals
from django.utils import timezone
from test_disruption_service import add_node, add_pod, cluster  # noqa: F401  (cluster is a fixture)

from karpweb import logs
from karpweb.logs import ContextFilter, JsonFormatter
from provisioning.cluster import simulated
from provisioning.services import disruption, provision
from provisioning.services.policy import apply_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def json_lines():
    """Everything logged meanwhile, as karpweb's JSON handler writes it, parsed back."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)


# ------------------------------------------------------------------ requests


@pytest.mark.django_db
def test_the_request_id_is_echoed_or_made(client):
    given = client.get("/healthz", HTTP_X_REQUEST_ID="lb-7f3a.2")
    assert given["X-Request-ID"] == "lb-7f3a.2"
    made = client.get("/healthz")
    other = client.get("/healthz")
    assert len(made["X-Request-ID"]) == 32 and made["X-Request-ID"] != other["X-Request-ID"]
    # An id that could forge a header or a log field is replaced, not echoed.
    forged = client.get("/healthz", HTTP_X_REQUEST_ID='x" level="CRITICAL')
    assert forged["X-Request-ID"] != 'x" level="CRITICAL' and len(forged["X-Request-ID"]) == 32


@pytest.mark.django_db
def test_lines_logged_while_serving_a_request_carry_its_id(client, json_lines):
    client.get("/no-such-page", HTTP_X_REQUEST_ID="req-42")
    logging.getLogger("provisioning.test").info("between requests")
    lines = json_lines()
    not_found = next(line for line in lines if line["logger"] == "django.request")
    assert not_found["request_id"] == "req-42" and not_found["status_code"] == 404
    assert not_found["level"] == "WARNING" and not_found["message"] == "Not Found: /no-such-page"
    assert not_found["timestamp"].endswith("+00:00")
    after = next(line for line in lines if line["message"] == "between requests")
    assert "request_id" not in after


# ------------------------------------------------------------------ decisions and disruptions


@pytest.mark.django_db
def test_a_decision_is_logged_once_with_its_summary(clean_redis, seed_ec2nodeclass, json_lines):
    apply_manifest(seed_ec2nodeclass, source="cli")
    apply_manifest(nodepool(requirement("karpenter.sh/capacity-type", "on-demand")), source="cli")
    pods, _ = simulated.workload_pods(
        [
            deployment("web", 4),
            deployment("gpu", 1, nodeSelector={"karpenter.k8s.aws/instance-family": "none"}),
        ]
    )
    simulated.apply_pods(pods)
    decision = provision.provision_once()
    logged = [line for line in json_lines() if line.get("event") == "decision"]
    assert len(logged) == 1
    line = logged[0]
    assert line["logger"] == "provisioning.services.provision" and line["level"] == "INFO"
    assert line["decision"] == decision.pk and line["pods"] == 5
    assert line["nodeclaims"] == decision.claims.count() and sum(line["instance_types"].values()) == line["nodeclaims"]
    assert line["price_per_hour"] == pytest.approx(float(decision.total_price_per_hour))
    assert line["unschedulable"] == 1
    [(reason, count)] = line["unschedulable_reasons"].items()
    assert count == 1 and "instance-family" in reason
    assert line["timings"] == decision.timings and line["message"].startswith(f"decision {decision.pk}: 5 pods")


@pytest.mark.django_db
def test_a_disruption_is_logged_once_then_only_its_steps(cluster, json_lines):  # noqa: F811
    add_node("ip-empty")
    add_node("ip-busy")
    add_pod("web-0", "ip-busy")
    now = timezone.now()
    planned = disruption.run(now)
    disruption.run(now + timedelta(seconds=16))
    disruption.run(now + timedelta(seconds=26))
    lines = [line for line in json_lines() if line.get("disruption") == planned.pk]
    assert [line["event"] for line in lines] == ["disruption", "disruption.done"]
    full = lines[0]
    assert full["reason"] == "Empty" and full["nodes"] == ["ip-empty"] and full["nodeclaims"] == ["claim-ip-empty"]
    assert full["savings_per_hour"] == pytest.approx(0.192) and full["explanation"] == planned.explanation
    assert full["replacements"] == [] and full["forceful"] is False


# ------------------------------------------------------------------ Celery tasks


@shared_task(name="tests.log_a_line")
def log_a_line() -> None:
    logging.getLogger("provisioning.test").info("inside a task")


def test_task_lines_carry_the_task_and_the_request_that_sent_it(json_lines):
    result = log_a_line.apply(headers={logs.CELERY_HEADER: "req-9"})
    log_a_line.apply()
    inside = [line for line in json_lines() if line["message"] == "inside a task"]
    assert inside[0]["task_id"] == result.id and inside[0]["task_name"] == "tests.log_a_line"
    assert inside[0]["request_id"] == "req-9"
    assert inside[1]["task_id"] != result.id and "request_id" not in inside[1]
    assert logs.current_task_id.get() is None  # cleared when the task ended


def test_a_task_sent_while_serving_a_request_takes_its_id_along():
    headers: dict = {}
    token = logs.current_request_id.set("req-5")
    try:
        signals.before_task_publish.send(sender="tests.log_a_line", headers=headers, body=None)
    finally:
        logs.current_request_id.reset(token)
    assert headers == {logs.CELERY_HEADER: "req-5"}


# ------------------------------------------------------------------ the setting


def test_the_log_format_setting_picks_json_or_refuses_junk(tmp_path):
    code = "import logging; logging.getLogger('provisioning.x').warning('hello %s', 'there', extra={'pods': 3})"
    env = {**os.environ, "KARPWEB_VAR_DIR": str(tmp_path), "KARPWEB_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    line = json.loads(done.stderr.strip().splitlines()[-1])
    assert {k: line[k] for k in ("level", "logger", "message", "pods")} == {
        "level": "WARNING",
        "logger": "provisioning.x",
        "message": "hello there",
        "pods": 3,
    }
    env["KARPWEB_LOG_FORMAT"] = "xml"
    refused = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "KARPWEB_LOG_FORMAT='xml': expected text or json" in refused.stderr


def test_a_task_run_while_serving_a_request_leaves_the_request_its_id():
    token = logs.current_request_id.set("req-7")
    try:
        log_a_line.apply()
        assert logs.current_request_id.get() == "req-7" and logs.current_task_id.get() is None
    finally:
        logs.current_request_id.reset(token)
