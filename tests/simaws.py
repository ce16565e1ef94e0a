"""The simulated AWS as a pytest fixture: ``python -m provisioning.cloud.simulated`` on a
free port, once per session, spoken to over HTTP like the real endpoint.

The fixture is named ``simulated_aws``; make it available to every test module with
``from simaws import simulated_aws_fixture  # noqa: F401`` in conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from provisioning.launcher import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@dataclass
class SimulatedAWS:
    endpoint_url: str
    region: str
    cluster: str
    kubernetes_version: str
    process: subprocess.Popen[bytes]

    @property
    def control_url(self) -> str:
        return f"{self.endpoint_url}/_karpweb/insufficient-capacity"

    def client_kwargs(self) -> dict[str, str]:
        """Keyword arguments for ``boto3.client(service, **kwargs)``."""
        return {"endpoint_url": self.endpoint_url, "region_name": self.region, **CREDENTIALS}

    def env(self) -> dict[str, str]:
        """The environment ``make run`` gives its children for this endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "KARPWEB_AWS": "simulated",
        }

    def launch_calls(self) -> list[dict]:
        """The launch calls that reached the endpoint: ``{"action", "clientToken", "at"}``."""
        response = requests.get(f"{self.endpoint_url}/_karpweb/launch-calls", timeout=10)
        response.raise_for_status()
        return response.json()["calls"]

    def insufficient_capacity(self) -> list[str]:
        response = requests.get(self.control_url, timeout=10)
        response.raise_for_status()
        return response.json()["offerings"]

    def set_insufficient_capacity(self, keys: list[str]) -> list[str]:
        """Replace the exhausted offerings (``capacity-type:instance-type:zone``, zone ``*``
        for all zones); an empty list restores capacity everywhere."""
        response = requests.post(self.control_url, json={"offerings": list(keys)}, timeout=10)
        response.raise_for_status()
        return response.json()["offerings"]

    def create_capacity_reservation(self, **fields) -> dict:
        """``POST /_karpweb/capacity-reservations``: a reservation in the simulated account."""
        response = requests.post(f"{self.endpoint_url}/_karpweb/capacity-reservations", json=fields, timeout=10)
        response.raise_for_status()
        return response.json()

    def delete_capacity_reservations(self) -> None:
        requests.delete(f"{self.endpoint_url}/_karpweb/capacity-reservations", timeout=10).raise_for_status()

    def release_from_reservations(self, instance_ids: list[str]) -> int:
        response = requests.post(
            f"{self.endpoint_url}/_karpweb/capacity-reservations/release",
            json={"instanceIds": instance_ids},
            timeout=10,
        )
        response.raise_for_status()
        return response.json()["released"]


def start_simulated_aws(
    region: str = "us-east-1", cluster: str = "my-cluster", kubernetes_version: str = "1.33", **popen
) -> SimulatedAWS:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "KARPWEB_SIM_INSUFFICIENT_CAPACITY"}
    env.update(popen.pop("env", {}))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "provisioning.cloud.simulated",
            "--port",
            str(port),
            "--region",
            region,
            "--cluster",
            cluster,
            "--kubernetes-version",
            kubernetes_version,
        ],
        cwd=ROOT,
        env=env,
        **popen,
    )
    try:
        wait_for_port(port, timeout=60, proc=proc)
    except BaseException:
        stop_simulated_aws(proc)
        raise
    return SimulatedAWS(f"http://127.0.0.1:{port}", region, cluster, kubernetes_version, proc)


def stop_simulated_aws(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class WorkerDied(BaseException):
    """Raised where a worker would have been killed: nothing in the code under test catches it."""


class CallCounter:
    """Counts the EC2 calls a boto3 client sends, by operation, through its event hooks (the
    calls still go to the simulated AWS). ``fail_after[operation] = n`` raises
    :class:`WorkerDied` once the n-th such call was served, as if the worker had been killed
    before it could read the answer."""

    def __init__(self, client) -> None:
        self.client = client
        self.calls: dict[str, int] = {}
        self.fail_after: dict[str, int] = {}
        client.meta.events.register("before-call.ec2.*", self._before)
        client.meta.events.register("after-call.ec2.*", self._after)

    def _before(self, model, **kwargs) -> None:
        self.calls[model.name] = self.calls.get(model.name, 0) + 1

    def _after(self, model, **kwargs) -> None:
        if self.calls[model.name] == self.fail_after.get(model.name):
            raise WorkerDied(f"the worker died after {model.name} #{self.calls[model.name]}")

    def close(self) -> None:
        self.client.meta.events.unregister("before-call.ec2.*", self._before)
        self.client.meta.events.unregister("after-call.ec2.*", self._after)


@pytest.fixture(scope="session", name="simulated_aws")
def simulated_aws_fixture():
    """A seeded simulated AWS for the whole session. Tests that exhaust offerings
    should restore capacity with ``set_insufficient_capacity([])`` when done."""
    sim = start_simulated_aws()
    try:
        yield sim
    finally:
        stop_simulated_aws(sim.process)
