"""The demo of ``make run`` fills its GPU capacity reservation first: ``seed_demo`` creates the
reservation in the simulated AWS and the policies that select it; once the EC2NodeClass is
resolved, the demo's ``train`` pods are planned into the reservation's two g5.xlarge, and only
the pods past them elsewhere. boto3 over HTTP to the simulated AWS, no patching."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from provisioning.models import EC2NodeClass
from provisioning.services import cloud as cloud_service
from provisioning.services import connections, demo, provision

pytestmark = pytest.mark.django_db


@pytest.fixture
def env(simulated_aws, clean_redis, settings, monkeypatch):
    for key, value in simulated_aws.env().items():
        monkeypatch.setenv(key, value)
    settings.AWS_REGION = simulated_aws.region
    settings.KARPWEB_CLUSTER = "simulated"
    settings.KARPWEB_AWS = "simulated"
    connections.reset()
    cloud_service.get_cloud.cache_clear()
    cloud_service._resolved.clear()
    simulated_aws.delete_capacity_reservations()
    yield simulated_aws
    simulated_aws.delete_capacity_reservations()
    cloud_service.get_cloud.cache_clear()
    cloud_service._resolved.clear()


def test_the_demo_fills_its_gpu_reservation_first(env):
    call_command("seed_demo")
    [reservation] = env_reservations(env)
    assert (reservation["id"], reservation["instanceType"], reservation["count"]) == (
        demo.RESERVATION["id"],
        "g5.xlarge",
        2,
    )
    call_command("seed_demo")  # a second start finds it there
    assert len(env_reservations(env)) == 1

    # seed_demo resolved the EC2NodeClass: the first provisioning run sees the reservation.
    [entry] = EC2NodeClass.objects.get(name="gpu").status["capacityReservations"]
    assert (entry["id"], entry["availableInstanceCount"]) == (demo.RESERVATION["id"], 2)

    wanted = demo.step(0.0)
    assert wanted["train"] == 3
    decision = provision.provision_once()
    train = [c for c in decision.claims.all() if any(p.split("/")[1].startswith("train-") for p in c.pods)]
    chosen = sorted(
        (c.launch_options[0]["capacityType"], c.launch_options[0].get("capacityReservationId", "")) for c in train
    )
    assert chosen[:2] == [("reserved", demo.RESERVATION["id"])] * 2
    assert all(kind != "reserved" for kind, _ in chosen[2:])
    assert sum(len(c.pods) for c in train) == 3


def env_reservations(sim) -> list[dict]:
    import requests

    return requests.get(f"{sim.endpoint_url}/_karpweb/capacity-reservations", timeout=10).json()["capacityReservations"]
