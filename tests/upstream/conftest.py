"""Fixtures of the upstream ports: a fresh environment per test, as upstream's BeforeEach."""

from __future__ import annotations

import pytest
from disruption_env import disruption_env  # noqa: F401  (the fixture)
from harness import Env


@pytest.fixture
def env() -> Env:
    """Upstream's envtest cluster and fake cloud provider: here the bundled us-east-1 catalog
    behind an EC2NodeClass with subnets in three zones (``harness.TEST_ZONES``)."""
    return Env()

